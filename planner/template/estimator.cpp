// The fast estimator (see estimator.h for the model and what it leaves out).
#include "planner/template/estimator.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "planner/common/layer_prices.h"
#include "planner/template/estimator_coefficients.h"
#include "planner/template/link_groups.h"
#include "sim/exec/grad_sync.h"
#include "sim/exec/pipeline_schedule.h"
#include "sim/exec/stage_work.h"
#include "sim/model/compute_time.h"
#include "sim/model/layer_costs.h"
#include "sim/model/memory.h"
#include "sim/model/moe_costs.h"
#include "sim/model/moe_routing.h"
#include "sim/net/collectives.h"

namespace arachne::planner {

EstimatorCoefficients fitted_estimator_coefficients() { return kFittedEstimatorCoefficients; }

namespace {

// What price_pass (sim/exec/stage_work.cpp) reports for a pass, summable over layers: kernels, the TP
// collectives' closed-form time inside a node, and their volume and call count (for groups across nodes).
struct Cost {
  double compute = 0, tp_s = 0, tp_bytes = 0, tp_calls = 0;
  Cost& operator+=(const Cost& o) {
    compute += o.compute, tp_s += o.tp_s, tp_bytes += o.tp_bytes, tp_calls += o.tp_calls;
    return *this;
  }
  Cost operator-(const Cost& o) const {
    return {compute - o.compute, tp_s - o.tp_s, tp_bytes - o.tp_bytes, tp_calls - o.tp_calls};
  }
};

Cost cost_of(const PassCost& p) { return {p.compute_s, p.tp_closed_form_s, p.tp_bytes, static_cast<double>(p.tp_collectives)}; }

// Per-layer prefix sums of pass costs for one (node group, tp, samples, recompute, sequence parallelism),
// as build_stage_work prices them layer by layer.
struct Table {
  std::vector<Cost> fwd, bwd;                 // size layers + 1
  std::vector<double> fwd_dense, bwd_dense;   // expert-parallel passes: kernels without routed experts
  Cost emb_f, emb_b, head_f, head_b;
};

// A flow of a collective, all-to-all or pipeline transfer.
struct Flow {
  GpuId src = 0, dst = 0;
  double bytes = 0;
  double latency_s = 0;
};

// One phase of a collective whose volume scales with the buffer: lasts latency + buffer x per_byte.
struct Phase {
  double latency_s = 0, per_byte_s = 0;
};

// A collective's phases, and the links it keeps busiest: seconds per byte of buffer on each (summed over its
// phases), those within a factor 4 of its most loaded link, and every spine link it crosses (flows_time).
struct CollectiveShape {
  std::vector<Phase> phases;
  std::vector<std::pair<int, double>> busy_links;  // ascending link
};

struct Chunk {
  int vstage = 0, begin = 0, end = 0;
  bool emb = false, head = false;
  double samples = 0;
  const Table* table = nullptr;
  double forward_s = 0, backward_s = 0;  // one task, coefficients applied
  double backward_compute_s = 0;         // kernels of the backward (gradient readiness)
  // Expert parallelism (as build_stage_work sets it).
  int ep = 1, ep_rank = 0, ep_etp = 1;
  double local_experts = -1;
  std::vector<int> ep_peers;  // workers
  bool ep_members = false;    // EP ranks inside the stage's TP groups
  double params = 0;
};

struct Worker {
  int pipeline = 0, rank = 0, group = 0;
  const TpGroup* tg = nullptr;
  int node_group = 0;
  bool one_node = true;
  const GpuSpec* gpu = nullptr;
  std::vector<Chunk> chunks;
  int dp_degree = 1;
  double optimizer_s = 0;
  // Filled by the schedule and the gradient reduction.
  std::vector<double> last_backward_start;  // per chunk
  double backward_done = 0, reduced = 0, finished = 0;
  // A fresh worker that keeps its vectors' memory.
  void reset() {
    std::vector<Chunk> c = std::move(chunks);
    std::vector<double> l = std::move(last_backward_start);
    *this = Worker{};
    c.clear(), l.clear();
    chunks = std::move(c), last_backward_start = std::move(l);
  }
};

// Hash of a cache key (a vector of numbers): of each double its bits, 0.0 and -0.0 alike (as the key's ==
// compares them).
struct VectorHash {
  static std::uint64_t bits(int x) { return static_cast<std::uint64_t>(static_cast<std::uint32_t>(x)); }
  static std::uint64_t bits(double x) {
    std::uint64_t b = 0;
    if (x != 0) std::memcpy(&b, &x, sizeof b);
    return b;
  }
  template <class T>
  std::size_t operator()(const std::vector<T>& v) const {
    std::uint64_t h = 1469598103934665603ULL ^ v.size();
    for (const T& x : v) h = (h ^ bits(x)) * 1099511628211ULL;
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};

// A step of a rank program (sim/exec/pipeline_schedule.h ScheduleStep) with the fields the estimator's
// recurrence reads, in 20 bytes instead of 72: a deep pipeline's programs are long (four steps per
// micro-batch and rank).
struct Step {
  struct Task {
    int micro_batch = 0;
    std::uint8_t chunk = 0;
    bool forward = true;
  };
  struct Ref {  // a send or receive: the task whose tensor it carries
    std::uint8_t chunk = 0;
    bool forward = true;
  };
  bool exchange = false, eager = false;
  std::uint8_t num_sends = 0, num_recvs = 0;
  Task task;
  std::array<Ref, 2> sends{}, recvs{};
};

Step compact(const ScheduleStep& s) {
  Step out;
  out.exchange = s.exchange;
  out.eager = s.eager;
  out.num_sends = static_cast<std::uint8_t>(s.num_sends);
  out.num_recvs = static_cast<std::uint8_t>(s.num_recvs);
  out.task = {s.task.micro_batch, static_cast<std::uint8_t>(s.task.chunk), s.task.forward};
  for (int i = 0; i < 2; ++i) {
    out.sends[i] = {static_cast<std::uint8_t>(s.sends[i].chunk), s.sends[i].forward};
    out.recvs[i] = {static_cast<std::uint8_t>(s.recvs[i].chunk), s.recvs[i].forward};
  }
  return out;
}

// Expected tokens an expert keeps when `tokens` tokens are routed (sim/model/moe_routing.cpp draws a
// multinomial over Zipf shares under a uniform random permutation, then cuts at the capacity): averaged over
// the ranks an expert may take, E[min(X, c)] = mu - E[(X - c)+] with X ~ Bin(n, p) taken as normal,
// E[(X - c)+] = sigma phi(z) - (c - mu)(1 - Phi(z)), z = (c - mu) / sigma (normal approximation of the
// binomial).
double expected_kept_per_expert(const MoeConfig& moe, long tokens) {
  const int e = moe.experts;
  const double n = static_cast<double>(tokens) * moe.top_k;
  const double cap = std::ceil(moe.capacity_factor * n / e);
  const std::vector<double> share = zipf_shares(e, moe.routing_skew);
  double total = 0;
  for (double p : share) {
    const double mu = n * p, sigma = std::sqrt(std::max(n * p * (1 - p), 1e-12));
    const double z = (cap - mu) / sigma;
    const double phi = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI), upper = 0.5 * std::erfc(z / std::sqrt(2.0));
    total += mu - std::max(0.0, sigma * phi - (cap - mu) * upper);
  }
  return total / e;
}

}  // namespace

struct Estimator::Impl {
  const Cluster& cluster;
  const Topology& topo;
  const ModelConfig& model;
  EstimatorCoefficients coef;
  int L = 0;
  size_t link_count = 0;  // the topology's

  // Caches (not thread-safe).
  mutable std::map<std::tuple<int, int, double, int, bool>, Table> tables;
  mutable std::unordered_map<std::vector<int>, CollectiveShape, VectorHash> collective_phases;  // by kind and member sets
  mutable std::map<std::tuple<int, int, int, bool, bool, int, bool, double, int, bool, int, double, int>,
                   std::pair<MemoryBreakdown, MemoryBreakdown>>
      memory_lines;  // stage_memory at in_flight 0 and 1 (it is affine in in_flight)
  mutable std::map<int, std::array<std::vector<double>, 3>> params_prefix;  // per tp: full, dense, experts
  mutable std::map<long, double> kept_per_expert;
  mutable std::vector<double> load;  // per link, bytes (scratch)
  mutable std::vector<int> touched;
  // Rank programs by (schedule, depth, rank, chunks, micro-batches) in the compact form the recurrence reads
  // (Step), kept only while short: a long one (many micro-batches) is made again at each use into a per-rank
  // buffer, since keeping each would touch fresh memory for every micro-batch count.
  static constexpr long kKeptProgramTasks = 128;  // chunks x micro-batches
  mutable std::map<std::tuple<Schedule, int, int, int, int>, std::vector<Step>> programs;
  mutable std::vector<std::vector<Step>> long_programs;  // per rank (scratch of schedule)
  mutable std::vector<ScheduleStep> program_scratch;     // rank_program's output before compaction
  // One pipeline boundary's transfer (transfer): its time (coefficient applied), its latency, and the
  // seconds it keeps its busy links busy (those loaded at least a quarter as long as its most loaded one: a
  // lighter load cannot become its bottleneck unless others' loads there are several times its own).
  struct Transfer {
    double s = 0, latency_s = 0;
    std::vector<std::pair<int, double>> links;
  };
  mutable std::unordered_map<std::vector<double>, Transfer, VectorHash> transfers;  // by stages and micro-batch
  // Schedules by their inputs (schedule, depth, chunks, micro-batches, task and transfer times): per rank its
  // end, then its last-backward start per chunk.
  mutable std::unordered_map<std::vector<double>, std::vector<double>, VectorHash> schedules;
  // Routed experts of one EP rank, forward and backward, by GPU type, shards, experts, tokens each, full recompute.
  mutable std::map<std::tuple<const GpuSpec*, int, int, long, bool>, std::pair<double, double>> experts_s;
  // One MoE all-to-all by its layout and tokens: its time, and the seconds it keeps each link it loads busy.
  struct AllToAll {
    double s = 0;
    std::vector<std::pair<int, double>> links;
  };
  mutable std::unordered_map<std::vector<double>, AllToAll, VectorHash> alltoalls;
  mutable std::vector<double> scratch_key;

  Impl(const Cluster& c, const Topology& t, const ModelConfig& m, const EstimatorCoefficients& k)
      : cluster(c), topo(t), model(m), coef(k), L(m.layers), link_count(topo.links().size()) {
    load.assign(topo.links().size(), 0.0);
    for (const Node& n : cluster.nodes) node_of.insert(node_of.end(), n.gpus, n.id);
    for (const NodeGroup& g : cluster.groups) group_spec.push_back(&cluster.catalog.at(g.gpu));
  }

  std::vector<int> node_of;                  // per GPU
  std::vector<const GpuSpec*> group_spec;    // per node group: its GPU (Cluster::gpu_spec without the lookup)
  int node_group_of(GpuId g) const { return cluster.nodes[node_of[g]].group; }

