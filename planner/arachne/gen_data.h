// `arachne gen-data`: labels sampled configurations (planner/arachne/config_sampler.h) with the best
// templates an expensive search finds, and writes the dataset (planner/arachne/dataset.h).
//
// Steps: configurations [0, configs) of the stream `seed` are labelled on `threads` threads, each finished
// one saved as a JSON shard (atomic write); shards already present are skipped (resume after a kill; the
// shard directory also holds the options it was made with, and a rerun with other options is refused);
// when all are done the HDF5 file is assembled from the shards in index order and the shards are removed.
// A configuration's record depends only on (options, seed, index), so the file does not depend on the
// thread count or on interruptions.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "planner/arachne/config_sampler.h"
#include "planner/arachne/dataset.h"
#include "planner/common/shards.h"

namespace arachne::planner {

struct GenDataOptions {
  std::string out;  // the HDF5 file
  long configs = 0;
  std::uint64_t seed = 0;
  Split split = Split::Train;
  int threads = 1;
  ConfigSamplerOptions sampler;
  // Text that identifies every option a record depends on (the labeller's included): written beside the
  // shards and compared on resume.
  std::string options_text;
};

// Labels one configuration (thread-safe: called concurrently for different configurations).
using ConfigLabeler = std::function<ConfigRecord(const SampledConfig&)>;

using GenDataProgress = ShardProgress;  // planner/common/shards.h

struct GenDataStats {
  long labelled = 0;  // in this run
  long resumed = 0;
};

// Throws InputError("--out", ...) when the shard directory holds shards of other options. In a group of
// several ranks (every rank calls it alike) the configurations are split across the ranks (run_shards,
// planner/common/shards.h), rank 0 alone writes the dataset from every rank's records (the file a single
// process writes), then every rank removes its shards. The stats count this rank's configurations.
GenDataStats run_gen_data(const GenDataOptions& opt, const GpuCatalog& catalog, const DatasetSchema& schema,
                          const ConfigLabeler& label, const h5::RunInfo& info,
                          const std::function<void(const GenDataProgress&)>& progress = {},
                          WorkGroup& group = single_process());

}  // namespace arachne::planner
