// `sailor`: Strati et al., "Sailor: Automating Distributed Training over Dynamic, Heterogeneous, and
// Geo-distributed Clusters", SOSP 2025 (arXiv 2504.17096), its planner and simulator sections; public code
// github.com/eth-easl/sailor, sailor/Planner/sailor_planner/cpp_src/{planner.cpp, planner_utils.cpp,
// training.cpp, utils/network_utils.cpp} (read at commit cf2c8e3). Own C++; no code copied.
//
// Plan form (as the public planner emits it, planner.py get_sorted_plans): P pipeline stages with Sailor's
// even layer split (planner_utils.cpp get_stages: floor(L/P) layers per stage, the last L mod P stages one
// more); every stage has the same data-parallel degree D, and each of its D replicas is one TP group of one
// GPU type with that type's TP for the stage (StageConfig.dp_pairs = (gpu type, tp, zone)). Replica k of
// every stage forms pipeline k (find_p2p_time_cost sends from dp_pairs[k] of stage s to dp_pairs[k] of
// stage s+1), so a pipeline may change GPU type from stage to stage and stages mix types across pipelines.
// One micro-batch size for the whole job; every pipeline runs ceil(B / (mbs·D)) micro-batches in the cost
// model (the plan splits the B/mbs micro-batches evenly, so the longest pipeline has exactly that many).
//
// Algorithm (planner.cpp get_plans_num_gpus_dp + solve_dp, objective "throughput", no dollar budget):
//  for P = 1 .. min(layers, GPUs), for mbs in {1, 2, 4, 8} dividing B (Sailor: the profiled mbs set):
//   1. TP per (GPU type, stage) (planner_utils.cpp find_tmp_degrees; planner.cpp build_structs):
//      - minimum TP from memory: the smallest TP whose stage fits with P - s micro-batches of activations in
//        flight (check_stage_fits); a type with a stage that fits at no TP is not used for this (P, mbs);
//      - maximum TP by speed-up: walk TP = 1, 2, 4, ...; a larger TP is taken only when the profiled stage
//        time (forward + backward, TP collectives included) of the previous accepted TP divided by its own
//        is >= 1.5 (SPEEDUP_THRESHOLD, planner_utils.hpp); the walk stops at the first TP below it;
//      - TP = max(speed-up TP, memory TP).
//   2. D from Sailor's list (build_structs mbs_dp_vector): 1 and every D whose ceil(B/(mbs·D)) differs from
//      the previous D's, walked from the largest down (objective throughput reverses it); the walk stops at
//      the first D whose best plan is not faster than the previous feasible one (get_plans_num_gpus_dp:
//      `if (prev_dp_Tpp > config.Tpp) ... else break`, commented there as part of heuristic H3).
//   3. solve_dp(mbs, stages left, start layer, D, resources), memoised on that key (plus the set of usable
//      types; resources in canonical form, see below): for stage s enumerate how many of the D replicas each
//      GPU type takes (generate_all_combos_new: counts per type in lexicographic order, the last type the
//      remainder), bounded by floor(free GPUs / TP) per node; replicas are placed filling a type's nodes in
//      order (Sailor fills zones in order; here a TP group stays inside one node): nodes with the most GPUs
//      first, then the fullest (a partly used node before a fresh one), so placement is first-fit. Last stage: the
//      combination with the smallest single-stage time. Other stages: skip a combination whose single-stage
//      time equals the previous combination's (solve_dp's `pinfo.Tpp == prev` pruning), and one that leaves
//      fewer than D replicas for the next stage; solve the rest on the remaining GPUs, merge, keep the
//      smallest merged T_pp.
//  Result: the fastest candidate over all (P, mbs, D) (get_sorted_plans sorts by Tpp; ties: first found).
//
// Cost model (planner_utils.cpp simulate_time_single_stage / merge_stages_get_time; the paper's simulator):
//   comp_s   = max over the GPU types replicating stage s of the profiled per-micro-batch stage time
//              (Profiler::stage_time_s: forward + backward + TP collectives; embedding/head on the end stages)
//   comm_s   = max over replicas k of the activation send stage s -> s+1 (Profiler::p2p_bytes(mbs) over the
//              link: the type's intra-node bandwidth inside a node, else min over both ends of the NIC share
//              of the TP group, nic_bw_per_gpu·tp, plus the network latency); the gradient send back costs
//              the same (Sailor sets stage_time_comm_grad = stage_time_comm_act)
//   sync_s   = DP ring all-reduce of the stage's gradients over D replicas: max over types of
//              2(D-1)/D · grad_bytes(tp) / bw (bw: intra-node when every replica is in one node, else the
//              GPU's NIC share), plus 2(D-1) latencies per 500 MB bucket (get_ar_time_with_buckets)
//   update_s = optimizer step of the stage's parameters per rank (a memory-bound pass over 34 B/param on the
//              type's HBM: what Sailor's profiler measures as the per-layer "update" time)
//   built back to front, stage s merged in front of the solved suffix s+1.. (merge_stages_get_time):
//   straggler = max_s max(comp_s + comm_s, comp_{s+1} + comm_{s+1} + comm_s)   (comm_{P-1} = 0)
//   T_pp = (m-1)·straggler + Σ_s 2·comm_s + Σ_s comp_s + max_s update_s + max_s sync_s,  m = ceil(B/(mbs·D))
//   (the "T_pp = (m-1)·max(comp+comm) + Σ comm + Σ comp + update, plus sync"); a suffix's own T_pp is
//   the same formula over its stages, and the DP keeps the suffix with the smallest one.
// With CostModel::Simulator the same DP produces the candidates (one per (P, mbs, D)) and each is priced by
// planner::Evaluator instead; the H3 stop and the final choice use the simulated time; OOM is infeasible.
//
// Budget: the DP runs to the end, as the public planner does (it has no cap); own-model pricing is not
// budgeted (own_model_evaluations counts the complete configurations priced: every merged, or for P = 1
// single-stage, stage-0 combination; DP suffixes are not counted). request.budget_evaluations counts the
// simulator runs under CostModel::Simulator. The optional wall-clock budget is also checked inside the DP;
// when a budget is spent the search stops and returns the best candidate so far (search_complete = false).
//
// MoE: planned as the activated dense model (Profiler time), memory on the real model without EP; the final
// plan gets apply_megatron_core_ep (and so does every candidate priced by the simulator).
//
// What it cannot express: uneven layer splits (Sailor's split is fixed per P), different micro-batch sizes
// per pipeline, stage-level data parallelism with unequal shares, recomputation, sequence parallelism,
// ZeRO, interleaving (the public planner does not plan them).
//
// Simplifications / deviations from the public code, and why:
//  - Geography: our cluster is one datacenter, so there is one region and every node is a zone; the
//    region-ordering and dollar-cost parts (get_regions_list, comm_cost, max_budget, min_throughput,
//    objective "iteration_cost") are not used. Objective: throughput, no cost limit.
//  - Network coefficients (Sailor fits bandwidth-vs-size polynomials per zone pair, GPU type and VM size)
//    are replaced by the cluster's link bandwidths (Profiler::intra_bw, nic_bw_per_gpu) and latency.
//  - Memory (check_stage_fits: 24 B/param + activations·(P-s) + 2-3 GB framework) is replaced by
//    Profiler::stage_memory_bytes with P - s micro-batches in flight (sim/model/memory.h).
//  - Memo key / DP state. Sailor keys solve_dp on the free GPUs per GPU type summed over the region's zones
//    (new_hash_string) and carves VMs out of per-zone counts, so it never sees nodes. We must keep TP groups
//    inside nodes and price same-node sends at NVLink speed, so the state stays per node, but canonical:
//    nodes of one class (same node group, hence GPU type and links, and same GPU count) are interchangeable,
//    and the DP sees them as "slots" sorted by free GPUs inside each class. The key is, per class, how many
//    nodes have each free count (a multiset, so states that differ by a permutation of identical nodes
//    share one entry); placement and fill order depend only on slots, so solve_dp is a function of the key
//    and a memo hit returns exactly what solving again would (the memo changes no result; tests compare
//    memo on/off). A memo entry stores only its first stage (replicas on its slots) and the entry of the rest;
//    concrete nodes are assigned once, at the end, by replaying the placements and the slot re-sorts from
//    the cluster's node order. (Zones = whole classes, Sailor's coarser key, would let a memoised suffix be
//    reused on a state where its TP groups do not fit in nodes.)
//  - Exact speed-ups that change no result: per-(type, stage) compute, gradient bytes and optimizer-update
//    times are priced once per (P, mbs) instead of per combination; hashed memo; no suffix copies on hits.
//  - The public find_tmp_degrees applies the speed-up rule only to types other than the first in
//    heterogeneous runs (type 0 gets its memory minimum only); we apply it to every type, as the paper says.
//  - merge_stages_get_time sets the update term to 0 for P > 1 (it is counted only for P = 1); we count
//    max_s update_s for every P, as the paper's iteration-time formula does.
//  - D runs up to the number of GPUs inclusive (the public loop stops one short, `dp < max_all_quotas`).
//  - Sailor's layer list includes the embedding and head as layers; here they ride with the first and last
//    transformer layer, so P ranges over 1..layers.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "planner/common/profile.h"
#include "planner/planner.h"