  // ---------------------------------------------------------------- passes
  // build_stage_work's pricing, one layer at a time (planner/common/layer_prices.h), as prefix sums.
  // Expert-parallel passes price their dense kernels only (the routed experts are added per EP group).
  Table build_table(int node_group, int tp, double samples, Recompute rc, bool sp) const {
    const LayerPrices p = price_layers(cluster, model, node_group, tp, samples, rc, sp);
    Table t;
    t.fwd.assign(L + 1, Cost{});
    t.bwd.assign(L + 1, Cost{});
    t.fwd_dense.assign(L + 1, 0.0);
    t.bwd_dense.assign(L + 1, 0.0);
    for (int l = 0; l < L; ++l) {
      t.fwd[l + 1] = t.fwd[l];
      t.fwd[l + 1] += cost_of(p.forward[l]);
      t.bwd[l + 1] = t.bwd[l];
      t.bwd[l + 1] += cost_of(p.backward[l]);
      if (!model.moe) continue;  // only expert-parallel passes use the dense-only prices
      t.fwd_dense[l + 1] = t.fwd_dense[l] + p.forward_dense_s[l];
      t.bwd_dense[l + 1] = t.bwd_dense[l] + p.backward_dense_s[l];
    }
    t.emb_f = cost_of(p.embedding_forward);
    t.emb_b = cost_of(p.embedding_backward);
    t.head_f = cost_of(p.head_forward);
    t.head_b = cost_of(p.head_backward);
    return t;
  }

  const Table& table(int node_group, int tp, double samples, Recompute rc, bool sp) const {
    const auto key = std::make_tuple(node_group, tp, samples, static_cast<int>(rc), sp);
    auto it = tables.find(key);
    if (it == tables.end()) it = tables.emplace(key, build_table(node_group, tp, samples, rc, sp)).first;
    return it->second;
  }

  // ---------------------------------------------------------------- links
  // The time concurrent flows take when each is limited by its route's most loaded link (summed bytes over
  // capacity; sim/net/flow_network.h shares links max-min fairly, so the most loaded link finishes last) plus
  // the largest latency. Contention with flows outside the set is ignored. `busy` receives each link whose
  // load over capacity is at least `busy_fraction` of the most loaded one's, with that time, and every spine
  // link: a leaf's uplink is many times faster than one NIC, so one collective barely loads it, but it
  // carries the traffic of every node of its leaf (sim/hw/topology.cpp: the leaf's NIC capacity over the
  // oversubscription), and the links several communicators share (shared_links) must count it.
  static constexpr double kBusyFraction = 0.25;
  bool kept_as_busy(int link, double t, double worst, double busy_fraction) const {
    return t >= worst * busy_fraction || topo.links()[link].cls == LinkClass::Spine;
  }
  double flows_time(const std::vector<Flow>& flows, std::vector<std::pair<int, double>>* busy = nullptr,
                    double busy_fraction = kBusyFraction) const {
    double lat = 0;
    for (const Flow& f : flows) {
      if (f.src == f.dst || f.bytes <= 0) continue;
      lat = std::max(lat, f.latency_s);
      for (LinkId l : topo.route(f.src, f.dst)) {
        if (load[l] == 0) touched.push_back(l);
        load[l] += f.bytes;
      }
    }
    double worst = 0;
    for (int l : touched) worst = std::max(worst, load[l] / topo.links()[l].capacity);
    for (int l : touched) {
      const double t = load[l] / topo.links()[l].capacity;
      if (busy && kept_as_busy(l, t, worst, busy_fraction)) busy->push_back({l, t});
      load[l] = 0;
    }
    touched.clear();
    return lat + worst;
  }

  // Phases of `kind` run at once over each of `sets` (GradSync::launch: one collective per TP slice), per
  // byte of buffer: the flows collective_transfers (sim/net/collectives.cpp) starts for one byte, their
  // bottleneck link per phase. Cached by kind and member sets.
  mutable std::vector<int> phases_key;  // scratch of phases
  const CollectiveShape& phases(CollectiveKind kind, const std::vector<std::vector<GpuId>>& sets) const {
    std::vector<int>& key = phases_key;
    key.assign(1, static_cast<int>(kind));
    for (const auto& s : sets) {
      key.push_back(-1);
      key.insert(key.end(), s.begin(), s.end());
    }
    auto it = collective_phases.find(key);
    if (it != collective_phases.end()) return it->second;
    std::vector<int> fresh_key = key;
    std::vector<std::vector<Flow>> by_phase;
    for (const auto& s : sets)
      for (const CollectiveTransfer& t : collective_transfers(topo, kind, s, 1.0)) {
        if (static_cast<int>(by_phase.size()) <= t.phase) by_phase.resize(t.phase + 1);
        by_phase[t.phase].push_back({t.src, t.dst, t.bytes, ns_to_seconds(t.latency)});
      }
    CollectiveShape out;
    std::vector<std::pair<int, double>> busy;
    for (const auto& flows : by_phase) {
      double lat = 0;
      for (const Flow& f : flows) lat = std::max(lat, f.latency_s);
      std::vector<Flow> scaled = flows;
      for (Flow& f : scaled) f.latency_s = 0;
      out.phases.push_back({lat, flows_time(scaled, &busy)});
    }
    std::sort(busy.begin(), busy.end());
    for (const auto& [l, t] : busy) {
      if (!out.busy_links.empty() && out.busy_links.back().first == l) out.busy_links.back().second += t;
      else out.busy_links.push_back({l, t});
    }
    return collective_phases.emplace(std::move(fresh_key), std::move(out)).first->second;
  }

  static double phases_time(const CollectiveShape& c, double bytes) {
    double t = 0;
    for (const Phase& p : c.phases) t += p.latency_s + bytes * p.per_byte_s;
    return t;
  }

  // ---------------------------------------------------------------- workers
  // One worker per TP group of a physical stage, its chunks, passes, EP layout, parameters and optimizer
  // step, as build_stage_work lowers the plan.
  // Fills `ws` and `worker_of` (the estimator's scratch: their memory is reused from plan to plan).
  void lower(const Plan& plan, std::vector<std::vector<std::vector<int>>>& worker_of, std::vector<Worker>& ws) const {
    const bool interleaved = plan.schedule == Schedule::Interleaved;
    const int chunks = interleaved ? plan.interleave : 1;
    size_t workers = 0;
    for (const Pipeline& pl : plan.pipelines)
      for (size_t r = 0; r < pl.stages.size() / chunks; ++r) workers += pl.stages[r].groups.size();
    ws.resize(workers);
    size_t next = 0;
    worker_of.resize(plan.pipelines.size());
    for (size_t p = 0; p < plan.pipelines.size(); ++p) {
      const Pipeline& pl = plan.pipelines[p];
      const int depth = static_cast<int>(pl.stages.size()) / chunks;
      worker_of[p].resize(pl.stages.size());
      for (auto& groups : worker_of[p]) groups.clear();
      for (int r = 0; r < depth; ++r)
        for (size_t g = 0; g < pl.stages[r].groups.size(); ++g) {
          Worker& w = ws[next];
          w.reset();
          w.pipeline = static_cast<int>(p);
          w.rank = r;
          w.group = static_cast<int>(g);
          w.tg = &pl.stages[r].groups[g];
          w.node_group = node_group_of(w.tg->gpus.front());
          w.gpu = group_spec[w.node_group];
          const int n0 = node_of[w.tg->gpus.front()];
          w.one_node = std::all_of(w.tg->gpus.begin(), w.tg->gpus.end(), [&](GpuId x) { return node_of[x] == n0; });
          for (int c = 0; c < chunks; ++c) worker_of[p][c * depth + r].push_back(static_cast<int>(next));
          ++next;
        }
    }
    std::vector<int>& holders = layer_holders;
    holders.assign(L, 0);
    for (const Pipeline& pl : plan.pipelines)
      for (const Stage& st : pl.stages)
        for (int l = st.layer_begin; l < st.layer_end; ++l) holders[l] += static_cast<int>(st.groups.size());
    for (size_t p = 0; p < plan.pipelines.size(); ++p) {
      const Pipeline& pl = plan.pipelines[p];
      const int nst = static_cast<int>(pl.stages.size());
      for (int j = 0; j < nst; ++j) {
        const Stage& st = pl.stages[j];
        for (size_t g = 0; g < st.groups.size(); ++g) {
          Worker& w = ws[worker_of[p][j][g]];
          Chunk c;
          c.vstage = j;
          c.begin = st.layer_begin;
          c.end = st.layer_end;
          c.emb = j == 0;
          c.head = j == nst - 1;
          c.samples = pl.micro_batch * w.tg->share;
          c.table = &table(w.node_group, w.tg->tp, c.samples, plan.recompute, plan.sequence_parallel);
          set_expert_parallelism(st, static_cast<int>(p), static_cast<int>(g), w, worker_of, c);
          price_chunk(w, c);
          w.chunks.push_back(std::move(c));
        }
      }
    }
    for (Worker& w : ws) {
      w.dp_degree = holders[w.chunks.front().begin];
      double params = 0;
      for (const Chunk& c : w.chunks) params += c.params;
      // sim/exec/stage_work.cpp: the Adam step over the worker's parameters (1/dp of them under ZeRO-1).
      w.optimizer_s = optimizer_step_s(plan.zero1 ? params / w.dp_degree : params, *w.gpu, model);
      w.last_backward_start.assign(w.chunks.size(), 0.0);
    }
  }

  mutable std::vector<int> layer_holders;  // scratch of lower: groups holding each layer

  // stage_work.cpp: EP ranks are the same stage of `ep` consecutive pipelines (scope pipelines) or the
  // stage's groups; otherwise EP ranks are sets of the stage's GPUs, tp·ep/N experts per GPU.
  void set_expert_parallelism(const Stage& st, int p, int g, const Worker& w,
                              const std::vector<std::vector<std::vector<int>>>& worker_of, Chunk& c) const {
    if (!model.moe || st.ep <= 1) return;
    const int experts = model.moe->experts;
    const int j = c.vstage;
    c.ep = st.ep;
    const bool across = st.ep_scope == EpScope::Pipelines;
    if (across || static_cast<int>(st.groups.size()) == st.ep) {
      c.ep_rank = across ? p % st.ep : g;
      c.local_experts = st.experts.empty() ? static_cast<double>(experts) / st.ep : st.experts[c.ep_rank];
      const int p0 = across ? p - p % st.ep : p;
      for (int k = 0; k < st.ep; ++k) c.ep_peers.push_back(across ? worker_of[p0 + k][j][g] : worker_of[p][j][k]);
    } else {
      int n_gpus = 0;
      for (const TpGroup& tg : st.groups) n_gpus += static_cast<int>(tg.gpus.size());
      c.ep_rank = g;
      c.local_experts = static_cast<double>(experts) * w.tg->tp / n_gpus;
      c.ep_members = true;
      c.ep_etp = n_gpus / st.ep;
      for (size_t k = 0; k < st.groups.size(); ++k) c.ep_peers.push_back(worker_of[p][j][k]);
    }
  }

  // A chunk's forward and backward task (kernels + TP collectives: closed form inside a node; across nodes
  // the per-call overheads and one all-reduce on the real links, iteration.cpp after_compute) and its
  // parameters per rank (stage_work.cpp params_per_rank).
  void price_chunk(const Worker& w, Chunk& c) const {
    const Table& t = *c.table;
    Cost f = t.fwd[c.end] - t.fwd[c.begin], b = t.bwd[c.end] - t.bwd[c.begin];
    if (c.emb) f += t.emb_f, b += t.emb_b;
    if (c.head) f += t.head_f, b += t.head_b;
    c.backward_compute_s = b.compute;
    if (c.ep > 1) {  // expert-parallel pass: dense kernels only
      f.compute = t.fwd_dense[c.end] - t.fwd_dense[c.begin] + (c.emb ? t.emb_f.compute : 0) + (c.head ? t.head_f.compute : 0);
      b.compute = t.bwd_dense[c.end] - t.bwd_dense[c.begin] + (c.emb ? t.emb_b.compute : 0) + (c.head ? t.head_b.compute : 0);
    }
    auto tp_time = [&](const Cost& x) {
      if (w.tg->tp <= 1 || x.tp_bytes <= 0) return 0.0;
      if (w.one_node) return x.tp_s;
      return x.tp_calls * w.gpu->compute.collective_overhead_s +
             phases_time(phases(CollectiveKind::AllReduce, {w.tg->gpus}), x.tp_bytes);
    };
    c.forward_s = coef.compute * (f.compute + tp_time(f));
    c.backward_s = coef.compute * (b.compute + tp_time(b));
    // Parameters per rank: dense layers whole, MoE layers' routed experts only the local ones under EP.
    const auto& pre = params(w.tg->tp);
    c.params = c.local_experts >= 0 ? pre[1][c.end] - pre[1][c.begin] + c.local_experts * (pre[2][c.end] - pre[2][c.begin])
                                    : pre[0][c.end] - pre[0][c.begin];
    if (c.emb) c.params += embedding_params_per_rank(model, w.tg->tp);
    if (c.head) c.params += head_params_per_rank(model, w.tg->tp);
  }

