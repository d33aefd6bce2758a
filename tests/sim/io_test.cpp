// Output writers: atomic files, the simulate HDF5 file, the JSON report and the Chrome trace, on
// hand-made SimResult values (no simulation involved).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/io/atomic_file.h"
#include "sim/io/chrome_trace.h"
#include "sim/io/hdf5_writer.h"
#include "sim/io/report_json.h"

namespace arachne {
namespace {

namespace fs = std::filesystem;

// A fresh empty directory per test, removed afterwards.
class IoTempDir {
 public:
  IoTempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("arachne_io_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~IoTempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename().string());
    return names;
  }

 private:
  fs::path path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

SimResult sample_result() {
  SimResult r;
  r.breakdown = {0.5, 0.1, 0.05, 0.02, 0.0, 0.2, 0.04, 0.03};
  r.iteration_time_s = r.breakdown.sum();
  r.global_batch = 64;
  r.samples_per_s = 64 / r.iteration_time_s;
  r.tokens_per_s = r.samples_per_s * 2048;
  r.tflops_per_gpu = 123.0;
  r.mfu = 0.4;
  r.mfu_cluster = 0.3;
  r.gpus_used = 2;
  for (int g = 0; g < 2; ++g) {
    GpuMemoryReport m;
    m.gpu = g;
    m.label = "n0:" + std::to_string(g);
    m.gpu_type = "A100-80";
    m.capacity_bytes = 80 * kGiB;
    m.usage = {2 * kGiB, 2 * kGiB, 12 * kGiB, (10.0 + g) * kGiB, 1 * kGiB};
    r.per_gpu_memory.push_back(m);
  }
  r.memory = r.per_gpu_memory[1].usage;
  r.peak_memory_gpu = "n0:1";
  r.peak_memory_gib = r.memory.total() / kGiB;
  r.bytes = {1e9, 0, 2e8, 0};
  r.events = 4242;
  r.sim_wall_s = 0.25;
  r.warnings = {"V100-32 has no bf16: running at its fp16 rate", "second warning"};
  return r;
}

h5::RunInfo sample_info() {
  return {"0.1.0", "arachne simulate --cluster A100-80:1x2 --model gpt3-1.3b", 7,
          "cluster:\n  name: x\nmodel:\n  name: gpt3-1.3b\nplan:\n  schedule: 1f1b\n"};
}

// ------------------------------------------------------------------------------------- atomic files

TEST(IoAtomicFile, CommittedFileAppearsAndTemporaryIsGone) {
  IoTempDir dir;
  write_text_atomically(dir.file("a.txt"), "hello\n");
  EXPECT_EQ(read_bytes(dir.file("a.txt")), "hello\n");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.txt"});
}

TEST(IoAtomicFile, FailedWriteLeavesNoFileAndNoTemporary) {
  IoTempDir dir;
  const std::string path = dir.file("b.txt");
  EXPECT_THROW(write_file_atomically(path,
                                     [](const std::string& tmp) {
                                       std::ofstream(tmp) << "partial";
                                       throw std::runtime_error("interrupted");
                                     }),
               std::runtime_error);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(IoAtomicFile, TemporaryNameIsInTheSameDirectory) {
  const std::string tmp = temporary_path_for("/some/dir/out.h5");
  EXPECT_EQ(fs::path(tmp).parent_path(), fs::path("/some/dir"));
  EXPECT_NE(fs::path(tmp).filename(), fs::path("out.h5"));
}

// ---------------------------------------------------------------------------------------------- HDF5

// Small reading helpers on the C API (what any HDF5 reader sees, independent of the writer's code).
std::string read_string_attr(hid_t obj, const char* name) {
  const hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
  EXPECT_GE(attr, 0) << name;
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  char* p = nullptr;
  H5Aread(attr, type, &p);
  std::string s = p ? p : "";
  H5free_memory(p);
  H5Tclose(type);
  H5Aclose(attr);
  return s;
}

int units_count(hid_t file, const char* dset_path) {
  const hid_t d = H5Dopen2(file, dset_path, H5P_DEFAULT);
  if (d < 0) return -1;
  int n = -1;
  if (H5Aexists(d, "units") > 0) {
    const hid_t a = H5Aopen(d, "units", H5P_DEFAULT);
    const hid_t s = H5Aget_space(a);
    n = H5Sget_simple_extent_ndims(s) == 0 ? 1 : static_cast<int>(H5Sget_simple_extent_npoints(s));
    H5Sclose(s);
    H5Aclose(a);
  }
  H5Dclose(d);
  return n;
}

TEST(IoHdf5, SimulateFileIsSelfDescribing) {
  IoTempDir dir;
  const SimResult r = sample_result();
  write_simulate_h5(dir.file("out.h5"), r, sample_info());
  const hid_t f = H5Fopen(dir.file("out.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
  EXPECT_EQ(read_string_attr(root, "program_version"), "0.1.0");
  EXPECT_EQ(read_string_attr(root, "command_line"), sample_info().command_line);
  EXPECT_EQ(read_string_attr(root, "config_yaml"), sample_info().config_yaml);
  std::uint64_t seed = 0;
  const hid_t sa = H5Aopen(root, "seed", H5P_DEFAULT);
  H5Aread(sa, H5T_NATIVE_UINT64, &seed);
  H5Aclose(sa);
  EXPECT_EQ(seed, 7u);
  H5Gclose(root);

  // Every dataset carries units: one per column for tables, one for the string list.
  EXPECT_EQ(units_count(f, "/summary"), 14);
  EXPECT_EQ(units_count(f, "/breakdown"), 2);
  EXPECT_EQ(units_count(f, "/memory"), 9);
  EXPECT_EQ(units_count(f, "/bytes"), 2);
  EXPECT_EQ(units_count(f, "/warnings"), 1);

  // Tables are chunked and appendable.
  const hid_t d = H5Dopen2(f, "/memory", H5P_DEFAULT);
  const hid_t dcpl = H5Dget_create_plist(d);
  EXPECT_EQ(H5Pget_layout(dcpl), H5D_CHUNKED);
  const hid_t space = H5Dget_space(d);
  hsize_t dims = 0, maxdims = 0;
  H5Sget_simple_extent_dims(space, &dims, &maxdims);
  EXPECT_EQ(dims, 2u);  // one row per GPU of the plan
  EXPECT_EQ(maxdims, H5S_UNLIMITED);
  EXPECT_EQ(H5Tget_class(H5Dget_type(d)), H5T_COMPOUND);

  // Object time stamps are off: all four times read back as 0.
  H5O_info_t info;
  ASSERT_GE(H5Oget_info2(d, &info, H5O_INFO_TIME), 0);
  EXPECT_EQ(info.ctime, 0);
  EXPECT_EQ(info.mtime, 0);
  H5Sclose(space);
  H5Pclose(dcpl);
  H5Dclose(d);

  // The summary's iteration time is the value written (read back through a one-field memory type).
  const hid_t s = H5Dopen2(f, "/summary", H5P_DEFAULT);
  const hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(double));
  H5Tinsert(mt, "iteration_time_s", 0, H5T_NATIVE_DOUBLE);
  double it = 0;
  ASSERT_GE(H5Dread(s, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, &it), 0);
  EXPECT_DOUBLE_EQ(it, r.iteration_time_s);
  H5Tclose(mt);
  H5Dclose(s);

  // The breakdown table's seconds add up to the iteration time (it is the same data, split by cause).
  const hid_t b = H5Dopen2(f, "/breakdown", H5P_DEFAULT);
  const hid_t bt = H5Tcreate(H5T_COMPOUND, sizeof(double));
  H5Tinsert(bt, "seconds", 0, H5T_NATIVE_DOUBLE);
  std::vector<double> secs(8);
  ASSERT_GE(H5Dread(b, bt, H5S_ALL, H5S_ALL, H5P_DEFAULT, secs.data()), 0);
  double sum = 0;
  for (const double x : secs) sum += x;
  EXPECT_NEAR(sum, r.iteration_time_s, 1e-12 * r.iteration_time_s);
  H5Tclose(bt);
  H5Dclose(b);
  H5Fclose(f);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.h5"});  // no temporary left behind
}

TEST(IoHdf5, SameContentGivesByteIdenticalFiles) {
  // Time stamps off and a pinned format: a rerun differs only in wall-time fields, which are equal here.
  IoTempDir dir;
  const SimResult r = sample_result();
  write_simulate_h5(dir.file("a.h5"), r, sample_info());
  write_simulate_h5(dir.file("b.h5"), r, sample_info());
  const std::string a = read_bytes(dir.file("a.h5")), b = read_bytes(dir.file("b.h5"));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "files differ";
}

TEST(IoHdf5, FailureWhileFillingLeavesNoPartialFile) {
  IoTempDir dir;
  const std::string path = dir.file("broken.h5");
  EXPECT_THROW(h5::write_h5_atomically(path, sample_info(),
                                       [](h5::File& f) {
                                         h5::Table t(f, "/t", {{"x", h5::ColumnType::Float64, "s"}});
                                         t.append({{1.0}});
                                         throw std::runtime_error("simulated failure");
                                       }),
               std::runtime_error);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(IoHdf5, TableAppendsBatchesInOrder) {
  IoTempDir dir;
  const std::string path = dir.file("t.h5");
  h5::write_h5_atomically(path, sample_info(), [](h5::File& f) {
    h5::Table t(f, "/group/sub/table",
                {{"i", h5::ColumnType::Int64, "1"},
                 {"x", h5::ColumnType::Float64, "s"},
                 {"ok", h5::ColumnType::Bool, "-"},
                 {"name", h5::ColumnType::String, "-"},
                 {"code", h5::ColumnType::String, "-", 4}},
                3);  // chunk smaller than a batch: appends cross chunk boundaries
    for (int batch = 0; batch < 3; ++batch) {
      std::vector<h5::Row> rows;
      for (int k = 0; k < 5; ++k) {
        const std::int64_t i = batch * 5 + k;
        rows.push_back({i, 0.5 * static_cast<double>(i), i % 2 == 0, "row" + std::to_string(i), std::string("abcdef")});
      }
      t.append(rows);
    }
    EXPECT_EQ(t.rows(), 15u);
    EXPECT_THROW(t.append({{std::int64_t{1}}}), std::invalid_argument);  // wrong cell count
  });
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t d = H5Dopen2(f, "/group/sub/table", H5P_DEFAULT);
  ASSERT_GE(d, 0);
  struct Rec {
    std::int64_t i;
    double x;
    char code[5];
  };
  const hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(Rec));
  H5Tinsert(mt, "i", HOFFSET(Rec, i), H5T_NATIVE_INT64);
  H5Tinsert(mt, "x", HOFFSET(Rec, x), H5T_NATIVE_DOUBLE);
  const hid_t ct = H5Tcopy(H5T_C_S1);
  H5Tset_size(ct, 5);
  H5Tset_strpad(ct, H5T_STR_NULLTERM);
  H5Tset_cset(ct, H5T_CSET_UTF8);
  H5Tinsert(mt, "code", HOFFSET(Rec, code), ct);
  std::vector<Rec> recs(15);
  ASSERT_GE(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, recs.data()), 0);
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(recs[static_cast<std::size_t>(i)].i, i);
    EXPECT_DOUBLE_EQ(recs[static_cast<std::size_t>(i)].x, 0.5 * i);
    EXPECT_STREQ(recs[static_cast<std::size_t>(i)].code, "abcd");  // fixed width 4 truncates
  }
  H5Tclose(ct);
  H5Tclose(mt);
  H5Dclose(d);
  H5Fclose(f);
}

TEST(IoHdf5, ReadTableGivesBackEveryCellOfEveryType) {
  IoTempDir dir;
  const std::string path = dir.file("r.h5");
  std::vector<h5::Row> written;
  for (std::int64_t i = 0; i < 7; ++i)
    written.push_back({i - 3, 0.25 * static_cast<double>(i) - 1e300 * (i == 6), i % 3 == 0, "r\xc3\xa9" + std::to_string(i), std::string("xy")});
  h5::write_h5_atomically(path, sample_info(), [&](h5::File& f) {
    h5::Table t(f, "/a/t",
                {{"i", h5::ColumnType::Int64, "1"},
                 {"x", h5::ColumnType::Float64, "s"},
                 {"ok", h5::ColumnType::Bool, "-"},
                 {"name", h5::ColumnType::String, "-"},
                 {"code", h5::ColumnType::String, "-", 4}},
                2);
    t.append(written);
    h5::Table empty(f, "/a/empty", {{"v", h5::ColumnType::Float64, "1"}});
  });
  const h5::TableData t = h5::read_table(path, "/a/t");
  ASSERT_EQ(t.rows, written.size());
  ASSERT_EQ(t.columns.size(), 5u);
  EXPECT_EQ(t.columns[t.column("ok")].type, h5::ColumnType::Bool);
  EXPECT_EQ(t.columns[t.column("code")].type, h5::ColumnType::String);
  for (std::size_t r = 0; r < written.size(); ++r)
    for (std::size_t c = 0; c < 5; ++c) EXPECT_EQ(t.cells[c][r], written[r][c]) << "row " << r << " column " << c;
  EXPECT_EQ(h5::read_table(path, "/a/empty").rows, 0u);
  EXPECT_THROW(t.column("missing"), std::runtime_error);
  EXPECT_THROW(h5::read_table(path, "/a/none"), std::runtime_error);
  EXPECT_THROW(h5::read_table(dir.file("absent.h5"), "/a/t"), std::runtime_error);
}

TEST(IoHdf5, OutOfMemoryTimingIsNaN) {
  IoTempDir dir;
  SimResult r = sample_result();
  r.oom = true;
  r.iteration_time_s = 0;
  r.breakdown = {};
  write_simulate_h5(dir.file("oom.h5"), r, sample_info());
  const hid_t f = H5Fopen(dir.file("oom.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t s = H5Dopen2(f, "/summary", H5P_DEFAULT);
  struct Rec {
    double it;
    double peak;
  };
  const hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(Rec));
  H5Tinsert(mt, "iteration_time_s", HOFFSET(Rec, it), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "peak_memory_gib", HOFFSET(Rec, peak), H5T_NATIVE_DOUBLE);
  Rec rec{};
  ASSERT_GE(H5Dread(s, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, &rec), 0);
  EXPECT_TRUE(std::isnan(rec.it));
  EXPECT_DOUBLE_EQ(rec.peak, r.peak_memory_gib);
  H5Tclose(mt);
  H5Dclose(s);
  H5Fclose(f);
}

// ---------------------------------------------------------------------------------------------- JSON

TEST(IoReportJson, HasEveryDesignKeyAndBreakdownSumsToIterationTime) {
  const SimResult r = sample_result();
  const nlohmann::json j = simulate_report_json(r);
  for (const char* k : {"iteration_time_s", "tokens_per_s", "samples_per_s", "tflops_per_gpu", "mfu", "mfu_cluster",
                        "oom", "peak_memory_gib", "memory_gib", "breakdown_s", "bytes", "dropped_tokens", "events",
                        "sim_wall_s", "warnings"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"weights", "gradients", "optimizer", "activations", "other"})
    EXPECT_TRUE(j["memory_gib"].contains(k)) << k;
  for (const char* k : {"nvlink", "pcie", "nic", "spine"}) EXPECT_TRUE(j["bytes"].contains(k)) << k;
  double sum = 0;
  for (const char* k : {"compute", "tp_comm", "pp_comm", "dp_comm", "ep_comm", "bubble", "wait", "optimizer"})
    sum += j["breakdown_s"].at(k).get<double>();
  EXPECT_NEAR(sum, j["iteration_time_s"].get<double>(), 1e-12);
  // memory_gib is the peak GPU's breakdown in GiB (2^30 bytes): activations of n0:1 = 11 GiB.
  EXPECT_DOUBLE_EQ(j["memory_gib"]["activations"].get<double>(), 11.0);
  EXPECT_EQ(j["warnings"].size(), 2u);
  EXPECT_FALSE(j["oom"].get<bool>());
  EXPECT_FALSE(j.contains("per_gpu_memory_gib"));
}

TEST(IoReportJson, OutOfMemoryHasNullTimingAndPerGpuMemory) {
  SimResult r = sample_result();
  r.oom = true;
  r.iteration_time_s = 0;
  const nlohmann::json j = simulate_report_json(r);
  EXPECT_TRUE(j["oom"].get<bool>());
  for (const char* k : {"iteration_time_s", "tokens_per_s", "samples_per_s", "tflops_per_gpu", "mfu", "mfu_cluster",
                        "breakdown_s"})
    EXPECT_TRUE(j[k].is_null()) << k;
  ASSERT_EQ(j["per_gpu_memory_gib"].size(), 2u);
  // 2 + 2 + 12 + 10 + 1 GiB on n0:0.
  EXPECT_DOUBLE_EQ(j["per_gpu_memory_gib"][0]["total"].get<double>(), 27.0);
  EXPECT_EQ(j["per_gpu_memory_gib"][0]["gpu"], "n0:0");
  EXPECT_EQ(j["peak_memory_gpu"], "n0:1");
}

// ------------------------------------------------------------------------------------- Chrome trace

TEST(IoChromeTrace, SpansBecomeCompleteEventsInMicroseconds) {
  SimResult r;
  r.timeline = {{1, "F0", "compute", 1.5e-3, 2e-3}, {0, "F0", "compute", 0.0, 1e-3}, {4 + 2, "allreduce dp", "dp_comm", 0.01, 0.5}};
  const std::vector<std::string> names = {"n0:0 A100-80", "n0:1 A100-80", "n0:2 A100-80", "n0:3 A100-80",
                                          "link nvlink",  "link pcie",    "link nic",     "link spine"};
  const nlohmann::json j = chrome_trace_json(r, names);
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  int x = 0;
  std::vector<int> named_tracks;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      ++x;
      EXPECT_EQ(e["pid"], 0);
      if (e["tid"] == 1) {  // 1.5 ms start, 2 ms long -> 1500 us, 2000 us
        EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1500.0);
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2000.0);
      }
    } else if (e["name"] == "thread_name") {
      named_tracks.push_back(e["tid"].get<int>());
      EXPECT_EQ(e["args"]["name"], names[e["tid"].get<std::size_t>()]);
    } else if (e["name"] == "thread_sort_index") {
      EXPECT_EQ(e["args"]["sort_index"], e["tid"]);
    }
  }
  EXPECT_EQ(x, 3);
  EXPECT_EQ(named_tracks, (std::vector<int>{0, 1, 6}));  // in track order, only tracks with spans
}

TEST(IoChromeTrace, TrackNamesAreGpusInOrderThenLinkClasses) {
  const Cluster c = parse_cluster_spec("A100-80:1x2,V100-32:1x1", GpuCatalog::load_default());
  EXPECT_EQ(timeline_track_names(c),
            (std::vector<std::string>{"n0:0 A100-80", "n0:1 A100-80", "n1:0 V100-32", "link nvlink", "link pcie",
                                      "link nic", "link spine", "n0:0 A100-80 DP comm", "n0:1 A100-80 DP comm",
                                      "n1:0 V100-32 DP comm"}));
}

TEST(IoChromeTrace, WrittenFileParses) {
  IoTempDir dir;
  SimResult r;
  r.timeline = {{0, "B0", "compute", 0.0, 1e-3}};
  write_chrome_trace(dir.file("t.json"), r, {"n0:0 H100"});
  const nlohmann::json j = nlohmann::json::parse(read_bytes(dir.file("t.json")));
  EXPECT_TRUE(j["traceEvents"].is_array());
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"t.json"});
}

}  // namespace
}  // namespace arachne
