// The learned planner's dataset: one record per sampled configuration (planner/arachne/config_sampler.h),
// holding the policy's inputs (features), its targets (the best templates an expensive search found, as
// token sequences) and every candidate that search priced, with its estimated and simulated time.
//
// On disk (DESIGN.md "HDF5", the gen-data file):
//   root attributes   program_version, command_line, seed, config_yaml (the generation options)
//   /vocabulary       id, token (the token names by id the label sequences use)
//   /configs          config, family, model, global_batch, gpus, cluster_yaml, search (how labels were found),
//                     search_complete, best_simulated_s, oracle_s (NaN where the oracle did not complete)
//   /groups           config, slot (GPU-type index in token order), one column per group feature
//   /globals          config, one column per global feature
//   /labels           config, rank (0 = best), template (text form), tokens (ids separated by spaces),
//                     simulated_s, estimated_s
//   /candidates       config, template, estimated_s, simulated_s (NaN: not simulated), fits
// Rows are ordered by config, then slot / rank / candidate order. Every table is written in batches.
//
// While generating, each finished configuration is a JSON shard <out>.shards/<index>.json written
// atomically; a rerun skips the shards it finds, and the HDF5 file is assembled from the shards in index
// order, so an interrupted run resumes and ends with the same file as an uninterrupted one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "planner/common/shards.h"  // shard_dir, shard_path
#include "sim/io/hdf5_writer.h"

namespace arachne::planner {

struct LabelRecord {
  std::string template_text;
  std::vector<int> tokens;
  double simulated_s = 0;
  double estimated_s = 0;
};

struct CandidateRecord {
  std::string template_text;
  double estimated_s = 0;
  double simulated_s = 0;  // NaN when not simulated
  bool fits = true;
};

struct ConfigRecord {
  std::uint64_t index = 0;
  std::string family;
  std::string model;
  long global_batch = 0;
  int gpus = 0;
  std::string cluster_yaml;
  std::string search;            // e.g. "templates+estimator, top 8 simulated" or "oracle"
  bool search_complete = false;  // the template enumeration covered its whole (restricted) space, cap not hit
  double oracle_s = 0;           // NaN when the oracle was not run or did not complete
  std::vector<std::vector<double>> group_features;  // [slot][feature]
  std::vector<double> global_features;
  std::vector<LabelRecord> labels;  // best first
  std::vector<CandidateRecord> candidates;
};

struct DatasetSchema {
  std::vector<std::string> vocabulary;  // token names by id
  std::vector<std::string> group_features;
  std::vector<std::string> global_features;
};

// JSON shards (exact round trip of every double).
std::string record_to_json(const ConfigRecord& r);
ConfigRecord record_from_json(const std::string& text);  // throws std::runtime_error

// Writes the dataset atomically (temporary name, then rename).
void write_dataset_h5(const std::string& path, const DatasetSchema& schema, const std::vector<ConfigRecord>& records,
                      const h5::RunInfo& info);
// Reads a dataset written by write_dataset_h5 (the schema: /vocabulary, and the /groups and /globals
// columns after `config` and `slot`). Throws std::runtime_error; InputError naming the file and the row for
// a token list that is not ids of the vocabulary.
std::vector<ConfigRecord> read_dataset_h5(const std::string& path, DatasetSchema* schema = nullptr);

}  // namespace arachne::planner
