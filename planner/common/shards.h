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

// The progress of a run, across every rank.
struct ShardProgress {
  long done = 0;     // items finished, resumed ones included
  long resumed = 0;  // found as shards at the start
  long total = 0;
  double elapsed_s = 0;
  long last = -1;                      // the item just finished (-1: none yet)
  const std::string* text = nullptr;   // its shard's text
};

// Makes every missing shard: make(i) on `threads` threads, items handed out in index order, each result
// written atomically as shard i, progress(...) called after each (on the calling thread). Returns the text
// of every shard in index order, and the final progress in *final (optional). Throws InputError("--out",
// ...) when the shard directory holds shards of other options.
//
// In a group of several ranks (the same call on every rank):
//   1. every rank checks that it was given rank 0's options, and opens its shard directory (rank 0 first,
//      so that on a shared file system the others find its options file and check it);
//   2. an item is done when any rank finds its shard (separate file systems: each host resumes its own);
//   3. rank 0 hands the items no rank holds out, in index order, one at a time to whichever thread of
//      whichever rank is free (rank 0's main thread dispatches, its `threads` threads make items too);
//      each rank writes the shards of its items where it runs and sends their texts to rank 0 with its
//      next request, so that rank 0 alone reports progress, over every rank's items;
//   4. rank 0 receives the text of every resumed item it does not hold itself (no shared file system is
//      needed) and returns every text in index order; the other ranks return an empty list.
// Which rank makes an item depends on timing; its text does not. Bad input found in step 1 on any rank is
// thrown on every rank (agree() in work_group.h). The first exception of make() stops the run (the
// finished shards stay): a single process rethrows it; in a group of several ranks it ends every rank
// (WorkGroup::fail), as the others cannot go on without its items.
std::vector<std::string> run_shards(const ShardedRun& run, const std::function<std::string(long)>& make,
                                    const std::function<void(const ShardProgress&)>& progress = {},
                                    ShardProgress* final = nullptr, WorkGroup& group = single_process());

}  // namespace arachne::planner
