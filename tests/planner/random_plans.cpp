// Random valid plans (see random_plans.h): TP groups cut from the nodes, grouped into blocks of pipelines of
// one shape, given a batch split, then assembled into a Plan.
#include "tests/planner/random_plans.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <set>

#include "sim/exec/simulate.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::test {
namespace {

using Rng = std::mt19937_64;

long uniform(Rng& rng, long lo, long hi) { return std::uniform_int_distribution<long>(lo, hi)(rng); }
bool one_in(Rng& rng, int n) { return uniform(rng, 0, n - 1) == 0; }

template <class T>
const T& pick(Rng& rng, const std::vector<T>& options) {
  return options[static_cast<size_t>(uniform(rng, 0, static_cast<long>(options.size()) - 1))];
}

std::vector<long> divisors(long n) {
  std::vector<long> d;
  for (long k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

// A uniformly random composition of `total` into minimum.size() parts, part i at least minimum[i]: the
// extra units are stars, and the parts - 1 bars take distinct slots among extra + parts - 1, drawn by
// Floyd's algorithm (Bentley & Floyd, "Programming Pearls: A Sample of Brilliance", CACM 30(9), 1987).
// Requires total >= sum(minimum).
std::vector<long> composition(Rng& rng, long total, const std::vector<long>& minimum) {
  const long parts = static_cast<long>(minimum.size());
  const long extra = total - std::accumulate(minimum.begin(), minimum.end(), 0L);
  const long slots = extra + parts - 1;
  std::set<long> bars;
  for (long j = slots - (parts - 1); j < slots; ++j) {
    const long t = uniform(rng, 0, j);
    bars.insert(bars.count(t) ? j : t);
  }
  std::vector<long> out;
  long previous = -1;
  for (const long b : bars) out.push_back(b - previous - 1), previous = b;
  out.push_back(slots - 1 - previous);
  for (long i = 0; i < parts; ++i) out[i] += minimum[i];
  return out;
}

std::vector<long> composition(Rng& rng, long total, long parts, long minimum_each) {
  return composition(rng, total, std::vector<long>(static_cast<size_t>(parts), minimum_each));
}

// `total` split into parts of at least minimum[i]: half the time a uniform composition, half the time as
// near to proportional to `weight` as integers allow (the units left by rounding down go to random distinct
// parts), so the draws hold balanced splits as well as extreme ones.
std::vector<long> draw_split(Rng& rng, long total, const std::vector<long>& minimum, const std::vector<double>& weight) {
  if (one_in(rng, 2)) return composition(rng, total, minimum);
  const long extra = total - std::accumulate(minimum.begin(), minimum.end(), 0L);
  const double sum = std::accumulate(weight.begin(), weight.end(), 0.0);
  std::vector<long> out = minimum;
  long left = extra;
  for (size_t i = 0; i < out.size(); ++i) {
    const long share = static_cast<long>(static_cast<double>(extra) * weight[i] / sum);
    out[i] += share;
    left -= share;
  }
  std::vector<size_t> order(out.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i = 0; left > 0; ++i, --left) ++out[order[i % order.size()]];
  return out;
}

// TP degrees a group may take: powers of two dividing the heads and key/value heads, up to the largest node.
std::vector<int> tp_degrees(const Cluster& cluster, const ModelConfig& model) {
  int largest_node = 0;
  for (const Node& n : cluster.nodes) largest_node = std::max(largest_node, n.gpus);
  const int kv_heads = model.kv_heads > 0 ? model.kv_heads : model.heads;
  std::vector<int> out;
  for (int t = 1; t <= largest_node; t *= 2)
    if ((model.heads <= 0 || model.heads % t == 0) && (kv_heads <= 0 || kv_heads % t == 0)) out.push_back(t);
  return out;
}

// Every GPU of every node in some TP group: each node's GPUs in random order, cut into groups of random
// degrees that fit in what is left of the node. Each group lists its GPUs in ascending order.
std::vector<std::vector<GpuId>> cut_tp_groups(const Cluster& cluster, const std::vector<int>& degrees, Rng& rng) {
  std::vector<std::vector<GpuId>> groups;
  for (const Node& node : cluster.nodes) {
    std::vector<GpuId> gpus(static_cast<size_t>(node.gpus));
    std::iota(gpus.begin(), gpus.end(), node.first_gpu);
    std::shuffle(gpus.begin(), gpus.end(), rng);
    for (size_t at = 0; at < gpus.size();) {
      std::vector<int> fitting;
      for (const int t : degrees)
        if (at + t <= gpus.size()) fitting.push_back(t);
      const int tp = pick(rng, fitting);
      std::vector<GpuId> group(gpus.begin() + static_cast<long>(at), gpus.begin() + static_cast<long>(at + tp));
      std::sort(group.begin(), group.end());
      groups.push_back(std::move(group));
      at += tp;
    }
  }
  return groups;
}

// The groups a plan uses: all of them in random order, or (idle GPUs) a random non-empty proper subset.
std::vector<std::vector<GpuId>> choose_used_groups(std::vector<std::vector<GpuId>> groups, bool idle, Rng& rng) {
  std::shuffle(groups.begin(), groups.end(), rng);
  if (idle && groups.size() > 1 && one_in(rng, 3)) groups.resize(static_cast<size_t>(uniform(rng, 1, static_cast<long>(groups.size()) - 1)));
  return groups;
}

enum class EpMode { None, InsideStages, AcrossPipelines };

// A block: `width` consecutive pipelines of one shape (stage count, layers, groups per stage, micro-batch
// count). Without EP across pipelines every block is one pipeline; with it, width = ep, and the block is
// one EP group per stage (validate_plan: equal layers, depth, micro-batch count and groups per stage).
struct Block {
  int width = 1;
  std::vector<int> groups_per_stage;
  std::vector<int> layers_per_stage;
  std::vector<std::vector<int>> experts;  // per stage: uneven expert placement, empty = even
  long micro_batches = 1;
  std::vector<long> micro_batch;          // per pipeline of the block
  long min_micro_batch() const { return *std::max_element(groups_per_stage.begin(), groups_per_stage.end()); }
};

// Block shapes for `lanes` groups per pipeline lane: the lanes split over a random number of blocks, each
// block's groups over a random number of stages, the layers over the same number.
std::vector<Block> draw_block_shapes(int lanes, int width, long global_batch, const ModelConfig& model, Rng& rng) {
  const long blocks = uniform(rng, 1, std::min<long>(lanes, global_batch / width));
  std::vector<Block> out;
  for (const long groups : composition(rng, lanes, blocks, 1)) {
    Block b;
    b.width = width;
    const long stages = uniform(rng, 1, std::min<long>(groups, model.layers));
    for (const long g : composition(rng, groups, stages, 1)) b.groups_per_stage.push_back(static_cast<int>(g));
    const std::vector<long> one(static_cast<size_t>(stages), 1);
    for (const long l : draw_split(rng, model.layers, one, std::vector<double>(one.size(), 1.0)))
      b.layers_per_stage.push_back(static_cast<int>(l));
    out.push_back(std::move(b));
  }
  return out;
}

// Splits the global batch over the blocks (each at least width x its minimum micro-batch, one sample per
// group of its widest stage; the balanced alternative in proportion to the blocks' GPUs), then each block's
// samples into a micro-batch count (a divisor) and its pipelines' micro-batch sizes. False when the blocks
// need more samples than the batch has.
bool draw_batch_split(std::vector<Block>& blocks, const std::vector<double>& block_gpus, long global_batch, Rng& rng) {
  std::vector<long> minimum;
  for (const Block& b : blocks) minimum.push_back(b.width * b.min_micro_batch());
  if (std::accumulate(minimum.begin(), minimum.end(), 0L) > global_batch) return false;
  const std::vector<long> samples = draw_split(rng, global_batch, minimum, block_gpus);
  for (size_t i = 0; i < blocks.size(); ++i) {
    Block& b = blocks[i];
    std::vector<long> counts;
    for (const long k : divisors(samples[i]))
      if (samples[i] / k >= minimum[i]) counts.push_back(k);
    b.micro_batches = pick(rng, counts);
    b.micro_batch = composition(rng, samples[i] / b.micro_batches, b.width, b.min_micro_batch());
  }
  return true;
}

// GPUs of each block: its groups are the next width x (groups per pipeline) of `groups`, in order.
std::vector<double> block_gpus(const std::vector<Block>& blocks, const std::vector<std::vector<GpuId>>& groups) {
  std::vector<double> out;
  size_t next = 0;
  for (const Block& b : blocks) {
    const int n = b.width * std::accumulate(b.groups_per_stage.begin(), b.groups_per_stage.end(), 0);
    double gpus = 0;
    for (int i = 0; i < n; ++i) gpus += static_cast<double>(groups[next++].size());
    out.push_back(gpus);
  }
  return out;
}

// Uneven expert placements for each stage of each block (EP across pipelines: one per EP group).
void draw_block_experts(std::vector<Block>& blocks, int experts, Rng& rng) {
  for (Block& b : blocks)
    for (size_t j = 0; j < b.groups_per_stage.size(); ++j) {
      std::vector<int> placement;
      if (one_in(rng, 2))
        for (const long e : composition(rng, experts, b.width, 1)) placement.push_back(static_cast<int>(e));
      b.experts.push_back(std::move(placement));
    }
}

// EP inside a stage: a random degree dividing both the stage's GPU count and the expert count.
void draw_stage_ep(Stage& s, int experts, bool uneven, Rng& rng) {
  int gpus = 0;
  for (const TpGroup& g : s.groups) gpus += g.tp;
  std::vector<int> degrees;
  for (int e = 1; e <= std::min(gpus, experts); ++e)
    if (gpus % e == 0 && experts % e == 0) degrees.push_back(e);
  s.ep = pick(rng, degrees);
  if (s.ep == 1) return;
  s.ep_scope = EpScope::Stage;
  if (uneven && one_in(rng, 2))
    for (const long e : composition(rng, experts, s.ep, 1)) s.experts.push_back(static_cast<int>(e));
}

// A TP group on `gpus` taking `samples` of a stage's micro-batch of `micro_batch`.
TpGroup make_group(const std::vector<GpuId>& gpus, long samples, long micro_batch) {
  TpGroup g;
  g.gpus = gpus;
  g.tp = static_cast<int>(gpus.size());
  g.share = static_cast<double>(samples) / static_cast<double>(micro_batch);
  return g;
}

// The pipelines of the blocks, taking TP groups from `groups` in order; random integer shares.
std::vector<Pipeline> assemble_pipelines(const std::vector<Block>& blocks, const std::vector<std::vector<GpuId>>& groups,
                                         EpMode mode, const ModelConfig& model, bool uneven, Rng& rng) {
  std::vector<Pipeline> out;
  size_t next_group = 0;
  for (const Block& b : blocks)
    for (int r = 0; r < b.width; ++r) {
      Pipeline p;
      p.micro_batch = static_cast<int>(b.micro_batch[r]);
      p.micro_batches = static_cast<int>(b.micro_batches);
      int layer = 0;
      for (size_t j = 0; j < b.groups_per_stage.size(); ++j) {
        Stage s;
        s.layer_begin = layer;
        s.layer_end = layer += b.layers_per_stage[j];
        const size_t first = next_group;
        next_group += static_cast<size_t>(b.groups_per_stage[j]);
        std::vector<double> tp;
        for (size_t g = first; g < next_group; ++g) tp.push_back(static_cast<double>(groups[g].size()));
        const std::vector<long> samples = draw_split(rng, p.micro_batch, std::vector<long>(tp.size(), 1), tp);
        for (size_t g = first; g < next_group; ++g) s.groups.push_back(make_group(groups[g], samples[g - first], p.micro_batch));
        if (mode == EpMode::AcrossPipelines) {
          s.ep = b.width;
          s.ep_scope = EpScope::Pipelines;
          s.experts = b.experts[j];
        } else if (mode == EpMode::InsideStages) {
          draw_stage_ep(s, model.moe->experts, uneven, rng);
        }
        p.stages.push_back(std::move(s));
      }
      out.push_back(std::move(p));
    }
  return out;
}

// One draw of the pipelines; nullopt when the drawn shapes need more samples than the global batch.
std::optional<std::vector<Pipeline>> try_draw_pipelines(const Cluster& cluster, const ModelConfig& model, long global_batch,
                                                        const RandomPlanSpace& space, Rng& rng) {
  const std::vector<std::vector<GpuId>> groups =
      choose_used_groups(cut_tp_groups(cluster, tp_degrees(cluster, model), rng), space.idle_gpus, rng);
  const int used = static_cast<int>(groups.size());
  EpMode mode = EpMode::None;
  int width = 1;
  if (model.moe) {
    mode = pick(rng, std::vector<EpMode>{EpMode::None, EpMode::InsideStages, EpMode::AcrossPipelines});
    if (mode == EpMode::AcrossPipelines) {
      std::vector<int> widths;
      for (int e = 2; e <= std::min<long>({static_cast<long>(used), global_batch, static_cast<long>(model.moe->experts)}); ++e)
        if (model.moe->experts % e == 0) widths.push_back(e);
      if (widths.empty()) mode = EpMode::None;
      else width = pick(rng, widths);
    }
  }
  std::vector<Block> blocks = draw_block_shapes(used / width, width, global_batch, model, rng);
  if (!draw_batch_split(blocks, block_gpus(blocks, groups), global_batch, rng)) return std::nullopt;
  if (mode == EpMode::AcrossPipelines && space.uneven_experts) draw_block_experts(blocks, model.moe->experts, rng);
  else
    for (Block& b : blocks) b.experts.assign(b.groups_per_stage.size(), {});
  return assemble_pipelines(blocks, groups, mode, model, space.uneven_experts, rng);
}

// The plan every batch admits: one pipeline, one stage, the cluster's first GPU, one micro-batch.
std::vector<Pipeline> single_gpu_pipeline(const Cluster& cluster, const ModelConfig& model, long global_batch) {
  Pipeline p;
  p.micro_batch = static_cast<int>(global_batch);
  Stage s;
  s.layer_end = model.layers;
  s.groups.push_back(make_group({cluster.nodes.front().first_gpu}, 1, 1));
  p.stages.push_back(std::move(s));
  return {p};
}

}  // namespace

Plan draw_random_plan(const Cluster& cluster, const ModelConfig& model, long global_batch, std::mt19937_64& rng,
                      const RandomPlanSpace& space) {
  Plan plan;
  plan.schedule = pick(rng, space.schedules);
  plan.recompute = pick(rng, std::vector<Recompute>{Recompute::None, Recompute::Selective, Recompute::Full});
  plan.zero1 = one_in(rng, 2);
  // The shapes fail only when their widest stages need more samples than the batch; a few hundred tries
  // succeed unless the batch is smaller than nearly every shape needs, where one GPU is the fallback.
  for (int attempt = 0; attempt < 500 && plan.pipelines.empty(); ++attempt)
    if (auto pipelines = try_draw_pipelines(cluster, model, global_batch, space, rng)) plan.pipelines = std::move(*pipelines);
  if (plan.pipelines.empty()) plan.pipelines = single_gpu_pipeline(cluster, model, global_batch);
  return plan;
}

FittingDraws draw_fitting_plans(const Cluster& cluster, const Topology& topo, const ModelConfig& model, long global_batch,
                                int count, std::uint64_t seed, int max_attempts, const RandomPlanSpace& space) {
  std::mt19937_64 rng(seed);
  FittingDraws out;
  while (static_cast<int>(out.plans.size()) < count && out.attempts < max_attempts) {
    Plan plan = draw_random_plan(cluster, model, global_batch, rng, space);
    ++out.attempts;
    validate_plan(plan, cluster, model, global_batch, "random plan");
    SimResult result = simulate_iteration(cluster, topo, model, plan, SimOptions{});
    if (!result.oom) out.plans.push_back({std::move(plan), std::move(result)});
  }
  return out;
}

}  // namespace arachne::test
