// `metis`: Taegeon Um, Byungsoo Oh, Minyoung Kang, Woo-Yeon Lee, Goeun Kim, Dongseob Kim, Youngtaek Kim,
// Mohd Muzzammil, Myeongjae Jeon, "Metis: Fast Automatic Distributed Training on Heterogeneous GPUs",
// USENIX ATC 2024. Public code: github.com/SamsungLabs/Metis (cost_het_cluster.py, search_space/plan.py,
// search_space/device_group.py, model/device_group.py, model/load_balancer.py, model/cost_estimator.py,
// model/cluster_bandwidth.py); the port in github.com/eth-easl/sailor, sailor/Planner/baselines/Metis
// (metis_planner.py: min_group_scale_variance 0.5, max_permute_len 10 "TABLE 4", 300 s search cap).
//
// Algorithm (one pipeline over every GPU; its stages are "device groups", possibly of several GPU types)
//  1. GPU-type orderings (InterStagePlanGenerator.node_sequences = permutations of the types; here in
//     lexicographic order of the type names). An ordering lays out the GPUs as ranks: every GPU of the first
//     type (nodes in listing order), then the second type, ... (StagePerformance._get_device_placement).
//  2. Stage counts S = 1 .. min(GPUs, layers), and for each S the device-group shapes
//     (device_group.py gen_dgroups_for_stages_with_variance): sizes are powers of two, at least
//     max(N/S, S/N) * variance (Key idea 1), S sizes summing to N (gen_dgroups_recursive, non-decreasing
//     multisets), and the permutations of each multiset after merging equal smallest groups until at most
//     max_permute_len blocks remain (permute(), Key idea 2). Stage s takes the next size_s ranks.
//  3. Micro-batch counts: the divisors B of the global batch, descending (InterStagePlanGenerator.batches).
//     The pipeline's micro-batch is global/B; a stage splits it over its TP groups (stage-level DP).
//  4. Intra-stage plans (search_space/plan.py IntraStagePlanGenerator): every stage starts all-DP
//     (dp = size, tp = 1). A strategy is valid when every group gets 1..max_profiled_batch_size samples
//     (_is_valid_strategies). Layers are balanced (5) and memory checked; on success the candidate is priced.
//     Then the next strategy halves dp and doubles tp on the stage with the LEAST memory headroom that still
//     has dp > 1 (_next_strategy, memory_state sorted ascending); the loop ends when the first candidate
//     needed no memory-driven repartitioning (has_next: num_repartition == 1) or no stage has dp > 1.
//  5. Layer balancing (model/load_balancer.py LayerLoadBalancer.partition_layer): stage compute performance
//     = 1 / (whole-model time of the stage's slowest group at its batch share), normalised
//     (StagePerformance.get_intra_stage_compute_performance); layer demand = per-layer time on the first GPU
//     type at tp 1, batch 1, normalised. LayerComputeBalancer splits every layer into 7 "hallucinated"
//     pieces, fills stages greedily in order up to their performance share, gives the tail to the last stage,
//     places leftovers on the neighbouring stage with most spare capacity, keeps a layer where the majority of
//     its pieces went, then moves up to 3 boundary layers from the most loaded to the least loaded neighbour.
//     Memory: if a stage does not fit, performance of the short stages is scaled by capacity/demand*0.9 and
//     the excess is given to stages with spare memory in proportion to their performance
//     (_adj_compute_performance); at most 3 partition attempts.
//  6. Stage-level data parallelism (DataLoadBalancer.partition_data): a stage's micro-batch is split over its
//     TP groups in proportion to each group's speed 1 / time(type, tp, batch 1): floor, then the largest
//     remainders (ties to the lower group). Expressed as one Plan stage with several TP groups whose `share`
//     is samples / micro_batch.
//  7. Cost (HeteroCostEstimator.get_cost):  T = (B-1) * max_s t_s + sum_s t_s + max_s DP_s + max_s U_s + P2P,
//     t_s = max over the stage's groups of the profiled time (forward + backward + TP) of its layers at its
//     batch share; DP_s = 2 (dp-1)/dp * gradient bytes / bandwidth (_get_dp_cost); U_s = parameter update
//     time of the stage (optimizer time / tp * layer ratio in Metis; here Adam's HBM traffic of the stage's
//     parameters per GPU on the roofline); P2P = sum over stage boundaries of one activation / bandwidth
//     (_get_pp_cost). Bandwidth: intra-node when all GPUs involved sit in one node, else the slowest NIC
//     bandwidth per GPU of the types involved (HetClusterBandwidth). The best (lowest T) candidate is returned.
//  Profiling data: planner::Profiler (per layer, GPU type, TP and batch: time, memory) stands in for Metis's
//  profiles; memory check = Profiler::stage_memory_bytes (1F1B: min(S - s, B) micro-batches in flight) against
//  Profiler::gpu_memory_bytes for every group of a stage. Under CostModel::Simulator the same candidates are
//  priced with planner::Evaluator instead (out of memory = infeasible). MoE: priced as the activated dense
//  model (Profiler), apply_megatron_core_ep on the returned plan (under Simulator on each priced candidate,
//  so the prediction is that of the returned plan).
//
// What it cannot express: several pipelines, idle GPUs (every GPU is used), TP groups spanning nodes, uneven
// TP inside a stage, recomputation, ZeRO, interleaving, expert parallelism.
//
// Deviations from the public code, and why:
//  - Budgets: the own-model search covers Metis's whole space, stopped only by the port's 300 s cap
//    (Options::time_cap_s, checked where the port checks it) or --budget-wall; request.budget_evaluations
//    counts simulations only (CostModel::Simulator). When the 300 s cap binds, the result depends on the
//    machine's speed (as the port's does); search_complete = false says so.
//  - Orderings and multiset permutations in lexicographic order (Metis: itertools / loopless multiset
//    permutation order): same set, different order (matters only when a budget cuts the search, and for ties).
//  - Stage counts with no device group are skipped (the port stops the whole search when S = 1 has none,
//    i.e. whenever the GPU count is not a power of two).
//  - TP groups are consecutive ranks that must lie in one node (Metis only bounds tp by the profiled maximum);
//    a strategy whose TP group would span nodes, whose tp does not divide the heads, or that gives a group no
//    sample is invalid and skipped like Metis's invalid strategies.
//  - When every partition attempt runs out of memory the public code drops the memory state and falls back to
//    1/dp (the largest-DP stage); here the last attempt's headroom is kept, so DP is traded for TP on the
//    stage with the least memory headroom, as the paper's search and the issue describe.
//  - A layer whose pieces split three ways without a majority would be lost by _alloc_real_value; it is given
//    to the stage holding most of its pieces. A partition with an empty stage is rejected (the port drops it).
//  - Group times use the profile at the group's exact batch (Metis sums power-of-two profiled batches);
//    homogeneous stages split the micro-batch like heterogeneous ones (remainder samples are assigned rather
//    than floored away). No fb_sync / batch-generator terms (no such profile).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "planner/planner.h"

