// Expert parallelism in memory and gradient reduction (issue 3 groundwork): routed experts are sharded by
// EP, and their gradients are reduced only within the expert-data-parallel group.
#include <gtest/gtest.h>

#include "sim/exec/simulate.h"
#include "sim/plan/plan_yaml.h"

namespace arachne {
namespace {

SimResult run_mixtral(int ep) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const ModelConfig m = load_model("mixtral-8x7b");
  Shorthand s;
  s.dp = 8;
  s.ep = ep;
  s.micro_batch = 1;
  s.global_batch = 8;
  s.recompute = Recompute::Full;
  Plan p = plan_from_shorthand(s, c, m);
  p.overlap_grad_reduce = false;  // the whole reduction is exposed, so dp_comm measures its volume
  const Topology topo(c);
  SimOptions o;
  o.ignore_memory = true;
  return simulate_iteration(c, topo, m, p, o);
}

TEST(MoeExpertParallel, ExpertWeightsAreShardedByEp) {
  const SimResult ep1 = run_mixtral(1), ep8 = run_mixtral(8);
  // Mixtral-8x7B: 46.70 B parameters, of which 32 layers x 8 experts x 3 x 4096 x 14336 = 45.10 B are
  // routed experts (Jiang et al. 2024). With EP 8 a GPU keeps 1 of 8 experts: 46.70 - 7/8 x 45.10 = 7.24 B.
  const double experts = 32.0 * 8 * 3 * 4096 * 14336;
  const double total = ep1.memory.weights / 2;  // bf16 weights
  EXPECT_NEAR(total, 46.70e9, 0.01 * 46.70e9);
  EXPECT_NEAR(ep8.memory.weights / 2, total - 7.0 / 8 * experts, 0.01 * total);
  // Gradients and optimizer state follow the weights.
  EXPECT_NEAR(ep8.memory.gradients / ep1.memory.gradients, ep8.memory.weights / ep1.memory.weights, 1e-9);
  EXPECT_NEAR(ep8.memory.optimizer / ep1.memory.optimizer, ep8.memory.weights / ep1.memory.weights, 1e-9);
}

TEST(MoeExpertParallel, ExpertGradientsStayInTheExpertDataParallelGroup) {
  // DP 8 = EP 8: every expert lives on exactly one GPU, so only the dense ~3.5 % of the gradients is
  // all-reduced; with EP 1 all 46.7 B are.
  const SimResult ep1 = run_mixtral(1), ep8 = run_mixtral(8);
  const double nv1 = ep1.bytes[static_cast<int>(LinkClass::NvLink)];
  const double nv8 = ep8.bytes[static_cast<int>(LinkClass::NvLink)];
  EXPECT_GT(nv1, 0);
  EXPECT_LT(nv8, 0.1 * nv1);
  EXPECT_LT(ep8.breakdown.dp_comm, ep1.breakdown.dp_comm);
}

}  // namespace
}  // namespace arachne
