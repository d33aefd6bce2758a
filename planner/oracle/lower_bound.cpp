// Lower bounds on simulated iteration times (see lower_bound.h).
#include "planner/oracle/lower_bound.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <stdexcept>

#include "planner/common/layer_prices.h"
#include "sim/exec/pipeline_schedule.h"
#include "sim/exec/stage_work.h"
#include "sim/model/memory.h"

namespace arachne::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// The engine schedules every duration rounded to the nearest nanosecond (sim/core/engine.h
// seconds_to_ns): at most 0.5 ns lost per duration; 1 ns per duration is subtracted.
constexpr double kRoundingPerDuration = 1e-9;
// Per-layer sums instead of one sum over the pass's concatenated kernels: relative rounding ~1e-15 per term.
constexpr double kRelativeSlack = 1e-9;

double pass_time(const PassCost& p) { return p.compute_s + p.tp_closed_form_s; }

}  // namespace

double pipeline_lower_bound(const std::vector<std::vector<GroupTimes>>& stages, int m, PipelineBoundOptions opt) {
  const int S = static_cast<int>(stages.size());
  // Micro-batch m-1's round trip behind stage k: its activations pass forward through some group of every
  // later stage and its gradients back through some group of each (a forward waits for every overlapping
  // group's activations and a backward for every overlapping group's gradients, sim/exec/stage_work.cpp;
  // some group overlaps any sample). Only stages whose groups are all listed count: a partial pipeline's
  // last stage may still gain a faster group.
  const int known = !opt.round_trip ? 0 : opt.complete ? S : S - 1;
  std::vector<double> later(S + 1, 0.0);
  for (int k = known - 1; k >= 0; --k) {
    double min_f = kInf, min_b = kInf;
    for (const GroupTimes& g : stages[k]) {
      min_f = std::min(min_f, g.forward_s + g.send_f_s);
      min_b = std::min(min_b, g.backward_s + g.send_b_s);
    }
    later[k] = later[k + 1] + (stages[k].empty() ? 0.0 : min_f + min_b);
  }
  double chain_f = 0, chain_b = 0, finish0 = kInf, best = 0;
  for (int k = 0; k < S; ++k) {
    double min_f = kInf, min_b = kInf;
    const double behind = k + 1 < known ? later[k + 1] : 0.0;
    // 1F1B (sim/exec/pipeline_schedule.h, Megatron's order): between its last forward and its last backward a
    // rank of stage k runs min(S-1-k, m-1) backwards (the cool-down), and its last backward needs micro-batch
    // m-1's gradients, which return no earlier than `behind` after that forward's activations left. A
    // partial pipeline takes m - 1 (the most any completion has), so its term is at most every completion's.
    const int between = opt.complete ? std::min(S - 1 - k, m - 1) : m - 1;
    for (const GroupTimes& g : stages[k]) {
      // The wait for those gradients beyond the backwards it runs meanwhile (each with its exchange).
      const double wait = std::max(0.0, behind - between * (g.backward_s + g.send_b_s));
      // After its last backward: the exchange sending its gradients (none on stage 0), its own reduction tail
      // (the step waits for both) and step, or those gradients' chain back to a stage-0 group's end. The
      // tail is a floor on the reduction's end measured from the earliest last backward, so the wait delays
      // the exchange, not the tail.
      const double own = std::max(g.send_b_s, g.tail_s) + g.optimizer_s;
      const double after = k == 0 ? own : std::max(own, g.send_b_s + chain_b + finish0);
      // Its program to its last backward: 2m tasks and the blocking exchanges after all but that backward.
      const double work = m * (g.forward_s + g.backward_s) + m * g.send_f_s + (m - 1) * g.send_b_s;
      // Durations on the chain: k forwards and k backwards of earlier stages, 2m tasks, one optimizer step;
      // each task is two scheduled durations (kernels, TP collectives). The tail and the transfer floors
      // carry their own slack.
      const double durations = 2.0 * (2.0 * m + 2.0 * static_cast<double>(k) + 1.0);
      best = std::max(best, (chain_f + work + after) * (1 - kRelativeSlack) - durations * kRoundingPerDuration);
      if (wait > 0) {  // the same chain with the round trip's passes on it (a forward and a backward per stage)
        const double waited = std::max(g.send_b_s + wait, g.tail_s) + g.optimizer_s;
        const double after_wait = k == 0 ? waited : std::max(waited, g.send_b_s + wait + chain_b + finish0);
        const double more = 4.0 * static_cast<double>(known - 1 - k);
        best = std::max(best, (chain_f + work + after_wait) * (1 - kRelativeSlack) - (durations + more) * kRoundingPerDuration);
      }
      // Micro-batch 0's activations leave stage k through some group's forward and one of its transfers; the
      // last gradients pass back through some group's backward and (k > 0) one of its transfers.
      min_f = std::min(min_f, g.forward_s + g.send_f_s);
      min_b = std::min(min_b, g.backward_s + g.send_b_s);
      if (k == 0) finish0 = std::min(finish0, own);
    }
    chain_f += min_f;
    chain_b += min_b;
  }
  return std::max(0.0, best);
}

LowerBound::LowerBound(const Cluster& cluster, const ModelConfig& model, const Topology* topo)
    : cluster_(cluster), model_(model), topo_(topo) {
  for (const NodeGroup& g : cluster_.groups) {
    capacity_.push_back(cluster_.catalog.at(g.gpu).memory_bytes);
    overhead_.push_back(cluster_.catalog.at(g.gpu).compute.collective_overhead_s);
  }
  // Every GPU pair of the same two nodes alike (latency, least capacity on the route); checked only on
  // clusters the exhaustive search takes (a quadratic pass over the GPU pairs).
  if (topo_ && cluster_.total_gpus() <= 64) {
    uniform_nodes_ = true;
    const int N = static_cast<int>(cluster_.nodes.size());
    for (int a = 0; a < N && uniform_nodes_; ++a)
      for (int b = 0; b < N && uniform_nodes_; ++b) {
        bool first = true;
        double latency = 0, cap = 0;
        for (int i = 0; i < cluster_.nodes[a].gpus && uniform_nodes_; ++i)
          for (int j = 0; j < cluster_.nodes[b].gpus && uniform_nodes_; ++j) {
            const GpuId x = cluster_.nodes[a].first_gpu + i, y = cluster_.nodes[b].first_gpu + j;
            if (x == y) continue;
            double c = kInf;
            for (const LinkId l : topo_->route(x, y)) c = std::min(c, topo_->links()[l].capacity);
            const double lat = topo_->latency_s(x, y);
            if (first) latency = lat, cap = c, first = false;
            else uniform_nodes_ = lat == latency && c == cap;
          }
      }
  }
}

