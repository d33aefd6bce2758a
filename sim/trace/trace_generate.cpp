// Synthetic multi-tenant availability trace (model and its parameters: traces/README.md, "Synthetic traces").
#include "sim/trace/trace_generate.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <random>

#include "sim/io/input_error.h"
#include "sim/io/limits.h"

namespace arachne {
namespace {

constexpr double kDay = 86400.0;
constexpr double kPi = 3.14159265358979323846;

// Uniform in (0, 1]: the top 53 bits of one 64-bit draw (portable, unlike std:: distributions).
double uniform01(std::mt19937_64& rng) { return (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53; }
// Exponential with the given mean by inverse CDF.
double exponential(std::mt19937_64& rng, double mean) { return -mean * std::log(uniform01(rng)); }
// Index i with probability weights[i] / sum by inverse CDF.
int pick_weighted(std::mt19937_64& rng, const std::vector<double>& weights) {
  double total = 0;
  for (const double w : weights) total += w;
  double u = uniform01(rng) * total;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (u <= weights[i]) return static_cast<int>(i);
    u -= weights[i];
  }
  return static_cast<int>(weights.size()) - 1;
}
// splitmix64 (Steele et al. 2014): independent seeds for the tenant and the reclaim streams.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

enum class EvKind { Arrival, Departure, ReclaimStart, ReclaimEnd };
struct Ev {
  double t = 0;
  std::uint64_t seq = 0;  // insertion order: ties broken deterministically
  EvKind kind = EvKind::Arrival;
  int id = 0;  // tenant (Departure) or node (ReclaimEnd)
};
struct EvLater {
  bool operator()(const Ev& a, const Ev& b) const { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
};

struct NodeState {
  int type = 0;
  int capacity = 0;
  int held = 0;
  bool reclaimed = false;
  double reclaimed_until = 0;
  int offered() const { return reclaimed ? 0 : capacity - held; }
};
struct Tenant {
  std::vector<std::pair<int, int>> alloc;  // (node, GPUs)
  bool alive = false;
};

void validate(const GenerateOptions& o, const GpuCatalog& catalog) {
  if (!(o.duration_s > 0) || !std::isfinite(o.duration_s)) throw InputError("--duration", "must be > 0 seconds");
  if (o.node_types.empty()) throw InputError("--nodes", "needs at least one TYPE:COUNT");
  for (std::size_t i = 0; i < o.node_types.size(); ++i) {
    const auto& [type, count] = o.node_types[i];
    if (!catalog.contains(type)) throw InputError("--nodes", "unknown GPU type '" + type + "'");
    if (count < 1) throw InputError("--nodes", "node count of " + type + " must be >= 1");
    for (std::size_t j = 0; j < i; ++j)
      if (o.node_types[j].first == type) throw InputError("--nodes", "GPU type " + type + " listed twice");
  }
  if (!std::isfinite(o.load) || o.load >= 1) throw InputError("--load", "must be < 1 (a fraction of the GPUs)");
  if (o.load < 0 && !(o.tenant_arrivals_per_hour >= 0 && std::isfinite(o.tenant_arrivals_per_hour)))
    throw InputError("--arrivals-per-hour", "must be >= 0");
  if (!(o.mean_duration_s > 0) || !std::isfinite(o.mean_duration_s))
    throw InputError("--mean-duration", "must be > 0 seconds");
  if (!(o.daily_amplitude >= 0 && o.daily_amplitude <= 1)) throw InputError("--daily-amplitude", "must be in [0, 1]");
  if (!(o.spot_reclaims_per_day >= 0) || !std::isfinite(o.spot_reclaims_per_day))
    throw InputError("--spot-reclaims-per-day", "must be >= 0");
  if (!(o.mean_reclaim_s > 0) || !std::isfinite(o.mean_reclaim_s))
    throw InputError("mean_reclaim_s", "must be > 0 seconds");
}

// The generator draws every candidate arrival and reclaim: bounded before it starts (sim/io/limits.h).
void check_event_count(const GenerateOptions& o, double arrivals_per_s_max) {
  const double expected = arrivals_per_s_max * o.duration_s + o.spot_reclaims_per_day * o.duration_s / 86400.0;
  if (expected > limits::kMaxGeneratedEvents)
    throw InputError("--duration", "about " + std::to_string(static_cast<long long>(expected)) +
                                       " tenant arrivals and reclaims expected, more than the supported " +
                                       std::to_string(static_cast<long long>(limits::kMaxGeneratedEvents)) +
                                       " (shorten --duration or lower the rates)");
}

}  // namespace

const std::vector<std::pair<int, double>>& tenant_size_distribution() {
  static const std::vector<std::pair<int, double>> dist = {{1, 0.45}, {2, 0.25}, {4, 0.15}, {8, 0.15}};
  return dist;
}

double mean_tenant_size() {
  double m = 0;
  for (const auto& [size, p] : tenant_size_distribution()) m += size * p;
  return m;
}

double generator_arrival_rate(const GenerateOptions& o, int total_gpus) {
  if (o.load < 0) return o.tenant_arrivals_per_hour / 3600.0;
  // Little's law: mean GPUs held = arrival rate x mean size x mean duration (before blocking).
  return o.load * total_gpus / (mean_tenant_size() * o.mean_duration_s);
}

AvailabilityTrace generate_trace(const GenerateOptions& o, const GpuCatalog& catalog) {
  validate(o, catalog);
  AvailabilityTrace trace;
  trace.source = "generated (seed " + std::to_string(o.seed) + ")";
  trace.end_s = o.duration_s;

  std::vector<NodeState> nodes;
  std::vector<std::vector<int>> nodes_of_type(o.node_types.size());
  std::vector<double> type_gpus(o.node_types.size(), 0.0);
  int total_gpus = 0;
  for (std::size_t ti = 0; ti < o.node_types.size(); ++ti) {
    const auto& [type, count] = o.node_types[ti];
    const int g = std::max(1, catalog.at(type).node.gpus_per_node);
    for (int k = 0; k < count; ++k) {
      nodes_of_type[ti].push_back(static_cast<int>(nodes.size()));
      nodes.push_back({static_cast<int>(ti), g, 0, false, 0});
      trace.nodes.push_back({type + "-" + std::to_string(k), type, g});
    }
    type_gpus[ti] = static_cast<double>(count) * g;
    total_gpus += count * g;
  }

  std::vector<double> size_weights;
  for (const auto& sp : tenant_size_distribution()) size_weights.push_back(sp.second);

  const double rate = generator_arrival_rate(o, total_gpus);        // mean arrivals per second
  const double rate_max = rate * (1 + o.daily_amplitude);           // thinning envelope
  check_event_count(o, rate_max);
  const double reclaim_rate = o.spot_reclaims_per_day / kDay;
  // Start in steady state: tenants are simulated from -warmup; the state at 0 is the trace's first row.
  const double warmup = 5 * o.mean_duration_s;

  std::mt19937_64 rng(splitmix64(o.seed));
  std::mt19937_64 reclaim_rng(splitmix64(o.seed ^ 0x5bd1e995a1b2c3d4ULL));
  std::priority_queue<Ev, std::vector<Ev>, EvLater> queue;
  std::uint64_t seq = 0;
  auto push = [&](double t, EvKind kind, int id) { queue.push({t, seq++, kind, id}); };
  if (rate_max > 0) push(-warmup + exponential(rng, 1 / rate_max), EvKind::Arrival, 0);
  if (reclaim_rate > 0) push(exponential(reclaim_rng, 1 / reclaim_rate), EvKind::ReclaimStart, 0);

  std::vector<Tenant> tenants;
  std::vector<int> emitted(nodes.size(), -1);
  bool started = false;
  auto flush = [&](double t) {
    const double tr = std::round(t * 1000) / 1000;  // millisecond resolution keeps the CSV short
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const int v = nodes[n].offered();
      if (v == emitted[n]) continue;
      trace.events.push_back({tr, static_cast<int>(n), v});
      emitted[n] = v;
    }
  };
  auto release = [&](Tenant& tenant) {
    for (const auto& [n, g] : tenant.alloc) nodes[n].held -= g;
    tenant.alive = false;
  };
  auto try_place = [&](int size, std::size_t ti, std::vector<std::pair<int, int>>& alloc) {
    int free_total = 0;
    for (const int n : nodes_of_type[ti]) free_total += nodes[n].offered();
    if (free_total < size) return false;
    int need = size;
    for (const int n : nodes_of_type[ti]) {  // first fit: each node in order gives its free whole GPUs
      const int take = std::min(need, nodes[n].offered());
      if (take <= 0) continue;
      alloc.emplace_back(n, take);
      nodes[n].held += take;
      need -= take;
      if (need == 0) break;
    }
    return true;
  };

