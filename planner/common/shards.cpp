#include "planner/common/shards.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

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

// The items no rank holds, in index order.
std::vector<long> missing_items(const ShardedRun& run, const std::vector<std::string>& held) {
  std::vector<long> missing;
  for (long i = 0; i < run.items; ++i)
    if (holder(held, i) < 0) missing.push_back(i);
  return missing;
}

// Step 3. The items of one rank and its `threads` workers, shared with the rank's main thread, which
// alone talks to the other ranks. One condition variable wakes both sides.
class Workers {
 public:
  Workers(const ShardedRun& run, const std::function<std::string(long)>& make) : run_(run), make_(make) {
    running_ = std::max(1, run.threads);
    for (int t = 0; t < running_; ++t) pool_.emplace_back([this] { work(); });
  }
  ~Workers() {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      no_more_ = true;
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : pool_) t.join();
  }
  int threads() const { return static_cast<int>(pool_.size()); }

  // Items to make; `last`: no more will come.
  void add(const std::vector<long>& items, bool last) {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      queue_.insert(queue_.end(), items.begin(), items.end());
      no_more_ = no_more_ || last;
    }
    cv_.notify_all();
  }

  // Waits until an item is finished, or for `timeout`; without a timeout (zero) until an item is
  // finished or every worker has stopped. Returns the items finished since the last call (index, shard
  // text). Rethrows a worker's exception.
  std::vector<std::pair<long, std::string>> finished(std::chrono::milliseconds timeout, bool* all_stopped) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto ready = [&] { return !done_.empty() || failure_ || (running_ == 0 && timeout.count() == 0); };
    if (timeout.count() > 0) cv_.wait_for(lock, timeout, ready);
    else cv_.wait(lock, ready);
    if (failure_) std::rethrow_exception(failure_);
    *all_stopped = running_ == 0;
    return std::exchange(done_, {});
  }

 private:
  void work() {
    for (;;) {
      long i = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty() || no_more_ || failure_; });
        if (stop_ || failure_ || queue_.empty()) break;
        i = queue_.front();
        queue_.pop_front();
      }
      try {
        std::string text = make_(i);
        write_text_atomically(path_of(run_, i), text);
        const std::lock_guard<std::mutex> lock(mu_);
        done_.emplace_back(i, std::move(text));
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mu_);
        if (!failure_) failure_ = std::current_exception();
      }
      cv_.notify_all();
    }
    {
      const std::lock_guard<std::mutex> lock(mu_);
      --running_;
    }
    cv_.notify_all();
  }

  const ShardedRun& run_;
  const std::function<std::string(long)>& make_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<long> queue_;
  bool no_more_ = false, stop_ = false;
  int running_ = 0;
  std::vector<std::pair<long, std::string>> done_;
  std::exception_ptr failure_;
  std::vector<std::thread> pool_;
};

// A request to rank 0: how many items the rank wants, then the items it finished, each as
// "<index> <bytes>\n<text>". The reply: the indices handed out, space-separated (fewer than wanted: no
// more will come).
std::string request_text(long want, const std::vector<std::pair<long, std::string>>& finished) {
  std::string m = std::to_string(want) + "\n";
  for (const auto& [i, text] : finished) m += std::to_string(i) + " " + std::to_string(text.size()) + "\n" + text;
  return m;
}

long parse_request(const std::string& message, std::vector<std::pair<long, std::string>>* finished) {
  std::istringstream in(message);
  long want = 0, i = 0;
  std::size_t bytes = 0;
  in >> want;
  in.get();
  while (in >> i >> bytes && in.get() == '\n') {
    std::string text(bytes, '\0');
    in.read(text.data(), static_cast<std::streamsize>(bytes));
    finished->emplace_back(i, std::move(text));
  }
  return want;
}

std::vector<long> parse_indices(const std::string& message) {
  std::istringstream in(message);
  std::vector<long> v;
  for (long i = 0; in >> i;) v.push_back(i);
  return v;
}

