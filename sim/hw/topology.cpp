// The cluster's topology as a Boost.Graph, and the route of every GPU pair in it.
//
// Vertices: every GPU (vertex id = GpuId), then per node its intra-node fabric (NVSwitch / PCIe switch)
// and its NICs, then one leaf switch per `nodes_per_leaf` nodes (in listing order), then one aggregated
// spine (only with more than one leaf). Every edge is one directed Link; LinkId = edge insertion order.
// Routes: same node  gpu>fabric, fabric>gpu
//         other node gpu>nic, nic>leaf, [leaf>spine, spine>leaf when the leaves differ], leaf>nic, nic>gpu
// A GPU uses NIC local*nic_count/gpus_per_node of its node, so GPUs sharing a NIC share its nic>leaf and
// leaf>nic links.
// These are the graph's shortest paths, and the only ones but one case: a GPU reaches another GPU only from
// its node's fabric or from its own NIC, a NIC only from its node's GPUs or its leaf, a leaf only from its
// NICs or the spine, so between nodes the path above is the unique shortest one (4 links, 6 across leaves);
// inside a node two GPUs sharing a NIC also have gpu>nic>gpu, and the route takes the fabric (its links
// are inserted first, as a breadth-first search in insertion order would take them). So a route is
// assembled from each GPU's four links, its NIC's two and its leaf's two, without a search.
#include "sim/hw/topology.h"

