// Tests of one simulated iteration that would catch a closed formula posing as a simulator: pipeline bubbles
// must come out of the task dependencies, skewed stages must cost what the slowest stage implies, no task may
// start before what it depends on has ended, and communication must compete on real links.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <tuple>

#include "sim/exec/simulate.h"
#include "sim/exec/stage_work.h"
#include "sim/hw/cluster.h"
#include "sim/plan/plan_yaml.h"
#include "tests/planner/random_plans.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

ModelConfig toy_model(int layers = 16) {
  ModelConfig m;
  m.name = "toy";
  m.layers = layers;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 32;
  m.ffn_hidden = 16384;
  m.seq_len = 2048;
  m.vocab = 64;  // big layers and a negligible head and embedding make the stages uniform
  m.dtype = "bf16";
  m.global_batch = 64;
  return m;
}

// One node group with links so fast that communication is negligible next to compute.
Cluster fast_cluster(const std::string& spec) {
  Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
  for (auto& g : c.groups) {
    g.intra_bw = 1e15;
    g.nic_bw = 1e15;
  }
  c.network.latency_s = 0;
  return c;
}

Plan shorthand(const Cluster& c, const ModelConfig& m, int tp, int pp, int dp, int mb, long gb,
               Schedule s = Schedule::OneFOneB, int interleave = 1) {
  Shorthand sh;
  sh.tp = tp;
  sh.pp = pp;
  sh.dp = dp;
  sh.micro_batch = mb;
  sh.global_batch = gb;
  sh.schedule = s;
  sh.interleave = interleave;
  return plan_from_shorthand(sh, c, m);
}

SimResult run(const Cluster& c, const ModelConfig& m, const Plan& p, bool timeline = true) {
  const Topology topo(c);
  SimOptions o;
  o.record_timeline = timeline;
  o.ignore_memory = true;
  return simulate_iteration(c, topo, m, p, o);
}

// End of the last forward/backward task on any GPU: the pipeline part of the iteration.
double pipeline_phase(const SimResult& r) {
  double end = 0;
  for (const auto& s : r.timeline)
    if (s.cat == "compute" || s.cat == "tp_comm") end = std::max(end, s.start_s + s.dur_s);
  return end;
}

TEST(Iteration, OneFOneBBubbleFractionComesFromDependencies) {
  const Cluster c = fast_cluster("A100-80:1x8");
  const ModelConfig m = toy_model(16);
  for (int micro : {4, 8, 16}) {
    const int p = 4;
    const Plan plan = shorthand(c, m, 1, p, 1, 1, micro);
    const SimResult r = run(c, m, plan);
    ASSERT_FALSE(r.oom);
    const double expected = double(p - 1) / (micro + p - 1);  // Narayanan et al. SC'21 §2.2
    // Stage 0 finishes last; its idle time before its last backward is the bubble.
    const double bubble = r.breakdown.bubble / (r.breakdown.bubble + r.breakdown.compute);
    EXPECT_NEAR(bubble, expected, 0.01) << "m=" << micro;
    // Breakdown accounts for every second of the iteration.
    EXPECT_NEAR(r.breakdown.sum(), r.iteration_time_s, 1e-9 * r.iteration_time_s + 1e-9);
  }
}

double stage_time(const Worker& w) { return w.chunks[0].forward.compute_s + w.chunks[0].backward.compute_s; }

TEST(Iteration, UniformPipelineTimeMatchesStageCosts) {
  const Cluster c = fast_cluster("A100-80:1x8");
  const ModelConfig m = toy_model(16);
  const int p = 4, micro = 8;
  const Plan plan = shorthand(c, m, 1, p, 1, 1, micro);
  const Topology topo(c);
  const StageWork sw = build_stage_work(c, topo, m, plan);
  double sum = 0;
  for (const Worker& w : sw.workers) sum += stage_time(w);
  double busiest = 0;
  for (const Worker& w : sw.workers) busiest = std::max(busiest, stage_time(w));
  // The first or last stage (layers + embedding or head) is the busiest: it works m·t_max and otherwise
  // waits for the fill and drain through the other stages, so T = Σ_s (tf_s+tb_s) + (m-1)·t_max; for exactly
  // uniform stages this is (m+p-1)(tf+tb). 1 % covers link latencies and the small embedding and head.
  const SimResult r = run(c, m, plan);
  EXPECT_NEAR(pipeline_phase(r), sum + (micro - 1) * busiest, 0.01 * pipeline_phase(r));
  EXPECT_NEAR(pipeline_phase(r), (micro + p - 1) * stage_time(sw.workers[1]), 0.01 * pipeline_phase(r));
}

