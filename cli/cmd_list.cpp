// `arachne list gpus|models|planners|formats`: what this build knows about, as plain-text tables.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "planner/registry.h"
#include "sim/hw/gpu.h"
#include "sim/io/input_error.h"
#include "sim/model/model.h"

namespace arachne::cli {
namespace {

const char* kListHelp = R"(arachne list - show what this build knows about

Usage:
  arachne list gpus       the GPU catalog (configs/gpus.yaml): dense peaks, memory, HBM bandwidth, the
                          default node used when a cluster names the GPU without link details, and whether
                          its compute model is calibrated on measurements or extrapolated from another GPU
  arachne list models     the bundled models (configs/models/*.yaml), usable by name with --model
  arachne list planners   the planners compiled into this build, usable with 'arachne plan --planner'
  arachne list formats    the availability-trace formats accepted by --trace-format

Example:
  arachne list gpus
)";

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Prints rows as left-aligned columns separated by two spaces.
void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], r[c].size());
    }
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

int list_gpus() {
  const GpuCatalog catalog = GpuCatalog::load_default();
  std::vector<std::vector<std::string>> rows = {{"GPU", "bf16 TFLOP/s", "fp16 TFLOP/s", "memory GB", "HBM GB/s",
                                                 "default node", "compute model"}};
  for (const auto& name : catalog.names()) {
    const GpuSpec& g = catalog.at(name);
    const NodeDefaults& n = g.node;
    // Units as published: TFLOP/s = 1e12 FLOP/s, GB = 1e9 bytes, NICs in Gbit/s (1 byte = 8 bit).
    const std::string node = std::to_string(n.gpus_per_node) + " GPUs, " + to_string(n.intra_kind) + " " +
                             fixed(n.intra_bw / 1e9, 0) + " GB/s, " + std::to_string(n.nics) + " x " +
                             fixed(n.nic_bw * 8 / 1e9, 0) + " Gbit/s NIC";
    rows.push_back({name, g.has_bf16() ? fixed(g.peak_bf16 / 1e12, 1) : "- (fp16 rate)", fixed(g.peak_fp16 / 1e12, 1),
                    fixed(g.memory_bytes / 1e9, 0), fixed(g.hbm_bw / 1e9, 0), node,
                    compute_provenance(g)});
  }
  print_table(rows);
  std::cout << "\n(catalog: " << catalog.source_path() << ")\n";
  return kExitOk;
}

int list_models() {
  const std::filesystem::path dir = std::filesystem::path(configs_dir()) / "models";
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  if (ec) return input_error(dir.string(), "cannot read the bundled models directory: " + ec.message());
  std::sort(files.begin(), files.end());
  std::vector<std::vector<std::string>> rows = {
      {"model", "layers", "hidden", "heads", "ffn", "attention", "seq", "params", "dtype", "global batch", "MoE"}};
  for (const auto& f : files) {
    try {
      const ModelConfig m = load_model(f.string());
      const std::string moe = m.moe ? std::to_string(m.moe->experts) + " experts, top-" + std::to_string(m.moe->top_k)
                                    : "-";
      rows.push_back({m.name, std::to_string(m.layers), std::to_string(m.hidden),
                      std::to_string(m.heads) + (m.kv_heads != m.heads ? " (kv " + std::to_string(m.kv_heads) + ")" : ""),
                      std::to_string(m.ffn_hidden) + (m.ffn_kind == FfnKind::Swiglu ? " swiglu" : " gelu"),
                      attention_name(m.attention), std::to_string(m.seq_len), fixed(m.parameters() / 1e9, 2) + " B", m.dtype,
                      std::to_string(m.global_batch), moe});
    } catch (const InputError& e) {
      std::cerr << "warning: " << e.where() << ": " << e.reason() << " (skipped)\n";
    }
  }
  print_table(rows);
  std::cout << "\n(from " << dir.string() << "; use the name with --model)\n";
  return kExitOk;
}

int list_planners() {
  const std::vector<std::string> names = planner::registered_planner_names();
  std::vector<std::vector<std::string>> rows = {{"planner", "what it does"}};
  for (const auto& n : names) rows.push_back({n, planner::planner_description(n)});
  print_table(rows);
  std::cout << "\n(sources and simplifications: planner/baselines/README.md and each planner's header)\n";
  if (names.empty()) std::cerr << "note: no planners are registered in this build yet\n";
  return kExitOk;
}

int list_formats() {
  print_table({{"format", "--trace accepts"},
               {"native", "CSV with header time_s,node,gpu_type,gpus (traces/README.md)"},
               {"alibaba-gpu-v2023", "Alibaba cluster-trace-gpu-v2023 pod list (node list found beside it)"},
               {"skypilot", "SkyPilot spot-availability trace"},
               {"sailor-csv", "Sailor availability trace, CSV"},
               {"sailor-json", "Sailor availability trace, JSON"}});
  std::cout << "\n(default: detected from the file)\n";
  return kExitOk;
}

}  // namespace

int run_list(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kListHelp;
    return kExitOk;
  }
  if (args.empty()) return input_error("arachne list", "what to list? gpus, models, planners or formats");
  if (args.size() > 1) return input_error(args[1], "unexpected argument ('arachne list' takes one word)");
  try {
    if (args[0] == "gpus") return list_gpus();
    if (args[0] == "models") return list_models();
    if (args[0] == "planners") return list_planners();
    if (args[0] == "formats") return list_formats();
  } catch (const InputError& e) {
    return input_error(e.where(), e.reason());
  }
  return input_error(args[0], "unknown list (expected gpus, models, planners or formats)");
}

}  // namespace arachne::cli
