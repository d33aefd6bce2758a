// EP variants of a plan (see ep_variants.h).
#include "planner/oracle/ep_variants.h"

namespace arachne::planner {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

}  // namespace

// EP variants of a plan of an MoE model (the profiler cannot tell them apart: it prices the activated dense
// FFN): ep_scope pipelines with every divisor e > 1 of the experts that the data parallelism of identical
// consecutive pipelines admits (blocks of e pipelines with equal layer ranges, Megatron-Core), largest first;
// ep_scope stage with every divisor e > 1 of the experts dividing a stage's GPUs; finally ep = 1.
std::vector<Plan> ep_variants(const Plan& base, const ModelConfig& model) {
  const ModelConfig& model_ = model;
  std::vector<Plan> out;
  if (!model_.moe) {
    out.push_back(base);
    return out;
  }
  const int np = static_cast<int>(base.pipelines.size());
  const std::vector<int> de = divisors(model_.moe->experts);
  auto blocks_ok = [&](int e) {
    if (np % e != 0) return false;
    for (int first = 0; first < np; first += e)
      for (int q = first + 1; q < first + e; ++q) {
        // Megatron-Core's EP ranks are data-parallel replicas: identical pipelines (same micro-batches, same
        // layers, same TP groups shape). Validation only asks for equal layers, but the all-to-all pairs the
        // ranks micro-batch by micro-batch, so unequal replicas cannot exchange tokens in step.
        const Pipeline& pa = base.pipelines[first];
        const Pipeline& pb = base.pipelines[q];
        if (pa.micro_batch != pb.micro_batch || pa.micro_batches != pb.micro_batches) return false;
        const auto& a = pa.stages;
        const auto& b = pb.stages;
        if (a.size() != b.size()) return false;
        for (size_t j = 0; j < a.size(); ++j) {
          if (a[j].layer_begin != b[j].layer_begin || a[j].layer_end != b[j].layer_end) return false;
          if (a[j].groups.size() != b[j].groups.size()) return false;
          for (size_t k = 0; k < a[j].groups.size(); ++k)
            if (a[j].groups[k].tp != b[j].groups[k].tp || a[j].groups[k].share != b[j].groups[k].share) return false;
        }
      }
    return true;
  };
  for (auto it = de.rbegin(); it != de.rend(); ++it) {
    if (*it <= 1 || !blocks_ok(*it)) continue;
    Plan p = base;
    for (Pipeline& pl : p.pipelines)
      for (Stage& st : pl.stages) {
        st.ep = *it;
        st.ep_scope = EpScope::Pipelines;
      }
    out.push_back(std::move(p));
  }
  for (auto it = de.rbegin(); it != de.rend(); ++it) {
    if (*it <= 1) continue;
    Plan p = base;
    bool any = false;
    for (Pipeline& pl : p.pipelines)
      for (Stage& st : pl.stages) {
        int gpus = 0;
        for (const TpGroup& g : st.groups) gpus += static_cast<int>(g.gpus.size());
        if (gpus % *it != 0) continue;
        st.ep = *it;
        st.ep_scope = EpScope::Stage;
        any = true;
      }
    if (any) out.push_back(std::move(p));
  }
  out.push_back(base);
  return out;
}

}  // namespace arachne::planner
