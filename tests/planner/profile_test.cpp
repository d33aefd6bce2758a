// The planners' profiler stand-in (planner/common/profile.h) prices a stage's TP collectives as the simulator
// does: the same NCCL ring inside the node, per-call overhead, and the backward's all-reduces beside their
// weight-gradient GEMMs. Checked against the pass costs the simulator builds for the same stage
// (sim/exec/stage_work.h), which are independent code paths over the same model: a planner that profiles a
// plan must not see other TP times than the simulator it is judged by.
#include <gtest/gtest.h>

#include "planner/common/profile.h"
#include "sim/exec/stage_work.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/plan/plan.h"
#include "sim/plan/plan_yaml.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

struct StageTp {
  double forward = 0, backward = 0;
};

// The simulator's TP time of the single stage of a TP-only plan (pipeline depth 1).
StageTp simulator_tp(const Cluster& c, const ModelConfig& m, int tp, int micro_batch, Recompute rc) {
  Shorthand sh;
  sh.tp = tp;
  sh.pp = 1;
  sh.dp = 1;
  sh.micro_batch = micro_batch;
  sh.global_batch = m.global_batch;
  sh.recompute = rc;
  const Plan plan = plan_from_shorthand(sh, c, m);
  const Topology topo(c);
  const StageWork sw = build_stage_work(c, topo, m, plan);
  const ChunkCost& cc = sw.workers.at(0).chunks.at(0);
  return {cc.forward.tp_closed_form_s, cc.backward.tp_closed_form_s};
}

// The profiler's TP time of the same stage: every layer plus the embedding and the head.
StageTp profiler_tp(const Cluster& c, const ModelConfig& m, int tp, int micro_batch, Recompute rc) {
  const Profiler prof(c, m);
  const ProfileKey key{c.groups.front().gpu, tp, static_cast<double>(micro_batch), rc};
  StageTp t;
  auto add = [&t](const LayerProfile& p) {
    t.forward += p.tp_comm_forward_s;
    t.backward += p.tp_comm_backward_s;
  };
  for (int l = 0; l < m.layers; ++l) add(prof.layer(l, key));
  add(prof.embedding(key));
  add(prof.head(key));
  return t;
}

TEST(Profiler, TpCollectivesCostWhatTheSimulatorCharges) {
  for (const char* spec : {"A100-80:1x8", "V100-32:1x8"}) {
    const Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
    const ModelConfig m = test::small_gpt_model(16);
    for (int tp : {2, 4, 8})
      for (int mb : {1, 4})
        for (Recompute rc : {Recompute::None, Recompute::Full}) {
          const StageTp sim = simulator_tp(c, m, tp, mb, rc);
          const StageTp prof = profiler_tp(c, m, tp, mb, rc);
          ASSERT_GT(sim.forward, 0.0);
          ASSERT_GT(sim.backward, 0.0);
          // Sums of the same per-call terms in another order: equal to rounding.
          EXPECT_NEAR(prof.forward, sim.forward, 1e-9 * sim.forward) << spec << " tp" << tp << " mb" << mb;
          EXPECT_NEAR(prof.backward, sim.backward, 1e-9 * sim.backward) << spec << " tp" << tp << " mb" << mb;
        }
  }
}

// The overlap matters: the backward's input-gradient all-reduces of QKV and fc1 hide behind their
// weight-gradient GEMMs, so without recompute the backward exposes less TP time than the forward (two
// blocking all-reduces per layer in both directions, Megatron-LM's async TP all-reduce).
TEST(Profiler, BackwardTpTimeIsPartlyHiddenBehindWeightGradients) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const ModelConfig m = test::small_gpt_model(16);
  const Profiler prof(c, m);
  const LayerProfile& p = prof.layer(0, ProfileKey{"A100-80", 8, 8.0, Recompute::None});
  EXPECT_GT(p.tp_comm_forward_s, 0.0);
  EXPECT_LT(p.tp_comm_backward_s, p.tp_comm_forward_s);
}

}  // namespace
}  // namespace arachne::planner
