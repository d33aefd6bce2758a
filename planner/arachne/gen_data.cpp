#include "planner/arachne/gen_data.h"

#include <filesystem>

namespace arachne::planner {

GenDataStats run_gen_data(const GenDataOptions& opt, const GpuCatalog& catalog, const DatasetSchema& schema,
                          const ConfigLabeler& label, const h5::RunInfo& info,
                          const std::function<void(const GenDataProgress&)>& progress, WorkGroup& group) {
  const auto make = [&](long i) {
    return record_to_json(label(draw_config(opt.sampler, catalog, opt.split, opt.seed, static_cast<std::uint64_t>(i))));
  };
  ShardProgress final;
  const std::vector<std::string> shards =
      run_shards({opt.out, opt.configs, opt.threads, opt.options_text}, make, progress, &final, group);
  // Rank 0 writes the dataset; every rank removes its shards only once the dataset is written.
  std::exception_ptr write_error;
  if (group.rank() == 0) {
    try {
      std::vector<ConfigRecord> records;
      for (const std::string& s : shards) records.push_back(record_from_json(s));
      write_dataset_h5(opt.out, schema, records, info);
    } catch (...) {
      write_error = std::current_exception();
    }
  }
  agree(group, write_error);
  std::error_code ignored;  // on a shared file system another rank may be removing the same files
  std::filesystem::remove_all(shard_dir(opt.out), ignored);
  return {final.done - final.resumed, final.resumed};
}

}  // namespace arachne::planner
