// Availability-trace loaders: native CSV, SkyPilot spot traces, Sailor CSV/JSON (traces/README.md).
// Expectations come from the fixtures' text (worked by hand in the comments) or, for the shared data, are
// recomputed here directly from the source JSON/CSV — never from the loader's own output.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "sim/io/input_error.h"
#include "sim/trace/availability.h"
#include "sim/trace/sailor_trace.h"
#include "sim/trace/skypilot_trace.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return std::string(ARACHNE_SOURCE_DIR) + "/traces/" + name; }

// A file under a per-test temporary directory.
std::string write_temp(const std::string& name, const std::string& text) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::temp_directory_path() / "arachne_trace_loaders" / info->name();
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

int total(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0); }

// Every node offers between 0 and its capacity GPUs at every change time.
void expect_within_capacity(const AvailabilityTrace& tr) {
  for (const double t : tr.change_times()) {
    const std::vector<int> s = tr.snapshot(t);
    ASSERT_EQ(s.size(), tr.nodes.size());
    for (std::size_t n = 0; n < s.size(); ++n) {
      EXPECT_GE(s[n], 0) << tr.nodes[n].name << " at " << t;
      EXPECT_LE(s[n], tr.nodes[n].capacity) << tr.nodes[n].name << " at " << t;
    }
  }
}

const std::vector<std::string> kCatalog = {"P100", "V100-16", "V100-32", "T4",   "A10",       "A10G", "L4",    "L40S",
                                           "A100-40", "A100-80", "H100", "H100-PCIe", "H200", "MI250X", "MI300X"};

// ---------------------------------------------------------------- native

// traces/native_small.csv: a,b = A100-40 (8 at t=0), b drops to 4 and v (V100-16) appears with 4 at 100 s,
// a goes to 0 at 250 s, b back to 8 at 400 s, v to 0 at 600 s (the last row: the trace ends there).
TEST(TraceLoadersNative, FixtureNodesAndEnd) {
  const AvailabilityTrace tr = load_native_trace(fixture("native_small.csv"), kCatalog);
  ASSERT_EQ(tr.nodes.size(), 3u);
  EXPECT_EQ(tr.nodes[0].name, "a");
  EXPECT_EQ(tr.nodes[1].name, "b");
  EXPECT_EQ(tr.nodes[2].name, "v");
  EXPECT_EQ(tr.nodes[0].gpu_type, "A100-40");
  EXPECT_EQ(tr.nodes[2].gpu_type, "V100-16");
  EXPECT_EQ(tr.nodes[0].capacity, 8);
  EXPECT_EQ(tr.nodes[1].capacity, 8);
  EXPECT_EQ(tr.nodes[2].capacity, 4);
  EXPECT_EQ(tr.events.size(), 7u);  // one per data row
  EXPECT_DOUBLE_EQ(tr.end_s, 600.0);
  EXPECT_EQ(tr.change_times(), (std::vector<double>{0, 100, 250, 400, 600}));
}

TEST(TraceLoadersNative, SnapshotAtBetweenAndAfterChanges) {
  const AvailabilityTrace tr = load_native_trace(fixture("native_small.csv"), {});
  using V = std::vector<int>;
  EXPECT_EQ(tr.snapshot(-1), (V{0, 0, 0}));  // before the first row nothing is offered
  EXPECT_EQ(tr.snapshot(0), (V{8, 8, 0}));   // v not yet added
  EXPECT_EQ(tr.snapshot(50), (V{8, 8, 0}));
  EXPECT_EQ(tr.snapshot(99.999), (V{8, 8, 0}));
  EXPECT_EQ(tr.snapshot(100), (V{8, 4, 4}));  // an event applies from its time on
  EXPECT_EQ(tr.snapshot(249.5), (V{8, 4, 4}));
  EXPECT_EQ(tr.snapshot(250), (V{0, 4, 4}));
  EXPECT_EQ(tr.snapshot(400), (V{0, 8, 4}));
  EXPECT_EQ(tr.snapshot(600), (V{0, 8, 0}));
  EXPECT_EQ(tr.snapshot(1e9), (V{0, 8, 0}));  // the last state holds after the end
}

