// The profiler's view of one pipeline class during completion (planner/template/completion.h): how a stage's
// micro-batch splits over its TP groups, the exact min-max layer partition under the memory limit, and an
// analytic 1F1B time for n samples run as micro-batches of b. These times only steer completion (batch split,
// micro-batch sizes, which candidates to price); the caller's pricer judges the plans.
//
// Times are the profiler's (planner/common/profile.h: the simulator's per-layer kernel and intra-node TP
// costs); memory is the simulator's own per-stage formula (sim/model/memory.h) with the stage's EP experts.
#pragma once
#include <array>
#include <limits>
#include <cstdint>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "planner/common/partition.h"
#include "planner/common/profile.h"
#include "sim/model/model.h"

namespace arachne::planner {

// Plan-wide memory savers, cheapest first (memory_levels()).
struct MemoryLevel {
  Recompute recompute = Recompute::None;
  bool zero1 = false;
};
// none, none+ZeRO-1, selective, selective+ZeRO-1, full, full+ZeRO-1 (ZeRO-1 levels only when `zero1_helps`).
std::vector<MemoryLevel> memory_levels(bool zero1_helps);

// `total` in integers proportional to `weights` (largest remainder: split_proportional), then every part
// raised to at least 1 by taking from the largest part (ties: the lower index). Needs total >= parts.
// (split_proportional's own minimum hands the minimum out first and splits only the rest in proportion,
// which flattens the split when the total is a small multiple of the parts.)
std::vector<long> proportional_split(long total, const std::vector<double>& weights);

struct GroupCostSpec {
  std::string gpu_type;
  double local_experts = -1;  // routed experts per MoE layer this group's GPUs hold (sim/model/memory.h); -1: all
};
struct StageCostSpec {
  int tp = 1;
  int ep = 1;
  std::vector<GroupCostSpec> groups;
  int zero1_dp = 1;  // a lower bound on the groups that hold the stage's first layer (ZeRO-1 shards)
};

// Hash of a sequence of integers or pointers (the caches below: looked up millions of times a plan).
struct SequenceHash {
  template <class T>
  std::size_t operator()(const std::vector<T>& v) const {
    std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ v.size();
    for (const T& x : v) {
      std::uint64_t k;
      if constexpr (std::is_pointer_v<T>) k = reinterpret_cast<std::uintptr_t>(x);
      else k = static_cast<std::uint64_t>(static_cast<std::int64_t>(x));
      h = (h ^ k) * 0xff51afd7ed558ccdULL;
      h ^= h >> 32;
    }
    return static_cast<std::size_t>(h);
  }
};

// Per-layer times of one profile key as prefix sums, so a stage's time is O(1).
class LayerTimes {
 public:
  explicit LayerTimes(const Profiler& profiler) : profiler_(profiler) {}
  // Seconds of one micro-batch's forward + backward (compute and TP) over layers [begin, end), with the
  // embedding when begin == 0 and the head when end == layers (Profiler::stage_time_s).
  double stage_s(const ProfileKey& key, int begin, int end);
  // The same without the embedding and the head.
  double layers_s(const ProfileKey& key, int begin, int end);
  const Profiler& profiler() const { return profiler_; }

