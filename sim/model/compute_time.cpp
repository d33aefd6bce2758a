// Roofline kernel time with size-dependent GEMM efficiency (see compute_time.h for the model and its
// sources). Constants per GPU type come from configs/gpus.yaml (GpuSpec::compute).
#include "sim/model/compute_time.h"

#include "sim/model/flash_attention.h"

#include <algorithm>
#include <cmath>

namespace arachne {

double gemm_efficiency(double flops, const ComputeConstants& c) {
  // Saturating curve: small GEMMs under-fill the SMs and are bound by a fixed fill/drain time (Calculon,
  // Isaev et al. SC'23, §IV efficiency tables); eff -> gemm_eff_max as flops grow, half of it at
  // gemm_half_flops. Exponential saturation: a GEMM a few times larger than gemm_half_flops fills the GPU,
  // as measured GEMM efficiency curves flatten (NVIDIA "Matrix Multiplication Background" guide), so the
  // asymptote is identifiable from mid-sized GEMMs.
  if (flops <= 0) return 0.0;
  return c.gemm_eff_max * -std::expm1(-flops * 0.6931471805599453 / c.gemm_half_flops);
}

double op_time_s(const OpCost& op, const GpuSpec& gpu, const std::string& dtype) {
  if (op.flops <= 0 && op.bytes <= 0) return 0.0;  // no kernel launched
  const ComputeConstants& c = gpu.compute;
  // Memory roofline: achieved HBM bandwidth = hbm_bw · mem_eff.
  const double memory_s = op.bytes > 0 ? op.bytes / (gpu.hbm_bw * c.mem_eff) : 0.0;
  double compute_s = 0.0;
  if (op.flops > 0 && op.cls != OpClass::Memory) {
    // bf16 on a GPU without bf16 runs at its fp16 rate (GpuSpec::peak_for).
    const double peak = gpu.peak_for(dtype);
    if (is_flash_attention(op.cls)) {
      compute_s = flash_attention_compute_s(op, peak);
    } else {
      const double eff = op.cls == OpClass::Gemm ? gemm_efficiency(op.flops, c) : c.attn_eff;
      compute_s = op.flops / (peak * eff);
    }
  }
  // Memory-bound kernels are priced on bandwidth alone (their FLOPs are ignored).
  return c.kernel_overhead_s + std::max(compute_s, memory_s);
}

double ops_time_s(const std::vector<OpCost>& ops, const GpuSpec& gpu, const std::string& dtype) {
  double total = 0.0;
  for (const OpCost& op : ops) total += op_time_s(op, gpu, dtype);
  return total;
}

}  // namespace arachne
