// `arachne evaluate` (planner/arachne/evaluate.h): the command end to end on tiny held-out clusters, its
// bad-input handling, resume from shards, the summary's arithmetic, and the ablations' template sources.
#include "planner/arachne/evaluate.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "planner/arachne/arachne_planner.h"
#include "planner/arachne/labeler.h"
#include "planner/run_planner.h"
#include "planner/template/enumerate.h"
#include "sim/io/input_error.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("arachne_evaluate_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  CliRun arachne(const std::string& args) const { return run("'" + std::string(ARACHNE_BINARY) + "' " + args); }
  // A shell command, its stdout dropped, its exit code and stderr kept.
  CliRun run(const std::string& command) const {
    const fs::path err = path_ / "stderr";
    const int status = std::system((command + " >/dev/null 2>'" + err.string() + "'").c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(err)};
  }

 private:
  fs::path path_;
};

std::string policy() { return test::configs() + "/policy/arachne.weights"; }

// Two held-out configurations of 4-8 GPUs, the learned planner, one baseline and two ablations, small K:
// seconds.
std::string tiny(const fs::path& out) {
  return "evaluate --out '" + out.string() + "' --configs 2 --seed 3 --min-gpus 4 --max-gpus 8 --planners arachne,megatron" +
         " --ablations heuristic,random --beam 2 --simulate-top 1 --budget 40 --policy '" + policy() + "'";
}

// Every field but the planning wall time.
void expect_same_cells(const std::vector<CellRecord>& a, const std::vector<CellRecord>& b) {
  ASSERT_EQ(a.size(), b.size());
  const auto same = [](double x, double y) { return (std::isnan(x) && std::isnan(y)) || x == y; };
  for (std::size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    EXPECT_EQ(a[i].config, b[i].config);
    EXPECT_EQ(a[i].planner, b[i].planner);
    EXPECT_EQ(a[i].family, b[i].family);
    EXPECT_EQ(a[i].has_plan, b[i].has_plan);
    EXPECT_TRUE(same(a[i].tokens_per_s, b[i].tokens_per_s));
    EXPECT_TRUE(same(a[i].predicted_s, b[i].predicted_s));
    EXPECT_TRUE(same(a[i].peak_memory_gib, b[i].peak_memory_gib));
    EXPECT_EQ(a[i].evaluations, b[i].evaluations);
    EXPECT_EQ(a[i].own_evaluations, b[i].own_evaluations);
    EXPECT_EQ(a[i].search_complete, b[i].search_complete);
    EXPECT_EQ(a[i].plan_yaml, b[i].plan_yaml);
    EXPECT_EQ(a[i].template_text, b[i].template_text);
  }
}

TEST(EvaluateCli, WritesTheTableSummaryAndPlotsAndResumesAShardToTheSameTable) {
  TempDir dir;
  const fs::path out = dir / "eval";
  const CliRun first = dir.arachne(tiny(out));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  for (const char* f : {"evaluation.h5", "summary.md", "ratio.png", "planning_time.png"}) EXPECT_TRUE(fs::exists(out / f)) << f;
  const std::vector<CellRecord> cells = read_evaluation_cells((out / "evaluation.h5").string());
  ASSERT_EQ(cells.size(), 8u);  // 2 configurations x (arachne, megatron, arachne[heuristic], arachne[random])
  const std::vector<std::string> order = {"arachne", "megatron", "arachne[heuristic]", "arachne[random]"};
  for (std::size_t i = 0; i < cells.size(); ++i) {
    EXPECT_EQ(cells[i].config, static_cast<long>(i / 4));
    EXPECT_EQ(cells[i].planner, order[i % 4]);
    EXPECT_EQ(cells[i].template_source, std::vector<std::string>({"policy+heuristic", "-", "heuristic", "random"})[i % 4]);
    EXPECT_TRUE(held_out_family(cells[i].family, ConfigSamplerOptions{}.held_out_modulus)) << cells[i].family;
    EXPECT_GE(cells[i].gpus, 4);
    EXPECT_LE(cells[i].gpus, 8);
    if (cells[i].feasible()) {
      // tokens/s is the batch's tokens over the simulated iteration.
      EXPECT_GT(cells[i].tokens_per_s, 0);
      EXPECT_GT(cells[i].simulated_s, 0);
      EXPECT_FALSE(cells[i].plan_yaml.empty());
    }
    if (cells[i].planner.rfind("arachne", 0) == 0) {
      EXPECT_LE(cells[i].evaluations, arachne_max_simulations(1));  // --simulate-top 1
    }
  }
  const std::string summary = slurp(out / "summary.md");
  for (const char* s : {"## Per configuration", "## Dense", "## MoE", "## Planning time", "## Where arachne loses", "arachne[random]"})
    EXPECT_NE(summary.find(s), std::string::npos) << s;

  // A killed run loses only the shards of the configurations in flight: remove one, rerun, same table.
  const fs::path shard = shard_path((out / "evaluation.h5").string(), 1);
  ASSERT_TRUE(fs::exists(shard));
  fs::remove(shard);
  const CliRun again = dir.arachne(tiny(out));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("1 resumed"), std::string::npos) << again.err;
  expect_same_cells(cells, read_evaluation_cells((out / "evaluation.h5").string()));

  // Other options on the same directory are refused before any work.
  const CliRun other = dir.arachne(tiny(out) + " --budget-wall 100");
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_EQ(other.err.rfind("error: --out: ", 0), 0u) << other.err;
}

