// Per-GPU-type tensor-core efficiency fitted to published within-source speed ratios (see gpu_type_fit.h).
#include "sim/exec/gpu_type_fit.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "sim/exec/calibration.h"
#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/io/csv_fields.h"
#include "sim/io/input_error.h"
#include "sim/io/numbers.h"
#include "sim/io/yaml_fields.h"
#include "sim/plan/plan_yaml.h"

namespace arachne {
namespace {

using csv::trim;

// Cells of a CSV line with RFC 4180 quoting ("a, b" is one cell; "" inside quotes is a quote).
std::vector<std::string> split_quoted(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted && ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      cells.back() += '"';
      ++i;
    } else if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      cells.emplace_back();
    } else {
      cells.back() += ch;
    }
  }
  for (auto& c : cells) c = trim(c);
  return cells;
}

// The leading whole number of a cell ("192 (tgt_len ...)" -> 192); 0 when the cell states none. Checked
// against `range` (InputError(where, ...)) so that no count wraps around in an int.
long leading_number(const std::string& cell, limits::IntRange range, const std::string& where) {
  size_t i = 0;
  while (i < cell.size() && std::isdigit(static_cast<unsigned char>(cell[i]))) ++i;
  return i == 0 ? 0 : read_integer(cell.substr(0, i), range, where);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Source GPU labels -> catalog types, most specific first. "" = known but not in the catalog.
struct GpuLabel {
  const char* label;
  const char* catalog;
};
constexpr GpuLabel kGpuLabels[] = {
    {"MI300X", "MI300X"},
    {"MI250", ""},  // one MI250 package = 2 GCDs of a part the catalog does not hold (it has MI250X GCDs)
    {"GH200", "GH200"},
    {"H200", "H200"},
    {"H100 80GB PCIe", "H100-PCIe"},
    {"H100", "H100"},
    {"A100 40GB PCIe", ""},  // a 250 W PCIe card: not the catalog's SXM A100-40
    {"A100 80GB", "A100-80"},
    {"80GB per later README", "A100-80"},
    {"A100 40GB", "A100-40"},
    {"V100 16GB", "V100-16"},
    {"V100 32GB", "V100-32"},
    {"V100", "V100-32"},
    {"A10 (", "A10"},
    {"T4", "T4"},
    {"P100", "P100"},
};

std::string catalog_gpu_of(const std::string& label) {
  for (const GpuLabel& g : kGpuLabels)
    if (contains(label, g.label)) return g.catalog;
  return "";
}

// Workloads the simulator reproduces, by the start of the source's model text. The simulator's blocks are
// GPT blocks (layer_costs.h); encoder blocks have the same kernels and FLOPs (the mask is the only change).
struct Workload {
  const char* model_prefix;
  int layers;
  long hidden;
  int heads;
  long vocab;  // the output head's width
  const char* assumptions;
};
constexpr Workload kWorkloads[] = {
    // BERT-large (Devlin et al. 2019, Table 1 footnote: L=24, H=1024, A=16); SQuAD head = 2 span logits.
    {"BERT-large uncased, SQuAD", 24, 1024, 16, 2,
     "BERT-large encoder priced as 24 GPT blocks (same kernels and FLOPs); SQuAD span head = an output head "
     "of width 2; word-embedding update ignored; no recompute; fp16"},
    // DLE BERT pretraining: the MLM head over the padded vocabulary 30,528 (DLE bert_config.json).
    {"BERT-large pretraining phase 1", 24, 1024, 16, 30528,
     "BERT-large encoder priced as 24 GPT blocks; MLM head over the padded vocabulary (30,528) for every "
     "token (the source does not say whether only masked positions are predicted); NSP head ignored; "
     "gradient accumulation as micro-batches of one iteration; no recompute; fp16"},
    // Transformer-XL (Dai et al. 2019; DLE wt103_{base,large}.yaml): d_inner = 4 d_model; WikiText-103's
    // adaptive softmax has cutoffs 20,000 / 40,000 / 200,000 (Dai et al. 2019 code), and the tail clusters
    // are computed only for the ~10 % of tokens outside the head cluster.
    {"Transformer-XL large", 18, 1024, 16, 20000,
     "Transformer-XL blocks priced as GPT blocks over the tgt_len segment: attention over the memory "
     "(mem_len keys) and the relative-position terms are not modelled (the attention core is ~4x the "
     "simulated s^2 term, 10-20 % of the layer FLOPs); adaptive softmax priced as its 20,000-word head "
     "cluster; fp16"},
    {"Transformer-XL base", 16, 512, 8, 20000,
     "Transformer-XL blocks priced as GPT blocks over the tgt_len segment (memory attention and "
     "relative-position terms not modelled); adaptive softmax priced as its 20,000-word head cluster; fp16"},
};

const Workload* workload_of(const std::string& model) {
  for (const Workload& w : kWorkloads)
    if (model.rfind(w.model_prefix, 0) == 0) return &w;
  return nullptr;
}

// Why the simulator cannot reproduce a row, before looking at its workload; "" if it can.
std::string precision_or_metric_exclusion(const PublishedRow& r) {
  if (contains(r.precision, "FP8"))
    return "FP8: not modelled (the catalog has bf16/fp16 tensor-core peaks only)";
  if (contains(r.precision, "FP32"))
    return "FP32 (TF32 on Ampere/Hopper): the compute model prices fp16/bf16 tensor-core kernels only";
  if (contains(r.metric, "ratio")) return "a stated ratio without a configuration to simulate";
  return "";
}

// "vocab 131072" in a model text; 0 when absent.
long stated_vocab(const std::string& model) {
  const auto pos = model.find("vocab ");
  return pos == std::string::npos ? 0 : leading_number(model.substr(pos + 6), limits::kVocab, "model '" + model + "': vocab");
}

// Rows of a table with one GPU type that states the whole configuration and reports model TFLOP/s per GPU
// (Megatron-Core's H100 weak-scaling table): simulated as stated, compared in absolute terms.
bool absolute_row(const PublishedRow& r) {
  const bool model_stated = r.layers > 0 && r.hidden > 0 && r.heads > 0 && r.seq_len > 0 && stated_vocab(r.model) > 0;
  const bool plan_stated = r.global_batch > 0 && r.tp > 0 && r.pp > 0 && r.dp > 0 && r.tp * r.pp * r.dp == r.gpus_total;
  return r.metric == "model_TFLOPs_per_GPU" && model_stated && plan_stated;
}

void interpret_absolute(PublishedCase& c) {
  const PublishedRow& r = c.row;
  ModelConfig& m = c.model;
  m.name = r.model.substr(0, r.model.find(" ("));
  m.source = "published_gpu_types.csv:" + std::to_string(r.line);
  m.layers = r.layers;
  m.hidden = r.hidden;
  m.heads = m.kv_heads = r.heads;
  m.ffn_hidden = 4 * r.hidden;
  m.ffn_kind = FfnKind::Gelu;
  m.seq_len = r.seq_len;
  m.vocab = stated_vocab(r.model);
  m.dtype = "bf16";
  m.global_batch = r.global_batch;
  c.shape.tp = r.tp;
  c.shape.pp = r.pp;
  c.shape.dp = r.dp;
  c.shape.micro_batch = r.micro_batch > 0 ? r.micro_batch : 1;
  c.shape.global_batch = r.global_batch;
  c.shape.recompute = Recompute::None;
  c.shape.sequence_parallel = r.tp > 1;
  c.shape.zero1 = true;
  c.absolute = true;
  c.assumptions =
      "GPT blocks as stated; not stated, assumed: bf16, micro-batch 1, no recompute, sequence parallelism "
      "with TP, distributed optimizer (ZeRO-1), 1F1B without interleaving, DGX H100 nodes, attention "
      "unfused (the simulator's default)";
}

// Anchor preference inside a workload: the calibrated A100-80, then other A100s, then the H100.
int anchor_rank(const std::string& catalog_gpu) {
  if (catalog_gpu == "A100-80") return 0;
  if (catalog_gpu == "A100-40") return 1;
  if (catalog_gpu == "H100") return 2;
  return 99;
}

Cluster single_type_cluster(const GpuCatalog& catalog, const std::string& gpu, int gpus) {
  const GpuSpec& spec = catalog.at(gpu);
  Cluster c;
  c.name = "published-" + gpu;
  c.source = c.name;
  c.catalog = catalog;
  NodeGroup g;
  g.gpu = gpu;
  g.gpus_per_node = spec.node.gpus_per_node;
  g.nodes = std::max(1, (gpus + g.gpus_per_node - 1) / g.gpus_per_node);
  g.intra_kind = spec.node.intra_kind;
  g.intra_bw = spec.node.intra_bw;
  g.nic_count = spec.node.nics;
  g.nic_bw = spec.node.nic_bw;
  c.groups.push_back(g);
  for (int n = 0; n < g.nodes; ++n) c.nodes.push_back(Node{n, 0, n * g.gpus_per_node, g.gpus_per_node});
  return c;
}

double log_ratio_error(const RatioPoint& p, double simulated) { return std::log(simulated / p.published); }

}  // namespace