  struct Table {
    std::vector<double> prefix;  // prefix[l] = layers [0, l)
    double embedding = 0, head = 0;
    double stage_s(int begin, int end) const {
      const bool last = end + 1 == static_cast<int>(prefix.size());
      return prefix[end] - prefix[begin] + (begin == 0 ? embedding : 0) + (last ? head : 0);
    }
  };
  // The key's table; the reference stays valid for the LayerTimes' lifetime.
  const Table& table(const ProfileKey& key);
  // The same table by a small integer for the GPU type (type_id) and integer samples, without sequence
  // parallelism: a lookup without strings, for completion's inner loops.
  int type_id(const std::string& gpu_type);
  const Table& table(int type, int tp, int samples, Recompute recompute);
  // A stage's TP groups (GPU types by type_id, in group order, TP width tp) at micro-batch b: each group's
  // samples, summing to b (proportional to the groups' speeds over the whole model, then single-sample moves
  // from the slowest group while the slowest time falls), and the distinct tables of the groups at their
  // samples (ordered by address: every use takes the slowest or the fastest). The reference stays valid.
  struct StageGroups {
    std::vector<int> shares;
    std::vector<const Table*> tables;
  };
  // A stage's group types (type_id, in group order) as a small integer, for stage_groups.
  int type_set(const std::vector<int>& types);
  const StageGroups& stage_groups(int type_set, int tp, int b, Recompute recompute);
  // The stage sum and the slowest stage of the min-max layer partition (`ties` among equal ones) of a
  // pipeline whose stage j has the groups `stages[j]` (of stage_groups, at one micro-batch size), without
  // memory limits: what every class of those stages would work out, worked out once.
  std::pair<double, double> unlimited_stages(const std::vector<const StageGroups*>& stages, PartitionTies ties);

 private:
  const Profiler& profiler_;
  std::map<ProfileKey, Table> tables_;
  std::vector<std::string> types_;
  std::unordered_map<std::uint64_t, const Table*> by_id_;  // (type, tp, samples, recompute) -> tables_ entry
  std::vector<int> group_shares(const std::vector<int>& types, int tp, int b, Recompute recompute);  // StageGroups::shares
  std::unordered_map<std::vector<int>, int, SequenceHash> type_sets_;  // types -> type_set
  std::vector<std::vector<int>> type_set_types_;                       // type_set -> types
  std::unordered_map<std::uint64_t, StageGroups> stage_groups_;        // by (type_set, tp, b, recompute)
  std::array<std::unordered_map<std::vector<const StageGroups*>, std::pair<double, double>, SequenceHash>, 2> unlimited_;  // by ties
  PartitionScratch partition_scratch_;  // unlimited_stages' tables
};

// Per-GPU bytes of a stage's layer range (sim/model/memory.h stage_memory), for every pipeline class,
// memory level and template of one cluster and model. Layers differ in memory only by kind (memory.cpp reads
// the layer index through is_moe_layer); the memory is affine in the micro-batches in flight (activations =
// in_flight x one micro-batch's + the recompute working set) and, with the weights, gradients, optimizer
// state and framework overhead fixed, every other term (activations, working set, communication buffers)
// is proportional to the samples per micro-batch. So three evaluations (0 samples; 1 sample with 0 and 1 in
// flight) per kind count and ends serve every range and micro-batch alike (equal to stage_memory up to
// floating-point rounding). The GPU type does not enter the formula (StageMemoryInput): groups of every type
// share the lines, and each compares them with its own usable bytes.
class StageMemoryLines {
 public:
  explicit StageMemoryLines(const Profiler& profiler);
  struct Query {
    int tp = 1;
    int samples = 1;
    double local_experts = -1;
    int ep = 1;
    int zero1_dp = 1;
    MemoryLevel level;
  };
  // Bytes of layers [begin, end) with `in_flight` micro-batches in flight.
  double bytes(const Query& q, int begin, int end, long in_flight);

  // The lines of one query (any samples) by the layer range's kind counts and ends, each filled when first
  // asked for: one lookup of the query serves every range (PipelineCosts::max_ends).
  // A line holds stage_memory's breakdown terms with the optimizer state unsharded, so one line serves every
  // ZeRO-1 degree: bytes() shards it and sums the terms in stage_memory's order (the same bytes, bit for bit).
  struct Line {
    double weights_and_gradients = 0;  // NaN: not filled yet
    double optimizer = 0;              // unsharded
    double other_without_samples = 0;  // overhead and buffers, no samples
    double other = 0;                  // overhead and buffers, one sample
    double idle_activations = 0;       // one sample, no micro-batch in flight (the recompute working set)
    double one_activations = 0;        // one sample, one micro-batch in flight
  };
  struct Lines {
    std::vector<Line> at;
  };
  // The query's lines; the reference stays valid for the StageMemoryLines' lifetime.
  Lines& lines(const Query& q);
  // bytes(q, begin, end, in_flight) through the query's lines.
  double bytes(Lines& lines, const Query& q, int begin, int end, long in_flight);

