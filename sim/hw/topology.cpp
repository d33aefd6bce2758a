// The cluster's topology as a Boost.Graph, and the route of every GPU pair in it.
//
// Vertices: every GPU (vertex id = GpuId), then per node its intra-node fabric (NVSwitch / PCIe switch)
// and the NICs its GPUs use, then one leaf switch per `nodes_per_leaf` nodes (in listing order), then one
// aggregated spine (only with more than one leaf). Every edge is one directed Link; LinkId = the order
// links are added.
// The graph is a compressed sparse row graph, built once from the list of links: a cluster of 65,536 GPUs
// has ~400,000 links, and per-edge allocations (adjacency_list) cost more than the whole simulation.
// Routes: same node  gpu>fabric, fabric>gpu
//         other node gpu>nic, nic>leaf, [leaf>spine, spine>leaf when the leaves differ], leaf>nic, nic>gpu
// A GPU uses NIC local*nic_count/gpus_per_node of its node, so GPUs sharing a NIC share its nic>leaf and
// leaf>nic links.
// These are the graph's shortest paths, and the only ones but one case: a GPU reaches another GPU only from
// its node's fabric or from its own NIC, a NIC only from its node's GPUs or its leaf, a leaf only from its
// NICs or the spine, so between nodes the path above is the unique shortest one (4 links, 6 across leaves);
// inside a node two GPUs sharing a NIC also have gpu>nic>gpu, and the route takes the fabric (its links
// are added first, as a breadth-first search taking out-edges in that order finds it: searched_route(),
// which the tests compare). So a route is assembled from each GPU's four links, its NIC's two and its
// leaf's two, without a search.
#include "sim/hw/topology.h"

#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/iterator/counting_iterator.hpp>
#include <boost/iterator/transform_iterator.hpp>

#include <algorithm>
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
using Graph = boost::compressed_sparse_row_graph<boost::bidirectionalS, boost::no_property, EdgeProps>;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;
using Edge = boost::graph_traits<Graph>::edge_descriptor;

enum class VertexKind : std::uint8_t { Gpu, Fabric, Nic, Leaf, Spine };

// What a vertex is, for link names: kind, node (or leaf) index, and the GPU's or NIC's index in its node.
struct VertexInfo {
  VertexKind kind = VertexKind::Gpu;
  int owner = 0;
  int index = 0;
};

// Records, for every vertex a breadth-first search discovers, the edge it was discovered along.
class PredecessorRecorder : public boost::default_bfs_visitor {
 public:
  explicit PredecessorRecorder(std::vector<Edge>& pred, std::vector<char>& has) : pred_(pred), has_(has) {}
  void tree_edge(Edge e, const Graph& g) const {
    pred_[boost::target(e, g)] = e;
    has_[boost::target(e, g)] = 1;
  }

 private:
  std::vector<Edge>& pred_;
  std::vector<char>& has_;
};

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
  std::vector<VertexInfo> vertices;
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

  std::string vertex_name(int v) const {
    const VertexInfo& i = vertices[v];
    const std::string node = "n" + std::to_string(i.owner);
    switch (i.kind) {
      case VertexKind::Gpu: return node + ":" + std::to_string(i.index);
      case VertexKind::Fabric: return node + ".fabric";
      case VertexKind::Nic: return node + ".nic" + std::to_string(i.index);
      case VertexKind::Leaf: return "leaf" + std::to_string(i.owner);
      case VertexKind::Spine: return "spine";
    }
    return "?";
  }
};

