// GPU catalog: reading configs/gpus.yaml (format documented at the top of that file).
#include "sim/hw/gpu.h"

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <utility>

#include "sim/io/input_error.h"
#include "sim/io/units.h"
#include "sim/io/yaml_fields.h"

namespace arachne {
namespace {


using namespace yaml_fields;

NodeDefaults parse_default_node(const YAML::Node& n, const std::string& file, const std::string& prefix) {
  check_keys(n, {"gpus_per_node", "intra_node", "nic"}, file, prefix);
  NodeDefaults d;
  d.gpus_per_node = whole_number(n, "gpus_per_node", limits::kGpusPerNode, file, prefix);
  const YAML::Node intra = require_map(n, "intra_node", file, prefix);
  const std::string ip = prefix + "intra_node.";
  check_keys(intra, {"kind", "bandwidth"}, file, ip);
  try {
    d.intra_kind = parse_link_kind(require_scalar(intra, "kind", file, ip));
  } catch (const std::invalid_argument& e) {
    fail(file, intra["kind"], ip + "kind", e.what());
  }
  d.intra_bw = dimensioned(intra, "bandwidth", units::parse_bandwidth, limits::kBandwidth, file, ip);
  const YAML::Node nic = require_map(n, "nic", file, prefix);
  const std::string np = prefix + "nic.";
  check_keys(nic, {"count", "bandwidth"}, file, np);
  d.nics = whole_number(nic, "count", limits::kNicsPerNode, file, np);
  d.nic_bw = dimensioned(nic, "bandwidth", units::parse_bandwidth, limits::kBandwidth, file, np);
  if (d.intra_bw <= 0) fail(file, intra["bandwidth"], ip + "bandwidth", "must be positive");
  if (d.nic_bw <= 0) fail(file, nic["bandwidth"], np + "bandwidth", "must be positive");
  return d;
}

ComputeConstants parse_compute(const YAML::Node& n, const std::string& file, const std::string& prefix) {
  check_keys(n, {"gemm_eff_max", "gemm_half_flops", "attn_eff", "mem_eff", "kernel_overhead", "link_eff",
                  "collective_overhead", "overlap_slowdown"},
             file, prefix);
  ComputeConstants c;
  c.gemm_eff_max = plain_number(n, "gemm_eff_max", limits::kEfficiency, file, prefix);
  c.gemm_half_flops = plain_number(n, "gemm_half_flops", limits::kHalfEfficiencyFlops, file, prefix);  // a count of FLOPs
  c.attn_eff = plain_number(n, "attn_eff", limits::kEfficiency, file, prefix);
  c.mem_eff = plain_number(n, "mem_eff", limits::kEfficiency, file, prefix);
  c.kernel_overhead_s = dimensioned(n, "kernel_overhead", units::parse_duration, limits::kLatency, file, prefix);
  c.link_eff = plain_number(n, "link_eff", limits::kEfficiency, file, prefix);
  c.collective_overhead_s = dimensioned(n, "collective_overhead", units::parse_duration, limits::kLatency, file, prefix);
  if (n["overlap_slowdown"].IsDefined())  // optional: the default when a GPU has no fitted value
    c.overlap_slowdown = plain_number(n, "overlap_slowdown", limits::kFraction, file, prefix);
  return c;
}

// 12 significant digits: 0.45 prints as "0.45" rather than yaml-cpp's 17-digit default.
std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return buf;
}

}  // namespace

const char* to_string(LinkKind k) {
  switch (k) {
    case LinkKind::NvLink: return "nvlink";
    case LinkKind::Pcie: return "pcie";
    case LinkKind::Xgmi: return "xgmi";
  }
  return "?";
}

LinkKind parse_link_kind(const std::string& text) {
  if (text == "nvlink" || text == "NVLink") return LinkKind::NvLink;
  if (text == "pcie" || text == "PCIe") return LinkKind::Pcie;
  if (text == "xgmi" || text == "infinity-fabric") return LinkKind::Xgmi;
  throw std::invalid_argument("unknown link kind '" + text + "' (known: nvlink, pcie, xgmi)");
}

double GpuSpec::peak_for(const std::string& dtype) const {
  if (dtype == "fp16") return peak_fp16;
  // A bf16 model on a GPU without bf16 (P100, V100, T4) runs at its fp16 rate (DESIGN.md, GPU catalog).
  if (dtype == "bf16") return has_bf16() ? peak_bf16 : peak_fp16;
  throw std::invalid_argument("unknown dtype '" + dtype + "' (known: bf16, fp16)");
}

