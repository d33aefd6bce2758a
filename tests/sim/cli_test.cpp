// The `arachne` binary end to end (ARACHNE_BINARY, set by CMake): exit codes, the one-line error format,
// no output file on bad input, `simulate --json` keys and identities, timeline and out-of-memory reports.
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/arachne/arachne_planner.h"
#include "sim/hw/gpu.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh empty directory per test; the binary runs with it as working directory.
class CliTempDir {
 public:
  CliTempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("arachne_cli_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_ / "work");
  }
  ~CliTempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string work(const std::string& name) const { return (path_ / "work" / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(work(name)) << text;
    return work(name);
  }
  std::vector<std::string> work_entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_ / "work")) names.push_back(e.path().filename().string());
    return names;
  }
  // Runs `arachne <args>` (args are shell words, already quoted where needed).
  RunResult run(const std::string& args) const {
    const fs::path out = path_ / "stdout", err = path_ / "stderr";
    const std::string cmd = "cd '" + (path_ / "work").string() + "' && '" + std::string(ARACHNE_BINARY) + "' " + args +
                            " >'" + out.string() + "' 2>'" + err.string() + "'";
    const int status = std::system(cmd.c_str());
    RunResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

 private:
  fs::path path_;
};

std::string bundled(const std::string& rel) { return "'" + test::configs() + "/" + rel + "'"; }

// stderr of a bad-input run: exactly one line, "error: <where>: <what>".
void expect_one_error_line(const RunResult& r) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line: " << r.err;
}

// The names created in or renamed into `dir` (not its subdirectories) while `action` runs, from inotify.
std::vector<std::string> names_created_in(const std::string& dir, const std::function<void()>& action) {
  const int fd = ::inotify_init1(IN_NONBLOCK);
  EXPECT_GE(fd, 0);
  EXPECT_GE(::inotify_add_watch(fd, dir.c_str(), IN_CREATE | IN_MOVED_TO), 0);
  action();
  std::vector<std::string> names;
  alignas(inotify_event) char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    for (const char* p = buf; p < buf + n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(p);
      if (e->len > 0) names.emplace_back(e->name);
      p += sizeof(inotify_event) + e->len;
    }
  ::close(fd);
  return names;
}

const char* kSmall = "simulate --cluster A100-80:1x8 --model gpt3-1.3b --tp 2 --pp 2 --dp 2 --micro-batch 4 --global-batch 64";

TEST(CliBinary, HelpExitsZeroAndNamesCommands) {
  CliTempDir dir;
  const RunResult top = dir.run("--help");
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.out.find("simulate"), std::string::npos);
  EXPECT_NE(top.out.find("list"), std::string::npos);
  const RunResult sim = dir.run("simulate --help");
  EXPECT_EQ(sim.exit_code, 0);
  EXPECT_NE(sim.out.find("--micro-batch"), std::string::npos);
  EXPECT_NE(sim.out.find("tiny-a100-2x4.yaml"), std::string::npos);  // a runnable example
  EXPECT_EQ(dir.run("list --help").exit_code, 0);
}

TEST(CliBinary, UnknownCommandAndFlagAreBadInput) {
  CliTempDir dir;
  expect_one_error_line(dir.run("frobnicate"));
  const RunResult r = dir.run(std::string(kSmall) + " --no-such-flag");
  expect_one_error_line(r);
  EXPECT_EQ(r.err.rfind("error: --no-such-flag: ", 0), 0u) << r.err;
  const RunResult v = dir.run("simulate --cluster A100-80:1x8 --model gpt3-1.3b --tp two");
  expect_one_error_line(v);
  EXPECT_EQ(v.err.rfind("error: --tp: ", 0), 0u) << v.err;
}

TEST(CliBinary, ListGpusAndModels) {
  CliTempDir dir;
  const RunResult g = dir.run("list gpus");
  EXPECT_EQ(g.exit_code, 0);
  EXPECT_NE(g.out.find("A100-80"), std::string::npos);
  EXPECT_NE(g.out.find("H100"), std::string::npos);
  const RunResult m = dir.run("list models");
  EXPECT_EQ(m.exit_code, 0);
  EXPECT_NE(m.out.find("gpt3-1.3b"), std::string::npos);
  EXPECT_NE(m.out.find("llama2-70b"), std::string::npos);
  EXPECT_EQ(dir.run("list planners").exit_code, 0);
  EXPECT_EQ(dir.run("list formats").exit_code, 0);
  expect_one_error_line(dir.run("list nonsense"));
}

