// `arachne experiment` (planner/experiment/experiment.h): the cells' order and count, records that match
// `arachne plan` of the same cell, resume after lost cells, bad experiment files, and the shards that
// scripts/experiment_shards.py rebuilds from a finished run.
#include "planner/experiment/experiment.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "planner/arachne/arachne_planner.h"   // default_policy_path
#include "planner/arachne/policy_weights.h"   // file_fingerprint
#include "sim/io/hdf5_writer.h"
#include "sim/io/input_error.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The 8-layer test model (tests/sim/test_support.h) as a model file.
const std::string kSmallModel = ARACHNE_SOURCE_DIR "/tests/data/small-gpt.yaml";

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("arachne_experiment_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
    fs::copy_file(kSmallModel, path_ / "small-gpt.yaml");
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return (path_ / name).string();
  }
  // The binary run in this directory (relative paths in the experiment files resolve here).
  CliRun arachne(const std::string& args) const { return run("'" + std::string(ARACHNE_BINARY) + "' " + args); }
  // A shell command run in this directory.
  CliRun run(const std::string& command) const {
    const std::string cmd = "cd '" + path_.string() + "' && " + command + " >'" + (path_ / "stdout").string() +
                            "' 2>'" + (path_ / "stderr").string() + "'";
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(path_ / "stdout"), slurp(path_ / "stderr")};
  }

 private:
  fs::path path_;
};

// Two comparison cells (megatron and sailor on four A100s) and one replay cell of the bundled small trace
// with a fixed planning charge: every field but the planning wall time is deterministic.
const char* kTiny = R"(version: 1
name: tiny
budget: {evaluations: 20}
comparisons:
  - clusters: ["A100-80:1x4"]
    models: [small-gpt.yaml]
    planners: [megatron, sailor]
replays:
  - trace: traces/native_small.csv
    model: small-gpt.yaml
    planners: [megatron]
    planning_time: "5 s"
)";

TEST(Experiment, ExpansionOrderAndCount) {
  TempDir dir;
  const std::string file = dir.write("matrix.yaml", R"(comparisons:
  - clusters: ["A100-80:1x4", "V100-32:1x4"]
    models: [small-gpt.yaml, gpt3-1.3b]
    global_batches: [default, 32]
    seeds: [0, 7]
    planners: [megatron, sailor]
  - clusters: [tiny-hetero]
    models: [gpt3-1.3b]
    planners: [amp]
replays:
  - trace: traces/native_small.csv
    model: small-gpt.yaml
    planners: [megatron, sailor]
)");
  const GpuCatalog catalog = GpuCatalog::load_default();
  const Experiment x = load_experiment(file, catalog);
  const std::vector<ExperimentCell> cells = expand(x);
  // 2 clusters x 2 models x 2 batches x 2 seeds x 2 planners, + 1, + 2 replay cells.
  ASSERT_EQ(cells.size(), 32u + 1u + 2u);
  for (std::size_t i = 0; i < cells.size(); ++i) EXPECT_EQ(cells[i].index, static_cast<long>(i));
  // Planners innermost, then seeds, then batches, then models, then clusters.
  EXPECT_EQ(cells[0].planner, "megatron");
  EXPECT_EQ(cells[1].planner, "sailor");
  EXPECT_EQ(cells[0].seed, 0u);
  EXPECT_EQ(cells[2].seed, 7u);
  EXPECT_EQ(cells[0].global_batch, 16);  // the model's
  EXPECT_EQ(cells[4].global_batch, 32);
  EXPECT_EQ(cells[0].model, "small-gpt.yaml");
  EXPECT_EQ(cells[8].model, "gpt3-1.3b");
  EXPECT_EQ(cells[8].global_batch, 512);
  EXPECT_EQ(cells[15].cluster, "A100-80:1x4");
  EXPECT_EQ(cells[16].cluster, "V100-32:1x4");
  EXPECT_EQ(cells[32].block, 1);
  EXPECT_EQ(cells[32].planner, "amp");
  EXPECT_EQ(cells[33].kind, CellKind::Replay);
  EXPECT_EQ(cells[33].planner, "megatron");
  EXPECT_EQ(cells[34].planner, "sailor");
  for (std::size_t i = 0; i < 33; ++i) EXPECT_EQ(cells[i].kind, CellKind::Comparison);
  // --list prints the same cells in the same order.
  const CliRun r = dir.arachne("experiment matrix.yaml --list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 35);
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "0 " + cells[0].describe());
}

