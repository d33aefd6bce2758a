#include <gtest/gtest.h>
#include "tests/sim/test_support.h"
#include <cstdio>
#include "planner/baselines/sailor/sailor_planner.h"
#include "planner/common/profile.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/plan/plan_yaml.h"
namespace arachne::planner {
void run(const char* spec, const ModelConfig& m, long gb) {
    const Cluster c = load_cluster(spec, GpuCatalog::load_default());
    const Topology t(c);
    PlanRequest r; r.cluster = &c; r.topo = &t; r.model = &m; r.global_batch = gb;
    SailorPlanner sp;
    PlanResult res = sp.plan(r);
    std::printf("%s plan %d reason %s pred %g evals %ld dp_calls %ld hits %ld cand %ld\n", spec, (int)res.plan.has_value(), res.reason.c_str(), res.predicted_iteration_time_s, res.evaluations, sp.last_stats().dp_calls, sp.last_stats().memo_hits, sp.last_stats().candidates);
    if (res.plan) std::printf("%s\n", plan_to_yaml(*res.plan, c).c_str());
}
TEST(SailorPlanner, Explore) {
  ModelConfig m = test::small_gpt_model(2);
  m.layers = 1;
  Cluster c = parse_cluster_spec("A100-80:1x4", GpuCatalog::load_default());
  Profiler p(c, m);
  for (int mbs : {1, 2}) for (int tp : {1, 2, 4})
    std::printf("mbs %d tp %d mem %.4g GB time %.4g\n", mbs, tp, p.stage_memory_bytes(0, 1, ProfileKey{"A100-80", tp, (double)mbs}, 1) / 1e9, p.stage_time_s(0, 1, ProfileKey{"A100-80", tp, (double)mbs}));
}
}  // namespace arachne::planner