TEST(CliBinary, ListGpusSaysWhereEveryGpusConstantsComeFrom) {
  // Every catalog GPU's row names its provenance: calibrated on its own runs (A100-80), fitted on named
  // published sources, or extrapolated from a named GPU by the stated rule.
  CliTempDir dir;
  const RunResult g = dir.run("list gpus");
  ASSERT_EQ(g.exit_code, 0);
  const GpuCatalog cat = GpuCatalog::load_default();
  std::istringstream lines(g.out);
  std::string line;
  std::set<std::string> seen;
  while (std::getline(lines, line)) {
    const std::string name = line.substr(0, line.find(' '));
    if (!cat.contains(name)) continue;
    seen.insert(name);
    const GpuSpec& spec = cat.at(name);
    if (spec.calibrated_from.empty()) {
      EXPECT_NE(line.find("calibrated on its own measurements"), std::string::npos) << line;
    } else if (!spec.fitted_on.empty()) {
      EXPECT_NE(line.find("fitted on " + spec.fitted_on.front()), std::string::npos) << line;
      EXPECT_NE(line.find("rest from " + spec.calibrated_from), std::string::npos) << line;
    } else {
      EXPECT_NE(line.find("extrapolated from " + spec.calibrated_from + " (same efficiencies"), std::string::npos)
          << line;
    }
  }
  EXPECT_EQ(seen.size(), cat.names().size());
}

TEST(CliBinary, CalibratePublishedBadInputIsOneErrorLineAndLeavesTheCatalogAlone) {
  CliTempDir dir;
  const std::string catalog = dir.write("gpus.yaml", "unchanged\n");
  const std::string csv = dir.write("published.csv", "source_id,gpu\nX,Y\n");
  const RunResult r = dir.run("calibrate --published '" + csv + "' --write '" + catalog + "'");
  expect_one_error_line(r);
  EXPECT_NE(r.err.find("published.csv:1: gpus_total: missing column"), std::string::npos) << r.err;
  std::ifstream in(catalog);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "unchanged\n");
  expect_one_error_line(dir.run("calibrate --published '" + csv + "' --data '" + csv + "'"));
}

TEST(CliBinary, UnknownModelIsBadInputAndWritesNothing) {
  CliTempDir dir;
  const RunResult r = dir.run("simulate --cluster A100-80:1x8 --model no-such-model --tp 2 --pp 2 --dp 2 "
                              "--micro-batch 4 --out out.h5 --timeline t.json");
  expect_one_error_line(r);
  EXPECT_TRUE(r.out.empty());
  EXPECT_TRUE(dir.work_entries().empty());  // neither the files nor temporaries
}

TEST(CliBinary, MalformedClusterYamlReportsFileAndLine) {
  CliTempDir dir;
  // Line 4 (1-based) holds "nodes: x: y", which is not valid YAML.
  dir.write("bad.yaml", "name: bad\nnode_groups:\n  - gpu: A100-80\n    nodes: x: y\n"
                                                 "    gpus_per_node: 4\n");
  const RunResult r = dir.run("simulate --cluster bad.yaml --model gpt3-1.3b --tp 2 --out out.h5");
  expect_one_error_line(r);
  EXPECT_EQ(r.err.rfind("error: bad.yaml:4:", 0), 0u) << r.err;
  EXPECT_FALSE(fs::exists(dir.work("out.h5")));
}

TEST(CliBinary, MissingUnitInClusterYamlIsBadInput) {
  CliTempDir dir;
  // Line 6: a bandwidth without its unit (DESIGN.md: a bare number where a unit is required is an error).
  dir.write("nounit.yaml", "name: nounit\nnode_groups:\n  - gpu: A100-80\n    nodes: 1\n    gpus_per_node: 4\n"
                           "    intra_node: {kind: nvlink, bandwidth: 300}\n    nic: {count: 1, bandwidth: \"200 Gbit/s\"}\n");
  const RunResult r = dir.run("simulate --cluster nounit.yaml --model gpt3-1.3b --tp 2 --micro-batch 1");
  expect_one_error_line(r);
  EXPECT_EQ(r.err.rfind("error: nounit.yaml:6:", 0), 0u) << r.err;
}

