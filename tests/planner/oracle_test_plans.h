// Random valid-looking plans for the oracle's tests, drawn independently of the oracle's enumeration: any
// free GPUs of a node (not only the lowest), any number of pipelines, stages, TP groups, layer cuts, integer
// shares, micro-batch sizes and counts.
#pragma once
#include <algorithm>
#include <random>
#include <vector>

#include "planner/common/plan_builder.h"
#include "sim/hw/cluster.h"
#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne::test {

// A plan of `global` samples on `c`: 1-4 pipelines (at most `global`) of 1-3 stages, each stage 1-2 TP groups
// of tp 1, 2 or 4 on free GPUs of one node each, random layer cuts; pipeline i takes n_i >= 1 samples
// (random split) as micro-batch b_i (a random divisor of n_i) x n_i / b_i micro-batches, each stage's
// micro-batch split in random integer shares; random recompute and ZeRO-1; MoE stages with two groups take
// EP 2 inside the stage half of the time. False when the draw does not fit the cluster (the caller validates
// the plan: e.g. a tp that does not divide the heads is drawn too).
inline bool random_plan(const Cluster& c, const ModelConfig& m, long global, std::mt19937_64& rng, Plan* out) {
  auto uni = [&](long lo, long hi) { return static_cast<int>(std::uniform_int_distribution<long>(lo, hi)(rng)); };
  std::vector<std::vector<GpuId>> free(c.nodes.size());
  for (const Node& n : c.nodes)
    for (int k = 0; k < n.gpus; ++k) free[n.id].push_back(n.first_gpu + k);
  for (auto& f : free) std::shuffle(f.begin(), f.end(), rng);
  const int P = uni(1, std::min(4L, global));
  std::vector<long> n(P, 1);
  for (long left = global - P; left > 0; --left) ++n[uni(0, P - 1)];
  std::vector<planner::PipelineSpec> pipes(P);
  for (int i = 0; i < P; ++i) {
    planner::PipelineSpec& p = pipes[i];
    std::vector<int> divs;
    for (int d = 1; d <= n[i]; ++d)
      if (n[i] % d == 0) divs.push_back(d);
    p.micro_batch = divs[uni(0, static_cast<long>(divs.size()) - 1)];
    p.micro_batches = static_cast<int>(n[i] / p.micro_batch);
    const int S = uni(1, std::min(3, m.layers));
    std::vector<int> cuts = {0, m.layers};
    while (static_cast<int>(cuts.size()) < S + 1) {
      const int x = uni(1, m.layers - 1);
      if (std::find(cuts.begin(), cuts.end(), x) == cuts.end()) cuts.push_back(x);
    }
    std::sort(cuts.begin(), cuts.end());
    for (int k = 0; k < S; ++k) {
      planner::StageSpec st;
      st.layer_begin = cuts[k];
      st.layer_end = cuts[k + 1];
      const int tp = 1 << uni(0, 2);
      const int groups = std::min(uni(1, 2), p.micro_batch);
      std::vector<int> samples(groups, 1);
      for (int left = p.micro_batch - groups; left > 0; --left) ++samples[uni(0, groups - 1)];
      for (int g = 0; g < groups; ++g) {
        std::vector<int> nodes;
        for (const Node& nd : c.nodes)
          if (static_cast<int>(free[nd.id].size()) >= tp) nodes.push_back(nd.id);
        if (nodes.empty()) return false;
        const int nd = nodes[uni(0, static_cast<long>(nodes.size()) - 1)];
        planner::GroupSpec gs;
        gs.gpus.assign(free[nd].end() - tp, free[nd].end());
        free[nd].resize(free[nd].size() - tp);
        gs.tp = tp;
        gs.share = static_cast<double>(samples[g]) / p.micro_batch;
        st.groups.push_back(gs);
      }
      p.stages.push_back(st);
    }
  }
  const Recompute rcs[3] = {Recompute::None, Recompute::Selective, Recompute::Full};
  Plan plan = planner::build_plan(pipes, c, rcs[uni(0, 2)]);
  plan.zero1 = uni(0, 1) == 1;
  if (m.moe)
    for (Pipeline& pl : plan.pipelines)
      for (Stage& st : pl.stages)
        if (st.groups.size() == 2 && uni(0, 1) == 1) {
          st.ep = 2;
          st.ep_scope = EpScope::Stage;
        }
  *out = std::move(plan);
  return true;
}

}  // namespace arachne::test
