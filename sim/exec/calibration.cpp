#include "sim/exec/calibration.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <thread>
#include <tuple>

#include "sim/exec/simulate.h"
#include "sim/io/csv_fields.h"
#include "sim/io/input_error.h"
#include "sim/io/numbers.h"
#include "sim/plan/plan_yaml.h"

namespace arachne {
namespace {

using csv::trim;
std::vector<std::string> split_csv(const std::string& line) { return csv::split_row(line); }

// vTrain's validation cluster (config/validation/*.json): 8 A100 per node, 150 GB/s NVLink per direction,
// 800 Gbit/s InfiniBand per node (read as 4 x 200 Gbit/s HDR NICs), one non-blocking fabric. Caveat: vTrain's
// own NCCL all-reduce measurements on those nodes (VIA-Research/vTrain trace/a100/AR_GPU8_1M_1024M_LUT) reach
// 229 GB/s bus bandwidth on 8 GPUs, more than 150 GB/s can carry, so the nodes have A100's 300 GB/s NVLink;
// the catalog's constants were fitted with 150 and are kept until a refit (README, "Calibration").
Cluster vtrain_cluster(const GpuSpec& gpu, int gpus) {
  Cluster c;
  c.name = "vtrain-a100";
  c.source = "vtrain-a100";
  c.catalog.add(gpu);
  NodeGroup g;
  g.gpu = gpu.name;
  g.nodes = std::max(1, (gpus + 7) / 8);
  g.gpus_per_node = 8;
  g.intra_kind = LinkKind::NvLink;
  g.intra_bw = 150e9;
  g.nic_count = 4;
  g.nic_bw = 200e9 / 8;
  c.network.nodes_per_leaf = 64;
  c.groups.push_back(g);
  for (int n = 0; n < g.nodes; ++n) c.nodes.push_back(Node{n, 0, n * 8, 8});
  return c;
}

// Fractions are searched in logit space; the bounds keep a start value of exactly 0 or 1 finite.
double logit(double p) {
  p = std::clamp(p, 1e-6, 1 - 1e-6);
  return std::log(p / (1 - p));
}
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

using Vec = std::array<double, 8>;

Vec encode(const ComputeConstants& c) {
  return {logit(c.gemm_eff_max), std::log(c.gemm_half_flops), logit(c.attn_eff), logit(c.mem_eff),
          std::log(c.kernel_overhead_s), logit(c.link_eff), std::log(c.collective_overhead_s),
          logit(c.overlap_slowdown)};
}

ComputeConstants decode(const Vec& x) {
  ComputeConstants c;
  c.gemm_eff_max = sigmoid(x[0]);
  c.gemm_half_flops = std::exp(x[1]);
  c.attn_eff = sigmoid(x[2]);
  c.mem_eff = sigmoid(x[3]);
  c.kernel_overhead_s = std::exp(x[4]);
  c.link_eff = sigmoid(x[5]);
  c.collective_overhead_s = std::exp(x[6]);
  c.overlap_slowdown = sigmoid(x[7]);
  return c;
}

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {  // average ranks over ties
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = (i + j) / 2.0;
    i = j + 1;
  }
  return r;
}

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = static_cast<double>(a.size());
  const double ma = std::accumulate(a.begin(), a.end(), 0.0) / n;
  const double mb = std::accumulate(b.begin(), b.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

}  // namespace

std::vector<MeasuredRun> load_vtrain_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "cannot open file");
  std::string header;
  std::getline(in, header);
  const auto cols = split_csv(header);
  std::map<std::string, int> col;
  for (size_t i = 0; i < cols.size(); ++i) col[trim(cols[i])] = static_cast<int>(i);
  const std::vector<std::string> need = {"# GPUs", "global batch", "micro batch", "hidden size",
                                         "attention heads", "# layers", "sequence length", "tensor parallelism",
                                         "data parallelism", "pipeline parallelism", "iteration time (ms)"};
  for (const auto& n : need)
    if (!col.count(n)) throw InputError(file_where(path, 0, n), "missing column");
  std::vector<MeasuredRun> runs;
  std::string line;
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (trim(line).empty()) continue;
    const auto f = split_csv(line);
    auto num = [&](const std::string& name) {
      const int i = col.at(name);
      if (i >= static_cast<int>(f.size())) throw InputError(file_where(path, lineno - 1, name), "missing value");
      return read_real(trim(f[i]), {0.0, static_cast<double>(limits::kMeasurementCount.max), true},
                       file_where(path, lineno - 1, name));
    };
    MeasuredRun r;
    r.line = lineno;
    r.gpus = static_cast<int>(num("# GPUs"));
    r.global_batch = static_cast<long>(num("global batch"));
    r.micro_batch = static_cast<int>(num("micro batch"));
    r.hidden = static_cast<long>(num("hidden size"));
    r.heads = static_cast<int>(num("attention heads"));
    r.layers = static_cast<int>(num("# layers"));
    r.seq_len = static_cast<long>(num("sequence length"));
    r.tp = static_cast<int>(num("tensor parallelism"));
    r.dp = static_cast<int>(num("data parallelism"));
    r.pp = static_cast<int>(num("pipeline parallelism"));
    r.time_s = num("iteration time (ms)") / 1e3;
    if (r.tp * r.dp * r.pp != r.gpus)
      throw InputError(file_where(path, lineno - 1, "# GPUs"), "tp*dp*pp != # GPUs");
    runs.push_back(r);
  }
  return runs;
}

