#include "planner/arachne/shards.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "sim/io/atomic_file.h"
#include "sim/io/input_error.h"

namespace arachne::planner {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return s.str();
}

// Creates the shard directory with the options, or checks that an existing one was made with the same.
void open_shard_dir(const ShardedRun& run) {
  const fs::path dir = shard_dir(run.out);
  fs::create_directories(dir);
  const fs::path file = dir / "options.txt";
  if (!fs::exists(file)) {
    write_text_atomically(file.string(), run.options_text);
    return;
  }
  if (read_text(file) != run.options_text)
    throw InputError("--out", "the shard directory " + dir.string() +
                                  " holds a run with other options; rerun with the same options, or remove it");
}

std::string path_of(const ShardedRun& run, long i) { return shard_path(run.out, static_cast<std::uint64_t>(i)); }

void make_missing(const ShardedRun& run, const std::function<std::string(long)>& make, ShardProgress& prog,
                  const std::function<void(const ShardProgress&)>& progress) {
  std::atomic<long> next{0};
  std::mutex mu;
  std::exception_ptr failure;
  const auto start = std::chrono::steady_clock::now();
  const auto work = [&] {
    for (long i = next++; i < run.items; i = next++) {
      {
        const std::lock_guard<std::mutex> lock(mu);
        if (failure) return;
      }
      if (fs::exists(path_of(run, i))) continue;
      try {
        write_text_atomically(path_of(run, i), make(i));
        const std::lock_guard<std::mutex> lock(mu);
        ++prog.done;
        prog.last = i;
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
  for (int t = 1; t < run.threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

std::string shard_dir(const std::string& out_path) { return out_path + ".shards"; }

std::string shard_path(const std::string& out_path, std::uint64_t index) {
  return (fs::path(shard_dir(out_path)) / (std::to_string(index) + ".json")).string();
}

std::vector<std::string> run_shards(const ShardedRun& run, const std::function<std::string(long)>& make,
                                    const std::function<void(const ShardProgress&)>& progress, ShardProgress* final) {
  open_shard_dir(run);
  ShardProgress prog;
  prog.total = run.items;
  for (long i = 0; i < run.items; ++i) prog.resumed += fs::exists(path_of(run, i));
  prog.done = prog.resumed;
  make_missing(run, make, prog, progress);
  if (final != nullptr) *final = prog;
  std::vector<std::string> texts;
  for (long i = 0; i < run.items; ++i) texts.push_back(read_text(path_of(run, i)));
  return texts;
}

}  // namespace arachne::planner
