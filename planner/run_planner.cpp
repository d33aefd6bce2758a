#include "planner/run_planner.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "planner/arachne/arachne_planner.h"
#include "sim/io/input_error.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {

PlannerRun run_planner(Planner& planner, const PlanRequest& request) {
  PlannerRun run;
  run.result = planner.plan(request);
  run.label = planner.name() == "arachne" ? arachne_label(request.arachne_templates) : planner.name();
  if (!run.result.extension.empty()) run.label += "+" + run.result.extension;
  if (!run.result.plan) return run;
  const long global = request.global_batch > 0 ? request.global_batch : request.model->global_batch;
  try {
    validate_plan(*run.result.plan, *request.cluster, *request.model, global, planner.name());
  } catch (const InputError& e) {
    throw std::runtime_error("planner " + planner.name() + " returned an invalid plan: " + e.what());
  }
  SimOptions opt;
  opt.seed = request.seed;
  run.sim = simulate_iteration(*request.cluster, *request.topo, *request.model, *run.result.plan, opt);
  return run;
}

std::string plan_summary(const Plan& plan) {
  std::vector<std::pair<std::string, int>> runs;
  for (const Pipeline& p : plan.pipelines) {
    std::ostringstream s;
    s << p.stages.size() << (p.stages.size() == 1 ? " stage" : " stages") << " tp ";
    for (size_t j = 0; j < p.stages.size(); ++j) {
      s << (j ? "," : "");
      // One TP group: its degree; n groups of one degree (stage-level data parallelism): "tp*n".
      const Stage& st = p.stages[j];
      const bool uniform = std::all_of(st.groups.begin(), st.groups.end(), [&](const TpGroup& g) { return g.tp == st.groups[0].tp; });
      if (uniform) {
        s << st.groups[0].tp;
        if (st.groups.size() > 1) s << "*" << st.groups.size();
      } else {
        for (size_t g = 0; g < st.groups.size(); ++g) s << (g ? "+" : "") << st.groups[g].tp;
      }
    }
    s << " mb " << p.micro_batch << "x" << p.micro_batches;
    if (!runs.empty() && runs.back().first == s.str()) ++runs.back().second;
    else runs.emplace_back(s.str(), 1);
  }
  std::ostringstream out;
  out << plan.num_gpus() << " GPUs: ";
  for (size_t i = 0; i < runs.size(); ++i) {
    if (i == 4) {
      out << " + ...";
      break;
    }
    out << (i ? " + " : "") << runs[i].second << " x [" << runs[i].first << "]";
  }
  return out.str();
}

}  // namespace arachne::planner
