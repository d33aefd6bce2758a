// Lazy loading of the learned planner's Torch module (planner/learned/module_abi.h).
//
// `arachne` links no Torch code: a command or planner that needs the policy network calls
// learned_module(), which dlopen()s libarachne_learned_module.so on first use; every other command starts
// without LibTorch (~1.4 s of loading saved). Where the module is looked for: $ARACHNE_LEARNED_MODULE if
// set, else beside the running executable (the build directory holds both). A module that is missing,
// fails to load or comes from another build is bad input (InputError, exit 2) naming the path and the fix.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "planner/learned/module_abi.h"

namespace arachne::planner {

// Environment variable that overrides where the module is looked for.
inline constexpr const char* kLearnedModuleEnv = "ARACHNE_LEARNED_MODULE";

// $ARACHNE_LEARNED_MODULE if set and non-empty, else ARACHNE_LEARNED_MODULE_FILE in the directory of the
// running executable.
std::string learned_module_path();

// The module at learned_module_path(), loaded on the first call (thread-safe); later calls return the
// same table. Throws InputError("learned planner", reason) when it cannot be loaded.
const ArachneLearnedModule& learned_module();

// Loads the module at `path` (not cached; a loaded module stays loaded for the life of the process, as
// LibTorch cannot be unloaded safely). Throws InputError("learned planner", reason).
const ArachneLearnedModule& load_learned_module(const std::string& path);

// A structure-policy network held by the module (seeded construction; see structure_policy.h).
class LearnedPolicy {
 public:
  struct Shape {
    int64_t features = 16;
    int64_t hidden = 64;
    int64_t layers = 2;
  };
  LearnedPolicy(const ArachneLearnedModule& module, const Shape& shape, uint64_t seed);

  // One logit per candidate; `rows` holds candidates x features floats, row-major.
  std::vector<float> score(const std::vector<float>& rows) const;
  int64_t features() const;

 private:
  struct Release {
    const ArachneLearnedModule* module;
    void operator()(ArachnePolicy* p) const { module->policy_destroy(p); }
  };
  const ArachneLearnedModule* module_;
  std::unique_ptr<ArachnePolicy, Release> policy_;
};

}  // namespace arachne::planner