TEST(Iteration, SkewedStagesCostWhatTheSlowestStageImplies) {
  const Cluster c = fast_cluster("A100-80:1x8");
  const ModelConfig m = toy_model(16);
  const Topology topo(c);
  const std::string yaml = R"(
version: 1
schedule: 1f1b
pipelines:
  - micro_batch: 1
    micro_batches: 8
    stages:
      - {layers: [0, 2], groups: [{gpus: "n0:0", tp: 1}]}
      - {layers: [2, 12], groups: [{gpus: "n0:1", tp: 1}]}
      - {layers: [12, 14], groups: [{gpus: "n0:2", tp: 1}]}
      - {layers: [14, 16], groups: [{gpus: "n0:3", tp: 1}]}
)";
  const Plan plan = parse_plan_yaml_text(yaml, "skewed.yaml", c);
  const StageWork sw = build_stage_work(c, topo, m, plan);
  const double slowest = stage_time(sw.workers[1]);
  for (const Worker& w : sw.workers) ASSERT_LE(stage_time(w), slowest);
  const SimResult r = run(c, m, plan);
  // Stage 1 holds 10 of 16 layers. Its two warm-up forwards (20 layer-forwards) outlast the round trip of a
  // micro-batch through stages 2-3 (4 layer-forwards + 4 layer-backwards at about 2x), so it never starves:
  // T = stage 0's forward + m x (stage 1) + stage 0's backward.
  const double expected = sw.workers[0].chunks[0].forward.compute_s + 8 * slowest +
                          sw.workers[0].chunks[0].backward.compute_s;
  EXPECT_NEAR(pipeline_phase(r), expected, 0.01 * pipeline_phase(r));
  EXPECT_GE(pipeline_phase(r), 8 * slowest);
  // And it is slower than the balanced split of the same layers.
  const SimResult balanced = run(c, m, shorthand(c, m, 1, 4, 1, 1, 8));
  EXPECT_GT(r.iteration_time_s, balanced.iteration_time_s * 1.3);
}

// Every forward of micro-batch k on stage s+1 starts after stage s finished it; every backward on stage s
// starts after stage s+1 finished its backward; no two compute tasks overlap on one GPU.
void check_dependencies(const SimResult& r, const std::vector<std::vector<GpuId>>& stage_gpus) {
  std::map<std::pair<GpuId, std::string>, std::pair<double, double>> span;
  std::map<GpuId, std::vector<std::pair<double, double>>> busy;
  for (const auto& s : r.timeline) {
    if (s.cat != "compute") continue;
    span[{s.track, s.name}] = {s.start_s, s.start_s + s.dur_s};
    busy[s.track].push_back({s.start_s, s.start_s + s.dur_s});
  }
  int checked = 0;
  for (size_t st = 0; st + 1 < stage_gpus.size(); ++st) {
    const GpuId a = stage_gpus[st][0], b = stage_gpus[st + 1][0];
    for (const auto& [key, ab] : span) {
      if (key.first != a) continue;
      const auto other = span.find({b, key.second});
      ASSERT_NE(other, span.end()) << key.second;
      if (key.second[0] == 'F') EXPECT_GE(other->second.first, ab.second - 1e-12) << key.second;
      else EXPECT_GE(ab.first, other->second.second - 1e-12) << key.second;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  for (auto& [g, v] : busy) {
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i) EXPECT_GE(v[i].first, v[i - 1].second - 1e-12) << "GPU " << g;
  }
}

TEST(Iteration, NoTaskStartsBeforeItsDependencies) {
  const Cluster c = parse_cluster_spec("A100-80:2x4", GpuCatalog::load_default());
  const ModelConfig m = toy_model(16);
  for (Schedule s : {Schedule::OneFOneB, Schedule::GPipe}) {
    const Plan plan = shorthand(c, m, 1, 4, 2, 2, 32, s);
    const SimResult r = run(c, m, plan, true);
    std::vector<std::vector<GpuId>> stages;
    for (const Stage& st : plan.pipelines[0].stages) stages.push_back(st.groups[0].gpus);
    check_dependencies(r, stages);
  }
}

TEST(Iteration, InterleavingShrinksTheBubble) {
  const Cluster c = fast_cluster("A100-80:1x8");
  const ModelConfig m = toy_model(16);
  const SimResult plain = run(c, m, shorthand(c, m, 1, 4, 1, 1, 8));
  const SimResult inter = run(c, m, shorthand(c, m, 1, 4, 1, 1, 8, Schedule::Interleaved, 2));
  // Megatron's interleaved schedule divides the bubble by the number of chunks (Narayanan et al. §2.2.1).
  EXPECT_LT(inter.iteration_time_s, plain.iteration_time_s);
  EXPECT_NEAR(inter.breakdown.bubble, plain.breakdown.bubble / 2, 0.1 * plain.breakdown.bubble);
}

TEST(Iteration, GPipeHoldsMoreActivationsThan1F1B) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const ModelConfig m = toy_model(16);
  const SimResult a = run(c, m, shorthand(c, m, 1, 4, 1, 1, 16, Schedule::OneFOneB));
  const SimResult b = run(c, m, shorthand(c, m, 1, 4, 1, 1, 16, Schedule::GPipe));
  EXPECT_GT(b.memory.activations, 2 * a.memory.activations);  // 16 micro-batches in flight vs at most 4
}

