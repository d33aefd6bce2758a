// One training iteration as a discrete-event simulation.
//
// Lowering: every TP group of every stage of every pipeline is a *worker* (its TP ranks run in lockstep,
// synchronised by their per-layer all-reduces, so one timeline stands for all of them). A worker runs its
// schedule's program (sim/exec/pipeline_schedule.h): forward/backward micro-batch tasks and, between them,
// Megatron's blocking point-to-point exchanges with the neighbouring stages' groups. A transfer is a flow on
// the real links that starts once both its sender and its receiver have posted it (NCCL send/recv pair up
// in posting order on each pair of ranks); an exchange ends when all its transfers have. Gradients are reduced per
// layer segment over every group holding those layers, across pipelines of any structure, in Megatron's
// buckets (launched during the last backward when overlap_grad_reduce), as collectives on the real links;
// then each worker runs its optimizer step (and, with ZeRO-1, the parameter all-gather).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <set>

#include "sim/core/engine.h"
#include "sim/exec/grad_sync.h"
#include "sim/exec/pipeline_mirror.h"
#include "sim/exec/pipeline_schedule.h"
#include "sim/exec/simulate.h"
#include "sim/exec/stage_work.h"
#include "sim/net/collectives.h"
#include "sim/net/flow_network.h"
#include "sim/net/alltoall.h"
#include "sim/model/compute_time.h"
#include "sim/model/moe_costs.h"
#include "sim/model/moe_routing.h"

namespace arachne {
namespace {

constexpr double kGiB = 1073741824.0;

// Per-worker accounting of where its time went (DESIGN.md breakdown causes).
struct WorkerClock {
  TimeNs free_at = 0;  // when its previous task ended
  Breakdown spent;     // seconds
};

// One pipeline transfer: link `link` of sends[dir] of chunk `chunk` of worker `src`, for micro-batch `mb`.
struct Transfer {
  int src = 0, chunk = 0, dir = 0, link = 0, mb = 0;
  bool sender_waits = true;  // false for eager sends
  int receiver = -1;         // the worker whose posted receive it was paired with, once paired
  TimeNs start = -1, end = -1;
};

// Sends and receives posted on one (sender, receiver, direction) pair and not yet paired, in posting order.
struct Channel {
  struct Recv {
    int worker;
    ScheduledTask expected;  // the task whose input the receive is for
  };
  std::vector<int> sends;  // transfer ids
  std::vector<Recv> recvs;
  size_t send_head = 0, recv_head = 0;
};

class IterationSim {
 public:
  IterationSim(const Cluster& c, const Topology& t, const ModelConfig& m, const Plan& p, const SimOptions& o)
      : cluster_(c), topo_(t), model_(m), plan_(p), opt_(o), net_(engine_, t.links(),
             o.exact_shortcuts ? FlowNetwork::Recompute::Component : FlowNetwork::Recompute::Global),
        ctx_{engine_, net_, t}, work_(build_stage_work(c, t, m, p)) {
    net_.set_checked_bundles(o.exact_shortcuts && o.checked_bundles);
    for (const Worker& wk : work_.workers) worker_gpu_.push_back(&c.gpu_spec(wk.gpus.front()));
    phased_task_.resize(work_.workers.size());
  }

  SimResult run();

 private:
  int micro_batches_of(int w) const { return plan_.pipelines[work_.workers[w].pipeline].micro_batches; }

  void build_channels();
  void advance(int w);
  bool post_exchange(int w, const ScheduleStep& s);
  void post_send(int w, const ScheduledTask& t, bool eager);
  void post_recv(int w, const ScheduledTask& t);
  void pair(int id, const Channel::Recv& r);
  void start_transfer(int id);
  void transfer_done(int id);
  void exchange_progress(int w);
  void close_exchange(int w);
  void start_task(int w, const ScheduledTask& t);
  void finish_task(int w, const ScheduledTask& t);
  void after_compute(int w, const ScheduledTask& t);
  void run_phase(int w, const ScheduledTask& t, int k);
  const RoutingDraw& routing(int w, const ScheduledTask& t, int layer);
  long peer_tokens(int w, int chunk) const;
  std::vector<long> rank_tokens(const ChunkCost& cc, const RoutingDraw& d, int r) const;
  long rank_kept(const ChunkCost& cc, const RoutingDraw& d, int r) const;
  double expert_time_s(int w, const ScheduledTask& t, int layer);
  void run_alltoall(int w, const ScheduledTask& t, int layer, bool to_experts, std::function<void()> done);
  void record(int w, const std::string& name, const char* cat, TimeNs start, TimeNs end, int track_offset = 0);
  void record_task(int w, const std::string& name, const char* cat, TimeNs start, TimeNs end);
  void record_flow(int src_worker, int dst_worker, const char* name, const char* cat, TimeNs start, TimeNs end);
  void program_done(int w);
  void account_dp_idle(int w);
  void on_worker_grads_reduced(int w);
  void on_worker_finished(int w);

