// Links grouped by who loads them and how much: the estimator's gradient reduction sums, per link, the
// load of every bucket crossing it, in bucket order; links that the same loaders load equally get the same
// terms in the same order, so one sum serves them all (estimator.cpp shared_links).
#pragma once
#include <map>
#include <tuple>
#include <utility>
#include <vector>

namespace arachne::planner {

struct LinkGroups {
  std::vector<std::vector<std::pair<int, double>>> loads;  // per group: (loader, load), loaders ascending
  std::vector<std::vector<std::pair<int, double>>> terms;  // per loader: (group, load), one per group it loads
  std::vector<int> links, link_group;                      // every loaded link (first-loaded first) and its group
};

// Groups the links loaded by `loaders` (each a list of (link, x), no link twice in one list; links below
// link_count), each load scale * x: two links fall in one group exactly when the same loaders load them with
// the same loads (compared bit for bit). Keeps its scratch from call to call; not thread-safe.
class LinkGrouper {
 public:
  LinkGroups group(const std::vector<const std::vector<std::pair<int, double>>*>& loaders, int link_count, double scale = 1);

 private:
  // A link's (loader, load) list so far is a node of a trie: node 0 the empty list, a node's child per
  // (loader, load) appended.
  struct Node {
    int parent = -1, loader = -1;
    double load = 0;
  };
  std::vector<Node> nodes_;
  std::map<std::tuple<int, int, double>, int> child_;  // (node, loader, load) -> child
  std::vector<int> node_of_link_, loaded_, group_of_node_;
  std::vector<long> stamp_;  // per link: the call whose node node_of_link_ holds
  long call_ = 0;
};

}  // namespace arachne::planner
