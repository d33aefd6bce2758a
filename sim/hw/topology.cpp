// The cluster's topology as a Boost.Graph and routes as BFS shortest paths in it (one search per source,
// run only as far as the destinations asked for need).
//
// Vertices: every GPU (vertex id = GpuId), then per node its intra-node fabric (NVSwitch / PCIe switch)
// and its NICs, then one leaf switch per `nodes_per_leaf` nodes (in listing order), then one aggregated
// spine (only with more than one leaf). Every edge is one directed Link; LinkId = edge insertion order.
// Routes: same node  gpu>fabric, fabric>gpu
//         other node gpu>nic, nic>leaf, [leaf>spine, spine>leaf when the leaves differ], leaf>nic, nic>gpu
// A GPU uses NIC local*nic_count/gpus_per_node of its node, so GPUs sharing a NIC share its nic>leaf and
// leaf>nic links.
#include "sim/hw/topology.h"

#include <boost/graph/adjacency_list.hpp>

#include <mutex>
#include <stdexcept>
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
  struct SourceRoutes {
    std::vector<LinkId> pred;                 // per vertex: link that reached it in the BFS tree (-1: none)
    std::vector<std::vector<LinkId>> routes;  // per destination GPU, filled on first request
    std::vector<char> done;
    // The search, run only as far as the destinations asked for so far need: its FIFO queue, the next
    // vertex to expand, and the vertices reached.
    std::vector<int> queue;
    std::size_t head = 0;
    std::vector<char> seen;
  };

  Graph graph;
  std::vector<Vertex> link_source;  // per link: its tail vertex
  std::vector<int> node_of_gpu;
  std::vector<double> intra_latency_of_node;
  double inter_latency_s = 0;
  mutable std::mutex mutex;
  mutable std::vector<std::unique_ptr<SourceRoutes>> cache;  // per source GPU, built lazily
  // The graph's out-edges as flat arrays (vertex v's are [out_begin[v], out_begin[v + 1]), in insertion
  // order, as Boost's vecS lists them), built once for the searches.
  std::vector<int> out_begin, out_target;
  std::vector<LinkId> out_link;

  void index_out_edges() {
    const int nv = static_cast<int>(boost::num_vertices(graph));
    out_begin.assign(nv + 1, 0);
    out_target.clear();
    out_link.clear();
    for (int v = 0; v < nv; ++v) {
      for (auto [e, end] = boost::out_edges(static_cast<Vertex>(v), graph); e != end; ++e) {
        out_target.push_back(static_cast<int>(boost::target(*e, graph)));
        out_link.push_back(graph[*e].link);
      }
      out_begin[v + 1] = static_cast<int>(out_target.size());
    }
  }

  // Breadth-first search from the source of `sr` recording, for every vertex reached, the link by which it
  // was first reached: the order of Boost's breadth_first_search (FIFO queue, out-edges in insertion
  // order), so the same tree. It stops once `target` is reached and resumes from there on a later call:
  // the tree does not depend on where it paused.
  void breadth_first_until(SourceRoutes& sr, int target) const {
    for (; !sr.seen[target] && sr.head < sr.queue.size(); ++sr.head) {
      const int u = sr.queue[sr.head];
      for (int i = out_begin[u]; i < out_begin[u + 1]; ++i) {
        const int v = out_target[i];
        if (sr.seen[v]) continue;
        sr.seen[v] = 1;
        sr.pred[v] = out_link[i];
        sr.queue.push_back(v);
      }
    }
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
    im.link_source.push_back(from);
  };
  auto add_vertex = [&]() { return boost::add_vertex(g); };

  for (int i = 0; i < num_gpus_; ++i) add_vertex();  // GPU vertex ids = GpuIds
  im.node_of_gpu.resize(num_gpus_);

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

    // GPU<->fabric first for every GPU, so BFS reaches same-node GPUs through the fabric, never through a
    // shared NIC (both are two hops).
    const double intra_cap = grp.intra_bw * eff;  // nominal per-GPU bandwidth x achieved fraction
    for (int l = 0; l < node.gpus; ++l) {
      const GpuId gpu = node.first_gpu + l;
      im.node_of_gpu[gpu] = n;
      const std::string gl = nn + ":" + std::to_string(l);
      add_link(gpu, fabric, intra_cap, intra_cls, gl + ">" + nn + ".fabric");
      add_link(fabric, gpu, intra_cap, intra_cls, nn + ".fabric>" + gl);
    }
    const double nic_cap = grp.nic_bw * eff;  // the NIC's port, shared by every GPU attached to it
    for (int l = 0; l < node.gpus && grp.nic_count > 0; ++l) {
      const GpuId gpu = node.first_gpu + l;
      const int nic = static_cast<int>(static_cast<long long>(l) * grp.nic_count / node.gpus);
      const std::string gl = nn + ":" + std::to_string(l);
      const std::string nl = nn + ".nic" + std::to_string(nic);
      add_link(gpu, nic_vertices[n][nic], nic_cap, LinkClass::Nic, gl + ">" + nl);
      add_link(nic_vertices[n][nic], gpu, nic_cap, LinkClass::Nic, nl + ">" + gl);
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
      add_link(nic_vertices[n][k], leaves[n / per_leaf], nic_cap, LinkClass::Nic, nl + ">" + leaf);
      add_link(leaves[n / per_leaf], nic_vertices[n][k], nic_cap, LinkClass::Nic, leaf + ">" + nl);
    }
  }
  if (num_leaves > 1) {
    const Vertex spine = add_vertex();
    for (int f = 0; f < num_leaves; ++f) {
      // Uplink = the leaf's total NIC capacity / oversubscription (downlink:uplink ratio of the leaf).
      double down = 0;
      for (int n = f * per_leaf; n < std::min(num_nodes, (f + 1) * per_leaf); ++n) down += node_nic_capacity[n];
      const double up = down / net.oversubscription;
      const std::string leaf = "leaf" + std::to_string(f);
      add_link(leaves[f], spine, up, LinkClass::Spine, leaf + ">spine");
      add_link(spine, leaves[f], up, LinkClass::Spine, "spine>" + leaf);
    }
  }
  im.cache.resize(num_gpus_);
  im.index_out_edges();
}

Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