template <class T>
const T& at(const h5::TableData& t, const char* column, std::size_t row) {
  return std::get<T>(t.cells[static_cast<std::size_t>(t.column(column))][row]);
}

// A YAML node as JSON, scalars typed as `arachne plan --json` types them (quoted scalars stay strings).
nlohmann::json yaml_to_json(const YAML::Node& n) {
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& e : n) a.push_back(yaml_to_json(e));
    return a;
  }
  if (n.IsMap()) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& kv : n) o[kv.first.as<std::string>()] = yaml_to_json(kv.second);
    return o;
  }
  const std::string s = n.Scalar();
  if (n.Tag() == "!") return s;
  if (s == "true" || s == "false") return s == "true";
  char* end = nullptr;
  const long long i = std::strtoll(s.c_str(), &end, 10);
  if (!s.empty() && *end == '\0') return i;
  const double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && *end == '\0') return d;
  return s;
}

TEST(Experiment, RecordsMatchArachnePlan) {
  TempDir dir;
  dir.write("tiny.yaml", kTiny);
  const CliRun run = dir.arachne("experiment tiny.yaml --out out");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("3/3 cells done"), std::string::npos) << run.err;
  const std::string h5 = (dir / "out" / "experiment.h5").string();
  const h5::TableData t = h5::read_table(h5, "/comparisons");
  ASSERT_EQ(t.rows, 2u);
  const CliRun plan = dir.arachne("plan --cluster A100-80:1x4 --model small-gpt.yaml --planner megatron,sailor --budget 20 --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const nlohmann::json results = nlohmann::json::parse(plan.out).at("results");
  ASSERT_EQ(results.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE(results[i].at("planner").get<std::string>());
    EXPECT_EQ(at<std::string>(t, "planner", i), results[i].at("planner").get<std::string>());
    ASSERT_TRUE(at<bool>(t, "has_plan", i));
    EXPECT_EQ(yaml_to_json(YAML::Load(at<std::string>(t, "plan_yaml", i))), results[i].at("plan"));
    EXPECT_EQ(at<double>(t, "iteration_time_s", i), results[i].at("simulated_iteration_time_s").get<double>());
    EXPECT_EQ(at<double>(t, "tokens_per_s", i), results[i].at("tokens_per_s").get<double>());
    EXPECT_EQ(at<double>(t, "predicted_iteration_time_s", i), results[i].at("predicted_iteration_time_s").get<double>());
    EXPECT_EQ(at<double>(t, "peak_memory_gib", i), results[i].at("peak_memory_gib").get<double>());
    EXPECT_EQ(at<std::int64_t>(t, "evaluations", i), results[i].at("evaluations").get<std::int64_t>());
    EXPECT_EQ(at<bool>(t, "search_complete", i), results[i].at("search_complete").get<bool>());
    EXPECT_EQ(at<std::int64_t>(t, "gpus", i), 4);
  }
  // The replay cell: totals and intervals as `arachne replay --out` writes them.
  const CliRun rep = dir.arachne("replay --trace '" + std::string(ARACHNE_SOURCE_DIR) +
                                 "/traces/native_small.csv' --model small-gpt.yaml --planner megatron --planning-time 5 "
                                 "--budget 20 --out replay.h5");
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const h5::TableData mine = h5::read_table(h5, "/replay/0/megatron/intervals");
  const h5::TableData theirs = h5::read_table((dir / "replay.h5").string(), "/megatron/intervals");
  ASSERT_GT(theirs.rows, 1u);
  EXPECT_EQ(mine.rows, theirs.rows);
  EXPECT_EQ(mine.cells, theirs.cells);
  EXPECT_EQ(h5::read_table(h5, "/replay/0/megatron/totals").cells,
            h5::read_table((dir / "replay.h5").string(), "/megatron/totals").cells);
  const h5::TableData totals = h5::read_table(h5, "/replays");
  ASSERT_EQ(totals.rows, 1u);
  EXPECT_EQ(at<std::string>(totals, "group", 0), "/replay/0/megatron");
  for (const char* f : {"summary.md", "throughput.png", "planning_time.png", "replay_tokens.png"})
    EXPECT_TRUE(fs::exists(dir / "out" / f)) << f;
}

