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
//   end >= sum_{j<k} min F_j + m (F_w + B_w) + sum_{j<k} min B_j + (k > 0 ? min_g O_{0,g} : O_w).
// The bound is the largest over workers. Transfers, pipeline bubbles beyond these chains, gradient
// reduction, expert all-to-alls and expert kernels only add time, so they are left out (>= 0). F and B are
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
#include <map>
#include <unordered_map>
#include <optional>
#include <tuple>
#include <vector>

#include "sim/hw/cluster.h"
#include "sim/model/layer_costs.h"
#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne::planner {

// One TP group's per-micro-batch task times and its optimizer step.
struct GroupTimes {
  double forward_s = 0;
  double backward_s = 0;
  double optimizer_s = 0;
};

// Lower bound on the end of the last worker of one 1F1B pipeline with m micro-batches; stages[k] lists the
// stage's groups.
double pipeline_lower_bound(const std::vector<std::vector<GroupTimes>>& stages, int m);

class LowerBound {
 public:
  LowerBound(const Cluster& cluster, const ModelConfig& model);

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

  // A lower bound on simulate_iteration(plan).iteration_time_s; nullopt when the simulator would report the
  // plan out of memory. Plans other than 1F1B without interleaving get 0 (no bound).
  std::optional<double> plan_bound(const Plan& plan) const;

 private:
  struct Table {  // per-layer prefix sums of pass times, plus the embedding and the head
    std::vector<double> fwd, bwd, fwd_ep, bwd_ep;  // size layers + 1
    double emb_f = 0, emb_b = 0, head_f = 0, head_b = 0;
  };
  const Table& table(int node_group, int tp, double samples, Recompute rc) const;
  Table build_table(int node_group, int tp, double samples, Recompute rc) const;

  const Cluster& cluster_;
  const ModelConfig& model_;
  std::vector<double> capacity_;  // per node group: GPU memory (bytes)
  mutable std::map<std::tuple<int, int, double, int>, Table> tables_;
  mutable std::map<std::tuple<int, int, int, int>, std::vector<double>> floors_;
  mutable std::map<int, std::vector<double>> params_prefix_;  // per tp: parameters per rank of layers [0, l)
  // Memory of a group as fixed + in_flight x per_micro_batch (stage_memory is affine in in_flight), cached.
  struct MemoryLine {
    double fixed = 0, per_micro_batch = 0, optimizer = 0;
  };
  mutable std::unordered_map<std::uint64_t, MemoryLine> memory_;  // packed key (lookups only)
  mutable std::unordered_map<std::uint64_t, const Table*> table_index_;  // integer samples: packed key
};

}  // namespace arachne::planner