  const std::array<std::vector<double>, 3>& params(int tp) const {
    auto& pre = params_prefix[tp];
    if (pre[0].empty()) {
      for (auto& v : pre) v.assign(L + 1, 0.0);
      for (int l = 0; l < L; ++l) {
        double full = layer_params_per_rank(model, l, tp), dense = full, experts = 0;
        if (model.moe && model.is_moe_layer(l)) {
          const MoeLayerParams mp = moe_layer_params_per_rank(model, l, tp, 1);
          dense = mp.dense, experts = mp.experts;
        }
        pre[0][l + 1] = pre[0][l] + full;
        pre[1][l + 1] = pre[1][l] + dense;
        pre[2][l + 1] = pre[2][l] + experts;
      }
    }
    return pre;
  }

  // ---------------------------------------------------------------- expert parallelism
  // With EP ranks made of the stage's GPUs (members: the peers' GPUs in order, ep_etp per rank), the index
  // in c.ep_peers of the worker that holds rank r's first GPU.
  static int rank_holder(const std::vector<Worker>& ws, const Chunk& c, int r) {
    int first = r * c.ep_etp;
    for (size_t k = 0; k < c.ep_peers.size(); ++k) {
      const int n = static_cast<int>(ws[c.ep_peers[k]].tg->gpus.size());
      if (first < n) return static_cast<int>(k);
      first -= n;
    }
    return static_cast<int>(c.ep_peers.size()) - 1;
  }

  // One EP group's routed load for one chunk: each peer's tokens, their sum, the expected kept tokens per
  // expert and per EP rank, and the experts per rank.
  struct EpLoad {
    std::vector<long> owned;
    long tokens = 0;
    double kept = 0;
    std::vector<int> rank_experts;
    std::vector<long> rank_kept;
  };
  EpLoad ep_load(const Plan& plan, const std::vector<Worker>& ws, const Worker& w, const Chunk& c, int chunk) const {
    EpLoad e;
    for (int peer : c.ep_peers) {
      e.owned.push_back(std::lround(ws[peer].chunks[chunk].samples * static_cast<double>(model.seq_len)));
      e.tokens += e.owned.back();
    }
    auto kit = kept_per_expert.find(e.tokens);
    if (kit == kept_per_expert.end()) kit = kept_per_expert.emplace(e.tokens, expected_kept_per_expert(*model.moe, e.tokens)).first;
    e.kept = kit->second;
    e.rank_experts = plan.pipelines[w.pipeline].stages[c.vstage].experts;
    if (e.rank_experts.empty()) e.rank_experts.assign(c.ep, model.moe->experts / c.ep);
    for (int r = 0; r < c.ep; ++r) e.rank_kept.push_back(std::lround(e.kept * e.rank_experts[r]));
    return e;
  }

  // Routed experts (iteration.cpp expert_time_s): every rank runs its experts on its own GPUs - the peer
  // worker that holds it, sharded over that worker's TP group, or over ep_etp GPUs when the ranks are sets of
  // the stage's GPUs - and the all-to-all that follows waits for the slowest, forward and backward.
  std::pair<double, double> expert_time(const Plan& plan, const std::vector<Worker>& ws, const Chunk& c, const EpLoad& e) const {
    double expert_f = 0, expert_b = 0;
    const bool full = plan.recompute == Recompute::Full;
    for (int r = 0; r < c.ep; ++r) {
      const Worker& holder = ws[c.ep_peers[c.ep_members ? rank_holder(ws, c, r) : r]];
      const int shards = c.ep_members ? c.ep_etp : holder.tg->tp;
      const auto key = std::make_tuple(holder.gpu, shards, e.rank_experts[r], std::lround(e.kept), full);
      auto it = experts_s.find(key);
      if (it == experts_s.end()) {
        const std::vector<OpCost> ops = expert_forward_ops(model, std::vector<long>(e.rank_experts[r], std::lround(e.kept)), shards);
        const double f = ops_time_s(ops, *holder.gpu, model.dtype);
        it = experts_s.emplace(key, std::make_pair(f, ops_time_s(backward_of(ops), *holder.gpu, model.dtype) + (full ? f : 0.0))).first;
      }
      expert_f = std::max(expert_f, it->second.first);
      expert_b = std::max(expert_b, it->second.second);
    }
    return {expert_f, expert_b};
  }

  // What decides one EP group's all-to-all (its layout, the peers' GPUs and tokens, the kept tokens per
  // rank), appended to a cache key.
  void add_alltoall_key(const std::vector<Worker>& ws, const Chunk& c, const EpLoad& e, std::vector<double>& key) const {
    key.insert(key.end(), {-2, static_cast<double>(c.ep_members), static_cast<double>(c.ep_etp)});
    for (size_t k = 0; k < c.ep_peers.size(); ++k) {
      const TpGroup& g = *ws[c.ep_peers[k]].tg;
      key.push_back(-1);
      key.push_back(static_cast<double>(e.owned[k]));
      key.insert(key.end(), g.gpus.begin(), g.gpus.end());
    }
    key.insert(key.end(), e.rank_kept.begin(), e.rank_kept.end());
  }

  // The flows of one EP group's all-to-all (iteration.cpp run_alltoall): each member sends every rank its
  // share of the rank's kept tokens; `repeat` 2 when the backward's carry the recomputed forward's too.
  void add_alltoall_flows(const std::vector<Worker>& ws, const Chunk& c, const EpLoad& e, double repeat,
                          std::vector<Flow>& flows) const {
    const double per_assignment = dispatch_bytes_per_assignment(model);
    if (c.ep_members) {
      std::vector<GpuId> members;
      std::vector<double> own;
      for (size_t k = 0; k < c.ep_peers.size(); ++k)
        for (GpuId gpu : ws[c.ep_peers[k]].tg->gpus) {
          members.push_back(gpu);
          own.push_back(static_cast<double>(e.owned[k]) / ws[c.ep_peers[k]].tg->tp);
        }
      for (size_t i = 0; i < members.size(); ++i)
        for (size_t j = 0; j < members.size(); ++j) {
          const int r = static_cast<int>(j) / c.ep_etp;
          const double bytes = static_cast<double>(e.rank_kept[r]) * own[i] / e.tokens * per_assignment * repeat / c.ep_etp;
          flows.push_back({members[i], members[j], bytes, topo.latency_s(members[i], members[j])});
        }
      return;
    }
    int channels = 1 << 30;
    for (int peer : c.ep_peers) channels = std::min(channels, ws[peer].tg->tp);
    for (int ch = 0; ch < channels; ++ch)
      for (size_t i = 0; i < c.ep_peers.size(); ++i)
        for (size_t j = 0; j < c.ep_peers.size(); ++j) {
          const Worker& a = ws[c.ep_peers[i]];
          const Worker& b = ws[c.ep_peers[j]];
          const GpuId src = a.tg->gpus[static_cast<size_t>(ch) * a.tg->tp / channels];
          const GpuId dst = b.tg->gpus[static_cast<size_t>(ch) * b.tg->tp / channels];
          const double bytes = static_cast<double>(e.rank_kept[j]) * e.owned[i] / e.tokens * per_assignment * repeat / channels;
          flows.push_back({src, dst, bytes, topo.latency_s(src, dst)});
        }
  }

  // Adds to every expert-parallel chunk's passes what its MoE layers add (iteration.cpp run_phase): per
  // MoE layer the dispatch and the combine all-to-all and the routed experts; every all-to-all waits for
  // all EP peers, so the slowest peer's experts gate the layer. Tokens per expert: the expected kept load.
  // Pipelines of one shape (depth, micro-batch size and count) run the same schedule, so the all-to-alls
  // of one stage in all of them run at once: each is timed with all of them on the links (with several TP
  // groups per stage and EP across pipelines, the groups' all-to-alls share the nodes' NICs).
  void add_expert_parallel_time(const Plan& plan, std::vector<Worker>& ws) const {
    backward_alltoalls.clear();
    if (!model.moe) return;
    auto moe_layers_of = [&](const Chunk& c) {
      int n = 0;
      for (int l = c.begin; l < c.end; ++l) n += model.is_moe_layer(l);
      return n;
    };
    // The EP groups that run all-to-alls at once: by (pipeline shape, virtual stage, chunk), each group once
    // (its first peer stands for it), those whose chunk holds MoE layers (pipelines of one shape may split
    // the layers differently).
    std::map<std::tuple<int, int, long, int, int>, std::vector<std::pair<int, int>>> concurrent;
    for (size_t wi = 0; wi < ws.size(); ++wi)
      for (size_t ci = 0; ci < ws[wi].chunks.size(); ++ci) {
        const Chunk& c = ws[wi].chunks[ci];
        if (c.ep <= 1 || c.ep_peers.front() != static_cast<int>(wi) || moe_layers_of(c) == 0) continue;
        const Pipeline& pl = plan.pipelines[ws[wi].pipeline];
        concurrent[{static_cast<int>(pl.stages.size()), pl.micro_batch, pl.micro_batches, c.vstage, static_cast<int>(ci)}]
            .push_back({static_cast<int>(wi), static_cast<int>(ci)});
      }
    for (const auto& [shape, groups] : concurrent) {
      std::vector<EpLoad> loads;
      for (const auto& [wi, ci] : groups) loads.push_back(ep_load(plan, ws, ws[wi], ws[wi].chunks[ci], ci));
      // All the groups' all-to-alls at once, after the per-call overhead of the slowest GPU to start one
      // (the last peer to arrive starts it), cached by what decides them.
      auto a2a = [&](double repeat) {
        std::vector<double>& key = scratch_key;
        key.assign(1, repeat);
        for (size_t k = 0; k < groups.size(); ++k) add_alltoall_key(ws, ws[groups[k].first].chunks[groups[k].second], loads[k], key);
        auto hit = alltoalls.find(key);
        if (hit != alltoalls.end()) return std::cref(hit->second);
        std::vector<Flow> flows;
        double overhead = 0;
        for (size_t k = 0; k < groups.size(); ++k) {
          const Chunk& c = ws[groups[k].first].chunks[groups[k].second];
          add_alltoall_flows(ws, c, loads[k], repeat, flows);
          for (int peer : c.ep_peers) overhead = std::max(overhead, ws[peer].gpu->compute.collective_overhead_s);
        }
        AllToAll out;
        out.s = overhead + flows_time(flows, &out.links, 0.0);
        return std::cref(alltoalls.emplace(key, std::move(out)).first->second);
      };
      const double fwd_a2a = a2a(1.0).get().s;
      const AllToAll& bwd = (plan.recompute == Recompute::Full ? a2a(2.0) : a2a(1.0)).get();
      const double bwd_a2a = bwd.s;
      backward_alltoalls.push_back({groups[0].first, groups[0].second,
                                    coef.ep * 2 * moe_layers_of(ws[groups[0].first].chunks[groups[0].second]), &bwd});
      for (size_t k = 0; k < groups.size(); ++k) {
        const Chunk& lead = ws[groups[k].first].chunks[groups[k].second];
        const int moe_layers = moe_layers_of(lead);
        const auto [expert_f, expert_b] = expert_time(plan, ws, lead, loads[k]);
        for (int peer : lead.ep_peers) {
          Chunk& c = ws[peer].chunks[groups[k].second];
          c.forward_s += coef.ep * moe_layers * (2 * fwd_a2a + expert_f);
          c.backward_s += coef.ep * moe_layers * (2 * bwd_a2a + expert_b);
        }
      }
    }
  }

