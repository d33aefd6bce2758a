// Alibaba cluster-trace-gpu-v2023 loader: the placement policy is stated in alibaba_trace.h.
#include "sim/trace/alibaba_trace.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <queue>
#include <sstream>
#include <tuple>
#include <vector>

#include "sim/io/input_error.h"
#include "sim/io/numbers.h"
#include "sim/io/yaml_fields.h"

#ifndef ARACHNE_SOURCE_DIR
#define ARACHNE_SOURCE_DIR "."
#endif

namespace arachne {
namespace {

// splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA'14):
// fully specified, so traces are identical on every standard library.
class SplitMix {
 public:
  explicit SplitMix(std::uint64_t seed, std::uint64_t stream) : s_(seed ^ (stream * 0xD1B54A32D192ED03ull)) { next(); }
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  std::size_t below(std::size_t n) {  // [0, n), multiply-high (Lemire); bias < n / 2^64
    return static_cast<std::size_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
  template <class T>
  void shuffle(std::vector<T>& v) {  // Fisher–Yates
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }

 private:
  std::uint64_t s_;
};

constexpr std::uint64_t kStreamSubset = 1, kStreamReplicas = 2, kStreamNodeOrder = 3;

struct Csv {
  std::string path;
  std::vector<std::string> header;
  std::vector<std::pair<int, std::vector<std::string>>> rows;  // 1-based line, cells

  int column(const std::string& name) const {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) throw InputError(path + ":1: " + name, "missing column");
    return static_cast<int>(it - header.begin());
  }
};

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

Csv read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "cannot open file");
  Csv csv{path, {}, {}};
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (csv.header.empty()) {
      csv.header = split(line);
      continue;
    }
    auto cells = split(line);
    if (cells.size() != csv.header.size())
      throw InputError(path + ":" + std::to_string(number) + ": " + csv.header.back(),
                       "expected " + std::to_string(csv.header.size()) + " columns, found " +
                           std::to_string(cells.size()));
    csv.rows.emplace_back(number, std::move(cells));
  }
  if (csv.header.empty()) throw InputError(path + ":1", "empty file (no header)");
  return csv;
}

std::string where(const Csv& csv, int line, int col) {
  return csv.path + ":" + std::to_string(line) + ": " + csv.header[col];
}

double number_cell(const Csv& csv, int line, const std::vector<std::string>& cells, int col) {
  return read_real(cells[col], limits::kTraceCell, where(csv, line, col));
}

// GPU counts and milli-GPUs (whole numbers, possibly written "2.0").
int int_cell(const Csv& csv, int line, const std::vector<std::string>& cells, int col) {
  return static_cast<int>(read_whole(cells[col], limits::kTraceGpus, where(csv, line, col)));
}

struct NodeRow {
  std::string name, model, gpu_type;
  int gpus = 0;
};

struct Pod {
  int line = 0;
  int num_gpu = 0;
  int gpu_milli = 0;
  std::vector<std::string> spec;  // allowed node models; empty = any
  double start = 0, end = 0;      // [start, end)
};

struct Instance {
  int pod = 0;
  int replica = 0;
};

// GPU state of one node: milli-GPUs used per GPU (0 = free for the job).
struct NodeState {
  std::vector<int> used;
  int free() const { return static_cast<int>(std::count(used.begin(), used.end(), 0)); }
};

struct Allocation {
  int node = -1;
  std::vector<std::pair<int, int>> gpu_milli;  // (gpu, milli)
};

// First fit over `order`; within a node, whole GPUs lowest-numbered, shares best fit. Empty node = no fit.
Allocation place(const Pod& pod, const std::vector<int>& order, const std::vector<NodeRow>& nodes,
                 std::vector<NodeState>& state) {
  for (const int n : order) {
    if (!pod.spec.empty() && std::find(pod.spec.begin(), pod.spec.end(), nodes[n].model) == pod.spec.end()) continue;
    auto& used = state[n].used;
    Allocation a{n, {}};
    if (pod.gpu_milli >= 1000) {
      for (int g = 0; g < static_cast<int>(used.size()) && static_cast<int>(a.gpu_milli.size()) < pod.num_gpu; ++g)
        if (used[g] == 0) a.gpu_milli.emplace_back(g, 1000);
      if (static_cast<int>(a.gpu_milli.size()) < pod.num_gpu) continue;
    } else {
      int best = -1;
      for (int g = 0; g < static_cast<int>(used.size()); ++g)
        if (used[g] > 0 && used[g] + pod.gpu_milli <= 1000 && (best < 0 || used[g] > used[best])) best = g;
      if (best < 0)
        for (int g = 0; g < static_cast<int>(used.size()) && best < 0; ++g)
          if (used[g] == 0) best = g;
      if (best < 0) continue;
      a.gpu_milli.emplace_back(best, pod.gpu_milli);
    }
    for (const auto& [g, m] : a.gpu_milli) used[g] += m;
    return a;
  }
  return {};
}