  const Cluster& cluster_;
  const Topology& topo_;
  const ModelConfig& model_;
  const Plan& plan_;
  const SimOptions& opt_;
  Engine engine_;
  FlowNetwork net_;
  CollectiveContext ctx_;
  StageWork work_;
  std::vector<const GpuSpec*> worker_gpu_;  // per worker: its first GPU's type
  std::vector<ScheduledTask> phased_task_;   // per worker: the task it runs phase by phase (run_phase)
  std::unique_ptr<GradSync> grads_;

  // Programs, one per distinct (depth, rank, chunks, micro-batches); program_[w] points at worker w's.
  std::map<std::tuple<int, int, int, int>, std::vector<ScheduleStep>> programs_;
  std::vector<const std::vector<ScheduleStep>*> program_;
  std::vector<size_t> pc_;                          // per worker: index of its current step
  std::vector<bool> busy_;                          // per worker: a task is running
  std::vector<int> waiting_;                        // per worker: transfers its current exchange waits for
  std::vector<std::vector<int>> exchange_transfers_;  // per worker: those transfers (for the breakdown)
  std::vector<Transfer> transfers_;
  std::vector<Channel> channels_;
  std::vector<std::pair<TimeNs, TimeNs>> wire_scratch_;
  // send_channel_[w][chunk][dir][i]: channel of link i of that chunk's sends; recv_channels_[w][chunk][dir]:
  // the channels bringing that chunk its inputs (dir 0 activations, 1 gradients).
  std::vector<std::vector<std::array<std::vector<int>, 2>>> send_channel_, recv_channels_;
  std::vector<WorkerClock> clock_;
  std::vector<TimeNs> end_;  // per worker: end of its iteration
  // Exact shortcut (sim/exec/pipeline_mirror.h): mirrors_[w] lists the workers whose pipeline phase copies
  // worker w's; they run no tasks of their own, and w's sends carry theirs as bundles.
  std::vector<std::vector<int>> mirrors_;
  std::vector<bool> mirrored_;
  PipelineMirroring mirroring_;
  // Expert parallelism: workers waiting at each all-to-all (group, micro-batch, chunk, index, forward), the
  // routing drawn per (group, micro-batch, layer), and the token assignments dropped at capacity.
  std::map<std::tuple<int, int, int, int, int>, std::vector<std::pair<int, TimeNs>>> rendezvous_;
  std::map<std::tuple<int, int, int>, RoutingDraw> draws_;
  double dropped_ = 0;
  std::array<double, kLinkClasses> closed_form_bytes_{};
  SimResult res_;
};

void IterationSim::record(int w, const std::string& name, const char* cat, TimeNs start, TimeNs end,
                          int track_offset) {
  if (!opt_.record_timeline || end <= start) return;
  for (GpuId g : work_.workers[w].gpus)
    res_.timeline.push_back({g + track_offset, name, cat, ns_to_seconds(start), ns_to_seconds(end - start)});
}

// Pipeline-phase spans of a simulated worker stand for its mirrors too.
void IterationSim::record_task(int w, const std::string& name, const char* cat, TimeNs start, TimeNs end) {
  record(w, name, cat, start, end);
  for (int m : mirrors_[w]) record(m, name, cat, start, end);
}

// A transfer goes on the track of the highest link class its (first member's) route crosses.
void IterationSim::record_flow(int src_worker, int dst_worker, const char* name, const char* cat, TimeNs start,
                               TimeNs end) {
  if (!opt_.record_timeline || end <= start) return;
  const auto& route = topo_.route(work_.workers[src_worker].gpus.front(), work_.workers[dst_worker].gpus.front());
  int cls = 0;
  for (LinkId l : route) cls = std::max(cls, static_cast<int>(topo_.links()[l].cls));
  res_.timeline.push_back(
      {topo_.num_gpus() + cls, name, cat, ns_to_seconds(start), ns_to_seconds(end - start), true});
}

// Pipeline channels: one per (sender, receiver, direction) pair of workers that exchange tensors.
void IterationSim::build_channels() {
  const int nw = static_cast<int>(work_.workers.size());
  std::map<std::tuple<int, int, int>, int> ids;
  send_channel_.assign(nw, {});
  recv_channels_.assign(nw, {});
  for (int w = 0; w < nw; ++w) {
    send_channel_[w].resize(work_.workers[w].chunks.size());
    recv_channels_[w].resize(work_.workers[w].chunks.size());
  }
  for (int w = 0; w < nw; ++w)
    for (size_t c = 0; c < work_.workers[w].chunks.size(); ++c)
      for (int d = 0; d < 2; ++d)
        for (const StageLink& l : work_.workers[w].chunks[c].sends[d]) {
          const auto [it, fresh] = ids.emplace(std::make_tuple(w, l.peer_worker, d), static_cast<int>(ids.size()));
          send_channel_[w][c][d].push_back(it->second);
          auto& in = recv_channels_[l.peer_worker][l.peer_chunk][d];
          if (std::find(in.begin(), in.end(), it->second) == in.end()) in.push_back(it->second);
        }
  channels_.assign(ids.size(), Channel{});
}

// Runs worker w's program from its current step until a task starts or an exchange has to wait.
void IterationSim::advance(int w) {
  const std::vector<ScheduleStep>& prog = *program_[w];
  while (pc_[w] < prog.size()) {
    const ScheduleStep& s = prog[pc_[w]];
    if (!s.exchange) {
      start_task(w, s.task);
      return;
    }
    if (!post_exchange(w, s)) return;
    ++pc_[w];
  }
  program_done(w);
}

// Posts an exchange's sends and receives; true when it completes at once (nothing to wait for).
bool IterationSim::post_exchange(int w, const ScheduleStep& s) {
  waiting_[w] = 0;
  exchange_transfers_[w].clear();
  for (int i = 0; i < s.num_sends; ++i) post_send(w, s.sends[i], s.eager);
  for (int i = 0; i < s.num_recvs; ++i) post_recv(w, s.recvs[i]);
  if (waiting_[w] > 0) return false;
  close_exchange(w);
  return true;
}

// Task t's output goes to the next virtual stage (activations) or the previous one (gradients): one transfer
// to each group of that stage whose share of the micro-batch overlaps w's, as a bundle of TP-rank flows.
void IterationSim::post_send(int w, const ScheduledTask& t, bool eager) {
  const int d = t.forward ? 0 : 1;
  const auto& links = work_.workers[w].chunks[t.chunk].sends[d];
  for (size_t i = 0; i < links.size(); ++i) {
    const int id = static_cast<int>(transfers_.size());
    transfers_.push_back({w, t.chunk, d, static_cast<int>(i), t.micro_batch, !eager});
    if (!eager) {
      ++waiting_[w];
      exchange_transfers_[w].push_back(id);
    }
    if (eager) start_transfer(id);
    Channel& ch = channels_[send_channel_[w][t.chunk][d][i]];
    if (ch.recv_head < ch.recvs.size()) pair(id, ch.recvs[ch.recv_head++]);
    else ch.sends.push_back(id);
  }
}

// The input of task t (activations for a forward, gradients for a backward): one transfer from each group
// that sends it.
void IterationSim::post_recv(int w, const ScheduledTask& t) {
  for (int c : recv_channels_[w][t.chunk][t.forward ? 0 : 1]) {
    Channel& ch = channels_[c];
    ++waiting_[w];
    if (ch.send_head < ch.sends.size()) pair(ch.sends[ch.send_head++], {w, t});
    else ch.recvs.push_back({w, t});
  }
}

// A posted send meets its posted receive: the transfer starts (eager sends already have) or, if it already
// arrived, the receive is satisfied at once. The pairing must give the receiver the tensor the schedule
// expects, or the programs do not match.
void IterationSim::pair(int id, const Channel::Recv& r) {
  Transfer& x = transfers_[id];
  const StageLink& l = work_.workers[x.src].chunks[x.chunk].sends[x.dir][x.link];
  if (l.peer_chunk != r.expected.chunk || x.mb != r.expected.micro_batch || (x.dir == 0) != r.expected.forward)
    throw std::logic_error("pipeline schedule mismatch: worker " + std::to_string(r.worker) + " expects the input of " +
                           (r.expected.forward ? "F" : "B") + std::to_string(r.expected.micro_batch) + " chunk " +
                           std::to_string(r.expected.chunk) + " but worker " + std::to_string(x.src) + " sends " +
                           (x.dir == 0 ? "activations" : "gradients") + " of micro-batch " + std::to_string(x.mb) +
                           " for chunk " + std::to_string(l.peer_chunk));
  if (x.end >= 0) {
    --waiting_[r.worker];
    return;
  }
  x.receiver = r.worker;
  exchange_transfers_[r.worker].push_back(id);
  if (x.start < 0) start_transfer(id);
}

void IterationSim::start_transfer(int id) {
  Transfer& x = transfers_[id];
  x.start = engine_.now();
  const StageLink& l = work_.workers[x.src].chunks[x.chunk].sends[x.dir][x.link];
  net_.start(l.hops, l.bytes_per_member, seconds_to_ns(l.latency_s), [this, id]() { transfer_done(id); },
             l.rate_bound);
}

void IterationSim::transfer_done(int id) {
  Transfer& x = transfers_[id];
  x.end = engine_.now();
  if (opt_.record_timeline) {
    const int dst = work_.workers[x.src].chunks[x.chunk].sends[x.dir][x.link].peer_worker;
    const char* name = x.dir == 0 ? "act" : "grad";
    record_flow(x.src, dst, name, "pp_comm", x.start, x.end);
    for (size_t i = 0; i < mirrors_[x.src].size(); ++i)
      record_flow(mirrors_[x.src][i], mirrors_[dst][i], name, "pp_comm", x.start, x.end);
  }
  if (x.sender_waits) exchange_progress(x.src);
  if (x.receiver >= 0) exchange_progress(x.receiver);
}

void IterationSim::exchange_progress(int w) {
  if (--waiting_[w] > 0) return;
  close_exchange(w);
  ++pc_[w];
  advance(w);
}

// Time blocked in an exchange: while one of its transfers is on the wire it is pipeline communication; while
// none is (a neighbour has not reached the matching exchange yet) it is pipeline bubble.
void IterationSim::close_exchange(int w) {
  WorkerClock& c = clock_[w];
  const TimeNs now = engine_.now();
  std::vector<std::pair<TimeNs, TimeNs>>& on_wire = wire_scratch_;
  on_wire.clear();
  for (int id : exchange_transfers_[w]) on_wire.push_back({std::max(transfers_[id].start, c.free_at), transfers_[id].end});
  std::sort(on_wire.begin(), on_wire.end());
  TimeNs comm = 0, covered = c.free_at;
  for (const auto& [a, b] : on_wire) {
    comm += std::max<TimeNs>(0, b - std::max(a, covered));
    covered = std::max(covered, b);
  }
  c.spent.pp_comm += ns_to_seconds(comm);
  c.spent.bubble += ns_to_seconds(now - c.free_at - comm);
  c.free_at = now;
}

void IterationSim::start_task(int w, const ScheduledTask& t) {
  busy_[w] = true;
  const TimeNs now = engine_.now();
  const Worker& wk = work_.workers[w];
  const ChunkCost& cc = wk.chunks[t.chunk];
  const PassCost& pc = t.forward ? cc.forward : cc.backward;

  // Megatron's bucketed gradient reduction starts while the last backward is still running.
  if (!t.forward && t.micro_batch == micro_batches_of(w) - 1) {
    grads_->on_last_backward_start(w, t.chunk, now, pc.compute_s);
    for (int m : mirrors_[w]) grads_->on_last_backward_start(m, t.chunk, now, pc.compute_s);
  }
  if (!cc.ep_peers.empty()) {  // expert parallelism: the pass is cut at every MoE all-to-all
    phased_task_[static_cast<std::size_t>(w)] = t;
    run_phase(w, t, 0);
    return;
  }
  const TimeNs compute_ns = seconds_to_ns(pc.compute_s);
  clock_[w].spent.compute += ns_to_seconds(compute_ns);

  if (opt_.record_timeline)
    record_task(w,
           std::string(t.forward ? "F" : "B") + std::to_string(t.micro_batch) +
               (wk.chunks.size() > 1 ? " c" + std::to_string(t.chunk) : std::string()),
           "compute", now, now + compute_ns);
  engine_.schedule_after(compute_ns, [this, w, t]() { after_compute(w, t); });
}

// The pass's kernels are done: its TP collectives (closed form inside a node, flows across), then the task
// ends.
void IterationSim::after_compute(int w, const ScheduledTask& t) {
  {
    const Worker& wk2 = work_.workers[w];
    const PassCost& pc2 = t.forward ? wk2.chunks[t.chunk].forward : wk2.chunks[t.chunk].backward;
    if (pc2.tp_bytes <= 0) {
      finish_task(w, t);
      return;
    }
    const TimeNs tp_start = engine_.now();
    auto done = [this, w, t, tp_start]() {
      clock_[w].spent.tp_comm += ns_to_seconds(engine_.now() - tp_start);
      record_task(w, "TP", "tp_comm", tp_start, engine_.now());
      finish_task(w, t);
    };
    if (wk2.tp_closed_form) {
      const double s = pc2.tp_closed_form_s;
      const double copies = 1.0 + static_cast<double>(mirrors_[w].size());
      for (int k = 0; k < kLinkClasses; ++k) closed_form_bytes_[k] += copies * pc2.tp_closed_form_bytes[k];
      engine_.schedule_after(seconds_to_ns(s), done);
    } else {
      // TP group across nodes: the pass's collectives as one all-reduce on the real links, after their
      // per-call software overheads.
      const double ovh = pc2.tp_collectives * cluster_.gpu_spec(wk2.gpus.front()).compute.collective_overhead_s;
      engine_.schedule_after(seconds_to_ns(ovh), [this, w, bytes = pc2.tp_bytes, done]() {
        allreduce(ctx_, work_.workers[w].gpus, bytes, done);
      });
    }
  }
}

// Expert-parallel pass, phase k: 4i = dense kernels before MoE block i (the last, 4K, after the last block),
// 4i+1 = first all-to-all of block i (dispatch; in backward the combine's gradient), 4i+2 = this rank's
// experts, 4i+3 = second all-to-all (combine; in backward the dispatch's gradient). Blocks run in layer order
// forward and in reverse backward. Every all-to-all waits for all EP peers: the slowest peer gates the layer.
void IterationSim::run_phase(int w, const ScheduledTask& t, int k) {
  const ChunkCost& cc = work_.workers[w].chunks[t.chunk];
  const int blocks = static_cast<int>(cc.moe_layers.size());
  if (k > 4 * blocks) {
    after_compute(w, t);
    return;
  }
  const int i = k / 4;
  const int layer = cc.moe_layers[t.forward ? std::min(i, blocks - 1) : blocks - 1 - std::min(i, blocks - 1)];
  const TimeNs now = engine_.now();
  switch (k % 4) {
    case 0:
    case 2: {
      const double s = k % 4 == 0 ? (t.forward ? cc.forward_segments_s : cc.backward_segments_s)[i]
                                  : expert_time_s(w, t, layer);
      const TimeNs d = seconds_to_ns(s);
      clock_[w].spent.compute += ns_to_seconds(d);
      if (opt_.record_timeline)
        record(w,
               std::string(t.forward ? "F" : "B") + std::to_string(t.micro_batch) +
                   (k % 4 == 0 ? "" : " experts L" + std::to_string(layer)),
               "compute", now, now + d);
      // Two words: std::function keeps them inline (no allocation per segment); the task is the worker's.
      engine_.schedule_after(d, [this, w, k]() {
        const ScheduledTask t = phased_task_[static_cast<std::size_t>(w)];
        const int blocks = static_cast<int>(work_.workers[w].chunks[t.chunk].moe_layers.size());
        // Overlapped gradient reduction: after a dense backward segment of the last micro-batch, every
        // layer above the next MoE block is done.
        if (k % 4 == 0 && !t.forward && t.micro_batch == micro_batches_of(w) - 1) {
          const ChunkCost& c = work_.workers[w].chunks[t.chunk];
          const int i2 = k / 4;
          const int first = i2 < blocks ? c.moe_layers[blocks - 1 - i2] + 1 : c.layer_begin;
          grads_->on_layers_done(w, t.chunk, first, i2 == blocks && c.has_embedding);
        }
        run_phase(w, t, k + 1);
      });
      return;
    }
    default: {
      // Rendezvous of the EP group at this all-to-all.
      const int phase = k % 4 == 1 ? 0 : 1;
      auto& rv = rendezvous_[{cc.ep_group, t.micro_batch, t.chunk, i * 2 + phase, t.forward ? 1 : 0}];
      rv.push_back({w, now});
      if (rv.size() < cc.ep_peers.size()) return;
      const std::vector<std::pair<int, TimeNs>> arrived = std::move(rv);
      rendezvous_.erase({cc.ep_group, t.micro_batch, t.chunk, i * 2 + phase, t.forward ? 1 : 0});
      // Tokens go owner -> expert in the dispatch and in the combine's gradient; back in the other two.
      const bool to_experts = phase == 0;
      // The last peer to arrive starts the all-to-all; until then the others wait.
      run_alltoall(w, t, layer, to_experts, [this, arrived, t, k, layer, start = now]() {
        const TimeNs end = engine_.now();
        for (const auto& [peer, since] : arrived) {
          clock_[peer].spent.wait += ns_to_seconds(start - since);
          clock_[peer].spent.ep_comm += ns_to_seconds(end - start);
          if (opt_.record_timeline) {
            record(peer, "wait", "wait", since, start);
            record(peer, "A2A L" + std::to_string(layer), "ep_comm", start, end);
          }
          run_phase(peer, t, k + 1);
        }
      });
      return;
    }
  }
}

const RoutingDraw& IterationSim::routing(int w, const ScheduledTask& t, int layer) {
  const ChunkCost& cc = work_.workers[w].chunks[t.chunk];
  const auto key = std::make_tuple(cc.ep_group, t.micro_batch, layer);
  auto it = draws_.find(key);
  if (it != draws_.end()) return it->second;
  long tokens = 0;
  for (int peer : cc.ep_peers) tokens += peer_tokens(peer, t.chunk);
  const std::uint64_t stream = (static_cast<std::uint64_t>(cc.ep_group) << 32) | static_cast<std::uint64_t>(t.micro_batch);
  RoutingDraw d = draw_routing(*model_.moe, tokens, opt_.seed, stream, static_cast<std::uint64_t>(layer));
  dropped_ += static_cast<double>(d.dropped);
  return draws_.emplace(key, std::move(d)).first->second;
}

long IterationSim::peer_tokens(int w, int chunk) const {
  return std::lround(work_.workers[w].chunks[chunk].samples * static_cast<double>(model_.seq_len));
}

// Kept token assignments of the experts EP rank `r` holds.
std::vector<long> IterationSim::rank_tokens(const ChunkCost& cc, const RoutingDraw& d, int r) const {
  int first = 0;
  for (int q = 0; q < r; ++q) first += cc.ep_experts[q];
  return std::vector<long>(d.kept.begin() + first, d.kept.begin() + first + cc.ep_experts[r]);
}

// The sum of rank_tokens(cc, d, r), without building it.
long IterationSim::rank_kept(const ChunkCost& cc, const RoutingDraw& d, int r) const {
  int first = 0;
  for (int q = 0; q < r; ++q) first += cc.ep_experts[q];
  long kept = 0;
  for (int e = first; e < first + cc.ep_experts[r]; ++e) kept += d.kept[static_cast<std::size_t>(e)];
  return kept;
}

double IterationSim::expert_time_s(int w, const ScheduledTask& t, int layer) {
  const Worker& wk = work_.workers[w];
  const ChunkCost& cc = wk.chunks[t.chunk];
  const GpuSpec& gpu = *worker_gpu_[static_cast<std::size_t>(w)];
  const RoutingDraw& d = routing(w, t, layer);
  auto rank_time = [&](int r, int shards) {
    const std::vector<OpCost> fwd = expert_forward_ops(model_, rank_tokens(cc, d, r), shards);
    const double f = ops_time_s(fwd, gpu, model_.dtype);
    if (t.forward) return f;
    // Backward: input and weight gradients, plus the forward again under full recompute.
    return ops_time_s(backward_of(fwd), gpu, model_.dtype) + (plan_.recompute == Recompute::Full ? f : 0.0);
  };
  if (cc.ep_members.empty()) return rank_time(cc.ep_rank, wk.tp);
  // EP ranks inside the TP groups: the group waits for its slowest GPU's experts.
  double worst = 0;
  for (size_t i = 0; i < cc.ep_members.size(); ++i)
    if (std::find(wk.gpus.begin(), wk.gpus.end(), cc.ep_members[i]) != wk.gpus.end())
      worst = std::max(worst, rank_time(static_cast<int>(i) / cc.ep_etp, cc.ep_etp));
  return worst;
}

// One all-to-all per TP-rank channel among the EP peers' corresponding GPUs (sequence-parallel token
// shards), each member sending its share of every rank's kept tokens. Under full recompute the backward's
// all-to-alls carry the recomputed forward's too.
void IterationSim::run_alltoall(int w, const ScheduledTask& t, int layer, bool to_experts, std::function<void()> done) {
  const ChunkCost& cc = work_.workers[w].chunks[t.chunk];
  const RoutingDraw& d = routing(w, t, layer);
  const int n = static_cast<int>(cc.ep_peers.size());
  int channels = 1 << 30;
  for (int peer : cc.ep_peers) channels = std::min(channels, work_.workers[peer].tp);
  long tokens = 0;
  for (int peer : cc.ep_peers) tokens += peer_tokens(peer, t.chunk);
  const double repeat = !t.forward && plan_.recompute == Recompute::Full ? 2.0 : 1.0;
  if (!cc.ep_members.empty()) {
    // EP ranks inside the TP groups: one all-to-all over the stage's GPUs. Each GPU owns its group's
    // tokens / tp (sequence shard) and sends every rank its share, split over that rank's GPUs.
    const int m = static_cast<int>(cc.ep_members.size());
    std::vector<double> owned(m, 0.0);
    for (int i = 0; i < m; ++i)
      for (int peer : cc.ep_peers) {
        const Worker& pw = work_.workers[peer];
        if (std::find(pw.gpus.begin(), pw.gpus.end(), cc.ep_members[i]) != pw.gpus.end())
          owned[i] = static_cast<double>(peer_tokens(peer, t.chunk)) / pw.tp;
      }
    std::vector<std::vector<double>> gb(m, std::vector<double>(m, 0.0));
    for (int r = 0; r < cc.ep; ++r) {
      const long kept = rank_kept(cc, d, r);
      for (int j = r * cc.ep_etp; j < (r + 1) * cc.ep_etp; ++j)
        for (int i = 0; i < m; ++i) {
          const double b = static_cast<double>(kept) * owned[i] / static_cast<double>(tokens) *
                           dispatch_bytes_per_assignment(model_) * repeat / cc.ep_etp;
          (to_experts ? gb[i][j] : gb[j][i]) = b;
        }
    }
    const std::vector<GpuId> members = cc.ep_members;
    engine_.schedule_after(seconds_to_ns(work_.workers[w].collective_overhead_s),
                           [this, members, gb, done = std::move(done)]() {
                             if (opt_.hierarchical_alltoall) hierarchical_alltoall(ctx_, members, gb, done);
                             else alltoall(ctx_, members, gb, done);
                           });
    return;
  }
  // Shared by the channels' all-to-alls (read only).
  auto shared = std::make_shared<std::vector<std::vector<double>>>(n, std::vector<double>(n, 0.0));
  std::vector<std::vector<double>>& bytes = *shared;
  const double per_assignment = dispatch_bytes_per_assignment(model_);
  std::vector<double> owned(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) owned[static_cast<std::size_t>(i)] = static_cast<double>(peer_tokens(cc.ep_peers[i], t.chunk));
  for (int j = 0; j < n; ++j) {
    const long kept = rank_kept(cc, d, j);
    for (int i = 0; i < n; ++i) {
      const double b = static_cast<double>(kept) * owned[static_cast<std::size_t>(i)] /
                       static_cast<double>(tokens) * per_assignment * repeat / channels;
      (to_experts ? bytes[i][j] : bytes[j][i]) = b;
    }
  }
  auto left = std::make_shared<int>(channels);
  auto fin = std::make_shared<std::function<void()>>(std::move(done));
  const double ovh = work_.workers[w].collective_overhead_s;
  for (int c = 0; c < channels; ++c) {
    std::vector<GpuId> members;
    for (int peer : cc.ep_peers) {
      const Worker& pw = work_.workers[peer];
      members.push_back(pw.gpus[static_cast<size_t>(c) * pw.tp / channels]);
    }
    engine_.schedule_after(seconds_to_ns(ovh), [this, members = std::move(members), shared, left, fin]() {
      auto one = [left, fin]() {
        if (--*left == 0) (*fin)();
      };
      if (opt_.hierarchical_alltoall) hierarchical_alltoall(ctx_, members, *shared, one);
      else alltoall(ctx_, members, *shared, one);
    });
  }
}

void IterationSim::finish_task(int w, const ScheduledTask&) {
  busy_[w] = false;
  clock_[w].free_at = engine_.now();
  ++pc_[w];
  advance(w);
}

// The worker's program is done (its last backward and the exchange after it): its gradients are complete.
void IterationSim::program_done(int w) {
  grads_->on_backward_done(w, engine_.now());
  for (int m : mirrors_[w]) {
    clock_[m] = clock_[w];
    grads_->on_backward_done(m, engine_.now());
  }
}

// Idle time of worker w since it last worked, at a collective over peers of other pipelines: while one of
// its gradient collectives runs it is data-parallel communication, otherwise waiting for a peer.
void IterationSim::account_dp_idle(int w) {
  WorkerClock& c = clock_[w];
  const TimeNs now = engine_.now();
  const TimeNs comm = grads_->collective_time(w, c.free_at, now);
  c.spent.dp_comm += ns_to_seconds(comm);
  c.spent.wait += ns_to_seconds(now - c.free_at - comm);
  c.free_at = now;
}

// All of this worker's gradient buckets are reduced: run the optimizer step.
void IterationSim::on_worker_grads_reduced(int w) {
  const TimeNs now = engine_.now();
  WorkerClock& c = clock_[w];
  account_dp_idle(w);
  const TimeNs d = seconds_to_ns(work_.workers[w].optimizer_s);
  record(w, "optimizer", "optimizer", now, now + d);
  c.spent.optimizer += ns_to_seconds(d);
  c.free_at = now + d;
  engine_.schedule_after(d, [this, w]() { grads_->on_optimizer_done(w, engine_.now()); });
}

void IterationSim::on_worker_finished(int w) {
  account_dp_idle(w);  // ZeRO-1 parameter all-gather
  end_[w] = engine_.now();
}

SimResult IterationSim::run() {
  const auto wall0 = std::chrono::steady_clock::now();
  const int nw = static_cast<int>(work_.workers.size());
  res_.global_batch = plan_.global_batch();
  res_.gpus_used = plan_.num_gpus();

  // Memory first: a plan that does not fit is reported, not simulated (unless asked to).
  double worst_frac = -1;
  for (const Worker& w : work_.workers) {
    for (GpuId g : w.gpus) {
      const GpuSpec& spec = cluster_.gpu_spec(g);
      GpuMemoryReport r{g, cluster_.gpu_label(g), spec.name, spec.memory_bytes, w.memory};
      const double frac = w.memory.total() / spec.memory_bytes;
      if (frac > worst_frac) {
        worst_frac = frac;
        res_.memory = w.memory;
        res_.peak_memory_gib = w.memory.total() / kGiB;
        res_.peak_memory_gpu = r.label;
      }
      if (frac > 1.0) res_.oom = true;
      res_.per_gpu_memory.push_back(std::move(r));
    }
  }
  std::sort(res_.per_gpu_memory.begin(), res_.per_gpu_memory.end(),
            [](const GpuMemoryReport& a, const GpuMemoryReport& b) { return a.gpu < b.gpu; });
  // A bf16 model on a GPU without bf16 runs at its fp16 rate (GpuSpec::peak_for), and the output says so.
  if (model_.dtype == "bf16") {
    std::set<std::string> no_bf16;
    for (const GpuMemoryReport& g : res_.per_gpu_memory)
      if (!cluster_.gpu_spec(g.gpu).has_bf16()) no_bf16.insert(g.gpu_type);
    for (const auto& n : no_bf16) res_.warnings.push_back(n + " has no bf16: it runs the bf16 model at its fp16 rate");
  }
  if (res_.oom && !opt_.ignore_memory) {
    res_.sim_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    return res_;
  }

  // Programs and channels (only the simulated workers run theirs; mirrors copy their representative's).
  program_.assign(nw, nullptr);
  pc_.assign(nw, 0);
  busy_.assign(nw, false);
  waiting_.assign(nw, 0);
  exchange_transfers_.assign(nw, {});
  clock_.assign(nw, WorkerClock{});
  end_.assign(nw, -1);
  build_channels();
  GradSync::Callbacks cb;
  cb.grads_reduced = [this](int w) { on_worker_grads_reduced(w); };
  cb.finished = [this](int w) { on_worker_finished(w); };
  if (opt_.record_timeline)
    cb.bucket_span = [this](int w, TimeNs a, TimeNs b) {
      record(w, "DP reduce", "dp_comm", a, b, topo_.num_gpus() + kLinkClasses);
    };
  grads_ = std::make_unique<GradSync>(model_, plan_, work_, ctx_, std::move(cb));

  mirrors_.assign(nw, {});
  mirrored_.assign(nw, false);
  if (opt_.exact_shortcuts) {
    mirroring_ = find_mirrored_workers(topo_, plan_, work_, *grads_);
    const std::vector<int>& rep = mirroring_.mirror_of;
    for (int w = 0; w < nw; ++w)
      if (rep[w] != w) mirrors_[rep[w]].push_back(w), mirrored_[w] = true;
    bundle_mirrored_sends(topo_, mirroring_, work_);
    if (!mirroring_.symmetry.gpu_image.empty()) {
      ctx_.symmetry = &mirroring_.symmetry;
      net_.set_link_copies(mirroring_.symmetry.link_orbit_size);
      grads_->fold_symmetric_embedding_buckets();
    }
  }
  size_t steps = 0;
  for (int w = 0; w < nw; ++w) {
    if (mirrored_[w]) continue;
    const Worker& wk = work_.workers[w];
    const auto key = std::make_tuple(work_.physical_depth[wk.pipeline], wk.rank, static_cast<int>(wk.chunks.size()),
                                     micro_batches_of(w));
    auto it = programs_.find(key);
    if (it == programs_.end())
      it = programs_.emplace(key, rank_program(plan_.schedule, std::get<0>(key), std::get<1>(key), std::get<2>(key),
                                               std::get<3>(key))).first;
    program_[w] = &it->second;
    steps += it->second.size();
  }
  transfers_.reserve(steps);
  for (int w = 0; w < nw; ++w)
    if (!mirrored_[w]) advance(w);
  engine_.run();

  // Result.
  TimeNs iter = 0;
  int critical = 0;
  for (int w = 0; w < nw; ++w) {
    if (end_[w] < 0) {
      std::string why = "simulation deadlock: worker " + std::to_string(w) + " (pipeline " +
                        std::to_string(work_.workers[w].pipeline) + ", rank " + std::to_string(work_.workers[w].rank) +
                        ") did not finish: at step " + std::to_string(pc_[w]) + " of " +
                        std::to_string(program_[w] ? program_[w]->size() : 0) + (busy_[w] ? ", a task running" : "") + "; " +
                        std::to_string(net_.active_flows()) + " flows still in the network";
      if (program_[w] && pc_[w] < program_[w]->size() && (*program_[w])[pc_[w]].exchange)
        why += "; its exchange waits for " + std::to_string(waiting_[w]) + " transfers";
      throw std::logic_error(why);
    }
    if (end_[w] > iter) iter = end_[w], critical = w;
  }
  res_.iteration_time_s = ns_to_seconds(iter);
  res_.breakdown = clock_[critical].spent;
  const double t = res_.iteration_time_s;
  res_.samples_per_s = res_.global_batch / t;
  res_.tokens_per_s = res_.samples_per_s * static_cast<double>(model_.seq_len);
  double peak_used = 0;
  std::set<GpuId> used;
  for (const Worker& w : work_.workers)
    for (GpuId g : w.gpus)
      if (used.insert(g).second) peak_used += cluster_.gpu_spec(g).peak_for(model_.dtype);
  double peak_all = 0;
  for (GpuId g = 0; g < cluster_.total_gpus(); ++g) peak_all += cluster_.gpu_spec(g).peak_for(model_.dtype);
  res_.tflops_per_gpu = work_.model_flops / t / static_cast<double>(used.size()) / 1e12;
  res_.mfu = work_.model_flops / t / peak_used;
  res_.mfu_cluster = work_.model_flops / t / peak_all;
  const auto& nb = net_.bytes_by_class();
  for (int k = 0; k < kLinkClasses; ++k)
    res_.bytes[k] = nb[k] / links_per_crossing(static_cast<LinkClass>(k)) + closed_form_bytes_[k];
  res_.dropped_tokens = dropped_;
  res_.events = engine_.executed();
  res_.timeline_tracks = 2 * topo_.num_gpus() + kLinkClasses;
  res_.sim_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return res_;
}

}  // namespace

SimResult simulate_iteration(const Cluster& cluster, const Topology& topo, const ModelConfig& model,
                             const Plan& plan, const SimOptions& opt) {
  IterationSim sim(cluster, topo, model, plan, opt);
  return sim.run();
}

}  // namespace arachne
