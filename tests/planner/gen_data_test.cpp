#include "planner/arachne/gen_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "sim/io/input_error.h"

namespace arachne::planner {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / ("arachne_gen_data_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const GpuCatalog& catalog() {
  static const GpuCatalog c = GpuCatalog::load_default();
  return c;
}

DatasetSchema schema() { return {{"Bos", "Eos"}, {"gpus"}, {"batch"}}; }

// A labeller that depends only on the configuration, as the real one must.
ConfigRecord fake_label(const SampledConfig& c) {
  ConfigRecord r;
  r.index = c.index;
  r.family = c.family;
  r.model = c.model.name;
  r.global_batch = c.global_batch;
  r.gpus = c.cluster.total_gpus();
  r.cluster_yaml = c.cluster.to_yaml();
  r.search = "fake";
  r.oracle_s = 0.5;
  r.group_features = {{static_cast<double>(r.gpus)}};
  r.global_features = {static_cast<double>(c.global_batch)};
  r.labels = {{"t", {0, 1}, 1.0 / static_cast<double>(r.gpus), 0.0}};
  return r;
}

GenDataOptions options(const fs::path& out, int threads) {
  GenDataOptions o;
  o.out = out.string();
  o.configs = 12;
  o.seed = 5;
  o.threads = threads;
  o.sampler.max_gpus = 64;
  o.options_text = "fake labeller, 12 configs, seed 5\n";
  return o;
}

TEST(GenData, FileDoesNotDependOnTheThreadCount) {
  TempDir dir;
  run_gen_data(options(dir.path / "one.h5", 1), catalog(), schema(), fake_label, {"v", "c", 5, "y"});
  run_gen_data(options(dir.path / "three.h5", 3), catalog(), schema(), fake_label, {"v", "c", 5, "y"});
  EXPECT_EQ(bytes(dir.path / "one.h5"), bytes(dir.path / "three.h5"));
  EXPECT_FALSE(fs::exists(shard_dir((dir.path / "one.h5").string())));  // shards removed once assembled
  const std::vector<ConfigRecord> recs = read_dataset_h5((dir.path / "one.h5").string());
  ASSERT_EQ(recs.size(), 12u);
  for (std::size_t i = 0; i < recs.size(); ++i) EXPECT_EQ(recs[i].index, i);
}

TEST(GenData, InterruptedRunResumesAndEndsWithTheSameFile) {
  TempDir dir;
  run_gen_data(options(dir.path / "whole.h5", 2), catalog(), schema(), fake_label, {"v", "c", 5, "y"});
  const fs::path out = dir.path / "resumed.h5";
  std::atomic<int> calls{0};
  const ConfigLabeler dies_at_7 = [&](const SampledConfig& c) {
    ++calls;
    if (c.index == 7) throw std::runtime_error("killed");
    return fake_label(c);
  };
  EXPECT_THROW(run_gen_data(options(out, 1), catalog(), schema(), dies_at_7, {"v", "c", 5, "y"}), std::runtime_error);
  EXPECT_FALSE(fs::exists(out));  // no partial output file
  EXPECT_EQ(calls.load(), 8);     // configurations 0-7 tried, 0-6 kept
  calls = 0;
  const ConfigLabeler counting = [&](const SampledConfig& c) {
    ++calls;
    return fake_label(c);
  };
  const GenDataStats s = run_gen_data(options(out, 2), catalog(), schema(), counting, {"v", "c", 5, "y"});
  EXPECT_EQ(s.resumed, 7);
  EXPECT_EQ(s.labelled, 5);
  EXPECT_EQ(calls.load(), 5);
  EXPECT_EQ(bytes(dir.path / "whole.h5"), bytes(out));
}

TEST(GenData, InterruptedRunCanBeFinishedWithAnotherCount) {
  TempDir dir;
  GenDataOptions whole = options(dir.path / "whole.h5", 1);
  whole.configs = 5;
  run_gen_data(whole, catalog(), schema(), fake_label, {"v", "c", 5, "y"});
  const fs::path out = dir.path / "cut.h5";
  const ConfigLabeler dies_at_7 = [](const SampledConfig& c) {
    if (c.index == 7) throw std::runtime_error("killed");
    return fake_label(c);
  };
  EXPECT_THROW(run_gen_data(options(out, 1), catalog(), schema(), dies_at_7, {"v", "c", 5, "y"}), std::runtime_error);
  GenDataOptions cut = options(out, 1);
  cut.configs = 5;
  EXPECT_EQ(run_gen_data(cut, catalog(), schema(), fake_label, {"v", "c", 5, "y"}).resumed, 5);
  EXPECT_EQ(bytes(dir.path / "whole.h5"), bytes(out));
}

TEST(GenData, ShardsOfOtherOptionsAreRefused) {
  TempDir dir;
  const fs::path out = dir.path / "d.h5";
  const ConfigLabeler dies = [](const SampledConfig&) -> ConfigRecord { throw std::runtime_error("killed"); };
  EXPECT_THROW(run_gen_data(options(out, 1), catalog(), schema(), dies, {"v", "c", 5, "y"}), std::runtime_error);
  GenDataOptions other = options(out, 1);
  other.options_text = "another labeller\n";
  EXPECT_THROW(run_gen_data(other, catalog(), schema(), fake_label, {"v", "c", 5, "y"}), InputError);
}

}  // namespace
}  // namespace arachne::planner
