// Admissible lower bounds on the simulated iteration time of a plan (sim/exec/iteration.cpp), and proofs
// that a plan runs out of memory, for the oracle's branch and bound (planner/oracle/README.md).
//
// The simulator runs each TP group of each stage (a worker) through its 1F1B program one task at a time: a
// forward task lasts its kernels plus its TP collectives (closed form inside a node), a backward likewise,
// then waits for whatever its program waits for. After its last backward and its gradient reduction it
// runs its optimizer step; the iteration ends when the last worker does. Hence, for a worker w on stage k
// of a pipeline with m micro-batches (F, B: per-micro-batch forward / backward task times, O: optimizer):
//   - its first forward needs micro-batch 0's activations, which passed through some group of every
//     earlier stage: it starts no earlier than sum_{j<k} min_g F_{j,g};
//   - it then runs m forwards and m backwards one after the other: m (F_w + B_w);
//   - the gradients of its last backward go on through some group of every earlier stage, each running its
//     last backward after receiving them: sum_{j<k} min_g B_{j,g};
//   - the stage-0 group reached runs its optimizer step after that (k = 0: w's own, O_w).
//   end >= sum_{j<k} min F_j + m (F_w + B_w) + sum_{j<k} min B_j + (k > 0 ? min_g (R+O)_{0,g} : 0),
//   end >= sum_{j<k} min F_j + m (F_w + B_w) + (R+O)_w,
// and, when the placement is known, with the pipeline's point-to-point transfers (sim/exec/pipeline_schedule.h:
// under Megatron's 1F1B every forward of a stage with a next stage is followed by a blocking exchange that
// sends its activations, every backward of a stage with a previous one by one that sends its input gradients;
// an exchange ends when its transfers have, a transfer starts no earlier than the exchange is posted and
// lasts at least its latency plus its bytes per member at its route's least capacity, sim/net/flow_network.h):
// X_f, X_b the floors of the worker's least activation / gradient transfer (0 where there is none),
//   chain to stage k:  sum_{j<k} min_g (F + X_f)_{j,g},   back from stage k:  sum_{j<k} min_g (B + X_b)_{j,g},
//   own work:          m (F_w + B_w) + m X_f,w + (m - 1) X_b,w, then the last exchange and the step:
//   end >= chain + own work + max(X_b,w, R_w) + O_w   (the step waits for the program's end and the reduction),
//   end >= chain + own work + X_b,w + back from stage k + min_g (R+O)_{0,g}   (k > 0).
// A worker of stage k < S-1 also waits for the last micro-batch's round trip: its last backward needs the
// gradients of micro-batch m-1, which pass forward through some group of every later stage after leaving
// its last forward, then back through some group of each (a forward waits for every overlapping group's
// activations, a backward for every overlapping group's gradients; some group overlaps any sample), while it
// runs only the c = min(S-1-k, m-1) backwards between its last forward and its last backward (Megatron's
// cool-down) - with L = sum_{j>k} min_g (F + X_f)_{j,g} + sum_{j>k} min_g (B + X_b)_{j,g}:
//   its last backward starts >= chain + own work - B_w + max(0, L - c (B_w + X_b,w)) =: s + W,
//   end >= s + W + B_w + X_b,w + O_w (and the chain back from stage k, k > 0); the reduction floor R_w,
//   measured from the earliest last backward s, is not moved by W: end >= s + B_w + R_w + O_w as before.
// where R_w (the reduction tail, when the topology is known and the model is dense) is what the gradient
// reduction provably adds after the worker's last backward (sim/exec/grad_sync.cpp):
//   - the bucket holding the worker's first layer (with the embedding on stage 0) becomes ready when the
//     kernels of its last backward end - its TP collectives (tpB_w) still run after that - and is reduced by
//     a collective over the GPUs of every group holding that layer segment, after the call overhead; the
//     optimizer step waits for it: R_w >= max(0, overhead + C - tpB_w), where C is a lower bound on the
//     collective's time: the flows collective_transfers() starts (sim/net/collectives.h: ring volumes of
//     Patarasuk & Yuan 2009 §3, 2(n-1)/n S per ring edge for all-reduce, (n-1)/n S for reduce-scatter /
//     all-gather; hierarchical phases one after another), each finishing no earlier than its latency plus
//     its bytes over the least capacity on its route (a max-min fair share never exceeds a link's capacity);
//   - tied embeddings with 2+ stages: the first and last stages then all-reduce the word embedding, which
//     starts only after the above and the worker's backward end: + overhead + C;
//   - ZeRO-1: the bucket is reduce-scattered (C of that), and after the step its parameters all-gathered.
// The bound is the largest over workers. Transfers, pipeline bubbles beyond these chains, the rest of the
// gradient reduction, expert all-to-alls and expert kernels only add time, so they are left out (>= 0). F and B are
// build_stage_work's own pass prices (price_pass: the same kernels and TP collective formula), summed per
// layer; the engine rounds each duration to the nanosecond, so 1 ns per scheduled duration and a relative
// 1e-9 for floating-point summation order are subtracted.
// MoE models: an expert-parallel pass counts only its dense kernels (expert kernels are priced at run time
// from the routing draw), so a stage's bound takes the lower of the EP and non-EP pricing when EP is not yet
// known, and no optimizer step (EP shrinks the parameters held); its memory proofs count no routed expert
// and no all-to-all buffer (less than any EP holds).
// Memory: the simulator refuses a plan when a worker's stage_memory (sim/model/memory.h) exceeds its GPU's
// memory; the same function with the same inputs decides here (for ZeRO-1 with an unknown data-parallel
// degree, the optimizer state is left out, which only lowers the requirement).
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <unordered_map>
#include <optional>
#include <tuple>
#include <vector>