TEST(CliBinary, GpuUsedTwiceInPlanIsBadInput) {
  CliTempDir dir;
  dir.write("twice.yaml",
            "version: 1\nschedule: 1f1b\npipelines:\n"
            "  - micro_batch: 4\n    micro_batches: 8\n    stages:\n"
            "      - layers: [0, 12]\n        groups: [{gpus: \"n0:0-1\", tp: 2}]\n"
            "      - layers: [12, 24]\n        groups: [{gpus: \"n0:0-1\", tp: 2}]\n");
  const RunResult r = dir.run("simulate --cluster A100-80:1x8 --model gpt3-1.3b --plan twice.yaml --out out.h5");
  expect_one_error_line(r);
  // Line 10 (1-based) is the second group naming n0:0-1 again.
  EXPECT_EQ(r.err.rfind("error: twice.yaml:10:", 0), 0u) << r.err;
  EXPECT_FALSE(fs::exists(dir.work("out.h5")));
}

TEST(CliBinary, LayersNotCoveredExactlyOnceIsBadInput) {
  CliTempDir dir;
  // gpt3-1.3b has 24 layers; the stages cover 0-12 and 14-24, leaving 12-13 to nobody.
  dir.write("gap.yaml",
            "version: 1\npipelines:\n"
            "  - micro_batch: 4\n    micro_batches: 8\n    stages:\n"
            "      - layers: [0, 12]\n        groups: [{gpus: \"n0:0-1\", tp: 2}]\n"
            "      - layers: [14, 24]\n        groups: [{gpus: \"n0:2-3\", tp: 2}]\n");
  const RunResult r = dir.run("simulate --cluster A100-80:1x8 --model gpt3-1.3b --plan gap.yaml --out out.h5 "
                              "--timeline t.json");
  expect_one_error_line(r);
  EXPECT_EQ(r.err.rfind("error: gap.yaml:", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("12"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.work("out.h5")));
  EXPECT_FALSE(fs::exists(dir.work("t.json")));
}

TEST(CliBinary, BatchArithmeticThatDoesNotAddUpIsBadInput) {
  CliTempDir dir;
  // The plan processes 4 x 8 = 32 samples per iteration; --global-batch asks for 64.
  dir.write("batch.yaml",
            "version: 1\npipelines:\n"
            "  - micro_batch: 4\n    micro_batches: 8\n    stages:\n"
            "      - layers: [0, 24]\n        groups: [{gpus: \"n0:0-1\", tp: 2}]\n");
  const RunResult r = dir.run("simulate --cluster A100-80:1x8 --model gpt3-1.3b --plan batch.yaml --global-batch 64 "
                              "--out out.h5");
  expect_one_error_line(r);
  EXPECT_EQ(r.err.rfind("error: batch.yaml:", 0), 0u) << r.err;
  EXPECT_FALSE(fs::exists(dir.work("out.h5")));
  // The shorthand's arithmetic: 100 samples do not split into dp=2 x micro-batch 4.
  const RunResult s = dir.run("simulate --cluster A100-80:1x8 --model gpt3-1.3b --tp 2 --pp 2 --dp 2 --micro-batch 4 "
                              "--global-batch 100 --out out.h5");
  expect_one_error_line(s);
  EXPECT_EQ(s.err.rfind("error: --global-batch:", 0), 0u) << s.err;
  EXPECT_FALSE(fs::exists(dir.work("out.h5")));
}

TEST(CliBinary, PlanNeedingMoreGpusThanClusterIsBadInput) {
  CliTempDir dir;
  // tp 4 x pp 1 x dp 4 = 16 GPUs on an 8-GPU cluster.
  expect_one_error_line(dir.run("simulate --cluster A100-80:1x8 --model gpt3-1.3b --tp 4 --dp 4 --micro-batch 1"));
  // A plan file naming a node the cluster does not have.
  dir.write("n2.yaml", "version: 1\nschedule: 1f1b\npipelines:\n"
                       "  - micro_batch: 1\n    micro_batches: 8\n    stages:\n"
                       "      - layers: [0, 24]\n        groups: [{gpus: \"n2:0-1\", tp: 2}]\n");
  expect_one_error_line(dir.run("simulate --cluster A100-80:1x8 --model gpt3-1.3b --plan n2.yaml"));
}

TEST(CliBinary, PlanFileAndShorthandTogetherIsBadInput) {
  CliTempDir dir;
  const RunResult r = dir.run("simulate --cluster " + bundled("clusters/tiny-a100-2x4.yaml") +
                              " --model gpt3-1.3b --plan " + bundled("plans/gpt3-1.3b-tp2-pp2-dp2.yaml") + " --tp 2");
  expect_one_error_line(r);
  EXPECT_EQ(r.err.rfind("error: --tp: ", 0), 0u) << r.err;
}

TEST(CliBinary, SimulateJsonHasDesignKeysAndConsistentNumbers) {
  CliTempDir dir;
  const RunResult r = dir.run(std::string(kSmall) + " --json --out out.h5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // exactly one JSON value, nothing else
  ASSERT_TRUE(j.is_object());
  for (const char* k : {"iteration_time_s", "tokens_per_s", "samples_per_s", "tflops_per_gpu", "mfu", "mfu_cluster",
                        "oom", "peak_memory_gib", "memory_gib", "breakdown_s", "bytes", "dropped_tokens", "events",
                        "sim_wall_s", "warnings"})
    ASSERT_TRUE(j.contains(k)) << k;
  for (const char* k : {"weights", "gradients", "optimizer", "activations", "other"})
    EXPECT_TRUE(j["memory_gib"].contains(k)) << k;
  for (const char* k : {"nvlink", "pcie", "nic", "spine"}) EXPECT_TRUE(j["bytes"].contains(k)) << k;
  EXPECT_FALSE(j["oom"].get<bool>());
  EXPECT_TRUE(j["warnings"].is_array());

  const double t = j["iteration_time_s"].get<double>();
  ASSERT_GT(t, 0);
  // The breakdown partitions the critical path: its causes sum to the iteration time (up to rounding of
  // integer-nanosecond event times converted to seconds: 1e-6 relative is generous).
  double sum = 0;
  for (const char* k : {"compute", "tp_comm", "pp_comm", "dp_comm", "ep_comm", "bubble", "wait", "optimizer"}) {
    const double s = j["breakdown_s"].at(k).get<double>();
    EXPECT_GE(s, 0) << k;
    sum += s;
  }
  EXPECT_NEAR(sum, t, 1e-6 * t);
  // Throughput identities: 64 samples per iteration (--global-batch 64), 2048 tokens per sample
  // (gpt3-1.3b's seq_len).
  EXPECT_NEAR(j["samples_per_s"].get<double>() * t, 64.0, 1e-9 * 64);
  EXPECT_NEAR(j["tokens_per_s"].get<double>() * t, 64.0 * 2048, 1e-9 * 64 * 2048);
  // MFU is a fraction of peak; all 8 GPUs of the cluster are used, so both MFUs agree.
  EXPECT_GT(j["mfu"].get<double>(), 0);
  EXPECT_LT(j["mfu"].get<double>(), 1);
  EXPECT_NEAR(j["mfu_cluster"].get<double>(), j["mfu"].get<double>(), 1e-12);
  // TP and DP stay inside the 8-GPU node: traffic on NVLink, none on NICs or the spine.
  EXPECT_GT(j["bytes"]["nvlink"].get<double>(), 0);
  EXPECT_EQ(j["bytes"]["spine"].get<double>(), 0);
  // The HDF5 file exists, complete (HDF5 signature), and no temporary is left beside it.
  const std::string h5 = slurp(dir.work("out.h5"));
  EXPECT_EQ(h5.substr(0, 8), std::string("\x89HDF\r\n\x1a\n", 8));
  EXPECT_EQ(dir.work_entries(), std::vector<std::string>{"out.h5"});
}

TEST(CliBinary, SameSeedGivesSameResult) {
  CliTempDir dir;
  const RunResult a = dir.run(std::string(kSmall) + " --json --seed 5");
  const RunResult b = dir.run(std::string(kSmall) + " --json --seed 5");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  nlohmann::json ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  ja.erase("sim_wall_s");  // the only field that measures wall time
  jb.erase("sim_wall_s");
  EXPECT_EQ(ja, jb);
}

TEST(CliBinary, HumanReportWithoutJson) {
  CliTempDir dir;
  const RunResult r = dir.run("simulate --cluster " + bundled("clusters/tiny-a100-2x4.yaml") +
                              " --model gpt3-1.3b --tp 2 --pp 2 --dp 2 --micro-batch 4 --global-batch 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Iteration time"), std::string::npos);
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos);
  EXPECT_NE(r.out.find("MFU"), std::string::npos);
}