// Per-layer pass prices of build_stage_work (planner/common/layer_prices.h) as prefix sums of pass times.
// Expert-parallel passes (MoE, ep > 1) price only their dense kernels plus the same TP collectives.
LowerBound::Table LowerBound::build_table(int node_group, int tp, double samples, Recompute rc) const {
  const ModelConfig& m = model_;
  const LayerPrices p = price_layers(cluster_, m, node_group, tp, samples, rc, /*sequence_parallel=*/false);
  Table t;
  const int L = m.layers;
  t.fwd.assign(L + 1, 0.0);
  t.bwd.assign(L + 1, 0.0);
  t.fwd_ep.assign(L + 1, 0.0);
  t.bwd_ep.assign(L + 1, 0.0);
  t.bwd_tp.assign(L + 1, 0.0);
  for (int l = 0; l < L; ++l) {
    const PassCost& f = p.forward[l];
    const PassCost& b = p.backward[l];
    double f_ep = pass_time(f), b_ep = pass_time(b);
    if (m.moe && m.is_moe_layer(l)) {
      f_ep = p.forward_dense_s[l] + f.tp_closed_form_s;
      b_ep = p.backward_dense_s[l] + b.tp_closed_form_s;
    }
    t.fwd[l + 1] = t.fwd[l] + pass_time(f);
    t.bwd[l + 1] = t.bwd[l] + pass_time(b);
    t.fwd_ep[l + 1] = t.fwd_ep[l] + f_ep;
    t.bwd_ep[l + 1] = t.bwd_ep[l] + b_ep;
    t.bwd_tp[l + 1] = t.bwd_tp[l] + b.tp_closed_form_s;
  }
  t.emb_f = pass_time(p.embedding_forward);
  t.emb_b = pass_time(p.embedding_backward);
  t.head_f = pass_time(p.head_forward);
  t.head_b = pass_time(p.head_backward);
  t.head_b_tp = p.head_backward.tp_closed_form_s;
  return t;
}

const LowerBound::Table& LowerBound::table(int node_group, int tp, double samples, Recompute rc) const {
  // Integer sample counts (the search's) go through a hashed index first.
  const bool packed = samples == static_cast<double>(static_cast<long>(samples)) && samples < (1 << 20) &&
                      node_group < (1 << 12) && tp < (1 << 12);
  const std::uint64_t pk = (static_cast<std::uint64_t>(node_group) << 40) | (static_cast<std::uint64_t>(tp) << 28) |
                           (static_cast<std::uint64_t>(samples) << 4) | static_cast<std::uint64_t>(rc);
  if (packed) {
    auto hit = table_index_.find(pk);
    if (hit != table_index_.end()) return *hit->second;
  }
  const auto key = std::make_tuple(node_group, tp, samples, static_cast<int>(rc));
  auto it = tables_.find(key);
  if (it == tables_.end()) it = tables_.emplace(key, build_table(node_group, tp, samples, rc)).first;
  if (packed) table_index_.emplace(pk, &it->second);
  return it->second;
}

GroupTimes LowerBound::group_times(int node_group, int tp, double samples, int begin, int end, Recompute rc,
                                   bool zero1, int ep) const {
  const Table& t = table(node_group, tp, samples, rc);
  const int L = model_.layers;
  const double ends_f = (begin == 0 ? t.emb_f : 0.0) + (end == L ? t.head_f : 0.0);
  const double ends_b = (begin == 0 ? t.emb_b : 0.0) + (end == L ? t.head_b : 0.0);
  const double f = t.fwd[end] - t.fwd[begin], b = t.bwd[end] - t.bwd[begin];
  const double f_ep = t.fwd_ep[end] - t.fwd_ep[begin], b_ep = t.bwd_ep[end] - t.bwd_ep[begin];
  GroupTimes g;
  const bool moe = model_.moe.has_value();
  if (!moe || ep == 1) {
    g.forward_s = f + ends_f;
    g.backward_s = b + ends_b;
  } else if (ep > 1) {
    g.forward_s = f_ep + ends_f;
    g.backward_s = b_ep + ends_b;
  } else {
    g.forward_s = std::min(f, f_ep) + ends_f;
    g.backward_s = std::min(b, b_ep) + ends_b;
  }
  if (!moe && !zero1) {
    // The parameters build_stage_work steps (ChunkCost::params_per_rank): layers, embedding, head.
    std::vector<double>& pre = params_prefix_[tp];
    if (pre.empty()) {
      pre.assign(L + 1, 0.0);
      for (int l = 0; l < L; ++l) pre[l + 1] = pre[l] + layer_params_per_rank(model_, l, tp);
    }
    double params = pre[end] - pre[begin];
    if (begin == 0) params += embedding_params_per_rank(model_, tp);
    if (end == L) params += head_params_per_rank(model_, tp);
    for (const Node& n : cluster_.nodes)
      if (n.group == node_group) {
        g.optimizer_s = optimizer_step_s(params, cluster_.gpu_spec(n.first_gpu), model_);
        break;
      }
  }
  return g;
}

bool LowerBound::out_of_memory(int node_group, int tp, double samples, int begin, int end, Recompute rc,
                               double in_flight, bool zero1, int zero1_dp) const {
  auto memory = [&](double flight, int dp) {
    StageMemoryInput in;
    in.layer_begin = begin;
    in.layer_end = end;
    in.has_embedding = begin == 0;
    in.has_head = end == model_.layers;
    in.shard = {tp, false, samples};
    in.recompute = rc;
    in.zero1 = zero1;
    in.dp = std::max(1, dp);
    in.in_flight = flight;
    // MoE: no routed expert held and no dispatch buffers - less than under any EP (a lower bound).
    if (model_.moe) in.local_experts = 0;
    MemoryBreakdown mb = stage_memory(model_, in);
    if (zero1 && zero1_dp <= 0) mb.optimizer = 0;
    return mb.total();
  };
  const double cap = capacity_[node_group];
  // Integer sample counts (the search) are cached as a line in in_flight; within 1e-9 of the capacity the
  // exact value decides. The simulator's test: total / memory_bytes > 1 (sim/exec/iteration.cpp).
  if (samples == static_cast<int>(samples) && samples < (1 << 16) && node_group < 256 && tp < 256 &&
      model_.layers < 1024 && (!zero1 || zero1_dp <= 0)) {
    const std::uint64_t key = (static_cast<std::uint64_t>(node_group) << 56) | (static_cast<std::uint64_t>(tp) << 48) |
                              (static_cast<std::uint64_t>(samples) << 32) | (static_cast<std::uint64_t>(begin) << 20) |
                              (static_cast<std::uint64_t>(end) << 8) | (static_cast<std::uint64_t>(rc) << 1) |
                              (zero1 ? 1u : 0u);
    auto it = memory_.find(key);
    if (it == memory_.end()) {
      const double m1 = memory(1, zero1_dp), m2 = memory(2, zero1_dp);
      it = memory_.emplace(key, MemoryLine{2 * m1 - m2, m2 - m1, 0}).first;
    }
    const double estimate = it->second.fixed + in_flight * it->second.per_micro_batch;
    if (estimate > cap * (1 + 1e-9)) return true;
    if (estimate < cap * (1 - 1e-9)) return false;
  }
  return memory(in_flight, zero1_dp) / cap > 1.0;
}

const std::vector<double>& LowerBound::per_sample_floor(int node_group, int tp, Recompute rc, int max_samples) const {
  const auto key = std::make_tuple(node_group, tp, static_cast<int>(rc), max_samples);
  auto it = floors_.find(key);
  if (it != floors_.end()) return it->second;
  const int L = model_.layers;
  std::vector<double> best(L + 2, kInf);
  int first = 1;  // the floor over 1..max_samples - 1, when known, is the floor over those sizes
  auto prev = floors_.find(std::make_tuple(node_group, tp, static_cast<int>(rc), max_samples - 1));
  if (max_samples > 1 && prev != floors_.end()) best = prev->second, first = max_samples;
  for (int s = first; s <= max_samples; ++s) {
    const Table& t = table(node_group, tp, s, rc);
    for (int l = 0; l < L; ++l) {
      double c = t.fwd[l + 1] - t.fwd[l] + t.bwd[l + 1] - t.bwd[l];
      if (model_.moe) c = std::min(c, t.fwd_ep[l + 1] - t.fwd_ep[l] + t.bwd_ep[l + 1] - t.bwd_ep[l]);
      best[l] = std::min(best[l], c / s);
    }
    best[L] = std::min(best[L], (t.emb_f + t.emb_b) / s);
    best[L + 1] = std::min(best[L + 1], (t.head_f + t.head_b) / s);
  }
  return floors_.emplace(key, std::move(best)).first->second;
}