  // The backward all-to-alls of each set of concurrent EP groups (add_expert_parallel_time): the first
  // group's worker and chunk (whose last backward they run in), how many per backward pass (coefficient
  // applied), and the links one of them keeps busy.
  struct BackwardAllToAlls {
    int worker = 0, chunk = 0;
    double per_pass = 0;
    const AllToAll* a2a = nullptr;
  };
  mutable std::vector<BackwardAllToAlls> backward_alltoalls;  // of the plan being estimated
  mutable std::vector<std::vector<std::pair<int, double>>> alltoalls_on_link;  // per link: (set, seconds per pass)
  mutable std::vector<int> alltoall_links;  // the links alltoalls_on_link lists

  // Indexes backward_alltoalls by link (alltoalls_on_link).
  void index_alltoalls() const {
    alltoalls_on_link.resize(link_count);
    for (size_t i = 0; i < backward_alltoalls.size(); ++i)
      for (const auto& [l, s] : backward_alltoalls[i].a2a->links) {
        if (alltoalls_on_link[l].empty()) alltoall_links.push_back(l);
        alltoalls_on_link[l].push_back({static_cast<int>(i), backward_alltoalls[i].per_pass * s});
      }
  }
  void clear_alltoalls_index() const {
    for (int l : alltoall_links) alltoalls_on_link[l].clear();
    alltoall_links.clear();
  }

  // The seconds the backward all-to-alls keep link l busy after time t: of each set's last backward pass,
  // the part still to run at t (its all-to-alls spread evenly over the pass, one per MoE layer and
  // direction). A gradient reduction that overlaps the last backward shares its links with them
  // (sim/net/flow_network.h: one capacity for all flows), so its links carry both.
  double alltoalls_left(const std::vector<Worker>& ws, int l, double t) const {
    if (alltoalls_on_link.empty()) return 0.0;
    double left = 0;
    for (const auto& [i, s] : alltoalls_on_link[l]) {
      const BackwardAllToAlls& a = backward_alltoalls[i];
      const double pass = ws[a.worker].chunks[a.chunk].backward_s;
      const double end = ws[a.worker].last_backward_start[a.chunk] + pass;
      if (end > t && pass > 0) left += s * std::min(1.0, (end - t) / pass);
    }
    return left;
  }

  // ---------------------------------------------------------------- pipeline transfers
  // The transfers from stage j of pipeline p to its neighbour (dir 0: activations to j+1; dir 1: gradients
  // to j-1), as build_stage_work makes them: one per pair of groups whose sample intervals overlap, each
  // over min(tp) rank pairs carrying 1/k of the activation (Megatron's scatter/gather optimisation,
  // Narayanan et al. SC'21 §4.1), after the route latency and the sender's per-call overhead.
  const Transfer& transfer(const Pipeline& pl, int j, int dir) const {
    // Cached by what decides it: the micro-batch and both stages' groups (GPUs, TP, share).
    std::vector<double>& key = scratch_key;
    key.assign(1, pl.micro_batch);
    add_transfer_key(pl, j, dir, key);
    auto hit = transfers.find(key);
    if (hit != transfers.end()) return hit->second;
    std::vector<Flow>& flows = transfer_flows;
    flows.clear();
    Transfer out;
    add_transfer_flows(pl, j, dir, flows, out);
    out.s = coef.p2p * flows_time(flows, &out.links);
    return transfers.emplace(key, std::move(out)).first->second;
  }
  mutable std::vector<Flow> transfer_flows;  // scratch of transfer and concurrent_transfers

  // Pipelines of one shape (depth and micro-batch size) run the same schedule, so their transfers across one
  // stage boundary run at once (a batch split that gives some of them a micro-batch more ends theirs one
  // step later): where their stages share nodes (replicas placed stage by stage, placement.h) they share
  // the nodes' NICs. The transfers of the pipelines `peers` across (j, dir), one per
  // peer in order: each lasts its latency plus the most loaded of its own links' load over capacity, the
  // loads of every peer's transfer summed (sim/net/flow_network.h shares a link max-min fairly); a link only
  // other peers use does not slow it. Its links: those flows_time would list, with the summed loads.
  mutable std::unordered_map<std::vector<double>, std::vector<Transfer>, VectorHash> shape_boundaries;
  mutable std::vector<size_t> peer_flow_end;  // scratch of concurrent_transfers: per peer, its flows' end
  const std::vector<Transfer>& concurrent_transfers(const Plan& plan, const std::vector<int>& peers, int j, int dir) const {
    std::vector<double>& key = scratch_key;
    key.assign({static_cast<double>(plan.pipelines[peers.front()].micro_batch)});
    for (const int q : peers) add_transfer_key(plan.pipelines[q], j, dir, key);
    auto hit = shape_boundaries.find(key);
    if (hit != shape_boundaries.end()) return hit->second;
    std::vector<Flow>& flows = transfer_flows;
    flows.clear();
    std::vector<Transfer> out(peers.size());
    peer_flow_end.clear();
    for (size_t i = 0; i < peers.size(); ++i) {
      add_transfer_flows(plan.pipelines[peers[i]], j, dir, flows, out[i]);
      peer_flow_end.push_back(flows.size());
    }
    for (const Flow& f : flows) {
      if (f.src == f.dst || f.bytes <= 0) continue;
      for (LinkId l : topo.route(f.src, f.dst)) {
        if (load[l] == 0) touched.push_back(l);
        load[l] += f.bytes;
      }
    }
    size_t begin = 0;
    for (size_t i = 0; i < peers.size(); ++i) {
      double lat = 0, worst = 0;
      std::vector<std::pair<int, double>>& links = out[i].links;
      for (size_t f = begin; f < peer_flow_end[i]; ++f) {
        if (flows[f].src == flows[f].dst || flows[f].bytes <= 0) continue;
        lat = std::max(lat, flows[f].latency_s);
        for (LinkId l : topo.route(flows[f].src, flows[f].dst)) {
          const double t = load[l] / topo.links()[l].capacity;
          worst = std::max(worst, t);
          links.push_back({l, t});
        }
      }
      std::sort(links.begin(), links.end());
      links.erase(std::unique(links.begin(), links.end()), links.end());
      std::erase_if(links, [&](const std::pair<int, double>& x) { return !kept_as_busy(x.first, x.second, worst, kBusyFraction); });
      out[i].s = coef.p2p * (lat + worst);
      begin = peer_flow_end[i];
    }
    for (int l : touched) load[l] = 0;
    touched.clear();
    return shape_boundaries.emplace(key, std::move(out)).first->second;
  }
  // Both stages' groups (GPUs, TP, share) of the transfer from stage j of `pl` in direction `dir`.
  static void add_transfer_key(const Pipeline& pl, int j, int dir, std::vector<double>& key) {
    const int nj = dir == 0 ? j + 1 : j - 1;
    for (const Stage* x : {&pl.stages[j], &pl.stages[nj]}) {
      key.push_back(-1);
      for (const TpGroup& g : x->groups) {
        key.push_back(g.tp);
        key.push_back(g.share);
        key.insert(key.end(), g.gpus.begin(), g.gpus.end());
        key.push_back(-2);
      }
    }
  }
  // The flows of the transfer from stage j of `pl` in direction `dir`, appended to `flows`; out.latency_s
  // raised to their largest latency.
  void add_transfer_flows(const Pipeline& pl, int j, int dir, std::vector<Flow>& flows, Transfer& out) const {
    const Stage& st = pl.stages[j];
    const Stage& ns = pl.stages[dir == 0 ? j + 1 : j - 1];
    double lo = 0;
    for (const TpGroup& a : st.groups) {
      const double hi = lo + a.share;
      double nlo = 0;
      const double ovh = cluster.gpu_spec(a.gpus.front()).compute.collective_overhead_s;
      for (const TpGroup& b : ns.groups) {
        const double nhi = nlo + b.share;
        const double overlap = std::min(hi, nhi) - std::max(lo, nlo);
        nlo = nhi;
        if (overlap <= 1e-12) continue;
        const int k = std::min(a.tp, b.tp);
        const double bytes = p2p_bytes(model, overlap * pl.micro_batch) / k;
        for (int m = 0; m < k; ++m) {
          const GpuId s = a.gpus[static_cast<size_t>(m) * a.tp / k], d = b.gpus[static_cast<size_t>(m) * b.tp / k];
          flows.push_back({s, d, bytes, topo.latency_s(s, d) + ovh});
          out.latency_s = std::max(out.latency_s, flows.back().latency_s);
        }
      }
      lo = hi;
    }
  }

  // ---------------------------------------------------------------- schedule
  // Runs the ranks' programs (rank_program, the simulator's own) against each other with one timeline per
  // physical stage: a task lasts the slowest of the stage's groups; an exchange ends when all the transfers
  // it waits for have (a transfer starts once both ends posted it - eager sends at once - and lasts its
  // transfer_s), as iteration.cpp pairs them: per (sender, receiver, direction) channel in posting order.
  // Fills each worker's last-backward start per chunk and backward end; returns the pipeline's end.
  mutable std::vector<double> stage_fwd, stage_bwd, stage_send_f, stage_send_b, schedule_key;  // of run_pipeline
  double run_pipeline(const Plan& plan, int p, const std::vector<std::vector<std::vector<int>>>& worker_of,
                      std::vector<Worker>& ws) const {
    const Pipeline& pl = plan.pipelines[p];
    const int nst = static_cast<int>(pl.stages.size());
    const int chunks = plan.schedule == Schedule::Interleaved ? plan.interleave : 1;
    const int pp = nst / chunks, m = pl.micro_batches;
    std::vector<double>&fwd = stage_fwd, &bwd = stage_bwd, &send_f = stage_send_f, &send_b = stage_send_b;
    for (auto* v : {&fwd, &bwd, &send_f, &send_b}) v->assign(nst, 0.0);
    std::vector<const Transfer*>& kinds = stage_transfers;
    kinds.assign(2 * nst, nullptr);
    for (int j = 0; j < nst; ++j) {
      for (int w : worker_of[p][j]) {
        const Chunk& c = ws[w].chunks[j / pp];
        fwd[j] = std::max(fwd[j], c.forward_s);
        bwd[j] = std::max(bwd[j], c.backward_s);
      }
      if (j + 1 < nst) kinds[j] = &shape_transfer(plan, p, j, 0), send_f[j] = kinds[j]->s;
      if (j > 0) kinds[nst + j] = &shape_transfer(plan, p, j, 1), send_b[j] = kinds[nst + j]->s;
    }
    find_shared_links(kinds);
    std::vector<double>& key = schedule_key;
    key.assign({static_cast<double>(plan.schedule), static_cast<double>(pp), static_cast<double>(chunks),
                static_cast<double>(m)});
    for (const auto* v : {&fwd, &bwd, &send_f, &send_b}) key.insert(key.end(), v->begin(), v->end());
    for (const int l : shared_transfer_links) {
      key.push_back(-1);
      for (const auto& [kind, load] : kinds_on_link[l]) key.insert(key.end(), {static_cast<double>(kind), load});
    }
    auto hit = schedules.find(key);
    if (hit == schedules.end())
      hit = schedules.emplace(key, contended_schedule(plan.schedule, pp, chunks, m, fwd, bwd, send_f, send_b, kinds)).first;
    const std::vector<double>& times = hit->second;
    double end = 0;
    for (int j = 0; j < nst; ++j)
      for (int w : worker_of[p][j]) {
        const int r = j % pp;
        ws[w].last_backward_start[j / pp] = times[r * (chunks + 1) + 1 + j / pp];
        ws[w].backward_done = times[r * (chunks + 1)];
        end = std::max(end, ws[w].backward_done);
      }
    return end;
  }

