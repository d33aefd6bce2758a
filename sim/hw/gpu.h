// GPU types: published peaks, memory, HBM bandwidth, calibrated compute-model constants, default node.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace YAML {
class Node;
class Emitter;
}  // namespace YAML

namespace arachne {

enum class LinkKind { NvLink, Pcie, Xgmi };
const char* to_string(LinkKind k);  // "nvlink" | "pcie" | "xgmi"
// Inverse of to_string; throws std::invalid_argument naming the accepted kinds.
LinkKind parse_link_kind(const std::string& text);

// Constants of the compute model (sim/model/compute_time.h), fitted by scripts/calibrate.sh from
// shared/data/measured/. GPUs without measurements are scaled from a measured one (see `calibrated_from`).
struct ComputeConstants {
  double gemm_eff_max = 0.75;       // asymptotic fraction of dense peak reached by large GEMMs
  double gemm_half_flops = 2.0e9;   // GEMM FLOPs at which efficiency is half of gemm_eff_max
  double attn_eff = 0.45;           // fraction of peak reached by attention score/context batched matmuls
  double mem_eff = 0.70;            // fraction of HBM bandwidth reached by memory-bound kernels
  double kernel_overhead_s = 5e-6;  // fixed per-kernel launch/synchronisation time
  double link_eff = 1.0;            // achieved fraction of nominal link bandwidth (NVLink/PCIe/NIC)
  double collective_overhead_s = 20e-6;  // software cost of one collective/p2p call (NCCL launch + rendezvous)
};

struct NodeDefaults {
  int gpus_per_node = 8;
  LinkKind intra_kind = LinkKind::NvLink;
  double intra_bw = 300e9;  // bytes/s per direction per GPU
  int nics = 8;
  double nic_bw = 25e9;     // bytes/s per NIC per direction
};

struct GpuSpec {
  std::string name;
  double peak_bf16 = 0;  // FLOP/s, dense; 0 when the GPU has no bf16 (runs bf16 models at its fp16 rate)
  double peak_fp16 = 0;  // FLOP/s, dense
  double memory_bytes = 0;
  double hbm_bw = 0;     // bytes/s
  ComputeConstants compute;
  std::string calibrated_from;  // empty: fitted on its own measurements; else the GPU it is scaled from
  // Non-empty: the tensor-core efficiencies (gemm_eff_max, attn_eff) are this type's own, fitted on these
  // sources of shared/data/measured/published_gpu_types.csv relative to `calibrated_from`
  // (sim/exec/gpu_type_fit.h); the other constants are `calibrated_from`'s, extrapolated.
  std::vector<std::string> fitted_on;
  NodeDefaults node;
  bool has_bf16() const { return peak_bf16 > 0; }
  // Dense peak for the model's dtype ("bf16"|"fp16"); bf16 on a GPU without it uses the fp16 rate.
  double peak_for(const std::string& dtype) const;
};

class GpuCatalog {
 public:
  GpuCatalog() = default;
  // Reads configs/gpus.yaml (format documented in that file). Throws InputError.
  static GpuCatalog load(const std::string& path);
  // The bundled catalog: $ARACHNE_CONFIGS/gpus.yaml or <source>/configs/gpus.yaml.
  static GpuCatalog load_default();
  // Adds a GPU type; a type of the same name is replaced in place (keeps its position in names()).
  void add(GpuSpec spec);
  bool contains(const std::string& name) const { return specs_.count(name) != 0; }
  const GpuSpec& at(const std::string& name) const;  // throws std::out_of_range
  std::vector<std::string> names() const;             // in file order
  const std::string& source_path() const { return path_; }

 private:
  std::map<std::string, GpuSpec> specs_;
  std::vector<std::string> order_;
  std::string path_;
};

// Where a GPU's compute constants come from, for `arachne list gpus`: "calibrated on its own measurements",
// "fitted on SRC, ... (tensor-core efficiency; rest from X)" or "extrapolated from X (rule)".
std::string compute_provenance(const GpuSpec& g);

// One GPU entry in the catalog format (a YAML mapping; see configs/gpus.yaml), as found in gpus.yaml and
// in a cluster file's `gpus:`. Without `compute:`, the constants are copied from the `calibrated_from`
// GPU, looked up in `known`. Errors: InputError(file:line: field, reason) with a 1-based line.
GpuSpec parse_gpu_entry(const YAML::Node& entry, const std::string& file, const GpuCatalog& known);
// Writes `spec` as one catalog entry (block mapping, nested blocks in flow style) into `out`.
void emit_gpu_entry(YAML::Emitter& out, const GpuSpec& spec);

// Directory holding the bundled configs (gpus.yaml, clusters/, models/, plans/):
// $ARACHNE_CONFIGS if set, else the source tree's configs/.
std::string configs_dir();

}  // namespace arachne