// Per model, N·count/total nodes by largest remainder; seeded sample within a model; file order kept.
std::vector<int> stratified_subset(const std::vector<NodeRow>& nodes, int n, std::uint64_t seed) {
  std::map<std::string, std::vector<int>> by_model;  // ordered by model name: deterministic
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) by_model[nodes[i].model].push_back(i);
  const double total = static_cast<double>(nodes.size());
  struct Share {
    std::string model;
    int take;
    double remainder;
  };
  std::vector<Share> shares;
  int assigned = 0;
  for (const auto& [model, idx] : by_model) {
    const double exact = n * static_cast<double>(idx.size()) / total;
    const int take = static_cast<int>(std::floor(exact));
    shares.push_back({model, take, exact - take});
    assigned += take;
  }
  std::vector<int> rank(shares.size());
  for (int i = 0; i < static_cast<int>(rank.size()); ++i) rank[i] = i;
  std::stable_sort(rank.begin(), rank.end(),
                   [&](int a, int b) { return shares[a].remainder > shares[b].remainder; });
  for (int k = 0; assigned < n && k < static_cast<int>(rank.size()); ++k, ++assigned) ++shares[rank[k]].take;
  SplitMix rng(seed, kStreamSubset);
  std::vector<int> chosen;
  for (const auto& s : shares) {
    auto idx = by_model[s.model];
    rng.shuffle(idx);
    chosen.insert(chosen.end(), idx.begin(), idx.begin() + s.take);
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

}  // namespace

std::string default_alibaba_gpu_map_path() { return std::string(ARACHNE_SOURCE_DIR) + "/traces/alibaba_gpu_map.yaml"; }

std::map<std::string, std::string> load_alibaba_gpu_map(const std::string& path) {
  const YAML::Node root = yaml_fields::load_file(path, "GPU map");
  const YAML::Node models = root["models"];
  if (!models || !models.IsMap()) throw InputError(file_where(path, root.Mark().line, "models"), "expected a map model: gpu_type");
  std::map<std::string, std::string> map;
  for (const auto& kv : models) {
    const auto key = kv.first.as<std::string>();
    if (!kv.second.IsScalar() || kv.second.as<std::string>().empty())
      throw InputError(file_where(path, kv.second.Mark().line, "models." + key), "expected a catalog GPU type");
    map[key] = kv.second.as<std::string>();
  }
  return map;
}

