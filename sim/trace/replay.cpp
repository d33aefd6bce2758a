#include "sim/trace/replay.h"

#include <algorithm>
#include <limits>
#include <set>

#include "sim/exec/simulate.h"
#include "sim/hw/topology.h"
#include "sim/io/input_error.h"
#include "sim/io/limits.h"
#include "sim/io/numbers.h"

namespace arachne {
namespace {

NodeGroup group_for(const std::string& type, int gpus, const GpuCatalog& catalog, const Cluster* tmpl) {
  NodeGroup g;
  g.gpu = type;
  g.nodes = 1;
  g.gpus_per_node = gpus;
  if (tmpl)
    for (const NodeGroup& t : tmpl->groups)
      if (t.gpu == type) {
        g.intra_kind = t.intra_kind, g.intra_bw = t.intra_bw, g.nic_count = t.nic_count, g.nic_bw = t.nic_bw;
        return g;
      }
  const NodeDefaults& d = catalog.at(type).node;
  g.intra_kind = d.intra_kind;
  g.intra_bw = d.intra_bw;
  g.nic_count = d.nics;
  g.nic_bw = d.nic_bw;
  return g;
}

std::string summarize(const Plan& p) {
  std::set<int> tps;
  size_t stages = 0;
  for (const Pipeline& pl : p.pipelines) {
    stages = std::max(stages, pl.stages.size());
    for (const Stage& s : pl.stages)
      for (const TpGroup& g : s.groups) tps.insert(g.tp);
  }
  std::string tp;
  for (int t : tps) tp += (tp.empty() ? "" : "/") + std::to_string(t);
  return std::to_string(p.pipelines.size()) + " pipelines x " + std::to_string(stages) + " stages, tp " + tp + ", " +
         std::to_string(p.num_gpus()) + " GPUs";
}

struct Evaluated {
  Cluster snapshot;
  ReplanOutcome outcome;
  double tokens_per_s = 0;  // 0: infeasible (no plan, or out of memory)
  std::vector<int> used;    // GPUs the plan uses per trace node
  std::string summary;
};

}  // namespace

Cluster snapshot_cluster(const AvailabilityTrace& trace, const std::vector<int>& gpus, const GpuCatalog& catalog,
                         const Cluster* link_template, std::vector<int>* node_of_trace) {
  Cluster c;
  c.name = "snapshot";
  c.source = trace.source;
  c.catalog = catalog;
  if (link_template) c.network = link_template->network;
  if (node_of_trace) node_of_trace->clear();
  for (size_t i = 0; i < trace.nodes.size(); ++i) {
    if (gpus[i] <= 0) continue;
    c.groups.push_back(group_for(trace.nodes[i].gpu_type, gpus[i], catalog, link_template));
    const int id = static_cast<int>(c.nodes.size());
    const int first = id == 0 ? 0 : c.nodes.back().first_gpu + c.nodes.back().gpus;
    c.nodes.push_back(Node{id, static_cast<int>(c.groups.size()) - 1, first, gpus[i]});
    if (node_of_trace) node_of_trace->push_back(static_cast<int>(i));
  }
  return c;
}

double checkpoint_bytes(const ModelConfig& model) { return 14.0 * model.parameters(); }

std::optional<PoolRule> pool_rule_named(const std::string& name) {
  for (const PoolRule r : {PoolRule::All, PoolRule::Stable})
    if (name == pool_rule_name(r)) return r;
  return std::nullopt;
}

const char* pool_rule_name(PoolRule rule) { return rule == PoolRule::Stable ? "stable" : "all"; }

ReplayResult replay(const AvailabilityTrace& trace, const GpuCatalog& catalog, const ModelConfig& model,
                    long global_batch, const ReplanCallback& replan, const ReplayOptions& opt) {
  ReplayResult out;
  const double end = opt.until_s >= 0 ? opt.until_s : trace.end_s;
  std::vector<double> times;
  for (double t : trace.change_times())
    if (t < end && (times.empty() || t - times.back() >= opt.coalesce_s)) times.push_back(t);
  if (times.empty() || times.front() > 0) times.insert(times.begin(), 0.0);

  const double state_bytes = checkpoint_bytes(model);
  const double save_s = state_bytes / opt.storage_bandwidth;
  const double reconfig_s = state_bytes / opt.storage_bandwidth + opt.restart_s;
  std::map<std::vector<int>, Evaluated> cache;  // map nodes are stable: `last_run` may point into it
  const Evaluated* last_run = nullptr;          // the snapshot whose plan the job ran last

  bool running = false;
  std::vector<int> used(trace.nodes.size(), 0);
  std::string current_summary;
  double since_ckpt_s = 0;                               // training time since the last checkpoint
  std::vector<std::pair<size_t, double>> since_ckpt_tokens;  // (interval, tokens) since the last checkpoint

  // The plan of one pool of GPUs (per trace node), planned and simulated once per distinct pool.
  auto evaluate = [&](const std::vector<int>& gpus) -> const Evaluated& {
    auto it = cache.find(gpus);
    if (it != cache.end()) return it->second;
    Evaluated e;
    std::vector<int> node_of_trace;
    e.snapshot = snapshot_cluster(trace, gpus, catalog, opt.link_template, &node_of_trace);
    const Cluster& snap = e.snapshot;
    const LastPlan last = last_run ? LastPlan{&*last_run->outcome.plan, &last_run->snapshot} : LastPlan{};
    if (snap.total_gpus() > 0) e.outcome = replan(snap, global_batch, last);
    else e.outcome.reason = "no GPUs available";
    e.used.assign(trace.nodes.size(), 0);
    if (e.outcome.plan) {
      const Topology topo(snap);
      const SimResult r = simulate_iteration(snap, topo, model, *e.outcome.plan, SimOptions{});
      if (!r.oom) {
        e.tokens_per_s = r.tokens_per_s;
        e.summary = summarize(*e.outcome.plan);
        // Count each GPU once (interleaved stages repeat GPUs).
        std::set<GpuId> ids;
        for (const Pipeline& pl : e.outcome.plan->pipelines)
          for (const Stage& s : pl.stages)
            for (const TpGroup& g : s.groups) ids.insert(g.gpus.begin(), g.gpus.end());
        for (GpuId id : ids) ++e.used[node_of_trace[snap.node_of(id)]];
      }
    }
    ++out.totals.simulations;
    return cache.emplace(gpus, std::move(e)).first->second;
  };

  // Departures: the replan times at which some nodes offered fewer GPUs than at the replan before, with
  // those nodes; per node, its own departure times.
  std::vector<std::pair<double, std::vector<int>>> departures;
  std::vector<std::vector<double>> node_departures(trace.nodes.size());
  std::vector<int> previous_gpus;
  auto in_window = [&](double when, double t) { return when > t - opt.volatility_window_s; };
  // A node's departures per second over the trailing window at time t (ranks the nodes for the pools).
  auto node_rate = [&](size_t node, double t) {
    const std::vector<double>& d = node_departures[node];
    const auto first = std::upper_bound(d.begin(), d.end(), t - opt.volatility_window_s);
    return static_cast<double>(d.end() - first) / opt.volatility_window_s;
  };
  // The training time one departure costs a job that uses the node (replay.h PoolRule).
  const double loss_per_departure_s =
      (opt.checkpoint_interval_s > 0 ? opt.checkpoint_interval_s : opt.volatility_window_s) / 2 + reconfig_s;
  // Departures that would have hit a plan using nodes `used`, per second over the window: each departure
  // time once however many of its nodes the plan uses (preemptions come in waves: a wave that takes nodes
  // the plan leaves idle usually takes some it uses too).
  auto expected_tokens_per_s = [&](const Evaluated& e, double t) {
    if (opt.pool_rule == PoolRule::All) return e.tokens_per_s;
    int hits = 0;
    for (auto it = departures.rbegin(); it != departures.rend() && in_window(it->first, t); ++it)
      hits += std::any_of(it->second.begin(), it->second.end(), [&](int i) { return e.used[i] > 0; });
    const double departures_per_s = hits / opt.volatility_window_s;
    return e.tokens_per_s * std::max(0.0, 1 - loss_per_departure_s * departures_per_s);
  };
  // The pools offered at time t: every available GPU, then (PoolRule::Stable) without the nodes of the k
  // highest departure rates.
  auto pools = [&](const std::vector<int>& gpus, double t) {
    std::vector<std::vector<int>> out_pools{gpus};
    if (opt.pool_rule == PoolRule::All) return out_pools;
    std::vector<double> rate(gpus.size()), rates;
    for (size_t i = 0; i < gpus.size(); ++i) {
      rate[i] = node_rate(i, t);
      if (gpus[i] > 0 && rate[i] > 0) rates.push_back(rate[i]);
    }
    std::sort(rates.begin(), rates.end(), std::greater<>());
    rates.erase(std::unique(rates.begin(), rates.end()), rates.end());
    for (size_t k = 0; k < rates.size() && static_cast<int>(out_pools.size()) < kMaxVolatilityPools; ++k) {
      std::vector<int> pool = gpus;
      for (size_t i = 0; i < gpus.size(); ++i)
        if (rate[i] >= rates[k]) pool[i] = 0;
      out_pools.push_back(std::move(pool));
    }
    return out_pools;
  };

  // How long a running job keeps its plan before it takes `fresh`, the plan of the replan at a change
  // that left its GPUs in place (replay.h: SwitchRule; throughputs as the pool rule expects them at time t);
  // 0: at once, infinity: not during this interval.
  auto wait_before_switch = [&](const Evaluated& fresh, double t) {
    const double never = std::numeric_limits<double>::infinity();
    if (fresh.tokens_per_s <= 0) return never;
    if (opt.switch_rule == SwitchRule::Always || (fresh.used == used && fresh.summary == current_summary)) return 0.0;
    const double v_old = expected_tokens_per_s(*last_run, t), v_new = expected_tokens_per_s(fresh, t);
    if (v_new <= v_old) return never;
    const double cost = (since_ckpt_s > 0 ? save_s : 0.0) + reconfig_s;
    return cost * v_new / (v_new - v_old);
  };

  for (size_t k = 0; k < times.size(); ++k) {
    const double t0 = times[k];
    const double t1 = k + 1 < times.size() ? times[k + 1] : end;
    const std::vector<int> gpus = trace.snapshot(t0);
    ReplayInterval iv;
    iv.start_s = t0;
    iv.end_s = t1;
    for (size_t i = 0; i < gpus.size(); ++i)
      if (gpus[i] > 0) iv.gpus_per_type[trace.nodes[i].gpu_type] += gpus[i];
    double left = t1 - t0;
    auto charge = [&](double want, double& into) {
      const double c = std::min(want, left);
      into += c;
      left -= c;
    };

    // GPUs in use gone: the work since the last checkpoint is lost.
    bool lost = false;
    if (k > 0 && running) {
      for (size_t i = 0; i < gpus.size(); ++i) lost = lost || gpus[i] < used[i];
      if (lost) {
        out.intervals.back().work_lost_s += since_ckpt_s;
        for (const auto& [idx, tok] : since_ckpt_tokens) out.intervals[idx].tokens -= tok;
        since_ckpt_s = 0;
        since_ckpt_tokens.clear();
      }
    }

    // Replan on the snapshot, or on each pool the pool rule offers (each simulated once per distinct
    // snapshot), and take the pool whose plan trains the most in expectation.
    if (k > 0) {
      std::vector<int> gone;
      for (size_t i = 0; i < gpus.size(); ++i)
        if (gpus[i] < previous_gpus[i]) gone.push_back(static_cast<int>(i)), node_departures[i].push_back(t0);
      if (!gone.empty()) departures.emplace_back(t0, std::move(gone));
    }
    previous_gpus = gpus;
    double planning_s = 0;
    const Evaluated* chosen = nullptr;
    double chosen_value = -1;
    for (const std::vector<int>& pool : pools(gpus, t0)) {
      const Evaluated& e = evaluate(pool);
      planning_s += opt.fixed_planning_s ? *opt.fixed_planning_s : e.outcome.planning_time_s;
      const double value = expected_tokens_per_s(e, t0);
      if (value > chosen_value) chosen = &e, chosen_value = value;
    }
    ++out.totals.replans;
    charge(planning_s, iv.planning_s);
    const Evaluated& fresh = *chosen;
    const bool keeps_running = k > 0 && running && !lost;
    const double wait = keeps_running ? wait_before_switch(fresh, t0) : 0.0;
    const Evaluated& e = wait > 0 ? *last_run : fresh;

    if (e.tokens_per_s <= 0) {  // nothing feasible: wait
      charge(left, iv.idle_s);
      running = false;
      std::fill(used.begin(), used.end(), 0);
      out.intervals.push_back(iv);
      continue;
    }
    // Runs plan `e` in `iv` until `stop_left` seconds of the change's interval are left. A change after
    // t = 0 that (re)starts the job or changes its plan reconfigures (checkpoint load + restart); a job
    // still running saves a checkpoint first, so it loses nothing. It trains, saving a checkpoint every
    // checkpoint_interval_s of training.
    auto run = [&](ReplayInterval& at, const Evaluated& e, bool first_of_replay, double stop_left) {
      const bool changed = !running || lost || e.used != used || e.summary != current_summary;
      if (!first_of_replay && changed) {
        if (running && !lost && since_ckpt_s > 0) charge(save_s, at.checkpoint_s);
        charge(reconfig_s, at.reconfig_s);
        since_ckpt_s = 0;
        since_ckpt_tokens.clear();
      }
      running = true;
      lost = false;
      last_run = &e;
      used = e.used;
      current_summary = e.summary;
      at.plan_summary = e.summary;
      at.tokens_per_s = e.tokens_per_s;
      for (int u : e.used) at.gpus_used += u;
      while (left > stop_left) {
        const double step = opt.checkpoint_interval_s > 0 ? std::min(left - stop_left, opt.checkpoint_interval_s - since_ckpt_s)
                                                          : left - stop_left;
        const double tok = step * e.tokens_per_s;
        at.tokens += tok;
        since_ckpt_s += step;
        since_ckpt_tokens.push_back({out.intervals.size(), tok});
        left -= step;
        if (opt.checkpoint_interval_s > 0 && since_ckpt_s >= opt.checkpoint_interval_s && left > stop_left) {
          charge(save_s, at.checkpoint_s);
          since_ckpt_s = 0;
          since_ckpt_tokens.clear();
        }
      }
    };
    if (wait > 0 && wait < left) {  // the better plan is taken once waiting has cost as much as switching
      run(iv, e, k == 0, left - wait);
      iv.end_s = t1 - left;
      out.intervals.push_back(iv);
      ReplayInterval next;
      next.start_s = iv.end_s;
      next.end_s = t1;
      next.gpus_per_type = iv.gpus_per_type;
      run(next, fresh, false, 0);
      out.intervals.push_back(next);
      continue;
    }
    run(iv, e, k == 0, 0);
    out.intervals.push_back(iv);
  }

  ReplayTotals& tot = out.totals;
  for (const ReplayInterval& iv : out.intervals) {
    tot.tokens_trained += iv.tokens;
    tot.planning_s += iv.planning_s;
    tot.reconfig_s += iv.reconfig_s;
    tot.checkpoint_s += iv.checkpoint_s;
    tot.idle_s += iv.idle_s;
    tot.work_lost_s += iv.work_lost_s;
  }
  tot.effective_tokens_per_s = end > 0 ? tot.tokens_trained / end : 0;
  return out;
}

void check_volatility_window(double seconds, const std::string& where) {
  if (seconds <= 0) throw InputError(where, "expected seconds > 0, got " + std::to_string(seconds));
}

void check_checkpoint_interval(double seconds, const std::string& where) {
  const limits::RealRange periodic{limits::kMinCheckpointIntervalS, limits::kTraceSeconds.max};
  if (seconds == 0 || (seconds >= periodic.min && seconds <= periodic.max)) return;
  throw InputError(where, "expected 0 (no checkpoints) or seconds in " + range_text(periodic) + ", got " +
                              std::to_string(seconds));
}

}  // namespace arachne