// Every column of the tables equal (planning wall times only with `planning_times`).
void expect_same_tables(const std::string& a, const std::string& b, const std::vector<std::string>& tables,
                        bool planning_times) {
  for (const std::string& table : tables) {
    SCOPED_TRACE(table);
    const h5::TableData x = h5::read_table(a, table), y = h5::read_table(b, table);
    ASSERT_EQ(x.rows, y.rows);
    ASSERT_EQ(x.columns.size(), y.columns.size());
    for (std::size_t c = 0; c < x.columns.size(); ++c) {
      if (x.columns[c].name == "planning_time_s" && !planning_times) continue;
      for (std::size_t r = 0; r < x.rows; ++r) {
        const auto& u = x.cells[c][r];
        const auto& v = y.cells[c][r];
        const bool both_nan = std::holds_alternative<double>(u) && std::isnan(std::get<double>(u)) &&
                              std::holds_alternative<double>(v) && std::isnan(std::get<double>(v));
        EXPECT_TRUE(both_nan || u == v) << x.columns[c].name << " row " << r;
      }
    }
  }
}

// Every column of every table of the kTiny experiment's file equal, but planning wall times.
void expect_same_file(const std::string& a, const std::string& b) {
  expect_same_tables(a, b, {"/comparisons", "/replays", "/replay/0/megatron/intervals", "/replay/0/megatron/totals"}, false);
}

// A comparison cell with a made-up outcome (tokens/s 0: no plan), for the summary's arithmetic.
CellResult made_up_cell(const std::string& cluster, const std::string& planner, double tokens_per_s, bool moe = false) {
  CellResult r;
  r.cell.cluster = cluster;
  r.cell.model = moe ? "moe-model" : "dense-model";
  r.cell.global_batch = 64;
  r.cell.planner = planner;
  ComparisonOutcome o;
  o.gpus = 8;
  o.moe = moe;
  o.label = planner;
  o.has_plan = tokens_per_s > 0;
  o.tokens_per_s = tokens_per_s;
  o.iteration_time_s = o.has_plan ? 64.0 / tokens_per_s : std::nan("");
  o.predicted_iteration_time_s = o.iteration_time_s * 1.1;  // every prediction 10 % too slow
  r.comparison = o;
  return r;
}

TEST(Experiment, SummaryHeadlineComparesWithTheBestBaselinePerCluster) {
  // Cluster a: best baseline 100 (sailor), arachne 120 -> 1.2. Cluster b: best baseline 100, arachne 90 ->
  // 0.9. Cluster c: no baseline plan, arachne has one -> "only it". Cluster d (MoE): arachne 200 over 100.
  const std::vector<CellResult> results = {
      made_up_cell("a", "megatron", 80),  made_up_cell("a", "sailor", 100), made_up_cell("a", "arachne", 120),
      made_up_cell("b", "megatron", 100), made_up_cell("b", "sailor", 0),   made_up_cell("b", "arachne", 90),
      made_up_cell("c", "megatron", 0),   made_up_cell("c", "sailor", 0),   made_up_cell("c", "arachne", 50),
      made_up_cell("d", "megatron", 100, true), made_up_cell("d", "arachne", 200, true)};
  Experiment x;
  x.name = "made-up";
  const std::string md = experiment_summary(x, results);
  // Geometric mean of 1.2 and 0.9 = sqrt(1.08) = 1.039; one win, no tie, one loss; one "only it".
  EXPECT_NE(md.find("| arachne | dense | 3 | 1.039 | 0.900 | 1.200 | 1 / 0 / 1 | 1 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| arachne | MoE | 1 | 2.000 | 2.000 | 2.000 | 1 / 0 / 0 | 0 | 0 |"), std::string::npos) << md;
  // Per planner: megatron ran 4 times with 3 plans; every prediction is 10 % off.
  EXPECT_NE(md.find("| megatron | 4 | 3 | 0 | 1 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 10.0 % |"), std::string::npos) << md;
  // Arachne over the best baseline where both plan: 1.2, 0.9 (cluster c has no baseline plan) and 2.0:
  // (1.2 x 0.9 x 2.0)^(1/3) = 1.293.
  EXPECT_NE(md.find("| 10.0 % | 1.293 |"), std::string::npos) << md;
}

