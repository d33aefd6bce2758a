#include "planner/arachne/dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "sim/io/input_error.h"

namespace arachne::planner {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path p = fs::temp_directory_path() / ("arachne_dataset_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

const double kNaN = std::numeric_limits<double>::quiet_NaN();

DatasetSchema schema() { return {{"Bos", "Eos", "Type0"}, {"count", "tflops"}, {"layers", "batch", "moe"}}; }

std::vector<ConfigRecord> records() {
  ConfigRecord a;
  a.index = 4;
  a.family = "A100-80+V100-32";
  a.model = "gpt3-1.3b";
  a.global_batch = 512;
  a.gpus = 24;
  a.cluster_yaml = "name: x\nnode_groups: []\n";
  a.search = "templates";
  a.search_complete = true;
  a.oracle_s = 1.0 / 3.0;
  a.group_features = {{1.5, 0.1 + 0.2}, {-2.0, 1e-300}};
  a.global_features = {24, 512, 0};
  a.labels = {{"1x[A100-80:tp1x1]", {0, 2, 1}, 0.7, 0.65}, {"2x[V100-32:tp1x1]", {0, 2, 2, 1}, 0.9, kNaN}};
  a.candidates = {{"1x[A100-80:tp1x1]", 0.65, 0.7, true}, {"t", kNaN, kNaN, false}};
  ConfigRecord b = a;
  b.index = 9;
  b.oracle_s = kNaN;
  b.labels.clear();
  b.candidates.clear();
  return {a, b};
}

// NaN-aware equality of doubles, bit for bit otherwise.
bool same(double x, double y) { return (std::isnan(x) && std::isnan(y)) || x == y; }

void expect_same(const ConfigRecord& a, const ConfigRecord& b) {
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.global_batch, b.global_batch);
  EXPECT_EQ(a.gpus, b.gpus);
  EXPECT_EQ(a.cluster_yaml, b.cluster_yaml);
  EXPECT_EQ(a.search, b.search);
  EXPECT_EQ(a.search_complete, b.search_complete);
  EXPECT_TRUE(same(a.oracle_s, b.oracle_s));
  EXPECT_EQ(a.group_features, b.group_features);
  EXPECT_EQ(a.global_features, b.global_features);
  ASSERT_EQ(a.labels.size(), b.labels.size());
  for (std::size_t i = 0; i < a.labels.size(); ++i) {
    EXPECT_EQ(a.labels[i].template_text, b.labels[i].template_text);
    EXPECT_EQ(a.labels[i].tokens, b.labels[i].tokens);
    EXPECT_TRUE(same(a.labels[i].simulated_s, b.labels[i].simulated_s));
    EXPECT_TRUE(same(a.labels[i].estimated_s, b.labels[i].estimated_s));
  }
  ASSERT_EQ(a.candidates.size(), b.candidates.size());
  for (std::size_t i = 0; i < a.candidates.size(); ++i) {
    EXPECT_EQ(a.candidates[i].template_text, b.candidates[i].template_text);
    EXPECT_TRUE(same(a.candidates[i].estimated_s, b.candidates[i].estimated_s));
    EXPECT_TRUE(same(a.candidates[i].simulated_s, b.candidates[i].simulated_s));
    EXPECT_EQ(a.candidates[i].fits, b.candidates[i].fits);
  }
}

TEST(Dataset, JsonShardRoundTripsEveryValueExactly) {
  for (const ConfigRecord& r : records()) expect_same(r, record_from_json(record_to_json(r)));
  EXPECT_THROW(record_from_json("{\"index\": 1"), std::runtime_error);
  EXPECT_THROW(record_from_json("{}"), std::runtime_error);
}

TEST(Dataset, Hdf5RoundTripsRecordsAndSchema) {
  const fs::path dir = temp_dir();
  const std::string path = (dir / "d.h5").string();
  write_dataset_h5(path, schema(), records(), {"v", "arachne gen-data", 1, "options: {}\n"});
  DatasetSchema back;
  const std::vector<ConfigRecord> read = read_dataset_h5(path, &back);
  EXPECT_EQ(back.vocabulary, schema().vocabulary);
  EXPECT_EQ(back.group_features, schema().group_features);
  EXPECT_EQ(back.global_features, schema().global_features);
  ASSERT_EQ(read.size(), 2u);
  for (std::size_t i = 0; i < read.size(); ++i) expect_same(records()[i], read[i]);
  fs::remove_all(dir);
}

TEST(Dataset, SameRecordsGiveByteIdenticalFiles) {
  const fs::path dir = temp_dir();
  const auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  };
  write_dataset_h5((dir / "a.h5").string(), schema(), records(), {"v", "c", 1, "y"});
  write_dataset_h5((dir / "b.h5").string(), schema(), records(), {"v", "c", 1, "y"});
  EXPECT_EQ(bytes(dir / "a.h5"), bytes(dir / "b.h5"));
  fs::remove_all(dir);
}

TEST(Dataset, TokenIdsOutsideTheVocabularyAreBadInputNamingTheRow) {
  const fs::path dir = temp_dir();
  const std::string path = (dir / "d.h5").string();
  std::vector<ConfigRecord> bad = records();
  bad[0].labels[1].tokens = {0, 3, 1};  // the schema's vocabulary has ids 0..2
  write_dataset_h5(path, schema(), bad, {"v", "c", 1, "y"});
  try {
    read_dataset_h5(path);
    ADD_FAILURE() << "token id 3 of a 3-token vocabulary was read";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), path + ": /labels[1]: tokens");
    EXPECT_NE(e.reason().find("3"), std::string::npos) << e.reason();
  }
  fs::remove_all(dir);
}

TEST(Dataset, FeatureCountsMustMatchTheSchemaAndNoFileIsLeft) {
  const fs::path dir = temp_dir();
  std::vector<ConfigRecord> bad = records();
  bad[1].group_features[0].push_back(1.0);
  EXPECT_THROW(write_dataset_h5((dir / "bad.h5").string(), schema(), bad, {"v", "c", 1, "y"}), std::invalid_argument);
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace arachne::planner
