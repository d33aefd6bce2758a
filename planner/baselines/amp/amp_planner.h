// `amp`: AMP (Dacheng Li, Hongyi Wang, Eric Xing, Hao Zhang, "AMP: Automatically Finding Model Parallel
// Strategies with Heterogeneity Awareness", NeurIPS 2022, arXiv:2210.07297). Public code: github.com/DachengLi1/AMP
// (directory DeepSpeed/DeepSpeedExamples/Megatron-LM-v1.1.5-3D_parallelism/, cited below as AMP/<file>), and
// the heterogeneous-cluster port in github.com/eth-easl/sailor, sailor/Planner/baselines/AMP/ (cited as
// sailor-AMP/<file>).
//
// Algorithm (AMP/het_cluster.py, the heterogeneous-cluster experiment driver; sailor-AMP/amp_planner.py)
//  1. Search space: every (tp, dp, micro_batch) of AMP/sa.py amp_no_placement_strategy — tp ("mp", h) over the
//     divisors of the GPUs per node, dp ("w") over the divisors of N/tp that divide the global batch, micro-batch
//     over the divisors of global_batch/dp — with pp = N/(tp*dp): AMP always uses all N GPUs. Here tp also
//     divides heads and kv_heads, the GPUs per node is the gcd of the node sizes (AMP assumes equal nodes,
//     M x N) and pp <= layers (sailor-AMP/amp_planner.py skips pp > layers). Enumerated tp, then dp, then
//     micro-batch, each ascending.
//  2. Device placement: AMP's default rank map (AMP/cost_het_cluster.py predict(), config == -1): rank r is
//     the r-th GPU in node listing order, and ranks are DeepSpeed's (pp, dp, mp) grid with mp fastest
//     (AMP/amp_utils.py axis2rank: rank = mp + tp*dp_index + tp*dp*pp_index). So a stage is a contiguous block
//     of tp*dp GPUs, its DP replicas are neighbours and the pipeline crosses nodes. (AMP's placement search,
//     sa.py backtrack/draw_fill, is not used by the heterogeneous experiment; not implemented.)
//  3. Layer partition (AMP/pipe.py, chosen in AMP/cost_het_cluster.py predict()): with one micro-batch per
//     pipeline, pipe_uniform (layers/pp each, the remainder to the first stages); otherwise pipe_ast, AMP's
//     dynamic program minimising pipe_cost = (B-1)*max_stage + sum of cut communication + sum of stages.
//     Here the embedding rides with the first and the head with the last stage (our plan schema), so every cut
//     is between transformer layers and carries the same activation (b*s*h), and the cut-communication sum
//     does not depend on where the cuts are. We take the min-max partition of the stage costs (planner/common
//     minmax_partition; ties: earlier cuts). It minimises the (B-1)*max_stage term; it is pipe_ast's optimum
//     only when the sum of stage costs does not depend on the cuts either (one GPU type per pipeline). When
//     per-layer costs differ between the stages' GPU types, pipe_ast can trade a slightly larger max stage for
//     a smaller sum: e.g. tp2 pp4 dp1 micro-batch 8 on A100-80:1x4,V100-32:1x4, where the best pipe_cost is
//     2e-5 (relative) below the min-max partition's (a deviation, planner/baselines/README.md).
//  4. Rank and trial (AMP/het_cluster.py lines 87-131): every configuration of the space is priced by the
//     cost model below (no cap: the public loop runs until amp_no_placement_strategy returns None), sorted by
//     predicted cost (stable: ties keep the enumeration order), and the top `trials` (10: the README's
//     `python het_cluster.py --full --budget 10`) are run as real trials. Here a trial is a simulation (one
//     evaluation of the request's budget); a trial that runs out of memory (the simulator's memory check)
//     gives no runtime. The fastest trial that fits is returned (ties: the better-ranked one); when none of
//     the trials fits there is no plan. predicted_iteration_time_s is AMP's own prediction for it.
//
// Cost model (AMP/cost_het_cluster.py; paper §3, "cost model"), per candidate with B = global/(dp*mb)
// micro-batches per pipeline:
//  - Compute, per layer ("cost_e"): the profile's forward+backward time of the layer (AMP profiles forward
//    and multiplies by 3) AVERAGED over the GPU types present, weighted by their share of the GPUs
//    (AMP/cost_het_cluster.py init_param: "average between different speed of GPUs", 0.75 x P3 + 0.25 x G4 —
//    the GPU shares of its 12 V100 + 4 T4 cluster; sailor-AMP/cost_amp.py uses the plain mean). AMP does not
//    know which GPU type runs which stage: that is its signature, and why it balances layers, not time, on a
//    mixed cluster. Profile = planner/common Profiler (activated dense pricing for MoE).
//  - TP all-reduce: the Profiler's closed-form per-layer TP collectives of the TP group's own node type (its
//    intra-node bandwidth), averaged over the stage's DP replicas as AMP averages cost_e over dp. (In AMP's
//    main results TP communication sits inside the profile, measured on the profiling node.)
//  - Pipeline p2p ("cost_c", AMP/cost_het_cluster.py get_cost_c): activation bytes of one micro-batch / the
//    slowest bandwidth among the tp rank pairs (stage j -> j+1) of a replica, averaged over replicas; charged
//    once per cut (pipe_cost adds cost_c[cut] once, no backward transfer, no latency).
//  - Pipeline time (AMP/pipe.py pipe_cost): (B-1) * max_stage + sum_stages + sum_cuts p2p.
//  - DP gradient all-reduce (AMP/cost_het_cluster.py dp_cost): 2(dp-1)/(dp * slowest) * gradient bytes of the
//    stage's layers per TP rank, the slowest link of the DP ring; the maximum over stages and TP ranks is
//    added to the pipeline time (not overlapped).
//  - Bandwidth of a rank pair: AMP's cluster_info gives each node [inter-node, intra-node] bandwidth and takes
//    min(inter(a), inter(b)) across nodes; here the slowest link capacity on the topology route between the
//    two GPUs (intra-node fabric, or the GPU's NIC port / leaf links), i.e. heterogeneity aware for bandwidth.
//  - No memory model: AMP's top predictions may not fit; the trials (step 4) find out, as real trials do.
//
// With CostModel::Simulator every candidate of the same space (with AMP's own partition) is simulated instead,
// in enumeration order, within the budget; out-of-memory candidates are skipped. MoE models: priced as their
// activated dense equivalent; the Megatron-Core EP rule (apply_megatron_core_ep) is applied to every plan
// before it is simulated (trials included) and to the returned plan.
//
// What it cannot express: compute heterogeneity (one averaged GPU), uneven DP replicas or pipelines of
// different shape, stage-level DP, recomputation, interleaving, sequence parallelism, ZeRO, idle GPUs.
// Simplifications / deviations from the public code: profiler stand-in instead of measured .npy profiles;
// embedding/head cannot form stages of their own (see 3); AMP/cost_het_cluster.py dp_cost takes the min of
// the ring links after its loop (an indentation slip: only the last pair counts) — here the min over all
// ring pairs, its evident intent; pipe_ast's book-keeping slip (it stores a sub-solution's cost without its
// cut communication) does not matter once the cut sum is constant; the sailor port's uniform partition
// (pipe_ds) and its dropping of nodes when the batch does not divide are not followed (the original AMP's
// pipe_ast is used; every GPU is used as in AMP); trials are simulations, and when none of them fits there is
// no plan (planner/baselines/README.md, "Deviations").
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "planner/common/profile.h"
#include "planner/planner.h"