struct BadRow {
  std::string label;
  std::string text;
  int line;            // 1-based line of the offending row
  std::string column;  // field named in where()
};

TEST(TraceLoadersNative, MalformedRowsNameFileLineAndColumn) {
  const std::string h = "time_s,node,gpu_type,gpus\n";
  const std::vector<BadRow> cases = {
      {"bad_header", "time,node,gpu_type,gpus\n0,a,A100-40,8\n", 1, "header"},
      {"too_few_columns", h + "0,a,A100-40,8\n10,a,A100-40\n", 3, "columns"},
      {"too_many_columns", h + "0,a,A100-40,8,9\n", 2, "columns"},
      {"time_not_numeric", h + "0,a,A100-40,8\nsoon,a,A100-40,4\n", 3, "time_s"},
      {"gpus_not_numeric", h + "0,a,A100-40,eight\n", 2, "gpus"},
      {"gpus_fractional", h + "0,a,A100-40,8\n5,a,A100-40,1.5\n", 3, "gpus"},
      {"gpus_negative", h + "0,a,A100-40,8\n\n5,a,A100-40,-1\n", 4, "gpus"},  // blank line still counts
      {"unsorted", h + "0,a,A100-40,8\n20,a,A100-40,4\n10,a,A100-40,2\n", 4, "time_s"},
      {"type_change", h + "0,a,A100-40,8\n10,a,V100-16,8\n", 3, "gpu_type"},
  };
  for (const BadRow& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = write_temp(c.label + ".csv", c.text);
    try {
      load_native_trace(path, kCatalog);
      ADD_FAILURE() << "no InputError";
    } catch (const InputError& e) {
      EXPECT_EQ(e.where(), path + ":" + std::to_string(c.line) + ": " + c.column) << e.what();
      EXPECT_FALSE(e.reason().empty());
    }
  }
}

TEST(TraceLoadersNative, UnknownGpuTypeIsAClearError) {
  const std::string path = write_temp("unknown.csv", "time_s,node,gpu_type,gpus\n0,a,A100-40,8\n0,z,B200,8\n");
  try {
    load_native_trace(path, {"A100-40", "V100-16"});
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), path + ":3: gpu_type");
    EXPECT_EQ(e.reason(), "unknown GPU type 'B200' (known: A100-40, V100-16)");
  }
  // Without a list of known types any name is accepted (the caller checks against its catalog).
  EXPECT_EQ(load_native_trace(path, {}).nodes.size(), 2u);
}

TEST(TraceLoadersNative, HeaderOnlyOrMissingFileIsAnError) {
  EXPECT_THROW(load_native_trace(write_temp("empty.csv", ""), {}), InputError);
  EXPECT_THROW(load_native_trace(write_temp("header_only.csv", "time_s,node,gpu_type,gpus\n"), {}), InputError);
  EXPECT_THROW(load_native_trace("/nonexistent/trace.csv", {}), InputError);
}

// Equal traces: same nodes, same events, same end.
void expect_same_trace(const AvailabilityTrace& a, const AvailabilityTrace& b) {
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (std::size_t i = 0; i < a.nodes.size(); ++i) {
    EXPECT_EQ(a.nodes[i].name, b.nodes[i].name);
    EXPECT_EQ(a.nodes[i].gpu_type, b.nodes[i].gpu_type);
    EXPECT_EQ(a.nodes[i].capacity, b.nodes[i].capacity);
  }
  ASSERT_EQ(a.events.size(), b.events.size());
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    EXPECT_EQ(a.events[i].time_s, b.events[i].time_s);  // exact: times are written in shortest round-trip form
    EXPECT_EQ(a.events[i].node, b.events[i].node);
    EXPECT_EQ(a.events[i].gpus, b.events[i].gpus);
  }
  EXPECT_EQ(a.end_s, b.end_s);
}