// Megatron's 1F1B blocks in every point-to-point exchange until its sends have completed and its receives
// have arrived (schedules.py, forward_backward_pipelining_without_interleaving; p2p_communication.py), so a
// slow inter-stage link is exposed on every exchange of the critical path. Two stages on two single-GPU
// nodes joined by a 10 Gbit/s NIC, m micro-batches, forward f, backward b, transfer c (activation and
// gradient are the same size). Rank 0 sends F0 (c); then each of the m-1 steady exchanges pairs rank 0's
// send_forward_recv_backward with rank 1's send_backward_recv_forward (both directions at once: c); then
// rank 1 sends the last gradient (c). Rank 0, which finishes last, is exposed to (m+1)·c of transfers and
// waits f+b for its neighbour: T = (m+1)(f+b+c) for equal stages. Fire-and-forget sends would expose only 2c.
TEST(Iteration, SlowPipelineLinkIsExposedOnEveryMegatronExchange) {
  Cluster c = parse_cluster_spec("A100-80:2x1", GpuCatalog::load_default());
  const double nic_bw = 10e9 / 8;  // 10 Gbit/s in bytes/s
  for (auto& g : c.groups) g.nic_bw = nic_bw, g.nic_count = 1;
  const ModelConfig m = toy_model(16);
  const Topology topo(c);
  for (int micro : {4, 8}) {
    const Plan plan = shorthand(c, m, 1, 2, 1, 1, micro);
    const StageWork sw = build_stage_work(c, topo, m, plan);
    // Activation of one micro-batch at the stage boundary: b·s·h elements of 2 bytes (bf16).
    const double bytes = 1.0 * m.seq_len * m.hidden * 2;
    // The NIC's achieved bandwidth: nominal x the GPU type's link efficiency (sim/hw/topology.cpp); the
    // transfer's latency and call overhead (tens of microseconds) are under 1 % of c and left out.
    const double transfer = bytes / (nic_bw * c.gpu_spec(0).compute.link_eff);
    const SimResult r = run(c, m, plan, false);
    EXPECT_NEAR(r.breakdown.pp_comm, (micro + 1) * transfer, 0.05 * (micro + 1) * transfer) << "m=" << micro;
    // Rank 0 waits for its neighbour: f1+b1-f0 before the first steady exchange, (f1+b1)-(f0+b0) before
    // each of the m-2 others (stage 1 holds the head, stage 0 the smaller embedding), f1+b1-b0 in the
    // cool-down; for equal stages the usual (p-1)(f+b).
    auto pass = [&](int w) { return sw.workers[w].chunks[0].forward.compute_s + sw.workers[w].chunks[0].backward.compute_s; };
    ASSERT_GE(pass(1), pass(0));
    const double bubble = 2 * pass(1) - pass(0) + (micro - 2) * (pass(1) - pass(0));
    EXPECT_NEAR(r.breakdown.bubble, bubble, 0.01 * bubble) << "m=" << micro;
    EXPECT_NEAR(r.breakdown.sum(), r.iteration_time_s, 1e-9 * r.iteration_time_s);

    // GPipe is not a Megatron schedule; its sends stay eager (a task waits only for its inputs). Rank 0's
    // forwards stream out while it computes (c < f), so on its critical path only the first gradient's
    // transfer is on the wire (c); after that each gradient is already in flight when rank 0 finishes the
    // previous backward and arrives b1 - b0 later (rank 1's backward includes the head's).
    const SimResult g = run(c, m, shorthand(c, m, 1, 2, 1, 1, micro, Schedule::GPipe), false);
    auto bwd = [&](int w) { return sw.workers[w].chunks[0].backward.compute_s; };
    ASSERT_LT(transfer, sw.workers[0].chunks[0].forward.compute_s);
    ASSERT_GE(bwd(1), bwd(0));
    const double gpipe = transfer + (micro - 1) * (bwd(1) - bwd(0));
    EXPECT_NEAR(g.breakdown.pp_comm, gpipe, 0.05 * gpipe) << "m=" << micro;
  }
}

