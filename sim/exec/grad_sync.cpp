#include "sim/exec/grad_sync.h"

#include "sim/model/moe_costs.h"

#include <algorithm>
#include <numeric>
#include <map>
#include <stdexcept>
#include <utility>

namespace arachne {
namespace {

// Megatron-LM DistributedDataParallel bucket size: max(40,000,000, 1,000,000 * dp) parameters.
double bucket_params(int dp) { return std::max(40e6, 1e6 * dp); }

// One bucket per pipeline whose first and last stage are different workers: the word embedding (V x h,
// sharded like the vocab-parallel embedding) over the first stage's groups and the last stage's groups.
// With one group per stage and equal TP this is Megatron's embedding group (rank k of the first stage
// with rank k of the last); split stages all-reduce over all their groups at once.
void add_tied_embedding_buckets(const ModelConfig& model, const std::vector<GradBucketWorker>& workers,
                                const std::vector<std::vector<std::vector<int>>>& worker_of,
                                const std::vector<int>& physical_depth, GradBuckets& out) {
  for (size_t p = 0; p < worker_of.size(); ++p) {
    const auto& stages = worker_of[p];
    const int depth = physical_depth[p];
    if (stages.size() < 2) continue;
    GradBucket bk;
    bk.tied_embedding = true;
    bk.embedding = true;
    bk.full_params = static_cast<double>(model.vocab) * static_cast<double>(model.hidden);
    for (const int vstage : {0, static_cast<int>(stages.size()) - 1})
      for (int w : stages[vstage]) bk.holders.push_back({w, vstage / depth});
    if (bk.holders.front().worker == bk.holders.back().worker) continue;  // one worker holds both ends
    for (const GradHolder& h : bk.holders) bk.lcm_tp = std::lcm(bk.lcm_tp, workers[h.worker].tp);
    bk.communicator = out.communicators++;
    out.buckets.push_back(std::move(bk));
  }
}

}  // namespace

GradBuckets gradient_buckets(const ModelConfig& model, const std::vector<GradBucketWorker>& workers,
                             const std::vector<std::vector<std::vector<int>>>& worker_of,
                             const std::vector<int>& physical_depth) {
  const int nw = static_cast<int>(workers.size());
  GradBuckets out;
  // Segment boundaries: every stage boundary of every pipeline.
  std::vector<int> bounds{0, model.layers};
  for (const GradBucketWorker& w : workers)
    for (const GradBucketChunk& c : w.chunks) bounds.push_back(c.layer_begin), bounds.push_back(c.layer_end);
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  int communicators = static_cast<int>(bounds.size());  // dense: one per segment; expert groups get ids after these

  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const int a = bounds[s], b = bounds[s + 1];
    std::vector<GradHolder> hs;
    for (int wi = 0; wi < nw; ++wi)
      for (size_t c = 0; c < workers[wi].chunks.size(); ++c) {
        const GradBucketChunk& cc = workers[wi].chunks[c];
        if (cc.layer_begin <= a && b <= cc.layer_end) hs.push_back({wi, static_cast<int>(c)});
      }
    int lcm_tp = 1, max_tp = 1;
    for (const GradHolder& h : hs) {
      lcm_tp = std::lcm(lcm_tp, workers[h.worker].tp);
      max_tp = std::max(max_tp, workers[h.worker].tp);
    }
    const double limit = bucket_params(static_cast<int>(hs.size()));
    // Fill buckets from the last layer backwards, in local (per-rank) parameters of the most sharded holder.
    GradBucket cur;
    auto flush = [&]() {
      if (cur.layer_begin == cur.layer_end && !cur.embedding && !cur.head) return;
      cur.holders = hs;
      cur.lcm_tp = lcm_tp;
      cur.communicator = static_cast<int>(s);
      out.buckets.push_back(std::move(cur));
      cur = GradBucket{};
    };
    cur.layer_begin = cur.layer_end = b;
    const bool head_here = b == model.layers;
    if (head_here) {
      cur.head = true;
      cur.full_params += head_params_per_rank(model, 1);
    }
    // Expert parallelism: routed-expert gradients are reduced only over the holders of the same experts
    // (Megatron-Core's expert-data-parallel group), one bucket per group and MoE layer on that group's own
    // communicator; the rest of each MoE layer goes with the dense buckets over every holder.
    std::map<std::pair<int, double>, std::vector<GradHolder>> expert_groups;
    for (const GradHolder& h : hs) {
      const GradBucketChunk& cc = workers[h.worker].chunks[h.chunk];
      if (cc.local_experts >= 0) expert_groups[{cc.ep_rank, cc.local_experts}].push_back(h);
    }
    int next_comm = communicators;  // one communicator per expert group of this segment
    std::map<std::pair<int, double>, int> expert_comm;
    for (const auto& [key, members] : expert_groups) expert_comm[key] = next_comm++;
    for (int l = b - 1; l >= a; --l) {
      cur.layer_begin = l;
      if (!expert_groups.empty() && model.is_moe_layer(l)) {
        const MoeLayerParams mp = moe_layer_params_per_rank(model, l, 1, 1);
        cur.full_params += mp.dense;
        for (const auto& [key, members] : expert_groups) {
          GradBucket eb;
          eb.layer_begin = l;
          eb.layer_end = l + 1;
          eb.holders = members;
          eb.communicator = expert_comm[key];
          eb.full_params = key.second * mp.experts;
          for (const GradHolder& h : members) eb.lcm_tp = std::lcm(eb.lcm_tp, workers[h.worker].tp);
          out.buckets.push_back(std::move(eb));
        }
      } else {
        cur.full_params += layer_params_per_rank(model, l, 1);
      }
      if (cur.full_params / max_tp >= limit) {
        flush();
        cur.layer_begin = cur.layer_end = l;
      }
    }
    if (a == 0) {
      cur.embedding = true;
      cur.full_params += embedding_params_per_rank(model, 1);
    }
    flush();
    communicators = next_comm;
  }
  out.communicators = communicators;
  if (model.tied_embeddings()) add_tied_embedding_buckets(model, workers, worker_of, physical_depth, out);
  return out;
}