TEST(CliBinary, TimelineIsChromeTraceJson) {
  CliTempDir dir;
  const RunResult r = dir.run(std::string(kSmall) + " --json --timeline t.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json t = nlohmann::json::parse(slurp(dir.work("t.json")));
  ASSERT_TRUE(t["traceEvents"].is_array());
  int spans = 0;
  bool gpu0_named = false;
  const double iter_us = nlohmann::json::parse(r.out)["iteration_time_s"].get<double>() * 1e6;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X") {
      ++spans;
      // Every span lies inside the iteration (microseconds; 1 us slack for rounding).
      EXPECT_GE(e["ts"].get<double>(), 0);
      EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), iter_us + 1);
      EXPECT_LT(e["tid"].get<int>(), 8 + 4 + 8);  // 8 GPU tracks, 4 link-class tracks, 8 GPU comm tracks
    }
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == 0)
      gpu0_named = e["args"]["name"].get<std::string>().rfind("n0:0", 0) == 0;
  }
  EXPECT_GT(spans, 0);
  EXPECT_TRUE(gpu0_named);
}

TEST(CliBinary, OutOfMemoryExitsThreeWithNullTiming) {
  CliTempDir dir;
  // GPT-3 175B on 8 A100-80 with TP 8 and no pipeline: ~175e9 params x 16 bytes of weights, gradients and
  // Adam state / 8 GPUs = ~350 GB per GPU > 80 GB (Rajbhandari et al. 2020 §3 count 16 bytes per parameter).
  const RunResult r = dir.run("simulate --cluster A100-80:1x8 --model gpt3-175b --tp 8 --pp 1 --dp 1 --micro-batch 1 "
                              "--json --timeline t.json");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["oom"].get<bool>());
  EXPECT_TRUE(j["iteration_time_s"].is_null());
  EXPECT_TRUE(j["breakdown_s"].is_null());
  EXPECT_GT(j["peak_memory_gib"].get<double>(), 80.0);
  EXPECT_EQ(j["per_gpu_memory_gib"].size(), 8u);
  EXPECT_FALSE(fs::exists(dir.work("t.json")));  // no timeline for a plan that was not simulated
}