std::vector<PublishedRow> load_published_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "cannot open file");
  std::string line;
  std::getline(in, line);
  const auto header = split_quoted(line);
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char* need : {"source_id", "gpu", "gpus_total", "model", "layers", "hidden", "heads", "seq_len",
                           "global_batch", "micro_batch", "tp", "pp", "dp", "precision", "metric", "value", "unit"})
    if (!col.count(need)) throw InputError(file_where(path, 0, need), "missing column");
  std::vector<PublishedRow> rows;
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (trim(line).empty()) continue;
    const auto f = split_quoted(line);
    if (f.size() != header.size())
      throw InputError(file_where(path, lineno - 1, "row"), "expected " + std::to_string(header.size()) +
                                                            " cells, found " + std::to_string(f.size()));
    auto cell = [&](const char* name) { return f[col.at(name)]; };
    auto whole = [&](const char* name) {
      return leading_number(cell(name), limits::kMeasurementCount, file_where(path, lineno - 1, name));
    };
    PublishedRow r;
    r.line = lineno;
    r.source_id = cell("source_id");
    r.gpu = cell("gpu");
    r.model = cell("model");
    r.precision = cell("precision");
    r.metric = cell("metric");
    r.unit = cell("unit");
    r.gpus_total = static_cast<int>(whole("gpus_total"));
    r.layers = static_cast<int>(whole("layers"));
    r.hidden = whole("hidden");
    r.heads = static_cast<int>(whole("heads"));
    r.seq_len = whole("seq_len");
    r.global_batch = whole("global_batch");
    r.micro_batch = static_cast<int>(whole("micro_batch"));
    r.tp = static_cast<int>(whole("tp"));
    r.pp = static_cast<int>(whole("pp"));
    r.dp = static_cast<int>(whole("dp"));
    r.value = read_real(cell("value"), limits::kMeasuredValue, file_where(path, lineno - 1, "value"));
    if (r.source_id.empty()) throw InputError(file_where(path, lineno - 1, "source_id"), "empty");
    rows.push_back(r);
  }
  return rows;
}

