// Alibaba cluster-trace-gpu-v2023 loader: placement policy, subset, load scale, errors.
#include "sim/trace/alibaba_trace.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "sim/io/input_error.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

std::string fixture() { return std::string(ARACHNE_SOURCE_DIR) + "/traces/alibaba-fixture/openb_pod_list_default.csv"; }

std::string real_pods(const std::string& data) {
  return data + "/traces/alibaba-gpu-v2023/openb_pod_list_default.csv";
}

// Free GPUs per node at time t, replaying events (independent of AvailabilityTrace::snapshot).
std::vector<int> free_at(const AvailabilityTrace& tr, double t) {
  std::vector<int> f(tr.nodes.size(), 0);
  for (const auto& e : tr.events)
    if (e.time_s <= t) f[e.node] = e.gpus;
  return f;
}

// Every event within capacity and non-negative, sorted by time, and no event repeats the node's value.
void expect_well_formed(const AvailabilityTrace& tr) {
  std::vector<int> last(tr.nodes.size(), -1);
  double prev = 0;
  for (const auto& e : tr.events) {
    ASSERT_GE(e.node, 0);
    ASSERT_LT(e.node, static_cast<int>(tr.nodes.size()));
    EXPECT_GE(e.gpus, 0);
    EXPECT_LE(e.gpus, tr.nodes[e.node].capacity);
    EXPECT_GE(e.time_s, prev);
    EXPECT_GE(e.time_s, 0);
    EXPECT_LT(e.time_s, tr.end_s + 1e-9);
    EXPECT_NE(e.gpus, last[e.node]) << "event without change at t=" << e.time_s;
    last[e.node] = e.gpus;
    prev = e.time_s;
  }
  for (std::size_t n = 0; n < tr.nodes.size(); ++n) EXPECT_GE(last[n], 0) << "node without a first row";
}