// FlashFlex runs as its public code does unless --flashflex-refine asks for our hill climbing; then its row is
// labelled flashflex+refine, so the extension is never taken for the original. Own-model pricing is free: a
// budget of one simulation does not stop either search.
TEST(CliBinary, FlashFlexRefineIsLabelledAsOurExtension) {
  CliTempDir dir;
  const std::string cmd = "plan --cluster A100-80:1x4,V100-32:1x4 --model gpt3-1.3b --global-batch 32 --planner flashflex "
                          "--budget 1 --json";
  const RunResult a = dir.run(cmd);
  const RunResult b = dir.run(cmd + " --flashflex-refine");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto ja = nlohmann::json::parse(a.out)["results"][0];
  const auto jb = nlohmann::json::parse(b.out)["results"][0];
  EXPECT_EQ(ja["planner"], "flashflex");
  EXPECT_EQ(jb["planner"], "flashflex+refine");
  EXPECT_EQ(ja["evaluations"], 0);
  EXPECT_TRUE(ja["search_complete"].get<bool>());
  EXPECT_TRUE(jb["search_complete"].get<bool>());
  EXPECT_GT(jb["own_model_evaluations"].get<long>(), ja["own_model_evaluations"].get<long>());
  EXPECT_LE(jb["predicted_iteration_time_s"].get<double>(), ja["predicted_iteration_time_s"].get<double>());
}

