// `attention: flash` (FlashAttention-2): the s² score matrix leaves activation memory and HBM traffic,
// FLOPs stay the model's, the fused kernel is not slower than the unfused core, selective recompute has
// nothing left to recompute, GPT-3-era configs keep their meaning (default unfused), and the field is
// parsed, echoed and listed like every other model field.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/hw/gpu.h"
#include "sim/model/compute_time.h"
#include "sim/model/flash_attention.h"
#include "sim/model/memory.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

namespace fs = std::filesystem;

ModelConfig with_attention(ModelConfig m, Attention a) {
  m.attention = a;
  return m;
}

double sum_flops(const std::vector<OpCost>& ops) {
  double f = 0;
  for (const OpCost& o : ops) f += o.flops;
  return f;
}

// The attention core's forward kernels of layer 0: everything between the QKV projection (op 1, after
// the input norm) and the output projection (the next GEMM).
std::vector<OpCost> attention_ops(const ModelConfig& m, const ShardSpec& sh) {
  const std::vector<OpCost> all = layer_forward_ops(m, 0, sh);
  std::vector<OpCost> core;
  for (size_t i = 2; i < all.size() && all[i].cls != OpClass::Gemm; ++i) core.push_back(all[i]);
  return core;
}

TEST(FlashAttentionMemory, Llama7bAt4096LosesExactlyTheScoreMatrixTerm) {
  // Korthikanti et al. 2022 §4.1: per layer and micro-batch, the attention core keeps the softmax output
  // 2·a·s²·b bytes (Llama trains without attention dropout, so no dropout mask or output). FlashAttention
  // keeps none of it, only its fp32 log-sum-exp, 4·a·s·b bytes. Llama-2-7B: a = 32 heads, s = 4096.
  const ModelConfig flash = load_model("llama2-7b");
  ASSERT_EQ(flash.attention, Attention::Flash) << "the bundled Llama config says flash";
  ASSERT_EQ(flash.heads, 32);
  ASSERT_EQ(flash.seq_len, 4096);
  const ModelConfig unfused = with_attention(flash, Attention::Unfused);
  const double a = 32, s = 4096;
  for (const double b : {1.0, 2.0}) {
    for (const ShardSpec sh : {ShardSpec{1, false, b}, ShardSpec{2, false, b}, ShardSpec{4, true, b}}) {
      SCOPED_TRACE("b=" + std::to_string(b) + " tp=" + std::to_string(sh.tp) + " sp=" + std::to_string(sh.sequence_parallel));
      const double t = sh.tp;
      const double score_term = 2.0 * a * s * s * b / t;  // heads split over TP, with or without SP
      const double lse = 4.0 * a * s * b / t;
      const double u = layer_activation_bytes(unfused, 0, sh, Recompute::None);
      const double f = layer_activation_bytes(flash, 0, sh, Recompute::None);
      EXPECT_DOUBLE_EQ(u - score_term + lse, f);
      // The s² term is the bulk of the saving: 1 GiB per layer at b = 1, t = 1.
      EXPECT_GT((u - f) / score_term, 0.999);
    }
  }
}

TEST(FlashAttentionMemory, GptStyleLosesTheWholeFiveAsSquaredTerm) {
  // With attention dropout (GPT) the s² term of Korthikanti's sbh(34 + 5as/h) is 5·a·s²·b.
  ModelConfig unfused = load_model("gpt3-1.3b");
  ASSERT_EQ(unfused.attention, Attention::Unfused);
  const ModelConfig flash = with_attention(unfused, Attention::Flash);
  const double a = unfused.heads, s = static_cast<double>(unfused.seq_len), b = 1;
  const ShardSpec sh{1, false, b};
  EXPECT_DOUBLE_EQ(layer_activation_bytes(unfused, 0, sh, Recompute::None) - 5.0 * a * s * s * b + 4.0 * a * s * b,
                   layer_activation_bytes(flash, 0, sh, Recompute::None));
}