TEST(TraceLoadersNative, RoundTripThroughNativeCsv) {
  const AvailabilityTrace a = load_native_trace(fixture("native_small.csv"), kCatalog);
  const std::string csv = to_native_csv(a);
  EXPECT_EQ(csv.rfind("time_s,node,gpu_type,gpus\n", 0), 0u);
  const AvailabilityTrace b = load_native_trace(write_temp("rt.csv", csv), kCatalog);
  expect_same_trace(a, b);
  EXPECT_EQ(to_native_csv(b), csv);  // the text is a fixed point
}

TEST(TraceLoadersNative, RoundTripKeepsFractionalTimesExactly) {
  const std::string path = write_temp("frac.csv", "time_s,node,gpu_type,gpus\n0.1,n,T4,1\n123.17371,n,T4,0\n1e5,n,T4,1\n");
  const AvailabilityTrace a = load_native_trace(path, {});
  const AvailabilityTrace b = load_native_trace(write_temp("frac_rt.csv", to_native_csv(a)), {});
  expect_same_trace(a, b);
  EXPECT_EQ(b.events[1].time_s, 123.17371);
}

// ---------------------------------------------------------------- SkyPilot

TEST(TraceLoadersSkypilot, FileNameGivesInstanceGpus) {
  const SkypilotFileName a = parse_skypilot_file_name("x/1-node_aws-10-26-2022_us-west-2a_v100_8.json");
  EXPECT_EQ(a.instance_gpu, "v100");
  EXPECT_EQ(a.gpus, 8);
  EXPECT_EQ(parse_skypilot_file_name("16-node_aws-08-27-2023_us-west-2c_v100_1.json").gpus, 1);
  EXPECT_EQ(parse_skypilot_file_name("trace.json").gpus, 0);
}

// traces/skypilot_fixture_v100_4.json: gap 60 s, data [0,2,2,1,3,3,0,1], 4 GPUs per instance (file name).
// Peak 3 instances → nodes i-0..i-2 of 4 V100-16 each; slot k is up while data > k.
TEST(TraceLoadersSkypilot, FixtureSlotsFollowInstanceCount) {
  const AvailabilityTrace tr = load_skypilot_trace(fixture("skypilot_fixture_v100_4.json"));
  ASSERT_EQ(tr.nodes.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(tr.nodes[k].name, "i-" + std::to_string(k));
    EXPECT_EQ(tr.nodes[k].gpu_type, "V100-16");
    EXPECT_EQ(tr.nodes[k].capacity, 4);
  }
  using V = std::vector<int>;
  EXPECT_EQ(tr.snapshot(0), (V{0, 0, 0}));
  EXPECT_EQ(tr.snapshot(60), (V{4, 4, 0}));
  EXPECT_EQ(tr.snapshot(150), (V{4, 4, 0}));  // tick 2 = tick 1
  EXPECT_EQ(tr.snapshot(180), (V{4, 0, 0}));
  EXPECT_EQ(tr.snapshot(240), (V{4, 4, 4}));
  EXPECT_EQ(tr.snapshot(360), (V{0, 0, 0}));
  EXPECT_EQ(tr.snapshot(420), (V{4, 0, 0}));
  EXPECT_DOUBLE_EQ(tr.end_s, 8 * 60.0);  // 8 ticks of 60 s
  // Events only on changes: 3 initial + 2 + 1 + 2 + 3 + 1.
  EXPECT_EQ(tr.events.size(), 12u);
  EXPECT_EQ(tr.change_times(), (std::vector<double>{0, 60, 180, 240, 360, 420}));
}