TEST(Experiment, ResumeAfterLostCellsEndsWithTheSameFile) {
  TempDir dir;
  dir.write("tiny.yaml", kTiny);
  ASSERT_EQ(dir.arachne("experiment tiny.yaml --out full").exit_code, 0);
  // An interrupted run: the second comparison cell and the replay cell were never finished, no final file.
  ASSERT_EQ(dir.arachne("experiment tiny.yaml --out cut").exit_code, 0);
  fs::remove(dir / "cut" / "experiment.h5");
  fs::remove(dir / "cut" / "experiment.h5.shards" / "1.json");
  fs::remove(dir / "cut" / "experiment.h5.shards" / "2.json");
  const auto kept = fs::last_write_time(dir / "cut" / "experiment.h5.shards" / "0.json");
  const CliRun again = dir.arachne("experiment tiny.yaml --out cut");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("3/3 cells done (1 resumed)"), std::string::npos) << again.err;
  EXPECT_EQ(fs::last_write_time(dir / "cut" / "experiment.h5.shards" / "0.json"), kept);  // not rerun
  expect_same_file((dir / "full" / "experiment.h5").string(), (dir / "cut" / "experiment.h5").string());
  // A different experiment file is refused in the same directory.
  std::string other = kTiny;
  other.replace(other.find("evaluations: 20"), 15, "evaluations: 21");
  dir.write("other.yaml", other);
  const CliRun refused = dir.arachne("experiment other.yaml --out cut");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("error: --out: "), std::string::npos) << refused.err;
}

// The resume check names the learned planner's weights by content: shards made with other weights are
// refused.
TEST(Experiment, ResumeCheckNamesThePolicyWeightsByContent) {
  TempDir dir;
  // FNV-1a (64-bit) test vectors of its authors (http://www.isthe.com/chongo/tech/comp/fnv/): "" and "a".
  EXPECT_EQ(file_fingerprint(dir.write("empty", "")), "cbf29ce484222325");
  EXPECT_EQ(file_fingerprint(dir.write("a", "a")), "af63dc4c8601ec8c");
  dir.write("learned.yaml", R"(version: 1
budget: {evaluations: 20}
comparisons:
  - clusters: ["A100-80:1x4"]
    models: [small-gpt.yaml]
    planners: [arachne]
)");
  const CliRun run = dir.arachne("experiment learned.yaml --out out");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const fs::path options = dir / "out" / "experiment.h5.shards" / "options.txt";
  std::string text = slurp(options);
  const std::string line = "policy weights fnv1a " + file_fingerprint(default_policy_path()) + "\n";
  const std::size_t at = text.find(line);
  ASSERT_NE(at, std::string::npos) << text;
  // The same shards, as if made with other weights.
  text.replace(at, line.size(), "policy weights fnv1a 0123456789abcdef\n");
  std::ofstream(options, std::ios::binary | std::ios::trunc) << text;
  const CliRun refused = dir.arachne("experiment learned.yaml --out out");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("\nerror: --out: the shard directory "), std::string::npos) << refused.err;
  // Without the learned planner the weights are not named (other weights do not refuse the shards).
  dir.write("baseline.yaml", R"(version: 1
budget: {evaluations: 20}
comparisons:
  - clusters: ["A100-80:1x4"]
    models: [small-gpt.yaml]
    planners: [megatron]
)");
  ASSERT_EQ(dir.arachne("experiment baseline.yaml --out base").exit_code, 0);
  EXPECT_EQ(slurp(dir / "base" / "experiment.h5.shards" / "options.txt").find("policy weights"), std::string::npos);
}