double LowerBound::group_work_bound(int node_group, int tp, long n, int begin, int end, Recompute rc, bool zero1) const {
  const int L = model_.layers;
  const std::vector<double>& f = per_sample_floor(node_group, tp, rc, static_cast<int>(n));
  double per_sample = 0;
  for (int l = begin; l < end; ++l) per_sample += f[l];
  if (begin == 0) per_sample += f[L];
  if (end == L) per_sample += f[L + 1];
  const double step = zero1 ? 0.0 : group_times(node_group, tp, 1, begin, end, rc, false).optimizer_s;
  // n samples in m <= n micro-batches (PipelineRates::work_bound's slack at m = n), then one more duration.
  return std::max(0.0, PipelineRates::work_bound(static_cast<double>(n), per_sample, static_cast<int>(n)) +
                           step * (1 - kRelativeSlack) - 2 * kRoundingPerDuration);
}

long LowerBound::group_sample_cap(int node_group, int tp, int begin, int end, Recompute rc, bool zero1, long max_n,
                                  double T) const {
  if (max_n < 1) return 0;
  std::vector<std::vector<double>>& all = work_envelopes(node_group, tp, rc, zero1, max_n);
  const int L = model_.layers;
  if (all.empty()) all.resize(static_cast<size_t>((L + 1) * (L + 1)));
  return envelope_cap(all[static_cast<size_t>(begin * (L + 1) + end)], node_group, tp, begin, end, rc, zero1, max_n, T);
}

long LowerBound::envelope_cap(std::vector<double>& least, int node_group, int tp, int begin, int end, Recompute rc,
                              bool zero1, long max_n, double T) const {
  if (max_n < 1) return 0;
  if (!std::isfinite(T)) return max_n;
  if (least.empty()) {
    least.assign(static_cast<size_t>(max_n) + 2, kInf);
    for (long n = max_n; n >= 1; --n)
      least[n] = std::min(least[n + 1], group_work_bound(node_group, tp, n, begin, end, rc, zero1));
  }
  // least[n] = min over n' >= n of the bound: non-decreasing; the largest n with least[n] < T is the largest n
  // whose own bound is below T.
  const auto first_out = std::lower_bound(least.begin() + 1, least.begin() + max_n + 1, T);
  return static_cast<long>(first_out - (least.begin() + 1));
}

const LowerBound::LeastPasses& LowerBound::least_passes(int node_group, int tp, Recompute rc, int max_samples) const {
  const auto key = std::make_tuple(node_group, tp, static_cast<int>(rc), max_samples);
  auto it = least_passes_.find(key);
  if (it != least_passes_.end()) return it->second;
  const int L = model_.layers;
  LeastPasses p{std::vector<double>(L + 2, kInf), std::vector<double>(L + 2, kInf)};
  int first = 1;  // the least over 1..max_samples - 1, when known, is the least over those sizes
  auto prev = least_passes_.find(std::make_tuple(node_group, tp, static_cast<int>(rc), max_samples - 1));
  if (max_samples > 1 && prev != least_passes_.end()) p = prev->second, first = max_samples;
  for (int s = first; s <= max_samples; ++s) {
    const Table& t = table(node_group, tp, s, rc);
    for (int l = 0; l < L; ++l) {
      double f = t.fwd[l + 1] - t.fwd[l], b = t.bwd[l + 1] - t.bwd[l];
      if (model_.moe) f = std::min(f, t.fwd_ep[l + 1] - t.fwd_ep[l]), b = std::min(b, t.bwd_ep[l + 1] - t.bwd_ep[l]);
      p.forward[l] = std::min(p.forward[l], f);
      p.backward[l] = std::min(p.backward[l], b);
    }
    p.forward[L] = std::min(p.forward[L], t.emb_f);
    p.backward[L] = std::min(p.backward[L], t.emb_b);
    p.forward[L + 1] = std::min(p.forward[L + 1], t.head_f);
    p.backward[L + 1] = std::min(p.backward[L + 1], t.head_b);
  }
  return least_passes_.emplace(key, std::move(p)).first->second;
}

long pipeline_sample_cap(const LowerBound& lb, const std::vector<std::vector<std::pair<int, int>>>& stages, Recompute rc,
                         bool zero1, int layers, long max_n, double T) {
  const int S = static_cast<int>(stages.size()), L = layers;
  // Per distinct (node group, tp): prefix sums of its least passes, its optimizer step per layer range, its envelopes.
  struct Type {
    int node_group = 0, tp = 1;
    std::vector<double> fwd, bwd;  // prefix over layers; embedding and head apart
    double emb_f = 0, emb_b = 0, head_f = 0, head_b = 0;
    std::vector<double> step;      // [e x (L + 1) + f]
    std::vector<std::vector<double>>* envelopes = nullptr;
  };
  std::map<std::pair<int, int>, Type> types;
  std::vector<std::vector<std::pair<Type*, int>>> count(S);  // per stage: groups of one node group and tp alike
  for (int j = 0; j < S; ++j) {
    std::map<std::pair<int, int>, int> c;
    for (const auto& g : stages[j]) ++c[g];
    for (const auto& [g, n] : c) {
      auto [it, fresh] = types.try_emplace(g);
      Type& t = it->second;
      if (fresh) {
        t.node_group = g.first, t.tp = g.second;
        const LowerBound::LeastPasses& p = lb.least_passes(g.first, g.second, rc, static_cast<int>(max_n));
        t.fwd.assign(L + 1, 0.0);
        t.bwd.assign(L + 1, 0.0);
        for (int l = 0; l < L; ++l) t.fwd[l + 1] = t.fwd[l] + p.forward[l], t.bwd[l + 1] = t.bwd[l] + p.backward[l];
        t.emb_f = p.forward[L], t.emb_b = p.backward[L], t.head_f = p.forward[L + 1], t.head_b = p.backward[L + 1];
        t.step.assign(static_cast<size_t>((L + 1) * (L + 1)), 0.0);
        if (!zero1)
          for (int e = 0; e < L; ++e)
            for (int f = e + 1; f <= L; ++f) t.step[e * (L + 1) + f] = lb.group_times(g.first, g.second, 1, e, f, rc, false).optimizer_s;
        t.envelopes = &lb.work_envelopes(g.first, g.second, rc, zero1, max_n);
        if (t.envelopes->empty()) t.envelopes->resize(static_cast<size_t>((L + 1) * (L + 1)));
      }
      count[j].emplace_back(&t, n);
    }
  }
  // The least forward (or backward) pass of layers [e, f) on any group of stage j.
  auto least_pass = [&](int j, int e, int f, bool backward) {
    double best = kInf;
    for (const auto& [t, c] : count[j]) {
      const double sum = backward ? t->bwd[f] - t->bwd[e] + (e == 0 ? t->emb_b : 0.0) + (f == L ? t->head_b : 0.0)
                                  : t->fwd[f] - t->fwd[e] + (e == 0 ? t->emb_f : 0.0) + (f == L ? t->head_f : 0.0);
      best = std::min(best, sum);
    }
    return best;
  };
  // chain_f[j][e], chain_fb[j][e]: the least forward chain, and forward plus backward chain, of stages 0..j-1
  // over the partitions of layers [0, e) into them.
  std::vector<std::vector<double>> chain_f(S + 1, std::vector<double>(L + 1, kInf)), chain_fb = chain_f;
  chain_f[0][0] = chain_fb[0][0] = 0;
  for (int j = 0; j + 1 < S; ++j)
    for (int e = 0; e < L; ++e) {
      if (!std::isfinite(chain_f[j][e])) continue;
      for (int f = e + 1; f <= L; ++f) {
        const double fw = least_pass(j, e, f, false), bw = least_pass(j, e, f, true);
        chain_f[j + 1][f] = std::min(chain_f[j + 1][f], chain_f[j][e] + fw);
        chain_fb[j + 1][f] = std::min(chain_fb[j + 1][f], chain_fb[j][e] + fw + bw);
      }
    }
  // best[j][e]: the most samples stages j.. can take over a partition of layers [e, L) (-1: none).
  std::vector<std::vector<long>> best(S + 1, std::vector<long>(L + 1, -1));
  best[S][L] = max_n;
  for (int j = S - 1; j >= 0; --j)
    for (int e = 0; e < L; ++e) {
      if (!std::isfinite(chain_f[j][e])) continue;
      // The chains' passes are 2j tasks of two rounded durations each, summed in another order.
      const double slack = 4e-9 * j;
      const double cf = chain_f[j][e] * (1 - 1e-9) - slack, cfb = chain_fb[j][e] * (1 - 1e-9) - slack;
      for (int f = e + 1; f <= L; ++f) {
        if (best[j + 1][f] <= best[j][e]) continue;  // cannot raise best[j][e]
        long sum = 0;
        for (const auto& [t, c] : count[j]) {
          const size_t at = static_cast<size_t>(e * (L + 1) + f);
          const double wait = std::max(cf, cfb - t->step[at]);
          sum += c * lb.envelope_cap((*t->envelopes)[at], t->node_group, t->tp, e, f, rc, zero1, max_n, T - std::max(0.0, wait));
        }
        best[j][e] = std::max(best[j][e], std::min(sum, best[j + 1][f]));
      }
    }
  return std::max(0L, best[0][0]);
}