Topology::Topology(const Cluster& cluster) : impl_(std::make_unique<Impl>()), num_gpus_(cluster.total_gpus()) {
  Impl& im = *impl_;
  const NetworkConfig& net = cluster.network;
  const int num_nodes = static_cast<int>(cluster.nodes.size());
  const int per_leaf = std::max(1, net.nodes_per_leaf);
  const int num_leaves = (num_nodes + per_leaf - 1) / per_leaf;
  im.inter_latency_s = net.latency_s;

  auto add_link = [&](int from, int to, double capacity, LinkClass cls) {
    const LinkId id = static_cast<LinkId>(links_.size());
    links_.push_back(Link{capacity, cls, from, to});
    return id;
  };
  auto add_vertex = [&](VertexKind kind, int owner, int index) {
    im.vertices.push_back(VertexInfo{kind, owner, index});
    return static_cast<int>(im.vertices.size() - 1);
  };
  auto nic_of = [&](int n, int local) {
    const Node& node = cluster.nodes[n];
    return static_cast<int>(static_cast<long long>(local) * cluster.groups[node.group].nic_count / node.gpus);
  };

  // Sized up front (at most: a lone node without NIC has fewer): the largest clusters have ~400,000 links.
  std::size_t num_links = num_leaves > 1 ? 2 * static_cast<std::size_t>(num_leaves) : 0;
  std::size_t num_vertices = static_cast<std::size_t>(num_gpus_) + num_leaves + (num_leaves > 1 ? 1 : 0);
  for (const Node& node : cluster.nodes) {
    const std::size_t used_nics = std::min(node.gpus, cluster.groups[node.group].nic_count);
    num_links += 4 * static_cast<std::size_t>(node.gpus) + 2 * used_nics;
    num_vertices += 1 + used_nics;
  }
  links_.reserve(num_links);
  im.vertices.reserve(num_vertices);
  std::vector<double> link_eff_of_group;  // the GPU type's achieved fraction of nominal link bandwidth
  for (const NodeGroup& grp : cluster.groups) link_eff_of_group.push_back(cluster.catalog.at(grp.gpu).compute.link_eff);

  // GPU vertex ids = GpuIds
  im.vertices.resize(num_gpus_);
  im.node_of_gpu.resize(num_gpus_);
  im.gpu_links.resize(num_gpus_);
  for (int n = 0; n < num_nodes; ++n)
    for (int l = 0; l < cluster.nodes[n].gpus; ++l) {
      im.vertices[cluster.nodes[n].first_gpu + l] = VertexInfo{VertexKind::Gpu, n, l};
      im.node_of_gpu[cluster.nodes[n].first_gpu + l] = n;
    }

  std::vector<int> nic_vertex_of_gpu(num_gpus_, -1);
  std::vector<double> node_nic_capacity(num_nodes, 0.0);
  for (int n = 0; n < num_nodes; ++n) {
    const Node& node = cluster.nodes[n];
    const NodeGroup& grp = cluster.groups[node.group];
    const double eff = link_eff_of_group[node.group];
    // Xgmi is NVLink-class traffic: a dedicated GPU-to-GPU fabric, not the PCIe tree.
    const LinkClass intra_cls = grp.intra_kind == LinkKind::Pcie ? LinkClass::Pcie : LinkClass::NvLink;
    // Per-hop intra-node latency, the order of NCCL's hardware latencies (src/graph/tuning.cc, hwLat:
    // NVLink ~0.5-1.9 us, PCIe ~1-2 us per hop): 1 us NVLink/xGMI, 2 us PCIe.
    im.intra_latency_of_node.push_back(grp.intra_kind == LinkKind::Pcie ? 2e-6 : 1e-6);

    if (grp.nic_count < 1 && num_nodes > 1)
      throw std::invalid_argument("topology: node n" + std::to_string(n) + " has no NIC but the cluster has several nodes");
    const int fabric = add_vertex(VertexKind::Fabric, n, 0);
    // GPU l uses NIC nic_of(n, l), which never decreases with l. A node with more NICs than GPUs leaves some
    // NICs idle: only the NICs a GPU uses are vertices (idle ones would only add links no route crosses);
    // every NIC still counts in the leaf's capacity below.
    for (int l = 0; l < node.gpus && grp.nic_count > 0; ++l) {
      const bool new_nic = l == 0 || nic_of(n, l) != nic_of(n, l - 1);
      nic_vertex_of_gpu[node.first_gpu + l] =
          new_nic ? add_vertex(VertexKind::Nic, n, nic_of(n, l)) : nic_vertex_of_gpu[node.first_gpu + l - 1];
    }

    // GPU<->fabric first for every GPU: of the two-hop paths between same-node GPUs (through the fabric or a
    // shared NIC), the fabric's is the first a breadth-first search in insertion order finds, the route's.
    const double intra_cap = grp.intra_bw * eff;  // nominal per-GPU bandwidth x achieved fraction
    for (int l = 0; l < node.gpus; ++l) {
      const GpuId gpu = node.first_gpu + l;
      im.gpu_links[gpu].to_fabric = add_link(gpu, fabric, intra_cap, intra_cls);
      im.gpu_links[gpu].from_fabric = add_link(fabric, gpu, intra_cap, intra_cls);
    }
    const double nic_cap = grp.nic_bw * eff;  // the NIC's port, shared by every GPU attached to it
    for (int l = 0; l < node.gpus && grp.nic_count > 0; ++l) {
      const GpuId gpu = node.first_gpu + l;
      const int nic = nic_vertex_of_gpu[gpu];
      im.gpu_links[gpu].to_nic = add_link(gpu, nic, nic_cap, LinkClass::Nic);
      im.gpu_links[gpu].from_nic = add_link(nic, gpu, nic_cap, LinkClass::Nic);
    }
    node_nic_capacity[n] = nic_cap * grp.nic_count;
  }

  const int first_leaf = static_cast<int>(im.vertices.size());
  for (int f = 0; f < num_leaves; ++f) add_vertex(VertexKind::Leaf, f, 0);
  for (int n = 0; n < num_nodes; ++n) {
    const Node& node = cluster.nodes[n];
    const NodeGroup& grp = cluster.groups[node.group];
    const double nic_cap = grp.nic_bw * link_eff_of_group[node.group];
    const int leaf = first_leaf + n / per_leaf;
    for (int l = 0; l < node.gpus && grp.nic_count > 0; ++l) {
      Impl::GpuLinks& gl = im.gpu_links[node.first_gpu + l];
      if (l > 0 && nic_vertex_of_gpu[node.first_gpu + l] == nic_vertex_of_gpu[node.first_gpu + l - 1]) {
        gl.nic_to_leaf = im.gpu_links[node.first_gpu + l - 1].nic_to_leaf;
        gl.leaf_to_nic = im.gpu_links[node.first_gpu + l - 1].leaf_to_nic;
        continue;
      }
      const int nic = nic_vertex_of_gpu[node.first_gpu + l];
      gl.nic_to_leaf = add_link(nic, leaf, nic_cap, LinkClass::Nic);
      gl.leaf_to_nic = add_link(leaf, nic, nic_cap, LinkClass::Nic);
    }
    for (int l = 0; l < node.gpus; ++l) im.gpu_links[node.first_gpu + l].leaf = n / per_leaf;
  }
  if (num_leaves > 1) {
    const int spine = add_vertex(VertexKind::Spine, 0, 0);
    for (int f = 0; f < num_leaves; ++f) {
      // Uplink = the leaf's total NIC capacity / oversubscription (downlink:uplink ratio of the leaf).
      double down = 0;
      for (int n = f * per_leaf; n < std::min(num_nodes, (f + 1) * per_leaf); ++n) down += node_nic_capacity[n];
      const double up = down / net.oversubscription;
      im.leaf_to_spine.push_back(add_link(first_leaf + f, spine, up, LinkClass::Spine));
      im.spine_to_leaf.push_back(add_link(spine, first_leaf + f, up, LinkClass::Spine));
    }
  }
  for (GpuId g = 0; g < num_gpus_; ++g) place_.push_back({im.node_of_gpu[g], im.gpu_links[g].leaf});
  build_graph();
}

