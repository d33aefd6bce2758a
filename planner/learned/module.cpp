// The Torch module's entry point (module_abi.h): the structure policy behind a C table. Every function
// catches what Torch throws and reports it through `err`, so no exception crosses into the host.
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdio>
#include <exception>

#include "planner/learned/module_abi.h"
#include "planner/learned/structure_policy.h"

struct ArachnePolicy {
  arachne::learned::StructurePolicy net{nullptr};
};

namespace {

void report(const char* what, char* err, size_t err_len) {
  if (err != nullptr && err_len > 0) std::snprintf(err, err_len, "%s", what);
}

ArachnePolicy* policy_create(int64_t features, int64_t hidden, int64_t layers, uint64_t seed, char* err,
                             size_t err_len) {
  if (features < 1 || hidden < 1 || layers < 0) {
    report("policy shape must have features >= 1, hidden >= 1, layers >= 0", err, err_len);
    return nullptr;
  }
  try {
    auto* p = new ArachnePolicy;
    p->net = arachne::learned::make_structure_policy({features, hidden, layers}, seed);
    p->net->eval();
    return p;
  } catch (const std::exception& e) {
    report(e.what(), err, err_len);
    return nullptr;
  }
}

int64_t policy_features(const ArachnePolicy* p) { return p->net->options().features; }

int policy_score(const ArachnePolicy* p, const float* x, int64_t candidates, float* out, char* err, size_t err_len) {
  if (candidates < 1) {
    report("no candidates to score", err, err_len);
    return 1;
  }
  try {
    torch::NoGradGuard no_grad;
    arachne::learned::StructurePolicy net = p->net;  // a shared handle: forward() is not const
    const int64_t f = net->options().features;
    // from_blob does not copy: the host's array is only read, for the duration of this call.
    const torch::Tensor input = torch::from_blob(const_cast<float*>(x), {candidates, f}, torch::kFloat32);
    const torch::Tensor logits = net->forward(input).contiguous();
    const float* y = logits.data_ptr<float>();
    for (int64_t i = 0; i < candidates; ++i) out[i] = y[i];
    return 0;
  } catch (const std::exception& e) {
    report(e.what(), err, err_len);
    return 1;
  }
}

void policy_destroy(ArachnePolicy* p) { delete p; }

const ArachneLearnedModule kModule = {
    ARACHNE_LEARNED_ABI_VERSION, ARACHNE_VERSION, TORCH_VERSION, policy_create, policy_features, policy_score,
    policy_destroy,
};

}  // namespace

extern "C" const ArachneLearnedModule* arachne_learned_module() { return &kModule; }