std::vector<long> micro_batch_caps(const LowerBound& lb, const std::vector<std::vector<std::pair<int, int>>>& stages,
                                   Recompute rc, bool zero1, int layers, long max_n, double T,
                                   const std::vector<long>* within, long coupled_up_to) {
  const int S = static_cast<int>(stages.size()), L = layers;
  std::vector<long> caps(static_cast<size_t>(std::max(0L, max_n)) + 1, 0);
  if (max_n < 1) return caps;
  auto limit = [&](long b) {  // the most micro-batches of b samples worth trying
    const long most = max_n / b;
    return within ? std::min(most, b < static_cast<long>(within->size()) ? (*within)[b] : 0L) : most;
  };
  const long coupled = std::isfinite(T) ? std::min(max_n, std::max(0L, coupled_up_to)) : 0;
  for (long b = coupled + 1; b <= max_n; ++b) caps[b] = limit(b);
  if (!std::isfinite(T)) return caps;
  // Stages of the same groups (counted by node group and tp) share their shares R: one row per kind.
  std::vector<std::map<std::pair<int, int>, int>> kinds;
  std::vector<int> kind_of(S), kind_groups;
  long most_groups = 1;
  for (int j = 0; j < S; ++j) {
    std::map<std::pair<int, int>, int> count;
    for (const auto& g : stages[j]) ++count[g];
    const auto at = std::find(kinds.begin(), kinds.end(), count);
    kind_of[j] = static_cast<int>(at - kinds.begin());
    if (at == kinds.end()) kinds.push_back(std::move(count)), kind_groups.push_back(static_cast<int>(stages[j].size()));
    most_groups = std::max(most_groups, static_cast<long>(stages[j].size()));
  }
  const int K = static_cast<int>(kinds.size());
  // The least optimizer step of a stage-0 group holding layers [0, f) (none with ZeRO-1).
  std::vector<double> step0(L + 1, 0.0);
  if (!zero1)
    for (int f = 1; f <= L; ++f) {
      double least = kInf;
      for (const auto& [g, c] : kinds[kind_of[0]]) least = std::min(least, lb.group_times(g.first, g.second, 1, 0, f, rc, false).optimizer_s);
      step0[f] = least;
    }
  const size_t cells = static_cast<size_t>((L + 1) * (L + 1));
  auto cell = [&](int e, int f) { return static_cast<size_t>(e * (L + 1) + f); };
  // Every b admitted has sum_j R_j < T at m = 1 (the last stage's term), and R_j >= b x rate_j with the floors
  // over every size up to max_n (no larger than over 1..b - k_j + 1): b x the least sum of stage rates over
  // the partitions stays below T.
  double least_rates = kInf;
  {
    const PipelineRates rates(lb, stages, rc, L, static_cast<int>(max_n));
    std::vector<double> sum(static_cast<size_t>((S + 1) * (L + 1)), kInf);
    sum[0] = 0;
    for (int j = 0; j < S; ++j)
      for (int e = 0; e < L; ++e) {
        const double before = sum[static_cast<size_t>(j * (L + 1) + e)];
        if (!std::isfinite(before)) continue;
        for (int f = e + 1; f <= L; ++f) {
          double& next = sum[static_cast<size_t>((j + 1) * (L + 1) + f)];
          next = std::min(next, before + rates.rate(j, e, f));
        }
      }
    least_rates = sum[static_cast<size_t>(S * (L + 1) + L)];
  }
  std::vector<std::vector<double>> R(K, std::vector<double>(cells, kInf));  // [kind][e x (L + 1) + f]
  std::vector<double> chain(static_cast<size_t>((S + 1) * (L + 1)));
  // Per type of a kind: prefix sums over layers (then the embedding's and the head's) of its least passes and
  // of its per-sample floors.
  std::vector<double> pass(static_cast<size_t>(L + 3)), floor(static_cast<size_t>(L + 3));
  auto range = [&](const std::vector<double>& pre, int e, int f) {
    return pre[f] - pre[e] + (e == 0 ? pre[L + 1] : 0.0) + (f == L ? pre[L + 2] : 0.0);
  };
  std::vector<double> least_pass(cells), speed(cells);
  for (long b = most_groups; b <= coupled; ++b) {
    if (static_cast<double>(b) * least_rates * (1 - kRelativeSlack) -
            (4.0 * static_cast<double>(S + max_n) + 2.0) * kRoundingPerDuration >= T)
      break;
    const long m_max = limit(b);
    if (m_max < 1) continue;
    // R over layers [e, f) for each kind: its types' least pass and per-sample floor over sizes 1..b - k + 1.
    for (int k = 0; k < K; ++k) {
      const int size_cap = static_cast<int>(b) - kind_groups[k] + 1;
      std::fill(least_pass.begin(), least_pass.end(), kInf);
      std::fill(speed.begin(), speed.end(), 0.0);
      for (const auto& [g, c] : kinds[k]) {
        const LowerBound::LeastPasses& p = lb.least_passes(g.first, g.second, rc, size_cap);
        const std::vector<double>& f = lb.per_sample_floor(g.first, g.second, rc, size_cap);
        pass[0] = floor[0] = 0;
        for (int l = 0; l < L; ++l) pass[l + 1] = pass[l] + p.forward[l] + p.backward[l], floor[l + 1] = floor[l] + f[l];
        pass[L + 1] = p.forward[L] + p.backward[L], pass[L + 2] = p.forward[L + 1] + p.backward[L + 1];
        floor[L + 1] = f[L], floor[L + 2] = f[L + 1];
        for (int e = 0; e < L; ++e)
          for (int h = e + 1; h <= L; ++h) {
            least_pass[cell(e, h)] = std::min(least_pass[cell(e, h)], range(pass, e, h));
            const double per_sample = range(floor, e, h);
            speed[cell(e, h)] += per_sample > 0 ? c / per_sample : kInf;
          }
      }
      for (int e = 0; e < L; ++e)
        for (int h = e + 1; h <= L; ++h)
          R[k][cell(e, h)] = std::max(least_pass[cell(e, h)], static_cast<double>(b) / speed[cell(e, h)]);
    }
    // Whether m micro-batches admit a partition with every stage's term below T. A path holds 2k + 2m tasks
    // of two rounded durations each and a step; the slack is taken at the largest m, so admission only
    // shrinks as m grows.
    const double slack = (4.0 * static_cast<double>(S + max_n / b) + 2.0) * kRoundingPerDuration;
    auto admits = [&](long m) {
      std::fill(chain.begin(), chain.end(), kInf);
      chain[0] = 0;
      for (int j = 0; j < S; ++j) {
        const std::vector<double>& r_j = R[kind_of[j]];
        for (int e = j; e < L; ++e) {
          const double before = chain[static_cast<size_t>(j * (L + 1) + e)];
          if (!std::isfinite(before)) continue;
          for (int f = e + 1; f <= L - (S - 1 - j); ++f) {
            const double r = r_j[cell(e, f)];
            const double prefix_j = before + (j == 0 ? step0[f] : 0.0);
            if ((prefix_j + static_cast<double>(m) * r) * (1 - kRelativeSlack) - slack >= T) continue;
            double& next = chain[static_cast<size_t>((j + 1) * (L + 1) + f)];
            next = std::min(next, prefix_j + r);
          }
        }
      }
      return std::isfinite(chain[static_cast<size_t>(S * (L + 1) + L)]);
    };
    if (!admits(1)) continue;
    if (m_max == 1 || admits(m_max)) {  // at a slightly smaller T than `within`'s, often still all of them
      caps[b] = m_max;
      continue;
    }
    long lo = 1, hi = m_max;  // admits(lo), !admits(hi)
    while (hi - lo > 1) {
      const long mid = lo + (hi - lo) / 2;
      (admits(mid) ? lo : hi) = mid;
    }
    caps[b] = lo;
  }
  return caps;
}