TEST(EvaluateCli, BadOptionsExitTwoWithOneLineAndNoOutput) {
  TempDir dir;
  const std::string out = (dir / "eval").string();
  const std::string base = "evaluate --out '" + out + "' ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {base + "--configs 0", "--configs"},
      {base + "--configs 2 --planners arachne,nosuch", "--planners"},
      {base + "--configs 2 --planners arachne,arachne", "--planners"},
      {base + "--configs 2 --ablations policy+heuristic", "--ablations"},
      {base + "--configs 2 --ablations random,bogus", "--ablations"},
      {base + "--configs 2 --split test", "--split"},
      {base + "--configs 2 --min-gpus 64 --max-gpus 8", "--max-gpus"},
      {base + "--configs 2 --budget-wall 0", "--budget-wall"},
      {base + "--configs 2 --beam 0", "--beam"},
      {base + "--configs 2 --policy '" + (dir / "missing.weights").string() + "'", ""},
      {"evaluate --configs 2 --out '" + (dir / "no" / "such" / "dir").string() + "'", "--out"},
      {"evaluate --out '" + out + "'", "--configs"},
  };
  for (const auto& [args, where] : cases) {
    SCOPED_TRACE(args);
    const CliRun r = dir.arachne(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.rfind("error: " + where, 0), 0u) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line: " << r.err;
    EXPECT_FALSE(fs::exists(out)) << "output written on bad input";
  }
}

// A configuration with its cells, for the summary's arithmetic.
ConfigResult config(long index, bool moe, const std::vector<std::pair<std::string, double>>& tokens_per_s) {
  ConfigResult r;
  r.config = index;
  r.gpus = 16;
  r.family = "A100-80+V100-32";
  r.model = moe ? "mixtral-8x7b" : "gpt3-1.3b";
  r.moe = moe;
  r.global_batch = 64;
  for (const auto& [planner, tps] : tokens_per_s) {
    CellRecord c;
    c.config = index;
    c.gpus = r.gpus;
    c.moe = moe;
    c.planner = planner;
    c.has_plan = tps > 0;
    c.tokens_per_s = tps > 0 ? tps : std::nan("");
    c.planning_s = 0.5;
    c.plan = "plan of " + planner;
    c.template_text = "template of " + planner;
    r.cells.push_back(c);
  }
  return r;
}

TEST(EvaluateSummary, RatiosAreToTheBestFeasibleBaselineWithFailuresCountedApart) {
  // Dense: arachne at 0.9 and 1.1 of the best baseline (the better of two); MoE: arachne finds no plan.
  const std::vector<ConfigResult> results = {
      config(0, false, {{"arachne", 90}, {"megatron", 100}, {"sailor", 50}}),
      config(1, false, {{"arachne", 220}, {"megatron", 150}, {"sailor", 200}}),
      config(2, true, {{"arachne", 0}, {"megatron", 0}, {"sailor", 300}}),
  };
  EvaluateOptions opt;
  opt.options_text = "test\n";
  const std::string md = evaluation_summary(results, opt);
  // Per configuration: 90/100, 220/200, 0 (no plan while sailor had one).
  EXPECT_NE(md.find("| 0 | 16 | A100-80+V100-32 | gpt3-1.3b | 64 | megatron | 100 | 0.900 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | 16 | A100-80+V100-32 | gpt3-1.3b | 64 | sailor | 200 | 1.100 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2 | 16 | A100-80+V100-32 | mixtral-8x7b (MoE) | 64 | sailor | 300 | 0.000 |"), std::string::npos) << md;
  // Dense geometric mean sqrt(0.9 x 1.1) = 0.995, minimum 0.9; MoE: no positive ratio, minimum 0, one failure.
  EXPECT_NE(md.find("| arachne | 2 | 0.995 | 0.900 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| arachne | 1 | - | 0.000 | 1 |"), std::string::npos) << md;
  // Losses: configurations 0 and 2, with the winning baseline's plan; not configuration 1.
  EXPECT_NE(md.find("- config 0 "), std::string::npos);
  EXPECT_NE(md.find("plan of megatron"), std::string::npos);
  EXPECT_NE(md.find("- config 2 "), std::string::npos);
  EXPECT_EQ(md.find("- config 1 "), std::string::npos);
}