  // Of the pipeline run_pipeline times: its transfers by kind (boundary and direction), per link the kinds
  // that keep it busy with the seconds one transfer of each does, and the links several kinds share (in the
  // order the kinds first reach them).
  mutable std::vector<const Transfer*> stage_transfers;
  mutable std::vector<std::vector<std::pair<int, double>>> kinds_on_link;
  mutable std::vector<int> transfer_links, shared_transfer_links;

  void find_shared_links(const std::vector<const Transfer*>& kinds) const {
    for (const int l : transfer_links) kinds_on_link[l].clear();  // the previous pipeline's
    transfer_links.clear(), shared_transfer_links.clear();
    kinds_on_link.resize(link_count);
    for (size_t k = 0; k < kinds.size(); ++k)
      if (kinds[k])
        for (const auto& [l, load] : kinds[k]->links) {
          if (kinds_on_link[l].empty()) transfer_links.push_back(l);
          kinds_on_link[l].push_back({static_cast<int>(k), load});
          if (kinds_on_link[l].size() == 2) shared_transfer_links.push_back(l);
        }
  }

  // Transfers of different kinds that share a link take longer when they overlap: the simulator's flows
  // share the link's capacity (sim/net/flow_network.h), so during a transfer the link carries its load and
  // the part of every overlapping transfer's load that falls inside it. The schedule is run as if alone,
  // then, where transfers overlapped, again with each transfer timed by that bound on every shared link from
  // the overlaps of the run alone. (Correcting again from the second run's overlaps came no closer to the
  // simulator on the plans measured: +0.6 % and +5.4 % against -2.7 % and +1.9 % for one correction.)
  mutable std::vector<std::vector<double>> transfer_durations;  // per channel, per posting index
  struct Interval {
    double start, end;
    int channel, index;
  };
  mutable std::vector<std::vector<Interval>> kind_intervals;  // per kind
  mutable std::vector<double> extra;                          // per interval of a kind (scratch)
  std::vector<double> contended_schedule(Schedule sched, int pp, int chunks, int m, const std::vector<double>& fwd,
                                         const std::vector<double>& bwd, const std::vector<double>& send_f,
                                         const std::vector<double>& send_b,
                                         const std::vector<const Transfer*>& kinds) const {
    std::vector<double> times = schedule(sched, pp, chunks, m, fwd, bwd, send_f, send_b);
    if (shared_transfer_links.empty() || !time_shared_transfers(pp, kinds)) return times;
    return schedule(sched, pp, chunks, m, fwd, bwd, send_f, send_b, &transfer_durations);
  }

  // From the channels of the last schedule run: each transfer's time with the overlapping transfers of the
  // other kinds on each shared link (transfer_durations). False when no transfer takes longer than alone.
  bool time_shared_transfers(int pp, const std::vector<const Transfer*>& kinds) const {
    bool longer = false;
    kind_intervals.resize(kinds.size());
    for (auto& v : kind_intervals) v.clear();
    transfer_durations.resize(2 * pp);
    for (int c = 0; c < 2 * pp; ++c) {
      const Channel& ch = channels[c];
      transfer_durations[c].resize(ch.send_s.size());
      for (size_t i = 0; i < ch.send_s.size(); ++i) {
        transfer_durations[c][i] = kinds[ch.kind[i]]->s;  // alone
        const double start = ch.start(i);
        kind_intervals[ch.kind[i]].push_back({start, start + ch.send_s[i], c, static_cast<int>(i)});
      }
    }
    for (auto& v : kind_intervals)
      std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
    for (const int l : shared_transfer_links)
      for (const auto& [ka, load_a] : kinds_on_link[l]) {
        const std::vector<Interval>& as = kind_intervals[ka];
        extra.assign(as.size(), 0.0);
        for (const auto& [kb, load_b] : kinds_on_link[l]) {
          if (kb == ka) continue;
          const std::vector<Interval>& bs = kind_intervals[kb];
          size_t lo = 0;
          for (size_t i = 0; i < as.size(); ++i) {
            while (lo < bs.size() && bs[lo].end <= as[i].start) ++lo;
            for (size_t k = lo; k < bs.size() && bs[k].start < as[i].end; ++k) {
              const double overlap = std::min(as[i].end, bs[k].end) - std::max(as[i].start, bs[k].start);
              const double span = bs[k].end - bs[k].start;
              if (overlap > 0 && span > 0) extra[i] += load_b * overlap / span;
            }
          }
        }
        const Transfer& t = *kinds[ka];
        for (size_t i = 0; i < as.size(); ++i) {
          double& d = transfer_durations[as[i].channel][as[i].index];
          const double shared = coef.p2p * (t.latency_s + load_a + extra[i]);
          if (shared > d) d = shared, longer = true;
        }
      }
    return longer;
  }

  // rank_program(schedule, pp, r, chunks, m) as Steps.
  const std::vector<Step>& program(Schedule schedule, int pp, int r, int chunks, int m) const {
    if (chunks > std::numeric_limits<std::uint8_t>::max()) throw std::invalid_argument("estimator: too many model chunks");
    auto make = [&](std::vector<Step>& out) {
      rank_program(schedule, pp, r, chunks, m, program_scratch);
      out.clear();
      out.reserve(program_scratch.size());
      for (const ScheduleStep& s : program_scratch) out.push_back(compact(s));
    };
    if (static_cast<long>(chunks) * m > kKeptProgramTasks) {
      if (static_cast<int>(long_programs.size()) < pp) long_programs.resize(pp);
      make(long_programs[r]);
      return long_programs[r];
    }
    const auto key = std::make_tuple(schedule, pp, r, chunks, m);
    auto it = programs.find(key);
    if (it == programs.end()) make(programs[key]), it = programs.find(key);
    return it->second;
  }

  // The state of schedule(): a channel's transfers in posting order (each with its kind: the sending virtual
  // stage j, nst + j for gradients), a rank's place in its program.
  struct Channel {
    std::vector<double> send_post, send_s;
    std::vector<char> eager;
    std::vector<int> kind;
    std::vector<double> recv_post;
    void clear() { send_post.clear(), send_s.clear(), eager.clear(), kind.clear(), recv_post.clear(); }
    double start(size_t i) const { return eager[i] ? send_post[i] : std::max(send_post[i], recv_post[i]); }
  };
  struct Wait {
    int channel, index;
    bool send;
  };
  struct Rank {
    const std::vector<Step>* prog = nullptr;
    size_t pc = 0;
    double t = 0;
    bool posted = false;
    std::vector<Wait> waits;
    std::vector<double> last_backward;
  };
  mutable std::vector<Channel> channels;
  mutable std::vector<Rank> ranks_scratch;

  // The recurrence of run_pipeline: per rank its end, then its last-backward start per chunk.
  // `durations`, when given, times each transfer by channel and posting index instead of by its kind.
  std::vector<double> schedule(Schedule schedule, int pp, int chunks, int m, const std::vector<double>& fwd,
                               const std::vector<double>& bwd, const std::vector<double>& send_f,
                               const std::vector<double>& send_b,
                               const std::vector<std::vector<double>>* durations = nullptr) const {
    const int nst = pp * chunks;
    // Channels: activations from rank r go to rank (r+1) % pp (index r), gradients to (r-1) % pp (pp + r).
    // Both are the estimator's scratch (cleared here, their memory kept for the next schedule).
    std::vector<Channel>& ch = channels;
    if (ch.size() < static_cast<size_t>(2 * pp)) ch.resize(2 * pp);
    for (int i = 0; i < 2 * pp; ++i) ch[i].clear();
    if (ranks_scratch.size() < static_cast<size_t>(pp)) ranks_scratch.resize(pp);
    std::vector<Rank>& ranks = ranks_scratch;
    for (int r = 0; r < pp; ++r) {
      Rank& rk = ranks[r];
      rk.prog = &program(schedule, pp, r, chunks, m);
      rk.pc = 0;
      rk.t = 0;
      rk.posted = false;
      rk.waits.clear();
      rk.last_backward.assign(chunks, 0.0);
    }
    auto vstage = [&](int r, const auto& t) { return t.chunk * pp + r; };
    auto transfer_end = [&](const Channel& c, int i) { return c.start(i) + c.send_s[i]; };
    auto post = [&](Rank& rk, int r, const Step& s) {
      for (int i = 0; i < s.num_sends; ++i) {
        const int j = vstage(r, s.sends[i]);
        const bool f = s.sends[i].forward;
        if (f ? j + 1 >= nst : j == 0) continue;  // no neighbour that way
        const int idx = f ? r : pp + r;
        Channel& c = ch[idx];
        c.send_s.push_back(durations ? (*durations)[idx][c.send_post.size()] : f ? send_f[j] : send_b[j]);
        c.send_post.push_back(rk.t);
        c.kind.push_back(f ? j : nst + j);
        c.eager.push_back(s.eager);
        if (!s.eager) rk.waits.push_back({idx, static_cast<int>(c.send_post.size()) - 1, true});
      }
      for (int i = 0; i < s.num_recvs; ++i) {
        const int j = vstage(r, s.recvs[i]);
        const bool f = s.recvs[i].forward;
        if (f ? j == 0 : j + 1 >= nst) continue;
        const int src = f ? (r - 1 + pp) % pp : (r + 1) % pp;
        const int idx = f ? src : pp + src;
        ch[idx].recv_post.push_back(rk.t);
        rk.waits.push_back({idx, static_cast<int>(ch[idx].recv_post.size()) - 1, false});
      }
      rk.posted = true;
    };
    // Advances rank r until it blocks; true when it made progress.
    auto advance = [&](int r) {
      Rank& rk = ranks[r];
      bool moved = false;
      while (rk.pc < rk.prog->size()) {
        const Step& s = (*rk.prog)[rk.pc];
        if (!s.exchange) {
          const int j = vstage(r, s.task);
          if (!s.task.forward && s.task.micro_batch == m - 1) rk.last_backward[s.task.chunk] = rk.t;
          rk.t += s.task.forward ? fwd[j] : bwd[j];
        } else {
          if (!rk.posted) post(rk, r, s);
          double end = rk.t;
          for (const Wait& w : rk.waits) {
            const Channel& c = ch[w.channel];
            const bool paired = w.send ? static_cast<int>(c.recv_post.size()) > w.index
                                       : static_cast<int>(c.send_post.size()) > w.index;
            if (!paired) return moved;
            end = std::max(end, transfer_end(c, w.index));
          }
          rk.t = end;
          rk.waits.clear();
          rk.posted = false;
        }
        ++rk.pc;
        moved = true;
      }
      return moved;
    };
    for (;;) {
      bool moved = false, done = true;
      for (int r = 0; r < pp; ++r) {
        moved |= advance(r);
        done &= ranks[r].pc == ranks[r].prog->size();
      }
      if (done) break;
      if (!moved) throw std::logic_error("estimator: pipeline schedule deadlock");
    }
    std::vector<double> out;
    for (int r = 0; r < pp; ++r) {
      const Rank& rk = ranks[r];
      out.push_back(rk.t);
      out.insert(out.end(), rk.last_backward.begin(), rk.last_backward.end());
    }
    return out;
  }