TEST(Experiment, SimulatorCostModelBlocksAreTheirOwnRows) {
  TempDir dir;
  dir.write("cost.yaml", R"(budget: {evaluations: 20}
comparisons:
  - {clusters: ["A100-80:1x4"], models: [small-gpt.yaml], planners: [megatron, sailor], cost_models: [own, simulator]}
)");
  const CliRun run = dir.arachne("experiment cost.yaml --out out");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const h5::TableData t = h5::read_table((dir / "out" / "experiment.h5").string(), "/comparisons");
  // Cost models before planners; megatron is a baseline too (its own model is the simulator).
  ASSERT_EQ(t.rows, 4u);
  EXPECT_EQ(at<std::string>(t, "planner", 1), "sailor");
  EXPECT_EQ(at<std::string>(t, "planner", 2), "megatron[simulator]");
  EXPECT_EQ(at<std::string>(t, "planner", 3), "sailor[simulator]");
  // Sailor's own model prices candidates without the simulator; with the simulator as its cost model every
  // priced candidate is a simulation, within the budget.
  EXPECT_EQ(at<std::int64_t>(t, "evaluations", 1), 0);
  EXPECT_GT(at<std::int64_t>(t, "evaluations", 3), 0);
  EXPECT_LE(at<std::int64_t>(t, "evaluations", 3), 20);
  // The simulator-priced row is not a baseline of the ratios: the headline has no row for it.
  const std::string md = slurp(dir / "out" / "summary.md");
  EXPECT_EQ(md.find("## Headline"), std::string::npos) << md;
  EXPECT_NE(md.find("| sailor[simulator] |"), std::string::npos) << md;
}

// scripts/experiment_shards.py rebuilds a run's shards from its experiment.h5: the same experiment then writes
// the same file (planning times included) without running anything, and with --drop a planner's cells, of
// either cost model, are the only ones run again. Needs /usr/bin/python3 with h5py (skipped without it, except
// under CI).
TEST(ExperimentShards, RebuiltFromTheFileTheyGiveTheSameFileAndDroppedPlannersRunAgain) {
  if (std::system("/usr/bin/python3 -c 'import h5py' > /dev/null 2>&1") != 0) {
    if (std::getenv("CI") != nullptr) FAIL() << "/usr/bin/python3 cannot import h5py (CI is set)";
    GTEST_SKIP() << "/usr/bin/python3 cannot import h5py";
  }
  TempDir dir;
  const auto script = [&](const std::string& args) {
    return dir.run("/usr/bin/python3 '" + std::string(ARACHNE_SOURCE_DIR) + "/scripts/experiment_shards.py' " + args);
  };
  dir.write("cost.yaml", R"(budget: {evaluations: 20}
comparisons:
  - {clusters: ["A100-80:1x4"], models: [small-gpt.yaml], planners: [megatron, sailor], cost_models: [own, simulator]}
)");
  ASSERT_EQ(dir.arachne("experiment cost.yaml --out run").exit_code, 0);

  const CliRun rebuilt = script("run rebuilt");
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.err;
  for (const char* shard : {"0.json", "1.json", "2.json", "3.json"}) {  // the run's own shards, field for field
    const auto parsed = [&](const char* run) {
      return nlohmann::json::parse(slurp(dir / run / "experiment.h5.shards" / shard));
    };
    EXPECT_EQ(parsed("rebuilt"), parsed("run")) << shard;
  }
  const CliRun again = dir.arachne("experiment cost.yaml --out rebuilt");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("4/4 cells done (4 resumed)"), std::string::npos) << again.err;
  expect_same_tables((dir / "run" / "experiment.h5").string(), (dir / "rebuilt" / "experiment.h5").string(),
                     {"/comparisons"}, true);
  EXPECT_EQ(slurp(dir / "rebuilt" / "summary.md"), slurp(dir / "run" / "summary.md"));

  const CliRun dropped = script("run dropped --drop sailor");
  ASSERT_EQ(dropped.exit_code, 0) << dropped.err;
  EXPECT_FALSE(fs::exists(dir / "dropped" / "experiment.h5.shards" / "1.json"));  // sailor, own model
  EXPECT_FALSE(fs::exists(dir / "dropped" / "experiment.h5.shards" / "3.json"));  // sailor[simulator]
  const CliRun rerun = dir.arachne("experiment cost.yaml --out dropped");
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_NE(rerun.err.find("4/4 cells done (2 resumed)"), std::string::npos) << rerun.err;
  const h5::TableData first = h5::read_table((dir / "run" / "experiment.h5").string(), "/comparisons");
  const h5::TableData second = h5::read_table((dir / "dropped" / "experiment.h5").string(), "/comparisons");
  ASSERT_EQ(second.rows, first.rows);
  for (std::size_t i = 0; i < first.rows; ++i) {  // the search is deterministic: the same plans again
    EXPECT_EQ(at<std::string>(second, "planner", i), at<std::string>(first, "planner", i));
    EXPECT_EQ(at<double>(second, "tokens_per_s", i), at<double>(first, "tokens_per_s", i)) << i;
  }

  // Bad input: shards already there, an unknown planner, a run with replay cells; exit 2, one line, nothing
  // written.
  const auto refused = [&](const CliRun& r) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  };
  refused(script("run rebuilt"));
  refused(script("run none --drop amp"));
  dir.write("tiny.yaml", kTiny);
  ASSERT_EQ(dir.arachne("experiment tiny.yaml --out replays").exit_code, 0);
  refused(script("replays none"));
  EXPECT_FALSE(fs::exists(dir / "none"));
}