#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/model/layer_costs.h"
#include "sim/model/model.h"
#include "sim/net/collectives.h"
#include "sim/plan/plan.h"

namespace arachne::planner {

// One TP group's per-micro-batch task times and its optimizer step.
struct GroupTimes {
  double forward_s = 0;
  double backward_s = 0;
  double optimizer_s = 0;
  // Time the gradient reduction provably adds after the group's last backward ends (before and after its
  // optimizer step); 0 when not known.
  double tail_s = 0;
  // The least duration of the blocking exchange after each forward (its activations to the next stage) and
  // after each backward (its input gradients to the previous stage): the floor of its least transfer
  // (LowerBound::transfer_floor); 0 when the stage has no such neighbour or the placement is not known.
  double send_f_s = 0;
  double send_b_s = 0;
};

// What pipeline_lower_bound knows of the pipeline.
struct PipelineBoundOptions {
  // Every stage and group is listed; false for a partial pipeline (stages 0..k, the last one's groups so
  // far), whose bound is then at most that of every completion.
  bool complete = true;
  // Counts the round trip of the last micro-batch through the later stages before a worker's last backward
  // (false: the bound without it, for tests that show what it adds).
  bool round_trip = true;
};

// Lower bound on the end of the last worker of one 1F1B pipeline with m micro-batches; stages[k] lists the
// stage's groups.
double pipeline_lower_bound(const std::vector<std::vector<GroupTimes>>& stages, int m, PipelineBoundOptions opt = {});

class LowerBound {
 public:
  // Without a topology, plan_bound() leaves the gradient reduction out (tail 0).
  LowerBound(const Cluster& cluster, const ModelConfig& model, const Topology* topo = nullptr);

  // Pass times of a TP group of `tp` GPUs of node group `node_group` (one node) holding layers [begin, end)
  // (+ embedding when begin == 0, head when end == layers) for `samples` sequences; `ep` as in the plan
  // (MoE: 0 = not yet known). Optimizer: the full step without ZeRO-1; 0 with ZeRO-1 (dp unknown) or MoE.
  GroupTimes group_times(int node_group, int tp, double samples, int begin, int end, Recompute rc, bool zero1,
                         int ep = 0) const;
  // True when a GPU of the group provably runs out of memory: stage_memory of the group with `in_flight`
  // micro-batches exceeds the GPU's memory (ZeRO-1: dp = zero1_dp, or the optimizer state left out when
  // zero1_dp <= 0; MoE: no routed expert held, no dispatch buffers).
  bool out_of_memory(int node_group, int tp, double samples, int begin, int end, Recompute rc, double in_flight,
                     bool zero1, int zero1_dp) const;

