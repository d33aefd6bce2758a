#include "planner/common/shards.h"

#include <algorithm>
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

// Step 1 of run_shards: the same options on every rank, then the shard directories, rank 0's first.
void open_shard_dirs(const ShardedRun& run, WorkGroup& group) {
  std::exception_ptr error;
  if (group.all_gather(run.options_text).front() != run.options_text)
    error = std::make_exception_ptr(InputError(
        "rank " + std::to_string(group.rank()),
        "its options differ from rank 0's (another input file, input or policy weights file on this host?)"));
  agree(group, error);
  for (const bool rank0_turn : {true, false}) {
    error = nullptr;
    if ((group.rank() == 0) == rank0_turn) {
      try {
        open_shard_dir(run);
      } catch (...) {
        error = std::current_exception();
      }
    }
    agree(group, error);
  }
}

std::string path_of(const ShardedRun& run, long i) { return shard_path(run.out, static_cast<std::uint64_t>(i)); }

// '1' for each item whose shard this rank holds, else '0'.
std::string held_items(const ShardedRun& run) {
  std::string held(static_cast<std::size_t>(run.items), '0');
  for (long i = 0; i < run.items; ++i)
    if (fs::exists(path_of(run, i))) held[static_cast<std::size_t>(i)] = '1';
  return held;
}

// The lowest rank that holds item i, or -1.
int holder(const std::vector<std::string>& held, long i) {
  for (std::size_t r = 0; r < held.size(); ++r)
    if (held[r][static_cast<std::size_t>(i)] == '1') return static_cast<int>(r);
  return -1;
}

// Step 2: the items no rank holds, dealt round-robin in index order; this rank's share.
std::vector<long> dealt_items(const ShardedRun& run, const std::vector<std::string>& held, const WorkGroup& group) {
  std::vector<long> mine;
  long missing = 0;
  for (long i = 0; i < run.items; ++i)
    if (holder(held, i) < 0 && missing++ % group.size() == group.rank()) mine.push_back(i);
  return mine;
}

// Step 3: make(i) for each item of `items` on run.threads threads.
void make_items(const ShardedRun& run, const std::vector<long>& items, const std::function<std::string(long)>& make,
                ShardProgress& prog, const std::function<void(const ShardProgress&)>& progress) {
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::exception_ptr failure;
  const auto start = std::chrono::steady_clock::now();
  const auto work = [&] {
    for (std::size_t k = next++; k < items.size(); k = next++) {
      {
        const std::lock_guard<std::mutex> lock(mu);
        if (failure) return;
      }
      const long i = items[k];
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

// Step 4. A rank other than 0 sends the items it made, and those it holds first among the ranks where rank 0
// holds none, each as "<index> <bytes>\n<text>"; rank 0 reads the others from its own shards.
std::string parcel_for_rank0(const ShardedRun& run, const std::vector<std::string>& held, const std::vector<long>& made,
                             int me) {
  std::string parcel;
  for (long i = 0; i < run.items; ++i) {
    const bool first_holder = holder(held, i) == me && held[0][static_cast<std::size_t>(i)] == '0';
    if (!first_holder && !std::binary_search(made.begin(), made.end(), i)) continue;
    const std::string text = read_text(path_of(run, i));
    parcel += std::to_string(i) + " " + std::to_string(text.size()) + "\n" + text;
  }
  return parcel;
}

std::vector<std::string> collect(const ShardedRun& run, const std::vector<std::string>& held,
                                 const std::vector<long>& made, WorkGroup& group) {
  const int me = group.rank();
  const std::vector<std::string> parcels = group.gather(me == 0 ? "" : parcel_for_rank0(run, held, made, me));
  if (me != 0) return {};
  const auto n = static_cast<std::size_t>(run.items);
  std::vector<std::string> texts(n);
  std::vector<bool> received(n, false);
  for (std::size_t r = 1; r < parcels.size(); ++r) {
    std::istringstream in(parcels[r]);
    std::size_t i = 0, bytes = 0;
    while (in >> i >> bytes && in.get() == '\n') {
      if (i >= n) throw std::runtime_error("rank " + std::to_string(r) + " sent item " + std::to_string(i) + " of " + std::to_string(n));
      texts[i].resize(bytes);
      in.read(texts[i].data(), static_cast<std::streamsize>(bytes));
      received[i] = true;
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    if (!received[i]) texts[i] = read_text(path_of(run, static_cast<long>(i)));
  return texts;
}

}  // namespace

std::string shard_dir(const std::string& out_path) { return out_path + ".shards"; }

std::string shard_path(const std::string& out_path, std::uint64_t index) {
  return (fs::path(shard_dir(out_path)) / (std::to_string(index) + ".json")).string();
}

std::vector<std::string> run_shards(const ShardedRun& run, const std::function<std::string(long)>& make,
                                    const std::function<void(const ShardProgress&)>& progress, ShardProgress* final,
                                    WorkGroup& group) {
  open_shard_dirs(run, group);
  const std::vector<std::string> held = group.all_gather(held_items(run));
  const std::vector<long> mine = dealt_items(run, held, group);
  ShardProgress prog;
  for (long i = 0; i < run.items; ++i) prog.resumed += holder(held, i) >= 0;
  prog.done = prog.resumed;
  prog.total = prog.resumed + static_cast<long>(mine.size());
  try {
    make_items(run, mine, make, prog, progress);
  } catch (...) {
    group.fail(std::current_exception());
  }
  if (final != nullptr) *final = prog;
  return collect(run, held, mine, group);
}

}  // namespace arachne::planner
