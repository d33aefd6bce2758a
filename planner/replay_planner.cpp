#include "planner/replay_planner.h"

#include "sim/hw/topology.h"

namespace arachne::planner {

ReplanCallback replan_callback(Planner& planner, const ModelConfig& model, const ReplanSettings& settings,
                               const std::function<void()>& on_plan) {
  return [&planner, &model, settings, on_plan](const Cluster& snap, long batch, const LastPlan& last) {
    if (on_plan) on_plan();
    const Topology topo(snap);
    PlanRequest req;
    req.cluster = &snap;
    req.topo = &topo;
    req.model = &model;
    req.global_batch = batch;
    req.budget_evaluations = settings.budget_evaluations;
    req.budget_wall_s = settings.budget_wall_s;
    req.seed = settings.seed;
    req.arachne_policy = settings.arachne_policy;
    if (settings.warm_start) {  // the plan the job runs: a warm start for planners that use it
      req.previous_plan = last.plan;
      req.previous_cluster = last.cluster;
    }
    const PlanResult r = planner.plan(req);
    ReplanOutcome o;
    o.plan = r.plan;
    o.planning_time_s = r.planning_time_s;
    o.reason = r.reason;
    return o;
  };
}

}  // namespace arachne::planner
