#include <gtest/gtest.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "tests/sim/test_support.h"
#include "planner/oracle/oracle_planner.h"
#include "planner/baselines/megatron/megatron_planner.h"
#include "sim/plan/plan_yaml.h"
#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
namespace arachne::planner {
namespace {
TEST(OraclePlanner, Count) {
  std::vector<std::string> specs = {"A100-80:1x8", "A100-80:2x4", "A100-80:1x4,V100-32:1x4", "A100-80:1x2,T4:2x1", "V100-32:8x1", "A100-80:4x2"};
  if (std::getenv("OSPEC")) specs = {std::getenv("OSPEC")};
  for (const std::string& spec_s : specs) { const char* spec = spec_s.c_str();
    const Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
    const Topology t(c);
    const ModelConfig m = test::small_gpt_model(16);
    PlanRequest r; r.cluster=&c; r.topo=&t; r.model=&m; r.global_batch=16; r.budget_evaluations=std::getenv("OB")?atol(std::getenv("OB")):300;
    OraclePlanner o;
    const PlanResult res = o.plan(r);
    MegatronPlanner mg; const PlanResult mr = mg.plan(r);
    std::printf("megatron %.6f\n", mr.predicted_iteration_time_s);
    if (res.plan) { const SimResult q = simulate_iteration(c, t, m, *res.plan, SimOptions{}); const Breakdown& b = q.breakdown;
      std::printf("  breakdown compute %.5f tp %.5f pp %.5f dp %.5f bubble %.5f opt %.5f\n", b.compute, b.tp_comm, b.pp_comm, b.dp_comm, b.bubble, b.optimizer); }
    if (res.plan && std::getenv("OY")) std::printf("%s\n", plan_to_yaml(*res.plan, c).c_str());
    std::printf("%s: structures %ld candidates %ld sims %ld time %.3f s pred %.6f complete %d %s\n", spec, o.stats().structures, o.stats().candidates, o.stats().simulated, res.planning_time_s, res.predicted_iteration_time_s, (int)res.search_complete, res.reason.c_str());
  }
}
}
}