  // The least forward + backward time per sample of each layer (then the embedding, then the head) on a TP
  // group of `tp` GPUs of `node_group`, over micro-batches of 1..max_samples sequences (per-sample cost is
  // not monotone in the micro-batch size, so every size is priced). A worker that processes s samples of a
  // layer per micro-batch spends at least s times this on it.
  const std::vector<double>& per_sample_floor(int node_group, int tp, Recompute rc, int max_samples) const;

  // A lower bound on the end of a TP group of `tp` GPUs of `node_group` that runs n samples in all (m
  // micro-batches of s sequences, n = m s) through layers [begin, end) (+ embedding when begin == 0, head when
  // end == layers): its 2m tasks run one after the other, and each sample costs at least its per-layer floor
  // over micro-batches of at most n sequences (per_sample_floor(.., n): s <= n, and small micro-batches run
  // far below the GPU's best per-sample rate); without ZeRO-1 its optimizer step follows its last backward
  // (with ZeRO-1 and MoE no step is counted). Less the engine's rounding (m <= n tasks of two durations each).
  double group_work_bound(int node_group, int tp, long n, int begin, int end, Recompute rc, bool zero1) const;
  // The largest n <= max_n whose group_work_bound is below T (0: none): every larger n has a bound >= T (the
  // bound need not grow with n: a binary search on its suffix minima over n = 1..max_n, cached).
  long group_sample_cap(int node_group, int tp, int begin, int end, Recompute rc, bool zero1, long max_n, double T) const;
  // The same through one layer range's envelope (the suffix minima over n of group_work_bound, filled when
  // empty) of work_envelopes(...)[begin x (layers + 1) + end], for pipeline_sample_cap's inner loops.
  long envelope_cap(std::vector<double>& envelope, int node_group, int tp, int begin, int end, Recompute rc, bool zero1,
                    long max_n, double T) const;
  std::vector<std::vector<double>>& work_envelopes(int node_group, int tp, Recompute rc, bool zero1, long max_n) const {
    return work_envelopes_[std::make_tuple(node_group, tp, static_cast<int>(rc), zero1 ? 1 : 0, max_n)];
  }
  // The least forward and backward pass times of each layer (then the embedding, then the head) on such a
  // group over micro-batches of 1..max_samples sequences (MoE: the lower of the EP and non-EP pricing). A pass
  // of those layers with any micro-batch takes at least their sum.
  struct LeastPasses {
    std::vector<double> forward, backward;  // size layers + 2
  };
  const LeastPasses& least_passes(int node_group, int tp, Recompute rc, int max_samples) const;

  // A lower bound on simulate_iteration(plan).iteration_time_s; nullopt when the simulator would report the
  // plan out of memory. Plans other than 1F1B without interleaving get 0 (no bound). With a topology it counts
  // the gradient reduction and the pipeline's point-to-point transfers (unless count_transfers(false)).
  std::optional<double> plan_bound(const Plan& plan) const;
  // Whether plan_bound counts the point-to-point transfers (default true; tests compare both).
  void count_transfers(bool on) { transfers_ = on; }
  // Whether plan_bound and pipeline_bound count the last micro-batch's round trip through the later stages
  // (PipelineBoundOptions::round_trip; default true; tests compare both).
  void count_round_trip(bool on) { round_trip_ = on; }

  // The least time of a pipeline transfer of `samples` sequences' activations (or their gradients) from TP
  // group `src` to TP group `dst` as the simulator lowers it (sim/exec/stage_work.cpp make_link: min(tp)
  // rank pairs each sending 1/min(tp) of it, after the largest pair latency plus the sender's call overhead),
  // each pair's bytes at no more than its route's least capacity; less the engine's rounding. 0 without a
  // topology.
  double transfer_floor(const TpGroup& src, const TpGroup& dst, double samples) const;