TEST(Iteration, OverlappedGradientReductionHidesCommunication) {
  // Slow inter-node links make the DP all-reduce significant.
  Cluster c = parse_cluster_spec("A100-80:2x4", GpuCatalog::load_default());
  for (auto& g : c.groups) g.nic_bw = 1.25e9, g.nic_count = 1;
  const ModelConfig m = toy_model(8);
  Plan p = shorthand(c, m, 1, 1, 8, 1, 16);
  p.overlap_grad_reduce = false;
  const SimResult blocking = run(c, m, p);
  p.overlap_grad_reduce = true;
  const SimResult overlapped = run(c, m, p);
  EXPECT_GT(blocking.breakdown.dp_comm, 0);
  EXPECT_LT(overlapped.iteration_time_s, blocking.iteration_time_s);
  EXPECT_GT(blocking.bytes[static_cast<int>(LinkClass::Nic)], 0);
}

TEST(Iteration, TensorParallelAcrossNodesIsSlowerThanInside) {
  const Cluster c = parse_cluster_spec("A100-80:2x4", GpuCatalog::load_default());
  const ModelConfig m = toy_model(8);
  const std::string inside = R"(
pipelines:
  - micro_batch: 4
    micro_batches: 4
    stages: [{layers: [0, 8], groups: [{gpus: "n0:0-3", tp: 4}]}]
)";
  const std::string across = R"(
pipelines:
  - micro_batch: 4
    micro_batches: 4
    stages: [{layers: [0, 8], groups: [{gpus: "n0:0-1,n1:0-1", tp: 4}]}]
)";
  const SimResult a = run(c, m, parse_plan_yaml_text(inside, "inside.yaml", c));
  const SimResult b = run(c, m, parse_plan_yaml_text(across, "across.yaml", c));
  EXPECT_GT(b.breakdown.tp_comm, a.breakdown.tp_comm);
  EXPECT_GT(b.bytes[static_cast<int>(LinkClass::Nic)], 0);
  EXPECT_EQ(a.bytes[static_cast<int>(LinkClass::Nic)], 0);
}

// Two pipelines of different structure on two GPU types reduce their gradients together. The V100 pipeline
// holds the whole model on one GPU; the A100 pipeline cuts it at layer 3, its first stage TP 2. Every
// gradient segment ([0,3) with the embedding, [3,8) with the head) is then all-reduced over rings of two
// GPUs, one per node, each ring with the V100 GPU: [0,3) in two TP slices (A100 GPU 0 and GPU 1 each with
// the V100), [3,8) whole. A 2-GPU ring all-reduce of s bytes sends 2(n-1)/n·s = s each way per member
// (Patarasuk & Yuan 2009, the ring volume sim/net/collectives.h cites), so the V100 node's single NIC
// carries every gradient byte S once in each direction, as does the A100 node's: with that NIC port (nic_bw x
// link_eff, sim/hw/topology.h) the bottleneck of every route and max-min sharing keeping it busy while any
// ring runs, the reduction takes S / NIC bandwidth. Without overlap every bucket is ready when the V100 GPU, which has
// 48 layer passes to the A100 stages' at most 10 (plus a 1-pass bubble), ends its backward; it also steps
// the most parameters, so it finishes last and the breakdown is its own.
TEST(Iteration, HeterogeneousPipelinesReduceGradientsTogether) {
  Cluster c = parse_cluster_spec("A100-80:1x4,V100-32:1x2", GpuCatalog::load_default());
  const double nic_bw = 1.25e9;  // 10 Gbit/s, one NIC per node: the reduction dwarfs every overhead
  for (auto& g : c.groups) g.nic_bw = nic_bw, g.nic_count = 1;
  ModelConfig m = test::small_gpt_model(16);
  m.ffn_kind = FfnKind::Swiglu;  // Llama-style: untied head, so no embedding all-reduce joins the DP buckets
  const std::string yaml = R"(
overlap_grad_reduce: false
pipelines:
  - micro_batch: 2
    micro_batches: 6
    stages:
      - {layers: [0, 8], groups: [{gpus: "n1:0", tp: 1}]}
  - micro_batch: 2
    micro_batches: 2
    stages:
      - {layers: [0, 3], groups: [{gpus: "n0:0-1", tp: 2}]}
      - {layers: [3, 8], groups: [{gpus: "n0:2", tp: 1}]}
)";
  const Plan plan = parse_plan_yaml_text(yaml, "hetero.yaml", c);
  const SimResult r = run(c, m, plan);
  // Parameters by hand (Llama: Touvron et al. 2023): per layer Q, K, V and output h x h each, SwiGLU FFN
  // 3·h·f, two RMSNorm weights h; word embedding V·h; untied output matrix V·h and final RMSNorm h.
  const double h = m.hidden, f = m.ffn_hidden, V = m.vocab;
  const double params = m.layers * (4 * h * h + 3 * h * f + 2 * h) + V * h + V * h + h;
  const double bytes = params * 4;  // fp32 gradients for a bf16 model (Megatron reduces main grads in fp32)
  const double link_eff = std::min(c.gpu_spec(0).compute.link_eff, c.gpu_spec(4).compute.link_eff);
  const double expected = bytes / (nic_bw * link_eff);  // ~0.64 s
  // 0.5 %: the terms left out are one collective call overhead (31 us) and two ring-step latencies (5 us)
  // per bucket, under 5 buckets: < 0.2 ms, 0.03 % of the expected time.
  EXPECT_NEAR(r.breakdown.dp_comm, expected, 0.005 * expected);
  EXPECT_LT(r.breakdown.wait, 0.005 * expected);  // the V100 GPU waits for nobody
  EXPECT_NEAR(r.breakdown.sum(), r.iteration_time_s, 1e-9 * r.iteration_time_s);
  EXPECT_FALSE(r.warnings.empty());  // V100 runs bf16 at its fp16 rate
}