PipelineRates::PipelineRates(const LowerBound& lb, const std::vector<std::vector<std::pair<int, int>>>& stages,
                             Recompute rc, int layers, int max_samples)
    : L_(layers) {
  const int S = static_cast<int>(stages.size());
  for (const auto& stage : stages) {
    std::map<std::pair<int, int>, int> count;  // groups of one node group and tp price alike
    for (const auto& g : stage) ++count[g];
    groups_.emplace_back();
    for (const auto& [g, c] : count) {
      const std::vector<double>& f = lb.per_sample_floor(g.first, g.second, rc, max_samples);
      std::vector<double> pre(L_ + 3, 0.0);
      for (int l = 0; l < L_; ++l) pre[l + 1] = pre[l] + f[l];
      pre[L_ + 1] = f[L_];
      pre[L_ + 2] = f[L_ + 1];
      groups_.back().emplace_back(std::move(pre), c);
    }
  }
  rest_.assign(S + 1, std::vector<double>(L_ + 1, kInf));
  rest_[S][L_] = 0;
  for (int j = S - 1; j >= 0; --j)
    for (int e = 0; e < L_; ++e)
      for (int f = e + 1; f <= L_; ++f) rest_[j][e] = std::min(rest_[j][e], std::max(rate(j, e, f), rest_[j + 1][f]));
}

double PipelineRates::rate(int j, int a, int e) const {
  double speed = 0;  // samples per second of the stage's groups at their floors
  for (const auto& [pre, count] : groups_[j]) {
    const double c = pre[e] - pre[a] + (a == 0 ? pre[L_ + 1] : 0.0) + (e == L_ ? pre[L_ + 2] : 0.0);
    if (c <= 0) return 0.0;
    speed += count / c;
  }
  return 1 / speed;
}

std::optional<double> LowerBound::plan_bound(const Plan& plan) const {
  if (plan.schedule != Schedule::OneFOneB || plan.interleave != 1 || plan.sequence_parallel) return 0.0;
  // Groups holding each layer (the ZeRO-1 shard count of a worker is that of its first layer).
  std::vector<int> holders(model_.layers, 0);
  for (const Pipeline& pl : plan.pipelines)
    for (const Stage& st : pl.stages)
      for (int l = st.layer_begin; l < st.layer_end; ++l) holders[l] += static_cast<int>(st.groups.size());
  // The gradient reduction (dense models with a known topology): each segment's buckets, and per group what
  // follows them (tied-embedding all-reduce, ZeRO-1 all-gather).
  Segments segments;
  Tails tails;
  if (topo_ && !model_.moe) reduction_tails(plan, &segments, &tails, true);
  // Per segment, per bucket: the latest time any holder can have it ready (a bucket starts once all have).
  std::map<int, std::vector<double>> ready;
  struct After {  // a group's segments and what it still runs once their buckets are reduced
    int begin, end;
    double rest;
  };
  std::vector<After> after;
  double bound = 0;
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pl = plan.pipelines[p];
    const int S = static_cast<int>(pl.stages.size()), m = pl.micro_batches;
    std::vector<std::vector<GroupTimes>> stages(S);
    for (int k = 0; k < S; ++k) {
      const Stage& st = pl.stages[k];
      const int dp = holders[st.layer_begin];
      const double in_flight = activations_in_flight(Schedule::OneFOneB, S, k, 1, m);
      for (const TpGroup& g : st.groups) {
        const int ng = cluster_.nodes[cluster_.node_of(g.gpus.front())].group;
        const double samples = pl.micro_batch * g.share;
        if (out_of_memory(ng, g.tp, samples, st.layer_begin, st.layer_end, plan.recompute, in_flight, plan.zero1, dp))
          return std::nullopt;
        GroupTimes t = group_times(ng, g.tp, samples, st.layer_begin, st.layer_end, plan.recompute, false, st.ep);
        if (plan.zero1) t.optimizer_s /= dp;  // ZeRO-1 steps 1/dp of the parameters
        stages[k].push_back(t);
      }
    }
    if (topo_ && transfers_) add_transfers(pl, stages);
    // Each group's last backward starts no earlier than the forward chain to its stage plus m forwards and
    // m - 1 backwards of its own (2m - 1 + k tasks of two rounded durations each).
    double chain_f = 0;
    for (int k = 0; k < S && !segments.empty(); ++k) {
      const Stage& st = pl.stages[k];
      double min_f = kInf;
      for (size_t gi = 0; gi < st.groups.size(); ++gi) {
        GroupTimes& t = stages[k][gi];
        const TpGroup& g = st.groups[gi];
        const int ng = cluster_.nodes[cluster_.node_of(g.gpus.front())].group;
        const double start = last_backward_start(chain_f, t, m, k);
        const double own = bucket_releases(segments, ng, g.tp, pl.micro_batch * g.share, st.layer_begin, st.layer_end,
                                           plan.recompute, start, &ready);
        t.tail_s = std::max(0.0, own - start - t.backward_s) + tails[p][k][gi];
        after.push_back({st.layer_begin, st.layer_end, tails[p][k][gi] + t.optimizer_s});
        min_f = std::min(min_f, t.forward_s + t.send_f_s);
      }
      chain_f += min_f;
    }
    bound = std::max(bound, pipeline_lower_bound(stages, m, {.round_trip = round_trip_}));
  }
  // Every holder of a segment waits for all its buckets, which start only once every holder has them ready.
  std::map<int, double> reduced;
  for (const auto& [a, buckets] : segments) reduced[a] = buckets_reduced(buckets, ready[a]);
  // Every link carries the bytes of the buckets released at or after any time r after r, at its capacity
  // at most (the flows sharing it max-min fairly): the last of them ends no earlier than r + bytes / capacity.
  std::map<LinkId, std::vector<std::pair<double, double>>> on_link;  // (release, bytes)
  for (const auto& [a, buckets] : segments)
    for (size_t b = 0; b < buckets.size(); ++b)
      for (const auto& [l, bytes] : buckets[b].link_bytes) on_link[l].emplace_back(ready[a][b], bytes);
  for (auto& [l, loads] : on_link) {
    std::sort(loads.begin(), loads.end());
    const double cap = topo_->links()[l].capacity;
    double bytes = 0;
    for (size_t i = loads.size(); i-- > 0;) {
      bytes += loads[i].second;
      if (cap > 0) bound = std::max(bound, loads[i].first + bytes / cap * (1 - kRelativeSlack) - 2 * kRoundingPerDuration);
    }
  }
  for (const After& w : after) {
    double done = 0;
    for (auto it = reduced.lower_bound(w.begin); it != reduced.end() && it->first < w.end; ++it) done = std::max(done, it->second);
    bound = std::max(bound, done + w.rest * (1 - kRelativeSlack) - kRoundingPerDuration);
  }
  return bound;
}