TEST(EvaluateShards, ConfigResultRoundTripsThroughJsonExactly) {
  ConfigResult r = config(7, false, {{"arachne", 1234.5678901234567}, {"megatron", 0}});
  r.cells[0].predicted_s = 0.1 + 0.2;
  r.cells[1].predicted_s = std::nan("");
  const ConfigResult back = config_result_from_json(config_result_to_json(r));
  ASSERT_EQ(back.cells.size(), 2u);
  EXPECT_EQ(back.cells[0].tokens_per_s, r.cells[0].tokens_per_s);
  EXPECT_EQ(back.cells[0].predicted_s, r.cells[0].predicted_s);
  EXPECT_TRUE(std::isnan(back.cells[1].tokens_per_s));
  EXPECT_TRUE(std::isnan(back.cells[1].predicted_s));
  EXPECT_EQ(back.cells[1].config, 7);
}

// scripts/evaluation_shards.py rebuilds a run's shards from its evaluation.h5: the same command then writes the
// same cells (planning times included) and summary without running anything, and with --cells-from another
// run's cells take the place of this run's, the others kept. Needs /usr/bin/python3 with h5py (skipped
// without it, except under CI).
TEST(EvaluateShards, RebuiltFromTheFileTheyGiveTheSameTableAndTakeAnotherRunsCells) {
  if (std::system("/usr/bin/python3 -c 'import h5py' > /dev/null 2>&1") != 0) {
    if (std::getenv("CI") != nullptr) FAIL() << "/usr/bin/python3 cannot import h5py (CI is set)";
    GTEST_SKIP() << "/usr/bin/python3 cannot import h5py";
  }
  TempDir dir;
  const auto script = [&](const std::string& args) {
    return dir.run("/usr/bin/python3 '" + std::string(ARACHNE_SOURCE_DIR) + "/scripts/evaluation_shards.py' " + args);
  };
  const auto read = [&](const char* name) { return read_evaluation_cells((dir / name / "evaluation.h5").string()); };
  const auto same_with_planning_time = [](const CellRecord& a, const CellRecord& b) {
    expect_same_cells({a}, {b});
    EXPECT_EQ(a.planning_s, b.planning_s) << a.planner;
  };
  ASSERT_EQ(dir.arachne(tiny(dir / "run")).exit_code, 0);
  // An arachne-only run of the same configurations (its planning times differ from the first run's).
  std::string arachne_only = tiny(dir / "new");
  arachne_only.replace(arachne_only.find("arachne,megatron"), std::string("arachne,megatron").size(), "arachne");
  arachne_only.replace(arachne_only.find("heuristic,random"), std::string("heuristic,random").size(), "none");
  ASSERT_EQ(dir.arachne(arachne_only).exit_code, 0);

  const CliRun rebuilt = script("'" + (dir / "run").string() + "' '" + (dir / "rebuilt").string() + "'");
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.err;
  const CliRun again = dir.arachne(tiny(dir / "rebuilt"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  // Nothing ran again: the planning wall times, which no two runs share, are the first run's.
  const std::vector<CellRecord> run = read("run"), fresh = read("new"), back = read("rebuilt");
  ASSERT_EQ(back.size(), run.size());
  for (std::size_t i = 0; i < run.size(); ++i) same_with_planning_time(back[i], run[i]);
  EXPECT_EQ(slurp(dir / "rebuilt" / "summary.md"), slurp(dir / "run" / "summary.md"));

  const CliRun merged = script("'" + (dir / "run").string() + "' '" + (dir / "merged").string() + "' --cells-from '" +
                               (dir / "new").string() + "'");
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  ASSERT_EQ(dir.arachne(tiny(dir / "merged")).exit_code, 0);
  const std::vector<CellRecord> cells = read("merged");
  ASSERT_EQ(cells.size(), run.size());
  ASSERT_EQ(fresh.size(), 2u);
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (cells[i].planner == "arachne")
      same_with_planning_time(cells[i], fresh[static_cast<std::size_t>(cells[i].config)]);
    else
      same_with_planning_time(cells[i], run[i]);
  }

  // Bad input: shards already there, or another run's configurations; exit 2, one line, nothing written.
  const CliRun twice = script("'" + (dir / "run").string() + "' '" + (dir / "merged").string() + "'");
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_EQ(twice.err.rfind("error: ", 0), 0u) << twice.err;
  std::string other_seed = tiny(dir / "other");
  other_seed.replace(other_seed.find("--seed 3"), 8, "--seed 4");
  ASSERT_EQ(dir.arachne(other_seed).exit_code, 0);
  const CliRun mismatch = script("'" + (dir / "run").string() + "' '" + (dir / "none").string() + "' --cells-from '" +
                                 (dir / "other").string() + "'");
  EXPECT_EQ(mismatch.exit_code, 2);
  EXPECT_EQ(mismatch.err.rfind("error: ", 0), 0u) << mismatch.err;
  EXPECT_FALSE(fs::exists(dir / "none"));
}

struct Snapshot {
  Cluster cluster;
  Topology topo;
  ModelConfig model;
  explicit Snapshot(const std::string& spec)
      : cluster(load_cluster(spec, GpuCatalog::load_default())), topo(cluster), model(load_model("gpt3-1.3b")) {}
  PlanRequest request(TemplateSource source, int k) const {
    PlanRequest r;
    r.cluster = &cluster;
    r.topo = &topo;
    r.model = &model;
    r.global_batch = 64;
    r.arachne_policy = policy();
    r.arachne_templates = source;
    r.arachne_beam = k;
    r.arachne_simulate = 1;
    return r;
  }
};

TEST(ArachneTemplateSource, EachAblationProposesItsGeneratorsTemplates) {
  const Snapshot s("A100-80:1x4,V100-32:2x2");
  const int k = 4;
  EXPECT_EQ(proposed_templates(s.request(TemplateSource::Heuristic, k), 64), heuristic_templates(s.cluster, s.model, k));
  const std::vector<Template> random = proposed_templates(s.request(TemplateSource::Random, k), 64);
  EXPECT_EQ(random, sample_templates(s.cluster, s.model, LabelOptions{}.enumeration, k, 0));
  EXPECT_EQ(random.size(), static_cast<std::size_t>(k));

  // The exhaustive source: the restricted enumeration, cut (and said so) at the cap.
  PlanRequest ex = s.request(TemplateSource::Exhaustive, k);
  EnumerationLimits space = LabelOptions{}.enumeration;
  space.max_templates = 0;
  const Enumeration all = enumerate_templates(s.cluster, s.model, space);
  ASSERT_TRUE(all.complete);
  ASSERT_GT(all.templates.size(), 5u);
  bool complete = false;
  ex.arachne_exhaustive_cap = static_cast<long>(all.templates.size()) + 1;  // a cap the walk does not reach
  EXPECT_EQ(proposed_templates(ex, 64, &complete), all.templates);
  EXPECT_TRUE(complete);
  ex.arachne_exhaustive_cap = 5;
  const std::vector<Template> cut = proposed_templates(ex, 64, &complete);
  EXPECT_EQ(cut, std::vector<Template>(all.templates.begin(), all.templates.begin() + 5));
  EXPECT_FALSE(complete);
  ArachnePlanner planner;
  const PlannerRun run = run_planner(planner, ex);
  EXPECT_EQ(run.label, "arachne[exhaustive]");
  EXPECT_FALSE(run.result.search_complete);  // the cap cut the enumeration
}

TEST(ArachneTemplateSource, NamesRoundTripAndUnknownNamesAreBadInput) {
  for (TemplateSource t : {TemplateSource::PolicyAndHeuristic, TemplateSource::Policy, TemplateSource::Random,
                           TemplateSource::Heuristic, TemplateSource::Exhaustive})
    EXPECT_EQ(parse_template_source(template_source_name(t), "--x"), t);
  EXPECT_THROW(parse_template_source("beam", "--arachne-templates"), InputError);
  EXPECT_EQ(arachne_label(TemplateSource::PolicyAndHeuristic), "arachne");
  EXPECT_EQ(arachne_label(TemplateSource::Policy), "arachne[policy]");
  EXPECT_EQ(arachne_label(TemplateSource::Heuristic), "arachne[heuristic]");
}

}  // namespace
}  // namespace arachne::planner
