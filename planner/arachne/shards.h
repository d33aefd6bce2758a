// Per-item result shards: how a long run over numbered items (gen-data's configurations, evaluate's
// configurations) survives kill -9. Each finished item is written as one text shard, atomically, into a
// shard directory that also holds the text of the options the items were made with; a rerun skips the
// shards it finds, and refuses a directory made with other options. An item's shard must depend only on
// (options, index), so the assembled result does not depend on the thread count or on interruptions.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace arachne::planner {

// The shard directory of an output path ("<out>.shards"), and the shard of one item ("<index>.json").
std::string shard_dir(const std::string& out_path);
std::string shard_path(const std::string& out_path, std::uint64_t index);

struct ShardedRun {
  std::string out;           // the output the shards belong to
  long items = 0;            // items [0, items)
  int threads = 1;
  std::string options_text;  // every option an item depends on; compared on resume
};

struct ShardProgress {
  long done = 0;     // items finished, resumed ones included
  long resumed = 0;  // found as shards at the start
  long total = 0;
  double elapsed_s = 0;
  long last = -1;    // the item just finished (-1: none yet)
};

// Makes every missing shard: make(i) on `threads` threads (work taken in index order), each result
// written atomically as shard i, progress(...) called after each (serialised). The first exception of
// make() stops the run and is rethrown (the finished shards stay). Returns the text of every shard in
// index order, and the final progress in *final (optional). Throws InputError("--out", ...) when the shard
// directory holds shards of other options.
std::vector<std::string> run_shards(const ShardedRun& run, const std::function<std::string(long)>& make,
                                    const std::function<void(const ShardProgress&)>& progress = {},
                                    ShardProgress* final = nullptr);

}  // namespace arachne::planner