// Rank 0's side of step 3: hands out `missing` and collects every text, reporting progress.
std::map<long, std::string> dispatch(Workers& own, const std::vector<long>& missing, ShardProgress& prog,
                                     const std::function<void(const ShardProgress&)>& progress, WorkGroup& group) {
  const auto start = std::chrono::steady_clock::now();
  std::size_t next = 0;
  const auto hand_out = [&](long want) {
    std::vector<long> items;
    for (; want > 0 && next < missing.size(); --want) items.push_back(missing[next++]);
    return items;
  };
  std::map<long, std::string> texts;
  const auto record = [&](long i, std::string text) {
    const std::string& t = texts[i] = std::move(text);
    ++prog.done;
    prog.last = i;
    prog.text = &t;
    prog.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (progress) progress(prog);
  };
  const std::vector<long> first = hand_out(own.threads());
  own.add(first, first.size() < static_cast<std::size_t>(own.threads()));
  std::vector<bool> told_no_more(static_cast<std::size_t>(group.size()), false);
  told_no_more[0] = true;
  const auto everyone_told = [&] {
    return std::all_of(told_no_more.begin(), told_no_more.end(), [](bool b) { return b; });
  };
  bool own_stopped = false;
  while (texts.size() < missing.size() || !everyone_told()) {
    // Other ranks are polled every millisecond; own workers wake this thread when they finish an item.
    for (auto& [i, text] : own.finished(std::chrono::milliseconds(group.size() > 1 ? 1 : 0), &own_stopped)) {
      record(i, std::move(text));
      const std::vector<long> more = hand_out(1);
      own.add(more, more.empty());
    }
    if (group.size() == 1) continue;
    for (int r = group.poll(); r >= 0; r = group.poll()) {
      std::vector<std::pair<long, std::string>> finished;
      const long want = parse_request(group.receive(r), &finished);
      for (auto& [i, text] : finished) record(i, std::move(text));
      const std::vector<long> items = hand_out(want);
      if (static_cast<long>(items.size()) < want || want == 0) told_no_more[static_cast<std::size_t>(r)] = true;
      std::string reply;
      for (long i : items) reply += std::to_string(i) + " ";
      group.send(r, reply);
    }
  }
  return texts;
}

// The other ranks' side of step 3: asks rank 0 for items until it has no more, sending each finished
// item's text with the next request.
void work_for_rank0(Workers& own, WorkGroup& group) {
  const auto ask = [&](long want, const std::vector<std::pair<long, std::string>>& finished) {
    group.send(0, request_text(want, finished));
    const std::vector<long> items = parse_indices(group.receive(0));
    const bool last = static_cast<long>(items.size()) < want || want == 0;
    own.add(items, last);
    return last;
  };
  bool no_more = ask(own.threads(), {});
  for (;;) {
    bool stopped = false;
    const std::vector<std::pair<long, std::string>> finished = own.finished(std::chrono::milliseconds(0), &stopped);
    if (!finished.empty()) {
      const bool last = ask(no_more ? 0 : static_cast<long>(finished.size()), finished);
      no_more = no_more || last;
    } else if (stopped) {
      return;
    }
  }
}

// Step 4. A rank other than 0 sends the resumed items it holds first among the ranks where rank 0 holds
// none, each as "<index> <bytes>\n<text>"; rank 0 reads the others from its own shards.
std::string parcel_for_rank0(const ShardedRun& run, const std::vector<std::string>& held, int me) {
  std::vector<std::pair<long, std::string>> items;
  for (long i = 0; i < run.items; ++i)
    if (holder(held, i) == me && held[0][static_cast<std::size_t>(i)] == '0')
      items.emplace_back(i, read_text(path_of(run, i)));
  return request_text(0, items);
}

std::vector<std::string> collect(const ShardedRun& run, const std::vector<std::string>& held,
                                 std::map<long, std::string> made, WorkGroup& group) {
  const int me = group.rank();
  const std::vector<std::string> parcels = group.gather(me == 0 ? "" : parcel_for_rank0(run, held, me));
  if (me != 0) return {};
  for (std::size_t r = 1; r < parcels.size(); ++r) {
    std::vector<std::pair<long, std::string>> items;
    parse_request(parcels[r], &items);
    for (auto& [i, text] : items) made[i] = std::move(text);
  }
  std::vector<std::string> texts(static_cast<std::size_t>(run.items));
  for (long i = 0; i < run.items; ++i) {
    const auto it = made.find(i);
    texts[static_cast<std::size_t>(i)] = it != made.end() ? std::move(it->second) : read_text(path_of(run, i));
  }
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
  const std::vector<long> missing = missing_items(run, held);
  ShardProgress prog;
  prog.total = run.items;
  prog.resumed = prog.done = run.items - static_cast<long>(missing.size());
  std::map<long, std::string> made;
  {
    Workers own(run, make);
    try {
      if (group.rank() == 0) made = dispatch(own, missing, prog, progress, group);
      else work_for_rank0(own, group);
    } catch (...) {
      // A rank of several ends every rank at once (its workers' items in flight are lost); a single
      // process rethrows, and the workers finish their items in flight before it unwinds.
      group.fail(std::current_exception());
    }
  }
  prog.text = nullptr;
  if (final != nullptr) *final = prog;
  return collect(run, held, std::move(made), group);
}

}  // namespace arachne::planner