void Topology::build_graph() {
  // Building from unsorted edges keeps each vertex's out-edges in the order the links were added.
  auto ends = [](const Link& l) { return std::make_pair(l.from, l.to); };
  auto props = [](LinkId l) { return EdgeProps{l}; };
  impl_->graph = Graph(boost::edges_are_unsorted_multi_pass, boost::make_transform_iterator(links_.begin(), ends),
                       boost::make_transform_iterator(links_.end(), ends),
                       boost::make_transform_iterator(boost::counting_iterator<LinkId>(0), props),
                       impl_->vertices.size());
}

Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

std::string Topology::link_name(LinkId l) const {
  const Link& link = links_.at(static_cast<std::size_t>(l));
  return impl_->vertex_name(link.from) + ">" + impl_->vertex_name(link.to);
}

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

std::vector<LinkId> Topology::searched_route(GpuId src, GpuId dst) const {
  const Graph& g = impl_->graph;
  const std::size_t n = boost::num_vertices(g);
  std::vector<Edge> pred(n);
  std::vector<char> has(n, 0);
  boost::breadth_first_search(g, boost::vertex(src, g), boost::visitor(PredecessorRecorder(pred, has)));
  std::vector<LinkId> path;
  if (src == dst || !has[dst]) return path;
  for (Vertex v = dst; v != static_cast<Vertex>(src); v = boost::source(pred[v], g)) path.push_back(g[pred[v]].link);
  std::reverse(path.begin(), path.end());
  return path;
}

double Topology::latency_s(GpuId src, GpuId dst) const {
  if (src == dst) return 0.0;
  if (same_node(src, dst)) return impl_->intra_latency_of_node[impl_->node_of_gpu[src]];
  return impl_->inter_latency_s;
}

bool Topology::same_node(GpuId a, GpuId b) const { return impl_->node_of_gpu.at(a) == impl_->node_of_gpu.at(b); }

int Topology::num_vertices() const { return static_cast<int>(boost::num_vertices(impl_->graph)); }

}  // namespace arachne
