#include "planner/arachne/gen_data.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "sim/io/atomic_file.h"
#include "sim/io/input_error.h"

namespace arachne::planner {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path options_file(const GenDataOptions& opt) { return fs::path(shard_dir(opt.out)) / "options.txt"; }

// Creates the shard directory with the options, or checks that an existing one was made with the same.
void open_shard_dir(const GenDataOptions& opt) {
  const fs::path dir = shard_dir(opt.out);
  fs::create_directories(dir);
  const fs::path file = options_file(opt);
  if (!fs::exists(file)) {
    write_text_atomically(file.string(), opt.options_text);
    return;
  }
  if (read_text(file) != opt.options_text)
    throw InputError("--out", "the shard directory " + dir.string() +
                                  " holds an interrupted run with other options; rerun with the same options, or remove it");
}

bool has_shard(const GenDataOptions& opt, long index) { return fs::exists(shard_path(opt.out, static_cast<std::uint64_t>(index))); }

// Labels configurations [0, configs) without a shard on `threads` threads (work taken in index order).
long label_missing(const GenDataOptions& opt, const GpuCatalog& catalog, const ConfigLabeler& label,
                   GenDataProgress& prog, const std::function<void(const GenDataProgress&)>& progress) {
  std::atomic<long> next{0};
  std::atomic<long> labelled{0};
  std::mutex mu;
  std::exception_ptr failure;
  const auto start = std::chrono::steady_clock::now();
  const auto work = [&] {
    for (long i = next++; i < opt.configs; i = next++) {
      {
        const std::lock_guard<std::mutex> lock(mu);
        if (failure) return;
      }
      if (has_shard(opt, i)) continue;
      try {
        const SampledConfig cfg = draw_config(opt.sampler, catalog, opt.split, opt.seed, static_cast<std::uint64_t>(i));
        const ConfigRecord rec = label(cfg);
        write_text_atomically(shard_path(opt.out, static_cast<std::uint64_t>(i)), record_to_json(rec));
        ++labelled;
        const std::lock_guard<std::mutex> lock(mu);
        ++prog.done;
        prog.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (progress) progress(prog);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = std::current_exception();
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < opt.threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  return labelled;
}

std::vector<ConfigRecord> read_shards(const GenDataOptions& opt) {
  std::vector<ConfigRecord> records;
  for (long i = 0; i < opt.configs; ++i)
    records.push_back(record_from_json(read_text(shard_path(opt.out, static_cast<std::uint64_t>(i)))));
  return records;
}

}  // namespace

GenDataStats run_gen_data(const GenDataOptions& opt, const GpuCatalog& catalog, const DatasetSchema& schema,
                          const ConfigLabeler& label, const h5::RunInfo& info,
                          const std::function<void(const GenDataProgress&)>& progress) {
  open_shard_dir(opt);
  GenDataProgress prog;
  prog.total = opt.configs;
  for (long i = 0; i < opt.configs; ++i) prog.resumed += has_shard(opt, i);
  prog.done = prog.resumed;
  GenDataStats stats;
  stats.resumed = prog.resumed;
  stats.labelled = label_missing(opt, catalog, label, prog, progress);
  write_dataset_h5(opt.out, schema, read_shards(opt), info);
  fs::remove_all(shard_dir(opt.out));
  return stats;
}

}  // namespace arachne::planner