GradSync::GradSync(const ModelConfig& model, const Plan& plan, const StageWork& work, CollectiveContext& ctx,
                   Callbacks cb)
    : plan_(plan), work_(work), ctx_(ctx), cb_(std::move(cb)) {
  grad_bytes_ = reduced_grad_bytes_per_param(model);
  param_bytes_ = model.dtype == "fp32" ? 4.0 : 2.0;
  const int nw = static_cast<int>(work.workers.size());
  buckets_of_worker_.resize(nw);
  pending_.assign(nw, 0);
  gather_pending_.assign(nw, 0);
  backward_done_.assign(nw, false);

  std::vector<GradBucketWorker> layout(nw);
  for (int wi = 0; wi < nw; ++wi) {
    layout[wi].tp = work.workers[wi].tp;
    for (const ChunkCost& c : work.workers[wi].chunks)
      layout[wi].chunks.push_back({c.layer_begin, c.layer_end, c.ep_rank, c.local_experts});
  }
  GradBuckets gb = gradient_buckets(model, layout, work.worker_of, work.physical_depth);
  for (GradBucket& b : gb.buckets) {
    Bucket bk;
    static_cast<GradBucket&>(bk) = std::move(b);
    buckets_.push_back(std::move(bk));
  }
  segment_busy_.assign(gb.communicators, false);
  segment_queue_.assign(gb.communicators, {});
  tied_bucket_.assign(nw, -1);
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& bk = buckets_[bi];
    bk.waiting = static_cast<int>(bk.holders.size());
    for (const Holder& h : bk.holders) {
      buckets_of_worker_[h.worker].push_back(static_cast<int>(bi));
      ++pending_[h.worker];
      if (bk.tied_embedding) tied_bucket_[h.worker] = static_cast<int>(bi);
      else ++gather_pending_[h.worker];  // the embedding copies are not a ZeRO-1 shard
    }
  }
}