TEST(TraceLoadersSkypilot, OptionsOverrideFileName) {
  SkypilotOptions opt;
  opt.gpu_type = "T4";
  opt.gpus_per_instance = 1;
  const AvailabilityTrace tr = load_skypilot_trace(fixture("skypilot_fixture_v100_4.json"), opt);
  ASSERT_EQ(tr.nodes.size(), 3u);
  EXPECT_EQ(tr.nodes[0].gpu_type, "T4");
  EXPECT_EQ(tr.nodes[0].capacity, 1);
  EXPECT_EQ(total(tr.snapshot(240)), 3);
}

TEST(TraceLoadersSkypilot, MalformedDocumentNamesTheField) {
  const std::string neg = write_temp("neg.json", R"({"metadata": {"gap_seconds": 60}, "data": [1, 2, -1]})");
  try {
    load_skypilot_trace(neg);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), neg + ": data[2]");
  }
  EXPECT_THROW(load_skypilot_trace(write_temp("nogap.json", R"({"data": [1]})")), InputError);
  EXPECT_THROW(load_skypilot_trace(write_temp("frac.json", R"({"metadata": {"gap_seconds": 60}, "data": [0.5]})")),
               InputError);
  EXPECT_THROW(load_skypilot_trace(write_temp("bad.json", "{not json")), InputError);
}

// The shared spot traces (data README): 16-node traces of p3.2xlarge (1×V100-16), one of p3.16xlarge (8×V100-16).
TEST(TraceLoadersSkypilot, RealTracesMatchInstanceCounts) {
  ARACHNE_REQUIRE_DATA(data);
  const std::map<std::string, int> files = {
      {"1-node_aws-10-26-2022_us-west-2a_v100_8.json", 8},
      {"16-node_aws-08-27-2023_us-east-2b_v100_1.json", 1},
      {"16-node_aws-08-27-2023_us-west-2a_v100_1.json", 1},
      {"16-node_aws-08-27-2023_us-west-2c_v100_1.json", 1},
  };
  for (const auto& [name, gpus_per_instance] : files) {
    SCOPED_TRACE(name);
    const std::string path = data + "/traces/skypilot-spot/" + name;
    const nlohmann::json doc = nlohmann::json::parse(std::ifstream(path));
    const double gap = doc["metadata"]["gap_seconds"].get<double>();
    const auto& ticks = doc["data"];
    int peak = 0;
    for (const auto& v : ticks) peak = std::max(peak, v.get<int>());

    const AvailabilityTrace tr = load_skypilot_trace(path);
    EXPECT_EQ(static_cast<int>(tr.nodes.size()), peak);
    for (const TraceNode& n : tr.nodes) {
      EXPECT_EQ(n.gpu_type, "V100-16");
      EXPECT_EQ(n.capacity, gpus_per_instance);
    }
    EXPECT_DOUBLE_EQ(tr.end_s, static_cast<double>(ticks.size()) * gap);
    // At every tick: total GPUs = instances × GPUs per instance; every node offers all or nothing.
    for (std::size_t i = 0; i < ticks.size(); ++i) {
      const std::vector<int> s = tr.snapshot(static_cast<double>(i) * gap);
      ASSERT_EQ(total(s), ticks[i].get<int>() * gpus_per_instance) << "tick " << i;
      for (const int g : s) ASSERT_TRUE(g == 0 || g == gpus_per_instance) << "tick " << i;
    }
    expect_within_capacity(tr);
  }
}

TEST(TraceLoadersSkypilot, RealTraceRoundTripsThroughNative) {
  ARACHNE_REQUIRE_DATA(data);
  const std::string path = data + "/traces/skypilot-spot/1-node_aws-10-26-2022_us-west-2a_v100_8.json";
  const AvailabilityTrace a = load_skypilot_trace(path);
  const AvailabilityTrace b = load_native_trace(write_temp("sky.csv", to_native_csv(a)), kCatalog);
  // The native end is the last row's time: to_native_csv adds one no-op row when the source ends later.
  EXPECT_EQ(b.end_s, a.end_s);
  ASSERT_EQ(b.nodes.size(), a.nodes.size());
  for (const double t : a.change_times()) ASSERT_EQ(a.snapshot(t), b.snapshot(t)) << t;
  EXPECT_EQ(b.snapshot(b.end_s), a.snapshot(a.end_s));
}