TEST(CliBinary, PlanJsonHasDesignKeysAndBestPlanRoundTrips) {
  CliTempDir dir;
  const RunResult r = dir.run("plan --cluster A100-80:1x8 --model gpt3-1.3b --global-batch 64 --planner megatron "
                              "--budget 200 --json --out best.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // exactly one JSON object
  ASSERT_EQ(j["results"].size(), 1u);
  const auto& m = j["results"][0];
  for (const char* k : {"planner", "plan", "predicted_iteration_time_s", "simulated_iteration_time_s", "tokens_per_s", "oom",
                        "peak_memory_gib", "planning_time_s", "evaluations", "own_model_evaluations", "search_complete"})
    EXPECT_TRUE(m.contains(k)) << k;
  EXPECT_EQ(m["planner"], "megatron");
  ASSERT_TRUE(m["plan"].is_object());
  EXPECT_TRUE(m["plan"]["pipelines"].is_array());
  EXPECT_LE(m["evaluations"].get<long>(), 200);
  // tokens/s is the simulated iteration's: global batch x sequence length / time.
  EXPECT_NEAR(m["tokens_per_s"].get<double>(), 64.0 * 2048 / m["simulated_iteration_time_s"].get<double>(),
              1e-9 * m["tokens_per_s"].get<double>());
  // The best plan written with --out simulates to the same time with simulate --plan.
  const RunResult s = dir.run("simulate --cluster A100-80:1x8 --model gpt3-1.3b --plan best.yaml --json");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(s.out)["iteration_time_s"].get<double>(), m["simulated_iteration_time_s"].get<double>());
}

TEST(CliBinary, PlanWithSimulatorCostModelPredictsTheSimulatedTime) {
  CliTempDir dir;
  // Under --cost-model simulator a baseline prices its candidates with the simulator, so its prediction of
  // the plan it returns is that plan's simulated time on the same cluster.
  const RunResult r = dir.run("plan --cluster A100-80:1x4,V100-32:1x4 --model gpt3-1.3b --global-batch 32 "
                              "--planner metis,sailor --cost-model simulator --budget 50 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The parsed document is kept in a variable: a range-for over a member of a temporary would iterate
  // freed memory (the temporary dies before the loop body runs).
  const nlohmann::json results = nlohmann::json::parse(r.out)["results"];
  ASSERT_EQ(results.size(), 2u) << r.out;
  for (const auto& m : results) {
    ASSERT_FALSE(m["plan"].is_null()) << m["planner"];
    EXPECT_DOUBLE_EQ(m["predicted_iteration_time_s"].get<double>(), m["simulated_iteration_time_s"].get<double>()) << m["planner"];
  }
}

TEST(CliBinary, PlanUnknownPlannerIsBadInputAndWritesNothing) {
  CliTempDir dir;
  const RunResult r = dir.run("plan --cluster A100-80:1x8 --model gpt3-1.3b --planner megatron,nope --out best.yaml");
  expect_one_error_line(r);
  EXPECT_EQ(r.err.rfind("error: --planner: ", 0), 0u) << r.err;
  EXPECT_TRUE(dir.work_entries().empty());
  expect_one_error_line(dir.run("plan --cluster A100-80:1x8 --model gpt3-1.3b --planner megatron --cost-model magic"));
}

TEST(CliBinary, PlanWithNothingFeasibleExitsThreeWithReason) {
  CliTempDir dir;
  // 175 B parameters need ~2.8 TB of weights, gradients and Adam state: one 80 GB GPU cannot hold them.
  const RunResult r = dir.run("plan --cluster A100-80:1x1 --model gpt3-175b --planner megatron --json --out best.yaml");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["results"][0]["plan"].is_null());
  EXPECT_FALSE(j["results"][0]["reason"].get<std::string>().empty());
  EXPECT_FALSE(fs::exists(dir.work("best.yaml")));
}

// ------------------------------------------------------------------------------- the learned planner