// A bucket is ready when the group's backward kernels reach its first layer (stage_work.cpp
// layer_grad_ready_s: the head, then the layers from the last; the embedding last) in its last backward,
// which starts at `start` or later. Raises ready[segment][bucket] to that time for the group's segments, and
// returns when the group's own buckets could be reduced at the earliest (buckets_reduced on its own times).
double LowerBound::bucket_releases(const Segments& segments, int node_group, int tp, double samples, int begin,
                                   int end, Recompute rc, double start, std::map<int, std::vector<double>>* ready) const {
  const Table& t = table(node_group, tp, samples, rc);
  auto compute = [&](int l) { return (t.bwd[l + 1] - t.bwd[l]) - (t.bwd_tp[l + 1] - t.bwd_tp[l]); };
  const int L = model_.layers;
  double own = start;
  for (auto it = segments.lower_bound(begin); it != segments.end() && it->first < end; ++it) {
    const std::vector<BucketFloor>& buckets = it->second;
    double release = end == L ? t.head_b - t.head_b_tp : 0.0;
    int next = end;
    std::vector<double> r(buckets.size());
    for (size_t b = 0; b < buckets.size(); ++b) {
      for (; next > buckets[b].layer_begin; --next) release += compute(next - 1);
      r[b] = start + (buckets[b].embedding ? release + t.emb_b : release) * (1 - kRelativeSlack) - 2 * kRoundingPerDuration;
    }
    if (ready) {
      std::vector<double>& latest = (*ready)[it->first];
      latest.resize(buckets.size(), 0.0);
      for (size_t b = 0; b < buckets.size(); ++b) latest[b] = std::max(latest[b], r[b]);
    }
    own = std::max(own, buckets_reduced(buckets, r));
  }
  return own;
}

double LowerBound::last_backward_start(double chain_f, const GroupTimes& t, int m, int k) {
  return (chain_f + m * (t.forward_s + t.send_f_s) + (m - 1) * (t.backward_s + t.send_b_s)) * (1 - kRelativeSlack) -
         2.0 * (2.0 * m + k) * kRoundingPerDuration;
}

// Each group's exchanges with the neighbouring stages as build_stage_work lowers them (sim/exec/stage_work.cpp):
// one transfer to each group of the next (activations) and previous (gradients) stage whose sample interval
// overlaps its own, of the overlap's samples. Its exchange after a task waits for all of them; the least is
// kept (it also bounds the transfer that carries micro-batch 0 on the chains).
void LowerBound::add_transfers(const Pipeline& pl, std::vector<std::vector<GroupTimes>>& stages) const {
  auto interval = [](const Stage& st, size_t g) {
    double lo = 0;
    for (size_t i = 0; i < g; ++i) lo += st.groups[i].share;
    return std::make_pair(lo, lo + st.groups[g].share);
  };
  const int S = static_cast<int>(pl.stages.size());
  for (int k = 0; k < S; ++k)
    for (size_t g = 0; g < pl.stages[k].groups.size(); ++g) {
      const auto [lo, hi] = interval(pl.stages[k], g);
      for (const int dir : {0, 1}) {
        const int nk = dir == 0 ? k + 1 : k - 1;
        if (nk < 0 || nk >= S) continue;
        double least = kInf;
        for (size_t h = 0; h < pl.stages[nk].groups.size(); ++h) {
          const auto [nlo, nhi] = interval(pl.stages[nk], h);
          const double overlap = std::min(hi, nhi) - std::max(lo, nlo);
          if (overlap <= 1e-12) continue;
          least = std::min(least, transfer_floor(pl.stages[k].groups[g], pl.stages[nk].groups[h], overlap * pl.micro_batch));
        }
        if (std::isfinite(least)) (dir == 0 ? stages[k][g].send_f_s : stages[k][g].send_b_s) = least;
      }
    }
}

// make_link's bundle (sim/exec/stage_work.cpp) moves its members in lockstep at a member rate no larger than
// any link's capacity on their routes (max-min fair shares, and a mirrored bundle's rate bound, are at most
// min capacity / multiplicity, sim/net/flow_network.h), after its latency; the engine rounds the latency and
// the completion to the nanosecond.
double LowerBound::transfer_floor(const TpGroup& src, const TpGroup& dst, double samples) const {
  if (!topo_) return 0.0;
  const int k = std::min(src.tp, dst.tp);
  double latency = 0, cap = kInf;
  for (int j = 0; j < k; ++j) {
    const GpuId a = src.gpus[static_cast<size_t>(j) * src.tp / k];
    const GpuId b = dst.gpus[static_cast<size_t>(j) * dst.tp / k];
    latency = std::max(latency, topo_->latency_s(a, b));
    for (const LinkId l : topo_->route(a, b)) cap = std::min(cap, topo_->links()[l].capacity);
  }
  latency += cluster_.gpu_spec(src.gpus.front()).compute.collective_overhead_s;
  const double bytes = p2p_bytes(model_, samples) / k;
  const double t = latency + (std::isfinite(cap) && cap > 0 ? bytes / cap : 0.0);
  return std::max(0.0, t * (1 - kRelativeSlack) - 2 * kRoundingPerDuration);
}