  // ---------------------------------------------------------------- gradient reduction
  using Holder = GradHolder;
  struct Bucket : GradBucket {
    int holder_set = -1;  // buckets with the same holders share it (their collectives' member sets)
    double ready = 0, start = 0, end = 0;
  };

  // Seconds after the start of its last backward at which holder h has the gradients of bucket b
  // (stage_work.cpp layer_grad_ready_s: backward runs head -> last layer -> first layer -> embedding;
  // an expert-parallel pass in proportion to its kernels).
  double ready_offset(const std::vector<Worker>& ws, const Holder& h, const Bucket& b) const {
    const Chunk& c = ws[h.worker].chunks[h.chunk];
    const Table& t = *c.table;
    double k = (c.head ? t.head_b.compute : 0);
    if (b.embedding) k = c.backward_compute_s;
    else if (b.layer_begin < b.layer_end) k += t.bwd[c.end].compute - t.bwd[b.layer_begin].compute;
    if (c.ep > 1) return c.backward_compute_s > 0 ? c.backward_s * k / c.backward_compute_s : 0;
    return coef.compute * k;
  }

  // The segments and Megatron buckets of GradSync (sim/exec/grad_sync.h gradient_buckets): layers cut at
  // every stage boundary; each segment filled from its last layer backwards into buckets of max(40M, 1M x dp)
  // local parameters (Megatron-LM DistributedDataParallel); routed-expert gradients per expert-data-parallel
  // group and MoE layer on the group's own communicator; the tied-embedding all-reduce per pipeline. Buckets
  // on one communicator have the same holders: it names their holder set.
  // The buckets depend only on the layout below, which plans of one structure share (a completion prices
  // batch splits of one layout in a row): the last layout's buckets are kept and handed out again.
  struct BucketLayout {
    std::vector<GradBucketWorker> workers;
    std::vector<int> depth;
    std::vector<std::vector<std::vector<int>>> worker_of;
  };
  mutable BucketLayout bucket_layout, last_bucket_layout;  // scratch, and the layout of last_buckets
  mutable std::vector<Bucket> last_buckets;
  std::vector<Bucket>& buckets(const std::vector<Worker>& ws, const std::vector<std::vector<std::vector<int>>>& worker_of) const {
    BucketLayout& layout = bucket_layout;
    layout.workers.resize(ws.size());
    for (size_t wi = 0; wi < ws.size(); ++wi) {
      layout.workers[wi].tp = ws[wi].tg->tp;
      layout.workers[wi].chunks.clear();
      for (const Chunk& c : ws[wi].chunks) layout.workers[wi].chunks.push_back({c.begin, c.end, c.ep_rank, c.local_experts});
    }
    layout.depth.clear();
    for (const auto& stages : worker_of)
      layout.depth.push_back(stages.empty() ? 1 : static_cast<int>(stages.size()) / static_cast<int>(ws[stages[0][0]].chunks.size()));
    BucketLayout& last = last_bucket_layout;
    // reduce_gradients sets every bucket's times before it reads them.
    if (layout.workers == last.workers && layout.depth == last.depth && worker_of == last.worker_of) return last_buckets;
    bucket_memo.clear(), link_slots_memo.clear(), family_combinations.clear();  // of other buckets
    last_buckets.clear();
    for (GradBucket& g : gradient_buckets(model, layout.workers, worker_of, layout.depth).buckets) {
      Bucket bk;
      static_cast<GradBucket&>(bk) = std::move(g);
      bk.holder_set = bk.communicator;
      last_buckets.push_back(std::move(bk));
    }
    std::swap(last.workers, layout.workers);
    std::swap(last.depth, layout.depth);
    last.worker_of = worker_of;
    return last_buckets;
  }

  // One collective per TP slice of the bucket over the GPUs holding it (GradSync::launch, slice_members:
  // sorted, as NCCL builds rings), after the slowest holder's per-call overhead.
  // Per holder set and collective kind: the phases and the overhead, while the buckets (their holders) and
  // the workers' GPUs (bucket_gpus) stay the same.
  mutable std::map<std::pair<int, CollectiveKind>, std::pair<const CollectiveShape*, double>> bucket_memo;
  mutable std::vector<std::vector<GpuId>> bucket_gpus;  // per worker, of bucket_memo
  // Clears bucket_memo unless the workers have the GPUs it was worked out on.
  void keep_bucket_memo_if_same_gpus(const std::vector<Worker>& ws) const {
    bool same = bucket_gpus.size() == ws.size();
    for (size_t w = 0; same && w < ws.size(); ++w) same = bucket_gpus[w] == ws[w].tg->gpus;
    if (same) return;
    bucket_memo.clear(), link_slots_memo.clear(), family_combinations.clear();
    bucket_gpus.resize(ws.size());
    for (size_t w = 0; w < ws.size(); ++w) bucket_gpus[w] = ws[w].tg->gpus;
  }
  double bucket_s(const std::vector<Worker>& ws, const Bucket& bk, CollectiveKind kind, double bytes_per_param) const {
    if (bk.holders.size() < 2) return 0.0;
    auto it = bucket_memo.find({bk.holder_set, kind});
    if (it == bucket_memo.end()) it = bucket_memo.emplace(std::make_pair(bk.holder_set, kind), bucket_phases(ws, bk, kind)).first;
    const auto& [ph, ovh] = it->second;
    return coef.dp * (ovh + phases_time(*ph, bk.full_params / bk.lcm_tp * bytes_per_param));
  }
  mutable std::vector<std::vector<GpuId>> bucket_sets;  // scratch of bucket_phases
  std::pair<const CollectiveShape*, double> bucket_phases(const std::vector<Worker>& ws, const Bucket& bk,
                                                             CollectiveKind kind) const {
    std::vector<std::vector<GpuId>>& sets = bucket_sets;
    sets.resize(bk.lcm_tp);
    for (auto& set : sets) set.clear();
    double ovh = 0;
    for (int k = 0; k < bk.lcm_tp; ++k) {
      for (const Holder& h : bk.holders) {
        const Worker& w = ws[h.worker];
        sets[k].push_back(w.tg->gpus[static_cast<size_t>(k) * w.tg->tp / bk.lcm_tp]);
      }
      if (!std::is_sorted(sets[k].begin(), sets[k].end())) std::sort(sets[k].begin(), sets[k].end());
    }
    for (const Holder& h : bk.holders) ovh = std::max(ovh, ws[h.worker].gpu->compute.collective_overhead_s);
    return {&phases(kind, sets), ovh};
  }