// gen-data, train and plan --planner arachne end to end on a tiny dataset (four configurations of at most
// 16 GPUs): training lowers the loss and lifts the beam's quality above the untrained policy's on the same
// configurations; the same seed gives the same weights, and an interrupted run resumed gives them too.
TEST(CliLearned, GenDataTrainAndPlanEndToEnd) {
  if (!fs::exists(fs::path(ARACHNE_BINARY).parent_path() / "libarachne_learned_module.so"))
    GTEST_SKIP() << "built without the learned module (ARACHNE_WITH_TORCH=OFF)";
  CliTempDir dir;
  const RunResult gen = dir.run("gen-data --out data.h5 --configs 4 --seed 3 --threads 1 --max-gpus 16 --max-templates 100");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  const std::string train = "train --data data.h5 --validation data.h5 --batch 8 --threads 1 --pg-epochs 0 ";
  const RunResult t = dir.run(train + "--imitation-epochs 10 --out long");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(dir.work("long/journal.json")));
  const auto& e = j["epochs"];
  ASSERT_EQ(e.size(), 11u);
  EXPECT_EQ(e[0]["phase"], "untrained");
  EXPECT_LT(e[10]["train_loss"].get<double>(), 0.8 * e[0]["train_loss"].get<double>());
  EXPECT_GT(e[10]["val_quality"].get<double>(), e[0]["val_quality"].get<double>());
  EXPECT_TRUE(fs::exists(dir.work("long/training.png")));

  // Every temporary the run writes is ".<final name>.tmp-<pid>[.<suffix>]", the form the next run's cleanup of
  // a killed run's leftovers recognises (a temporary of a temporary, "..<name>.tmp-<pid>.tmp-<pid>", is not).
  fs::create_directories(dir.work("straight"));
  const std::vector<std::string> created = names_created_in(dir.work("straight"), [&] {
    ASSERT_EQ(dir.run(train + "--imitation-epochs 3 --out straight").exit_code, 0);
  });
  static const std::regex temporary(R"(\.[^.].*\.tmp-[0-9]+(\..+)?)");
  int temporaries = 0;
  for (const std::string& name : created)
    if (name[0] == '.') {
      ++temporaries;
      EXPECT_TRUE(std::regex_match(name, temporary)) << name;
    }
  EXPECT_GE(temporaries, 4) << "checkpoints, journal, weights and curves are each written to a temporary first";
  ASSERT_EQ(dir.run(train + "--imitation-epochs 1 --out resumed").exit_code, 0);
  // A run killed with kill -9 leaves temporaries of the files it was writing; the next run removes them.
  const std::string dead = std::to_string(test::pid_of_no_live_process());
  for (const char* target : {"checkpoint-2.pt", "journal.json", "policy.weights", "training.h5"})
    std::ofstream(dir.work("resumed/." + std::string(target) + ".tmp-" + dead)) << "partial";
  const RunResult resumed = dir.run(train + "--imitation-epochs 3 --out resumed --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  for (const auto& entry : fs::directory_iterator(dir.work("resumed")))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  EXPECT_EQ(slurp(dir.work("straight/policy.weights")), slurp(dir.work("resumed/policy.weights")));
  expect_one_error_line(dir.run(train + "--imitation-epochs 3 --out resumed --resume --learning-rate 0.01"));

  // Several training files: the same file twice holds each example twice, so the untrained policy's mean loss
  // on them is the same as on one copy.
  const std::string twice = "train --data data.h5,data.h5 --validation data.h5 --batch 8 --threads 1 --pg-epochs 0 ";
  ASSERT_EQ(dir.run(twice + "--imitation-epochs 1 --out twice").exit_code, 0);
  const nlohmann::json jt = nlohmann::json::parse(slurp(dir.work("twice/journal.json")));
  EXPECT_NEAR(jt["epochs"][0]["train_loss"].get<double>(), e[0]["train_loss"].get<double>(), 1e-9 * e[0]["train_loss"].get<double>());
  expect_one_error_line(dir.run("train --data data.h5, --validation data.h5 --imitation-epochs 1 --out bad"));

  const RunResult plan = dir.run("plan --cluster A100-80:1x4,V100-32:1x4 --model gpt3-1.3b --planner arachne "
                                 "--policy long/policy.weights --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const nlohmann::json p = nlohmann::json::parse(plan.out)["results"][0];
  EXPECT_EQ(p["planner"], "arachne");
  EXPECT_FALSE(p["plan"].is_null());
  EXPECT_LE(p["evaluations"].get<long>(), planner::arachne_max_simulations(3));  // the default --simulate-top
  expect_one_error_line(dir.run("plan --cluster A100-80:1x4 --model gpt3-1.3b --planner arachne --policy missing.weights"));
}

}  // namespace
}  // namespace arachne
