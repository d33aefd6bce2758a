// The cluster's physical topology as a Boost.Graph: GPUs, the intra-node fabric (NVSwitch / PCIe switch),
// NICs, leaf switches and one aggregated spine. Every edge is a directed link with a capacity; a
// transfer's route is a path of links in this graph.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "sim/hw/cluster.h"

namespace arachne {

using LinkId = int;

enum class LinkClass { NvLink = 0, Pcie = 1, Nic = 2, Spine = 3 };
constexpr int kLinkClasses = 4;
const char* to_string(LinkClass c);

// Links of one class a transfer crosses once it uses that class at all: inside a node GPU>fabric>GPU (2);
// between nodes GPU>NIC, NIC>leaf, leaf>NIC, NIC>GPU (4); across leaves leaf>spine>leaf (2). Byte counts
// per class divide the per-link sums by this, so `bytes.nic` is the volume that crossed NICs once.
constexpr int links_per_crossing(LinkClass c) { return c == LinkClass::Nic ? 4 : 2; }

struct Link {
  double capacity = 0;  // bytes/s (nominal bandwidth x the GPU type's calibrated link_eff)
  LinkClass cls = LinkClass::Nic;
  int from = -1, to = -1;  // vertices of the topology's graph (-1 outside a Topology)
};

class Topology {
 public:
  explicit Topology(const Cluster& cluster);
  ~Topology();
  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;

  const std::vector<Link>& links() const { return links_; }
  // "n0:3>n0.fabric", "n0.fabric>n0:3", "n0:3>n0.nic1", "n0.nic2>leaf0", "leaf0>spine", ... Built on demand:
  // names are for messages and tests, and a cluster has up to ~400,000 links.
  std::string link_name(LinkId l) const;
  int num_gpus() const { return num_gpus_; }
  // Directed links from GPU src to GPU dst (empty when src == dst). Cached; deterministic; thread-safe.
  // Same node: [gpu>fabric, fabric>gpu]. Other node: [gpu>nic, nic>leaf, (leaf>spine, spine>leaf when the
  // leaves differ), leaf>nic, nic>gpu]. The reference stays valid for the Topology's lifetime.
  const std::vector<LinkId>& route(GpuId src, GpuId dst) const;
  // route(src, dst).size() without building or looking up the route: 0, 2 (same node), 4 (same leaf) or 6.
  int route_length(GpuId src, GpuId dst) const {
    if (src == dst) return 0;
    const Place& s = place_.at(static_cast<std::size_t>(src));
    const Place& d = place_.at(static_cast<std::size_t>(dst));
    return s.node == d.node ? 2 : s.leaf == d.leaf ? 4 : 6;
  }
  // One-way latency of a message src -> dst: 0 for src == dst; 1 us (NVLink/xGMI) or 2 us (PCIe) inside a
  // node; network.latency_s between nodes.
  double latency_s(GpuId src, GpuId dst) const;
  bool same_node(GpuId a, GpuId b) const;
  int num_vertices() const;
  // A shortest path src -> dst found by breadth-first search in the graph, taking out-edges in the order
  // the links were added: what route() must equal. Slow (it searches the whole graph); for tests.
  std::vector<LinkId> searched_route(GpuId src, GpuId dst) const;

 private:
  void build_graph();  // the graph of links_ (Impl::graph)
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<Link> links_;
  int num_gpus_ = 0;
  struct Place {  // of a GPU
    int node, leaf;
  };
  std::vector<Place> place_;  // per GPU
};

}  // namespace arachne
