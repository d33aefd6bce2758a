// The plotting scripts (scripts/plot_trace.py, plot_replay.py, plot_replay_compare.py, plot_planning_time.py,
// wall_budget_table.py, ablation_table.py)
// run by /usr/bin/python3: each
// writes a real PNG (magic bytes, more than a trivial size), atomically (no temporary file left behind),
// and a bad input leaves no output. Skipped when /usr/bin/python3 lacks matplotlib or h5py, except under
// CI (the environment variable CI set), where that is a failure.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "tests/sim/test_support.h"

namespace arachne {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

int shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

bool python_has_plot_modules() {
  return shell("/usr/bin/python3 -c 'import matplotlib, h5py' > /dev/null 2>&1") == 0;
}

#define PLOT_SCRIPTS_REQUIRE_PYTHON()                                                           \
  do {                                                                                         \
    if (!python_has_plot_modules()) {                                                          \
      if (std::getenv("CI") != nullptr)                                                        \
        FAIL() << "/usr/bin/python3 cannot import matplotlib and h5py (CI is set)";            \
      GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib and h5py";                    \
    }                                                                                          \
  } while (0)

std::string script(const std::string& name) { return std::string(ARACHNE_SOURCE_DIR) + "/scripts/" + name; }

// A PNG starts with the 8-byte signature 89 50 4E 47 0D 0A 1A 0A (PNG spec, section 5.2).
bool is_png(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  const unsigned char want[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  return f.gcount() == 8 && std::equal(sig, sig + 8, reinterpret_cast<const char*>(want));
}

// Only the expected files remain in `dir` (no ".*.tmp.png" left by the atomic write).
int hidden_files(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().front() == '.') ++n;
  return n;
}

TEST(PlotScripts, TracePlotWritesPng) {
  PLOT_SCRIPTS_REQUIRE_PYTHON();
  const ScratchDir d("plot_scripts_trace");
  const fs::path png = d / "trace.png";
  const int rc = shell("/usr/bin/python3 '" + script("plot_trace.py") + "' '" + png.string() + "' '" +
                       ARACHNE_SOURCE_DIR + "/traces/native_small.csv' 'native small' 2> '" +
                       (d / "err").string() + "'");
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(fs::exists(png));
  EXPECT_TRUE(is_png(png));
  // A rendered figure with axes, two filled series and a legend is tens of kB; an empty canvas at this size
  // compresses to a few kB, so > 5 kB says something was drawn.
  EXPECT_GT(fs::file_size(png), 5000u);
  EXPECT_EQ(hidden_files(d), 0);
}

TEST(PlotScripts, TracePlotBadInputLeavesNoFile) {
  PLOT_SCRIPTS_REQUIRE_PYTHON();
  const ScratchDir d("plot_scripts_trace_bad");
  {
    std::ofstream f(d / "bad.csv");
    f << "time,node,type,gpus\n0,a,A100-40,8\n";  // wrong header
  }
  const fs::path png = d / "bad.png";
  const int rc = shell("/usr/bin/python3 '" + script("plot_trace.py") + "' '" + png.string() + "' '" +
                       (d / "bad.csv").string() + "' 2> /dev/null");
  EXPECT_NE(rc, 0);
  EXPECT_FALSE(fs::exists(png));
}

TEST(PlotScripts, ReplayPlotWritesPng) {
  PLOT_SCRIPTS_REQUIRE_PYTHON();
  const ScratchDir d("plot_scripts_replay");
  const fs::path h5 = d / "r.h5", png = d / "replay.png";
  const int replay_rc = shell("cd '" + d.string() + "' && '" + ARACHNE_BINARY + "' replay --trace '" +
                              ARACHNE_SOURCE_DIR +
                              "/traces/native_small.csv' --model gpt3-1.3b --planner megatron --planning-time 5"
                              " --budget 20 --out '" + h5.string() + "' > /dev/null 2> '" + (d / "replay.err").string() +
                              "'");
  ASSERT_EQ(replay_rc, 0) << "arachne replay failed; see " << (d / "replay.err");
  ASSERT_TRUE(fs::exists(h5));
  const int rc = shell("/usr/bin/python3 '" + script("plot_replay.py") + "' '" + png.string() + "' '" + h5.string() +
                       "' 2> '" + (d / "plot.err").string() + "'");
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(fs::exists(png));
  EXPECT_TRUE(is_png(png));
  EXPECT_GT(fs::file_size(png), 5000u);  // two panels with lines and legends (see TracePlotWritesPng)
  EXPECT_EQ(hidden_files(d), 0);
}

TEST(PlotScripts, ReplayPlotMissingFileLeavesNoPng) {
  PLOT_SCRIPTS_REQUIRE_PYTHON();
  const ScratchDir d("plot_scripts_replay_bad");
  const fs::path png = d / "replay.png";
  const int rc = shell("/usr/bin/python3 '" + script("plot_replay.py") + "' '" + png.string() + "' '" +
                       (d / "missing.h5").string() + "' 2> /dev/null");
  EXPECT_NE(rc, 0);
  EXPECT_FALSE(fs::exists(png));
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Two planners' replays of one trace: the table ranks them against the best baseline (megatron, the only
// one here, so exactly 1.000), and the cumulative-tokens figure is a real PNG.
TEST(PlotScripts, ReplayCompareWritesTablesAndPng) {
  PLOT_SCRIPTS_REQUIRE_PYTHON();
  const ScratchDir d("plot_scripts_replay_compare");
  fs::create_directories(d / "small");
  for (const std::string p : {"megatron", "arachne"}) {
    const int rc = shell("'" + std::string(ARACHNE_BINARY) + "' replay --trace '" + ARACHNE_SOURCE_DIR +
                         "/traces/native_small.csv' --model gpt3-1.3b --planner " + p + " --planning-time 5 --budget 20 --out '" +
                         (d / "small" / (p + ".h5")).string() + "' > /dev/null 2> '" + (d / (p + ".err")).string() + "'");
    ASSERT_EQ(rc, 0) << "arachne replay failed; see " << (d / (p + ".err"));
  }
  const int rc = shell("/usr/bin/python3 '" + script("plot_replay_compare.py") + "' '" + d.string() + "' 2> '" +
                       (d / "plot.err").string() + "'");
  ASSERT_EQ(rc, 0) << slurp(d / "plot.err");
  const std::string summary = slurp(d / "summary.md");
  EXPECT_NE(summary.find("## small (best baseline: megatron)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("| megatron | "), std::string::npos);
  EXPECT_NE(summary.find(" | 1.000 | "), std::string::npos);
  EXPECT_NE(summary.find("| arachne | "), std::string::npos);
  EXPECT_TRUE(is_png(d / "small.png"));
  EXPECT_GT(fs::file_size(d / "small.png"), 5000u);
  EXPECT_EQ(hidden_files(d), 0);
}

TEST(PlotScripts, ReplayCompareWithoutReplaysFailsAndWritesNothing) {
  PLOT_SCRIPTS_REQUIRE_PYTHON();
  const ScratchDir d("plot_scripts_replay_compare_empty");
  EXPECT_NE(shell("/usr/bin/python3 '" + script("plot_replay_compare.py") + "' '" + d.string() + "' 2> /dev/null"), 0);
  EXPECT_TRUE(fs::is_empty(d));
}

// One small evaluation read as the ~8-GPU size: one CSV row per planner, a summary row per planner, a PNG.
TEST(PlotScripts, PlanningTimeWritesTablesAndPng) {
  PLOT_SCRIPTS_REQUIRE_PYTHON();
  const ScratchDir d("plot_scripts_planning_time");
  const int erc = shell("'" + std::string(ARACHNE_BINARY) + "' evaluate --out '" + (d / "gpus-8").string() +
                        "' --configs 1 --seed 1 --min-gpus 8 --max-gpus 8 --planners arachne,megatron --ablations none"
                        " --budget-wall 10 > /dev/null 2> '" + (d / "eval.err").string() + "'");
  ASSERT_EQ(erc, 0) << slurp(d / "eval.err");
  const int rc = shell("/usr/bin/python3 '" + script("plot_planning_time.py") + "' '" + d.string() + "' 10 2> '" +
                       (d / "plot.err").string() + "'");
  ASSERT_EQ(rc, 0) << slurp(d / "plot.err");
  const std::string csv = slurp(d / "planning_time.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3) << csv;  // header + two planners
  const std::string summary = slurp(d / "summary.md");
  EXPECT_NE(summary.find("| arachne | "), std::string::npos) << summary;
  EXPECT_NE(summary.find("| megatron | "), std::string::npos);
  EXPECT_NE(summary.find("~8 GPUs"), std::string::npos);
  EXPECT_TRUE(is_png(d / "planning_time.png"));
  EXPECT_GT(fs::file_size(d / "planning_time.png"), 5000u);
}

// The committed evaluations given as the runs of a cap: every plan is its own committed plan, so the cap's
// row must say exactly what the committed row says (ratios over the uncapped plan 1.000), and the table and
// figure are written. A cap without runs fails and writes nothing.
TEST(PlotScripts, WallBudgetTableComparesRunsWithTheCommittedCells) {
  PLOT_SCRIPTS_REQUIRE_PYTHON();
  const ScratchDir d("plot_scripts_wall_budget");
  const fs::path source(ARACHNE_SOURCE_DIR);
  const fs::path runs = d / "runs" / "cap-7";
  fs::create_directories(runs);
  for (int s = 12; s <= 20; ++s)
    fs::create_directory_symlink(source / "results/arachne-evaluation-fresh" / ("seed-" + std::to_string(s)), runs / ("fresh-" + std::to_string(s)));
  fs::create_directory_symlink(source / "results/arachne-evaluation", runs / "heldout-12");
  for (const int g : {64, 256, 1024})
    fs::create_directory_symlink(source / "results/arachne-planning-time" / ("gpus-" + std::to_string(g)), runs / ("gpus-" + std::to_string(g)));
  const auto table = [&](const std::string& out, const std::string& caps) {
    return shell("cd '" + source.string() + "' && /usr/bin/python3 scripts/wall_budget_table.py '" + (d / out).string() + "' '" +
                 (d / "runs").string() + "' " + caps + " 2> '" + (d / (out + ".err")).string() + "'");
  };
  ASSERT_EQ(table("out", "7"), 0) << slurp(d / "out.err");
  const std::string summary = slurp(d / "out" / "summary.md");
  const auto row = [&](const std::string& label) {
    const size_t at = summary.find("| " + label + " |");
    if (at == std::string::npos) return std::string();
    const size_t cells = summary.find('|', at + 1);
    return summary.substr(cells, summary.find('\n', at) - cells);
  };
  ASSERT_FALSE(row("7 s").empty()) << summary;
  EXPECT_EQ(row("7 s"), row("none (committed)")) << summary;
  EXPECT_NE(row("7 s").find("| 1.000 |"), std::string::npos) << summary;
  EXPECT_TRUE(is_png(d / "out" / "wall_budget.png"));
  EXPECT_EQ(hidden_files(d / "out"), 0);
  EXPECT_NE(table("missing", "7 8"), 0);  // no runs of cap 8
  EXPECT_FALSE(fs::exists(d / "missing" / "summary.md"));
  EXPECT_FALSE(fs::exists(d / "missing" / "wall_budget.png"));
}

// The committed fresh evaluations, with arachne's cells copied as the policy's row, given as the
// untrained-policy variant's runs: every plan is arachne's committed plan, so both its rows are 1.000 over
// arachne on dense and MoE models, and the table and figure are written. A variant whose runs lack a row it
// reports (climbs needs the ablation rows) fails and writes nothing, as does a runs directory with no variant.
TEST(PlotScripts, AblationTableComparesRunsWithTheCommittedCells) {
  PLOT_SCRIPTS_REQUIRE_PYTHON();
  const ScratchDir d("plot_scripts_ablation_table");
  const fs::path source(ARACHNE_SOURCE_DIR);
  const auto fresh = [&](int seed) { return source / "results/arachne-evaluation-fresh" / ("seed-" + std::to_string(seed)); };
  const auto link_fresh = [&](const fs::path& runs) {
    fs::create_directories(runs);
    for (int s = 12; s <= 20; ++s) fs::create_directory_symlink(fresh(s), runs / ("seed-" + std::to_string(s)));
  };
  {
    std::ofstream add(d / "add_policy_row.py");
    add << "import sys, h5py, numpy as np\n"
           "with h5py.File(sys.argv[1], 'r') as f, h5py.File(sys.argv[2], 'w') as g:\n"
           "    f.copy('configs', g)\n"
           "    cells = f['cells'][:]\n"
           "    extra = cells[[c['planner'] in (b'arachne', 'arachne') for c in cells]].copy()\n"
           "    extra['planner'] = 'arachne[policy]'\n"
           "    g.create_dataset('cells', data=np.concatenate([cells, extra]), dtype=f['cells'].dtype)\n";
  }
  for (int s = 12; s <= 20; ++s) {
    const fs::path seed = d / "runs" / "untrained-policy" / ("seed-" + std::to_string(s));
    fs::create_directories(seed);
    ASSERT_EQ(shell("/usr/bin/python3 '" + (d / "add_policy_row.py").string() + "' '" + (fresh(s) / "evaluation.h5").string() +
                    "' '" + (seed / "evaluation.h5").string() + "'"),
              0);
  }
  link_fresh(d / "bad" / "climbs");
  fs::create_directories(d / "empty");
  const auto table = [&](const std::string& out, const std::string& runs) {
    return shell("cd '" + source.string() + "' && /usr/bin/python3 scripts/ablation_table.py '" + (d / out).string() + "' '" +
                 (d / runs).string() + "' 2> '" + (d / (out + ".err")).string() + "'");
  };
  ASSERT_EQ(table("out", "runs"), 0) << slurp(d / "out.err");
  const std::string summary = slurp(d / "out" / "summary.md");
  for (const std::string name : {"arachne", "arachne[policy]"}) {
    const size_t at = summary.find("| untrained policy (default search) | " + name + " |");
    ASSERT_NE(at, std::string::npos) << summary;
    std::vector<std::string> cells;  // the row's cells after the variant and the row
    std::stringstream row(summary.substr(at, summary.find('\n', at) - at));
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    ASSERT_GE(cells.size(), 13u) << summary;
    EXPECT_EQ(cells[7], " 1.000 ") << name << "\n" << summary;   // dense, over arachne's committed plan
    EXPECT_EQ(cells[12], " 1.000 ") << name << "\n" << summary;  // MoE, over arachne's committed plan
  }
  EXPECT_TRUE(is_png(d / "out" / "ablations.png"));
  EXPECT_EQ(hidden_files(d / "out"), 0);
  EXPECT_NE(table("bad_out", "bad"), 0);
  EXPECT_FALSE(fs::exists(d / "bad_out" / "summary.md"));
  EXPECT_NE(table("empty_out", "empty"), 0);
  EXPECT_FALSE(fs::exists(d / "empty_out" / "summary.md"));
}

}  // namespace
}  // namespace arachne
