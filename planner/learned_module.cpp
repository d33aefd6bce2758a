// Finding, loading and checking the learned planner's Torch module; see learned_module.h.
#include "planner/learned_module.h"

#include <dlfcn.h>

#include <algorithm>
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

}  // namespace

std::string executable_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

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

namespace {

[[noreturn]] void module_failed(const std::array<char, 512>& err) {
  throw std::runtime_error(std::string("learned policy: ") + err.data());
}

ArachnePolicyShape c_shape(const PolicyShape& s) {
  if (s.max_groups() > ARACHNE_POLICY_MAX_GROUPS)
    throw std::invalid_argument("learned policy: more Type tokens than the module's ABI holds");
  ArachnePolicyShape c{};
  c.group_features = s.group_features;
  c.global_features = s.global_features;
  c.vocabulary = s.vocabulary;
  c.bos_token = s.bos_token;
  c.max_groups = s.max_groups();
  for (int k = 0; k < s.max_groups(); ++k) c.type_tokens[k] = s.type_tokens[k];
  c.encoder_width = s.encoder_width;
  c.token_width = s.token_width;
  c.decoder_width = s.decoder_width;
  return c;
}

}  // namespace

TrainingBatch::TrainingBatch(const PolicyShape& shape, const std::vector<TrainingSequence>& sequences) {
  if (sequences.empty()) throw std::invalid_argument("training batch: no sequences");
  size_ = static_cast<int64_t>(sequences.size());
  for (const TrainingSequence& s : sequences) {
    if (s.features.groups < 1 || s.features.groups > shape.max_groups() ||
        s.features.group.size() != static_cast<size_t>(s.features.groups) * shape.group_features ||
        s.features.global.size() != static_cast<size_t>(shape.global_features))
      throw std::invalid_argument("training batch: features of another size than the network's");
    if (s.tokens.size() < 2 || s.allowed.size() != s.tokens.size() - 1)
      throw std::invalid_argument("training batch: a sequence needs Bos, a token, and one mask per token after Bos");
    max_groups_ = std::max<int64_t>(max_groups_, s.features.groups);
    steps_ = std::max<int64_t>(steps_, static_cast<int64_t>(s.tokens.size()) - 1);
  }
  const int64_t v = shape.vocabulary;
  group_x_.assign(static_cast<size_t>(size_ * max_groups_ * shape.group_features), 0.0f);
  tokens_.assign(static_cast<size_t>(size_ * (steps_ + 1)), shape.bos_token);
  allowed_.assign(static_cast<size_t>(size_ * steps_ * v), 0);
  for (int64_t b = 0; b < size_; ++b) {
    const TrainingSequence& s = sequences[b];
    std::copy(s.features.group.begin(), s.features.group.end(),
              group_x_.begin() + b * max_groups_ * shape.group_features);
    global_x_.insert(global_x_.end(), s.features.global.begin(), s.features.global.end());
    group_counts_.push_back(s.features.groups);
    std::copy(s.tokens.begin(), s.tokens.end(), tokens_.begin() + b * (steps_ + 1));
    lengths_.push_back(static_cast<int64_t>(s.tokens.size()));
    for (size_t t = 0; t < s.allowed.size(); ++t)
      for (int id : s.allowed[t]) {
        if (id < 0 || id >= v) throw std::invalid_argument("training batch: an allowed id outside the vocabulary");
        allowed_[static_cast<size_t>((b * steps_ + static_cast<int64_t>(t)) * v + id)] = 1;
      }
    rewards_.push_back(s.reward);
    request_.push_back(s.request);
  }
}

ArachneBatch TrainingBatch::view() const {
  return ArachneBatch{size_,          max_groups_,      steps_,          group_x_.data(), group_counts_.data(),
                      global_x_.data(), tokens_.data(), lengths_.data(), allowed_.data(), rewards_.data(),
                      request_.data()};
}

LearnedPolicy::LearnedPolicy(const ArachneLearnedModule& module, ArachnePolicy* policy)
    : module_(&module), policy_(policy, Release{&module}) {}

