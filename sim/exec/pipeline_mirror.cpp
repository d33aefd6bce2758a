#include "sim/exec/pipeline_mirror.h"

#include <map>

namespace arachne {
namespace {

bool same_pass(const PassCost& a, const PassCost& b) {
  return a.compute_s == b.compute_s && a.tp_bytes == b.tp_bytes && a.tp_closed_form_s == b.tp_closed_form_s &&
         a.tp_collectives == b.tp_collectives;
}

// Same GPU types, costs and memory, worker for worker (the workers of a pipeline are listed rank-major).
bool same_workers(const Worker& a, const Worker& b) {
  if (a.tp != b.tp || a.share != b.share || a.chunks.size() != b.chunks.size() || a.optimizer_s != b.optimizer_s ||
      a.dp_degree != b.dp_degree || a.memory.total() != b.memory.total() || a.gpus.size() != b.gpus.size())
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

}  // namespace

std::vector<int> find_mirrored_workers(const Topology& topo, const Plan& plan, const StageWork& work,
                                       const GradSync& grads) {
  const int nw = static_cast<int>(work.workers.size());
  std::vector<int> mirror(nw);
  for (int w = 0; w < nw; ++w) mirror[w] = w;
  const int np = static_cast<int>(plan.pipelines.size());
  if (np < 2) return mirror;

  // Workers of each pipeline in a canonical order (pipeline, rank, group).
  std::vector<std::vector<int>> of(np);
  for (int w = 0; w < nw; ++w) {
    if (!work.workers[w].tp_closed_form) return mirror;  // cross-node TP collectives are not mirrored
    for (const ChunkCost& c : work.workers[w].chunks)
      if (!c.ep_peers.empty()) return mirror;  // expert all-to-alls couple pipelines
    of[work.workers[w].pipeline].push_back(w);
  }

  // (3) Which pipeline's sends use each link; a link shared by two pipelines, or touched by a DP collective,
  // disqualifies the shortcut.
  std::vector<int> owner(topo.links().size(), -1);
  for (int p = 0; p < np; ++p)
    for (int w : of[p])
      for (const ChunkCost& c : work.workers[w].chunks)
        for (const auto& dir : c.sends)
          for (const StageLink& l : dir)
            for (const Hop& h : l.hops) {
              if (owner[h.link] >= 0 && owner[h.link] != p) return mirror;
              owner[h.link] = p;
            }
  {
    // A pipeline's tied-embedding all-reduce runs after its last transfer: its links count as the pipeline's
    // own, like its sends.
    bool shared = false;
    grads.for_each_tied_embedding_collective([&](int p, const std::vector<GpuId>& members) {
      Engine tied_engine;  // a fresh census per collective: links_used accumulates
      FlowNetwork tied(tied_engine, topo.links());
      CollectiveContext tctx{tied_engine, tied, topo};
      allreduce(tctx, members, 1.0, [] {});
      tied_engine.run();
      const auto& used = tied.links_used();
      for (size_t l = 0; l < used.size(); ++l) {
        if (!used[l]) continue;
        if (owner[l] >= 0 && owner[l] != p) shared = true;
        owner[l] = p;
      }
      return !shared;
    });
    if (shared) return mirror;
  }
  {
    // Census of the links the gradient collectives touch, one collective at a time so that the first
    // collision ends it (the common Megatron layouts collide at once: rings and sends share NICs).
    Engine census_engine;
    FlowNetwork census(census_engine, topo.links());
    CollectiveContext ctx{census_engine, census, topo};
    std::vector<LinkId> owned;
    for (size_t l = 0; l < owner.size(); ++l)
      if (owner[l] >= 0) owned.push_back(static_cast<LinkId>(l));
    bool collide = false;
    grads.for_each_collective([&](CollectiveKind kind, const std::vector<GpuId>& members) {
      if (kind == CollectiveKind::AllReduce) allreduce(ctx, members, 1.0, [] {});
      else ring_collective(ctx, kind, {members}, 1.0, [] {});
      census_engine.run();
      const auto& used = census.links_used();
      for (LinkId l : owned) collide = collide || used[l];
      return !collide;
    });
    if (collide) return mirror;
  }

  // (1) + (2): each pipeline mirrors the first earlier pipeline it is isomorphic to.
  std::vector<int> rep_of(np, -1);
  for (int q = 0; q < np; ++q) {
    for (int p = 0; p < q && rep_of[q] < 0; ++p) {
      if (rep_of[p] >= 0 || of[p].size() != of[q].size()) continue;
      const Pipeline &a = plan.pipelines[p], &b = plan.pipelines[q];
      if (a.micro_batch != b.micro_batch || a.micro_batches != b.micro_batches) continue;
      bool ok = true;
      std::map<LinkId, LinkId> link_map, inverse;
      for (size_t i = 0; ok && i < of[p].size(); ++i) {
        const Worker &x = work.workers[of[p][i]], &y = work.workers[of[q][i]];
        ok = x.rank == y.rank && x.group == y.group && same_workers(x, y);
        for (size_t c = 0; ok && c < x.chunks.size(); ++c)
          for (int d = 0; ok && d < 2; ++d)
            for (size_t s = 0; ok && s < x.chunks[c].sends[d].size(); ++s) {
              const StageLink &lx = x.chunks[c].sends[d][s], &ly = y.chunks[c].sends[d][s];
              ok = lx.bytes_per_member == ly.bytes_per_member && lx.latency_s == ly.latency_s &&
                   lx.members.size() == ly.members.size() && lx.peer_chunk == ly.peer_chunk;
              for (size_t m = 0; ok && m < lx.members.size(); ++m) {
                const auto& rx = topo.route(lx.members[m].first, lx.members[m].second);
                const auto& ry = topo.route(ly.members[m].first, ly.members[m].second);
                ok = rx.size() == ry.size();
                for (size_t h = 0; ok && h < rx.size(); ++h) {
                  const Link &kx = topo.links()[rx[h]], &ky = topo.links()[ry[h]];
                  auto [it, fresh] = link_map.emplace(rx[h], ry[h]);
                  auto [jt, fresh2] = inverse.emplace(ry[h], rx[h]);
                  ok = it->second == ry[h] && jt->second == rx[h] && kx.capacity == ky.capacity && kx.cls == ky.cls;
                }
              }
            }
      }
      if (ok) rep_of[q] = p;
    }
  }
  for (int q = 0; q < np; ++q)
    if (rep_of[q] >= 0)
      for (size_t i = 0; i < of[q].size(); ++i) mirror[of[q][i]] = of[rep_of[q]][i];
  return mirror;
}

}  // namespace arachne