// The bundled two-pipeline plan: the V100 pipeline finishes its backward long before the A100 pipeline has
// the gradients of the same layers, and waits. That idle time is `wait`; dp_comm keeps only the reduction
// itself. The V100 worker that finishes last reduces its 6 layers (and an end of the model: word and
// position embeddings on the first stage, the tied output matrix's copy and final LayerNorm on the last) with
// the A100 stage holding them, in TP slices of rings of two GPUs. The V100 node's single 100 Gbit/s NIC
// carries the whole segment once each way (a 2-GPU ring all-reduce sends 2(n-1)/n = 1 buffer per GPU,
// Patarasuk & Yuan 2009), while each A100 GPU has its own 200 Gbit/s NIC for 1/8 of two segments; so
// dp_comm = gradient bytes / 12.5 GB/s.
TEST(Iteration, WaitingForTheSlowerPipelineIsWaitNotDataParallelCommunication) {
  const GpuCatalog catalog = GpuCatalog::load_default();
  const Cluster c = load_cluster(test::configs() + "/clusters/hetero-a100-v100.yaml", catalog);
  const ModelConfig m = load_model("gpt3-1.3b");
  const Plan plan = parse_plan_yaml(test::configs() + "/plans/gpt3-1.3b-hetero-two-pipelines.yaml", c);
  const SimResult r = run(c, m, plan);
  ASSERT_FALSE(r.oom);
  // The worker that finishes last: the GPU whose optimizer step ends last.
  GpuId last = -1;
  double last_end = -1;
  for (const auto& s : r.timeline)
    if (s.cat == "optimizer" && s.start_s + s.dur_s > last_end) last_end = s.start_s + s.dur_s, last = s.track;
  ASSERT_GE(last, 0);
  ASSERT_EQ(c.gpu_spec(last).name, "V100-32");
  const Stage* st = nullptr;
  for (const Stage& s : plan.pipelines[1].stages)
    for (GpuId g : s.groups[0].gpus)
      if (g == last) st = &s;
  ASSERT_NE(st, nullptr);
  // Parameters by hand (GPT, gelu FFN of 4h): per layer QKV 3h²+3h, projection h²+h, FFN 8h²+5h, two
  // LayerNorms 4h; word embedding V·h and position embedding s·h; tied output copy V·h and final LayerNorm 2h.
  const double h = m.hidden, layer = 12 * h * h + 13 * h;
  double params = (st->layer_end - st->layer_begin) * layer;
  if (st->layer_begin == 0) params += m.vocab * h + m.seq_len * h;
  if (st->layer_end == m.layers) params += m.vocab * h + 2 * h;
  const double bytes = params * 4;  // fp32 gradients for a bf16 model (Megatron reduces main grads in fp32)
  const double nic = 100e9 / 8;
  // Then the tied word embedding's all-reduce with the pipeline's other end (a ring of two across nodes:
  // V·h fp32 gradients each way) when this stage holds the head or the embedding.
  double expected = bytes / nic;
  if (st->layer_begin == 0 || st->layer_end == m.layers) expected += m.vocab * h * 4 / nic;
  // 2 % covers the collective call overhead (31 us) and link latencies (5 us per hop) against ~0.1 s.
  EXPECT_NEAR(r.breakdown.dp_comm, expected, 0.02 * expected);
  // The wait is the time from this worker's last backward (with its TP all-reduces) to the moment the A100
  // stage holding its first layer has finished its last backward pass (when its last bucket becomes ready).
  // 1 % covers a final gradient send to the previous stage (about 1 ms), which a non-first stage makes.
  double v100_free = 0, a100_ready = 0;
  GpuId a100 = -1;
  for (const Stage& s : plan.pipelines[0].stages)
    if (s.layer_begin <= st->layer_begin && st->layer_begin < s.layer_end) a100 = s.groups[0].gpus.front();
  for (const auto& s : r.timeline) {
    if (s.track == last && (s.cat == "compute" || s.cat == "tp_comm")) v100_free = std::max(v100_free, s.start_s + s.dur_s);
    if (s.track == a100 && s.cat == "compute") a100_ready = std::max(a100_ready, s.start_s + s.dur_s);
  }
  EXPECT_GT(r.breakdown.wait, 1.0);  // most of the old "DP communication"
  EXPECT_NEAR(r.breakdown.wait, a100_ready - v100_free, 0.01 * r.breakdown.wait);
  EXPECT_NEAR(r.breakdown.sum(), r.iteration_time_s, 1e-9 * r.iteration_time_s);
}