TEST(FlashAttentionMemory, SelectiveRecomputeHasNothingLeftToRecompute) {
  const ModelConfig flash = load_model("llama2-7b");
  const ModelConfig unfused = with_attention(flash, Attention::Unfused);
  const ShardSpec sh{2, true, 1};
  // Flash: selective stores what no recompute stores, and re-runs no kernel.
  EXPECT_EQ(layer_activation_bytes(flash, 0, sh, Recompute::Selective),
            layer_activation_bytes(flash, 0, sh, Recompute::None));
  EXPECT_TRUE(layer_recompute_ops(flash, 0, sh, Recompute::Selective).empty());
  // Unfused: selective drops exactly the score-matrix term (2as²b/t here) and recomputes the core's FLOPs.
  const double a = 32, s = 4096, t = 2;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(unfused, 0, sh, Recompute::None) - 2.0 * a * s * s / t,
                   layer_activation_bytes(unfused, 0, sh, Recompute::Selective));
  EXPECT_DOUBLE_EQ(sum_flops(layer_recompute_ops(unfused, 0, sh, Recompute::Selective)),
                   4.0 * s * s * static_cast<double>(unfused.hidden) / t);
  // Full recompute keeps only the layer input either way.
  EXPECT_EQ(layer_activation_bytes(flash, 0, sh, Recompute::Full),
            layer_activation_bytes(unfused, 0, sh, Recompute::Full));
}

TEST(FlashAttentionCosts, FlopsAreTheModelsAndTrafficHasNoSquareTerm) {
  const ModelConfig flash = load_model("llama2-7b");
  const ModelConfig unfused = with_attention(flash, Attention::Unfused);
  const ShardSpec sh{2, false, 1};
  // Same FLOPs forward and backward (MFU and TFLOP/s are counted from them).
  const auto fwd_f = layer_forward_ops(flash, 0, sh), fwd_u = layer_forward_ops(unfused, 0, sh);
  EXPECT_NEAR(sum_flops(fwd_f), sum_flops(fwd_u), 1e-12 * sum_flops(fwd_u));
  EXPECT_NEAR(sum_flops(backward_of(fwd_f)), sum_flops(backward_of(fwd_u)), 1e-12 * sum_flops(backward_of(fwd_u)));
  // Doubling the sequence: the flash kernel's FLOPs grow 4x (s²), its HBM bytes exactly 2x (no s² term);
  // the unfused core's bytes grow faster than 2x because it writes and reads the score matrix.
  ModelConfig longer = flash;
  longer.seq_len *= 2;
  const OpCost k1 = flash_attention_forward_op(flash, sh), k2 = flash_attention_forward_op(longer, sh);
  EXPECT_DOUBLE_EQ(k2.flops, 4.0 * k1.flops);
  EXPECT_DOUBLE_EQ(k2.bytes, 2.0 * k1.bytes);
  double u1 = 0, u2 = 0;
  for (const OpCost& o : attention_ops(unfused, sh)) u1 += o.bytes;
  for (const OpCost& o : attention_ops(with_attention(longer, Attention::Unfused), sh)) u2 += o.bytes;
  EXPECT_GT(u2, 3.5 * u1);
  // One fused kernel per direction replaces the unfused core's matmuls and memory-bound kernels.
  ASSERT_EQ(attention_ops(flash, sh).size(), 1u);
  EXPECT_EQ(attention_ops(flash, sh)[0].cls, OpClass::FlashAttentionForward);
}