  // GradSync's timeline: each bucket starts when all its holders have its gradients (during the last
  // backward with overlap_grad_reduce, after the backward otherwise) and its communicator is free (NCCL runs
  // one communicator's collectives in issue order); the tied-embedding all-reduce once a worker's other
  // buckets are reduced; then the optimizer step; under ZeRO-1 reduce-scatter, then the parameter
  // all-gather once every holder stepped. Fills each worker's end.
  // The families share links both ways (share_with_other_families): a first pass lets each family see the
  // loads of the families before it; where one did, a second pass lets every family see the first pass's
  // loads of all the others.
  void reduce_gradients(const Plan& plan, std::vector<Worker>& ws, std::vector<Bucket>& bks) const {
    clear_family_loads();
    sharing_pass = 1, shared_across_families = false;
    reduce_gradients_once(plan, ws, bks);
    if (!shared_across_families) return;
    sharing_pass = 2;
    reduce_gradients_once(plan, ws, bks);
  }
  void reduce_gradients_once(const Plan& plan, std::vector<Worker>& ws, std::vector<Bucket>& bks) const {
    const double grad_bytes = reduced_grad_bytes_per_param(model);
    const double param_bytes = model.dtype == "fp32" ? 4.0 : 2.0;
    family = 0;
    for (Bucket& bk : bks) {
      if (bk.tied_embedding) continue;
      bk.ready = 0;
      for (const Holder& h : bk.holders) {
        const Worker& w = ws[h.worker];
        const double r = plan.overlap_grad_reduce ? w.last_backward_start[h.chunk] + ready_offset(ws, h, bk) : w.backward_done;
        bk.ready = std::max(bk.ready, std::min(r, w.backward_done));
      }
    }
    std::vector<int> order;
    for (size_t b = 0; b < bks.size(); ++b)
      if (!bks[b].tied_embedding) order.push_back(static_cast<int>(b));
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return bks[x].ready < bks[y].ready; });
    run_family(ws, bks, order, plan.zero1 ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, grad_bytes,
               [](const Bucket& bk) { return bk.ready; });
    for (Worker& w : ws) w.reduced = w.backward_done;
    for (int b : order)
      for (const Holder& h : bks[b].holders) ws[h.worker].reduced = std::max(ws[h.worker].reduced, bks[b].end);
    // The tied-embedding all-reduces (one per pipeline, on communicators of their own) as a family too: the
    // pipelines' first and last stages often share NICs, and their links carry all of them.
    std::vector<int> tied;
    for (size_t b = 0; b < bks.size(); ++b)
      if (bks[b].tied_embedding) tied.push_back(static_cast<int>(b));
    run_family(ws, bks, tied, CollectiveKind::AllReduce, grad_bytes, [&](const Bucket& bk) {
      double start = 0;
      for (const Holder& h : bk.holders) start = std::max(start, ws[h.worker].reduced);
      return start;
    });
    for (int b : tied)
      for (const Holder& h : bks[b].holders) ws[h.worker].reduced = std::max(ws[h.worker].reduced, bks[b].end);
    for (Worker& w : ws) w.finished = w.reduced + w.optimizer_s;
    if (!plan.zero1) return;
    // ZeRO-1: each bucket's all-gather once all its holders stepped (GradSync::on_optimizer_done). The
    // gathers of a segment start together and share their links; max-min fair sharing ends k equal
    // collectives when k back to back would, so they are timed back to back on their communicator.
    run_family(ws, bks, order, CollectiveKind::AllGather, param_bytes, [&](const Bucket& bk) {
      double t = 0;
      for (const Holder& h : bk.holders) t = std::max(t, ws[h.worker].finished);
      return t;
    });
    std::vector<double> gathered(ws.size(), 0.0);
    for (int b : order)
      for (const Holder& h : bks[b].holders) gathered[h.worker] = std::max(gathered[h.worker], bks[b].end);
    for (size_t w = 0; w < ws.size(); ++w) ws[w].finished = std::max(ws[w].finished, gathered[w]);
  }

  // Runs the buckets `order` (reductions or all-gathers): each on its communicator one at a time, from
  // max(earliest(bucket), communicator free) (NCCL runs a communicator's collectives in issue order). Then the
  // links several communicators share: a link carries at most its capacity (sim/net/flow_network.h), so the
  // last collective crossing it ends no earlier than the first start there plus all their time on it.
  mutable std::vector<double> communicator_free;  // scratch of run_family
  template <class Earliest>
  void run_family(const std::vector<Worker>& ws, std::vector<Bucket>& bks, const std::vector<int>& order,
                  CollectiveKind kind, double bytes_per_param, Earliest earliest) const {
    std::vector<double>& free_at = communicator_free;  // per communicator (0: free from the start)
    free_at.clear();
    for (int b : order) free_at.resize(std::max<size_t>(free_at.size(), bks[b].communicator + 1), 0.0);
    for (int b : order) {
      Bucket& bk = bks[b];
      bk.start = std::max(earliest(bk), free_at[bk.communicator]);
      bk.end = bk.start + bucket_s(ws, bk, kind, bytes_per_param);
      free_at[bk.communicator] = bk.end;
    }
    shared_links(ws, bks, order, kind, bytes_per_param);
    for (const auto& [b, end] : sharing_ends) bks[b].end = std::max(bks[b].end, end);
    sharing_ends.clear();
    if (sharing_pass == 1) end_kept_spans(bks);
    ++family;
  }

  // The links of run_family: per link its first start, the time all its buckets keep it busy (summed in
  // `order`), and the bucket that ends last (the first in `order` to reach the latest end). Per communicator
  // (its buckets have the same holders, so the same links): its first start and its last bucket; a link takes
  // the earliest first start of the communicators that load it and the last bucket of the one ending last
  // (ties: the one reached first in `order`). Its sum is accumulated bucket by bucket in `order` (the same
  // sums, term by term, as one link at a time), once for all the links the same communicators load at the
  // same seconds per byte each (LinkSlots: the same terms, the same sum).
  struct Communicator {
    const CollectiveShape* shape = nullptr;
    int active = -1;                  // its index among the family's communicators in activation order (-1: none)
    double first = 0, last_end = 0;
    int last = -1, last_position = 0;  // the last bucket and its position in `order`
    double bytes = 0;                  // its buckets' buffers, summed
  };
  mutable std::vector<Communicator> communicators;  // scratch of shared_links, by holder set
  mutable std::vector<int> active_communicators;    // holder sets, in the order `order` first reaches them
  mutable std::vector<double> link_busy;            // per slot
  mutable std::vector<std::pair<int, double>> sharing_ends;  // (bucket, earliest end) found by shared_links

  // The links a family's active communicators load, in slots of the links the same communicators load
  // equally (LinkGroups: loaders are active indices; loads coef.dp x seconds per byte). It depends only on
  // the communicators' shapes, so it is kept per collective kind and activation order while bucket_memo lasts.
  using LinkSlots = LinkGroups;
  mutable std::map<std::vector<int>, LinkSlots> link_slots_memo;  // by kind, then the holder sets in activation order
  mutable std::vector<int> link_slots_key;                          // scratch
  mutable std::vector<const std::vector<std::pair<int, double>>*> link_loaders;  // scratch
  mutable LinkGrouper link_grouper;

  const LinkSlots& link_slots(CollectiveKind kind) const {
    std::vector<int>& key = link_slots_key;
    key.assign(1, static_cast<int>(kind));
    key.insert(key.end(), active_communicators.begin(), active_communicators.end());
    if (const auto it = link_slots_memo.find(key); it != link_slots_memo.end()) return it->second;
    link_loaders.clear();
    for (const int id : active_communicators) link_loaders.push_back(&communicators[id].shape->busy_links);
    return link_slots_memo.emplace(key, link_grouper.group(link_loaders, static_cast<int>(link_count), coef.dp)).first->second;
  }

  void shared_links(const std::vector<Worker>& ws, const std::vector<Bucket>& bks, const std::vector<int>& order,
                    CollectiveKind kind, double bytes_per_param) const {
    for (size_t i = 0; i < order.size(); ++i) {
      const int b = order[i];
      const Bucket& bk = bks[b];
      if (bk.holders.size() < 2) continue;
      if (static_cast<int>(communicators.size()) <= bk.holder_set) communicators.resize(bk.holder_set + 1);
      Communicator& c = communicators[bk.holder_set];
      if (c.active < 0) {
        c.active = static_cast<int>(active_communicators.size());
        c.shape = bucket_memo.at({bk.holder_set, kind}).first;
        c.first = bk.start, c.last_end = bk.end, c.last = b, c.last_position = static_cast<int>(i), c.bytes = 0;
        active_communicators.push_back(bk.holder_set);
      }
      c.first = std::min(c.first, bk.start);
      if (bk.end > c.last_end) c.last_end = bk.end, c.last = b, c.last_position = static_cast<int>(i);
    }
    const LinkSlots& slots = link_slots(kind);
    link_busy.assign(slots.loads.size(), 0.0);
    for (const int b : order) {
      const Bucket& bk = bks[b];
      if (bk.holders.size() < 2) continue;
      const double bytes = bk.full_params / bk.lcm_tp * bytes_per_param;
      Communicator& c = communicators[bk.holder_set];
      c.bytes += bytes;
      for (const auto& [slot, k] : slots.terms[c.active]) link_busy[slot] += k * bytes;
    }
    slot_ends(ws, slots);
    processor_sharing(slots);
    share_with_other_families(slots);
    if (sharing_pass == 1) keep_for_other_families(slots);
    for (const int id : active_communicators) communicators[id].active = -1;
    active_communicators.clear();
  }

  // Each slot's links: the last bucket of the communicator that loads them ending last ends no earlier than
  // the earliest first start plus their sum (and the backward all-to-alls still to run on each link at that
  // start, alltoalls_left: they load it too).
  mutable std::vector<std::pair<double, int>> slot_first_last;  // scratch of slot_ends: per slot (first start, last bucket)
  void slot_ends(const std::vector<Worker>& ws, const LinkSlots& slots) const {
    slot_first_last.resize(slots.loads.size());
    for (size_t s = 0; s < slots.loads.size(); ++s) {
      const Communicator* last = nullptr;
      double first = 0;
      for (const auto& [i, k] : slots.loads[s]) {
        const Communicator& c = communicators[active_communicators[i]];
        if (!last) {
          last = &c, first = c.first;
          continue;
        }
        first = std::min(first, c.first);
        if (c.last_end > last->last_end || (c.last_end == last->last_end && c.last_position < last->last_position)) last = &c;
      }
      sharing_ends.push_back({last->last, first + link_busy[s]});
      slot_first_last[s] = {first, last->last};
    }
    if (alltoall_links.empty()) return;
    for (size_t x = 0; x < slots.links.size(); ++x) {
      const int s = slots.link_group[x];
      const auto [first, last] = slot_first_last[s];
      const double busy = link_busy[s], left = alltoalls_left(ws, slots.links[x], first);
      if (left > 0) sharing_ends.push_back({last, slots.loads[s].size() > 1 ? first + (busy + left) : first + busy + left});
    }
  }

  // Every communicator of a shared link, not only the last: max-min fair sharing of one link among flows
  // that start together is processor sharing, under which a load of w seconds (alone) ends after the sum
  // over the link's loads w' of min(w, w') (each of the k flows still running gets 1/k of the link; Kleinrock,
  // "Queueing Systems" vol. 2, ch. 4). A communicator's last bucket ends no earlier than its first start
  // plus that sum over the communicators still running then (their standalone end later than its start),
  // each counting only the part of its load left at that start (its buckets taken as spread evenly over
  // their span: counting whole loads doubled the error on the validation plans).
  // This delays the optimizer steps, and the ZeRO-1 all-gathers after them, of every communicator of a link
  // several load at once (e.g. one NIC serving GPUs of different pipelines), where shared_links' bound moves
  // only the one that ends last.
  void processor_sharing(const LinkSlots& slots) const {
    for (const std::vector<std::pair<int, double>>& loads : slots.loads) {
      if (loads.size() < 2) continue;
      for (const auto& [i, k] : loads) {
        const Communicator& c = communicators[active_communicators[i]];
        sharing_ends.push_back({c.last, c.first + own_family_share(loads, c, k * c.bytes)});
      }
    }
  }
  // Communicator c's time on a slot's links with its own family, its load w there included: from each
  // communicator of the slot still running at c's start, the smaller of w and the part of that one's load
  // still to carry then (its buckets spread evenly over their span).
  double own_family_share(const std::vector<std::pair<int, double>>& loads, const Communicator& c, double w) const {
    double shared = 0;
    for (const auto& [o_i, o_k] : loads) {
      const Communicator& o = communicators[active_communicators[o_i]];
      if (o.last_end <= c.first) continue;
      const double w_other = o_k * o.bytes;
      shared += std::min(w, o.first >= c.first ? w_other : w_other * (o.last_end - c.first) / (o.last_end - o.first));
    }
    return shared;
  }

  // Families run one after another (the reductions, then the tied-embedding all-reduces, then the ZeRO-1
  // all-gathers), but one family's collectives start while another's still carry their loads on the same
  // links (e.g. a node's one NIC serving a stage's reduce-scatter and then its all-gather, and the
  // tied-embedding all-reduce of the pipeline's first stage on another of its GPUs). Processor sharing as
  // above: a communicator ends no earlier than its first start plus, on each link it loads, its own
  // family's share (processor_sharing) and from every other family's communicator of that link the smaller
  // of the two loads still to carry at the later of their starts (each spread evenly over its span: its own
  // standalone, the other's as its family's sharing ended it). In the first pass the other families are those
  // before it, in the second all of them, with their loads and spans of the first pass.
  // The first pass's loads are kept per family and slot (the links one family's communicators load equally,
  // link_slots). Links in the same slot of this family and the same slots of the others get the same ends, so
  // each such combination is worked out once; the combinations depend only on the families' slots, so they
  // are kept while link_slots_memo keeps those.
  static constexpr int kFamilies = 3;  // reductions, tied-embedding all-reduces, ZeRO-1 all-gathers
  using Combination = std::array<int, kFamilies + 1>;  // this family's slot, then each family's (-1: none)
  struct LoadSpan {
    double first = 0, end = 0, seconds = 0;
    int last = -1;  // the communicator's last bucket, whose end (shared links included) ends the span
  };
  mutable std::vector<LoadSpan> slot_spans;         // of the first pass: per family, per slot, per loader
  mutable std::vector<int> slot_span_begin;         // per kept slot: its first in slot_spans (and one past the last)
  mutable std::array<const LinkSlots*, kFamilies> family_slots{};  // of the first pass (nullptr: not run)
  mutable std::array<int, kFamilies> family_slot_base{};           // each family's first kept slot
  mutable int family = 0, sharing_pass = 1;                        // of the run_family call under way
  mutable bool shared_across_families = false;
  mutable std::map<std::array<const LinkSlots*, kFamilies + 1>, std::vector<Combination>> family_combinations;
  mutable std::vector<Combination> slots_of_link;  // scratch of combinations, per link
  void clear_family_loads() const {
    family_slots.fill(nullptr);
    slot_spans.clear(), slot_span_begin.assign(1, 0);
  }
  void share_with_other_families(const LinkSlots& slots) const {
    std::array<const LinkSlots*, kFamilies + 1> key{&slots};
    bool any = false;
    for (int f = 0; f < kFamilies; ++f) any |= (key[f + 1] = f == family ? nullptr : family_slots[f]) != nullptr;
    if (!any) return;
    auto it = family_combinations.find(key);
    if (it == family_combinations.end()) it = family_combinations.emplace(key, combinations(key)).first;
    for (Combination slot : it->second) {
      for (int f = 0; f < kFamilies; ++f)
        if (slot[f + 1] >= 0) slot[f + 1] += family_slot_base[f];
      share_slot_with_other_families(slots.loads[slot[0]], slot);
    }
  }
  // The distinct combinations of slots over the links of key[0] that some other family loads too.
  std::vector<Combination> combinations(const std::array<const LinkSlots*, kFamilies + 1>& key) const {
    slots_of_link.resize(link_count);
    for (const int l : key[0]->links) slots_of_link[l].fill(-1);
    for (int f = 0; f < kFamilies; ++f)
      if (key[f + 1])
        for (size_t x = 0; x < key[f + 1]->links.size(); ++x) slots_of_link[key[f + 1]->links[x]][f + 1] = key[f + 1]->link_group[x];
    std::vector<Combination> out;
    for (size_t x = 0; x < key[0]->links.size(); ++x) {
      Combination c = slots_of_link[key[0]->links[x]];
      c[0] = key[0]->link_group[x];
      if (std::all_of(c.begin() + 1, c.end(), [](int v) { return v < 0; }) || (!out.empty() && out.back() == c)) continue;
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    }
    for (int f = 0; f < kFamilies; ++f)  // leave no slot of this key to the next (links it does not load)
      if (key[f + 1])
        for (const int l : key[f + 1]->links) slots_of_link[l].fill(-1);
    return out;
  }
  void share_slot_with_other_families(const std::vector<std::pair<int, double>>& loads, const Combination& kept) const {
    for (const auto& [i, k] : loads) {
      const Communicator& c = communicators[active_communicators[i]];
      const double w = k * c.bytes;
      double others = 0;
      for (int f = 1; f <= kFamilies; ++f) {
        if (kept[f] < 0) continue;
        for (int e = slot_span_begin[kept[f]]; e < slot_span_begin[kept[f] + 1]; ++e) {
          const LoadSpan& o = slot_spans[e];
          if (o.end <= c.first || o.first >= c.last_end) continue;
          // from the later start of the two, the smaller of the loads each still has to carry
          others += o.first >= c.first ? std::min(o.seconds, w * (c.last_end - o.first) / (c.last_end - c.first))
                                       : std::min(w, o.seconds * (o.end - c.first) / (o.end - o.first));
        }
      }
      if (others <= 0) continue;
      shared_across_families = true;
      sharing_ends.push_back({c.last, c.first + std::max(own_family_share(loads, c, w), w) + others});
    }
  }
  void keep_for_other_families(const LinkSlots& slots) const {
    if (family >= kFamilies) throw std::logic_error("estimator: more collective families than kept");
    family_slots[family] = &slots;
    family_slot_base[family] = static_cast<int>(slot_span_begin.size()) - 1;
    for (const auto& loads : slots.loads) {
      for (const auto& [i, k] : loads) {
        const Communicator& c = communicators[active_communicators[i]];
        slot_spans.push_back({c.first, c.last_end, k * c.bytes, c.last});
      }
      slot_span_begin.push_back(static_cast<int>(slot_spans.size()));
    }
  }
  void end_kept_spans(const std::vector<Bucket>& bks) const {
    for (int e = slot_span_begin[family_slot_base[family]]; e < static_cast<int>(slot_spans.size()); ++e)
      slot_spans[e].end = bks[slot_spans[e].last].end;
  }

  // ---------------------------------------------------------------- memory
  // build_stage_work's memory per worker: stage_memory per chunk with the schedule's activations in flight
  // (split over the chunks), weights/gradients/optimizer/activations summed, framework overhead once; the
  // simulator refuses the plan when a GPU's total exceeds its memory. stage_memory is affine in in_flight,
  // so each input is evaluated once at 0 and 1 micro-batches and cached (as planner/oracle/lower_bound.cpp).
  double peak_fraction(const Plan& plan, const std::vector<Worker>& ws) const {
    const int chunks = plan.schedule == Schedule::Interleaved ? plan.interleave : 1;
    double worst = 0;
    for (const Worker& w : ws) {
      const Pipeline& pl = plan.pipelines[w.pipeline];
      const int depth = static_cast<int>(pl.stages.size()) / chunks;
      const double in_flight = activations_in_flight(plan.schedule, depth, w.rank, chunks, pl.micro_batches);
      MemoryBreakdown total;
      for (const Chunk& c : w.chunks) {
        const auto key = std::make_tuple(c.begin, c.end, w.tg->tp, c.emb, c.head, static_cast<int>(plan.recompute),
                                         plan.sequence_parallel, c.samples, w.dp_degree, plan.zero1,
                                         c.ep, c.local_experts, 0);
        auto it = memory_lines.find(key);
        if (it == memory_lines.end()) {
          StageMemoryInput in;
          in.layer_begin = c.begin;
          in.layer_end = c.end;
          in.has_embedding = c.emb;
          in.has_head = c.head;
          in.shard = {w.tg->tp, plan.sequence_parallel, c.samples};
          in.recompute = plan.recompute;
          in.zero1 = plan.zero1;
          in.dp = w.dp_degree;
          in.local_experts = c.local_experts;
          in.ep = c.ep;
          in.in_flight = 0;
          const MemoryBreakdown m0 = stage_memory(model, in);
          in.in_flight = 1;
          it = memory_lines.emplace(key, std::make_pair(m0, stage_memory(model, in))).first;
        }
        const auto& [m0, m1] = it->second;
        const double x = in_flight / static_cast<double>(w.chunks.size());
        total.weights += m0.weights + x * (m1.weights - m0.weights);
        total.gradients += m0.gradients + x * (m1.gradients - m0.gradients);
        total.optimizer += m0.optimizer + x * (m1.optimizer - m0.optimizer);
        total.activations += m0.activations + x * (m1.activations - m0.activations);
        total.other = std::max(total.other, m0.other + x * (m1.other - m0.other));
      }
      if (w.one_node) worst = std::max(worst, total.total() / w.gpu->memory_bytes);  // one node, one type
      else
        for (GpuId g : w.tg->gpus) worst = std::max(worst, total.total() / cluster.gpu_spec(g).memory_bytes);
    }
    return worst;
  }

  // The pipelines of each shape (depth and micro-batch size; concurrent_transfers), each pipeline's
  // shape (an index into shape_groups), and per shape of several pipelines their concurrent transfers by
  // boundary and direction (as run_pipeline's kinds), worked out once per estimate.
  mutable std::vector<std::vector<int>> shape_groups;
  mutable std::vector<int> shape_of;
  mutable std::vector<int> shape_position;  // per pipeline: its index among its shape's pipelines
  mutable std::vector<std::vector<const std::vector<Transfer>*>> shape_transfers;
  const Transfer& shape_transfer(const Plan& plan, int p, int j, int dir) const {
    const std::vector<int>& peers = shape_groups[shape_of[p]];
    if (peers.size() < 2) return transfer(plan.pipelines[p], j, dir);
    std::vector<const std::vector<Transfer>*>& known = shape_transfers[shape_of[p]];
    const int nst = static_cast<int>(plan.pipelines[p].stages.size());
    if (known.empty()) known.assign(2 * nst, nullptr);
    const std::vector<Transfer>*& t = known[dir == 0 ? j : nst + j];
    if (!t) t = &concurrent_transfers(plan, peers, j, dir);
    return (*t)[shape_position[p]];
  }
  void group_by_shape(const Plan& plan) const {
    for (auto& g : shape_groups) g.clear();
    for (auto& t : shape_transfers) t.clear();
    size_t groups = 0;
    shape_of.assign(plan.pipelines.size(), -1);
    shape_position.assign(plan.pipelines.size(), 0);
    for (size_t p = 0; p < plan.pipelines.size(); ++p) {
      const Pipeline& pl = plan.pipelines[p];
      for (size_t g = 0; g < groups && shape_of[p] < 0; ++g) {
        const Pipeline& q = plan.pipelines[shape_groups[g].front()];
        if (q.stages.size() == pl.stages.size() && q.micro_batch == pl.micro_batch)
          shape_of[p] = static_cast<int>(g);
      }
      if (shape_of[p] < 0) {
        shape_of[p] = static_cast<int>(groups++);
        if (shape_groups.size() < groups) shape_groups.emplace_back(), shape_transfers.emplace_back();
      }
      shape_position[p] = static_cast<int>(shape_groups[shape_of[p]].size());
      shape_groups[shape_of[p]].push_back(static_cast<int>(p));
    }
  }

  mutable std::vector<std::vector<std::vector<int>>> worker_of_scratch;  // of estimate: lower's output
  mutable std::vector<Worker> workers_scratch;
  Estimate estimate(const Plan& plan, double stop_at_s) const {
    Estimate e;
    std::vector<std::vector<std::vector<int>>>& worker_of = worker_of_scratch;
    std::vector<Worker>& ws = workers_scratch;
    lower(plan, worker_of, ws);
    e.peak_memory_fraction = peak_fraction(plan, ws);
    e.fits = e.peak_memory_fraction <= 1.0;
    if (!e.fits) return e;
    add_expert_parallel_time(plan, ws);
    // Every worker finishes after its backward passes (reduce_gradients: reduced >= backward_done), and
    // after its optimizer step.
    const auto stop = [&](double at_least_s) {
      if (at_least_s < stop_at_s) return false;
      e.iteration_s = at_least_s, e.stopped = true;
      return true;
    };
    group_by_shape(plan);
    for (size_t p = 0; p < plan.pipelines.size(); ++p) {
      e.pipeline_s = std::max(e.pipeline_s, run_pipeline(plan, static_cast<int>(p), worker_of, ws));
      if (stop(e.pipeline_s)) return e;
    }
    double stepped = 0;
    for (const Worker& w : ws) stepped = std::max(stepped, w.backward_done + w.optimizer_s);
    if (stop(stepped)) return e;
    std::vector<Bucket>& bks = buckets(ws, worker_of);
    keep_bucket_memo_if_same_gpus(ws);
    index_alltoalls();
    reduce_gradients(plan, ws, bks);
    clear_alltoalls_index();
    for (const Worker& w : ws) e.iteration_s = std::max(e.iteration_s, w.finished);
    e.after_pipeline_s = e.iteration_s - e.pipeline_s;
    return e;
  }
};

