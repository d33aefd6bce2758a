// Plans from planner decisions, and the Megatron-Core EP rule (see plan_builder.h).
#include "planner/common/plan_builder.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/plan/plan_yaml.h"

namespace arachne::planner {

Plan build_plan(std::vector<PipelineSpec>&& pipelines, const Cluster& cluster, Recompute recompute, Schedule schedule,
                bool selectors) {
  Plan plan;
  plan.schedule = schedule;
  plan.recompute = recompute;
  plan.pipelines.reserve(pipelines.size());
  for (PipelineSpec& ps : pipelines) {
    Pipeline& p = plan.pipelines.emplace_back();
    p.micro_batch = ps.micro_batch;
    p.micro_batches = ps.micro_batches;
    p.stages.reserve(ps.stages.size());
    for (StageSpec& ss : ps.stages) {
      Stage& st = p.stages.emplace_back();
      st.layer_begin = ss.layer_begin;
      st.layer_end = ss.layer_end;
      st.groups.reserve(ss.groups.size());
      for (GroupSpec& gs : ss.groups) {
        TpGroup& g = st.groups.emplace_back();
        if (selectors) g.selector = format_gpu_selector(gs.gpus, cluster);
        g.gpus = std::move(gs.gpus);
        g.tp = gs.tp;
        g.share = gs.share;
      }
    }
  }
  return plan;
}

Plan build_plan(const std::vector<PipelineSpec>& pipelines, const Cluster& cluster, Recompute recompute, Schedule schedule,
                bool selectors) {
  return build_plan(std::vector<PipelineSpec>(pipelines), cluster, recompute, schedule, selectors);
}

namespace {

// The aligned blocks of e pipelines are replicas as far as EP needs (validate_plan): the same depth and
// micro-batch count, and stage j with the same layer range and number of TP groups.
bool blocks_match(const Plan& plan, int j, int e) {
  const int np = static_cast<int>(plan.pipelines.size());
  if (np % e != 0) return false;
  for (int first = 0; first < np; first += e) {
    const Pipeline& a = plan.pipelines[first];
    if (j >= static_cast<int>(a.stages.size())) return false;
    for (int q = first + 1; q < first + e; ++q) {
      const Pipeline& b = plan.pipelines[q];
      if (b.stages.size() != a.stages.size() || b.micro_batches != a.micro_batches) return false;
      if (b.stages[j].layer_begin != a.stages[j].layer_begin || b.stages[j].layer_end != a.stages[j].layer_end ||
          b.stages[j].groups.size() != a.stages[j].groups.size())
        return false;
    }
  }
  return true;
}

}  // namespace

void apply_megatron_core_ep(Plan& plan, const ModelConfig& model) {
  if (!model.moe || plan.pipelines.empty()) return;
  const int experts = model.moe->experts;
  const int np = static_cast<int>(plan.pipelines.size());
  size_t max_stages = 0;
  for (const Pipeline& p : plan.pipelines) max_stages = std::max(max_stages, p.stages.size());
  for (int j = 0; j < static_cast<int>(max_stages); ++j) {
    // Megatron-Core: EP is carved out of data parallelism, so it must divide the DP degree and the
    // expert count (megatron/core/parallel_state.py: data_parallel_size % expert_model_parallel_size == 0,
    // num_moe_experts % expert_model_parallel_size == 0). Largest such EP whose blocks hold equal layers.
    int ep = 1;
    for (int e = std::gcd(experts, np); e > 1; --e) {
      if (experts % e != 0 || np % e != 0) continue;
      if (blocks_match(plan, j, e)) {
        ep = e;
        break;
      }
    }
    for (Pipeline& p : plan.pipelines) {
      if (j >= static_cast<int>(p.stages.size())) continue;
      Stage& st = p.stages[j];
      st.experts.clear();
      if (ep > 1) {
        st.ep = ep;
        st.ep_scope = EpScope::Pipelines;
      } else {
        // Pipelines of different structure: a stage's own data parallelism (several TP groups, Metis-style
        // stage-level DP) is the only DP a Megatron-Core user could carve EP out of.
        const int groups = static_cast<int>(st.groups.size());
        const int e = std::gcd(experts, groups);
        st.ep = e;
        st.ep_scope = e > 1 ? EpScope::Stage : EpScope::Pipelines;
      }
    }
  }
}

std::vector<long> split_proportional(long total, const std::vector<double>& weights, long min_each) {
  const size_t n = weights.size();
  std::vector<long> out(n, 0);
  if (n == 0) return out;
  long base = 0;
  if (min_each > 0 && total >= min_each * static_cast<long>(n)) {
    std::fill(out.begin(), out.end(), min_each);
    base = min_each * static_cast<long>(n);
  }
  const long rest = total - base;
  double wsum = 0;
  for (const double w : weights) wsum += std::max(0.0, w);
  std::vector<double> exact(n);
  for (size_t i = 0; i < n; ++i)
    exact[i] = wsum > 0 ? rest * std::max(0.0, weights[i]) / wsum : static_cast<double>(rest) / static_cast<double>(n);
  long assigned = 0;
  for (size_t i = 0; i < n; ++i) {
    const long f = static_cast<long>(std::floor(exact[i]));
    out[i] += f;
    assigned += f;
  }
  // Largest remainder (Hamilton); ties to the lower index.
  std::vector<double> remainder(n);
  for (size_t i = 0; i < n; ++i) remainder[i] = exact[i] - std::floor(exact[i]);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return remainder[a] > remainder[b] || (remainder[a] == remainder[b] && a < b); });
  for (size_t k = 0; assigned < rest; ++k, ++assigned) out[order[k % n]] += 1;
  return out;
}

}  // namespace arachne::planner
