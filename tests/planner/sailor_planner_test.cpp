#include <gtest/gtest.h>
#include "tests/sim/test_support.h"
#include <cstdio>
#include "planner/baselines/sailor/sailor_planner.h"
#include "planner/common/profile.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/plan/plan_yaml.h"
namespace arachne::planner {
TEST(SailorPlanner, Explore) {
  for (const char* spec : {"A100-80:1x4", "V100-32:1x4", "T4:1x4", "L4:1x4", "A10:1x4", "V100-16:1x4", "A100-40:1x4"}) {
    const Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
    const ModelConfig m = test::small_gpt_model(16);
    Profiler p(c, m);
    std::string type = c.groups[0].gpu;
    for (int mbs : {1, 4}) {
      double t1 = p.stage_time_s(0, 8, ProfileKey{type, 1, (double)mbs});
      double t2 = p.stage_time_s(0, 8, ProfileKey{type, 2, (double)mbs});
      double t4 = p.stage_time_s(0, 8, ProfileKey{type, 4, (double)mbs});
      std::printf("%s mbs%d t1 %.4g t2 %.4g t4 %.4g s12 %.3f s24 %.3f\n", spec, mbs, t1, t2, t4, t1 / t2, t2 / t4);
    }
    const Topology t(c);
    PlanRequest r; r.cluster = &c; r.topo = &t; r.model = &m; r.global_batch = 16;
    SailorPlanner sp;
    PlanResult res = sp.plan(r);
    std::printf("%s plan %d reason %s pred %g evals %ld dp_calls %ld hits %ld\n", spec, (int)res.plan.has_value(), res.reason.c_str(), res.predicted_iteration_time_s, res.evaluations, sp.last_stats().dp_calls, sp.last_stats().memo_hits);
    if (res.plan) std::printf("%s\n", plan_to_yaml(*res.plan, c).c_str());
  }
}
}  // namespace arachne::planner