IterationLowerBound::IterationLowerBound(const Cluster& cluster, const ModelConfig& model, long global_batch)
    : cluster_(cluster), dtype_(model.dtype) {
  if (model.moe) return;
  const ShardSpec one{.tp = 1, .sequence_parallel = false, .samples = 1};
  auto add = [&](const std::vector<OpCost>& ops) {
    for (const OpCost& op : ops)
      if (op.cls == OpClass::Gemm) flops_ += op.flops;
  };
  for (int l = 0; l < model.layers; ++l) add(layer_forward_ops(model, l, one)), add(layer_backward_ops(model, l, one));
  add(embedding_forward_ops(model, one)), add(embedding_backward_ops(model, one));
  add(head_forward_ops(model, one)), add(head_backward_ops(model, one));
  flops_ *= static_cast<double>(global_batch);
}

double IterationLowerBound::operator()(const std::map<std::string, int>& gpus) const {
  double rate = 0;  // the GPUs' best summed GEMM FLOP/s
  for (const auto& [type, count] : gpus) {
    const GpuSpec& g = cluster_.catalog.at(type);
    rate += count * g.peak_for(dtype_) * g.compute.gemm_eff_max;
  }
  return rate > 0 ? flops_ / rate : 0.0;
}

Estimator::Estimator(const Cluster& cluster, const Topology& topo, const ModelConfig& model)
    : Estimator(cluster, topo, model, fitted_estimator_coefficients()) {}
Estimator::Estimator(const Cluster& cluster, const Topology& topo, const ModelConfig& model,
                     const EstimatorCoefficients& coefficients)
    : impl_(std::make_unique<Impl>(cluster, topo, model, coefficients)) {}
Estimator::~Estimator() = default;
Estimator::Estimator(Estimator&&) noexcept = default;

Estimate Estimator::estimate(const Plan& plan, double stop_at_s) const { return impl_->estimate(plan, stop_at_s); }

}  // namespace arachne::planner