std::vector<PublishedCase> interpret_published(const std::vector<PublishedRow>& rows, const GpuCatalog& catalog) {
  std::vector<PublishedCase> cases;
  for (const PublishedRow& r : rows) {
    PublishedCase c;
    c.row = r;
    c.workload = r.source_id + " | " + r.model + " | seq " + std::to_string(r.seq_len);
    c.catalog_gpu = catalog_gpu_of(r.gpu);
    const Workload* w = workload_of(r.model);
    c.excluded = precision_or_metric_exclusion(r);
    if (c.excluded.empty() && (c.catalog_gpu.empty() || !catalog.contains(c.catalog_gpu)))
      c.excluded = "GPU '" + r.gpu.substr(0, r.gpu.find(" (")) + "' is not a catalog type";
    if (c.excluded.empty() && w == nullptr && absolute_row(r)) {
      interpret_absolute(c);
      cases.push_back(c);
      continue;
    }
    if (c.excluded.empty() && w == nullptr)
      c.excluded = "no other GPU type runs this workload in the same source (nothing to compare within it)";
    if (c.excluded.empty() && (r.seq_len <= 0 || r.global_batch <= 0 || r.gpus_total != 1))
      c.excluded = "configuration incomplete (sequence, batch) or multi-GPU";
    if (c.excluded.empty()) {
      ModelConfig& m = c.model;
      m.name = r.model.substr(0, r.model.find(','));
      m.source = "published_gpu_types.csv:" + std::to_string(r.line);
      m.layers = r.layers > 0 ? r.layers : w->layers;
      m.hidden = r.hidden > 0 ? r.hidden : w->hidden;
      m.heads = r.heads > 0 ? r.heads : w->heads;
      m.kv_heads = m.heads;
      m.ffn_hidden = 4 * m.hidden;
      m.ffn_kind = FfnKind::Gelu;
      m.seq_len = r.seq_len;
      m.vocab = w->vocab;
      m.dtype = "fp16";  // every simulated row is FP16/mixed precision (FP8 and FP32 rows are excluded)
      m.global_batch = r.global_batch;
      c.shape.tp = c.shape.pp = c.shape.dp = 1;
      c.shape.micro_batch = r.micro_batch > 0 ? r.micro_batch : static_cast<int>(r.global_batch);
      c.shape.global_batch = r.global_batch;
      c.shape.recompute = Recompute::None;
      c.assumptions = w->assumptions;
    }
    cases.push_back(c);
  }
  // One anchor per workload; rows of a workload without one cannot be compared within their source.
  std::map<std::string, int> best;
  for (int i = 0; i < static_cast<int>(cases.size()); ++i) {
    const PublishedCase& c = cases[i];
    if (!c.excluded.empty() || c.absolute || anchor_rank(c.catalog_gpu) == 99) continue;
    auto it = best.find(c.workload);
    if (it == best.end() || anchor_rank(c.catalog_gpu) < anchor_rank(cases[it->second].catalog_gpu))
      best[c.workload] = i;
  }
  for (int i = 0; i < static_cast<int>(cases.size()); ++i) {
    PublishedCase& c = cases[i];
    if (!c.excluded.empty() || c.absolute) continue;
    const auto it = best.find(c.workload);
    if (it == best.end()) c.excluded = "no A100 or H100 anchor of the same workload in the source";
    else c.anchor = it->second == i;
  }
  return cases;
}