  // One id per distinct stage at a memory level: stages of one id (the same TP and EP widths, ZeRO-1
  // shards, and groups' GPU types and experts in order) have the same groups' shares, memory queries and
  // usable bytes, hence the same memory test on every layer range. `type_ids`: the groups' GPU types, one
  // integer per type (LayerTimes::type_id: the same for every stage asked about). Ids count from 0.
  int stage_memory_id(const StageCostSpec& stage, const std::vector<int>& type_ids, MemoryLevel level);
  // The largest fitting ends of one stage (PipelineCosts::max_ends) by cache key (stage memory id, micro-batch
  // and micro-batches in flight), shared by every pipeline class: nullptr where not worked out yet. The
  // references stay valid for the StageMemoryLines' lifetime.
  const std::vector<int>* max_ends(std::uint64_t key) const {
    const auto it = max_ends_.find(key);
    return it == max_ends_.end() ? nullptr : &it->second;
  }
  const std::vector<int>& keep_max_ends(std::uint64_t key, std::vector<int> ends) {
    return max_ends_.emplace(key, std::move(ends)).first->second;
  }

 private:
  struct QueryHash {
    std::size_t operator()(const Query& q) const;
  };
  struct QueryEqual {
    bool operator()(const Query& a, const Query& b) const;
  };
  const Profiler& profiler_;
  std::vector<int> moe_prefix_;  // MoE layers in [0, l)
  // By the query with samples = 0 and zero1_dp = 1 (bytes() shards the optimizer state); node-based so that
  // references stay valid.
  std::unordered_map<Query, Lines, QueryHash, QueryEqual> lines_;
  std::unordered_map<std::vector<std::int64_t>, int, SequenceHash> stage_ids_;  // by the stage's fields as integers
  std::vector<std::int64_t> stage_key_scratch_;
  std::unordered_map<std::uint64_t, std::vector<int>> max_ends_;
};

// One stage for group_work: its TP width and its groups' GPU types (LayerTimes::type_id).
struct FloorStage {
  int tp = 1;
  std::vector<int> types;
};
// The work bound of `samples` samples on every TP group of `stages` (a pipeline's, in order): per layer its
// fastest group on any stage, plus the fastest embedding of the first stage's groups and the fastest head of
// the last stage's. A layer's time grows with its samples and with recompute
// (Completion.LayerTimesGrowWithSamplesAndRecompute), so at this recompute level or more: with one sample
// (each group of a stage takes at least one of any micro-batch) no micro-batch through any layer partition
// of these stages takes less; with s samples, no partition's stage sum where one group of each stage takes
// at least s (a stage lasts as long as its slowest group).
double group_work(LayerTimes& times, const std::vector<FloorStage>& stages, Recompute recompute, int samples);

class PipelineCosts {
 public:
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  // `ties`: which of equal min-max partitions partition() keeps (partition.h PartitionTies).
  PipelineCosts(LayerTimes& times, StageMemoryLines& memory, std::vector<StageCostSpec> stages, MemoryLevel level,
                PartitionTies ties = PartitionTies::EarliestCut);
  // The same class at `level` (and ties), of the same recompute as `same_times` with ZeRO-1 on (a limit that rules out no
  // layer range `same_times` admits: ZeRO-1 only shards the optimizer state). It shares what does not depend
  // on memory (group shares, layer tables, work bounds, unlimited partitions) and the partitions either
  // works out where the memory limit ruled out no range the min-max search looked at: the search, seeing the
  // same costs, returns the same bounds here. So its answers are those of a class built afresh.
  PipelineCosts(const PipelineCosts& same_times, MemoryLevel level);