TEST(Iteration, SameInputsSameResult) {
  const Cluster c = parse_cluster_spec("A100-80:2x4", GpuCatalog::load_default());
  const ModelConfig m = toy_model(8);
  const Plan p = shorthand(c, m, 2, 2, 2, 2, 32);
  const SimResult a = run(c, m, p), b = run(c, m, p);
  EXPECT_EQ(a.iteration_time_s, b.iteration_time_s);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.bytes, b.bytes);
}

}  // namespace
}  // namespace arachne

namespace arachne {
namespace {

// Exact shortcut: recomputing max-min rates only for the flows coupled to a change must give exactly the
// iteration the full recomputation gives, on a heterogeneous plan with contended NICs (DP rings, pipeline
// sends and cross-node TP sharing links).
TEST(IterationShortcuts, ComponentRecomputeEqualsFullSimulation) {
  Cluster c = parse_cluster_spec("A100-80:2x4,V100-32:2x2", GpuCatalog::load_default());
  for (auto& g : c.groups) g.nic_count = 1;  // one NIC per node: everything crossing nodes shares it
  const ModelConfig m = toy_model(8);
  const std::string yaml = R"(
pipelines:
  - micro_batch: 2
    micro_batches: 4
    stages:
      - {layers: [0, 4], groups: [{gpus: "n0:0-1", tp: 2}]}
      - {layers: [4, 8], groups: [{gpus: "n1:0-1", tp: 2}]}
  - micro_batch: 2
    micro_batches: 4
    stages:
      - {layers: [0, 4], groups: [{gpus: "n0:2-3", tp: 2}]}
      - {layers: [4, 8], groups: [{gpus: "n1:2,n2:0", tp: 2}]}
  - micro_batch: 1
    micro_batches: 4
    stages:
      - {layers: [0, 5], groups: [{gpus: "n1:3", tp: 1}]}
      - {layers: [5, 8], groups: [{gpus: "n2:1", tp: 1}, {gpus: "n3:0", tp: 1}]}
)";
  const Plan plan = parse_plan_yaml_text(yaml, "contended.yaml", c);
  const Topology topo(c);
  SimOptions fast, full;
  fast.ignore_memory = full.ignore_memory = true;
  fast.record_timeline = full.record_timeline = true;
  full.exact_shortcuts = false;
  const SimResult a = simulate_iteration(c, topo, m, plan, fast);
  const SimResult b = simulate_iteration(c, topo, m, plan, full);
  EXPECT_EQ(a.iteration_time_s, b.iteration_time_s);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.breakdown.bubble, b.breakdown.bubble);
  EXPECT_EQ(a.breakdown.dp_comm, b.breakdown.dp_comm);
  test::expect_same_timeline_order(a, b);
  EXPECT_GT(a.bytes[static_cast<int>(LinkClass::Nic)], 0);
}

}  // namespace
}  // namespace arachne