LearnedPolicy::LearnedPolicy(const ArachneLearnedModule& module, const PolicyShape& shape, const Options& options)
    : module_(&module), policy_(nullptr, Release{&module}) {
  std::array<char, 512> err{};
  const ArachnePolicyShape c = c_shape(shape);
  const ArachneTrainOptions o{options.seed, options.threads, options.learning_rate, options.grad_clip};
  ArachnePolicy* p = module.policy_create(&c, &o, err.data(), err.size());
  if (p == nullptr) module_failed(err);
  policy_.reset(p);
}

LearnedPolicy LearnedPolicy::load(const ArachneLearnedModule& module, const std::string& path, int threads) {
  std::array<char, 512> err{};
  ArachnePolicy* p = module.policy_load(path.c_str(), threads, err.data(), err.size());
  if (p == nullptr) module_failed(err);
  return LearnedPolicy(module, p);
}

double LearnedPolicy::imitation_step(const TrainingBatch& batch) {
  std::array<char, 512> err{};
  const ArachneBatch b = batch.view();
  double loss = 0;
  if (module_->policy_imitation_step(policy_.get(), &b, &loss, err.data(), err.size()) != 0) module_failed(err);
  return loss;
}

double LearnedPolicy::imitation_loss(const TrainingBatch& batch) {
  std::array<char, 512> err{};
  const ArachneBatch b = batch.view();
  double loss = 0;
  if (module_->policy_imitation_loss(policy_.get(), &b, &loss, err.data(), err.size()) != 0) module_failed(err);
  return loss;
}

double LearnedPolicy::policy_gradient_step(const TrainingBatch& batch) {
  std::array<char, 512> err{};
  const ArachneBatch b = batch.view();
  double loss = 0;
  if (module_->policy_gradient_step(policy_.get(), &b, &loss, err.data(), err.size()) != 0) module_failed(err);
  return loss;
}

void LearnedPolicy::set_learning_rate(double learning_rate) {
  std::array<char, 512> err{};
  if (module_->policy_set_learning_rate(policy_.get(), learning_rate, err.data(), err.size()) != 0) module_failed(err);
}

void LearnedPolicy::save(const std::string& path) {
  std::array<char, 512> err{};
  if (module_->policy_save(policy_.get(), path.c_str(), err.data(), err.size()) != 0) module_failed(err);
}

PolicyShape LearnedPolicy::shape() const {
  ArachnePolicyShape c{};
  module_->policy_shape(policy_.get(), &c);
  PolicyShape s;
  s.group_features = static_cast<int>(c.group_features);
  s.global_features = static_cast<int>(c.global_features);
  s.vocabulary = static_cast<int>(c.vocabulary);
  s.bos_token = static_cast<int>(c.bos_token);
  for (int64_t k = 0; k < c.max_groups; ++k) s.type_tokens.push_back(static_cast<int>(c.type_tokens[k]));
  s.encoder_width = static_cast<int>(c.encoder_width);
  s.token_width = static_cast<int>(c.token_width);
  s.decoder_width = static_cast<int>(c.decoder_width);
  return s;
}

PolicyWeights LearnedPolicy::weights() const {
  PolicyWeights w;
  w.shape = shape();
  std::array<char, 512> err{};
  for (int64_t i = 0; i < module_->policy_tensor_count(policy_.get()); ++i) {
    const char* name = nullptr;
    int64_t numel = 0;
    if (module_->policy_tensor(policy_.get(), i, &name, &numel, nullptr, 0, err.data(), err.size()) != 0)
      module_failed(err);
    std::vector<float>& values = w.tensors[name];
    values.resize(static_cast<size_t>(numel));
    if (module_->policy_tensor(policy_.get(), i, &name, &numel, values.data(), numel, err.data(), err.size()) != 0)
      module_failed(err);
  }
  check_weights(w);
  return w;
}

}  // namespace arachne::planner
