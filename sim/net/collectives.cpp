// Collectives as flows on the topology's links (see collectives.h for the model and its sources).
#include "sim/net/collectives.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>

namespace arachne {

namespace {

// Data each ring edge carries during the collective, as a fraction of the buffer S (Patarasuk & Yuan 2009,
// "Bandwidth optimal all-reduce algorithms", §3: ring all-reduce sends 2(n-1)/n*S per process;
// reduce-scatter and all-gather are each one half of it, (n-1)/n*S).
double edge_fraction(CollectiveKind kind, int n) {
  const double f = static_cast<double>(n - 1) / static_cast<double>(n);
  return kind == CollectiveKind::AllReduce ? 2.0 * f : f;
}

// Sequential ring steps, each paying one message latency: 2(n-1) for all-reduce (reduce-scatter then
// all-gather), n-1 otherwise (NCCL's ring algorithm, as in its tuning model src/graph/tuning.cc).
int ring_steps(CollectiveKind kind, int n) { return kind == CollectiveKind::AllReduce ? 2 * (n - 1) : n - 1; }

// Counts outstanding parts and runs `done` once all have finished.
struct Join {
  int left = 0;
  std::function<void()> done;
  void arrive() {
    if (--left == 0 && done) {
      auto d = std::move(done);
      d();
    }
  }
};

void finish_now(CollectiveContext& ctx, std::function<void()> done) {
  ctx.engine.schedule_after(0, [d = std::move(done)] {
    if (d) d();
  });
}

// Members grouped by node, nodes in order of first appearance, members in the given order.
std::vector<std::vector<GpuId>> by_node(const Topology& topo, const std::vector<GpuId>& members) {
  std::vector<std::vector<GpuId>> groups;
  for (const GpuId m : members) {
    auto it = std::find_if(groups.rbegin(), groups.rend(),
                           [&](const std::vector<GpuId>& g) { return topo.same_node(g.front(), m); });
    if (it == groups.rend()) {
      groups.push_back({m});
    } else {
      it->push_back(m);
    }
  }
  return groups;
}

// The flows of `kind` over each ring of `rings`: one per ring edge with the volume that edge carries, after
// the ring's per-step latencies (the ring advances at the pace of its slowest edge).
void add_ring_transfers(const Topology& topo, CollectiveKind kind, const std::vector<std::vector<GpuId>>& rings,
                        double bytes, int phase, std::vector<CollectiveTransfer>& out) {
  for (const auto& ring : rings) {
    const int n = static_cast<int>(ring.size());
    if (n < 2) continue;
    double hop_latency = 0;
    for (int i = 0; i < n; ++i) hop_latency = std::max(hop_latency, topo.latency_s(ring[i], ring[(i + 1) % n]));
    const TimeNs latency = seconds_to_ns(ring_steps(kind, n) * hop_latency);
    const double edge_bytes = edge_fraction(kind, n) * bytes;
    for (int i = 0; i < n; ++i) out.push_back({ring[i], ring[(i + 1) % n], phase, edge_bytes, latency});
  }
}

// How allreduce runs over `members`: flat ring when at most one member per node or all in one node;
// otherwise hierarchical (NCCL-style 2D ring; Megatron/ZeRO reduce-scatter + all-gather): reduce-scatter
// inside each node, all-reduce each shard across nodes among the members with the same local position,
// all-gather inside each node. With unequal member counts per node, the inter-node phase runs over the
// first g_min positions with shards of S/g_min (nodes with more members are modelled as if their extra
// shards were folded into those positions inside the node, at no extra cost).
struct AllreducePlan {
  bool flat = true;
  std::vector<std::vector<GpuId>> nodes, cross;  // hierarchical: per-node rings, cross-node rings
  int shards = 1;                                // the cross-node phase carries buffer / shards
};

AllreducePlan plan_allreduce(const Topology& topo, const std::vector<GpuId>& members) {
  AllreducePlan p;
  p.nodes = by_node(topo, members);
  p.flat = p.nodes.size() == 1 ||
           std::all_of(p.nodes.begin(), p.nodes.end(), [](const auto& g) { return g.size() == 1; });
  if (p.flat) return p;
  std::size_t g_min = p.nodes.front().size();
  for (const auto& g : p.nodes) g_min = std::min(g_min, g.size());
  p.cross.assign(g_min, {});
  for (std::size_t k = 0; k < g_min; ++k)
    for (const auto& g : p.nodes) p.cross[k].push_back(g[k]);
  p.shards = static_cast<int>(g_min);
  return p;
}

// The orbits of `transfers` under the GPU permutation `symmetry` (each a list of indices, in order of first
// appearance). The symmetry was checked on every collective (sim/exec/pipeline_mirror.cpp): an image that is
// not among the transfers is a logic error.
std::vector<std::vector<int>> transfer_orbits(const std::vector<CollectiveTransfer>& transfers,
                                              const std::vector<GpuId>& symmetry) {
  const int n = static_cast<int>(transfers.size());
  auto find = [&](GpuId src, GpuId dst) {
    for (int j = 0; j < n; ++j)
      if (transfers[j].src == src && transfers[j].dst == dst) return j;
    return -1;
  };
  std::vector<int> orbit_of(n, -1);
  std::vector<std::vector<int>> orbits;
  for (int i = 0; i < n; ++i) {
    if (orbit_of[i] >= 0) continue;
    std::vector<int> orbit{i};
    for (int j = find(symmetry[transfers[i].src], symmetry[transfers[i].dst]); j != i;
         j = find(symmetry[transfers[j].src], symmetry[transfers[j].dst])) {
      if (j < 0 || orbit_of[j] >= 0 || transfers[j].bytes != transfers[i].bytes ||
          transfers[j].latency != transfers[i].latency)
        throw std::logic_error("collective: the network symmetry does not map a transfer onto another");
      orbit.push_back(j);
    }
    for (int j : orbit) orbit_of[j] = static_cast<int>(orbits.size());
    orbits.push_back(std::move(orbit));
  }
  return orbits;
}

}  // namespace

void ring_collective(CollectiveContext& ctx, CollectiveKind kind, const std::vector<std::vector<GpuId>>& rings,
                     double bytes, std::function<void()> done) {
  std::vector<CollectiveTransfer> transfers;
  add_ring_transfers(ctx.topo, kind, rings, bytes, 0, transfers);
  if (transfers.empty()) {
    finish_now(ctx, std::move(done));
    return;
  }
  auto join = std::make_shared<Join>();
  join->done = std::move(done);
  if (!ctx.symmetry) {
    // Transfers of equal bytes and latency (a ring's edges; congruent rings') start as one checked bundle
    // (sim/net/flow_network.h): one flow while they keep one rate, separate flows as soon as one would not,
    // with the separate flows' rates and completion times bit for bit either way.
    join->left = static_cast<int>(transfers.size());
    std::vector<std::pair<GpuId, GpuId>> pairs;
    for (size_t i = 0, j = 0; i < transfers.size(); i = j) {
      pairs.clear();
      for (j = i; j < transfers.size() && transfers[j].bytes == transfers[i].bytes && transfers[j].latency == transfers[i].latency; ++j)
        pairs.push_back({transfers[j].src, transfers[j].dst});
      ctx.net.start_bundle(ctx.topo, pairs, transfers[i].bytes, transfers[i].latency, [join](int finished) {
        for (int k = 0; k < finished; ++k) join->arrive();
      });
    }
    return;
  }
  const std::vector<std::vector<int>> orbits = transfer_orbits(transfers, ctx.symmetry->gpu_image);
  join->left = static_cast<int>(orbits.size());
  for (const std::vector<int>& orbit : orbits) {
    const CollectiveTransfer& t = transfers[orbit.front()];
    std::vector<Hop> hops;
    double bound = std::numeric_limits<double>::infinity();
    for (LinkId l : ctx.topo.route(t.src, t.dst)) bound = std::min(bound, ctx.topo.links()[l].capacity);
    for (int i : orbit)
      for (LinkId l : ctx.topo.route(transfers[i].src, transfers[i].dst)) hops.push_back(Hop{l, 1});
    ctx.net.start(ctx.symmetry->quotient(hops), t.bytes, t.latency, [join] { join->arrive(); }, bound);
  }
}

void allreduce(CollectiveContext& ctx, const std::vector<GpuId>& members, double bytes,
               std::function<void()> done) {
  allreduce_each(ctx, {members}, bytes, std::move(done));
}

void allreduce_each(CollectiveContext& ctx, const std::vector<std::vector<GpuId>>& member_sets, double bytes,
                    std::function<void()> done) {
  std::vector<std::vector<GpuId>> sets;
  for (const std::vector<GpuId>& s : member_sets)
    if (s.size() >= 2) sets.push_back(s);
  if (sets.empty()) {
    finish_now(ctx, std::move(done));
    return;
  }
  AllreducePlan p = plan_allreduce(ctx.topo, sets.front());
  for (size_t i = 1; i < sets.size(); ++i) {
    AllreducePlan q = plan_allreduce(ctx.topo, sets[i]);
    if (q.flat != p.flat || q.shards != p.shards)
      throw std::logic_error("allreduce_each: member sets of different shapes");
    p.nodes.insert(p.nodes.end(), q.nodes.begin(), q.nodes.end());
    p.cross.insert(p.cross.end(), q.cross.begin(), q.cross.end());
  }
  if (p.flat) {
    ring_collective(ctx, CollectiveKind::AllReduce, sets, bytes, std::move(done));
    return;
  }
  const double shard = bytes / static_cast<double>(p.shards);
  CollectiveContext c = ctx;
  auto final_done = std::make_shared<std::function<void()>>(std::move(done));
  auto nodes = std::make_shared<std::vector<std::vector<GpuId>>>(std::move(p.nodes));
  ring_collective(ctx, CollectiveKind::ReduceScatter, *nodes, bytes,
                  [c, nodes, cross = std::move(p.cross), shard, bytes, final_done]() mutable {
                    ring_collective(c, CollectiveKind::AllReduce, cross, shard, [c, nodes, bytes, final_done]() mutable {
                      ring_collective(c, CollectiveKind::AllGather, *nodes, bytes, std::move(*final_done));
                    });
                  });
}

std::vector<CollectiveTransfer> collective_transfers(const Topology& topo, CollectiveKind kind,
                                                     const std::vector<GpuId>& members, double bytes) {
  std::vector<CollectiveTransfer> out;
  if (members.size() < 2) return out;
  if (kind != CollectiveKind::AllReduce) {
    add_ring_transfers(topo, kind, {members}, bytes, 0, out);
    return out;
  }
  const AllreducePlan p = plan_allreduce(topo, members);
  if (p.flat) {
    add_ring_transfers(topo, kind, {members}, bytes, 0, out);
    return out;
  }
  add_ring_transfers(topo, CollectiveKind::ReduceScatter, p.nodes, bytes, 0, out);
  add_ring_transfers(topo, CollectiveKind::AllReduce, p.cross, bytes / static_cast<double>(p.shards), 1, out);
  add_ring_transfers(topo, CollectiveKind::AllGather, p.nodes, bytes, 2, out);
  return out;
}

void send(CollectiveContext& ctx, GpuId src, GpuId dst, double bytes, std::function<void()> done) {
  const TimeNs latency = seconds_to_ns(ctx.topo.latency_s(src, dst));
  if (src == dst) {
    ctx.net.start({}, bytes, latency, std::move(done));  // nothing crosses a link
    return;
  }
  ctx.net.start_route(ctx.topo.route(src, dst), bytes, latency, std::move(done));
}

double intra_node_collective_time(CollectiveKind kind, int n, double bytes, double link_bw, double latency_s) {
  if (n < 2) return 0.0;
  // steps x per-step latency + per-GPU volume / per-GPU link bandwidth (Patarasuk & Yuan 2009, §3)
  return ring_steps(kind, n) * latency_s + edge_fraction(kind, n) * bytes / link_bw;
}

double nccl_intra_node_collective_time(CollectiveKind kind, int n, double bytes, double link_bw, bool nvlink) {
  if (n < 2) return 0.0;
  // NCCL tuning.cc (ring algorithm; latencies in us): baseLat {LL 3.6, LL128 10.0, Simple 8.4}; per-step
  // hwLat over NVLink {0.47, 1.9, 3.4}, over PCIe {1.0, 2.5, 5.7}; bandwidth of LL 1/4 of Simple's for
  // all-reduce (1/3 otherwise), LL128 0.92.
  struct Protocol {
    double base_us, nvlink_step_us, pcie_step_us, bw_fraction;
  };
  const double ll_bw = kind == CollectiveKind::AllReduce ? 1.0 / 4.0 : 1.0 / 3.0;
  const Protocol protocols[] = {{3.6, 0.47, 1.0, ll_bw}, {10.0, 1.9, 2.5, 0.92}, {8.4, 3.4, 5.7, 1.0}};
  const double volume = edge_fraction(kind, n) * bytes;  // per rank (Patarasuk & Yuan 2009)
  double best = 1e300;
  for (int p = 0; p < 3; ++p) {
    if (p == 1 && !nvlink) continue;  // LL128 only on NVLink
    const Protocol& pr = protocols[p];
    const double step_us = nvlink ? pr.nvlink_step_us : pr.pcie_step_us;
    best = std::min(best, (pr.base_us + ring_steps(kind, n) * step_us) * 1e-6 + volume / (link_bw * pr.bw_fraction));
  }
  return best;
}

}  // namespace arachne