  int depth() const { return static_cast<int>(stages_.size()); }
  // The smallest micro-batch: every TP group of every stage takes at least one sample.
  int min_micro_batch() const { return min_micro_batch_; }
  // Samples of each group of stage j for micro-batch b (b >= min_micro_batch), summing to b: proportional to
  // the groups' speeds, then single-sample moves from the slowest group while the slowest time falls.
  const std::vector<int>& shares(int stage, int b);
  // Layer bounds (depth + 1) of the min-max partition for micro-batch b run m times (1F1B keeps
  // min(depth - j, m) micro-batches in flight on stage j); empty when no partition fits in memory.
  const std::vector<int>& partition(int b, long m);
  // Seconds per micro-batch of each stage under that partition (empty when it does not fit).
  std::vector<double> stage_times(int b, long m);
  // 1F1B with m = n / b micro-batches: the stage sum (fill and drain) plus (m - 1) times the slowest stage.
  // Infinite when b does not divide n, b < min_micro_batch or nothing fits.
  double time(long n, int b);
  struct Choice {
    double time_s = kInf;
    int micro_batch = 0;  // 0: none fits
  };
  // The best micro-batch size for n samples among the divisors of n (ties: the smaller).
  Choice best(long n) {
    if (n >= 0 && n < static_cast<long>(best_.size()) && best_[n].micro_batch >= 0) {  // asked before
      if (!memory_decided_) memory_decided_ = decided(n);
      return best_[n];
    }
    return best_afresh(n);
  }
  // A lower bound on best(n).time_s from the per-layer times alone (no partition): best()'s own bound,
  // the work bound W(b) (1 + (n / b - 1) / depth), at its lowest over the divisors b that may fit.
  double best_lower_bound(long n) {
    if (n >= 1 && n < static_cast<long>(best_.size()) && best_[n].micro_batch >= 0) return best_[n].time_s;
    if (n >= 1 && n < static_cast<long>(best_lower_bound_.size()) && !std::isnan(best_lower_bound_[n])) return best_lower_bound_[n];
    return best_lower_bound_afresh(n);
  }
  // A lower bound on best(n).time_s for every n: group_work of the class's stages with one sample, so no
  // split of the batch that gives this class a sample runs faster.
  double time_floor();
  // A lower bound on time(n, b): the work bound W(b) plus n / b - 1 times the slowest stage of the min-max
  // partition without the memory limit.
  double time_lower_bound(long n, int b);
  // The most samples n, at most max_n, whose best time could be below t: best(n).time_s < t only where n is
  // at most this (0: for no n). From lower bounds on time(n, b) for the sizes b that may fit with one
  // micro-batch in flight (every count keeps at least one; memory grows with b): with one TP group per stage
  // time_lower_bound(n, b); with one stage of up to kFilledGroups groups, n / b times the least slowest group
  // over every split of b into them; otherwise, per block of sizes whose stages' largest groups take the same
  // least share, the stage sum's group_work and the slowest stage's min-max partition of each stage's
  // fastest type at that share.
  long most_samples_below(double t, long max_n);
  // Steady-state samples per second: the best b / slowest-stage time over power-of-two b up to max_b (the
  // smallest micro-batch where none of them fits; 0 where that does not fit either).
  double speed(long max_b);
  // Whether speed(max_b) > 0, from the sizes speed() tries up to the first that fits.
  bool runs(long max_b);
  // Whether the memory limit decided one of the choices best() returned since construction or the last
  // forget_memory_decided(): a micro-batch size it ruled out had a lower bound below the chosen time, or a
  // range it ruled out was faster than the chosen size's slowest stage. Where it never did, the same class
  // with more recompute (slower layers, a looser limit) is taken to choose no faster (not a proof: the stage
  // sums of different partitions differ; tested over random classes in completion_test).
  bool memory_decided() const { return memory_decided_; }
  // Starts memory_decided() afresh (the answers of best() stay cached): a class kept for several templates
  // reports on each template's choices alone.
  void forget_memory_decided() { memory_decided_ = false; }
  // Frees the partition search's tables, which a class kept while idle need not hold (the per-stage memory
  // tables, max_ends, are StageMemoryLines', shared by every class).
  void release_memory_tables() { partition_scratch_ = PartitionScratch{}; }
  const std::vector<StageCostSpec>& stage_specs() const { return stages_; }
  PartitionTies ties() const { return ties_; }