namespace {

SimResult simulate_case(const PublishedCase& c, const GpuCatalog& catalog) {
  const Cluster cluster = single_type_cluster(catalog, c.catalog_gpu, c.row.gpus_total);
  const Topology topo(cluster);
  const Plan plan = plan_from_shorthand(c.shape, cluster, c.model);
  SimOptions opt;
  opt.ignore_memory = true;  // the sources ran these batches; the simulator's memory model is not on trial
  return simulate_iteration(cluster, topo, c.model, plan, opt);
}

}  // namespace

double simulate_published(const PublishedCase& c, const GpuCatalog& catalog) {
  const double t = simulate_case(c, catalog).iteration_time_s;
  return static_cast<double>(c.model.global_batch) / t / c.row.gpus_total;
}

double simulate_published_tflops(const PublishedCase& c, const GpuCatalog& catalog) {
  return simulate_case(c, catalog).tflops_per_gpu;
}

ComputeConstants scaled_constants(const GpuCatalog& catalog, const std::string& gpu, double k) {
  const GpuSpec& g = catalog.at(gpu);
  ComputeConstants c = extrapolate_constants(catalog.at(g.calibrated_from), g);
  c.gemm_eff_max *= k;
  c.attn_eff *= k;
  return c;
}

double tensor_scale(const GpuCatalog& catalog, const std::string& gpu) {
  const GpuSpec& g = catalog.at(gpu);
  return g.compute.gemm_eff_max / extrapolate_constants(catalog.at(g.calibrated_from), g).gemm_eff_max;
}

GpuCatalog propagate_constants(GpuCatalog catalog, const std::map<std::string, double>& k_override) {
  // k of each fitted GPU before its parent changes.
  std::map<std::string, double> k = k_override;
  for (const std::string& name : catalog.names())
    if (!catalog.at(name).fitted_on.empty() && !k.count(name)) k[name] = tensor_scale(catalog, name);
  std::set<std::string> done;
  for (const std::string& name : catalog.names())
    if (catalog.at(name).calibrated_from.empty()) done.insert(name);
  // Parents first: a pass settles every GPU whose parent is settled (the chain depth is small).
  for (bool progress = true; progress;) {
    progress = false;
    for (const std::string& name : catalog.names()) {
      const GpuSpec& g = catalog.at(name);
      if (done.count(name) || !done.count(g.calibrated_from)) continue;
      GpuSpec updated = g;
      updated.compute = g.fitted_on.empty() ? extrapolate_constants(catalog.at(g.calibrated_from), g)
                                            : scaled_constants(catalog, name, k.at(name));
      catalog.add(updated);
      done.insert(name);
      progress = true;
    }
  }
  return catalog;
}

std::string fit_target(const GpuCatalog& catalog, const std::string& gpu) {
  std::string name = gpu;
  while (true) {
    const GpuSpec& g = catalog.at(name);
    if (!g.fitted_on.empty()) return name;
    if (g.calibrated_from.empty()) return "";
    const GpuSpec& p = catalog.at(g.calibrated_from);
    if (g.peak_fp16 != p.peak_fp16 || g.peak_bf16 != p.peak_bf16 || g.hbm_bw != p.hbm_bw) return "";
    name = g.calibrated_from;
  }
}