// Each bucket's floor is reduction_tails' for one placement; the least over the placements is no more than the
// floor of whichever of them the plan takes. The buckets (layers, parameters) depend only on the holders'
// count and tp, which every placement shares.
LowerBound::ReductionFloor LowerBound::reduction_floor(const Plan& plan,
                                                       const std::vector<std::vector<std::vector<GpuId>>>& placements) const {
  ReductionFloor floor;
  if (!topo_ || model_.moe) return floor;
  Plan placed = plan;
  for (size_t p = 0; p == 0 || p < placements.size(); ++p) {
    if (!placements.empty()) {
      size_t i = 0;
      for (Pipeline& pl : placed.pipelines)
        for (Stage& st : pl.stages)
          for (TpGroup& g : st.groups) g.gpus = placements[p].at(i++);
    }
    Segments segments;
    Tails tails;
    reduction_tails(placed, &segments, &tails, false);
    if (p == 0) {
      floor.segments = std::move(segments);
      floor.after = std::move(tails);
      continue;
    }
    for (size_t i = 0; i < tails.size(); ++i)
      for (size_t k = 0; k < tails[i].size(); ++k)
        for (size_t g = 0; g < tails[i][k].size(); ++g)
          floor.after[i][k][g] = std::min(floor.after[i][k][g], tails[i][k][g]);
    for (auto& [a, buckets] : floor.segments) {
      const std::vector<BucketFloor>& other = segments.at(a);
      if (other.size() != buckets.size()) throw std::logic_error("reduction_floor: bucket layout depends on placement");
      for (size_t b = 0; b < buckets.size(); ++b) buckets[b].busy_s = std::min(buckets[b].busy_s, other[b].busy_s);
    }
  }
  return floor;
}

LowerBound::ReductionFloor LowerBound::placement_free_floor(const Plan& plan) const {
  ReductionFloor floor;
  if (!placement_free()) return floor;
  reduction_tails(plan, &floor.segments, &floor.after, false, true);
  return floor;
}

namespace {
// Spreads listed per holder list at most (beyond: no floor, 0).
constexpr size_t kMaxSpreads = 4096;
constexpr long kMaxSpreadSteps = 200000;
}  // namespace

// A slice's members are one GPU of each holder, in the holder's node, sorted by GPU id; collective_transfers
// builds its rings from them by node (nodes in GPU order) and position in the node, so with every GPU pair
// of two nodes alike (placement_free()) each flow's floor, hence the collective's, is that of the lowest
// GPUs of each node with the same counts. Every spread of the holders over nodes of their node group with
// room for their tp (GPUs of other groups only take room) is listed; the least floor bounds all of them.
double LowerBound::holders_floor(CollectiveKind kind, const std::vector<std::pair<int, int>>& holders, double bytes) const {
  if (holders.size() < 2) return 0.0;
  const auto key = std::make_tuple(static_cast<int>(kind), bytes, holders);
  auto hit = holders_floors_.find(key);
  if (hit != holders_floors_.end()) return hit->second;
  auto it = spreads_.find(holders);
  if (it == spreads_.end()) {
    const int N = static_cast<int>(cluster_.nodes.size());
    std::vector<int> room(N), count(N, 0);
    for (int n = 0; n < N; ++n) room[n] = cluster_.nodes[n].gpus;
    std::set<std::vector<int>> seen;
    long steps = 0;
    bool all = true;
    // Holders in sorted order; equal holders take non-decreasing nodes (they are interchangeable).
    std::function<void(size_t, int)> rec = [&](size_t i, int from) {
      if (!all) return;
      if (++steps > kMaxSpreadSteps) {
        all = false;
        return;
      }
      if (i == holders.size()) {
        seen.insert(count);
        if (seen.size() > kMaxSpreads) all = false;
        return;
      }
      const auto [ng, tp] = holders[i];
      const int start = i > 0 && holders[i - 1] == holders[i] ? from : 0;
      for (int n = start; n < N; ++n) {
        if (cluster_.nodes[n].group != ng || room[n] < tp) continue;
        room[n] -= tp;
        ++count[n];
        rec(i + 1, n);
        --count[n];
        room[n] += tp;
      }
    };
    rec(0, 0);
    std::optional<std::vector<std::vector<GpuId>>> members;
    if (all) {
      members.emplace();
      for (const std::vector<int>& c : seen) {
        std::vector<GpuId> m;
        for (int n = 0; n < N; ++n)
          for (int k = 0; k < c[n]; ++k) m.push_back(cluster_.nodes[n].first_gpu + k);
        std::sort(m.begin(), m.end());
        members->push_back(std::move(m));
      }
    }
    it = spreads_.emplace(holders, std::move(members)).first;
  }
  double least = 0;
  if (it->second) {
    least = kInf;
    for (const std::vector<GpuId>& m : *it->second) least = std::min(least, collective_floor(kind, m, bytes));
    if (!std::isfinite(least)) least = 0;  // no spread (the plan's own is one: cannot happen)
  }
  return holders_floors_.emplace(key, least).first->second;
}

double LowerBound::reduction_tail(const ReductionFloor& floor, const LayoutGroup& g, int begin, int end, Recompute rc,
                                  const GroupTimes& t, double chain_f, int m, int k) const {
  if (floor.segments.empty()) return 0.0;
  const double start = last_backward_start(chain_f, t, m, k);
  const double own = bucket_releases(floor.segments, g.node_group, g.tp, g.samples, begin, end, rc, start, nullptr);
  return std::max(0.0, own - start - t.backward_s);
}

// plan_bound's per-pipeline term (without its memory proof and the ZeRO-1 step, which only add): each group's
// tail from its own bucket releases under the floors, plus `after`, all no larger than the plan's;
// bucket_releases and pipeline_lower_bound only grow with bucket floors and tails.
double LowerBound::pipeline_bound(const std::vector<int>& cuts, const std::vector<std::vector<LayoutGroup>>& groups,
                                  int m, Recompute rc, bool zero1, const ReductionFloor& floor,
                                  const std::vector<std::vector<double>>* after) const {
  const int S = static_cast<int>(groups.size());
  std::vector<std::vector<GroupTimes>> stages(S);
  double chain_f = 0;
  for (int k = 0; k < S; ++k) {
    double min_f = kInf;
    for (size_t gi = 0; gi < groups[k].size(); ++gi) {
      const LayoutGroup& g = groups[k][gi];
      GroupTimes t = group_times(g.node_group, g.tp, g.samples, cuts[k], cuts[k + 1], rc, zero1);
      if (!floor.segments.empty())
        t.tail_s = reduction_tail(floor, g, cuts[k], cuts[k + 1], rc, t, chain_f, m, k) + (after ? (*after)[k][gi] : 0.0);
      min_f = std::min(min_f, t.forward_s);
      stages[k].push_back(t);
    }
    chain_f += min_f;
  }
  return pipeline_lower_bound(stages, m, {.round_trip = round_trip_});
}

// The buckets of a segment run one at a time on its communicator, in the order they become ready (fill order,
// sim/exec/grad_sync.cpp), each for its overhead + collective floor at least: a one-machine schedule with
// release times, which ends no earlier than any release plus the work released at or after it.
double LowerBound::buckets_reduced(const std::vector<BucketFloor>& buckets, const std::vector<double>& release) {
  double done = 0, work = 0;
  for (size_t b = buckets.size(); b-- > 0;) {
    work += buckets[b].busy_s;
    if (b < release.size()) done = std::max(done, release[b] + work);
  }
  return done;
}

