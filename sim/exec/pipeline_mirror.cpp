#include "sim/exec/pipeline_mirror.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

namespace arachne {
namespace {

bool same_pass(const PassCost& a, const PassCost& b) {
  return a.compute_s == b.compute_s && a.tp_bytes == b.tp_bytes && a.tp_closed_form_s == b.tp_closed_form_s &&
         a.tp_collectives == b.tp_collectives;
}

// Same GPU types, costs and memory, worker for worker (the workers of a pipeline are listed rank-major).
bool same_workers(const Worker& a, const Worker& b) {
  if (a.tp != b.tp || a.share != b.share || a.chunks.size() != b.chunks.size() || a.optimizer_s != b.optimizer_s ||
      a.dp_degree != b.dp_degree || a.memory.total() != b.memory.total() || a.gpus.size() != b.gpus.size() ||
      a.collective_overhead_s != b.collective_overhead_s)
    return false;
  for (size_t c = 0; c < a.chunks.size(); ++c) {
    const ChunkCost &x = a.chunks[c], &y = b.chunks[c];
    if (x.layer_begin != y.layer_begin || x.layer_end != y.layer_end || !same_pass(x.forward, y.forward) ||
        !same_pass(x.backward, y.backward) || x.receives != y.receives || x.layer_grad_ready_s != y.layer_grad_ready_s ||
        x.head_grad_ready_s != y.head_grad_ready_s || x.embedding_grad_ready_s != y.embedding_grad_ready_s)
      return false;
    for (int d = 0; d < 2; ++d)
      if (x.sends[d].size() != y.sends[d].size()) return false;
  }
  return true;
}

// A one-to-one map between links, built route by route; refuses links of different capacity or class.
class LinkMap {
 public:
  explicit LinkMap(const Topology& topo)
      : links_(topo.links()), to_(links_.size(), -1), from_(links_.size(), -1) {}
  bool map_route(const std::vector<LinkId>& a, const std::vector<LinkId>& b) {
    if (a.size() != b.size()) return false;
    for (size_t h = 0; h < a.size(); ++h)
      if (!map(a[h], b[h])) return false;
    return true;
  }

 private:
  bool map(LinkId a, LinkId b) {
    if (links_[a].capacity != links_[b].capacity || links_[a].cls != links_[b].cls) return false;
    if (to_[a] < 0 && from_[b] < 0) {
      to_[a] = b;
      from_[b] = a;
      return true;
    }
    return to_[a] == b && from_[b] == a;
  }
  const std::vector<Link>& links_;
  std::vector<LinkId> to_, from_;