ModelConfig vtrain_model(const MeasuredRun& r) {
  ModelConfig m;
  m.name = "vtrain-gpt-h" + std::to_string(r.hidden) + "-l" + std::to_string(r.layers);
  m.layers = r.layers;
  m.hidden = r.hidden;
  m.heads = r.heads;
  m.kv_heads = r.heads;
  m.ffn_hidden = 4 * r.hidden;
  m.ffn_kind = FfnKind::Gelu;
  m.seq_len = r.seq_len;
  m.vocab = 51200;  // Megatron's padded GPT-2 vocabulary (data README: vocabulary not stated)
  m.dtype = "fp16";
  m.global_batch = r.global_batch;
  return m;
}

double simulate_measured(const MeasuredRun& r, const GpuSpec& gpu) {
  const Cluster cluster = vtrain_cluster(gpu, r.gpus);
  const Topology topo(cluster);
  const ModelConfig model = vtrain_model(r);
  Shorthand s;
  s.tp = r.tp;
  s.pp = r.pp;
  s.dp = r.dp;
  s.micro_batch = r.micro_batch;
  s.global_batch = r.global_batch;
  s.recompute = Recompute::Full;
  s.schedule = Schedule::OneFOneB;
  Plan plan;
  try {
    plan = plan_from_shorthand(s, cluster, model);
  } catch (const InputError&) {
    return -1;
  }
  plan.overlap_grad_reduce = false;  // vTrain: use_gradient_bucket false
  SimOptions opt;
  opt.ignore_memory = true;
  return simulate_iteration(cluster, topo, model, plan, opt).iteration_time_s;
}

std::vector<double> simulate_all(const std::vector<MeasuredRun>& runs, const GpuSpec& gpu) {
  std::vector<double> t(runs.size(), -1.0);
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::atomic<bool> failed{false};
  auto work = [&] {
    try {
      for (size_t i; (i = next++) < runs.size();) t[i] = simulate_measured(runs[i], gpu);
    } catch (...) {
      if (!failed.exchange(true)) failure = std::current_exception();
      next = runs.size();
    }
  };
  const size_t threads = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), runs.size()));
  std::vector<std::thread> pool;
  for (size_t k = 1; k < threads; ++k) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
  return t;
}

double calibration_mape(const std::vector<MeasuredRun>& runs, const GpuSpec& gpu) {
  const std::vector<double> sim = simulate_all(runs, gpu);
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < runs.size(); ++i) {  // summed in row order: independent of the thread count
    if (sim[i] < 0) continue;
    sum += std::abs(sim[i] - runs[i].time_s) / runs[i].time_s;
    ++n;
  }
  return n ? sum / n : 1e9;
}

CalibrationFit fit_compute_constants(const std::vector<MeasuredRun>& runs, const GpuSpec& base,
                                     int max_evaluations, const std::function<void(int, double)>& progress) {
  return fit_constants([&](const GpuSpec& g) { return calibration_mape(runs, g); }, base, max_evaluations,
                       progress);
}