namespace arachne::planner {

class MetisPlanner : public Planner {
 public:
  struct Options {
    double min_group_scale_variance = 0.5;  // sailor port, "TABLE 4"
    int max_permute_len = 10;                // sailor port, "TABLE 4"
    int max_profiled_batch_size = 8;         // samples per TP group (Metis: largest profiled batch size)
    int max_partition_attempts = 3;          // LayerLoadBalancer.partition_layer
    int hallucination = 7;                   // LayerComputeBalancer
    // The sailor port's search cap (metis_planner.py TIME_BUDGET_SEC = 300, "added to run experiments within a
    // reasonable time limit"); 0: none. Public Metis (cost_het_cluster.py) has no cap.
    double time_cap_s = 300;
    // Restrictions of the search space (tests and experiments); empty / 0 = Metis's full space.
    std::vector<std::string> only_type_order;  // one GPU-type ordering
    std::vector<int> only_device_groups;       // one device-group shape (sizes of the stages)
    int only_batches = 0;                      // one micro-batch count
  };

  MetisPlanner() = default;
  explicit MetisPlanner(Options options) : options_(std::move(options)) {}

  std::string name() const override { return "metis"; }
  PlanResult plan(const PlanRequest& request) override;

 private:
  Options options_;
};

// The pieces of Metis's search, exposed for tests.
namespace metis_detail {

// Device-group shapes for `stages` stages over `gpus` GPUs (device_group.py), in enumeration order.
std::vector<std::vector<int>> device_groups(int stages, int gpus, double variance, int max_permute_len);

// LayerComputeBalancer.run: stage boundaries (stages+1 values, 0 .. layers) for normalised stage performance
// and normalised per-layer demand. Empty when a stage would get no layer.
std::vector<int> balance_layers(const std::vector<double>& stage_performance, const std::vector<double>& layer_demand,
                                int hallucination = 7);

// DataLoadBalancer.partition_data: `samples` split in proportion to `speeds` (floor, largest remainder,
// ties to the lower index). Parts may be 0.
std::vector<long> split_batch(long samples, const std::vector<double>& speeds);

// IntraStagePlanGenerator._next_strategy: halves dp and doubles tp of the stage with the least memory
// headroom (memory_state ascending, ties to the lower stage) among those with dp > 1; memory_state empty:
// 1/dp (the largest-DP stage first). False when every stage has dp = 1. strategies: (dp, tp) per stage.
bool next_strategy(std::vector<std::pair<int, int>>& strategies, const std::vector<double>& memory_state);

// LayerLoadBalancer._adj_compute_performance; empty when the spare memory cannot absorb the excess.
std::vector<double> adjust_compute_performance(const std::vector<double>& performance, const std::vector<double>& capacity,
                                               const std::vector<double>& demand);

}  // namespace metis_detail
}  // namespace arachne::planner