// Every phase of the collective runs after the previous one has finished; a phase ends when its slowest
// flow does, and a flow ends no earlier than its latency plus its bytes at its route's least capacity
// (sim/net/flow_network.h: max-min fair shares never exceed a link's capacity).
double LowerBound::collective_floor(CollectiveKind kind, const std::vector<GpuId>& members, double bytes) const {
  if (members.size() < 2 || !topo_) return 0.0;
  auto it = collective_floors_.find(FloorQuery{static_cast<int>(kind), bytes, &members});
  if (it != collective_floors_.end()) return it->second;
  std::map<int, double> phase_end;
  for (const CollectiveTransfer& x : collective_transfers(*topo_, kind, members, bytes)) {
    double cap = kInf;
    for (const LinkId l : topo_->route(x.src, x.dst)) cap = std::min(cap, topo_->links()[l].capacity);
    const double t = ns_to_seconds(x.latency) + (std::isfinite(cap) && cap > 0 ? x.bytes / cap : 0.0);
    double& e = phase_end[x.phase];
    e = std::max(e, t);
  }
  double total = 0;
  for (const auto& [phase, t] : phase_end)  // each phase: its latency and completion rounded to the ns
    total += std::max(0.0, t * (1 - kRelativeSlack) - 2 * kRoundingPerDuration);
  return collective_floors_.emplace(FloorKey{static_cast<int>(kind), bytes, members}, total).first->second;
}

size_t LowerBound::FloorKeyHash::hash(int kind, double bytes, const std::vector<GpuId>& members) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a over the kind, the bytes' bits and the members
  auto mix = [&h](std::uint64_t x) { h = (h ^ x) * 1099511628211ULL; };
  mix(static_cast<std::uint64_t>(kind));
  std::uint64_t bits = 0;
  std::memcpy(&bits, &bytes, sizeof bits);
  mix(bits);
  for (const GpuId g : members) mix(static_cast<std::uint64_t>(g));
  return static_cast<size_t>(h);
}

// The buckets of a dense plan (sim/exec/grad_sync.cpp, GradSync's constructor): layers are cut at every
// stage boundary; a segment [a, b) is held by every group whose stage holds it; its buckets are filled from
// layer b - 1 down in Megatron's sizes (a flush at >= max(40M, 1M x holders) parameters per rank of the most
// sharded holder), the head joining the first and the embedding the last; each is reduced (ZeRO-1:
// reduce-scattered) in lcm(tp) slices after the slowest holder's call overhead. `segments` gets, per segment,
// each bucket's overhead + collective floor; `tails` per group what follows all of them: the tied-embedding
// all-reduce (first and last stage, 2+ stages) and ZeRO-1's all-gathers (its buckets', concurrently).
void LowerBound::reduction_tails(const Plan& plan, Segments* segments, Tails* tails, bool link_loads,
                                 bool placement_free) const {
  const int L = model_.layers;
  std::set<int> cuts{0, L};
  for (const Pipeline& pl : plan.pipelines)
    for (const Stage& st : pl.stages) cuts.insert(st.layer_begin), cuts.insert(st.layer_end);
  const double grad_bytes = reduced_grad_bytes_per_param(model_);
  const double param_bytes = model_.dtype == "fp32" ? 4.0 : 2.0;
  auto overhead = [&](const TpGroup& g) { return overhead_[cluster_.nodes[cluster_.node_of(g.gpus.front())].group]; };
  // Slices of a bucket over `holders`: one collective per slice, concurrently; the slowest slice's floor.
  auto floor_of = [&](CollectiveKind kind, const std::vector<const TpGroup*>& holders, double params,
                      double bytes_per_param, std::map<LinkId, double>* loads = nullptr) {
    if (holders.size() < 2) return 0.0;  // nothing to reduce: done at once
    int lcm = 1;
    double ovh = 0;
    for (const TpGroup* h : holders) lcm = std::lcm(lcm, h->tp), ovh = std::max(ovh, overhead(*h));
    if (placement_free) {  // every slice has one member per holder, in the holder's node: the same counts
      std::vector<std::pair<int, int>> kinds;
      for (const TpGroup* h : holders) kinds.emplace_back(cluster_.nodes[cluster_.node_of(h->gpus.front())].group, h->tp);
      std::sort(kinds.begin(), kinds.end());
      return std::max(0.0, ovh - kRoundingPerDuration) + holders_floor(kind, kinds, params / lcm * bytes_per_param);
    }
    double worst = 0;
    for (int k = 0; k < lcm; ++k) {
      std::vector<GpuId>& members = members_scratch_;
      members.clear();
      for (const TpGroup* h : holders) members.push_back(h->gpus[static_cast<size_t>(k) * h->tp / lcm]);
      std::sort(members.begin(), members.end());
      const double bytes = params / lcm * bytes_per_param;
      worst = std::max(worst, collective_floor(kind, members, bytes));
      if (loads)
        for (const CollectiveTransfer& x : collective_transfers(*topo_, kind, members, bytes))
          for (const LinkId l : topo_->route(x.src, x.dst)) (*loads)[l] += x.bytes;
    }
    return std::max(0.0, ovh - kRoundingPerDuration) + worst;
  };
  const CollectiveKind kind = plan.zero1 ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
  std::map<int, double> gather;  // per segment: ZeRO-1 all-gather floor of its last bucket
  for (const int a : cuts) {
    if (a == L) continue;
    const int b = *cuts.upper_bound(a);
    std::vector<const TpGroup*> holders;
    int max_tp = 1;
    for (const Pipeline& pl : plan.pipelines)
      for (const Stage& st : pl.stages)
        if (st.layer_begin <= a && b <= st.layer_end)
          for (const TpGroup& g : st.groups) holders.push_back(&g), max_tp = std::max(max_tp, g.tp);
    const double limit = std::max(40e6, 1e6 * static_cast<double>(holders.size()));
    std::vector<BucketFloor>& out = (*segments)[a];
    auto add = [&](int first, bool embedding, double params) {
      BucketFloor bf{first, embedding, 0.0, {}};
      std::map<LinkId, double> loads;
      bf.busy_s = floor_of(kind, holders, params, grad_bytes, link_loads ? &loads : nullptr);
      bf.link_bytes.assign(loads.begin(), loads.end());
      out.push_back(std::move(bf));
      if (plan.zero1) gather[a] = std::max(gather[a], floor_of(CollectiveKind::AllGather, holders, params, param_bytes));
    };
    double cur = b == L ? head_params_per_rank(model_, 1) : 0.0;
    for (int l = b - 1; l >= a; --l) {
      cur += layer_params_per_rank(model_, l, 1);
      if (cur / max_tp >= limit) add(l, false, cur), cur = 0;
    }
    if (a == 0) add(0, true, cur + embedding_params_per_rank(model_, 1));
    else if (cur > 0) add(a, false, cur);
  }
  tails->assign(plan.pipelines.size(), {});
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pl = plan.pipelines[p];
    const int S = static_cast<int>(pl.stages.size());
    double tied_s = 0;
    if (model_.tied_embeddings() && S >= 2) {
      std::vector<const TpGroup*> ends;
      for (const int k : {0, S - 1})
        for (const TpGroup& g : pl.stages[k].groups) ends.push_back(&g);
      tied_s = floor_of(CollectiveKind::AllReduce, ends, static_cast<double>(model_.vocab) * model_.hidden, grad_bytes);
    }
    for (int k = 0; k < S; ++k) {
      const Stage& st = pl.stages[k];
      double gathered = 0;  // all its buckets are gathered concurrently after its step: the slowest
      for (auto it = gather.lower_bound(st.layer_begin); it != gather.end() && it->first < st.layer_end; ++it)
        gathered = std::max(gathered, it->second);
      (*tails)[p].emplace_back(st.groups.size(), (k == 0 || k == S - 1 ? tied_s : 0.0) + gathered);
    }
  }
}

}  // namespace arachne::planner