namespace arachne {
namespace {

// The timeline shows each GPU's compute stream without overlaps (Perfetto needs properly nested slices on a
// thread), DP reductions on the GPU's own communication track, and transfers on link-class tracks.
TEST(IterationTimeline, GpuStreamsDoNotOverlapAndCommunicationHasItsOwnTracks) {
  const Cluster c = parse_cluster_spec("A100-80:2x4", GpuCatalog::load_default());
  const ModelConfig m = toy_model(8);
  const SimResult r = run(c, m, shorthand(c, m, 2, 2, 2, 1, 16));
  const int n = c.total_gpus();
  std::map<int, std::vector<std::pair<double, double>>> per_track;
  int dp = 0, link = 0;
  for (const auto& s : r.timeline) {
    if (s.cat == "dp_comm") {
      EXPECT_GE(s.track, n + kLinkClasses);
      ++dp;
    }
    if (s.overlaps) {
      EXPECT_GE(s.track, n);
      EXPECT_LT(s.track, n + kLinkClasses);
      ++link;
    } else {
      per_track[s.track].push_back({s.start_s, s.start_s + s.dur_s});
    }
  }
  EXPECT_GT(dp, 0);
  EXPECT_GT(link, 0);
  for (auto& [track, v] : per_track) {
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i) EXPECT_GE(v[i].first, v[i - 1].second - 1e-12) << "track " << track;
  }
}

}  // namespace
}  // namespace arachne

namespace arachne {
namespace {

// Megatron order with TP2 x DP4 fills a node per stage: each pipeline's sends leave through its own GPUs'
// NICs and the gradient rings stay inside the nodes, so the four pipelines are isolated copies and three of
// them need not be simulated. The result must be the full simulation's, bit for bit, with fewer events.
TEST(IterationShortcuts, IdenticalIsolatedPipelinesSimulatedOnceMatchFullSimulation) {
  const Cluster c = parse_cluster_spec("A100-80:4x8", GpuCatalog::load_default());
  const ModelConfig m = toy_model(8);
  for (Schedule s : {Schedule::OneFOneB, Schedule::GPipe, Schedule::Interleaved}) {
    const Plan p = shorthand(c, m, 2, 4, 4, 1, 32, s, s == Schedule::Interleaved ? 2 : 1);
    const SimResult fast = test::simulate_with_shortcuts(c, m, p, true);
    const SimResult full = test::simulate_with_shortcuts(c, m, p, false);
    test::expect_same_result(fast, full);
    EXPECT_LT(fast.events, full.events);  // the shortcut did apply
  }
}

// With one NIC per node every pipeline's sends share it: the pipelines interact, but symmetrically (rotating
// them maps every transfer onto another), so they are still simulated once, and the result must be the full
// simulation's (tests/sim/pipeline_mirror_test.cpp has the cases where the symmetry breaks).
TEST(IterationShortcuts, PipelinesSharingANicSymmetricallyAreMirrored) {
  Cluster c = parse_cluster_spec("A100-80:4x8", GpuCatalog::load_default());
  for (auto& g : c.groups) g.nic_count = 1;
  // Tied (GPT) and untied (Llama-style FFN) embeddings: a tied model's per-pipeline embedding all-reduce maps
  // onto the next pipeline's.
  for (bool tied : {true, false}) {
    ModelConfig m = toy_model(8);
    if (!tied) m.ffn_kind = FfnKind::Swiglu;
    ASSERT_EQ(m.tied_embeddings(), tied);
    const Plan p = shorthand(c, m, 2, 4, 4, 1, 32);
    const SimResult fast = test::simulate_with_shortcuts(c, m, p, true);
    const SimResult full = test::simulate_with_shortcuts(c, m, p, false);
    SCOPED_TRACE(::testing::Message() << "tied " << tied);
    test::expect_same_result(fast, full);
    EXPECT_LT(fast.events, full.events);
  }
}

}  // namespace
}  // namespace arachne