namespace arachne::planner {

// One AMP configuration and its own-cost-model price.
struct AmpCandidate {
  int tp = 1, pp = 1, dp = 1;
  int micro_batch = 1, micro_batches = 1;
  std::vector<int> bounds;      // pp+1 layer boundaries of AMP's partition
  std::vector<double> stage_s;  // per-stage time of one micro-batch (averaged compute + TP comm)
  double p2p_s = 0;             // sum over cuts
  double pipeline_s = 0;        // (B-1)*max stage + sum stages + p2p
  double dp_sync_s = 0;
  double predicted_s = 0;       // pipeline_s + dp_sync_s
};

// AMP's analytic cost model on one cluster (all its GPUs, AMP's rank order).
class AmpCostModel {
 public:
  AmpCostModel(const Cluster& cluster, const Topology& topo, const ModelConfig& model);
  // Prices the configuration; nullopt (with *why) when it is not in AMP's space for this cluster/model.
  std::optional<AmpCandidate> price(int tp, int pp, int dp, int micro_batch, long global_batch,
                                    std::string* why = nullptr) const;
  // The plan of a priced candidate (1F1B, no recompute; no EP). GPU of (stage s, replica d, tp rank k) is the
  // rank s*tp*dp + d*tp + k in node listing order.
  Plan to_plan(const AmpCandidate& c) const;
  // The GPU-share weights of the types present (ordered by type name).
  const std::vector<std::pair<std::string, double>>& type_weights() const { return weights_; }
  int gpus_per_node_gcd() const { return node_gcd_; }

 private:
  const Cluster& cluster_;
  const Topology& topo_;
  const ModelConfig& model_;
  Profiler profiler_;
  std::vector<std::pair<std::string, double>> weights_;
  std::vector<std::string> type_of_gpu_;
  int node_gcd_ = 0;
  double link_bw(GpuId a, GpuId b) const;  // slowest link capacity on the route a -> b
};

class AmpPlanner : public Planner {
 public:
  struct Options {
    // Real trials of the best-ranked predictions (AMP/het_cluster.py `--budget`; the README runs
    // `python het_cluster.py --full --budget 10`). Each trial is one simulator evaluation.
    int trials = 10;
  };
  AmpPlanner() = default;
  explicit AmpPlanner(Options options) : options_(options) {}
  std::string name() const override { return "amp"; }
  PlanResult plan(const PlanRequest& request) override;

 private:
  Options options_;
};

}  // namespace arachne::planner
