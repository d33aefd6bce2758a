#include "planner/baselines/amp/amp_planner.h"
#include "sim/hw/topology.h"
#include "tests/sim/test_support.h"
#include <cstdio>
using namespace arachne; using namespace arachne::planner;
TEST(AmpDbg, Big) {
  for (auto spec : {"A100-80:16x8,V100-32:16x4", "A100-80:64x8,V100-32:64x8"}) {
  Cluster c = load_cluster(spec, GpuCatalog::load_default());
  Topology t(c);
  for (auto mn : {"gpt3-13b", "gpt3-175b"}) {
  ModelConfig m = load_model(mn);
  PlanRequest r; r.cluster=&c; r.topo=&t; r.model=&m; r.budget_evaluations = 100000;
  AmpPlanner a; auto res = a.plan(r);
  printf("%s %s: evals %ld time %.3f s pred %g pipes %zu stages %zu tp %d mb %d\n", spec, mn, res.evaluations, res.planning_time_s, res.predicted_iteration_time_s,
    res.plan? res.plan->pipelines.size():0, res.plan? res.plan->pipelines[0].stages.size():0, res.plan? res.plan->pipelines[0].stages[0].groups[0].tp:0, res.plan? res.plan->pipelines[0].micro_batch:0);
  }}
}