TEST(FlashAttentionCosts, NotSlowerThanUnfusedAtLongSequenceOnEveryGpu) {
  // At s >= 2048 the unfused core pays its matmuls plus a memory-bound pass over the s² scores; the fused
  // kernel skips the masked half and the s² traffic. Forward + backward, every GPU in the catalog.
  const GpuCatalog catalog = GpuCatalog::load_default();
  for (const long seq : {2048L, 4096L, 8192L, 16384L}) {
    ModelConfig flash = load_model("llama2-7b");
    flash.seq_len = seq;
    const ModelConfig unfused = with_attention(flash, Attention::Unfused);
    const ShardSpec sh{1, false, 1};
    for (const std::string& name : catalog.names()) {
      SCOPED_TRACE(name + " seq " + std::to_string(seq));
      const GpuSpec& g = catalog.at(name);
      const auto time = [&](const ModelConfig& m) {
        const std::vector<OpCost> core = attention_ops(m, sh);
        return ops_time_s(core, g, m.dtype) + ops_time_s(backward_of(core), g, m.dtype);
      };
      EXPECT_LT(time(flash), time(unfused));
    }
  }
}

TEST(FlashAttentionCosts, KernelRunsAtFlashAttention2sPublishedFractionOfPeak) {
  // Dao 2023 §1: up to 73 % (forward) and 63 % (backward) of the A100's peak, FLOPs counted as its
  // benchmarks count them (§4.1): causal forward 4·s²·d·a·b / 2, backward 2.5x that. So on the A100
  // (312 TFLOP/s bf16 dense) the causal forward of Llama-2-7B's attention, b = 1, takes
  // 2·s²·h / (0.73·312e12) and the backward 2.5x as many FLOPs at 63 %.
  const GpuCatalog catalog = GpuCatalog::load_default();
  const GpuSpec& a100 = catalog.at("A100-80");
  ASSERT_DOUBLE_EQ(a100.peak_for("bf16"), 312e12);
  const ModelConfig m = load_model("llama2-7b");
  const double s = 4096, h = 4096;
  const OpCost fwd = flash_attention_forward_op(m, ShardSpec{1, false, 1});
  const double fwd_expected = 2.0 * s * s * h / (0.73 * 312e12);
  const double bwd_expected = 2.5 * 2.0 * s * s * h / (0.63 * 312e12);
  EXPECT_NEAR(flash_attention_compute_s(fwd, 312e12), fwd_expected, 1e-12 * fwd_expected);
  EXPECT_NEAR(flash_attention_compute_s(flash_attention_backward_op(fwd), 312e12), bwd_expected, 1e-12 * bwd_expected);
  // The kernel is compute-bound: the roofline time is the compute term plus the launch overhead.
  EXPECT_NEAR(op_time_s(fwd, a100, "bf16"), fwd_expected + a100.compute.kernel_overhead_s, 1e-9 * fwd_expected);
}

// ---------------------------------------------------------------- the field end to end (CLI)

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

CliRun arachne(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("arachne_flash_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cmd = "cd '" + test::configs() + "/..' && '" + std::string(ARACHNE_BINARY) + "' " + args +
                          " >'" + (dir / "out").string() + "' 2>'" + (dir / "err").string() + "'";
  const int status = std::system(cmd.c_str());
  CliRun r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "out"), slurp(dir / "err")};
  fs::remove_all(dir);
  return r;
}