  // A lower bound on the time of the collective `kind` over `members` on `bytes` (collective_transfers'
  // flows, each no faster than its route's least capacity); 0 for fewer than two members.
  double collective_floor(CollectiveKind kind, const std::vector<GpuId>& members, double bytes) const;

  // The gradient reduction of a dense plan's layout (its layer cuts, TP groups, ZeRO-1) without committing to
  // one placement: the buckets of every segment, each with the least overhead + collective floor over
  // `placements` (per placement, the GPUs of every TP group in listing order - pipelines, stages, groups);
  // the plan's own GPUs when `placements` is empty. Empty for MoE models or without a topology (no tail).
  // The buckets themselves (their layers and parameters) do not depend on the placement, only their floors.
  struct ReductionFloor;
  ReductionFloor reduction_floor(const Plan& plan, const std::vector<std::vector<std::vector<GpuId>>>& placements) const;
  // Whether placement_free_floor() bounds every placement: true (with a topology, for a dense model) when
  // every pair of GPUs on the same two nodes (or in one node) has the same latency and the same least link
  // capacity on its route - then a collective's floor depends only on how many members each node holds
  // (collective_transfers' rings and hierarchical phases are built from the members' node counts in node
  // order, and each flow's floor from its pair's latency and capacity).
  bool placement_free() const { return uniform_nodes_ && spreads_on_ && topo_ && !model_.moe; }
  // Whether placement_free() may be true (default true; tests turn it off to compare with the per-class floors).
  void allow_placement_free(bool on) { spreads_on_ = on; }
  // The gradient reduction of a dense plan's layout with every bucket's floor the least over every way its
  // holders (TP groups of given node group and tp, each inside one node) can be spread over the nodes: the
  // least, over the per-node member counts such an assignment gives, of the collective floor on members
  // with those counts. Only the holders' node groups and tp are read from the plan (its GPUs may be any
  // valid placement). At most reduction_floor(plan, placements) for any placements when placement_free();
  // empty (no tail) otherwise.
  ReductionFloor placement_free_floor(const Plan& plan) const;

  // One TP group of a pipeline layout, for pipeline_bound.
  struct LayoutGroup {
    int node_group = 0, tp = 1;
    double samples = 0;  // per micro-batch
  };
  // A lower bound on the end of the last worker of one pipeline of a dense plan (stage k holds layers
  // [cuts[k], cuts[k + 1]) on groups[k]; m micro-batches), with each group's reduction tail under `floor`
  // (own buckets only: every holder's releases only delay them). It is at most the bound plan_bound takes for
  // that pipeline in any plan whose reduction has `floor`'s buckets at no smaller floors. ZeRO-1: no
  // optimizer step counted (its data-parallel degree is left open).
  // The reduction tail (GroupTimes::tail_s, without what follows the buckets) of group g with times t on
  // stage k of layers [begin, end) after the forward chain chain_f, with m micro-batches, under `floor`.
  // It does not depend on m or chain_f but through floating-point rounding (relative 1e-15, far below the
  // slack pipeline_lower_bound subtracts).
  double reduction_tail(const ReductionFloor& floor, const LayoutGroup& g, int begin, int end, Recompute rc,
                        const GroupTimes& t, double chain_f, int m, int k) const;
  // `after` (per stage, per group; may be null) adds what follows the buckets: ReductionFloor::after of the
  // pipeline, or anything below it.
  double pipeline_bound(const std::vector<int>& cuts, const std::vector<std::vector<LayoutGroup>>& groups, int m,
                        Recompute rc, bool zero1, const ReductionFloor& floor,
                        const std::vector<std::vector<double>>* after = nullptr) const;