// ---------------------------------------------------------------- Sailor

TEST(TraceLoadersSailor, GpuNamesMapToCatalog) {
  EXPECT_EQ(sailor_gpu_to_catalog("A100-40"), "A100-40");
  EXPECT_EQ(sailor_gpu_to_catalog("V100-16"), "V100-16");
  EXPECT_EQ(sailor_gpu_to_catalog("A100"), "A100-40");
  EXPECT_EQ(sailor_gpu_to_catalog("V100"), "V100-16");
  EXPECT_EQ(sailor_gpu_to_catalog("RTX-9999"), "");
}

// traces/sailor_fixture.csv, rows at Unix 1000.5, 1060.5, 1120.5 → t = 0, 60, 120.
// A100-40 (8 per node): 12, 16, 5 → peak 16 = 2 nodes: {8,4}, {8,8}, {5,0}.
// V100-16 with nodes_of_size 4: 3, 0, 9 → peak 9 = 3 nodes (capacities 4,4,1): {3,0,0}, {0,0,0}, {4,4,1}.
TEST(TraceLoadersSailor, CsvFixturePacksCountsOntoNodes) {
  const AvailabilityTrace tr = load_sailor_csv(fixture("sailor_fixture.csv"), {{"V100-16", 4}});
  ASSERT_EQ(tr.nodes.size(), 5u);
  EXPECT_EQ(tr.nodes[0].name, "A100-40_zone-a/0");
  EXPECT_EQ(tr.nodes[1].name, "A100-40_zone-a/1");
  EXPECT_EQ(tr.nodes[2].name, "V100-16_zone-b/0");
  EXPECT_EQ(tr.nodes[0].gpu_type, "A100-40");
  EXPECT_EQ(tr.nodes[4].gpu_type, "V100-16");
  EXPECT_EQ(tr.nodes[4].capacity, 1);  // the most it ever offers: 9 - 2×4
  using V = std::vector<int>;
  EXPECT_EQ(tr.snapshot(0), (V{8, 4, 3, 0, 0}));
  EXPECT_EQ(tr.snapshot(59), (V{8, 4, 3, 0, 0}));
  EXPECT_EQ(tr.snapshot(60), (V{8, 8, 0, 0, 0}));
  EXPECT_EQ(tr.snapshot(120), (V{5, 0, 4, 4, 1}));
  EXPECT_DOUBLE_EQ(tr.end_s, 120.0);
  expect_within_capacity(tr);
}

TEST(TraceLoadersSailor, CsvMalformedCellNamesLineAndColumn) {
  const std::string path = write_temp("bad.csv", ",Timestamp,A100-40_z\n0,10,8\n1,20,x\n");
  try {
    load_sailor_csv(path);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), path + ":3: A100-40_z");
  }
  const std::string unknown = write_temp("unknown.csv", ",Timestamp,B999_z\n0,10,8\n");
  EXPECT_THROW(load_sailor_csv(unknown), InputError);
}