struct TempDir {
  std::filesystem::path dir;
  explicit TempDir(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / ("arachne_alibaba_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~TempDir() { std::filesystem::remove_all(dir); }
  std::string write(const std::string& file, const std::string& text) const {
    std::ofstream(dir / file) << text;
    return (dir / file).string();
  }
};

const char* kNodes = "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1000,2,T4\n";
const char* kPodHeader =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

// The fixture, worked by hand (gpu_spec pins every pod to one node, so the node order does not matter):
// node a: 4×V100M16, node b: 2×T4; trace end = latest time in the file = 200 s.
//  pod0 2 whole GPUs on a [10,100); pod1 0.5 GPU on b [20,50); pod2 0.3 GPU on b [30,60) packs onto
//  pod1's GPU (best fit); pod3 Pending, pod4 CPU-only, pod7 zero-length: nothing; pod5 1 GPU on b [80,90);
//  pod6 wants 4 GPUs of a at 60 while pod0 holds 2: skipped.
TEST(AlibabaTraceFixture, ExactAvailabilityByHand) {
  const AlibabaLoad load = load_alibaba_trace(fixture(), {});
  const AvailabilityTrace& tr = load.trace;
  ASSERT_EQ(tr.nodes.size(), 2u);
  EXPECT_EQ(tr.nodes[0].name, "fx-node-a");
  EXPECT_EQ(tr.nodes[0].gpu_type, "V100-16");
  EXPECT_EQ(tr.nodes[0].capacity, 4);
  EXPECT_EQ(tr.nodes[1].gpu_type, "T4");
  EXPECT_EQ(tr.nodes[1].capacity, 2);
  struct E {
    double t;
    int node, gpus;
  };
  const std::vector<E> want = {{0, 0, 4},  {0, 1, 2},  {10, 0, 2}, {20, 1, 1},
                               {60, 1, 2}, {80, 1, 1}, {90, 1, 2}, {100, 0, 4}};
  ASSERT_EQ(tr.events.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_DOUBLE_EQ(tr.events[i].time_s, want[i].t) << i;
    EXPECT_EQ(tr.events[i].node, want[i].node) << i;
    EXPECT_EQ(tr.events[i].gpus, want[i].gpus) << i;
  }
  EXPECT_DOUBLE_EQ(tr.end_s, 200);
  EXPECT_EQ(load.pods_placed, 4);
  EXPECT_EQ(load.pods_skipped, 1);
  EXPECT_EQ(load.pods_not_run, 3);
  EXPECT_EQ(load.tenant_gpus_peak, 3);
  // Occupied GPU-seconds: a 2×90 + b 1×40 + 1×10 = 230 of 6 GPUs × 200 s.
  EXPECT_NEAR(load.utilisation, 230.0 / 1200.0, 1e-12);
  expect_well_formed(tr);
}

TEST(AlibabaTraceFixture, WindowShiftsTimeAndStartsFromTheStateAtWindowStart) {
  AlibabaOptions o;
  o.window_start_s = 15;
  o.window_end_s = 85;
  const AlibabaLoad load = load_alibaba_trace(fixture(), o);
  // At 15 s pod0 holds 2 GPUs of a; b is empty until 20 s. Later changes shift by −15 s; 90 and 100 fall outside.
  EXPECT_DOUBLE_EQ(load.trace.end_s, 70);
  EXPECT_EQ(free_at(load.trace, 0), (std::vector<int>{2, 2}));
  EXPECT_EQ(free_at(load.trace, 5), (std::vector<int>{2, 1}));
  EXPECT_EQ(free_at(load.trace, 45), (std::vector<int>{2, 2}));
  EXPECT_EQ(free_at(load.trace, 65), (std::vector<int>{2, 1}));
  EXPECT_EQ(load.trace.events.size(), 5u);
  // Occupied: a 2×70; b 1×(60−20) + 1×(85−80) = 45 → 185 of 6×70.
  EXPECT_NEAR(load.utilisation, 185.0 / 420.0, 1e-12);
}

TEST(AlibabaTraceFixture, SharedGpuIsNotFree) {
  TempDir t("shared");
  t.write("openb_node_list_gpu_node.csv", kNodes);
  const auto pods = t.write("openb_pod_list_default.csv",
                            std::string(kPodHeader) + "p0,1,1,1,100,,BE,Running,0,10,0\np1,1,1,1,1000,,BE,Running,0,20,20\n");
  const AlibabaLoad load = load_alibaba_trace(pods, {});
  // A 0.1-GPU share holds one whole GPU away from the job: 1 of 2 free during [0,10).
  EXPECT_EQ(free_at(load.trace, 0), (std::vector<int>{1}));
  EXPECT_EQ(free_at(load.trace, 10), (std::vector<int>{2}));
}

TEST(AlibabaTraceFixture, PodsThatNeverRanOccupyNothing) {
  TempDir t("neverran");
  t.write("openb_node_list_gpu_node.csv", kNodes);
  const auto pods = t.write("openb_pod_list_default.csv",
                            std::string(kPodHeader) +
                                "p0,1,1,2,1000,,BE,Pending,0,50,\n"       // Pending, no scheduled time
                                "p1,1,1,2,1000,,BE,Failed,0,50,\n"        // no scheduled time
                                "p2,1,1,2,1000,,BE,Running,0,50,50\n"     // zero length
                                "p3,1,1,0,0,,BE,Running,0,50,0\n");       // CPU-only
  const AlibabaLoad load = load_alibaba_trace(pods, {});
  ASSERT_EQ(load.trace.events.size(), 1u);  // only the node's first row
  EXPECT_EQ(load.trace.events[0].gpus, 2);
  EXPECT_EQ(load.pods_not_run, 4);
  EXPECT_EQ(load.pods_placed + load.pods_skipped, 0);
  EXPECT_DOUBLE_EQ(load.utilisation, 0);
}

TEST(AlibabaTraceFixture, LoadScaleReplicatesPods) {
  TempDir t("scale");
  t.write("openb_node_list_gpu_node.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,8,T4\n");
  const auto pods = t.write("openb_pod_list_default.csv",
                            std::string(kPodHeader) + "p0,1,1,1,1000,,BE,Running,0,100,0\n");
  AlibabaOptions o;
  o.load_scale = 3;  // integer scale: exactly three copies, no randomness
  const AlibabaLoad load = load_alibaba_trace(pods, o);
  EXPECT_EQ(load.pods_placed, 3);
  EXPECT_EQ(free_at(load.trace, 0), (std::vector<int>{5}));
  EXPECT_NEAR(load.utilisation, 3.0 / 8.0, 1e-12);
  o.load_scale = 0;
  EXPECT_EQ(load_alibaba_trace(pods, o).pods_placed, 0);
}

TEST(AlibabaTraceFixture, MalformedRowsNameFileLineColumn) {
  TempDir t("malformed");
  t.write("openb_node_list_gpu_node.csv", kNodes);
  auto expect_where = [&](const std::string& row, const std::string& where) {
    const auto pods = t.write("openb_pod_list_default.csv", std::string(kPodHeader) + "ok,1,1,1,1000,,BE,Running,0,5,0\n" + row);
    try {
      load_alibaba_trace(pods, {});
      ADD_FAILURE() << "no error for " << row;
    } catch (const InputError& e) {
      EXPECT_EQ(e.where(), pods + ":3: " + where) << e.what();
    }
  };
  expect_where("p,1,1,x,1000,,BE,Running,0,5,0\n", "num_gpu");
  expect_where("p,1,1,1,1500,,BE,Running,0,5,0\n", "gpu_milli");
  expect_where("p,1,1,2,500,,BE,Running,0,5,0\n", "gpu_milli");
  expect_where("p,1,1,1,1000,,BE,Sleeping,0,5,0\n", "pod_phase");
  expect_where("p,1,1,1,1000,,BE,Running,0,5,9\n", "deletion_time");
  expect_where("p,1,1,1,1000,,BE,Running,0,-5,0\n", "deletion_time");
  expect_where("p,1,1,1,1000,,BE,Running,0,5\n", "scheduled_time");  // missing a column

  t.write("openb_node_list_gpu_node.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,2,H9000\n");
  const auto pods = t.write("openb_pod_list_default.csv", kPodHeader);
  try {
    load_alibaba_trace(pods, {});
    ADD_FAILURE() << "unknown model accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), (t.dir / "openb_node_list_gpu_node.csv").string() + ":2: model");
  }
  t.write("openb_node_list_gpu_node.csv", kNodes);
  AlibabaOptions o;
  o.nodes = 5;  // more than the one node
  EXPECT_THROW(load_alibaba_trace(pods, o), InputError);
  o.nodes = 0;
  o.load_scale = -1;
  EXPECT_THROW(load_alibaba_trace(pods, o), InputError);
}

TEST(AlibabaTraceFixture, GpuMapCoversEveryModelOfTheTrace) {
  const auto map = load_alibaba_gpu_map(default_alibaba_gpu_map_path());
  const std::map<std::string, std::string> disclosed = {
      {"P100", "P100"}, {"T4", "T4"}, {"V100M16", "V100-16"}, {"V100M32", "V100-32"}, {"A10", "A10"}};
  for (const auto& [model, type] : disclosed) EXPECT_EQ(map.at(model), type);
  EXPECT_EQ(map.count("G2"), 1u);
  EXPECT_EQ(map.count("G3"), 1u);
  // Every target is a GPU of the bundled catalog.
  std::vector<std::string> catalog;
  for (const auto& g : YAML::LoadFile(test::configs() + "/gpus.yaml")["gpus"]) catalog.push_back(g["name"].as<std::string>());
  for (const auto& [model, type] : map)
    EXPECT_NE(std::find(catalog.begin(), catalog.end(), type), catalog.end()) << model << " -> " << type;
}

// ---- real trace (shared data)

AlibabaOptions real_options(std::uint64_t seed, double scale) {
  AlibabaOptions o;
  o.seed = seed;
  o.nodes = 64;
  o.load_scale = scale;
  return o;
}

TEST(AlibabaTraceReal, BoundedAndWellFormed) {
  ARACHNE_REQUIRE_DATA(data);
  const AlibabaLoad load = load_alibaba_trace(real_pods(data), real_options(0, 10));
  ASSERT_EQ(load.trace.nodes.size(), 64u);
  expect_well_formed(load.trace);
  EXPECT_GT(load.pods_placed, 0);
  EXPECT_GT(load.utilisation, 0);
  EXPECT_LT(load.utilisation, 1);
  int capacity = 0;
  for (const auto& n : load.trace.nodes) capacity += n.capacity;
  EXPECT_LE(load.tenant_gpus_peak, capacity);
}

TEST(AlibabaTraceReal, PlacementIsSeedStable) {
  ARACHNE_REQUIRE_DATA(data);
  const auto a = load_alibaba_trace(real_pods(data), real_options(7, 10));
  const auto b = load_alibaba_trace(real_pods(data), real_options(7, 10));
  ASSERT_EQ(a.trace.events.size(), b.trace.events.size());
  for (std::size_t i = 0; i < a.trace.events.size(); ++i) {
    EXPECT_EQ(a.trace.events[i].time_s, b.trace.events[i].time_s);
    EXPECT_EQ(a.trace.events[i].node, b.trace.events[i].node);
    EXPECT_EQ(a.trace.events[i].gpus, b.trace.events[i].gpus);
  }
  EXPECT_EQ(a.utilisation, b.utilisation);
  // Another seed picks other nodes and another node order: the traces differ.
  const auto c = load_alibaba_trace(real_pods(data), real_options(8, 10));
  std::vector<std::string> na, nc;
  for (const auto& n : a.trace.nodes) na.push_back(n.name);
  for (const auto& n : c.trace.nodes) nc.push_back(n.name);
  EXPECT_NE(na, nc);
  // Same node subset (all nodes), different node order only: the placement still differs.
  AlibabaOptions all0, all1;
  all0.load_scale = all1.load_scale = 1;
  all1.seed = 1;
  all0.window_end_s = all1.window_end_s = 3e6;
  const auto p0 = load_alibaba_trace(real_pods(data), all0);
  const auto p1 = load_alibaba_trace(real_pods(data), all1);
  bool differ = p0.trace.events.size() != p1.trace.events.size();
  for (std::size_t i = 0; !differ && i < p0.trace.events.size(); ++i)
    differ = p0.trace.events[i].node != p1.trace.events[i].node;
  EXPECT_TRUE(differ);
}

TEST(AlibabaTraceReal, SubsetKeepsTypeMix) {
  ARACHNE_REQUIRE_DATA(data);
  AlibabaOptions all;
  all.load_scale = 0;  // nodes only
  const auto full = load_alibaba_trace(real_pods(data), all);
  std::map<std::string, int> total;
  for (const auto& n : full.trace.nodes) ++total[n.gpu_type];
  const double N = static_cast<double>(full.trace.nodes.size());
  for (const int subset : {64, 100, 300}) {
    for (const std::uint64_t seed : {0ull, 1ull}) {
      AlibabaOptions o;
      o.nodes = subset;
      o.seed = seed;
      o.load_scale = 0;
      const auto part = load_alibaba_trace(real_pods(data), o);
      ASSERT_EQ(static_cast<int>(part.trace.nodes.size()), subset);
      std::map<std::string, int> got;
      for (const auto& n : part.trace.nodes) ++got[n.gpu_type];
      // Proportional share: subset × type count / node count; rounding may move it by at most one node.
      for (const auto& [type, count] : total)
        EXPECT_LE(std::abs(got[type] - subset * count / N), 1.0) << type << " in a subset of " << subset;
    }
  }
}

TEST(AlibabaTraceReal, UtilisationIncreasesWithLoadScale) {
  ARACHNE_REQUIRE_DATA(data);
  double previous = -1;
  for (const double scale : {1.0, 4.0, 10.0}) {
    const double u = load_alibaba_trace(real_pods(data), real_options(3, scale)).utilisation;
    EXPECT_GT(u, previous) << "load scale " << scale;
    previous = u;
  }
}

}  // namespace
}  // namespace arachne
