// The input contract end to end (DESIGN.md "CLI"): bad input exits 2 with one line `error: <where>: <what>`
// naming the file and line, the flag or the spec, before any long work and without an output file.
// Part 1: one test per input of ../shared/reliability/README.md (inputs that once crashed, hung, gave a
// wrong result or an internal error), reading the files there (skipped without them, like the data tests).
// Part 2: every value-taking flag of every command, as listed by the command's own --help (the CLI's
// option definitions), with malformed values.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

namespace arachne {
namespace {

namespace fs = std::filesystem;

// A generous bound for "before any long work": the runs take ~0.1 s each; 5 s leaves room for a loaded
// 2-core machine while a hang or a full replay would exceed it.
constexpr double kQuickS = 5.0;

std::string reliability_dir() {
  const std::string data = test::data_dir();
  if (data.empty()) return "";
  const fs::path dir = fs::path(data).parent_path() / "reliability";
  return fs::exists(dir) ? dir.string() : std::string();
}

std::string quoted(const std::string& word) {
  std::string out = "'";
  for (const char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct CliRun {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;
};

// A fresh working directory per test; `arachne` runs in it with a CPU-time limit, so a hang fails instead
// of stalling the suite.
class Workdir {
 public:
  Workdir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("arachne_input_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_ / "work");
  }
  ~Workdir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string work(const std::string& name) const { return (path_ / "work" / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_ / "work")) names.push_back(e.path().filename().string());
    return names;
  }
  CliRun run(const std::vector<std::string>& words) const {
    // A CPU-time limit instead of timeout(1): one process less per run; a hang spins and is killed.
    std::string cmd = "cd " + quoted((path_ / "work").string()) + " && ulimit -t 20 && exec " + quoted(ARACHNE_BINARY);
    for (const std::string& w : words) cmd += " " + quoted(w);
    cmd += " >" + quoted((path_ / "stdout").string()) + " 2>" + quoted((path_ / "stderr").string());
    const auto t0 = std::chrono::steady_clock::now();
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(path_ / "stdout");
    r.err = slurp(path_ / "stderr");
    return r;
  }

 private:
  static std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  fs::path path_;
};

// Exit 2, quickly, with one `error: <where>: <what>` line whose where starts with `where` and whose what
// says `what`.
void expect_bad_input(const CliRun& r, const std::string& where, const std::string& what = "") {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_LT(r.seconds, kQuickS) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_EQ(r.err.rfind("error: " + where, 0), 0u) << "where should start with '" << where << "': " << r.err;
  EXPECT_EQ(r.err.find("error: :"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << "a library's raw text: " << r.err;
  if (!what.empty()) {
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
  }
}

std::string trace(const std::string& name) { return std::string(ARACHNE_SOURCE_DIR) + "/traces/" + name; }

#define REQUIRE_RELIABILITY_DIR(R)                                                       \
  const std::string R = reliability_dir();                                               \
  if (R.empty()) GTEST_SKIP() << "../shared/reliability not found (next to ARACHNE_DATA)"

// ---- Part 1: ../shared/reliability/README.md, line by line

const std::vector<std::string> kOneGpuPlan = {"--tp", "1", "--pp", "1", "--dp", "1", "--micro-batch", "1"};

std::vector<std::string> simulate_with(const std::string& cluster, const std::string& model,
                                       std::vector<std::string> extra = {}) {
  std::vector<std::string> w = {"simulate", "--cluster", cluster, "--model", model};
  w.insert(w.end(), kOneGpuPlan.begin(), kOneGpuPlan.end());
  w.insert(w.end(), extra.begin(), extra.end());
  return w;
}

TEST(ReliabilityInputs, HeadsOf2To32IsOutOfRangeNotAFloatingPointCrash) {
  REQUIRE_RELIABILITY_DIR(R);
  const Workdir d;
  expect_bad_input(d.run(simulate_with("A100-80:1x8", R + "/heads_2p32.yaml")), R + "/heads_2p32.yaml:", "heads");
  expect_bad_input(d.run({"plan", "--cluster", "A100-80:1x8", "--model", R + "/heads_2p32.yaml", "--planner", "megatron"}),
                   R + "/heads_2p32.yaml:", "heads");
  expect_bad_input(d.run({"replay", "--trace", trace("native_small.csv"), "--model", R + "/heads_2p32.yaml", "--planner",
                          "megatron", "--planning-time", "5"}),
                   R + "/heads_2p32.yaml:", "heads");
}

TEST(ReliabilityInputs, LayersBeyondIntAreRefusedNotTruncated) {
  REQUIRE_RELIABILITY_DIR(R);
  const Workdir d;
  expect_bad_input(d.run(simulate_with("A100-80:1x8", R + "/layers_trunc.yaml", {"--json"})), R + "/layers_trunc.yaml:",
                   "layers");
  expect_bad_input(d.run(simulate_with("A100-80:1x8", R + "/heads_2p31.yaml")), R + "/heads_2p31.yaml:", "heads");
}

TEST(ReliabilityInputs, OverflowingJsonNumbersInTracesNameFileAndLine) {
  REQUIRE_RELIABILITY_DIR(R);
  const Workdir d;
  expect_bad_input(d.run({"trace", "stats", "--trace", R + "/overflow.json"}), R + "/overflow.json:1:", "1e309");
  expect_bad_input(d.run({"trace", "stats", "--trace", R + "/overflow_sky.json"}), R + "/overflow_sky.json:1:");
}

TEST(ReliabilityInputs, InfiniteBandwidthIsBadInputWithItsLine) {
  REQUIRE_RELIABILITY_DIR(R);
  const Workdir d;
  expect_bad_input(d.run({"simulate", "--cluster", R + "/bw_inf.yaml", "--model", "gpt3-1.3b", "--tp", "2", "--pp", "1",
                          "--dp", "1", "--micro-batch", "1"}),
                   R + "/bw_inf.yaml:", "bandwidth");
}

TEST(ReliabilityInputs, DuplicatePlannerIsRefusedBeforeTheReplayAndWritesNothing) {
  const Workdir d;
  expect_bad_input(d.run({"replay", "--trace", trace("native_small.csv"), "--model", "gpt3-1.3b", "--planner",
                          "megatron,megatron", "--planning-time", "5", "--out", "r.h5"}),
                   "--planner", "twice");
  EXPECT_TRUE(d.entries().empty());
}

TEST(ReliabilityInputs, MalformedReplaySecondsNameTheFlag) {
  const Workdir d;
  const std::vector<std::string> base = {"replay", "--trace", trace("native_small.csv"), "--model", "gpt3-1.3b",
                                         "--planner", "megatron", "--json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> w = base;
    w.insert(w.end(), extra.begin(), extra.end());
    return w;
  };
  expect_bad_input(d.run(with({"--checkpoint-interval", "0x10"})), "--checkpoint-interval");
  expect_bad_input(d.run(with({"--until", " 2"})), "--until");
  expect_bad_input(d.run(with({"--until", "18446744073709551615"})), "--until");
  expect_bad_input(d.run(with({"--volatility-window", "0"})), "--volatility-window");
  expect_bad_input(d.run(with({"--pool", "volatile"})), "--pool");
}

TEST(ReliabilityInputs, UnwritableOutIsRefusedBeforeTheWork) {
  const Workdir d;
  expect_bad_input(d.run({"trace", "convert", "--trace", trace("native_small.csv"), "--out", "/nonexistent/x.csv"}), "--out");
  expect_bad_input(d.run({"trace", "generate", "--out", "/nonexistent/x.csv", "--duration", "1000"}), "--out");
  expect_bad_input(d.run({"trace", "plot", "--trace", trace("native_small.csv"), "--out", "/nonexistent/x.png"}), "--out");
  expect_bad_input(d.run({"replay", "--trace", trace("native_small.csv"), "--model", "gpt3-1.3b", "--planner", "megatron",
                          "--planning-time", "5", "--out", "/nonexistent/r.h5"}),
                   "--out");
  // Every other command that writes: checked before the work too.
  const std::vector<std::vector<std::string>> writers = {
      {"simulate", "--cluster", "A100-80:1x8", "--model", "gpt3-1.3b", "--tp", "1", "--out", "/nonexistent/s.h5"},
      {"simulate", "--cluster", "A100-80:1x8", "--model", "gpt3-1.3b", "--tp", "1", "--timeline", "/nonexistent/t.json"},
      {"plan", "--cluster", "A100-80:1x8", "--model", "gpt3-1.3b", "--planner", "megatron", "--out", "/nonexistent/p.yaml"},
      {"gen-data", "--configs", "1", "--out", "/nonexistent/d.h5"},
      {"evaluate", "--configs", "1", "--out", "/nonexistent/dir/eval"},
      {"train", "--data", "a.h5", "--validation", "b.h5", "--out", "/nonexistent/dir/run"},
      {"experiment", std::string(ARACHNE_SOURCE_DIR) + "/configs/experiments/demo.yaml", "--out", "/nonexistent/dir/x"}};
  for (const auto& words : writers) {
    SCOPED_TRACE(words[0]);
    const std::string flag = words[words.size() - 2];
    expect_bad_input(d.run(words), flag);
  }
}

TEST(ReliabilityInputs, AbsurdSizesAreRefusedInsteadOfHanging) {
  REQUIRE_RELIABILITY_DIR(R);
  const Workdir d;
  expect_bad_input(d.run({"simulate", "--cluster", "A100-80:100000x8", "--model", "gpt3-1.3b", "--tp", "8", "--pp", "1",
                          "--micro-batch", "1"}),
                   "A100-80:100000x8", "65536");
  expect_bad_input(d.run({"simulate", "--cluster", "A100-80:8192x8", "--model", "gpt3-1.3b", "--tp", "8", "--pp", "1",
                          "--dp", "100000", "--micro-batch", "1"}),
                   "--dp");
  expect_bad_input(d.run({"simulate", "--cluster", "A100-80:4x8", "--model", "gpt3-1.3b", "--tp", "1", "--pp", "24",
                          "--dp", "1", "--micro-batch", "1", "--global-batch", "65536", "--ignore-memory"}),
                   "--tp/--pp/--dp", "steps per pipeline");
  expect_bad_input(d.run({"plan", "--cluster", "A100-80:1x100000", "--model", "gpt3-1.3b", "--planner", "megatron"}),
                   "A100-80:1x100000");
  expect_bad_input(d.run({"plan", "--cluster", R + "/nodes_1e8.yaml", "--model", "gpt3-1.3b", "--planner", "megatron",
                          "--budget", "20"}),
                   R + "/nodes_1e8.yaml:", "nodes");
  expect_bad_input(d.run({"replay", "--trace", trace("native_small.csv"), "--model", "gpt3-1.3b", "--planner", "megatron",
                          "--until", "18446744073709551615"}),
                   "--until");
  expect_bad_input(d.run({"plan", "--cluster", "A100-80:1x8", "--model", "gpt3-1.3b", "--planner", "amp",
                          "--global-batch", "9223372036854775807"}),
                   "--global-batch");
}

TEST(ReliabilityInputs, AmpAtTheLargestSupportedBatchFinishesQuickly) {
  // AMP enumerates the divisors of the global batch: at the bound (2^16) it must still answer promptly.
  const Workdir d;
  const CliRun r = d.run({"plan", "--cluster", "A100-80:1x8", "--model", "gpt3-1.3b", "--planner", "amp", "--global-batch",
                       "65536", "--budget", "20", "--json"});
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.err;
  EXPECT_LT(r.seconds, 30.0);
}

TEST(ReliabilityInputs, EmptyPlannerIsBadInputAndWritesNothing) {
  const Workdir d;
  expect_bad_input(d.run({"replay", "--trace", trace("native_small.csv"), "--model", "gpt3-1.3b", "--planner", "",
                          "--json", "--out", "empty.h5"}),
                   "--planner");
  EXPECT_TRUE(d.entries().empty());
  expect_bad_input(d.run({"plan", "--cluster", "A100-80:1x8", "--model", "gpt3-1.3b", "--planner", ","}), "--planner");
}

TEST(ReliabilityInputs, MessagesNameAWhere) {
  REQUIRE_RELIABILITY_DIR(R);
  const Workdir d;
  expect_bad_input(d.run(simulate_with("", "gpt3-1.3b")), "--cluster", "empty");
  expect_bad_input(d.run(simulate_with(R + "/deep.yaml", "gpt3-1.3b")), R + "/deep.yaml:", "nested too deeply");
  expect_bad_input(d.run(simulate_with("A100-80:99999999999x8", "gpt3-1.3b")), "A100-80:99999999999x8", "99999999999");
  expect_bad_input(d.run(simulate_with("A100-80:1x8", "gpt3-1.3b", {"--global-batch", "9223372036854775807"})),
                   "--global-batch");
}

TEST(ReliabilityInputs, JsonTraceSyntaxErrorsNameFileAndLine) {
  const Workdir d;
  std::ofstream(d.work("bad.json")) << "[\n  {\"Time\": 0, \"GPUs\": 8},\n  {\"Time\": 60, \"GPUs\": x}\n]\n";
  expect_bad_input(d.run({"trace", "stats", "--trace", "bad.json", "--trace-format", "sailor-json"}), "bad.json:3:");
}

// A file argument that names a directory, or a name longer than the file system allows (std::filesystem
// throws on it where a shorter missing name is just absent), is bad input naming it - for every loader:
// cluster, model, plan, trace, experiment file, and the names inside an experiment file (found by the
// experiment file's fuzz target).
TEST(ReliabilityInputs, DirectoriesAndOverlongNamesAreBadInputNamingThem) {
  const Workdir d;
  fs::create_directories(d.work("dir.yaml"));
  const std::string dir = "dir.yaml", overlong(300, 'a');
  for (const std::string& name : {dir, overlong}) {
    expect_bad_input(d.run(simulate_with(name, "gpt3-1.3b")), name);
    expect_bad_input(d.run(simulate_with("A100-80:1x8", name)), name);
    expect_bad_input(d.run({"simulate", "--cluster", "A100-80:1x8", "--model", "gpt3-1.3b", "--plan", name}), name);
    expect_bad_input(d.run({"plan", "--cluster", "A100-80:1x8", "--model", name, "--planner", "megatron"}), name);
    expect_bad_input(d.run({"trace", "stats", "--trace", name, "--trace-format", "native"}), name);
    expect_bad_input(d.run({"experiment", name, "--list"}), name);
    for (const char* field : {"clusters", "models"}) {
      std::ofstream(d.work("x.yaml")) << "comparisons:\n  - clusters: [" << (field == std::string("clusters") ? name : "A100-80:1x8")
                                      << "]\n    models: [" << (field == std::string("models") ? name : "gpt3-1.3b")
                                      << "]\n    planners: [megatron]\n";
      expect_bad_input(d.run({"experiment", "x.yaml", "--list"}), "x.yaml:");
    }
  }
  EXPECT_EQ(d.entries().size(), 2u);  // dir.yaml and x.yaml: no output file
}

TEST(ReliabilityInputs, StaleTemporaryOfAKilledRunIsRemovedByTheNextWrite) {
  // A writer killed with kill -9 leaves ".NAME.tmp-PID"; a PID that is no live process marks it stale.
  const Workdir d;
  const pid_t dead = test::pid_of_no_live_process();
  const std::string stale = ".t.csv.tmp-" + std::to_string(dead);
  const std::string alive = ".t.csv.tmp-" + std::to_string(::getpid());  // a live writer's file stays
  std::ofstream(d.work(stale)) << "partial";
  std::ofstream(d.work(alive)) << "partial";
  const CliRun r = d.run({"trace", "convert", "--trace", trace("native_small.csv"), "--out", "t.csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(d.work(stale)));
  EXPECT_TRUE(fs::exists(d.work(alive)));
  EXPECT_TRUE(fs::exists(d.work("t.csv")));
}

TEST(ReliabilityInputs, ReplayResultsHoldTheSeedAndTheConfiguration) {
  const Workdir d;
  const std::string policy = std::string(ARACHNE_SOURCE_DIR) + "/configs/policy/arachne.weights";
  const CliRun r = d.run({"replay", "--trace", trace("native_small.csv"), "--model", "gpt3-1.3b", "--planner", "megatron,arachne",
                       "--seed", "7", "--planning-time", "5", "--budget", "20", "--policy", policy, "--out", "r.h5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (std::system("/usr/bin/python3 -c 'import h5py' > /dev/null 2>&1") != 0) GTEST_SKIP() << "no h5py for /usr/bin/python3";
  const std::string py =
      "import h5py,sys; f=h5py.File(sys.argv[1]); a=f.attrs; "
      "print(int(a['seed'])); c=a['config_yaml']; c=c.decode() if isinstance(c,bytes) else c; print(c)";
  std::string cmd = "/usr/bin/python3 -c " + quoted(py) + " " + quoted(d.work("r.h5")) + " > " + quoted(d.work("attrs.txt")) + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(d.work("attrs.txt"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("7\n", 0), 0u) << text;
  const std::vector<std::string> keys = {"trace:", "native_small.csv", "model:", "planners: [megatron, arachne]",
                                         "planning_time: 5", "checkpoint_interval_s:", "seed: 7",
                                         "arachne_policy: " + policy + " (fnv1a "};
  for (const std::string& key : keys)
    EXPECT_NE(text.find(key), std::string::npos) << key << " missing in:\n" << text;
}

TEST(ReliabilityInputs, ReplayReadsThePolicyWeightsBeforeTheFirstPlannerRuns) {
  // arachne listed after megatron: a missing or malformed weights file fails before megatron's replay (whose
  // progress line would make the error output two lines).
  const Workdir d;
  std::ofstream(d.work("garbage.weights")) << "not policy weights";
  for (const std::string policy : {"missing.weights", "garbage.weights"}) {
    SCOPED_TRACE(policy);
    expect_bad_input(d.run({"replay", "--trace", trace("native_small.csv"), "--model", "gpt3-1.3b", "--planner",
                            "megatron,arachne", "--planning-time", "5", "--policy", policy, "--out", "r.h5"}),
                     policy);
    EXPECT_FALSE(fs::exists(d.work("r.h5")));
  }
}

// ---- Part 2: every value-taking flag of every command, malformed

// A command's value-taking flags, from its --help (boost prints "  --name ARG   description").
std::vector<std::string> value_flags(const Workdir& d, const std::vector<std::string>& command) {
  std::vector<std::string> help = command;
  help.push_back("--help");
  const CliRun r = d.run(help);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> flags;
  static const std::regex line(R"(^  --([a-z0-9-]+) ([^ ]+))");
  std::istringstream in(r.out);
  std::string l;
  std::smatch m;
  while (std::getline(in, l))
    if (std::regex_search(l, m, line)) flags.push_back(m[1].str());
  return flags;
}

// Flags naming files, directories or lists of names: a malformed number is a valid name there.
bool names_a_path_or_name(const std::string& flag) {
  for (const char* f : {"cluster", "model", "plan", "out", "timeline", "trace", "policy", "data", "validation",
                        "validate", "multi", "published", "write", "planner", "planners", "ablations", "gpu"})
    if (flag == f) return true;
  return false;
}

// Runs `command` (valid apart from the flag under test) with each malformed value of each value-taking
// flag; each must exit 2 quickly naming the flag.
void drive_flags(const std::vector<std::pair<std::string, std::string>>& base, const std::vector<std::string>& command) {
  const Workdir d;
  const std::vector<std::string> flags = value_flags(d, command);
  ASSERT_FALSE(flags.empty());
  int driven = 0;
  for (const std::string& flag : flags) {
    if (names_a_path_or_name(flag)) continue;
    ++driven;
    for (const char* value : {"abc", "-1", "nan", "1e999", "99999999999999999999", "0x10", " 2", "2 "}) {
      std::vector<std::string> words = command;
      for (const auto& [f, v] : base)
        if (f != flag) {
          words.push_back("--" + f);
          words.push_back(v);
        }
      words.push_back("--" + flag + "=" + value);
      SCOPED_TRACE("--" + flag + "='" + value + "'");
      expect_bad_input(d.run(words), "--" + flag);
    }
    EXPECT_TRUE(d.entries().empty()) << "--" << flag << " left a file";
  }
  EXPECT_GT(driven, 0);
  // A stray word is no silent no-op either.
  std::vector<std::string> words = command;
  std::string name = "arachne";
  for (const std::string& w : command) name += " " + w;
  for (const auto& [f, v] : base) {
    words.push_back("--" + f);
    words.push_back(v);
  }
  words.push_back("stray");
  expect_bad_input(d.run(words), name, "unexpected argument");
}

TEST(MalformedFlags, Simulate) {
  drive_flags({{"cluster", "A100-80:1x8"}, {"model", "gpt3-1.3b"}, {"tp", "1"}, {"pp", "1"}, {"dp", "1"}, {"micro-batch", "1"}},
              {"simulate"});
}

TEST(MalformedFlags, Plan) {
  drive_flags({{"cluster", "A100-80:1x8"}, {"model", "gpt3-1.3b"}, {"planner", "megatron"}}, {"plan"});
}

TEST(MalformedFlags, Replay) {
  drive_flags({{"trace", trace("native_small.csv")}, {"model", "gpt3-1.3b"}, {"planner", "megatron"}, {"planning-time", "5"}},
              {"replay"});
}

TEST(MalformedFlags, Trace) {
  drive_flags({{"trace", trace("native_small.csv")}}, {"trace", "stats"});
  drive_flags({{"trace", trace("native_small.csv")}, {"out", "x.csv"}}, {"trace", "convert"});
  drive_flags({{"trace", trace("native_small.csv")}, {"out", "x.png"}}, {"trace", "plot"});
  drive_flags({{"out", "x.csv"}}, {"trace", "generate"});
}

TEST(MalformedFlags, LongCommands) {
  drive_flags({{"out", "d.h5"}, {"configs", "1"}}, {"gen-data"});
  drive_flags({{"out", "eval"}, {"configs", "1"}}, {"evaluate"});
  drive_flags({{"data", "a.h5"}, {"validation", "b.h5"}, {"out", "run"}}, {"train"});
  drive_flags({{"data", "m.csv"}, {"gpu", "A100-80"}}, {"calibrate"});
}

}  // namespace
}  // namespace arachne