namespace {

// Measured throughput of a case in sequences per second per GPU (the metric's unit: sequences or tokens).
double measured_sequences_per_s(const PublishedCase& c) {
  return contains(c.row.unit, "token") ? c.row.value / static_cast<double>(c.model.seq_len) : c.row.value;
}

// Simulated ratio of each point with `catalog`'s constants (each case simulated once). The anchor's
// measured time per sequence minus its simulated time is work the simulator's kernel list does not price
// for that source's code (e.g. Transformer-XL's relative-position shifts and adaptive-softmax gathers, or
// framework element-wise kernels); it is charged to the compared GPU too, as memory-bound work scaled by
// the HBM bandwidth ratio (the roofline's memory term, compute_time.h). No fitted parameter: it comes
// from the anchor's own measurement, never from the ratio being predicted.
std::vector<double> simulated_ratios(const std::vector<const RatioPoint*>& points, const GpuCatalog& catalog,
                                     bool charge_unpriced) {
  std::map<const PublishedCase*, double> memo;
  auto thr = [&](const PublishedCase* c) {
    auto it = memo.find(c);
    if (it == memo.end()) it = memo.emplace(c, simulate_published(*c, catalog)).first;
    return it->second;
  };
  std::vector<double> out;
  for (const RatioPoint* p : points) {
    const double anchor_measured_s = 1 / measured_sequences_per_s(*p->anchor);
    const double unpriced_s = charge_unpriced ? std::max(0.0, anchor_measured_s - 1 / thr(p->anchor)) : 0.0;
    const GpuSpec& row_gpu = catalog.at(p->row->catalog_gpu);
    const GpuSpec& anchor_gpu = catalog.at(p->anchor->catalog_gpu);
    const double row_s = 1 / thr(p->row) + unpriced_s * (anchor_gpu.hbm_bw * anchor_gpu.compute.mem_eff) /
                                               (row_gpu.hbm_bw * row_gpu.compute.mem_eff);
    const double anchor_s = charge_unpriced ? std::max(anchor_measured_s, 1 / thr(p->anchor)) : 1 / thr(p->anchor);
    out.push_back(anchor_s / row_s);
  }
  return out;
}

// k minimising the mean squared log error of the simulated ratios of `points` for `gpu`, by golden-section
// search on log k between 0.2 and the largest k keeping both efficiencies below 1 (deterministic).
double fit_scale(const std::vector<const RatioPoint*>& points, const GpuCatalog& catalog, const std::string& gpu,
                 bool charge_unpriced, bool* at_bound) {
  const ComputeConstants unit = scaled_constants(catalog, gpu, 1.0);
  const double lo = std::log(0.2);
  const double hi = std::log(0.999 / std::max(unit.gemm_eff_max, unit.attn_eff));
  auto loss = [&](double u) {
    const GpuCatalog c = propagate_constants(catalog, {{gpu, std::exp(u)}});
    const auto sim = simulated_ratios(points, c, charge_unpriced);
    double s = 0;
    for (size_t i = 0; i < sim.size(); ++i) s += std::pow(log_ratio_error(*points[i], sim[i]), 2);
    return s / sim.size();
  };
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double a = lo, b = hi;
  double x1 = b - phi * (b - a), x2 = a + phi * (b - a);
  double f1 = loss(x1), f2 = loss(x2);
  while (b - a > 1e-4) {
    if (f1 < f2) {
      b = x2, x2 = x1, f2 = f1;
      x1 = b - phi * (b - a), f1 = loss(x1);
    } else {
      a = x1, x1 = x2, f1 = f2;
      x2 = a + phi * (b - a), f2 = loss(x2);
    }
  }
  const double u = (a + b) / 2;
  if (at_bound) *at_bound = u - lo < 1e-3 || hi - u < 1e-3;
  return std::exp(u);
}

std::vector<RatioPoint> ratio_points(const std::vector<PublishedCase>& cases, const GpuCatalog& catalog) {
  std::map<std::string, const PublishedCase*> anchor;
  for (const PublishedCase& c : cases)
    if (c.excluded.empty() && c.anchor) anchor[c.workload] = &c;
  std::vector<RatioPoint> points;
  for (const PublishedCase& c : cases) {
    if (!c.excluded.empty() || c.anchor || c.absolute) continue;
    RatioPoint p;
    p.row = &c;
    p.anchor = anchor.at(c.workload);
    p.target = fit_target(catalog, c.catalog_gpu);
    p.published = c.row.value / p.anchor->row.value;
    points.push_back(p);
  }
  return points;
}

}  // namespace

