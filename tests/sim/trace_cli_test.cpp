// `arachne trace` and `arachne replay` from the command line: format detection, statistics, conversion
// round trip, the DESIGN replay JSON, and bad input (malformed trace rows, unknown GPU types) -> exit 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "sim/trace/trace_formats.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

struct CliRun {
  int code = 0;
  std::string out, err;
};

CliRun run(const std::string& args, const fs::path& dir) {
  const std::string out = (dir / "stdout").string(), err = (dir / "stderr").string();
  const std::string cmd = "cd '" + dir.string() + "' && '" + ARACHNE_BINARY + "' " + args + " > '" + out + "' 2> '" + err + "'";
  const int rc = std::system(cmd.c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(out), slurp(err)};
}

const std::string kFixture = std::string(ARACHNE_SOURCE_DIR) + "/traces/native_small.csv";

TEST(TraceCli, StatsAndConvertRoundTrip) {
  const ScratchDir d("trace_cli_stats");
  const CliRun s = run("trace stats --trace '" + kFixture + "' --json", d);
  ASSERT_EQ(s.code, 0) << s.err;
  const auto j = nlohmann::json::parse(s.out);
  EXPECT_EQ(j["format"], "native");
  EXPECT_EQ(j["nodes"], 3);
  const CliRun c = run("trace convert --trace '" + kFixture + "' --out copy.csv", d);
  ASSERT_EQ(c.code, 0) << c.err;
  const CliRun s2 = run("trace stats --trace copy.csv --json", d);
  ASSERT_EQ(s2.code, 0) << s2.err;
  EXPECT_EQ(nlohmann::json::parse(s2.out)["gpu_hours"], j["gpu_hours"]);  // same availability after conversion
}

TEST(TraceCli, ReplayPrintsDesignJsonAndWritesHdf5) {
  const ScratchDir d("trace_cli_replay");
  const CliRun r = run("replay --trace '" + kFixture + "' --model gpt3-1.3b --planner megatron --planning-time 5 "
                    "--budget 20 --json --out r.h5", d);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 1u);
  const auto& x = j["results"][0];
  for (const char* k : {"planner", "tokens_trained", "effective_tokens_per_s", "downtime_s", "work_lost_s", "replans"})
    EXPECT_TRUE(x.contains(k)) << k;
  for (const char* k : {"planning", "reconfig", "checkpoint", "idle"}) EXPECT_TRUE(x["downtime_s"].contains(k)) << k;
  EXPECT_GT(x["tokens_trained"].get<double>(), 0);
  // Fixed planning time: 5 s charged on every replan.
  EXPECT_DOUBLE_EQ(x["downtime_s"]["planning"].get<double>(), 5.0 * x["replans"].get<int>());
  EXPECT_TRUE(fs::exists(d / "r.h5"));
}

// --budget-wall caps every replan's search: Metis on 64 GPUs of two types searches for more than a minute
// uncapped (results/arachne-planning-time), so a 1 s cap must show as ~1 s of planning on the one replan
// (planners stop within 0.2 s of their cap: README, `--budget-wall`).
TEST(TraceCli, ReplayBudgetWallCapsEachReplan) {
  const ScratchDir d("trace_cli_wall");
  std::ofstream t(d / "t.csv");
  t << "time_s,node,gpu_type,gpus\n";
  for (int i = 0; i < 4; ++i) t << "0,a" << i << ",A100-80,8\n0,v" << i << ",V100-32,8\n";
  t.close();
  const CliRun r = run("replay --trace t.csv --until 3600 --model gpt3-1.3b --planner metis --budget-wall 1 --json", d);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto x = nlohmann::json::parse(r.out)["results"][0];
  EXPECT_EQ(x["replans"].get<int>(), 1);
  EXPECT_GE(x["downtime_s"]["planning"].get<double>(), 0.9);
  EXPECT_LE(x["downtime_s"]["planning"].get<double>(), 1.5);
  const CliRun bad = run("replay --trace t.csv --model gpt3-1.3b --planner metis --budget-wall -1 --out r.h5", d);
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err.rfind("error: --budget-wall", 0), 0u) << bad.err;
  EXPECT_FALSE(fs::exists(d / "r.h5"));
}

TEST(TraceCli, MalformedTraceRowIsBadInputWithFileAndLine) {
  const ScratchDir d("trace_cli_bad");
  std::ofstream(d / "bad.csv") << "time_s,node,gpu_type,gpus\n0,a,A100-80,8\n10,a,A100-80,eight\n";
  const CliRun r = run("replay --trace bad.csv --model gpt3-1.3b --planner megatron --out r.h5", d);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("error: bad.csv:3: gpus", 0), 0u) << r.err;
  EXPECT_FALSE(fs::exists(d / "r.h5"));
}

TEST(TraceCli, UnknownGpuTypeIsAClearError) {
  const ScratchDir d("trace_cli_unknown");
  std::ofstream(d / "t.csv") << "time_s,node,gpu_type,gpus\n0,a,B300,8\n";
  const CliRun r = run("trace stats --trace t.csv", d);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown GPU type 'B300'"), std::string::npos) << r.err;
}

TEST(TraceFormats, DetectsEveryShippedFixture) {
  const std::string t = std::string(ARACHNE_SOURCE_DIR) + "/traces/";
  EXPECT_EQ(detect_trace_format(t + "native_small.csv"), "native");
  EXPECT_EQ(detect_trace_format(t + "sailor_fixture.csv"), "sailor-csv");
  EXPECT_EQ(detect_trace_format(t + "sailor_fixture.json"), "sailor-json");
  EXPECT_EQ(detect_trace_format(t + "skypilot_fixture_v100_4.json"), "skypilot");
  EXPECT_EQ(detect_trace_format(t + "alibaba-fixture/openb_pod_list_default.csv"), "alibaba-gpu-v2023");
}

}  // namespace
}  // namespace arachne