 public:
  // The orbits of the mapped links, as representative (smallest id) and size per link; unmapped links are
  // their own orbit. False when the map is not a permutation of the links it touches.
  bool orbits(std::vector<LinkId>& rep, std::vector<int>& size) const {
    const int n = static_cast<int>(to_.size());
    rep.assign(n, -1);
    size.assign(n, 1);
    for (int l = 0; l < n; ++l) {
      if (rep[l] >= 0) continue;
      std::vector<LinkId> orbit{l};
      if (to_[l] >= 0)
        for (LinkId k = to_[l]; k != l; k = to_[k]) {
          if (k < 0 || rep[k] >= 0) return false;
          orbit.push_back(k);
        }
      const LinkId r = *std::min_element(orbit.begin(), orbit.end());
      for (LinkId k : orbit) rep[k] = r, size[k] = static_cast<int>(orbit.size());
    }
    return true;
  }
};

// Corresponding sends (same chunk, direction and index) of workers `a` -> `b`: same bytes, latency and peer
// chunk, member routes mapped link for link.
bool sends_correspond(const Topology& topo, const Worker& a, const Worker& b, LinkMap& links,
                      const std::vector<GpuId>* gpu_map) {
  for (size_t c = 0; c < a.chunks.size(); ++c)
    for (int d = 0; d < 2; ++d)
      for (size_t s = 0; s < a.chunks[c].sends[d].size(); ++s) {
        const StageLink &la = a.chunks[c].sends[d][s], &lb = b.chunks[c].sends[d][s];
        if (la.bytes_per_member != lb.bytes_per_member || la.latency_s != lb.latency_s ||
            la.members.size() != lb.members.size() || la.peer_chunk != lb.peer_chunk)
          return false;
        for (size_t m = 0; m < la.members.size(); ++m) {
          const auto [sa, da] = la.members[m];
          const auto [sb, db] = lb.members[m];
          if (gpu_map && ((*gpu_map)[sa] != sb || (*gpu_map)[da] != db)) return false;
          if (!links.map_route(topo.route(sa, da), topo.route(sb, db))) return false;
        }
      }
  return true;
}

// Workers of each pipeline in a canonical order (rank, group); empty when a precondition fails (a TP group
// across nodes, or expert all-to-alls, couple pipelines outside this analysis).
std::vector<std::vector<int>> workers_by_pipeline(const Plan& plan, const StageWork& work) {
  std::vector<std::vector<int>> of(plan.pipelines.size());
  for (int w = 0; w < static_cast<int>(work.workers.size()); ++w) {
    if (!work.workers[w].tp_closed_form) return {};
    for (const ChunkCost& c : work.workers[w].chunks)
      if (!c.ep_peers.empty()) return {};
    of[work.workers[w].pipeline].push_back(w);
  }
  return of;
}

// For each pipeline, the first earlier pipeline with the same workers and isomorphic sends (-1: none).
std::vector<int> identical_pipelines(const Topology& topo, const Plan& plan, const StageWork& work,
                                     const std::vector<std::vector<int>>& of) {
  const int np = static_cast<int>(of.size());
  std::vector<int> rep_of(np, -1);
  for (int q = 0; q < np; ++q)
    for (int p = 0; p < q && rep_of[q] < 0; ++p) {
      if (rep_of[p] >= 0 || of[p].size() != of[q].size()) continue;
      const Pipeline &a = plan.pipelines[p], &b = plan.pipelines[q];
      if (a.micro_batch != b.micro_batch || a.micro_batches != b.micro_batches) continue;
      bool ok = true;
      LinkMap links(topo);
      for (size_t i = 0; ok && i < of[p].size(); ++i) {
        const Worker &x = work.workers[of[p][i]], &y = work.workers[of[q][i]];
        ok = x.rank == y.rank && x.group == y.group && same_workers(x, y) &&
             sends_correspond(topo, x, y, links, nullptr);
      }
      if (ok) rep_of[q] = p;
    }
  return rep_of;
}

// (a) No link carrying a pipeline's sends is used by another pipeline's sends or by a gradient collective.
bool pipelines_isolated(const Topology& topo, const StageWork& work, const GradSync& grads,
                        const std::vector<std::vector<int>>& of) {
  std::vector<int> owner(topo.links().size(), -1);
  for (size_t p = 0; p < of.size(); ++p)
    for (int w : of[p])
      for (const ChunkCost& c : work.workers[w].chunks)
        for (const auto& dir : c.sends)
          for (const StageLink& l : dir)
            for (const Hop& h : l.hops) {
              if (owner[h.link] >= 0 && owner[h.link] != static_cast<int>(p)) return false;
              owner[h.link] = static_cast<int>(p);
            }
  // A pipeline's tied-embedding all-reduce runs after its own last transfer: its links count as its own.
  bool shared = false;
  grads.for_each_tied_embedding_collective([&](int p, const std::vector<GpuId>& members) {
    for (const CollectiveTransfer& t : collective_transfers(topo, CollectiveKind::AllReduce, members, 1.0))
      for (LinkId l : topo.route(t.src, t.dst)) {
        shared = shared || (owner[l] >= 0 && owner[l] != p);
        owner[l] = p;
      }
    return !shared;
  });
  if (shared) return false;
  bool collide = false;
  grads.for_each_collective([&](CollectiveKind kind, const std::vector<GpuId>& members) {
    for (const CollectiveTransfer& t : collective_transfers(topo, kind, members, 1.0))
      for (LinkId l : topo.route(t.src, t.dst)) collide = collide || owner[l] >= 0;
    return !collide;
  });
  return !collide;
}

// The rotation of each class of identical pipelines (each to the next of its class in index order, the
// last to the first), as a map of workers and of GPUs; everything else fixed.
void rotate_classes(const StageWork& work, const std::vector<std::vector<int>>& of, const std::vector<int>& rep_of,
                    std::vector<int>& next_worker, std::vector<GpuId>& gpu_map) {
  const int np = static_cast<int>(of.size());
  std::iota(next_worker.begin(), next_worker.end(), 0);
  std::iota(gpu_map.begin(), gpu_map.end(), 0);
  for (int p = 0; p < np; ++p) {
    if (rep_of[p] >= 0) continue;
    std::vector<int> cls{p};
    for (int q = p + 1; q < np; ++q)
      if (rep_of[q] == p) cls.push_back(q);
    for (size_t i = 0; i < cls.size(); ++i) {
      const std::vector<int>&a = of[cls[i]], &b = of[cls[(i + 1) % cls.size()]];
      for (size_t j = 0; j < a.size(); ++j) {
        next_worker[a[j]] = b[j];
        for (size_t g = 0; g < work.workers[a[j]].gpus.size(); ++g)
          gpu_map[work.workers[a[j]].gpus[g]] = work.workers[b[j]].gpus[g];
      }
    }
  }
}

// The transfers of the collective over `members`, keyed by (src, dst, phase), map onto those of the
// collective over `image` (the members' images): same bytes and latency, routes mapped link for link.
bool collective_maps_onto(const Topology& topo, CollectiveKind kind, const std::vector<GpuId>& members,
                          const std::vector<GpuId>& image, const std::vector<GpuId>& gpu_map, LinkMap& links) {
  using Key = std::tuple<GpuId, GpuId, int>;
  auto keyed = [&](const std::vector<GpuId>& m) {
    std::map<Key, std::pair<double, TimeNs>> out;
    for (const CollectiveTransfer& t : collective_transfers(topo, kind, m, 1.0))
      out[{t.src, t.dst, t.phase}] = {t.bytes, t.latency};
    return out;
  };
  const auto from = keyed(members);
  const auto onto = &image == &members ? from : keyed(image);
  if (from.size() != onto.size()) return false;
  for (const auto& [key, value] : from) {
    const auto [src, dst, phase] = key;
    const auto it = onto.find({gpu_map[src], gpu_map[dst], phase});
    if (it == onto.end() || it->second != value ||
        !links.map_route(topo.route(src, dst), topo.route(gpu_map[src], gpu_map[dst])))
      return false;
  }
  return true;
}

// (b) The rotation maps every transfer onto one of the same kind.
bool rotation_is_symmetry(const Topology& topo, const StageWork& work, const GradSync& grads,
                          const std::vector<int>& next_worker, const std::vector<GpuId>& gpu_map, LinkMap& links) {
  for (size_t w = 0; w < work.workers.size(); ++w) {
    const Worker &a = work.workers[w], &b = work.workers[next_worker[w]];
    for (size_t c = 0; c < a.chunks.size(); ++c)
      for (int d = 0; d < 2; ++d)
        for (size_t s = 0; s < a.chunks[c].sends[d].size(); ++s)
          if (next_worker[a.chunks[c].sends[d][s].peer_worker] != b.chunks[c].sends[d][s].peer_worker) return false;
    if (!sends_correspond(topo, a, b, links, &gpu_map)) return false;
  }
  // Every distinct gradient collective maps onto itself.
  std::set<std::pair<CollectiveKind, std::vector<GpuId>>> seen;
  bool ok = true;
  grads.for_each_collective([&](CollectiveKind kind, const std::vector<GpuId>& members) {
    if (!seen.emplace(kind, members).second) return true;
    return ok = collective_maps_onto(topo, kind, members, members, gpu_map, links);
  });
  if (!ok) return false;
  // Each pipeline's tied-embedding all-reduce maps onto one, slice for slice (onto the next pipeline's of its
  // class): GradSync runs each orbit of them as one collective.
  std::map<std::vector<GpuId>, std::pair<int, int>> tied;  // members -> (pipeline, slice)
  int slice = 0, last = -1;
  grads.for_each_tied_embedding_collective([&](int p, const std::vector<GpuId>& members) {
    slice = p == last ? slice + 1 : 0;
    last = p;
    tied[members] = {p, slice};
    return true;
  });
  for (const auto& [members, where] : tied) {
    std::vector<GpuId> image = members;
    for (GpuId& g : image) g = gpu_map[g];
    std::sort(image.begin(), image.end());
    const auto it = tied.find(image);
    if (it == tied.end() || it->second.second != where.second ||
        !collective_maps_onto(topo, CollectiveKind::AllReduce, members, image, gpu_map, links))
      return false;
  }
  return true;
}

}  // namespace

PipelineMirroring find_mirrored_workers(const Topology& topo, const Plan& plan, const StageWork& work,
                                        const GradSync& grads) {
  PipelineMirroring m;
  m.mirror_of.resize(work.workers.size());
  std::iota(m.mirror_of.begin(), m.mirror_of.end(), 0);
  if (plan.pipelines.size() < 2) return m;
  const std::vector<std::vector<int>> of = workers_by_pipeline(plan, work);
  if (of.empty()) return m;
  const std::vector<int> rep_of = identical_pipelines(topo, plan, work, of);
  if (std::all_of(rep_of.begin(), rep_of.end(), [](int r) { return r < 0; })) return m;
  std::vector<int> next_worker(work.workers.size());
  std::vector<GpuId> rotation(topo.num_gpus());
  rotate_classes(work, of, rep_of, next_worker, rotation);
  LinkMap links(topo);
  NetworkSymmetry& sym = m.symmetry;
  if (rotation_is_symmetry(topo, work, grads, next_worker, rotation, links) &&
      links.orbits(sym.link_rep, sym.link_orbit_size))
    sym.gpu_image = std::move(rotation);
  else if (!pipelines_isolated(topo, work, grads, of))
    return m;
  for (size_t q = 0; q < of.size(); ++q)
    if (rep_of[q] >= 0)
      for (size_t i = 0; i < of[q].size(); ++i) m.mirror_of[of[q][i]] = of[rep_of[q]][i];
  return m;
}

void bundle_mirrored_sends(const Topology& topo, const PipelineMirroring& mirroring, StageWork& work) {
  const std::vector<int>& mirror_of = mirroring.mirror_of;
  for (size_t m = 0; m < mirror_of.size(); ++m) {
    if (mirror_of[m] == static_cast<int>(m)) continue;
    Worker& rep = work.workers[mirror_of[m]];
    const Worker& copy = work.workers[m];
    for (size_t c = 0; c < rep.chunks.size(); ++c)
      for (int d = 0; d < 2; ++d)
        for (size_t s = 0; s < rep.chunks[c].sends[d].size(); ++s) {
          StageLink& l = rep.chunks[c].sends[d][s];
          if (l.rate_bound == 0) {  // one copy's bound, before the first mirror joins
            l.rate_bound = std::numeric_limits<double>::infinity();
            for (const Hop& h : l.hops)
              l.rate_bound = std::min(l.rate_bound, topo.links()[h.link].capacity / static_cast<double>(h.mult));
          }
          std::vector<Hop> merged;
          std::vector<Hop> other = copy.chunks[c].sends[d][s].hops;
          std::merge(l.hops.begin(), l.hops.end(), other.begin(), other.end(), std::back_inserter(merged),
                     [](const Hop& a, const Hop& b) { return a.link < b.link; });
          l.hops.clear();
          for (const Hop& h : merged) {
            if (!l.hops.empty() && l.hops.back().link == h.link) l.hops.back().mult += h.mult;
            else l.hops.push_back(h);
          }
        }
  }
  if (mirroring.symmetry.gpu_image.empty()) return;
  for (Worker& w : work.workers)
    for (ChunkCost& c : w.chunks)
      for (auto& dir : c.sends)
        for (StageLink& l : dir) l.hops = mirroring.symmetry.quotient(l.hops);
}

}  // namespace arachne