 private:
  LayerTimes& times_;
  StageMemoryLines& memory_;
  std::vector<StageCostSpec> stages_;
  MemoryLevel level_;
  PartitionTies ties_;
  int layers_ = 0;
  int min_micro_batch_ = 1;
  // (b, in-flight cap) pairs with no partition that fits: memory grows with b and with the micro-batches in
  // flight, so every (b' >= b, cap' >= cap) fails too (up to the rounding of group shares).
  std::vector<std::pair<int, long>> too_big_;
  bool known_too_big(int b, long cap) const;
  // The first stage of each stage's spec (tp, EP, ZeRO-1 shards, groups' types and experts): what shares,
  // layer tables and memory limits depend on, so stages of one spec share them.
  std::vector<int> stage_kind_;
  std::unordered_map<std::uint64_t, std::vector<int>> partitions_;  // by cache_key(b, micro-batches in flight cap)
  // What classes of the same stages and recompute share (the constructor from same_times).
  struct SharedCaches {
    std::unordered_map<std::uint64_t, const LayerTimes::StageGroups*> groups;  // by cache_key(b, 0, stage kind): in times_
    std::map<int, double> work;                                                          // b -> work_lower_bound(b)
    std::vector<double> samples_floor, share_slowest_floor;  // by samples, by block; NaN: not yet
    std::map<int, std::pair<double, double>> unlimited_stages;                           // by b
    // Partitions whose search met no range ruled out by memory, with the ZeRO-1 setting that found them.
    std::map<std::pair<int, long>, std::pair<bool, std::vector<int>>> free_partitions;  // (b, cap)
  };
  std::shared_ptr<SharedCaches> shared_ = std::make_shared<SharedCaches>();
  std::vector<Choice> best_;  // by n; micro_batch -1: not computed yet (n is at most the global batch)
  // By n, of best_[n]: whether memory decided it (memory_decides), -1 while not worked out yet, and the
  // sizes best(n) found too big, kept until then.
  std::vector<signed char> decided_;
  std::vector<std::vector<int>> ruled_out_at_;
  // memory_decides of best_[n], worked out once.
  bool decided(long n) { return decided_[n] >= 0 ? decided_[n] == 1 : decide(n); }
  bool decide(long n);
  // best() and best_lower_bound() of an n not asked before.
  Choice best_afresh(long n);
  double best_lower_bound_afresh(long n);
  std::vector<double> best_lower_bound_;  // by n; NaN: not computed yet
  std::vector<long> divisors_;                 // best()'s scratch
  std::vector<std::pair<double, int>> order_;  // best()'s scratch
  // Calls visit(seconds) for each stage under partition(b, m), in stage order; false when it does not fit.
  template <class Visit>
  bool for_each_stage_time(int b, long m, Visit visit);

  // Per stage, per group: its memory query without the samples, its GPUs' usable bytes, and its GPU type
  // for LayerTimes (LayerTimes::type_id).
  std::vector<std::vector<StageMemoryLines::Query>> memory_queries_;
  std::vector<std::vector<int>> time_types_;
  std::vector<int> time_type_set_;  // per stage: LayerTimes::type_set of time_types_
  std::vector<std::vector<double>> usable_bytes_;