AlibabaLoad load_alibaba_trace(const std::string& pod_list_path, const AlibabaOptions& options) {
  if (options.nodes < 0) throw InputError("--nodes", "must be >= 0");
  if (!(options.load_scale >= 0) || !std::isfinite(options.load_scale))
    throw InputError("--load-scale", "must be a finite number >= 0");
  if (!(options.window_start_s >= 0)) throw InputError("--window-start", "must be >= 0");
  if (options.window_end_s != -1 && !(options.window_end_s > options.window_start_s))
    throw InputError("--window-end", "must be greater than the window start (or -1: to the end)");

  const auto gpu_map = load_alibaba_gpu_map(options.gpu_map_path.empty() ? default_alibaba_gpu_map_path()
                                                                         : options.gpu_map_path);

  // ---- nodes
  const std::string node_path =
      (std::filesystem::path(pod_list_path).parent_path() / "openb_node_list_gpu_node.csv").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(node_path, ec)) throw InputError(node_path, "node list not found beside the pod list");
  const Csv ncsv = read_csv(node_path);
  const int c_sn = ncsv.column("sn"), c_ncpu = ncsv.column("cpu_milli"), c_nmem = ncsv.column("memory_mib"),
            c_gpu = ncsv.column("gpu"), c_model = ncsv.column("model");
  std::vector<NodeRow> all_nodes;
  for (const auto& [line, cells] : ncsv.rows) {
    if (cells[c_sn].empty()) throw InputError(where(ncsv, line, c_sn), "empty node name");
    number_cell(ncsv, line, cells, c_ncpu);
    number_cell(ncsv, line, cells, c_nmem);
    const int gpus = int_cell(ncsv, line, cells, c_gpu);
    const auto it = gpu_map.find(cells[c_model]);
    if (it == gpu_map.end())
      throw InputError(where(ncsv, line, c_model), "GPU model '" + cells[c_model] + "' is not in the GPU map");
    all_nodes.push_back({cells[c_sn], cells[c_model], it->second, gpus});
  }
  if (options.nodes > static_cast<int>(all_nodes.size()))
    throw InputError("--nodes", std::to_string(options.nodes) + " exceeds the " + std::to_string(all_nodes.size()) +
                                    " nodes of " + node_path);
  std::vector<int> chosen;
  if (options.nodes == 0) {
    for (int i = 0; i < static_cast<int>(all_nodes.size()); ++i) chosen.push_back(i);
  } else {
    chosen = stratified_subset(all_nodes, options.nodes, options.seed);
  }
  std::vector<NodeRow> nodes;
  for (const int i : chosen) nodes.push_back(all_nodes[i]);

  // ---- pods
  const Csv pcsv = read_csv(pod_list_path);
  const int c_num = pcsv.column("num_gpu"), c_milli = pcsv.column("gpu_milli"), c_spec = pcsv.column("gpu_spec"),
            c_phase = pcsv.column("pod_phase"), c_create = pcsv.column("creation_time"),
            c_del = pcsv.column("deletion_time"), c_sched = pcsv.column("scheduled_time"),
            c_pcpu = pcsv.column("cpu_milli"), c_pmem = pcsv.column("memory_mib");
  AlibabaLoad load;
  std::vector<Pod> pods;
  double last_time = 0;
  for (const auto& [line, cells] : pcsv.rows) {
    number_cell(pcsv, line, cells, c_pcpu);
    number_cell(pcsv, line, cells, c_pmem);
    const int num_gpu = int_cell(pcsv, line, cells, c_num);
    const int milli = int_cell(pcsv, line, cells, c_milli);
    const std::string& phase = cells[c_phase];
    if (phase != "Running" && phase != "Succeeded" && phase != "Failed" && phase != "Pending")
      throw InputError(where(pcsv, line, c_phase), "unknown pod phase '" + phase + "' (Running, Succeeded, Failed, Pending)");
    if (!cells[c_create].empty()) last_time = std::max(last_time, number_cell(pcsv, line, cells, c_create));
    const bool has_sched = !cells[c_sched].empty();
    const bool has_del = !cells[c_del].empty();
    const double sched = has_sched ? number_cell(pcsv, line, cells, c_sched) : 0;
    const double del = has_del ? number_cell(pcsv, line, cells, c_del) : 0;
    last_time = std::max({last_time, sched, del});
    if (has_sched && has_del && del < sched)
      throw InputError(where(pcsv, line, c_del), "deletion_time before scheduled_time");
    if (num_gpu >= 1 && (milli <= 0 || milli > 1000))
      throw InputError(where(pcsv, line, c_milli), "must be in 1..1000 for a pod with GPUs");
    if (num_gpu > 1 && milli < 1000)
      throw InputError(where(pcsv, line, c_milli), "a shared GPU (gpu_milli < 1000) requires num_gpu = 1");
    const bool ran = has_sched && phase != "Pending" && num_gpu >= 1 && (!has_del || del > sched);
    if (!ran) {
      ++load.pods_not_run;
      continue;
    }
    Pod pod{line, num_gpu, milli, {}, sched, has_del ? del : -1};
    if (!cells[c_spec].empty()) {
      std::istringstream in(cells[c_spec]);
      std::string m;
      while (std::getline(in, m, '|'))
        if (!m.empty()) pod.spec.push_back(m);
    }
    pods.push_back(std::move(pod));
  }
  const double t0 = options.window_start_s;
  const double t1 = options.window_end_s >= 0 ? options.window_end_s : last_time;
  if (!(t1 > t0)) throw InputError("--window-start", "at or after the end of the trace");
  for (auto& p : pods)
    if (p.end < 0) p.end = std::max(t1, p.start);  // no deletion time: until the end of the trace

  // ---- replicas (--load-scale)
  const int whole = static_cast<int>(std::floor(options.load_scale));
  const double frac = options.load_scale - whole;
  SplitMix rep_rng(options.seed, kStreamReplicas);
  std::vector<Instance> instances;
  for (int p = 0; p < static_cast<int>(pods.size()); ++p) {
    const int copies = whole + (rep_rng.uniform() < frac ? 1 : 0);
    for (int r = 0; r < copies; ++r) instances.push_back({p, r});
  }
  // Instances are already in (line, replica) order; stable sort by start time.
  std::stable_sort(instances.begin(), instances.end(),
                   [&](const Instance& a, const Instance& b) { return pods[a.pod].start < pods[b.pod].start; });

  // ---- placement sweep
  std::vector<int> order(nodes.size());
  for (int i = 0; i < static_cast<int>(order.size()); ++i) order[i] = i;
  SplitMix order_rng(options.seed, kStreamNodeOrder);
  order_rng.shuffle(order);

  std::vector<NodeState> state(nodes.size());
  for (std::size_t n = 0; n < nodes.size(); ++n) state[n].used.assign(nodes[n].gpus, 0);
  std::vector<int> free_now(nodes.size());
  for (std::size_t n = 0; n < nodes.size(); ++n) free_now[n] = nodes[n].gpus;

  struct Change {
    double t;
    int node;
    int free;
  };
  std::vector<Change> changes;
  // Departures: (end time, sequence) → allocation; the sequence makes the order total.
  using Departure = std::tuple<double, std::size_t>;
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> departures;
  std::vector<Allocation> allocations;
  std::vector<int> touched;

  auto flush = [&](double t) {
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (const int n : touched) {
      const int f = state[n].free();
      if (f != free_now[n]) {
        free_now[n] = f;
        changes.push_back({t, n, f});
      }
    }
    touched.clear();
  };

  std::size_t next = 0;
  while (next < instances.size() || !departures.empty()) {
    const double t_arrive = next < instances.size() ? pods[instances[next].pod].start : INFINITY;
    const double t_depart = departures.empty() ? INFINITY : std::get<0>(departures.top());
    const double t = std::min(t_arrive, t_depart);
    if (t >= t1) break;
    while (!departures.empty() && std::get<0>(departures.top()) <= t) {
      const Allocation& a = allocations[std::get<1>(departures.top())];
      for (const auto& [g, m] : a.gpu_milli) state[a.node].used[g] -= m;
      touched.push_back(a.node);
      departures.pop();
    }
    while (next < instances.size() && pods[instances[next].pod].start <= t) {
      const Pod& pod = pods[instances[next].pod];
      const bool overlaps = pod.end > t0;  // start < t1 holds here
      Allocation a = place(pod, order, nodes, state);
      if (a.node < 0) {
        if (overlaps) ++load.pods_skipped;
      } else {
        if (overlaps) ++load.pods_placed;
        touched.push_back(a.node);
        departures.emplace(pod.end, allocations.size());
        allocations.push_back(std::move(a));
      }
      ++next;
    }
    flush(t);
  }

  // ---- window → trace
  AvailabilityTrace& trace = load.trace;
  trace.source = pod_list_path;
  trace.end_s = t1 - t0;
  int capacity_total = 0;
  for (const auto& n : nodes) {
    trace.nodes.push_back({n.name, n.gpu_type, n.gpus});
    capacity_total += n.gpus;
  }
  std::vector<int> free_at(nodes.size());
  for (std::size_t n = 0; n < nodes.size(); ++n) free_at[n] = nodes[n].gpus;
  std::size_t c = 0;
  for (; c < changes.size() && changes[c].t <= t0; ++c) free_at[changes[c].node] = changes[c].free;
  for (int n = 0; n < static_cast<int>(nodes.size()); ++n) trace.events.push_back({0.0, n, free_at[n]});
  double free_gpu_seconds = 0, last_t = t0;
  int free_total = std::accumulate(free_at.begin(), free_at.end(), 0);
  int min_free = free_total;
  for (; c < changes.size(); ++c) {
    const Change& ch = changes[c];  // ch.t < t1 by construction
    free_gpu_seconds += free_total * (ch.t - last_t);
    last_t = ch.t;
    free_total += ch.free - free_at[ch.node];
    free_at[ch.node] = ch.free;
    trace.events.push_back({ch.t - t0, ch.node, ch.free});
    // Only the state after all changes at one time counts for the peak (changes are grouped by time).
    if (c + 1 == changes.size() || changes[c + 1].t != ch.t) min_free = std::min(min_free, free_total);
  }
  free_gpu_seconds += free_total * (t1 - last_t);
  load.tenant_gpus_peak = capacity_total - min_free;
  load.utilisation = capacity_total > 0 ? 1.0 - free_gpu_seconds / (capacity_total * (t1 - t0)) : 0.0;
  return load;
}

}  // namespace arachne