const std::vector<LinkId>& Topology::route(GpuId src, GpuId dst) const {
  if (src < 0 || src >= num_gpus_ || dst < 0 || dst >= num_gpus_)
    throw std::out_of_range("route " + std::to_string(src) + "->" + std::to_string(dst) + " outside " +
                            std::to_string(num_gpus_) + " GPUs");
  const Impl& im = *impl_;
  const std::lock_guard<std::mutex> lock(im.mutex);
  std::unique_ptr<Impl::SourceRoutes>& slot = im.cache[src];
  if (!slot) {
    auto fresh = std::make_unique<Impl::SourceRoutes>();
    fresh->pred.assign(boost::num_vertices(im.graph), -1);
    fresh->routes.resize(num_gpus_);
    fresh->done.assign(num_gpus_, 0);
    fresh->seen.assign(fresh->pred.size(), 0);
    fresh->queue.push_back(src);
    fresh->seen[src] = 1;
    slot = std::move(fresh);
  }
  Impl::SourceRoutes& sr = *slot;
  if (!sr.done[dst]) {
    im.breadth_first_until(sr, dst);
    std::vector<LinkId> path;
    for (Vertex v = static_cast<Vertex>(dst); v != static_cast<Vertex>(src);) {
      const LinkId l = sr.pred[v];
      if (l < 0) throw std::logic_error("topology: GPU " + std::to_string(dst) + " unreachable from " + std::to_string(src));
      path.push_back(l);
      v = im.link_source[l];
    }
    sr.routes[dst].assign(path.rbegin(), path.rend());
    sr.done[dst] = 1;
  }
  return sr.routes[dst];
}

double Topology::latency_s(GpuId src, GpuId dst) const {
  if (src == dst) return 0.0;
  if (same_node(src, dst)) return impl_->intra_latency_of_node[impl_->node_of_gpu[src]];
  return impl_->inter_latency_s;
}

bool Topology::same_node(GpuId a, GpuId b) const { return impl_->node_of_gpu.at(a) == impl_->node_of_gpu.at(b); }

int Topology::num_vertices() const { return static_cast<int>(boost::num_vertices(impl_->graph)); }

}  // namespace arachne