void GpuCatalog::add(GpuSpec spec) {
  const std::string name = spec.name;
  if (specs_.count(name) == 0) order_.push_back(name);
  specs_.insert_or_assign(name, std::move(spec));
}

const GpuSpec& GpuCatalog::at(const std::string& name) const {
  const auto it = specs_.find(name);
  if (it == specs_.end()) throw std::out_of_range("unknown GPU type '" + name + "' (known: " + join(order_) + ")");
  return it->second;
}

std::vector<std::string> GpuCatalog::names() const { return order_; }

GpuSpec parse_gpu_entry(const YAML::Node& entry, const std::string& file, const GpuCatalog& known) {
  if (!entry.IsMap()) fail(file, entry, "gpus", "each GPU must be a mapping with name, peaks, memory, ...");
  GpuSpec g;
  g.name = require_scalar(entry, "name", file, "");
  if (g.name.empty()) fail(file, entry["name"], "name", "empty GPU name");
  const std::string p = g.name + ".";
  check_keys(entry,
             {"name", "peak_bf16", "peak_fp16", "memory", "hbm_bandwidth", "default_node", "compute",
              "calibrated_from", "fitted_on", "notes"},
             file, p);
  if (entry["peak_bf16"].IsDefined()) g.peak_bf16 = dimensioned(entry, "peak_bf16", units::parse_flops_rate, limits::kFlopsRate, file, p);
  g.peak_fp16 = dimensioned(entry, "peak_fp16", units::parse_flops_rate, limits::kFlopsRate, file, p);
  g.memory_bytes = dimensioned(entry, "memory", units::parse_bytes, limits::kMemoryBytes, file, p);
  g.hbm_bw = dimensioned(entry, "hbm_bandwidth", units::parse_bandwidth, limits::kBandwidth, file, p);
  if (g.peak_fp16 <= 0) fail(file, entry["peak_fp16"], p + "peak_fp16", "must be positive");
  if (g.memory_bytes <= 0) fail(file, entry["memory"], p + "memory", "must be positive");
  if (g.hbm_bw <= 0) fail(file, entry["hbm_bandwidth"], p + "hbm_bandwidth", "must be positive");
  g.node = parse_default_node(require_map(entry, "default_node", file, p), file, p + "default_node.");
  if (entry["calibrated_from"].IsDefined()) g.calibrated_from = require_scalar(entry, "calibrated_from", file, p);
  if (g.calibrated_from == g.name) g.calibrated_from.clear();  // "calibrated from itself" = measured
  if (const YAML::Node f = entry["fitted_on"]; f.IsDefined()) {
    if (!f.IsSequence() || f.size() == 0)
      fail(file, f, p + "fitted_on", "expected a non-empty list of source ids, e.g. [LAMBDA_V1, DLE_TXL]");
    if (g.calibrated_from.empty())
      fail(file, f, p + "fitted_on", "needs `calibrated_from:` (the GPU the other constants come from)");
    for (const YAML::Node& s : f) {
      if (!s.IsScalar() || s.Scalar().empty()) fail(file, s, p + "fitted_on", "each entry must be a source id");
      g.fitted_on.push_back(s.Scalar());
    }
  }
  if (entry["compute"].IsDefined()) {
    g.compute = parse_compute(require_map(entry, "compute", file, p), file, p + "compute.");
  } else if (!g.calibrated_from.empty() && known.contains(g.calibrated_from)) {
    g.compute = known.at(g.calibrated_from).compute;  // extrapolated: same efficiencies as its source
  } else {
    fail(file, entry, p + "compute",
         "missing field (or give `calibrated_from:` a GPU already in the catalog to copy its constants)");
  }
  return g;
}