#include <boost/graph/adjacency_list.hpp>

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace arachne {
namespace {

struct EdgeProps {
  LinkId link = -1;
};
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, boost::no_property, EdgeProps>;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;

}  // namespace

const char* to_string(LinkClass c) {
  switch (c) {
    case LinkClass::NvLink: return "nvlink";
    case LinkClass::Pcie: return "pcie";
    case LinkClass::Nic: return "nic";
    case LinkClass::Spine: return "spine";
  }
  return "?";
}

struct Topology::Impl {
  // The links a route can start or end with, per GPU: its fabric and NIC links, its NIC's links to and from
  // the leaf (-1 when the node has no NIC), its leaf; per leaf its links to and from the spine.
  struct GpuLinks {
    LinkId to_fabric = -1, from_fabric = -1, to_nic = -1, from_nic = -1, nic_to_leaf = -1, leaf_to_nic = -1;
    int leaf = 0;
  };

  Graph graph;
  std::vector<int> node_of_gpu;
  std::vector<double> intra_latency_of_node;
  double inter_latency_s = 0;
  std::vector<GpuLinks> gpu_links;
  std::vector<LinkId> leaf_to_spine, spine_to_leaf;
  mutable std::mutex mutex;
  // Routes asked for so far, by (src, dst); unordered_map keeps its elements in place, so the references
  // route() returns stay valid.
  mutable std::unordered_map<std::uint64_t, std::vector<LinkId>> cache;

  std::vector<LinkId> assemble(GpuId src, GpuId dst) const {
    const GpuLinks& s = gpu_links[src];
    const GpuLinks& d = gpu_links[dst];
    if (node_of_gpu[src] == node_of_gpu[dst]) return {s.to_fabric, d.from_fabric};
    if (s.to_nic < 0 || d.to_nic < 0)
      throw std::logic_error("topology: GPU " + std::to_string(dst) + " unreachable from " + std::to_string(src));
    if (s.leaf == d.leaf) return {s.to_nic, s.nic_to_leaf, d.leaf_to_nic, d.from_nic};
    return {s.to_nic, s.nic_to_leaf, leaf_to_spine[s.leaf], spine_to_leaf[d.leaf], d.leaf_to_nic, d.from_nic};
  }
};

Topology::Topology(const Cluster& cluster) : impl_(std::make_unique<Impl>()), num_gpus_(cluster.total_gpus()) {
  Impl& im = *impl_;
  Graph& g = im.graph;
  const NetworkConfig& net = cluster.network;
  const int num_nodes = static_cast<int>(cluster.nodes.size());
  const int per_leaf = std::max(1, net.nodes_per_leaf);
  const int num_leaves = (num_nodes + per_leaf - 1) / per_leaf;
  im.inter_latency_s = net.latency_s;

  auto add_link = [&](Vertex from, Vertex to, double capacity, LinkClass cls, std::string name) {
    const LinkId id = static_cast<LinkId>(links_.size());
    boost::add_edge(from, to, EdgeProps{id}, g);
    links_.push_back(Link{capacity, cls, std::move(name)});
    return id;
  };
  auto add_vertex = [&]() { return boost::add_vertex(g); };
  auto nic_of = [&](int n, int local) {
    const Node& node = cluster.nodes[n];
    return static_cast<int>(static_cast<long long>(local) * cluster.groups[node.group].nic_count / node.gpus);
  };

  for (int i = 0; i < num_gpus_; ++i) add_vertex();  // GPU vertex ids = GpuIds
  im.node_of_gpu.resize(num_gpus_);
  im.gpu_links.resize(num_gpus_);

  std::vector<std::vector<Vertex>> nic_vertices(num_nodes);
  std::vector<double> node_nic_capacity(num_nodes, 0.0);
  for (int n = 0; n < num_nodes; ++n) {
    const Node& node = cluster.nodes[n];
    const NodeGroup& grp = cluster.groups[node.group];
    const double eff = cluster.catalog.at(grp.gpu).compute.link_eff;
    const std::string nn = "n" + std::to_string(n);
    // Xgmi is NVLink-class traffic: a dedicated GPU-to-GPU fabric, not the PCIe tree.
    const LinkClass intra_cls = grp.intra_kind == LinkKind::Pcie ? LinkClass::Pcie : LinkClass::NvLink;
    // Per-hop intra-node latency, the order of NCCL's hardware latencies (src/graph/tuning.cc, hwLat:
    // NVLink ~0.5-1.9 us, PCIe ~1-2 us per hop): 1 us NVLink/xGMI, 2 us PCIe.
    im.intra_latency_of_node.push_back(grp.intra_kind == LinkKind::Pcie ? 2e-6 : 1e-6);

    if (grp.nic_count < 1 && num_nodes > 1)
      throw std::invalid_argument("topology: node n" + std::to_string(n) + " has no NIC but the cluster has several nodes");
    const Vertex fabric = add_vertex();
    for (int l = 0; l < grp.nic_count; ++l) nic_vertices[n].push_back(add_vertex());

    // GPU<->fabric first for every GPU: of the two-hop paths between same-node GPUs (through the fabric or a
    // shared NIC), the fabric's is the first a breadth-first search in insertion order finds, the route's.
    const double intra_cap = grp.intra_bw * eff;  // nominal per-GPU bandwidth x achieved fraction
    for (int l = 0; l < node.gpus; ++l) {
      const GpuId gpu = node.first_gpu + l;
      im.node_of_gpu[gpu] = n;
      const std::string gl = nn + ":" + std::to_string(l);
      im.gpu_links[gpu].to_fabric = add_link(gpu, fabric, intra_cap, intra_cls, gl + ">" + nn + ".fabric");
      im.gpu_links[gpu].from_fabric = add_link(fabric, gpu, intra_cap, intra_cls, nn + ".fabric>" + gl);
    }
    const double nic_cap = grp.nic_bw * eff;  // the NIC's port, shared by every GPU attached to it
    for (int l = 0; l < node.gpus && grp.nic_count > 0; ++l) {
      const GpuId gpu = node.first_gpu + l;
      const int nic = nic_of(n, l);
      const std::string gl = nn + ":" + std::to_string(l);
      const std::string nl = nn + ".nic" + std::to_string(nic);
      im.gpu_links[gpu].to_nic = add_link(gpu, nic_vertices[n][nic], nic_cap, LinkClass::Nic, gl + ">" + nl);
      im.gpu_links[gpu].from_nic = add_link(nic_vertices[n][nic], gpu, nic_cap, LinkClass::Nic, nl + ">" + gl);
    }
    node_nic_capacity[n] = nic_cap * grp.nic_count;
  }

  std::vector<Vertex> leaves;
  for (int f = 0; f < num_leaves; ++f) leaves.push_back(add_vertex());
  for (int n = 0; n < num_nodes; ++n) {
    const NodeGroup& grp = cluster.groups[cluster.nodes[n].group];
    const double nic_cap = grp.nic_bw * cluster.catalog.at(grp.gpu).compute.link_eff;
    const std::string leaf = "leaf" + std::to_string(n / per_leaf);
    for (int k = 0; k < static_cast<int>(nic_vertices[n].size()); ++k) {
      const std::string nl = "n" + std::to_string(n) + ".nic" + std::to_string(k);
      const LinkId up = add_link(nic_vertices[n][k], leaves[n / per_leaf], nic_cap, LinkClass::Nic, nl + ">" + leaf);
      const LinkId down = add_link(leaves[n / per_leaf], nic_vertices[n][k], nic_cap, LinkClass::Nic, leaf + ">" + nl);
      for (int l = 0; l < cluster.nodes[n].gpus; ++l)
        if (nic_of(n, l) == k) {
          im.gpu_links[cluster.nodes[n].first_gpu + l].nic_to_leaf = up;
          im.gpu_links[cluster.nodes[n].first_gpu + l].leaf_to_nic = down;
        }
    }
    for (int l = 0; l < cluster.nodes[n].gpus; ++l) im.gpu_links[cluster.nodes[n].first_gpu + l].leaf = n / per_leaf;
  }
  if (num_leaves > 1) {
    const Vertex spine = add_vertex();
    for (int f = 0; f < num_leaves; ++f) {
      // Uplink = the leaf's total NIC capacity / oversubscription (downlink:uplink ratio of the leaf).
      double down = 0;
      for (int n = f * per_leaf; n < std::min(num_nodes, (f + 1) * per_leaf); ++n) down += node_nic_capacity[n];
      const double up = down / net.oversubscription;
      const std::string leaf = "leaf" + std::to_string(f);
      im.leaf_to_spine.push_back(add_link(leaves[f], spine, up, LinkClass::Spine, leaf + ">spine"));
      im.spine_to_leaf.push_back(add_link(spine, leaves[f], up, LinkClass::Spine, "spine>" + leaf));
    }
  }
}

Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

const std::vector<LinkId>& Topology::route(GpuId src, GpuId dst) const {
  if (src < 0 || src >= num_gpus_ || dst < 0 || dst >= num_gpus_)
    throw std::out_of_range("route " + std::to_string(src) + "->" + std::to_string(dst) + " outside " +
                            std::to_string(num_gpus_) + " GPUs");
  static const std::vector<LinkId> kNone;
  if (src == dst) return kNone;
  const Impl& im = *impl_;
  const std::uint64_t key = static_cast<std::uint64_t>(src) << 32 | static_cast<std::uint32_t>(dst);
  const std::lock_guard<std::mutex> lock(im.mutex);
  auto it = im.cache.find(key);
  if (it == im.cache.end()) it = im.cache.emplace(key, im.assemble(src, dst)).first;
  return it->second;
}

double Topology::latency_s(GpuId src, GpuId dst) const {
  if (src == dst) return 0.0;
  if (same_node(src, dst)) return impl_->intra_latency_of_node[impl_->node_of_gpu[src]];
  return impl_->inter_latency_s;
}

bool Topology::same_node(GpuId a, GpuId b) const { return impl_->node_of_gpu.at(a) == impl_->node_of_gpu.at(b); }

int Topology::num_vertices() const { return static_cast<int>(boost::num_vertices(impl_->graph)); }

}  // namespace arachne
