#include "planner/arachne/config_sampler.h"

#include <gtest/gtest.h>

#include <set>

namespace arachne::planner {
namespace {

const GpuCatalog& catalog() {
  static const GpuCatalog c = GpuCatalog::load_default();
  return c;
}

std::set<std::string> types_of(const Cluster& c) {
  std::set<std::string> t;
  for (const NodeGroup& g : c.groups) t.insert(g.gpu);
  return t;
}

TEST(ConfigSampler, SameSeedAndIndexGiveTheSameConfigurationInAnyOrder) {
  const ConfigSamplerOptions opt;
  const SampledConfig a = draw_config(opt, catalog(), Split::Train, 7, 12);
  draw_config(opt, catalog(), Split::Train, 7, 3);  // another draw in between changes nothing
  const SampledConfig b = draw_config(opt, catalog(), Split::Train, 7, 12);
  EXPECT_EQ(a.cluster.to_yaml(), b.cluster.to_yaml());
  EXPECT_EQ(a.model.to_yaml(), b.model.to_yaml());
  EXPECT_EQ(a.global_batch, b.global_batch);
  const SampledConfig c = draw_config(opt, catalog(), Split::Train, 8, 12);
  EXPECT_NE(a.cluster.to_yaml() + a.model.name, c.cluster.to_yaml() + c.model.name);
}

TEST(ConfigSampler, SplitsNeverShareAFamily) {
  const ConfigSamplerOptions opt;
  std::set<std::string> train, held;
  for (std::uint64_t i = 0; i < 150; ++i) {
    const SampledConfig t = draw_config(opt, catalog(), Split::Train, 1, i);
    const SampledConfig h = draw_config(opt, catalog(), Split::HeldOut, 1, i);
    EXPECT_FALSE(held_out_family(t.family, opt.held_out_modulus)) << t.family;
    EXPECT_TRUE(held_out_family(h.family, opt.held_out_modulus)) << h.family;
    // The family names exactly the GPU types the cluster holds.
    const std::set<std::string> ty = types_of(t.cluster);
    EXPECT_EQ(t.family, family_name({ty.begin(), ty.end()}));
    train.insert(t.family);
    held.insert(h.family);
  }
  for (const std::string& f : held) EXPECT_EQ(train.count(f), 0u) << f;
  EXPECT_GE(held.size(), 5u);  // several held-out families, not one
}

TEST(ConfigSampler, DrawsCoverTheSpaceTheLearnedPlannerIsAskedAbout) {
  const ConfigSamplerOptions opt;
  std::set<std::size_t> type_counts;
  std::set<int> node_sizes;
  int partial = 0, moe = 0, small = 0, large = 0;
  std::set<double> nic;
  for (std::uint64_t i = 0; i < 300; ++i) {
    const SampledConfig s = draw_config(opt, catalog(), Split::Train, 3, i);
    const std::set<std::string> ty = types_of(s.cluster);
    type_counts.insert(ty.size());
    std::map<std::string, int> groups_of_type;
    for (const NodeGroup& g : s.cluster.groups) {
      node_sizes.insert(g.gpus_per_node);
      nic.insert(g.nic_bw / s.cluster.catalog.at(g.gpu).node.nic_bw);
      ++groups_of_type[g.gpu];
    }
    for (const auto& [t, n] : groups_of_type) partial += n > 1;
    moe += s.model.moe.has_value();
    const int g = s.cluster.total_gpus();
    small += g <= 16;
    large += g >= 512;
    EXPECT_GE(g, 1);
    EXPECT_LE(g, opt.max_gpus + 4 * 8);  // per-type rounding to whole nodes
    // The cluster holds the model's training state (the sampler's own feasibility rule).
    double mem = 0;
    for (const NodeGroup& gr : s.cluster.groups) mem += gr.nodes * gr.gpus_per_node * s.cluster.catalog.at(gr.gpu).memory_bytes;
    EXPECT_GE(mem, 18.0 * s.model.parameters());
    EXPECT_GE(s.global_batch, 32);
    EXPECT_LE(s.global_batch, 4096);
  }
  EXPECT_EQ(type_counts, (std::set<std::size_t>{1, 2, 3, 4}));
  for (int n : {1, 2, 4, 8}) EXPECT_TRUE(node_sizes.count(n)) << n;
  EXPECT_GT(partial, 10);
  EXPECT_GT(moe, 30);
  EXPECT_GT(small, 10);
  EXPECT_GT(large, 10);
  EXPECT_EQ(nic.size(), 4u);
}

}  // namespace
}  // namespace arachne::planner
