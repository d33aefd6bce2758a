// Finding, loading and checking the learned planner's Torch module; see learned_module.h.
#include "planner/learned_module.h"

#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "sim/io/input_error.h"

namespace arachne::planner {

namespace {

constexpr const char* kWhere = "learned planner";

[[noreturn]] void fail(const std::string& reason) { throw InputError(kWhere, reason); }

std::string build_hint() {
  return std::string("build it with -DARACHNE_WITH_TORCH=ON (target arachne_learned_module) or point ") +
         kLearnedModuleEnv + " at it";
}

void* open_module(const std::string& path) {
  // RTLD_LOCAL: Torch's symbols stay out of the global namespace; RTLD_NOW: a broken module fails here.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    fail("cannot load the Torch module " + path + " (" + (why ? why : "unknown error") + "); " + build_hint());
  }
  return handle;
}

const ArachneLearnedModule& entry_table(void* handle, const std::string& path) {
  dlerror();
  void* sym = dlsym(handle, ARACHNE_LEARNED_ENTRY);
  if (sym == nullptr) fail(path + " is not an arachne learned-planner module (no symbol " ARACHNE_LEARNED_ENTRY ")");
  // POSIX guarantees that a function's address survives the round trip through void* (dlsym's contract).
  const auto entry = reinterpret_cast<ArachneLearnedEntry>(sym);
  const ArachneLearnedModule* table = entry();
  if (table == nullptr) fail(path + " returned no function table");
  return *table;
}

void check_compatible(const ArachneLearnedModule& m, const std::string& path) {
  if (m.abi_version != ARACHNE_LEARNED_ABI_VERSION)
    fail(path + " speaks module ABI " + std::to_string(m.abi_version) + ", this arachne expects " +
         std::to_string(ARACHNE_LEARNED_ABI_VERSION) + "; rebuild the module with this arachne");
  if (std::string(m.arachne_version) != ARACHNE_VERSION)
    fail(path + " was built for arachne " + m.arachne_version + ", this is " + ARACHNE_VERSION +
         "; rebuild the module with this arachne");
}

std::string executable_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

}  // namespace

std::string learned_module_path() {
  const char* env = std::getenv(kLearnedModuleEnv);
  if (env != nullptr && *env != '\0') return env;
  return (std::filesystem::path(executable_dir()) / ARACHNE_LEARNED_MODULE_FILE).string();
}

const ArachneLearnedModule& load_learned_module(const std::string& path) {
  void* handle = open_module(path);  // never closed: LibTorch does not support being unloaded
  const ArachneLearnedModule& table = entry_table(handle, path);
  check_compatible(table, path);
  return table;
}

const ArachneLearnedModule& learned_module() {
  // A function-local static is initialised once, thread-safely; a failed load throws and is retried
  // on the next call.
  static const ArachneLearnedModule& module = load_learned_module(learned_module_path());
  return module;
}

LearnedPolicy::LearnedPolicy(const ArachneLearnedModule& module, const Shape& shape, uint64_t seed)
    : module_(&module), policy_(nullptr, Release{&module}) {
  std::array<char, 512> err{};
  ArachnePolicy* p = module.policy_create(shape.features, shape.hidden, shape.layers, seed, err.data(), err.size());
  if (p == nullptr) throw std::runtime_error(std::string("learned policy: ") + err.data());
  policy_.reset(p);
}

int64_t LearnedPolicy::features() const { return module_->policy_features(policy_.get()); }

std::vector<float> LearnedPolicy::score(const std::vector<float>& rows) const {
  const int64_t f = features();
  if (rows.empty() || rows.size() % static_cast<size_t>(f) != 0)
    throw std::invalid_argument("learned policy: " + std::to_string(rows.size()) +
                                " floats are not a whole number of rows of " + std::to_string(f) + " features");
  const int64_t candidates = static_cast<int64_t>(rows.size()) / f;
  std::vector<float> out(static_cast<size_t>(candidates));
  std::array<char, 512> err{};
  if (module_->policy_score(policy_.get(), rows.data(), candidates, out.data(), err.data(), err.size()) != 0)
    throw std::runtime_error(std::string("learned policy: ") + err.data());
  return out;
}

}  // namespace arachne::planner