// traces/sailor_fixture.json: 10, 10, 3, 16 GPUs at 0, 30, 90, 150 s; A100-40 nodes of 8 → 2 nodes.
TEST(TraceLoadersSailor, JsonFixture) {
  const AvailabilityTrace tr = load_sailor_json(fixture("sailor_fixture.json"));
  ASSERT_EQ(tr.nodes.size(), 2u);
  EXPECT_EQ(tr.nodes[0].gpu_type, "A100-40");
  using V = std::vector<int>;
  EXPECT_EQ(tr.snapshot(0), (V{8, 2}));
  EXPECT_EQ(tr.snapshot(30), (V{8, 2}));
  EXPECT_EQ(tr.snapshot(90), (V{3, 0}));
  EXPECT_EQ(tr.snapshot(150), (V{8, 8}));
  EXPECT_EQ(tr.change_times(), (std::vector<double>{0, 90, 150}));  // no event where nothing changes
  EXPECT_DOUBLE_EQ(tr.end_s, 150.0);
  const AvailabilityTrace four = load_sailor_json(fixture("sailor_fixture.json"), "A100-80", 4);
  EXPECT_EQ(four.nodes.size(), 4u);  // ceil(16 / 4)
  EXPECT_EQ(four.snapshot(0), (V{4, 4, 2, 0}));
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string c;
  std::istringstream in(line);
  while (std::getline(in, c, ',')) out.push_back(c);
  return out;
}

TEST(TraceLoadersSailor, RealCsvTracesMatchCounts) {
  ARACHNE_REQUIRE_DATA(data);
  for (const std::string name : {"gpu_trace_heterogeneous_imbalanced.csv", "gpu_trace_multizone.csv"}) {
    SCOPED_TRACE(name);
    const std::string path = data + "/traces/sailor/" + name;
    const AvailabilityTrace tr = load_sailor_csv(path);
    expect_within_capacity(tr);
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    const std::vector<std::string> header = split_csv(line);  // "", Timestamp, <GPU>_<zone>...
    ASSERT_GE(header.size(), 3u);
    double t0 = 0;
    bool first = true;
    int rows = 0;
    while (std::getline(in, line)) {
      const std::vector<std::string> cells = split_csv(line);
      ASSERT_EQ(cells.size(), header.size());
      const double ts = std::stod(cells[1]);
      if (first) t0 = ts, first = false;
      const std::vector<int> s = tr.snapshot(ts - t0);
      for (std::size_t c = 2; c < header.size(); ++c) {
        int sum = 0;  // GPUs on the nodes made from this column
        for (std::size_t n = 0; n < tr.nodes.size(); ++n)
          if (tr.nodes[n].name.rfind(header[c] + "/", 0) == 0) {
            sum += s[n];
            EXPECT_EQ(tr.nodes[n].gpu_type, header[c].substr(0, header[c].find('_')));  // names are catalog names
            EXPECT_LE(tr.nodes[n].capacity, 8);
          }
        EXPECT_EQ(sum, std::stoi(cells[c])) << header[c] << " at " << ts;
      }
      ++rows;
    }
    EXPECT_GT(rows, 0);
  }
}

TEST(TraceLoadersSailor, RealJsonTraceMatchesCounts) {
  ARACHNE_REQUIRE_DATA(data);
  const std::string path = data + "/traces/sailor/a100_trace.json";
  const nlohmann::json doc = nlohmann::json::parse(std::ifstream(path));
  const AvailabilityTrace tr = load_sailor_json(path);
  expect_within_capacity(tr);
  for (const TraceNode& n : tr.nodes) {
    EXPECT_EQ(n.gpu_type, "A100-40");
    EXPECT_LE(n.capacity, 8);
  }
  for (const auto& e : doc) {
    const std::vector<int> s = tr.snapshot(e["Time"].get<double>());
    EXPECT_EQ(total(s), e["GPUs"].get<int>()) << "at " << e["Time"];
  }
  EXPECT_DOUBLE_EQ(tr.end_s, doc.back()["Time"].get<double>());
  // Round trip through the native format keeps every snapshot.
  const AvailabilityTrace b = load_native_trace(write_temp("sailor.csv", to_native_csv(tr)), kCatalog);
  for (const double t : tr.change_times()) ASSERT_EQ(tr.snapshot(t), b.snapshot(t)) << t;
}

}  // namespace
}  // namespace arachne
