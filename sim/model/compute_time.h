// Time of a kernel on a GPU: a roofline with size-dependent efficiency (after Calculon, Isaev et al. SC'23,
// and vTrain, Bang et al. MICRO'24, which price kernels by profiled efficiency):
//   t = kernel_overhead + max(flops / (peak · eff(op)), bytes / (hbm_bw · mem_eff))
//   eff(GEMM) = gemm_eff_max · f / (f + gemm_half_flops)   (small GEMMs under-fill the SMs)
//   eff(attention) = attn_eff, memory-bound kernels are priced on bandwidth alone; FlashAttention kernels
//   at FlashAttention-2's published fraction of peak (flash_attention.h).
// The constants are per GPU type in configs/gpus.yaml, fitted by scripts/calibrate.sh.
#pragma once
#include <string>
#include <vector>

#include "sim/hw/gpu.h"
#include "sim/model/layer_costs.h"

namespace arachne {

// Fraction of dense peak a GEMM of `flops` reaches: gemm_eff_max · f / (f + gemm_half_flops), in [0, eff_max).
double gemm_efficiency(double flops, const ComputeConstants& c);
double op_time_s(const OpCost& op, const GpuSpec& gpu, const std::string& dtype);
double ops_time_s(const std::vector<OpCost>& ops, const GpuSpec& gpu, const std::string& dtype);

}  // namespace arachne