 private:
  struct Table {  // per-layer prefix sums of pass times, plus the embedding and the head
    std::vector<double> fwd, bwd, fwd_ep, bwd_ep;  // size layers + 1
    std::vector<double> bwd_tp;                     // the TP collectives' part of bwd
    double emb_f = 0, emb_b = 0, head_f = 0, head_b = 0, head_b_tp = 0;
  };
  // The gradient reduction of a dense plan (see lower_bound.cpp): per segment (first layer) its buckets in
  // fill order, each with the layer it starts at and its overhead + collective floor; per pipeline, stage and
  // group what follows them all (tied-embedding all-reduce, ZeRO-1 all-gather).
  struct BucketFloor {
    int layer_begin = 0;
    bool embedding = false;
    double busy_s = 0;
    std::vector<std::pair<LinkId, double>> link_bytes;  // bytes its collectives put on each link
  };
  using Segments = std::map<int, std::vector<BucketFloor>>;
  using Tails = std::vector<std::vector<std::vector<double>>>;
  // `link_loads`: also each bucket's bytes per link (BucketFloor::link_bytes), which plan_bound needs.
  // `placement_free`: each collective's floor is holders_floor's, the least over the holders' spreads.
  void reduction_tails(const Plan& plan, Segments* segments, Tails* tails, bool link_loads,
                       bool placement_free = false) const;
  // The least collective floor of `kind` on `bytes` per member over every spread of TP groups of the given
  // (node group, tp) - sorted - over the nodes (one member per group, as a slice of a bucket has); 0 when
  // the spreads are too many to list (kMaxSpreads, lower_bound.cpp).
  double holders_floor(CollectiveKind kind, const std::vector<std::pair<int, int>>& holders, double bytes) const;
  // When a group, whose last backward starts at `start` or later, has each bucket of its segments ready
  // (raising `ready`, the latest over holders); returns when its buckets could all be reduced at the earliest.
  // (`ready` may be null: the group's own time only.)
  double bucket_releases(const Segments& segments, int node_group, int tp, double samples, int begin, int end,
                         Recompute rc, double start, std::map<int, std::vector<double>>* ready) const;
  // The earliest start of the last backward of a group on stage k after `chain_f` (the forward chain to its
  // stage) with m micro-batches of `t`, less the engine's rounding and summation slack.
  // Sets send_f_s / send_b_s of each group of the pipeline (stages: its groups' times).
  void add_transfers(const Pipeline& pl, std::vector<std::vector<GroupTimes>>& stages) const;
  static double last_backward_start(double chain_f, const GroupTimes& t, int m, int k);
  static double buckets_reduced(const std::vector<BucketFloor>& buckets, const std::vector<double>& release);
  const Table& table(int node_group, int tp, double samples, Recompute rc) const;
  Table build_table(int node_group, int tp, double samples, Recompute rc) const;