// The bundled model's YAML with one more line appended, in a temporary file.
std::string bundled_plus(const std::string& model, const std::string& line) {
  const std::string tag = line.substr(line.find(' ') + 1);
  const fs::path p =
      fs::temp_directory_path() / ("arachne_flash_" + model + "_" + tag + "_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(p) << slurp(test::configs() + "/models/" + model + ".yaml") << line << "\n";
  return p.string();
}

TEST(FlashAttentionField, Gpt3ConfigsMeanUnfusedAndSimulateAsBefore) {
  for (const char* name : {"gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b"})
    EXPECT_EQ(load_model(name).attention, Attention::Unfused) << name;
  for (const char* name : {"llama2-7b", "llama2-13b", "llama2-70b", "mixtral-8x7b", "deepseek-moe-16b"})
    EXPECT_EQ(load_model(name).attention, Attention::Flash) << name;

  // gpt3-1.3b as bundled (no attention field) and with an explicit `attention: unfused` simulate
  // identically; `attention: flash` does not (the field reaches the simulator).
  const std::string plan = "--cluster configs/clusters/tiny-a100-2x4.yaml --tp 2 --pp 2 --dp 2 --micro-batch 4 --json";
  const CliRun bundled = arachne("simulate --model gpt3-1.3b " + plan);
  const std::string unfused_path = bundled_plus("gpt3-1.3b", "attention: unfused");
  const std::string flash_path = bundled_plus("gpt3-1.3b", "attention: flash");
  const CliRun unfused = arachne("simulate --model '" + unfused_path + "' " + plan);
  const CliRun flash = arachne("simulate --model '" + flash_path + "' " + plan);
  fs::remove(unfused_path);
  fs::remove(flash_path);
  ASSERT_EQ(bundled.exit_code, 0) << bundled.err;
  ASSERT_EQ(unfused.exit_code, 0) << unfused.err;
  ASSERT_EQ(flash.exit_code, 0) << flash.err;
  const auto j0 = nlohmann::json::parse(bundled.out), j1 = nlohmann::json::parse(unfused.out),
             j2 = nlohmann::json::parse(flash.out);
  for (const char* key : {"iteration_time_s", "peak_memory_gib", "memory_gib", "breakdown_s", "tflops_per_gpu"})
    EXPECT_EQ(j0[key], j1[key]) << key;
  EXPECT_LT(j2["iteration_time_s"].get<double>(), j0["iteration_time_s"].get<double>());
  EXPECT_LT(j2["memory_gib"]["activations"].get<double>(), j0["memory_gib"]["activations"].get<double>());
  // Same model FLOPs: TFLOP/s per GPU x iteration time is the FLOPs per GPU, whichever kernel runs.
  const double flops0 = j0["tflops_per_gpu"].get<double>() * j0["iteration_time_s"].get<double>();
  const double flops2 = j2["tflops_per_gpu"].get<double>() * j2["iteration_time_s"].get<double>();
  EXPECT_NEAR(flops2, flops0, 1e-9 * flops0);
}

TEST(FlashAttentionField, WrittenBackWithTheModel) {
  // Result files carry the model as YAML (ModelConfig::to_yaml); the field survives the round trip.
  for (const char* name : {"llama2-7b", "gpt3-1.3b"}) {
    const ModelConfig a = load_model(name);
    EXPECT_NE(a.to_yaml().find(std::string("attention: ") + attention_name(a.attention)), std::string::npos);
    const fs::path p = fs::temp_directory_path() / ("arachne_flash_roundtrip_" + std::to_string(::getpid()) + ".yaml");
    std::ofstream(p) << a.to_yaml();
    EXPECT_EQ(parse_model_yaml(p.string()).attention, a.attention) << name;
    fs::remove(p);
  }
}

TEST(FlashAttentionField, BadValueIsBadInputAtItsLine) {
  const std::string path = bundled_plus("gpt3-1.3b", "attention: fused");
  const int line = [&] {
    std::ifstream in(path);
    std::string l;
    int n = 0;
    while (std::getline(in, l)) ++n;
    return n;
  }();
  const CliRun r = arachne("simulate --model '" + path +
                        "' --cluster configs/clusters/tiny-a100-2x4.yaml --tp 2 --pp 2 --dp 2 --micro-batch 4");
  fs::remove(path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "error: " + path + ":" + std::to_string(line) + ": attention: unknown attention 'fused' (flash|unfused)\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(FlashAttentionField, ListModelsShowsIt) {
  const CliRun r = arachne("list models");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = [&](const std::string& name) {
    const size_t at = r.out.find("\n" + name + " ");
    return at == std::string::npos ? std::string() : r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(r.out.find("attention"), std::string::npos) << r.out;
  EXPECT_NE(row("llama2-7b").find(" flash"), std::string::npos) << row("llama2-7b");
  EXPECT_NE(row("gpt3-175b").find(" unfused"), std::string::npos) << row("gpt3-175b");
}

}  // namespace
}  // namespace arachne
