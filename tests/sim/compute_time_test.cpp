// Compute time: roofline with size-dependent GEMM efficiency (compute_time.h).
#include <gtest/gtest.h>

#include <vector>

#include "sim/model/compute_time.h"

namespace arachne {
namespace {

GpuSpec a100_like() {
  // Published A100-80 SXM figures (shared/data/README.md): 312 TFLOP/s bf16/fp16, 2,039 GB/s HBM.
  GpuSpec g;
  g.name = "A100-test";
  g.peak_bf16 = 312e12;
  g.peak_fp16 = 312e12;
  g.memory_bytes = 80e9;
  g.hbm_bw = 2039e9;
  return g;  // default ComputeConstants
}

GpuSpec v100_like() {
  // V100 SXM2: 125 TFLOP/s fp16, no bf16.
  GpuSpec g = a100_like();
  g.name = "V100-test";
  g.peak_bf16 = 0;
  g.peak_fp16 = 125e12;
  g.hbm_bw = 900e9;
  return g;
}

OpCost square_gemm(double n) {
  // n x n times n x n: 2n³ FLOPs, three n² matrices of 2-byte elements.
  return OpCost{OpClass::Gemm, 2 * n * n * n, 3 * n * n * 2};
}

TEST(ModelComputeTime, BiggerGemmsReachHigherEfficiencyButNeverAboveTheMaximum) {
  const GpuSpec g = a100_like();
  double previous = 0;
  for (double n : {256.0, 1024.0, 4096.0, 16384.0}) {
    const OpCost op = square_gemm(n);
    const double achieved = op.flops / op_time_s(op, g, "bf16");  // FLOP/s
    EXPECT_GT(achieved, previous) << "n=" << n;
    EXPECT_LE(achieved, g.compute.gemm_eff_max * g.peak_bf16) << "n=" << n;
    previous = achieved;
    EXPECT_LE(gemm_efficiency(op.flops, g.compute), g.compute.gemm_eff_max);
  }
  // Half of the maximum at gemm_half_flops (the constant's definition).
  EXPECT_DOUBLE_EQ(gemm_efficiency(g.compute.gemm_half_flops, g.compute), g.compute.gemm_eff_max / 2);
}

TEST(ModelComputeTime, TimeIsMonotoneInWork) {
  const GpuSpec g = a100_like();
  double previous = 0;
  for (double f = 1e6; f < 1e14; f *= 3) {
    const double t = op_time_s(OpCost{OpClass::Gemm, f, 0}, g, "bf16");
    EXPECT_GT(t, previous) << "flops=" << f;
    previous = t;
  }
  previous = 0;
  for (double b = 1e3; b < 1e11; b *= 3) {
    const double t = op_time_s(OpCost{OpClass::Memory, 0, b}, g, "bf16");
    EXPECT_GT(t, previous) << "bytes=" << b;
    previous = t;
  }
}

TEST(ModelComputeTime, DoublePeakHalvesALargeGemm) {
  // A 16k x 16k x 16k GEMM (8.8 TFLOP) takes tens of ms; the 5 us launch overhead and the memory roofline
  // are far below, so 2x peak must give 2x speed within 0.1%.
  GpuSpec fast = a100_like();
  fast.peak_bf16 *= 2;
  fast.peak_fp16 *= 2;
  const OpCost op = square_gemm(16384);
  const double ratio = op_time_s(op, a100_like(), "bf16") / op_time_s(op, fast, "bf16");
  EXPECT_NEAR(ratio, 2.0, 0.002);
}

TEST(ModelComputeTime, MemoryBoundKernelsArePricedOnBandwidth) {
  // t = overhead + bytes / (hbm_bw · mem_eff), FLOPs ignored.
  const GpuSpec g = a100_like();
  const double bytes = 1e9;
  const double expected = g.compute.kernel_overhead_s + bytes / (g.hbm_bw * g.compute.mem_eff);
  EXPECT_DOUBLE_EQ(op_time_s(OpCost{OpClass::Memory, 1e12, bytes}, g, "bf16"), expected);
  // A GEMM with almost no FLOPs but large operands is memory-bound too (roofline).
  const OpCost thin{OpClass::Gemm, 1e3, bytes};
  EXPECT_DOUBLE_EQ(op_time_s(thin, g, "bf16"), expected);
}

TEST(ModelComputeTime, AttentionUsesItsOwnEfficiency) {
  const GpuSpec g = a100_like();
  const double f = 1e12;
  EXPECT_DOUBLE_EQ(op_time_s(OpCost{OpClass::Attention, f, 0}, g, "bf16"),
                   g.compute.kernel_overhead_s + f / (g.peak_bf16 * g.compute.attn_eff));
}

TEST(ModelComputeTime, Bf16OnV100RunsAtTheFp16Rate) {
  // DESIGN.md: a bf16 model on a GPU without bf16 runs at its fp16 rate.
  const GpuSpec g = v100_like();
  const OpCost op = square_gemm(8192);
  EXPECT_DOUBLE_EQ(op_time_s(op, g, "bf16"), op_time_s(op, g, "fp16"));
  EXPECT_GT(op_time_s(op, g, "bf16"), op.flops / (g.peak_fp16 * g.compute.gemm_eff_max));
}

TEST(ModelComputeTime, OpsTimeSumsKernels) {
  const GpuSpec g = a100_like();
  const std::vector<OpCost> ops{square_gemm(4096), OpCost{OpClass::Memory, 0, 1e8}, OpCost{OpClass::Attention, 1e11, 1e7}};
  double sum = 0;
  for (const OpCost& op : ops) sum += op_time_s(op, g, "bf16");
  EXPECT_DOUBLE_EQ(ops_time_s(ops, g, "bf16"), sum);
  EXPECT_DOUBLE_EQ(ops_time_s({}, g, "bf16"), 0.0);
}

}  // namespace
}  // namespace arachne