  const Cluster& cluster_;
  const ModelConfig& model_;
  const Topology* topo_ = nullptr;
  bool transfers_ = true;
  bool round_trip_ = true;
  std::vector<double> capacity_;  // per node group: GPU memory (bytes)
  std::vector<double> overhead_;  // per node group: its GPUs' per-call collective overhead (s)
  mutable std::map<std::tuple<int, int, double, int>, Table> tables_;
  mutable std::map<std::tuple<int, int, int, int>, std::vector<double>> floors_;
  // Per (node group, tp, rc, zero1, max_n) and layer range [begin, end) (index begin x (layers + 1) + end): the
  // suffix minima over n of group_work_bound (index n = 1..max_n; [0] unused), filled on first use.
  mutable std::map<std::tuple<int, int, int, int, long>, std::vector<std::vector<double>>> work_envelopes_;
  mutable std::map<std::tuple<int, int, int, int>, LeastPasses> least_passes_;
  mutable std::map<int, std::vector<double>> params_prefix_;
  // collective_floor's results, by kind, bytes and members (hashed: the reduction lift asks for the same
  // member sets across thousands of placements).
  struct FloorKey {
    int kind = 0;
    double bytes = 0;
    std::vector<GpuId> members;
  };
  struct FloorQuery {  // a FloorKey to look up without copying its members
    int kind = 0;
    double bytes = 0;
    const std::vector<GpuId>* members = nullptr;
  };
  struct FloorKeyHash {
    using is_transparent = void;
    size_t operator()(const FloorKey& k) const { return hash(k.kind, k.bytes, k.members); }
    size_t operator()(const FloorQuery& q) const { return hash(q.kind, q.bytes, *q.members); }
    static size_t hash(int kind, double bytes, const std::vector<GpuId>& members);
  };
  struct FloorKeyEqual {
    using is_transparent = void;
    bool operator()(const FloorKey& a, const FloorKey& b) const {
      return a.kind == b.kind && a.bytes == b.bytes && a.members == b.members;
    }
    bool operator()(const FloorQuery& q, const FloorKey& k) const {
      return q.kind == k.kind && q.bytes == k.bytes && *q.members == k.members;
    }
    bool operator()(const FloorKey& k, const FloorQuery& q) const { return (*this)(q, k); }
  };
  mutable std::unordered_map<FloorKey, double, FloorKeyHash, FloorKeyEqual> collective_floors_;
  mutable std::vector<GpuId> members_scratch_;  // of reduction_tails: one slice's members
  bool uniform_nodes_ = false;  // see placement_free()
  bool spreads_on_ = true;
  // Per sorted holder list: members (lowest GPUs of each node) for every distinct per-node count vector
  // their spreads over the nodes give (nullopt: too many to list).
  mutable std::map<std::vector<std::pair<int, int>>, std::optional<std::vector<std::vector<GpuId>>>> spreads_;
  mutable std::map<std::tuple<int, double, std::vector<std::pair<int, int>>>, double> holders_floors_;
  // Memory of a group as fixed + in_flight x per_micro_batch (stage_memory is affine in in_flight), cached.
  struct MemoryLine {
    double fixed = 0, per_micro_batch = 0, optimizer = 0;
  };
  mutable std::unordered_map<std::uint64_t, MemoryLine> memory_;  // packed key (lookups only)
  mutable std::unordered_map<std::uint64_t, const Table*> table_index_;  // integer samples: packed key
};

// The work bound of a pipeline's stages (a water-filling over each stage's groups). Stage j holding layers
// [a, e) for n samples keeps one of its groups busy for at least n x rate(j, a, e): its groups take s_g
// samples of each micro-batch (sum_g s_g = b, n = m b), and group g runs each of its m s_g samples through
// those layers at no less than c_g, their summed least per-sample cost on its GPU type and tp
// (LowerBound::per_sample_floor, the embedding with the first layer, the head with the last); if every group
// ended before T then n = sum_g m s_g < T sum_g 1 / c_g, so the busiest is busy for at least
// n / sum_g (1 / c_g) = n x rate. rest(j, e): the least, over contiguous partitions of layers [e, L) into
// stages j.. (each non-empty), of the largest stage rate (+inf when impossible); every stage processes all
// n samples, so a pipeline taking n samples, whatever its partition, has a worker busy for at least
// n x rest(0, 0) = n x pipeline_rate(). work_bound() subtracts the engine's rounding and summation slack.
class PipelineRates {
 public:
  // stages[j]: the (node group, tp) of each TP group of stage j; max_samples as per_sample_floor has it.
  PipelineRates(const LowerBound& lb, const std::vector<std::vector<std::pair<int, int>>>& stages, Recompute rc,
                int layers, int max_samples);
  double rate(int j, int a, int e) const;
  double rest(int j, int e) const { return rest_[j][e]; }
  double pipeline_rate() const { return rest_[0][0]; }
  // n samples in m micro-batches at `rate` per sample, less the engine's rounding (each of the 2m tasks of the
  // busiest group is two durations, each rounded to the nanosecond) and summation order.
  static double work_bound(double n, double rate, int m) { return n * rate * (1 - 1e-9) - 4e-9 * m; }

