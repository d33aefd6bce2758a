// Per-item result shards: how a long run over numbered items (gen-data's configurations, evaluate's
// configurations, an experiment's cells) survives kill -9, and how it is split across the ranks of a
// WorkGroup (planner/common/work_group.h). Each finished item is written as one text shard, atomically,
// into a shard directory that also holds the text of the options the items were made with; a rerun skips
// the shards it finds, and refuses a directory made with other options. An item's shard must depend only
// on (options, index), so the assembled result does not depend on the thread or rank count or on
// interruptions.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/common/work_group.h"

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

// The progress of one rank: its own items, and those found done at the start (by any rank).
struct ShardProgress {
  long done = 0;     // items finished, resumed ones included
  long resumed = 0;  // found as shards at the start
  long total = 0;    // resumed + the items dealt to this rank (a single process: every item)
  double elapsed_s = 0;
  long last = -1;    // the item just finished (-1: none yet)
};

// Makes every missing shard: make(i) on `threads` threads (work taken in index order), each result
// written atomically as shard i, progress(...) called after each (serialised). Returns the text of every
// shard in index order, and the final progress in *final (optional). Throws InputError("--out", ...) when
// the shard directory holds shards of other options.
//
// In a group of several ranks (the same call on every rank):
//   1. every rank checks that it was given rank 0's options, and opens its shard directory (rank 0 first,
//      so that on a shared file system the others find its options file and check it);
//   2. an item is done when any rank finds its shard (separate file systems: each host resumes its own);
//      the items no rank holds are dealt round-robin, in index order, to the ranks;
//   3. each rank makes its items as above (its shards are written where it runs);
//   4. rank 0 receives the text of every item it does not hold itself (no shared file system needed) and
//      returns every text in index order; the other ranks return an empty list.
// Bad input found in step 1 on any rank is thrown on every rank (agree() in work_group.h). The first
// exception of make() stops the run (the finished shards stay): a single process rethrows it; in a group
// of several ranks it ends every rank (WorkGroup::fail), as the others cannot go on without its items.
std::vector<std::string> run_shards(const ShardedRun& run, const std::function<std::string(long)>& make,
                                    const std::function<void(const ShardProgress&)>& progress = {},
                                    ShardProgress* final = nullptr, WorkGroup& group = single_process());

}  // namespace arachne::planner