void GradSync::maybe_sync_embedding(int w) {
  const int tb = tied_bucket_[w];
  if (tb < 0 || !backward_done_[w] || pending_[w] != 1) return;
  if (reported_.insert({tb, w}).second) ready(tb);
}

void GradSync::on_last_backward_start(int w, int chunk, TimeNs start, double compute_s) {
  if (!plan_.overlap_grad_reduce) return;
  const ChunkCost& cc = work_.workers[w].chunks[chunk];
  // A pass cut by expert-parallel all-to-alls has no fixed kernel timeline: its buckets become ready when
  // the worker's backward ends (on_backward_done).
  if (!cc.moe_layers.empty()) return;
  const double total = cc.embedding_grad_ready_s > 0 ? cc.embedding_grad_ready_s : compute_s;
  const double scale = total > 0 ? compute_s / total : 1.0;
  for (int bi : buckets_of_worker_[w]) {
    const Bucket& bk = buckets_[bi];
    bool mine = false;
    for (const Holder& h : bk.holders) mine |= h.worker == w && h.chunk == chunk;
    if (!mine || bk.tied_embedding) continue;
    // The bucket is complete when its earliest layer (the last one backward reaches) is done.
    double t;
    if (bk.embedding) t = cc.embedding_grad_ready_s;
    else if (bk.layer_begin < bk.layer_end) t = cc.layer_grad_ready_s[bk.layer_begin - cc.layer_begin];
    else t = cc.head_grad_ready_s;
    ctx_.engine.schedule_at(start + seconds_to_ns(t * scale), [this, bi]() { ready(bi); });
  }
}

void GradSync::on_layers_done(int w, int chunk, int first_done_layer, bool embedding_done) {
  if (!plan_.overlap_grad_reduce) return;
  for (int bi : buckets_of_worker_[w]) {
    const Bucket& bk = buckets_[bi];
    bool mine = false;
    for (const Holder& h : bk.holders) mine |= h.worker == w && h.chunk == chunk;
    const bool done = bk.embedding ? embedding_done : bk.layer_begin >= first_done_layer;
    if (mine && done && !bk.tied_embedding && reported_.insert({bi, w}).second) ready(bi);
  }
}

void GradSync::on_backward_done(int w, TimeNs now) {
  backward_done_[w] = true;
  for (int bi : buckets_of_worker_[w]) {
    if (buckets_[bi].tied_embedding) continue;
    bool ep_pass = false;
    for (const Holder& h : buckets_[bi].holders)
      if (h.worker == w) ep_pass = !work_.workers[w].chunks[h.chunk].moe_layers.empty();
    // Without overlap every bucket is ready now; an expert-parallel pass reports what it has not yet.
    if (!plan_.overlap_grad_reduce || (ep_pass && reported_.insert({bi, w}).second)) ready(bi);
  }
  maybe_sync_embedding(w);
  if (pending_[w] == 0) cb_.grads_reduced(w);
}

void GradSync::ready(int b) {
  Bucket& bk = buckets_[b];
  if (--bk.waiting > 0) return;
  if (segment_busy_[bk.communicator]) {
    segment_queue_[bk.communicator].push_back(b);
    return;
  }
  start(b);
}

void GradSync::start(int b) {
  Bucket& bk = buckets_[b];
  segment_busy_[bk.communicator] = true;
  bk.started = ctx_.engine.now();
  const bool shard = plan_.zero1 && !bk.tied_embedding;
  launch(b, shard ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, grad_bytes_,
         [this, b]() { reduced(b); });
}

