// LibTorch is loaded only when the learned planner's module is asked for: `arachne list gpus`, `simulate`
// and `--version` never map a Torch library, nor HDF5 when they write no results file (the dynamic
// loader's own log says which libraries it loads);
// learned_module() loads the module on first use in a process that had no Torch mapped, and the policy it
// serves is seeded and deterministic and trains; a missing module is a one-line bad-input error naming the fix.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "planner/learned_module.h"
#include "sim/io/input_error.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The dynamic loader's log (LD_DEBUG=libs) of `arachne <args>`: every shared object it searches for,
// loads and initialises, whether NEEDED by the executable or dlopen()ed later.
std::string loader_log(const std::string& args) {
  const fs::path log = fs::temp_directory_path() / ("arachne_ld_debug_" + std::to_string(::getpid()));
  const std::string cmd = "cd '" + test::configs() + "/..' && LD_DEBUG=libs '" + std::string(ARACHNE_BINARY) + "' " +
                          args + " >/dev/null 2>'" + log.string() + "'";
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << slurp(log);
  std::string text = slurp(log);
  fs::remove(log);
  return text;
}

bool mentions_torch(const std::string& text) {
  return text.find("libtorch") != std::string::npos || text.find("libc10") != std::string::npos;
}

bool torch_mapped_in_this_process() { return mentions_torch(slurp("/proc/self/maps")); }

TEST(LearnedModule, CommandsWithoutThePolicyDoNotLoadTorch) {
  const std::vector<std::string> commands = {
      "list gpus", "--version",
      "simulate --cluster configs/clusters/tiny-a100-2x4.yaml --model gpt3-1.3b --tp 2 --pp 2 --dp 2 --micro-batch 4"};
  for (const std::string& args : commands) {
    const std::string log = loader_log(args);
    // The log is real: it names a library the CLI does need.
    ASSERT_NE(log.find("libyaml-cpp"), std::string::npos) << "LD_DEBUG produced no loader log for: " << args;
    EXPECT_FALSE(mentions_torch(log)) << "arachne " << args << " loaded LibTorch:\n" << log;
    // Nor HDF5 (loaded by the commands that write a results file; sim/io/hdf5_writer.cpp).
    EXPECT_EQ(log.find("libhdf5"), std::string::npos) << "arachne " << args << " loaded HDF5:\n" << log;
  }
}

TEST(LearnedModule, PathIsBesideTheExecutableUnlessOverridden) {
  const char* saved = std::getenv(kLearnedModuleEnv);
  const std::string restore = saved ? saved : "";
  ::unsetenv(kLearnedModuleEnv);
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  EXPECT_EQ(learned_module_path(), (exe.parent_path() / ARACHNE_LEARNED_MODULE_FILE).string());
  ::setenv(kLearnedModuleEnv, "/opt/elsewhere/module.so", 1);
  EXPECT_EQ(learned_module_path(), "/opt/elsewhere/module.so");
  if (saved) ::setenv(kLearnedModuleEnv, restore.c_str(), 1); else ::unsetenv(kLearnedModuleEnv);
}

TEST(LearnedModule, MissingModuleIsBadInputNamingThePathAndTheFix) {
  const std::string path = "/nonexistent/dir/" ARACHNE_LEARNED_MODULE_FILE;
  try {
    load_learned_module(path);
    FAIL() << "loading a missing module did not throw";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "learned planner");
    EXPECT_NE(e.reason().find(path), std::string::npos) << e.reason();
    EXPECT_NE(e.reason().find("ARACHNE_WITH_TORCH"), std::string::npos) << e.reason();
    EXPECT_NE(e.reason().find(kLearnedModuleEnv), std::string::npos) << e.reason();
  }
}

// Runs in a fresh process (death-test "threadsafe" style re-executes this binary for this test only), so
// "no Torch before the first call" holds whatever other tests this process ran. Exit code 0 when every
// check passes; otherwise the failed check on stderr.
void lazy_load_scenario() {
  auto check = [](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "failed: %s\n", what);
      std::exit(1);
    }
  };
  check(!torch_mapped_in_this_process(), "LibTorch mapped before the module was requested");
  const ArachneLearnedModule* loaded = nullptr;
  try {
    loaded = &learned_module();
  } catch (const InputError& e) {
    std::fprintf(stderr, "failed: %s\n", e.what());
    std::exit(1);
  }
  const ArachneLearnedModule& m = *loaded;
  check(torch_mapped_in_this_process(), "LibTorch not mapped after learned_module()");
  check(&learned_module() == &m, "a second call loaded a second table");
  check(std::string(m.torch_version).rfind("1.", 0) == 0 || std::string(m.torch_version).rfind("2.", 0) == 0,
        "module reports no LibTorch version");

  // A tiny network over a six-token vocabulary (Bos 0, Eos 1, Type0 2, Type1 3, two others).
  PolicyShape shape;
  shape.group_features = 3;
  shape.global_features = 2;
  shape.vocabulary = 6;
  shape.bos_token = 0;
  shape.type_tokens = {2, 3};
  shape.encoder_width = 8;
  shape.token_width = 4;
  shape.decoder_width = 8;
  auto make = [&](uint64_t seed) { return LearnedPolicy(m, shape, LearnedPolicy::Options{seed, 1, 1e-2, 1.0}); };
  const PolicyWeights a = make(7).weights(), b = make(7).weights(), c = make(8).weights();
  check(a.tensors == b.tensors, "same seed gave different parameters");
  check(a.tensors != c.tensors, "different seeds gave the same parameters");
  check(a.shape == shape, "the module did not keep the shape");
  // One imitation step on one sequence, Bos Type1 Eos, moves the parameters and reports a finite loss.
  TrainingSequence s;
  s.features.groups = 2;
  s.features.group = {0.1f, -0.2f, 0.3f, 0.4f, 1.0f, 0.0f};
  s.features.global = {-1.0f, 0.5f};
  s.tokens = {0, 3, 1};
  s.allowed = {{2, 3}, {1}};
  LearnedPolicy p = make(7);
  const double loss = p.imitation_step(TrainingBatch(shape, {s}));
  check(std::isfinite(loss) && loss > 0, "imitation loss not a positive number");
  check(p.weights().tensors != a.tensors, "an imitation step left the parameters unchanged");
  std::fprintf(stderr, "lazy load ok\n");
  std::exit(0);
}

TEST(LearnedModule, LoadsLibTorchOnlyOnFirstUse) {
  if (!ARACHNE_LEARNED_MODULE_BUILT) GTEST_SKIP() << "built with ARACHNE_WITH_TORCH=OFF: no module";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(lazy_load_scenario(), ::testing::ExitedWithCode(0), "lazy load ok");
}

}  // namespace
}  // namespace arachne::planner
