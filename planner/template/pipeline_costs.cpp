// Analytic costs of a pipeline class during completion (see pipeline_costs.h).
#include "planner/template/pipeline_costs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "planner/common/partition.h"
#include "planner/common/plan_builder.h"
#include "sim/model/memory.h"

namespace arachne::planner {
namespace {

// A stage's time over layers [begin, end): its slowest group's (each group a layer-time table).
double slowest_group_s(const std::vector<const LayerTimes::Table*>& groups, int begin, int end) {
  double worst = 0;
  for (const LayerTimes::Table* t : groups) worst = std::max(worst, t->stage_s(begin, end));
  return worst;
}

}  // namespace

std::vector<MemoryLevel> memory_levels(bool zero1_helps) {
  std::vector<MemoryLevel> out;
  for (const Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    out.push_back({r, false});
    if (zero1_helps) out.push_back({r, true});
  }
  return out;
}

const LayerTimes::Table& LayerTimes::table(const ProfileKey& key) {
  auto it = tables_.find(key);
  if (it != tables_.end()) return it->second;
  Table t;
  const int layers = profiler_.model().layers;
  auto total = [](const LayerProfile& p) { return p.forward_s + p.backward_s + p.tp_comm_forward_s + p.tp_comm_backward_s; };
  t.prefix.assign(layers + 1, 0.0);
  const ModelConfig& model = profiler_.model();
  const LayerProfile* of_kind[2] = {nullptr, nullptr};  // the profiler's entry per kind (profile.h: the same for every layer of a kind)
  for (int l = 0; l < layers; ++l) {
    const int kind = model.moe && model.is_moe_layer(l) ? 1 : 0;
    if (!of_kind[kind]) of_kind[kind] = &profiler_.layer(l, key);
    t.prefix[l + 1] = t.prefix[l] + total(*of_kind[kind]);
  }
  t.embedding = total(profiler_.embedding(key));
  t.head = total(profiler_.head(key));
  return tables_.emplace(key, std::move(t)).first->second;
}

std::vector<long> proportional_split(long total, const std::vector<double>& weights) {
  std::vector<long> out = split_proportional(total, weights);
  for (long& part : out)
    if (part < 1) {
      long& largest = *std::max_element(out.begin(), out.end());
      if (largest <= 1) break;  // total < parts
      --largest;
      ++part;
    }
  return out;
}

int LayerTimes::type_id(const std::string& gpu_type) {
  const auto it = std::find(types_.begin(), types_.end(), gpu_type);
  if (it != types_.end()) return static_cast<int>(it - types_.begin());
  types_.push_back(gpu_type);
  return static_cast<int>(types_.size()) - 1;
}

const LayerTimes::Table& LayerTimes::table(int type, int tp, int samples, Recompute recompute) {
  const std::uint64_t key = static_cast<std::uint64_t>(type) << 48 | static_cast<std::uint64_t>(tp) << 32 |
                            static_cast<std::uint64_t>(static_cast<std::uint32_t>(samples)) << 2 |
                            static_cast<std::uint64_t>(recompute);
  const Table*& slot = by_id_[key];
  if (!slot) slot = &table({types_.at(type), tp, static_cast<double>(samples), recompute, false});
  return *slot;
}

int LayerTimes::type_set(const std::vector<int>& types) {
  const auto [it, fresh] = type_sets_.try_emplace(types, static_cast<int>(type_set_types_.size()));
  if (fresh) type_set_types_.push_back(types);
  return it->second;
}

const LayerTimes::StageGroups& LayerTimes::stage_groups(int type_set, int tp, int b, Recompute recompute) {
  // 24 bits of type set, 8 of TP width, 30 of samples, 2 of recompute.
  if (type_set < 0 || type_set >= (1 << 24) || tp < 0 || tp >= (1 << 8) || b < 0 || b >= (1 << 30))
    throw std::invalid_argument("LayerTimes::stage_groups: key out of range");
  const std::uint64_t key = static_cast<std::uint64_t>(type_set) << 40 | static_cast<std::uint64_t>(tp) << 32 |
                            static_cast<std::uint64_t>(b) << 2 | static_cast<std::uint64_t>(recompute);
  if (auto it = stage_groups_.find(key); it != stage_groups_.end()) return it->second;
  const std::vector<int>& types = type_set_types_[type_set];
  StageGroups out;
  out.shares = group_shares(types, tp, b, recompute);
  for (size_t g = 0; g < types.size(); ++g) out.tables.push_back(&table(types[g], tp, out.shares[g], recompute));
  std::sort(out.tables.begin(), out.tables.end());
  out.tables.erase(std::unique(out.tables.begin(), out.tables.end()), out.tables.end());
  return stage_groups_.emplace(key, std::move(out)).first->second;
}

std::pair<double, double> LayerTimes::unlimited_stages(const std::vector<const StageGroups*>& stages, PartitionTies ties) {
  auto& known = unlimited_[ties == PartitionTies::LatestCut];
  if (auto it = known.find(stages); it != known.end()) return it->second;
  const int depth = static_cast<int>(stages.size());
  auto cost = [&](int j, int begin, int end) { return slowest_group_s(stages[j]->tables, begin, end); };
  const std::vector<int> bounds = minmax_partition_monotone_with(profiler_.model().layers, depth, cost, ties, &partition_scratch_);
  double sum = 0, slowest = 0;
  for (int j = 0; j < depth; ++j) {
    const double t = cost(j, bounds[j], bounds[j + 1]);
    sum += t;
    slowest = std::max(slowest, t);
  }
  return known.emplace(stages, std::make_pair(sum, slowest)).first->second;
}

std::vector<int> LayerTimes::group_shares(const std::vector<int>& types, int tp, int b, Recompute recompute) {
  const int n = static_cast<int>(types.size());
  if (n == 1) return {b};  // what the split below gives
  // A group's time for s samples over the model's layers: the shares hold for every layer range.
  auto t = [&](int g, int s) {
    const Table& tb = table(types[g], tp, s, recompute);
    return tb.prefix.back() - tb.prefix.front();
  };
  std::vector<double> speed(n);
  const int even = std::max(1, b / n);
  for (int g = 0; g < n; ++g) speed[g] = even / t(g, even);
  std::vector<long> split = proportional_split(b, speed);
  std::vector<int> s(split.begin(), split.end());
  // Single-sample moves from the slowest group to the group that stays fastest with one more, while the
  // slowest time falls (integer shares: the proportional split can be a sample off). Each group's time at its
  // share (now) and with one sample more (plus, NaN until needed) is kept across moves.
  std::vector<double> now(n), plus(n, std::nan(""));
  for (int g = 0; g < n; ++g) now[g] = t(g, s[g]);
  auto up = [&](int g) {
    if (std::isnan(plus[g])) plus[g] = t(g, s[g] + 1);
    return plus[g];
  };
  for (int guard = 0; guard < b; ++guard) {
    int slow = 0;
    for (int g = 1; g < n; ++g)
      if (now[g] > now[slow]) slow = g;
    if (s[slow] <= 1) break;
    int fast = -1;
    for (int g = 0; g < n; ++g)
      if (g != slow && (fast < 0 || up(g) < up(fast))) fast = g;
    if (fast < 0) break;
    double rest = 0;  // the slowest of the groups the move leaves alone
    for (int g = 0; g < n; ++g)
      if (g != slow && g != fast) rest = std::max(rest, now[g]);
    const double less = t(slow, s[slow] - 1);
    const double after = std::max({rest, less, up(fast)});
    if (!(after < now[slow])) break;
    --s[slow];
    ++s[fast];
    plus[slow] = now[slow], now[slow] = less;
    now[fast] = plus[fast], plus[fast] = std::nan("");
  }
  return s;
}

double LayerTimes::layers_s(const ProfileKey& key, int begin, int end) {
  const Table& t = table(key);
  return t.prefix[end] - t.prefix[begin];
}

double LayerTimes::stage_s(const ProfileKey& key, int begin, int end) { return table(key).stage_s(begin, end); }

StageMemoryLines::StageMemoryLines(const Profiler& profiler) : profiler_(profiler) {
  const ModelConfig& model = profiler_.model();
  moe_prefix_.assign(model.layers + 1, 0);
  for (int l = 0; l < model.layers; ++l) moe_prefix_[l + 1] = moe_prefix_[l] + (model.moe && model.is_moe_layer(l) ? 1 : 0);
}

bool StageMemoryLines::QueryEqual::operator()(const Query& a, const Query& b) const {
  return a.tp == b.tp && a.samples == b.samples && a.local_experts == b.local_experts &&
         a.ep == b.ep && a.zero1_dp == b.zero1_dp && a.level.recompute == b.level.recompute && a.level.zero1 == b.level.zero1;
}

std::size_t StageMemoryLines::QueryHash::operator()(const Query& q) const {
  std::size_t h = std::hash<double>()(q.local_experts);
  for (const long x : {static_cast<long>(q.tp), static_cast<long>(q.samples),
                       static_cast<long>(q.ep), static_cast<long>(q.zero1_dp), static_cast<long>(q.level.recompute),
                       static_cast<long>(q.level.zero1)})
    h = h * 1000003 ^ std::hash<long>()(x);
  return h;
}

int StageMemoryLines::stage_memory_id(const StageCostSpec& stage, const std::vector<int>& type_ids, MemoryLevel level) {
  std::vector<std::int64_t>& key = stage_key_scratch_;
  key.assign({stage.tp, stage.ep, stage.zero1_dp, static_cast<std::int64_t>(level.recompute), level.zero1 ? 1 : 0});
  for (size_t g = 0; g < stage.groups.size(); ++g) {
    const double e = stage.groups[g].local_experts == 0 ? 0.0 : stage.groups[g].local_experts;  // one 0
    std::int64_t experts;  // the double's bits: equal experts, equal keys
    static_assert(sizeof experts == sizeof e);
    std::memcpy(&experts, &e, sizeof experts);
    key.insert(key.end(), {type_ids[g], experts});
  }
  return stage_ids_.try_emplace(key, static_cast<int>(stage_ids_.size())).first->second;
}

StageMemoryLines::Lines& StageMemoryLines::lines(const Query& q) {
  Query key = q;
  key.samples = 0;   // the lines hold every micro-batch size
  key.zero1_dp = 1;  // and every ZeRO-1 degree
  auto it = lines_.find(key);
  if (it == lines_.end()) {
    const int layers = profiler_.model().layers;
    const size_t kinds = static_cast<size_t>(layers + 1) * static_cast<size_t>(moe_prefix_.back() + 1) * 4;
    it = lines_.emplace(key, Lines{std::vector<Line>(kinds, Line{std::nan("")})}).first;
  }
  return it->second;
}

double StageMemoryLines::bytes(const Query& q, int begin, int end, long in_flight) {
  return bytes(lines(q), q, begin, end, in_flight);
}

double StageMemoryLines::bytes(Lines& lines, const Query& q, int begin, int end, long in_flight) {
  const ModelConfig& model = profiler_.model();
  const int layers = model.layers;
  const int moe = moe_prefix_[end] - moe_prefix_[begin], dense = end - begin - moe;
  const bool embedding = begin == 0, head = end == layers;
  const size_t index = ((static_cast<size_t>(dense) * (moe_prefix_.back() + 1) + moe) * 2 + embedding) * 2 + head;
  Line& line = lines.at[index];
  if (std::isnan(line.weights_and_gradients)) {
    StageMemoryInput in;
    in.layer_begin = begin;
    in.layer_end = end;
    in.has_embedding = embedding;
    in.has_head = head;
    in.shard = {q.tp, false, 0.0};
    in.recompute = q.level.recompute;
    in.zero1 = q.level.zero1;
    in.dp = 1;  // the optimizer state unsharded
    in.local_experts = q.local_experts;
    in.ep = q.ep;
    const MemoryBreakdown none = stage_memory(model, in);
    in.shard.samples = 1.0;
    const auto [idle, one] = stage_memory_idle_and_one(model, in);
    line = {none.weights + none.gradients, none.optimizer, none.other, idle.other, idle.activations, one.activations};
  }
  // MemoryBreakdown::total() of each breakdown at this ZeRO-1 degree, term by term in its order (the
  // activations of no samples are 0); the optimizer state sharded as stage_memory shards it.
  const double sharded = line.weights_and_gradients + line.optimizer / (q.level.zero1 ? std::max(1, q.zero1_dp) : 1.0);
  const double fixed = sharded + 0.0 + line.other_without_samples;
  const double idle = sharded + line.idle_activations + line.other;
  const double one = sharded + line.one_activations + line.other;
  const double per_sample = idle - fixed, per_sample_in_flight = one - idle;
  const double samples = static_cast<double>(q.samples);
  return fixed + samples * (per_sample + static_cast<double>(in_flight) * per_sample_in_flight);
}

PipelineCosts::PipelineCosts(LayerTimes& times, StageMemoryLines& memory, std::vector<StageCostSpec> stages,
                             MemoryLevel level, PartitionTies ties)
    : times_(times), memory_(memory), stages_(std::move(stages)), level_(level), ties_(ties), layers_(times.profiler().model().layers) {
  for (const StageCostSpec& s : stages_) {
    min_micro_batch_ = std::max(min_micro_batch_, static_cast<int>(s.groups.size()));
    memory_queries_.emplace_back();
    usable_bytes_.emplace_back();
    time_types_.emplace_back();
    for (const GroupCostSpec& g : s.groups) {
      memory_queries_.back().push_back({s.tp, 0, g.local_experts, s.ep, s.zero1_dp, level_});
      usable_bytes_.back().push_back(times_.profiler().gpu_memory_bytes(g.gpu_type));
      time_types_.back().push_back(times_.type_id(g.gpu_type));
    }
    time_type_set_.push_back(times_.type_set(time_types_.back()));
    stage_memory_id_.push_back(memory_.stage_memory_id(s, time_types_.back(), level_));
    if (stage_memory_id_.back() >= (1 << 20)) throw std::length_error("PipelineCosts: more than 2^20 stage memory ids");
  }
  // Stages of one spec share their shares, layer tables and memory limits (each a function of the spec).
  auto same = [](const StageCostSpec& a, const StageCostSpec& b) {
    if (a.tp != b.tp || a.ep != b.ep || a.zero1_dp != b.zero1_dp || a.groups.size() != b.groups.size()) return false;
    for (size_t g = 0; g < a.groups.size(); ++g)
      if (a.groups[g].gpu_type != b.groups[g].gpu_type || a.groups[g].local_experts != b.groups[g].local_experts) return false;
    return true;
  };
  for (size_t j = 0; j < stages_.size(); ++j) {
    size_t k = 0;
    while (!same(stages_[k], stages_[j])) ++k;
    stage_kind_.push_back(static_cast<int>(k));
  }
}

PipelineCosts::PipelineCosts(const PipelineCosts& same_times, MemoryLevel level)
    : PipelineCosts(same_times.times_, same_times.memory_, same_times.stages_, level, same_times.ties_) {
  if (level.recompute != same_times.level_.recompute || !level.zero1)
    throw std::invalid_argument("PipelineCosts: sharing needs the same recompute and ZeRO-1 on");
  shared_ = same_times.shared_;
}

const std::vector<int>& PipelineCosts::shares(int stage, int b) { return groups(stage, b).shares; }

const LayerTimes::StageGroups& PipelineCosts::groups(int stage, int b) {
  const std::uint64_t k = cache_key(b, 0, stage_kind_[stage]);
  if (auto it = shared_->groups.find(k); it != shared_->groups.end()) return *it->second;
  const LayerTimes::StageGroups& g = times_.stage_groups(time_type_set_[stage], stages_[stage].tp, b, level_.recompute);
  shared_->groups.emplace(k, &g);
  return g;
}

void PipelineCosts::prepare_fits(int stage, int b) {
  const std::vector<int>& s = shares(stage, b);
  const size_t groups = s.size();
  std::vector<StageMemoryLines::Query>& queries = queries_scratch_;
  queries = memory_queries_[stage];
  std::vector<StageMemoryLines::Lines*>& lines = lines_scratch_;
  lines.assign(groups, nullptr);
  std::vector<size_t>& distinct = distinct_scratch_;  // one group of each (lines, samples, usable bytes): the same answer each
  distinct.clear();
  for (size_t g = 0; g < groups; ++g) {
    queries[g].samples = s[g];
    // Groups of a stage differ in their queries only by their experts (and samples): a group like one
    // before it has its lines.
    const auto like = std::find_if(distinct.begin(), distinct.end(), [&](size_t d) {
      return queries[d].samples == s[g] && queries[d].local_experts == queries[g].local_experts;
    });
    lines[g] = like != distinct.end() ? lines[*like] : &memory_.lines(queries[g]);
    const bool seen = std::any_of(distinct.begin(), distinct.end(), [&](size_t d) {
      return lines[d] == lines[g] && queries[d].samples == s[g] && usable_bytes_[stage][d] == usable_bytes_[stage][g];
    });
    if (!seen) distinct.push_back(g);
  }
}

bool PipelineCosts::fits(int stage, int begin, int end, long in_flight) {
  for (const size_t g : distinct_scratch_)
    if (memory_.bytes(*lines_scratch_[g], queries_scratch_[g], begin, end, in_flight) > usable_bytes_[stage][g]) return false;
  return true;
}

namespace {
// The largest end such that fits(end) holds for the range from x (x if none): below the last layer a range's
// memory only grows with its end, so that end is bisected; the whole rest of the model, which needs no
// pipeline buffers, is tried after every shorter range fits - the same end a scan from x stops at.
template <class Fits>
int furthest_end(int layers, int x, const Fits& fits) {
  int lo = x, hi = layers - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo == layers - 1 && fits(layers) ? layers : lo;
}
}  // namespace

int PipelineCosts::first_max_end(int stage, int x, long in_flight) {
  return furthest_end(layers_, x, [&](int end) { return fits(stage, x, end, in_flight); });
}

const std::vector<int>& PipelineCosts::max_ends(int stage, int b, long in_flight) {
  const std::uint64_t key = cache_key(b, in_flight, stage_memory_id_[stage]);
  if (const std::vector<int>* known = memory_.max_ends(key)) return *known;
  prepare_fits(stage, b);
  // A stage's memory grows with its layer range (more weights, activations, the head), so the largest
  // fitting end never falls as the start moves right: the first start's end bisected, then one sweep of
  // two pointers.
  std::vector<int> out(layers_, 0);
  int end = first_max_end(stage, 0, in_flight);
  out[0] = end;
  for (int x = 1; x < layers_; ++x) {
    end = std::max(end, x);
    while (end < layers_ && fits(stage, x, end + 1, in_flight)) ++end;
    out[x] = end;
  }
  return memory_.keep_max_ends(key, std::move(out));
}

bool PipelineCosts::known_too_big(int b, long cap) const {
  for (const auto& [fb, fc] : too_big_)
    if (fb <= b && fc <= cap) return true;
  return false;
}

const std::vector<int>& PipelineCosts::partition(int b, long m) {
  const long cap = std::min<long>(m, depth());
  const auto k = std::make_pair(b, cap);
  const std::uint64_t key = cache_key(b, cap);
  if (auto it = partitions_.find(key); it != partitions_.end()) return it->second;
  std::vector<int> bounds;
  // Found free of the limit by a class whose limit is no looser (ZeRO-1 off, or on as here), at this cap or
  // a larger one (more micro-batches in flight, a tighter limit): the search, meeting no range the limit
  // rules out there, meets none here either and returns the same bounds.
  for (auto it = shared_->free_partitions.lower_bound(k); it != shared_->free_partitions.end() && it->first.first == b; ++it)
    if (level_.zero1 || !it->second.first) return partitions_.emplace(key, it->second.second).first->second;
  if (b >= min_micro_batch_ && !known_too_big(b, cap) && depth() == 1) {
    // One stage holds the whole model where max_ends' first end (the first the bisection finds) reaches it.
    prepare_fits(0, b);
    const bool fit = first_max_end(0, 0, 1) == layers_;
    if (fit) bounds = {0, layers_};
    else too_big_.emplace_back(b, cap);
    if (fit) shared_->free_partitions.emplace(k, std::make_pair(level_.zero1, bounds));
  } else if (b >= min_micro_batch_ && !known_too_big(b, cap)) {
    std::vector<const std::vector<int>*>& ends = ends_scratch_;
    ends.assign(depth(), nullptr);
    const std::vector<const std::vector<const LayerTimes::Table*>*>& tables = stage_tables(b);  // per stage, per group
    for (int j = 0; j < depth(); ++j) ends[j] = &max_ends(j, b, std::min<long>(depth() - j, m));
    bool limited = false;  // a range the search looked at was ruled out by memory
    auto cost = [&](int j, int begin, int end) {
      if (end <= (*ends[j])[begin]) return slowest_group_s(*tables[j], begin, end);
      limited = true;
      return kInf;
    };
    // The cost never falls as a range grows to the left: prefix sums of layer times, the embedding at 0,
    // and a memory limit that admits a range admits every later start (max_ends is non-decreasing).
    bounds = minmax_partition_monotone_with(layers_, depth(), cost, ties_, &partition_scratch_);
    if (bounds.empty()) too_big_.emplace_back(b, cap);
    if (!limited) shared_->free_partitions.emplace(k, std::make_pair(level_.zero1, bounds));
  }
  return partitions_.emplace(key, std::move(bounds)).first->second;
}

std::vector<double> PipelineCosts::stage_times(int b, long m) {
  std::vector<double> t;
  for_each_stage_time(b, m, [&](double x) { t.push_back(x); });
  return t;
}

template <class Visit>
bool PipelineCosts::for_each_stage_time(int b, long m, Visit visit) {
  const std::vector<int>& bounds = partition(b, m);
  if (bounds.empty()) return false;
  const std::vector<const std::vector<const LayerTimes::Table*>*>& tables = stage_tables(b);
  for (int j = 0; j < depth(); ++j) visit(slowest_group_s(*tables[j], bounds[j], bounds[j + 1]));
  return true;
}

const std::vector<const std::vector<const LayerTimes::Table*>*>& PipelineCosts::stage_tables(int b) {
  if (b >= static_cast<int>(stage_tables_.size())) stage_tables_.resize(b + 1);
  std::vector<const std::vector<const LayerTimes::Table*>*>& out = stage_tables_[b];
  if (out.empty())
    for (int j = 0; j < depth(); ++j) out.push_back(&group_tables(j, b));
  return out;
}

double PipelineCosts::time(long n, int b) {
  if (b < min_micro_batch_ || n < b || n % b != 0) return kInf;
  const long m = n / b;
  double sum = 0, worst = 0;
  const bool fits = for_each_stage_time(b, m, [&](double x) {
    sum += x;
    worst = std::max(worst, x);
  });
  if (!fits) return kInf;
  // 1F1B (Narayanan et al. SC'21 §2.2): every stage's first micro-batch fills the pipeline, the other m - 1
  // pass at the pace of the slowest stage.
  return sum + static_cast<double>(m - 1) * worst;
}

double PipelineCosts::work_lower_bound(int b) {
  if (auto it = shared_->work.find(b); it != shared_->work.end()) return it->second;
  // A stage's time over a range is its slowest group's, so at least any one group's: per layer, the fastest
  // group of the fastest stage bounds what the layer adds to the stage sum, whatever the partition.
  // Stages of one kind have the same tables: each kind once (the first stage of a kind is the kind).
  std::vector<const std::vector<const LayerTimes::Table*>*>& tables = tables_scratch_;
  tables.clear();
  for (int j = 0; j < depth(); ++j)
    if (stage_kind_[j] == j) tables.push_back(&group_tables(j, b));
  double embedding = kInf, head = kInf;
  for (const LayerTimes::Table* t : group_tables(0, b)) embedding = std::min(embedding, t->embedding);
  for (const LayerTimes::Table* t : group_tables(depth() - 1, b)) head = std::min(head, t->head);
  double w = embedding + head;
  for (int l = 0; l < layers_; ++l) {
    double layer = kInf;
    for (const std::vector<const LayerTimes::Table*>* kind : tables)
      for (const LayerTimes::Table* t : *kind) layer = std::min(layer, t->prefix[l + 1] - t->prefix[l]);
    w += layer;
  }
  return shared_->work.emplace(b, w).first->second;
}

PipelineCosts::Choice PipelineCosts::best_afresh(long n) {
  if (n < 0) return Choice{};
  if (n >= static_cast<long>(best_.size())) {
    best_.resize(n + 1, Choice{kInf, -1});
    decided_.resize(n + 1, -1);
    ruled_out_at_.resize(n + 1);
  }
  // Branch and bound over the divisors: the stage sum is at least the work bound W and the slowest stage at
  // least W / depth, so time(n, b) >= W (1 + (m - 1) / depth); sizes are tried in ascending bound and the
  // rest skipped once the bound reaches the best time; a size whose tighter time_lower_bound reaches it is
  // skipped too (exact: the same choice as trying every divisor).
  std::vector<long>& divisors = divisors_;
  divisors.clear();
  for (long d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      divisors.push_back(d);
      if (d != n / d) divisors.push_back(n / d);
    }
  std::vector<std::pair<double, int>>& order = order_;
  order.clear();
  std::vector<int>& ruled_out = ruled_out_;  // sizes that do not fit in memory
  ruled_out.clear();
  for (const long b : divisors) {
    if (b < min_micro_batch_) continue;
    if (known_too_big(static_cast<int>(b), 1)) {
      ruled_out.push_back(static_cast<int>(b));
      continue;
    }
    const double m = static_cast<double>(n / b);
    order.emplace_back(work_lower_bound(static_cast<int>(b)) * (1 + (m - 1) / depth()), static_cast<int>(b));
  }
  std::sort(order.begin(), order.end());
  Choice c;
  auto cannot_win = [&](double bound, int b) { return bound > c.time_s || (bound == c.time_s && b > c.micro_batch); };
  for (const auto& [bound, b] : order) {
    if (cannot_win(bound, b)) break;
    // With fewer micro-batches than stages each n has a partition of its own (its in-flight cap): the
    // tighter bound, one per size, may spare it. (With more, n shares the size's one partition.)
    if (n / b < depth() && cannot_win(time_lower_bound(n, b), b)) continue;
    const double t = time(n, b);
    if (t == kInf) ruled_out.push_back(b);  // b divides n: only memory makes it infinite
    if (t < c.time_s || (t == c.time_s && b < c.micro_batch)) c = {t, b};
  }
  best_[n] = c;
  ruled_out_at_[n] = ruled_out;
  if (!memory_decided_) memory_decided_ = decided(n);
  return c;
}

bool PipelineCosts::decide(long n) {
  decided_[n] = memory_decides(n, best_[n], ruled_out_at_[n]) ? 1 : 0;
  ruled_out_at_[n] = {};
  return decided_[n] == 1;
}

double PipelineCosts::time_lower_bound(long n, int b) {
  // The stage sum of every partition is at least the work bound, and its slowest stage at least the slowest
  // of the min-max partition free of the memory limit (the limit only narrows the partitions to choose from).
  return work_lower_bound(b) + static_cast<double>(n / b - 1) * unlimited_stages(b).second;
}

double group_work(LayerTimes& times, const std::vector<FloorStage>& stages, Recompute recompute, int samples) {
  const int layers = times.profiler().model().layers;
  std::vector<double> layer(layers, PipelineCosts::kInf);
  double embedding = PipelineCosts::kInf, head = PipelineCosts::kInf;
  for (size_t j = 0; j < stages.size(); ++j)
    for (const int type : stages[j].types) {
      const LayerTimes::Table& t = times.table(type, stages[j].tp, samples, recompute);
      if (j == 0) embedding = std::min(embedding, t.embedding);
      if (j + 1 == stages.size()) head = std::min(head, t.head);
      for (int l = 0; l < layers; ++l) layer[l] = std::min(layer[l], t.prefix[l + 1] - t.prefix[l]);
    }
  double w = embedding + head;
  for (const double x : layer) w += x;
  return w;
}

const std::vector<FloorStage>& PipelineCosts::floor_stages() {
  if (!floor_stages_.empty()) return floor_stages_;
  for (int j = 0; j < depth(); ++j) {
    std::vector<int> types = time_types_[j];  // one per group: each type once is enough for the least
    std::sort(types.begin(), types.end());
    types.erase(std::unique(types.begin(), types.end()), types.end());
    floor_stages_.push_back({stages_[j].tp, std::move(types)});
  }
  return floor_stages_;
}

double PipelineCosts::time_floor() {
  if (!std::isnan(time_floor_)) return time_floor_;
  return time_floor_ = group_work(times_, floor_stages(), level_.recompute, 1);
}

double PipelineCosts::best_lower_bound_afresh(long n) {
  if (n < 1) return kInf;
  if (n < static_cast<long>(best_.size()) && best_[n].micro_batch >= 0) return best_[n].time_s;
  if (n >= static_cast<long>(best_lower_bound_.size())) best_lower_bound_.resize(n + 1, std::nan(""));
  double& out = best_lower_bound_[n];
  if (!std::isnan(out)) return out;
  out = kInf;
  for (long d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    for (const long b : {d, n / d}) {
      if (b < min_micro_batch_ || known_too_big(static_cast<int>(b), 1)) continue;
      const double m = static_cast<double>(n / b);
      out = std::min(out, work_lower_bound(static_cast<int>(b)) * (1 + (m - 1) / depth()));
    }
  }
  return out;
}

long PipelineCosts::most_samples_below(double t, long max_n) {
  const int widest = widest_stage();
  if (widest == 1) return most_samples_by_size(t, max_n);
  // (Filling one sample at a time costs a step per size: for a few groups only.)
  return depth() == 1 && widest <= kFilledGroups ? most_samples_by_filling(t, max_n) : most_samples_by_share(t, max_n, widest);
}

// The most micro-batches m, at most `most`, with a time bound below t, the bound non-decreasing in m.
template <class Bound>
long most_micro_batches_below(double t, long most, Bound bound) {
  long lo = 0, hi = most;  // bound(lo) < t or lo = 0; bound(hi + 1) >= t or hi = most
  while (lo < hi) {
    const long mid = lo + (hi - lo + 1) / 2;
    if (bound(mid) < t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

long PipelineCosts::most_samples_by_size(double t, long max_n) {
  long out = 0;
  for (int b = min_micro_batch_; b <= max_n; ++b) {
    // One group per stage, whose share is all of b: its memory and its layers' times grow with b, so where no
    // partition fits, or one micro-batch's work bound is not below t, neither is with more.
    if (!may_fit(b)) break;
    const double work = work_lower_bound(b);  // time_lower_bound(b, b)
    if (!(work < t)) break;
    auto most = [&](double slowest) {
      return b * most_micro_batches_below(t, max_n / b, [&](long m) { return work + static_cast<double>(m - 1) * slowest; });
    };
    // The slowest stage is at least 1 / depth of the work bound: where even that lets no more samples than a
    // size before, the size's own slowest stage is not worked out. (One stage: its one group's time, which
    // the work bound is.)
    if (depth() > 1 && most(work / depth()) <= out) continue;
    out = std::max(out, most(depth() == 1 ? work : unlimited_stages(b).second));
  }
  return out;
}

long PipelineCosts::most_samples_by_filling(double t, long max_n) {
  // One stage of several groups: a micro-batch of b lasts as long as its slowest group over the whole model,
  // at least the least such time over every split of b into the groups (each takes a sample), which the
  // split adding each next sample where the time it gives is least attains (its largest time is the b-th
  // smallest of the groups' times at 1, 2, ... samples, the first sample of each taken first).
  const std::vector<int>& types = time_types_[0];
  const int groups = static_cast<int>(types.size());
  auto group_s = [&](int g, int samples) { return times_.table(types[g], stages_[0].tp, samples, level_.recompute).stage_s(0, layers_); };
  std::vector<int> share(groups, 1);
  std::vector<double> next(groups);  // each group's time with one sample more
  double slowest = 0;
  for (int g = 0; g < groups; ++g) slowest = std::max(slowest, group_s(g, 1)), next[g] = group_s(g, 2);
  long out = 0;
  int block = 0;  // of least_share_may_fit, checked
  for (long b = groups; b <= max_n; ++b) {
    if (b > groups) {
      const int g = static_cast<int>(std::min_element(next.begin(), next.end()) - next.begin());
      slowest = std::max(slowest, next[g]);
      next[g] = group_s(g, ++share[g] + 1);
    }
    // The slowest time, and the memory of the group of the largest share (at least ceil(b / groups),
    // least_share_may_fit's block of that number), grow with b.
    if (!(slowest < t)) break;
    if (const int k = static_cast<int>((b + groups - 1) / groups); k != block) {
      block = k;
      if (!least_share_may_fit(k)) break;
    }
    const long m = most_micro_batches_below(t, max_n / b, [&](long m) { return static_cast<double>(m) * slowest; });
    out = std::max(out, m * b);
  }
  return out;
}

long PipelineCosts::most_samples_by_share(double t, long max_n, int widest) {
  // Sizes b in blocks of `widest`, block k from widest (k - 1) + 1 to widest k: each stage's group of the
  // largest share takes at least least_share(j, k) samples, and a stage lasts as long as its slowest group,
  // so the stage sum is at least group_work of the least of them, and the slowest stage at least
  // share_slowest_floor(k) (so is the stage sum).
  long out = 0;
  for (long k = 1; widest * (k - 1) + 1 <= max_n; ++k) {
    // Memory grows with samples, and so do the layers' times: where neither bound admits block k, none
    // admits a later one.
    if (!least_share_may_fit(static_cast<int>(k))) break;
    const double work = samples_floor(static_cast<int>(k));
    if (!(work < t)) break;
    const long b = std::min(widest * k, max_n);  // the block's largest size
    if (b < min_micro_batch_) continue;
    auto most = [&](double sum, double slowest) {
      return std::min(max_n, b * most_micro_batches_below(t, max_n, [&](long m) { return sum + static_cast<double>(m - 1) * slowest; }));
    };
    // The slowest stage is at least 1 / depth of the stage sum: where even that lets no more samples than a
    // block before, the block's min-max partition is not worked out.
    if (most(work, work / depth()) <= out) continue;
    const double slowest = share_slowest_floor(static_cast<int>(k));
    out = std::max(out, most(std::max(work, slowest), slowest));
  }
  return out;
}

int PipelineCosts::widest_stage() const {
  size_t widest = 1;
  for (const std::vector<int>& types : time_types_) widest = std::max(widest, types.size());
  return static_cast<int>(widest);
}

int PipelineCosts::least_share(int stage, int block) {
  const int widest = widest_stage();
  const int groups = static_cast<int>(time_types_[stage].size());
  return (widest * (block - 1) + 1 + groups - 1) / groups;
}

bool PipelineCosts::least_share_may_fit(int block) {
  // Each stage's group of the largest share takes at least least_share samples and holds the stage's
  // layers, so ranges that fit some group of the stage with that many and one micro-batch in flight include
  // every partition's: the furthest-end walk of may_fit over those.
  int x = 0;
  for (int j = 0; j < depth() && x < layers_; ++j) {
    int reach = x;
    const StageMemoryLines::Lines* done = nullptr;  // the last group's lines (groups of one kind repeat)
    for (size_t g = 0; g < memory_queries_[j].size(); ++g) {
      StageMemoryLines::Query q = memory_queries_[j][g];
      q.samples = least_share(j, block);
      StageMemoryLines::Lines& lines = memory_.lines(q);
      if (&lines == done && usable_bytes_[j][g] == usable_bytes_[j][g - 1]) continue;
      done = &lines;
      auto fits = [&](int end) { return memory_.bytes(lines, q, x, end, 1) <= usable_bytes_[j][g]; };
      if (j + 1 == depth()) {  // the last stage: whether it holds the rest
        if (fits(layers_)) return true;
        continue;
      }
      reach = std::max(reach, furthest_end(layers_, x, fits));
    }
    x = reach;
  }
  return x == layers_;
}

double PipelineCosts::share_slowest_floor(int block) {
  std::vector<double>& known = shared_->share_slowest_floor;
  if (block >= static_cast<int>(known.size())) known.resize(block + 1, std::nan(""));
  if (!std::isnan(known[block])) return known[block];
  // A stage's time over a range is at least its fastest type's with least_share samples (its largest
  // group's, at least that many, and times grow with samples); the min-max partition of those times has the
  // least slowest stage of every partition (exact for such a cost: partition.h).
  std::vector<std::vector<const LayerTimes::Table*>> tables(depth());
  for (int j = 0; j < depth(); ++j)
    for (const int type : floor_stages()[j].types)
      tables[j].push_back(&times_.table(type, stages_[j].tp, least_share(j, block), level_.recompute));
  auto cost = [&](int j, int begin, int end) {
    double fastest = kInf;
    for (const LayerTimes::Table* table : tables[j]) fastest = std::min(fastest, table->stage_s(begin, end));
    return fastest;
  };
  const std::vector<int> bounds = minmax_partition_monotone_with(layers_, depth(), cost, ties_, &partition_scratch_);
  double slowest = 0;
  for (int j = 0; j < depth(); ++j) slowest = std::max(slowest, cost(j, bounds[j], bounds[j + 1]));
  return known[block] = slowest;
}

double PipelineCosts::samples_floor(int samples) {
  std::vector<double>& known = shared_->samples_floor;
  if (samples >= static_cast<int>(known.size())) known.resize(samples + 1, std::nan(""));
  if (!std::isnan(known[samples])) return known[samples];
  return known[samples] = group_work(times_, floor_stages(), level_.recompute, samples);
}

bool PipelineCosts::may_fit(int b) {
  if (b < min_micro_batch_ || known_too_big(b, 1)) return false;
  // Ranges that fit with one micro-batch in flight include every partition's (1F1B keeps at least one in
  // flight on each stage); each stage taking the furthest end it can from where the last one ended reaches
  // the last layer whenever some partition of them fits.
  int x = 0;
  for (int j = 0; j < depth() && x < layers_; ++j) {
    if (const std::vector<int>* ends = memory_.max_ends(cache_key(b, 1, stage_memory_id_[j]))) {
      x = std::max(x, (*ends)[x]);
      continue;
    }
    prepare_fits(j, b);
    x = std::max(x, first_max_end(j, x, 1));
  }
  return x == layers_;
}

bool PipelineCosts::memory_decides(long n, const Choice& c, const std::vector<int>& ruled_out) {
  if (c.micro_batch == 0) return true;
  // A ruled-out size could win only if, without the limit, its time would be below the choice.
  for (const int b : ruled_out) {
    const auto [sum, slowest] = unlimited_stages(b);
    if (sum + static_cast<double>(n / b - 1) * slowest < c.time_s) return true;
  }
  return limit_shapes_partition(c.micro_batch, n / c.micro_batch);
}

std::pair<double, double> PipelineCosts::unlimited_stages(int b) {
  if (auto it = shared_->unlimited_stages.find(b); it != shared_->unlimited_stages.end()) return it->second;
  std::vector<const LayerTimes::StageGroups*>& stages = stage_groups_scratch_;
  stages.clear();
  for (int j = 0; j < depth(); ++j) stages.push_back(&groups(j, b));
  return shared_->unlimited_stages.emplace(b, times_.unlimited_stages(stages, ties_)).first->second;
}

bool PipelineCosts::limit_shapes_partition(int b, long m) {
  const std::vector<int>& bounds = partition(b, m);
  if (bounds.empty()) return true;
  double slowest = 0;
  for_each_stage_time(b, m, [&](double x) { slowest = std::max(slowest, x); });
  // Stage j starts at x >= j and ends at most where each later stage keeps one layer; the cheapest range
  // the limit rules out from x is the one a layer past max_ends (times grow with the range).
  for (int j = 0; j < depth(); ++j) {
    const std::vector<int>& ends = max_ends(j, b, std::min<long>(depth() - j, m));
    const std::vector<const LayerTimes::Table*>& tables = group_tables(j, b);
    const int last_end = layers_ - (depth() - 1 - j);
    const int last_start = j == 0 ? 0 : last_end - 1;
    for (int x = j; x <= last_start; ++x) {
      const int end = j + 1 == depth() ? layers_ : ends[x] + 1;
      if (ends[x] >= end || end > last_end) continue;  // nothing within reach is ruled out
      if (slowest_group_s(tables, x, end) < slowest) return true;
    }
  }
  return false;
}

double PipelineCosts::speed(long max_b) {
  double best = 0;
  for (long b = 1; b <= max_b; b *= 2) {
    if (b < min_micro_batch_) continue;
    double worst = 0;
    if (!for_each_stage_time(static_cast<int>(b), depth(), [&](double x) { worst = std::max(worst, x); })) continue;
    best = std::max(best, static_cast<double>(b) / worst);
  }
  if (best == 0 && min_micro_batch_ <= max_b) {  // no power of two fits: the smallest micro-batch
    const std::vector<double> t = stage_times(min_micro_batch_, depth());
    if (!t.empty()) best = min_micro_batch_ / *std::max_element(t.begin(), t.end());
  }
  return best;
}

bool PipelineCosts::runs(long max_b) {
  if (min_micro_batch_ > max_b) return false;
  for (long b = 1; b <= max_b; b *= 2)
    if (b >= min_micro_batch_ && !partition(static_cast<int>(b), depth()).empty()) return true;
  return !partition(min_micro_batch_, depth()).empty();
}

}  // namespace arachne::planner