  while (!queue.empty() && queue.top().t < o.duration_s) {
    const Ev ev = queue.top();
    queue.pop();
    if (!started && ev.t >= 0) {
      flush(0);
      started = true;
    }
    switch (ev.kind) {
      case EvKind::Arrival: {
        push(ev.t + exponential(rng, 1 / rate_max), EvKind::Arrival, 0);
        // Thinning (Lewis & Shedler 1979): accept with probability rate(t) / rate_max.
        const double accept = (1 + o.daily_amplitude * std::sin(2 * kPi * ev.t / kDay)) / (1 + o.daily_amplitude);
        if (uniform01(rng) > accept) break;
        const int size = tenant_size_distribution()[pick_weighted(rng, size_weights)].first;
        const auto preferred = static_cast<std::size_t>(pick_weighted(rng, type_gpus));
        const double hold = exponential(rng, o.mean_duration_s);
        Tenant tenant;
        bool placed = try_place(size, preferred, tenant.alloc);
        for (std::size_t ti = 0; ti < o.node_types.size() && !placed; ++ti)
          if (ti != preferred) placed = try_place(size, ti, tenant.alloc);
        if (!placed) break;  // blocked: the tenant goes elsewhere
        tenant.alive = true;
        push(ev.t + hold, EvKind::Departure, static_cast<int>(tenants.size()));
        tenants.push_back(std::move(tenant));
        break;
      }
      case EvKind::Departure:
        if (tenants[ev.id].alive) release(tenants[ev.id]);
        break;
      case EvKind::ReclaimStart: {
        push(ev.t + exponential(reclaim_rng, 1 / reclaim_rate), EvKind::ReclaimStart, 0);
        const int n = std::min(static_cast<int>(uniform01(reclaim_rng) * nodes.size()),
                               static_cast<int>(nodes.size()) - 1);
        const double until = ev.t + exponential(reclaim_rng, o.mean_reclaim_s);
        for (Tenant& tenant : tenants) {  // tenants on the node are evicted (all their GPUs freed)
          if (!tenant.alive) continue;
          for (const auto& a : tenant.alloc)
            if (a.first == n) {
              release(tenant);
              break;
            }
        }
        nodes[n].reclaimed = true;
        if (until > nodes[n].reclaimed_until) {
          nodes[n].reclaimed_until = until;
          push(until, EvKind::ReclaimEnd, n);
        }
        break;
      }
      case EvKind::ReclaimEnd:
        if (ev.t >= nodes[ev.id].reclaimed_until) nodes[ev.id].reclaimed = false;
        break;
    }
    if (started) flush(ev.t);
  }
  if (!started) flush(0);
  return trace;
}

}  // namespace arachne