void emit_gpu_entry(YAML::Emitter& out, const GpuSpec& g) {
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << g.name;
  if (g.has_bf16()) out << YAML::Key << "peak_bf16" << YAML::Value << units::format_flops_rate(g.peak_bf16);
  out << YAML::Key << "peak_fp16" << YAML::Value << units::format_flops_rate(g.peak_fp16);
  out << YAML::Key << "memory" << YAML::Value << units::format_bytes(g.memory_bytes);
  out << YAML::Key << "hbm_bandwidth" << YAML::Value << units::format_bandwidth(g.hbm_bw);
  out << YAML::Key << "default_node" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "gpus_per_node" << YAML::Value << g.node.gpus_per_node;
  out << YAML::Key << "intra_node" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "kind"
      << YAML::Value << to_string(g.node.intra_kind) << YAML::Key << "bandwidth" << YAML::Value
      << units::format_bandwidth(g.node.intra_bw) << YAML::EndMap;
  out << YAML::Key << "nic" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "count"
      << YAML::Value << g.node.nics << YAML::Key << "bandwidth" << YAML::Value
      << units::format_bandwidth(g.node.nic_bw) << YAML::EndMap;
  out << YAML::EndMap;
  out << YAML::Key << "compute" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "gemm_eff_max" << YAML::Value << number_text(g.compute.gemm_eff_max);
  out << YAML::Key << "gemm_half_flops" << YAML::Value << number_text(g.compute.gemm_half_flops);
  out << YAML::Key << "attn_eff" << YAML::Value << number_text(g.compute.attn_eff);
  out << YAML::Key << "mem_eff" << YAML::Value << number_text(g.compute.mem_eff);
  out << YAML::Key << "kernel_overhead" << YAML::Value << units::format_duration(g.compute.kernel_overhead_s);
  out << YAML::Key << "link_eff" << YAML::Value << number_text(g.compute.link_eff);
  out << YAML::Key << "collective_overhead" << YAML::Value << units::format_duration(g.compute.collective_overhead_s);
  out << YAML::Key << "overlap_slowdown" << YAML::Value << number_text(g.compute.overlap_slowdown);
  out << YAML::EndMap;
  if (!g.calibrated_from.empty()) out << YAML::Key << "calibrated_from" << YAML::Value << g.calibrated_from;
  if (!g.fitted_on.empty()) {
    out << YAML::Key << "fitted_on" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const std::string& s : g.fitted_on) out << s;
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
}

GpuCatalog GpuCatalog::load(const std::string& path) {
  const YAML::Node root = yaml_fields::load_file(path, "GPU catalog");
  if (!root.IsMap()) throw InputError(path, "expected a mapping with `version: 1` and `gpus:`");
  check_keys(root, {"version", "gpus"}, path, "");
  if (root["version"].IsDefined() && whole_number(root, "version", limits::kFormatVersion, path, "") != 1)
    fail(path, root["version"], "version", "unsupported version (this program reads version 1)");
  const YAML::Node gpus = root["gpus"];
  if (!gpus.IsDefined()) fail(path, root, "gpus", "missing field");
  if (!gpus.IsSequence()) fail(path, gpus, "gpus", "expected a list of GPU entries");

  GpuCatalog cat;
  cat.path_ = path;
  std::map<std::string, YAML::Node> entry_of;
  for (const YAML::Node& entry : gpus) {
    GpuSpec spec = parse_gpu_entry(entry, path, cat);
    const auto first = entry_of.find(spec.name);
    if (first != entry_of.end())
      fail(path, entry["name"], "name",
           "duplicate GPU '" + spec.name + "' (first defined at line " +
               std::to_string(first->second.Mark().line + 1) + ")");
    entry_of.emplace(spec.name, entry);
    cat.add(std::move(spec));
  }
  for (const std::string& name : cat.order_) {
    const GpuSpec& g = cat.at(name);
    if (!g.calibrated_from.empty() && !cat.contains(g.calibrated_from))
      fail(path, entry_of.at(name)["calibrated_from"], name + ".calibrated_from",
           "unknown GPU '" + g.calibrated_from + "' (known: " + join(cat.order_) + ")");
  }
  return cat;
}

std::string compute_provenance(const GpuSpec& g) {
  if (g.calibrated_from.empty()) return "calibrated on its own measurements";
  if (!g.fitted_on.empty())
    return "fitted on " + join(g.fitted_on) + " (tensor-core efficiency; rest from " + g.calibrated_from + ")";
  // The rule of extrapolate_constants (sim/exec/calibration.h).
  return "extrapolated from " + g.calibrated_from + " (same efficiencies, GEMM half-size x peak ratio)";
}

std::string configs_dir() {
  const char* env = std::getenv("ARACHNE_CONFIGS");
  if (env != nullptr && *env != '\0') return env;
  return std::string(ARACHNE_SOURCE_DIR) + "/configs";
}

GpuCatalog GpuCatalog::load_default() { return load(configs_dir() + "/gpus.yaml"); }

}  // namespace arachne