  bool memory_decided_ = false;
  double time_floor_ = std::nan("");  // time_floor(); NaN: not computed yet
  std::vector<FloorStage> floor_stages_;  // per stage: its TP width and its groups' distinct types
  const std::vector<FloorStage>& floor_stages();
  // group_work of the class's stages with `samples` per group (cached by samples across the classes
  // sharing caches).
  double samples_floor(int samples);
  // The most TP groups of any stage.
  int widest_stage() const;
  // The least samples of the largest group of stage `stage` in a micro-batch of block `block` of
  // most_samples_by_share: ceil((widest (block - 1) + 1) / the stage's groups).
  int least_share(int stage, int block);
  // A lower bound on the slowest stage of every partition of a micro-batch of block `block` (cached like
  // samples_floor).
  double share_slowest_floor(int block);
  // most_samples_below for classes of one TP group per stage (each size's own bounds) and of several stages of
  // several (a bound per block of sizes that give the stages' largest groups the same least share).
  long most_samples_by_size(double t, long max_n);
  long most_samples_by_share(double t, long max_n, int widest);
  // most_samples_below for one stage of several groups: each size's least time over every split into them.
  long most_samples_by_filling(double t, long max_n);
  static constexpr int kFilledGroups = 8;  // the most groups most_samples_by_filling takes
  // Whether a micro-batch of block `block` may fit: a necessary condition, which fails for every later block
  // where it fails for one.
  bool least_share_may_fit(int block);
  // Whether micro-batch b may fit: some layer partition fits with one micro-batch in flight (a necessary
  // condition for partition(b, m) at every m).
  bool may_fit(int b);
  std::vector<int> ruled_out_;  // best()'s scratch: sizes that do not fit
  // Whether the memory limit may have decided best(n)'s choice c (memory_decided()), where best(n) found the
  // sizes `ruled_out` too big.
  bool memory_decides(long n, const Choice& c, const std::vector<int>& ruled_out);
  // Whether the memory limit shaped partition(b, m): a range it rules out is faster than the partition's
  // slowest stage (else the unlimited min-max partition is no better).
  bool limit_shapes_partition(int b, long m);
  // The stage sum and slowest stage of the min-max partition for micro-batch b without the memory limit.
  std::pair<double, double> unlimited_stages(int b);

  // The distinct layer-time tables of stage `stage`'s groups at their shares of micro-batch b (in no
  // particular order: every use takes the slowest or the fastest).
  const std::vector<const LayerTimes::Table*>& group_tables(int stage, int b) { return groups(stage, b).tables; }
  const LayerTimes::StageGroups& groups(int stage, int b);
  // group_tables(j, b) of every stage j (the tables live in times_); the reference stays valid (a deque
  // grown at its end keeps its elements in place).
  const std::vector<const std::vector<const LayerTimes::Table*>*>& stage_tables(int b);
  std::deque<std::vector<const std::vector<const LayerTimes::Table*>*>> stage_tables_;  // by b; empty: not yet
  // A lower bound on the sum of the stage times of one micro-batch of b, over every partition.
  double work_lower_bound(int b);
  // max_end[x]: the largest end such that every group of the stage fits layers [x, end) in memory (x if none).
  const std::vector<int>& max_ends(int stage, int b, long in_flight);
  // The memory test of stage `stage`'s groups at micro-batch b: prepare_fits sets it up (in the scratch
  // below), fits asks whether every group holds layers [begin, end) with `in_flight` micro-batches in flight.
  void prepare_fits(int stage, int b);
  bool fits(int stage, int begin, int end, long in_flight);
  // The largest end such that the prepared stage fits layers [x, end) (x if none), bisected.
  int first_max_end(int stage, int x, long in_flight);
  std::vector<int> stage_memory_id_;  // per stage: StageMemoryLines::stage_memory_id
  // One integer for (b, count, kind), b below 2^24 samples, count and kind below 2^20 (the count at most the
  // depth or the micro-batches in flight, the kind a stage kind or a stage memory id, checked where made): the
  // caches above are looked up hundreds of thousands of times a plan.
  static std::uint64_t cache_key(int b, long count, int kind = 0) {
    return static_cast<std::uint64_t>(b) << 40 | static_cast<std::uint64_t>(count) << 20 | static_cast<std::uint64_t>(kind);
  }
  // Scratch of max_ends, partition, work_lower_bound and unlimited_stages (none calls another while it
  // uses them).
  std::vector<StageMemoryLines::Query> queries_scratch_;
  std::vector<StageMemoryLines::Lines*> lines_scratch_;
  std::vector<size_t> distinct_scratch_;
  std::vector<const std::vector<int>*> ends_scratch_;
  std::vector<const std::vector<const LayerTimes::Table*>*> tables_scratch_;
  std::vector<const LayerTimes::StageGroups*> stage_groups_scratch_;  // unlimited_stages' key
  PartitionScratch partition_scratch_;                                // partition's tables
};

}  // namespace arachne::planner