namespace arachne {
namespace {

// Regression: on this snapshot of partly free nodes (found replaying the Alibaba trace), a flow whose
// finish time was recomputed to the same instant was completed twice, corrupting the flow network and
// deadlocking the iteration. Every worker must finish, with and without overlapped gradient reduction.
TEST(Iteration, PartlyFreeNodesWithCrossNodeTpFinish) {
  const std::string yaml = R"(
name: partly-free
node_groups:
  - {gpu: A10G, nodes: 1, gpus_per_node: 2}
  - {gpu: A10G, nodes: 1, gpus_per_node: 7}
  - {gpu: A10G, nodes: 1, gpus_per_node: 6}
  - {gpu: A10G, nodes: 1, gpus_per_node: 7}
  - {gpu: A10G, nodes: 1, gpus_per_node: 2}
)";
  const std::string path = testing::TempDir() + "/partly_free.yaml";
  std::ofstream(path) << yaml;
  const Cluster c = parse_cluster_yaml(path, GpuCatalog::load_default());
  const ModelConfig m = load_model("gpt3-1.3b");
  for (bool overlap : {true, false}) {
    Plan p = shorthand(c, m, 2, 4, 2, 1, 64);
    p.overlap_grad_reduce = overlap;
    const SimResult r = run(c, m, p, false);
    EXPECT_GT(r.iteration_time_s, 0);
    EXPECT_NEAR(r.breakdown.sum(), r.iteration_time_s, 1e-9 * r.iteration_time_s);
  }
}


// Megatron all-reduces the tied word embedding's gradient between the first and the last stage after the
// data-parallel reduction (train_step, "backward-embedding-all-reduce"). With PP 2 and DP 1 it is the only
// gradient collective: one 2-GPU all-reduce of V·h gradients (fp32 for bf16) over NVLink, i.e. a ring of two
// moving V·h·4 bytes each way: overhead + 2 ring steps of latency + V·h·4 / (link bandwidth · link_eff).
TEST(Iteration, TiedEmbeddingGradientIsAllReducedBetweenFirstAndLastStage) {
  const Cluster c = parse_cluster_spec("A100-80:1x2", GpuCatalog::load_default());
  ModelConfig m = test::small_gpt_model(8);
  ASSERT_TRUE(m.tied_embeddings());
  const SimResult r = run(c, m, shorthand(c, m, 1, 2, 1, 1, 8));
  const GpuSpec& gpu = c.gpu_spec(0);
  const double bytes = static_cast<double>(m.vocab) * static_cast<double>(m.hidden) * 4.0;
  const double expected = gpu.compute.collective_overhead_s + 2 * Topology(c).latency_s(0, 1) +
                          bytes / (c.groups[0].intra_bw * gpu.compute.link_eff);
  int spans = 0;
  for (const auto& s : r.timeline)
    if (s.cat == "dp_comm" && s.dur_s > 0) {
      ++spans;
      EXPECT_NEAR(s.dur_s, expected, 0.05 * expected) << s.name << " on track " << s.track;
    }
  EXPECT_EQ(spans, 2);  // one span per stage (GPU 0 and GPU 1)

  // Untied (Llama-style) or one stage: no such collective.
  ModelConfig llama = m;
  llama.ffn_kind = FfnKind::Swiglu;
  ASSERT_FALSE(llama.tied_embeddings());
  const SimResult u = run(c, llama, shorthand(c, llama, 1, 2, 1, 1, 8));
  for (const auto& s : u.timeline) EXPECT_FALSE(s.cat == "dp_comm" && s.dur_s > 0);
}

}  // namespace
}  // namespace arachne

namespace arachne {
namespace {

// Ring collectives start their edges as checked bundles (sim/net/collectives.cpp): on random valid plans
// (tests/planner/random_plans.h: idle GPUs, mixed GPU types in a stage, uneven batch splits, ZeRO-1 and
// recompute drawn) over clusters whose data-parallel rings cross NICs, alone or shared, the result and the
// timeline must be those of separate flows, bit for bit and in the same order.
TEST(IterationShortcuts, RingBundlesMatchSeparateFlowsOnRandomPlans) {
  const ModelConfig m = toy_model(8);
  int plans = 0;
  for (const char* spec : {"A100-80:4x4,V100-32:4x2", "H100:2x8,A100-40:4x2,T4:4x1"}) {
    for (const int nics : {0, 1}) {  // 0: the catalog's NICs; 1: one NIC per node, shared by its GPUs
      Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
      if (nics) for (auto& g : c.groups) g.nic_count = nics;
      const Topology topo(c);
      std::mt19937_64 rng(11 + nics);
      for (int i = 0; i < 12; ++i) {
        const Plan p = test::draw_random_plan(c, m, 32, rng);
        SimOptions bundled;
        bundled.ignore_memory = true;
        bundled.record_timeline = true;
        SimOptions separate = bundled;
        separate.checked_bundles = false;
        SCOPED_TRACE(::testing::Message() << spec << " nics " << nics << " plan " << i);
        const SimResult a = simulate_iteration(c, topo, m, p, bundled);
        const SimResult b = simulate_iteration(c, topo, m, p, separate);
        test::expect_same_result(a, b);
        test::expect_same_timeline_order(a, b);
        plans += a.breakdown.dp_comm > 0;
      }
    }
  }
  EXPECT_GE(plans, 24);  // most plans reduce gradients over rings
}

}  // namespace
}  // namespace arachne