namespace arachne::planner {

class SailorPlanner : public Planner {
 public:
  struct Options {
    bool memoize = true;  // false: every DP sub-problem is solved afresh (tests compare the two)
  };
  struct Stats {
    long dp_calls = 0;    // solve_dp invocations
    long memo_hits = 0;   // of which answered from the memo
    long candidates = 0;  // (P, mbs, D) candidates with a feasible plan
  };

  SailorPlanner() = default;
  explicit SailorPlanner(Options options) : options_(options) {}
  std::string name() const override { return "sailor"; }
  PlanResult plan(const PlanRequest& request) override;
  const Stats& last_stats() const { return stats_; }

 private:
  Options options_;
  Stats stats_;
};

// Sailor's even split (get_stages): P half-open layer ranges, floor(L/P) layers each, the last L mod P one more.
std::vector<std::pair<int, int>> sailor_stages(int layers, int pp);
// TP candidates of a GPU type: 1, 2, 4, ... up to the smallest node of the type, dividing heads and kv_heads.
std::vector<int> sailor_tp_candidates(const Cluster& cluster, const ModelConfig& model, const std::string& gpu_type);
// The largest TP reached by the speed-up rule (each step >= 1.5x faster than the previous accepted TP).
int sailor_speedup_tp(const Profiler& profiler, const std::string& gpu_type, int begin, int end, int micro_batch,
                      const std::vector<int>& tps);
// The smallest TP whose stage fits in the type's memory with `in_flight` micro-batches; -1 when none does.
int sailor_memory_min_tp(const Profiler& profiler, const std::string& gpu_type, int begin, int end, int micro_batch,
                         double in_flight, const std::vector<int>& tps);

}  // namespace arachne::planner
