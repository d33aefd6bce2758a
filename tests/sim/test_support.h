// Helpers shared by tests: where the public data and the bundled configs are.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "sim/exec/sim_result.h"
#include "sim/exec/simulate.h"
#include "sim/model/model.h"

namespace arachne::test {

// $ARACHNE_DATA, else CMake's default (<repo>/../shared/data). Empty when absent.
inline std::string data_dir() {
  const char* env = std::getenv("ARACHNE_DATA");
  std::string d = env && *env ? env : ARACHNE_DATA_DEFAULT;
  return std::filesystem::exists(d) ? d : std::string();
}

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && *ci && std::string(ci) != "false" && std::string(ci) != "0";
}

// ARACHNE_TEST_REDUCED=1 (set by `scripts/test.sh --sanitize`, where the code runs many times slower): the
// tests labelled `heavy` (tests/heavy_tests.cmake) run on reduced sizes. Each says what it reduces and what
// it still checks; none is skipped.
inline bool reduced_sizes() {
  const char* v = std::getenv("ARACHNE_TEST_REDUCED");
  return v && *v && std::string(v) != "0";
}

// A wall-clock budget of `seconds` for a test whose result needs the search to get that far: multiplied by
// ARACHNE_TEST_SLOWDOWN (set by `scripts/test.sh --sanitize` to the sanitized code's slowdown), 1 otherwise.
inline double wall_seconds(double seconds) {
  const char* v = std::getenv("ARACHNE_TEST_SLOWDOWN");
  const double k = v && *v ? std::atof(v) : 1.0;
  return seconds * (k >= 1 ? k : 1.0);
}

// The id of a process that has exited and been reaped: no live process has it (until the kernel reuses it,
// which takes a full cycle of the pid space). Leftover temporaries named with it look like a killed writer's.
inline pid_t pid_of_no_live_process() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

// A fresh directory `arachne_<name>_<pid>` in the test temporary directory, removed with what it holds when
// the object goes out of scope. It is a path: `d / "file"`.
class ScratchDir : public std::filesystem::path {
 public:
  explicit ScratchDir(const std::string& name)
      : std::filesystem::path(std::filesystem::path(::testing::TempDir()) / ("arachne_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(*this);
    std::filesystem::create_directories(*this);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ignored;  // a test's leftovers must not throw from a destructor
    std::filesystem::remove_all(*this, ignored);
  }
};

inline std::string configs() { return std::string(ARACHNE_SOURCE_DIR) + "/configs"; }

// A small dense GPT-style model (8 layers, hidden 1024, 16 heads: many divisors for TP/PP) that simulates
// in milliseconds.
inline ModelConfig small_gpt_model(long global_batch) {
  ModelConfig m;
  m.name = "small-gpt";
  m.layers = 8;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 16;
  m.ffn_hidden = 4096;
  m.seq_len = 1024;
  m.vocab = 32000;
  m.dtype = "bf16";
  m.global_batch = global_batch;
  return m;
}

// Its MoE sibling: every layer has 8 experts of width 2048, top-2 routing (Mixtral-like shape, small).
inline ModelConfig small_moe_model(long global_batch) {
  ModelConfig m = small_gpt_model(global_batch);
  m.name = "small-moe";
  MoeConfig e;
  e.experts = 8;
  e.top_k = 2;
  e.expert_ffn_hidden = 2048;
  e.capacity_factor = 1.25;
  m.moe = e;
  return m;
}

// One iteration without the memory check, with its timeline, with or without the exact shortcuts: the two
// runs a shortcut test compares.
inline SimResult simulate_with_shortcuts(const Cluster& c, const ModelConfig& m, const Plan& p, bool shortcuts) {
  const Topology topo(c);
  SimOptions o;
  o.ignore_memory = true;
  o.record_timeline = true;
  o.exact_shortcuts = shortcuts;
  return simulate_iteration(c, topo, m, p, o);
}

// The timeline as (track, start, duration, name, category), sorted: equal outcomes may record spans in
// another order.
inline std::vector<std::tuple<int, double, double, std::string, std::string>> sorted_spans(const SimResult& r) {
  std::vector<std::tuple<int, double, double, std::string, std::string>> v;
  for (const auto& s : r.timeline) v.emplace_back(s.track, s.start_s, s.dur_s, s.name, s.cat);
  std::sort(v.begin(), v.end());
  return v;
}

// The same simulated outcome, as an exact shortcut must give against the full simulation: iteration time,
// every breakdown category, peak memory, MFU, dropped tokens and the timeline bit for bit; bytes per link
// class to the last bits (a shortcut may sum the same volumes in another order).
inline void expect_same_result(const SimResult& a, const SimResult& b) {
  EXPECT_EQ(a.iteration_time_s, b.iteration_time_s);
  EXPECT_EQ(a.breakdown.compute, b.breakdown.compute);
  EXPECT_EQ(a.breakdown.tp_comm, b.breakdown.tp_comm);
  EXPECT_EQ(a.breakdown.pp_comm, b.breakdown.pp_comm);
  EXPECT_EQ(a.breakdown.dp_comm, b.breakdown.dp_comm);
  EXPECT_EQ(a.breakdown.ep_comm, b.breakdown.ep_comm);
  EXPECT_EQ(a.breakdown.bubble, b.breakdown.bubble);
  EXPECT_EQ(a.breakdown.wait, b.breakdown.wait);
  EXPECT_EQ(a.breakdown.optimizer, b.breakdown.optimizer);
  for (int k = 0; k < kLinkClasses; ++k) EXPECT_DOUBLE_EQ(a.bytes[k], b.bytes[k]) << "link class " << k;
  EXPECT_EQ(a.peak_memory_gib, b.peak_memory_gib);
  EXPECT_EQ(a.mfu, b.mfu);
  EXPECT_EQ(a.dropped_tokens, b.dropped_tokens);
  EXPECT_EQ(sorted_spans(a), sorted_spans(b));
}

// The same timeline in the same order: every span's start, duration and name.
inline void expect_same_timeline_order(const SimResult& a, const SimResult& b) {
  ASSERT_EQ(a.timeline.size(), b.timeline.size());
  for (std::size_t i = 0; i < a.timeline.size(); ++i) {
    EXPECT_EQ(a.timeline[i].start_s, b.timeline[i].start_s) << i;
    EXPECT_EQ(a.timeline[i].dur_s, b.timeline[i].dur_s) << i;
    EXPECT_EQ(a.timeline[i].name, b.timeline[i].name) << i;
  }
}

}  // namespace arachne::test

// Skips the test when the shared data is absent, except in CI where that is a failure.
#define ARACHNE_REQUIRE_DATA(dir)                                                        \
  std::string dir = ::arachne::test::data_dir();                                         \
  if (dir.empty()) {                                                                     \
    if (::arachne::test::in_ci()) FAIL() << "shared data missing (set ARACHNE_DATA)";    \
    GTEST_SKIP() << "shared data not found; set ARACHNE_DATA to run this test";          \
  }