void GradSync::for_each_collective(
    const std::function<bool(CollectiveKind, const std::vector<GpuId>&)>& f) const {
  for (const Bucket& bk : buckets_) {
    if (bk.holders.size() < 2 || bk.tied_embedding) continue;
    for (int k = 0; k < bk.lcm_tp; ++k) {
      const std::vector<GpuId> members = slice_members(bk, k);
      // The all-gather of ZeRO-1 runs over the same ring as the reduce-scatter: one census covers both.
      if (!f(plan_.zero1 ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, members)) return;
    }
  }
}

void GradSync::for_each_tied_embedding_collective(
    const std::function<bool(int, const std::vector<GpuId>&)>& f) const {
  for (const Bucket& bk : buckets_) {
    if (!bk.tied_embedding) continue;
    for (int k = 0; k < bk.lcm_tp; ++k)
      if (!f(work_.workers[bk.holders.front().worker].pipeline, slice_members(bk, k))) return;
  }
}

void GradSync::fold_symmetric_embedding_buckets() {
  const std::vector<GpuId>& image = ctx_.symmetry->gpu_image;
  std::map<std::vector<GpuId>, int> by_members;  // slice 0's members -> tied bucket
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].tied_embedding) by_members[slice_members(buckets_[b], 0)] = static_cast<int>(b);
  auto image_of = [&](int b) {
    std::vector<GpuId> m = slice_members(buckets_[b], 0);
    for (GpuId& g : m) g = image[g];
    std::sort(m.begin(), m.end());
    const auto it = by_members.find(m);
    if (it == by_members.end() || buckets_[it->second].lcm_tp != buckets_[b].lcm_tp)
      throw std::logic_error("gradient sync: the symmetry does not map a tied-embedding all-reduce onto another");
    return it->second;
  };
  orbit_first_.assign(buckets_.size(), -1);
  orbit_sets_.assign(buckets_.size(), {});
  orbit_waiting_.assign(buckets_.size(), {});
  for (const auto& [members, first] : by_members) {
    if (orbit_first_[first] >= 0) continue;
    const int slices = buckets_[first].lcm_tp;
    orbit_sets_[first].assign(slices, {});
    int b = first;
    do {
      if (orbit_first_[b] >= 0)
        throw std::logic_error("gradient sync: the symmetry does not permute the tied-embedding all-reduces");
      orbit_first_[b] = first;
      for (int k = 0; k < slices; ++k) orbit_sets_[first][k].push_back(slice_members(buckets_[b], k));
      b = image_of(b);
    } while (b != first);
  }
}

std::vector<std::vector<GpuId>> GradSync::slice_sets(int b, int k) const {
  if (!orbit_first_.empty() && orbit_first_[b] == b) return orbit_sets_[b][k];
  return {slice_members(buckets_[b], k)};
}

std::vector<GpuId> GradSync::slice_members(const Bucket& bk, int k) const {
  std::vector<GpuId> members;
  for (const Holder& h : bk.holders) {
    const Worker& w = work_.workers[h.worker];
    members.push_back(w.gpus[static_cast<size_t>(k) * w.tp / bk.lcm_tp]);
  }
  std::sort(members.begin(), members.end());  // ring in node order, as NCCL builds rings
  return members;
}