CalibrationFit fit_constants(const std::function<double(const GpuSpec&)>& objective, const GpuSpec& base,
                             int max_evaluations, const std::function<void(int, double)>& progress) {
  GpuSpec g = base;
  int evals = 0;
  auto f = [&](const Vec& x) {
    g.compute = decode(x);
    g.compute.link_eff = std::min(g.compute.link_eff, 1.0);
    ++evals;
    const double v = objective(g);
    if (progress) progress(evals, v);
    return v;
  };
  // Nelder-Mead (Nelder & Mead 1965; Lagarias et al. 1998 coefficients) in logit/log coordinates.
  constexpr int n = std::tuple_size_v<Vec>;
  std::array<Vec, n + 1> pts;
  std::array<double, n + 1> val;
  pts[0] = encode(base.compute);
  for (int i = 0; i < n; ++i) {
    pts[i + 1] = pts[0];
    pts[i + 1][i] += 0.5;
  }
  for (int i = 0; i <= n; ++i) val[i] = f(pts[i]);
  while (evals < max_evaluations) {
    std::array<int, n + 1> o;
    std::iota(o.begin(), o.end(), 0);
    std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return val[a] < val[b]; });
    const int best = o[0], worst = o[n], second = o[n - 1];
    if (val[worst] - val[best] < 1e-6) break;
    Vec c{};
    for (int i = 0; i <= n; ++i)
      if (i != worst)
        for (int k = 0; k < n; ++k) c[k] += pts[i][k] / n;
    auto along = [&](double t) {
      Vec x;
      for (int k = 0; k < n; ++k) x[k] = c[k] + t * (pts[worst][k] - c[k]);
      return x;
    };
    const Vec xr = along(-1.0);
    const double fr = f(xr);
    if (fr < val[best]) {
      const Vec xe = along(-2.0);
      const double fe = f(xe);
      if (fe < fr) pts[worst] = xe, val[worst] = fe;
      else pts[worst] = xr, val[worst] = fr;
    } else if (fr < val[second]) {
      pts[worst] = xr, val[worst] = fr;
    } else {
      const bool outside = fr < val[worst];
      const Vec xc = along(outside ? -0.5 : 0.5);
      const double fc = f(xc);
      if (fc < std::min(fr, val[worst])) {
        pts[worst] = xc, val[worst] = fc;
      } else {
        for (int i = 0; i <= n; ++i) {
          if (i == best) continue;
          for (int k = 0; k < n; ++k) pts[i][k] = pts[best][k] + 0.5 * (pts[i][k] - pts[best][k]);
          val[i] = f(pts[i]);
        }
      }
    }
  }
  const int best = static_cast<int>(std::min_element(val.begin(), val.end()) - val.begin());
  CalibrationFit fit;
  fit.constants = decode(pts[best]);
  fit.mape = val[best];
  fit.evaluations = evals;
  return fit;
}

CalibrationFit fit_joint(const std::vector<MeasuredRun>& single, const std::vector<MeasuredRun>& multi,
                         const GpuSpec& base, const JointBudget& budget,
                         const std::function<void(const std::string&, int, double)>& progress) {
  auto report = [&](const char* stage) {
    return [&progress, stage](int e, double v) {
      if (progress) progress(stage, e, v);
    };
  };
  const CalibrationFit first = fit_compute_constants(single, base, budget.single_evaluations, report("single-node"));
  GpuSpec start = base;
  start.compute = first.constants;
  CalibrationFit fit = fit_constants(
      [&](const GpuSpec& g) { return 0.5 * (calibration_mape(single, g) + calibration_mape(multi, g)); }, start,
      budget.joint_evaluations, report("joint"));
  fit.evaluations += first.evaluations;
  return fit;
}

std::vector<int> job_of_runs(const std::vector<MeasuredRun>& runs, std::vector<std::string>* names) {
  std::map<std::tuple<long, int, int, long, int, long>, int> ids;
  std::vector<int> job;
  for (const auto& r : runs) {
    const auto key = std::make_tuple(r.hidden, r.heads, r.layers, r.seq_len, r.gpus, r.global_batch);
    const auto [it, fresh] = ids.emplace(key, static_cast<int>(ids.size()));
    if (fresh && names)
      names->push_back("h" + std::to_string(r.hidden) + " l" + std::to_string(r.layers) + " on " +
                       std::to_string(r.gpus) + " GPUs");
    job.push_back(it->second);
  }
  return job;
}

