// Links grouped by their load lists (see link_groups.h).
#include "planner/template/link_groups.h"

#include <algorithm>

namespace arachne::planner {

LinkGroups LinkGrouper::group(const std::vector<const std::vector<std::pair<int, double>>*>& loaders, int link_count,
                              double scale) {
  if (static_cast<int>(node_of_link_.size()) != link_count)
    node_of_link_.assign(link_count, 0), stamp_.assign(link_count, -1), loaded_.resize(link_count);
  ++call_;
  nodes_.assign(1, Node{});
  size_t loaded = 0;
  for (size_t i = 0; i < loaders.size(); ++i) {
    int from = -1, to = -1;  // the last step taken: a ring's links take the same one in a row
    double from_load = 0;
    for (const auto& [l, x] : *loaders[i]) {
      const double load = scale * x;
      if (stamp_[l] != call_) stamp_[l] = call_, node_of_link_[l] = 0, loaded_[loaded++] = l;
      const int node = node_of_link_[l];
      if (node != from || load != from_load) {
        const auto [it, fresh] = child_.try_emplace({node, static_cast<int>(i), load}, static_cast<int>(nodes_.size()));
        if (fresh) nodes_.push_back({node, static_cast<int>(i), load});
        from = node, from_load = load, to = it->second;
      }
      node_of_link_[l] = to;
    }
  }
  LinkGroups out;
  out.terms.resize(loaders.size());
  out.links.assign(loaded_.begin(), loaded_.begin() + static_cast<long>(loaded));
  out.link_group.resize(loaded);
  group_of_node_.assign(nodes_.size(), -1);
  for (size_t x = 0; x < loaded; ++x) {
    const int node = node_of_link_[out.links[x]];
    int& g = group_of_node_[node];
    if (g < 0) {
      g = static_cast<int>(out.loads.size());
      std::vector<std::pair<int, double>>& loads = out.loads.emplace_back();
      for (int n = node; n > 0; n = nodes_[n].parent) loads.push_back({nodes_[n].loader, nodes_[n].load});
      std::reverse(loads.begin(), loads.end());
      for (const auto& [i, load] : loads) out.terms[i].push_back({g, load});
    }
    out.link_group[x] = g;
  }
  child_.clear();
  return out;
}

}  // namespace arachne::planner