// One collective per TP slice of the bucket, over the GPUs holding that slice, concurrently.
void GradSync::launch(int b, CollectiveKind kind, double bytes_per_param, std::function<void()> done) {
  Bucket& bk = buckets_[b];
  const double slice_bytes = bk.full_params / bk.lcm_tp * bytes_per_param;
  if (bk.holders.size() < 2) {
    ctx_.engine.schedule_after(0, std::move(done));
    return;
  }
  if (!orbit_first_.empty() && orbit_first_[b] >= 0 && orbit_first_[b] != b) {  // runs in its orbit's collective
    const Bucket& first = buckets_[orbit_first_[b]];
    if (first.reduced_at < 0) orbit_waiting_[orbit_first_[b]].push_back(std::move(done));
    else if (first.reduced_at == ctx_.engine.now()) ctx_.engine.schedule_after(0, std::move(done));
    else throw std::logic_error("gradient sync: a tied-embedding all-reduce started after its orbit's finished");
    return;
  }
  bk.phase_pending = bk.lcm_tp;
  auto one_done = [this, b, done]() {
    if (--buckets_[b].phase_pending == 0) done();
  };
  for (int k = 0; k < bk.lcm_tp; ++k) {
    std::vector<std::vector<GpuId>> sets = slice_sets(b, k);
    // The call's software overhead (the slowest holder's) precedes the transfer.
    double ovh = 0;
    for (const Holder& h : bk.holders) ovh = std::max(ovh, work_.workers[h.worker].collective_overhead_s);
    ctx_.engine.schedule_after(seconds_to_ns(ovh), [this, kind, sets = std::move(sets), slice_bytes, one_done]() {
      if (kind == CollectiveKind::AllReduce) allreduce_each(ctx_, sets, slice_bytes, one_done);
      else ring_collective(ctx_, kind, sets, slice_bytes, one_done);
    });
  }
}

void GradSync::reduced(int b) {
  Bucket& bk = buckets_[b];
  bk.reduced_at = ctx_.engine.now();
  segment_busy_[bk.communicator] = false;
  auto& queue = segment_queue_[bk.communicator];
  if (!queue.empty()) {
    const int next = queue.front();
    queue.erase(queue.begin());
    start(next);
  }
  if (cb_.bucket_span)
    for (const Holder& h : bk.holders) cb_.bucket_span(h.worker, bk.started, ctx_.engine.now());
  bk.opt_waiting = static_cast<int>(bk.holders.size());
  for (const Holder& h : bk.holders) {
    if (--pending_[h.worker] == 0 && backward_done_[h.worker]) cb_.grads_reduced(h.worker);
    else maybe_sync_embedding(h.worker);
  }
  if (!orbit_waiting_.empty())
    for (std::function<void()>& f : std::exchange(orbit_waiting_[b], {})) f();
}

void GradSync::on_optimizer_done(int w, TimeNs now) {
  if (!plan_.zero1) {
    cb_.finished(w);
    return;
  }
  // ZeRO-1: once every holder of a bucket has stepped its shard, all-gather the updated parameters.
  if (gather_pending_[w] == 0) {
    cb_.finished(w);
    return;
  }
  for (int bi : buckets_of_worker_[w]) {
    Bucket& bk = buckets_[bi];
    if (bk.tied_embedding || --bk.opt_waiting > 0) continue;
    bk.gather_started = ctx_.engine.now();
    launch(bi, CollectiveKind::AllGather, param_bytes_, [this, bi]() {
      buckets_[bi].gathered_at = ctx_.engine.now();
      for (const Holder& h : buckets_[bi].holders)
        if (--gather_pending_[h.worker] == 0) cb_.finished(h.worker);
    });
  }
}

TimeNs GradSync::collective_time(int w, TimeNs from, TimeNs to) const {
  std::vector<std::pair<TimeNs, TimeNs>> spans;
  auto add = [&](TimeNs a, TimeNs b) {
    if (a < 0) return;
    a = std::max(a, from);
    b = std::min(b < 0 ? to : b, to);
    if (b > a) spans.push_back({a, b});
  };
  for (int bi : buckets_of_worker_[w]) {
    add(buckets_[bi].started, buckets_[bi].reduced_at);
    add(buckets_[bi].gather_started, buckets_[bi].gathered_at);
  }
  std::sort(spans.begin(), spans.end());
  TimeNs total = 0, covered = from;
  for (const auto& [a, b] : spans) {
    total += std::max<TimeNs>(0, b - std::max(a, covered));
    covered = std::max(covered, b);
  }
  return total;
}

}  // namespace arachne