GpuTypeFitReport fit_gpu_types(const std::vector<PublishedCase>& cases, const GpuCatalog& catalog,
                               bool charge_unpriced) {
  GpuTypeFitReport rep;
  rep.catalog = propagate_constants(catalog);
  rep.points = ratio_points(cases, rep.catalog);
  for (const std::string& gpu : rep.catalog.names()) {
    if (rep.catalog.at(gpu).fitted_on.empty()) continue;
    std::vector<RatioPoint*> mine;  // the points of this GPU, in rep.points
    for (RatioPoint& p : rep.points)
      if (p.target == gpu) mine.push_back(&p);
    if (mine.empty()) throw InputError(gpu + ".fitted_on", "no published row of this GPU can be simulated");
    TypeFit fit;
    fit.gpu = gpu;
    fit.rows = static_cast<int>(mine.size());
    std::set<std::string> sources;
    for (const RatioPoint* p : mine) sources.insert(p->row->row.source_id);
    fit.sources.assign(sources.begin(), sources.end());
    // Folds: sources; a type measured by one source only is validated by leaving one workload out.
    fit.fold_kind = sources.size() > 1 ? "source" : "workload";
    for (RatioPoint* p : mine) p->fold = fit.fold_kind == "source" ? p->row->row.source_id : p->row->workload;
    std::vector<const RatioPoint*> all(mine.begin(), mine.end());
    fit.k = fit_scale(all, rep.catalog, gpu, charge_unpriced, &fit.at_bound);
    std::set<std::string> folds;
    for (const RatioPoint* p : mine) folds.insert(p->fold);
    for (const std::string& fold : folds) {
      std::vector<const RatioPoint*> train;
      std::vector<RatioPoint*> test;
      for (RatioPoint* p : mine) {
        if (p->fold == fold) test.push_back(p);
        else train.push_back(p);
      }
      if (train.empty()) continue;  // a single fold cannot be held out
      const double k = fit_scale(train, rep.catalog, gpu, charge_unpriced, nullptr);
      const auto sim = simulated_ratios({test.begin(), test.end()}, propagate_constants(rep.catalog, {{gpu, k}}),
                                        charge_unpriced);
      for (size_t i = 0; i < test.size(); ++i) test[i]->out_of_sample = sim[i];
    }
    rep.catalog = propagate_constants(rep.catalog, {{gpu, fit.k}});
    GpuSpec g = rep.catalog.at(gpu);
    g.fitted_on = fit.sources;
    rep.catalog.add(g);
    rep.fits.push_back(fit);
  }
  std::vector<const RatioPoint*> all;
  for (const RatioPoint& p : rep.points) all.push_back(&p);
  const auto sim = simulated_ratios(all, rep.catalog, charge_unpriced);
  for (size_t i = 0; i < all.size(); ++i) {
    RatioPoint& p = rep.points[i];
    p.simulated = sim[i];
    if (p.target.empty()) p.out_of_sample = sim[i], p.fold = "extrapolated";
  }
  return rep;
}

std::string rewrite_catalog_gpu_types(const std::string& yaml_text, const GpuTypeFitReport& fitted) {
  const GpuCatalog& cat = fitted.catalog;
  std::stringstream in(yaml_text);
  std::string out, line, current;
  while (std::getline(in, line)) {
    const auto name_pos = line.find("- name:");
    if (name_pos != std::string::npos) current = trim(line.substr(name_pos + 7));
    const bool known = cat.contains(current) && !cat.at(current).calibrated_from.empty();
    const auto cpos = line.find("compute:");
    const auto fpos = line.find("fitted_on:");
    if (known && cpos != std::string::npos && line.find('{') != std::string::npos && line.find('#') > cpos)
      line = line.substr(0, cpos) + "compute: " + format_compute_constants(cat.at(current).compute);
    else if (known && fpos != std::string::npos && line.find('#') > fpos && !cat.at(current).fitted_on.empty())
      line = line.substr(0, fpos) + "fitted_on: [" + yaml_fields::join(cat.at(current).fitted_on) + "]";
    out += line + "\n";
  }
  return out;
}

}  // namespace arachne