CrossValidation cross_validate_joint(const std::vector<MeasuredRun>& single, const std::vector<MeasuredRun>& multi,
                                     const GpuSpec& base, const JointBudget& budget,
                                     const std::function<void(const std::string&, int, double)>& progress) {
  CrossValidation cv;
  const std::vector<int> job = job_of_runs(multi, &cv.fold_jobs);
  const int folds = static_cast<int>(cv.fold_jobs.size());
  std::vector<double> multi_err(multi.size(), 0.0);
  for (int k = 0; k < folds; ++k) {
    std::vector<MeasuredRun> fit_single, test_single, fit_multi, test_multi;
    std::vector<size_t> test_index;
    for (size_t i = 0; i < single.size(); ++i) (static_cast<int>(i % 2) == k % 2 ? test_single : fit_single).push_back(single[i]);
    for (size_t i = 0; i < multi.size(); ++i) {
      if (job[i] == k) test_multi.push_back(multi[i]), test_index.push_back(i);
      else fit_multi.push_back(multi[i]);
    }
    const CalibrationFit fit = fit_joint(fit_single, fit_multi, base, budget, [&](const std::string& st, int e, double v) {
      if (progress) progress("fold " + std::to_string(k + 1) + "/" + std::to_string(folds) + " " + st, e, v);
    });
    GpuSpec g = base;
    g.compute = fit.constants;
    cv.fold_constants.push_back(fit.constants);
    cv.fold_single.push_back(calibration_mape(test_single, g));
    const std::vector<double> sim = simulate_all(test_multi, g);
    double sum = 0;
    for (size_t j = 0; j < test_multi.size(); ++j) {
      const double e = sim[j] < 0 ? -1.0 : std::abs(sim[j] - test_multi[j].time_s) / test_multi[j].time_s;
      multi_err[test_index[j]] = e;
      sum += std::max(e, 0.0);
    }
    cv.fold_multi.push_back(test_multi.empty() ? 0.0 : sum / test_multi.size());
  }
  int scored = 0;
  for (double e : multi_err)
    if (e >= 0) cv.multi_mape += e, ++scored;
  cv.multi_mape = scored ? cv.multi_mape / scored : 1e9;
  for (double e : cv.fold_single) cv.single_mape += e / folds;
  return cv;
}

std::vector<double> per_job_spearman(const std::vector<MeasuredRun>& runs, const GpuSpec& gpu, int min_configs,
                                     double min_spread) {
  std::map<std::tuple<long, int, int, long, int, long>, std::vector<const MeasuredRun*>> jobs;
  for (const auto& r : runs) jobs[{r.hidden, r.heads, r.layers, r.seq_len, r.gpus, r.global_batch}].push_back(&r);
  std::vector<double> out;
  for (const auto& [key, rs] : jobs) {
    if (static_cast<int>(rs.size()) < min_configs) continue;
    double lo = 1e300, hi = 0;
    for (const auto* r : rs) lo = std::min(lo, r->time_s), hi = std::max(hi, r->time_s);
    if (hi / lo - 1 < min_spread) continue;
    std::vector<double> meas, sim;
    for (const auto* r : rs) {
      const double t = simulate_measured(*r, gpu);
      if (t < 0) continue;
      meas.push_back(r->time_s);
      sim.push_back(t);
    }
    if (static_cast<int>(meas.size()) < min_configs) continue;
    out.push_back(pearson(ranks(meas), ranks(sim)));
  }
  return out;
}

ComputeConstants extrapolate_constants(const GpuSpec& measured, const GpuSpec& target) {
  ComputeConstants c = measured.compute;
  const double ratio = target.peak_for("fp16") / measured.peak_for("fp16");
  c.gemm_half_flops = measured.compute.gemm_half_flops * ratio;
  return c;
}

}  // namespace arachne

namespace arachne {

std::string format_compute_constants(const ComputeConstants& c) {
  char buf[360];
  std::snprintf(buf, sizeof buf,
                "{gemm_eff_max: %.4f, gemm_half_flops: %.4g, attn_eff: %.4f, mem_eff: %.4f, kernel_overhead: \"%.3f us\", "
                "link_eff: %.4f, collective_overhead: \"%.3f us\", overlap_slowdown: %.4f}",
                c.gemm_eff_max, c.gemm_half_flops, c.attn_eff, c.mem_eff, c.kernel_overhead_s * 1e6, c.link_eff,
                c.collective_overhead_s * 1e6, c.overlap_slowdown);
  return buf;
}

std::string rewrite_catalog_constants(const std::string& yaml_text, const GpuCatalog& catalog,
                                      const std::string& measured, const ComputeConstants& c) {
  GpuSpec fitted = catalog.at(measured);
  fitted.compute = c;
  std::stringstream in(yaml_text);
  std::string out, line, current;
  while (std::getline(in, line)) {
    const auto name_pos = line.find("- name:");
    if (name_pos != std::string::npos) current = trim(line.substr(name_pos + 7));
    const auto cpos = line.find("compute:");
    if (cpos != std::string::npos && line.find('{') != std::string::npos && catalog.contains(current)) {
      const GpuSpec& g = catalog.at(current);
      if (current == measured || g.calibrated_from == measured) {
        const ComputeConstants cc = current == measured ? c : extrapolate_constants(fitted, g);
        line = line.substr(0, cpos) + "compute: " + format_compute_constants(cc);
      }
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace arachne
