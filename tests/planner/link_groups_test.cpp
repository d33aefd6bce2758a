// Tests of the links' grouping by load lists (planner/template/link_groups.h) against a brute-force grouping.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "planner/template/link_groups.h"

namespace arachne::planner {
namespace {

using Loads = std::vector<std::pair<int, double>>;

// Random loaders over `links` links: each loads a random subset, its loads drawn from a few values (so that
// lists repeat and also differ by load alone), in runs of one value (as a ring's links are) or mixed.
std::vector<std::vector<std::pair<int, double>>> random_loaders(std::mt19937_64& rng, int links) {
  const int n = 1 + static_cast<int>(rng() % 5);
  const std::vector<double> values{0.25, 0.5, 0.5000000000000001, 1.0};
  std::vector<std::vector<std::pair<int, double>>> out(n);
  for (auto& list : out) {
    double run = values[rng() % values.size()];
    for (int l = 0; l < links; ++l) {
      if (rng() % 3 == 0) continue;
      if (rng() % 4 == 0) run = values[rng() % values.size()];
      list.push_back({l, run});
    }
    std::shuffle(list.begin(), list.end(), rng);  // any order of links
  }
  return out;
}

// Every link's group holds exactly its (loader, scale x load) list in loader order; two links share a group
// exactly when their lists are equal; each loader's terms are the groups it loads with their loads, each
// once; every loaded link is listed once. 300 random cases of 1-5 loaders over 1-40 links, one grouper
// reused (its scratch kept from call to call), with scales 1 and 0.3.
TEST(LinkGroups, GroupExactlyTheLinksOfEqualLoadLists) {
  std::mt19937_64 rng(5);
  LinkGrouper grouper;
  int merged = 0, split_by_load = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int links = 1 + static_cast<int>(rng() % 40);
    const double scale = trial % 2 ? 0.3 : 1.0;
    const auto lists = random_loaders(rng, links);
    std::vector<const std::vector<std::pair<int, double>>*> loaders;
    for (const auto& list : lists) loaders.push_back(&list);
    const LinkGroups g = grouper.group(loaders, links, scale);
    std::map<int, Loads> want;  // per link: its list, brute force
    for (size_t i = 0; i < lists.size(); ++i)
      for (const auto& [l, x] : lists[i]) want[l].push_back({static_cast<int>(i), scale * x});
    ASSERT_EQ(g.links.size(), want.size()) << trial;
    ASSERT_EQ(g.link_group.size(), g.links.size()) << trial;
    std::set<int> seen;
    for (size_t x = 0; x < g.links.size(); ++x) {
      const int l = g.links[x];
      ASSERT_TRUE(seen.insert(l).second) << trial << " link " << l << " listed twice";
      ASSERT_EQ(g.loads.at(g.link_group[x]), want.at(l)) << trial << " link " << l;
      for (size_t y = 0; y < x; ++y) {
        const bool same_list = want.at(g.links[y]) == want.at(l);
        EXPECT_EQ(g.link_group[y] == g.link_group[x], same_list) << trial;
        merged += same_list ? 1 : 0;
        // Equal loaders, other loads: lists that only the loads tell apart.
        Loads a = want.at(g.links[y]), b = want.at(l);
        bool same_loaders = a.size() == b.size();
        for (size_t k = 0; same_loaders && k < a.size(); ++k) same_loaders = a[k].first == b[k].first;
        split_by_load += same_loaders && !same_list ? 1 : 0;
      }
    }
    ASSERT_EQ(g.terms.size(), lists.size()) << trial;
    for (size_t i = 0; i < lists.size(); ++i) {
      std::set<int> groups;
      for (const auto& [group, load] : g.terms[i]) {
        EXPECT_TRUE(groups.insert(group).second) << trial;
        bool found = false;
        for (const auto& [loader, x] : g.loads.at(group)) found = found || (loader == static_cast<int>(i) && x == load);
        EXPECT_TRUE(found) << trial;
      }
      for (size_t group = 0; group < g.loads.size(); ++group)
        for (const auto& [loader, x] : g.loads[group])
          if (loader == static_cast<int>(i)) EXPECT_TRUE(groups.count(static_cast<int>(group))) << trial;
    }
  }
  EXPECT_GT(merged, 1000);        // links did share groups
  EXPECT_GT(split_by_load, 1000);  // and loads alone kept some apart
}

}  // namespace
}  // namespace arachne::planner