TEST(Experiment, BadFilesExitTwoWithTheLineAndWriteNothing) {
  TempDir dir;
  struct Case {
    std::string name, text, where;
  };
  const std::string head = "comparisons:\n  - clusters: [\"A100-80:1x4\"]\n    models: [small-gpt.yaml]\n";
  const std::vector<Case> cases = {
      {"unknown planner", head + "    planners: [megatron, magic]\n", ":4: comparisons[0].planners: "},
      {"unknown cluster", "comparisons:\n  - clusters: [no-such-cluster]\n    models: [small-gpt.yaml]\n    planners: [megatron]\n",
       ":2: comparisons[0].clusters: "},
      {"unknown model", "comparisons:\n  - clusters: [\"A100-80:1x4\"]\n    models: [no-such-model]\n    planners: [megatron]\n",
       ":3: comparisons[0].models: "},
      {"unknown key", head + "    planners: [megatron]\n    budgets: {evaluations: 3}\n", ":5: comparisons[0].budgets: "},
      {"empty list", head + "    planners: []\n", ":4: comparisons[0].planners: "},
      {"no cells", "name: nothing\n", ":1: comparisons: "},
      {"unknown cost model", head + "    planners: [megatron]\n    cost_models: [own, analytic]\n", ":5: comparisons[0].cost_models: "},
      {"wall without unit", head + "    planners: [megatron]\n    budget: {wall: 60}\n", ":5: comparisons[0].budget.wall: "},
      {"unknown replay key", "replays:\n  - trace: traces/native_small.csv\n    model: small-gpt.yaml\n    planners: [megatron]\n    windw: {start: \"0 s\"}\n",
       ":5: replays[0].windw: "},
      {"unknown pool rule", "replays:\n  - trace: traces/native_small.csv\n    model: small-gpt.yaml\n    planners: [megatron]\n    pool: volatile\n",
       ":5: replays[0].pool: "},
      {"empty volatility window", "replays:\n  - trace: traces/native_small.csv\n    model: small-gpt.yaml\n    planners: [megatron]\n    pool: stable\n    volatility_window: \"0 s\"\n",
       ":6: replays[0].volatility_window: "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string file = dir.write("bad.yaml", c.text);
    const CliRun r = dir.arachne("experiment bad.yaml --out out");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.err.rfind("error: bad.yaml" + c.where, 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(dir / "out"));
  }
  // Unwritable output: a directory that cannot be created.
  dir.write("good.yaml", head + "    planners: [megatron]\n");
  const CliRun r = dir.arachne("experiment good.yaml --out no/such/dir");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("error: --out: ", 0), 0u) << r.err;
  EXPECT_FALSE(fs::exists(dir / "no"));
  dir.write("file", "");
  EXPECT_EQ(dir.arachne("experiment good.yaml --out file").exit_code, 2);
}

}  // namespace
}  // namespace arachne::planner