 private:
  int L_;
  // per stage: (prefix sums over layers of a node group's per-sample floors, then its embedding's and its
  // head's - size L + 3 -, its groups on the stage)
  std::vector<std::vector<std::pair<std::vector<double>, int>>> groups_;
  std::vector<std::vector<double>> rest_;  // [stage][layer]
};

// The most samples (at most max_n) a pipeline whose stage j has TP groups stages[j] ((node group, tp) each) can
// take while every group's end stays below T, over every contiguous partition of the layers into its stages:
// each stage runs all n samples of the pipeline, its group g n_g of them (sum_g n_g = n), and a group ends
// before T only if n_g <= its cap; so a partition admits n only when every stage's caps sum to at least n, and
// the pipeline's n is at most the largest, over partitions, of the least stage sum (a dynamic programme over
// stages and cut layers). A group of stage k also waits for the chains of pipeline_lower_bound: its first
// forward follows micro-batch 0's forwards through stages 0..k-1 (chain_f), and the end of its last backward
// is followed by its optimizer step (O) and by the gradients' backwards through those stages (chain_b), each
// pass no shorter than least_passes; so it ends no earlier than chain_f + group_work_bound + max(0, chain_b - O),
// with each chain at least its least value over the partitions of the layers before the stage (a dynamic
// programme forward). Its cap is group_sample_cap at T less that. 0: no n >= 1 ends below T.
long pipeline_sample_cap(const LowerBound& lb, const std::vector<std::vector<std::pair<int, int>>>& stages, Recompute rc,
                         bool zero1, int layers, long max_n, double T);

// The most micro-batches (index b: of b sequences each) a pipeline whose stage j has TP groups stages[j] can
// take while its end stays below T, over every contiguous partition of the layers into its stages: M[b] is
// the largest m with m b <= max_n admitted (0: none; M[0] unused). A micro-batch of b sequences is split over
// stage j's k_j groups in integers s_g >= 1 (sum b, so s_g <= b - k_j + 1), the same split for every
// micro-batch. Sample position x in [0, b) lies in one group of each stage, and those groups overlap: the
// group of stage k holding x waits for micro-batch 0's forwards through the groups of stages 0..k-1 holding
// x (a forward waits for every overlapping group's activations), runs its m forwards and m backwards, and
// the gradients of its last backward pass back through those groups to the stage-0 one, which then steps
// its optimizer (none with ZeRO-1). So the pipeline ends no earlier than, for every x and k,
//   sum_{j<k} P_j(x) + m P_k(x) + O_0(x),   P_j(x): forward + backward time of stage j's group holding x,
// hence no earlier than its average over x. A stage's average (1/b) sum_g s_g P_g(s_g) is at least its
// least pass time and, since P_g(s) >= s c_g (c_g: the group's per-sample floor over micro-batches of
// 1..b - k_j + 1 sequences), at least min over splits of (1/b) sum_g s_g^2 c_g = b / sum_g (1 / c_g): R_j
// (b times the stage's water-filling rate, at micro-batch sizes a split of b allows). The end is at least
//   max_k (sum_{j<k} R_j + m R_k) + min_g O_{0,g},
// a function of b and m together: a large b makes every stage's share of micro-batch 0 long on the chain,
// a small b prices every sample at small micro-batch sizes. m is found by bisection over a dynamic
// programme over stages and cut layers (the least chain to each cut among partitions that keep every
// stage so far below T). `within` (optional): caps known to hold (e.g. at a larger T); none is exceeded.
// Sizes above coupled_up_to are not bounded (M[b] = max_n / b, or within's): the cost is one dynamic
// programme per size and bisection step.
std::vector<long> micro_batch_caps(const LowerBound& lb, const std::vector<std::vector<std::pair<int, int>>>& stages,
                                   Recompute rc, bool zero1, int layers, long max_n, double T,
                                   const std::vector<long>* within = nullptr,
                                   long coupled_up_to = std::numeric_limits<long>::max());

struct LowerBound::ReductionFloor {
  Segments segments;  // as reduction_tails has them, busy_s the least over the placements (link loads unused)
  // Per pipeline, stage and group: the least over the placements of what follows its buckets (the
  // tied-embedding all-reduce, ZeRO-1's all-gather), as reduction_tails has it.
  std::vector<std::vector<std::vector<double>>> after;
};

}  // namespace arachne::planner
