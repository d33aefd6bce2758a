// Model description (configs/models/*.yaml) and loader.
#pragma once
#include <optional>
#include <string>

namespace arachne {

enum class FfnKind { Gelu, Swiglu };

// How the attention core runs. Unfused: Megatron's kernels materialise the b·a·s² score matrix (softmax,
// dropout), as in the GPT-3-era papers and Korthikanti et al. 2022. Flash: one fused FlashAttention-2
// kernel that keeps no score matrix in memory (sim/model/flash_attention.h).
enum class Attention { Unfused, Flash };

struct MoeConfig {
  int experts = 0;
  int top_k = 1;
  int every = 1;            // an MoE layer every `every` layers (1 = all)
  int first_dense = 0;      // leading dense layers
  long expert_ffn_hidden = 0;
  int shared_experts = 0;
  double capacity_factor = 1.0;
  double routing_skew = 0.0;
};

struct ModelConfig {
  std::string name;
  std::string source;  // path it was read from
  int layers = 0;
  long hidden = 0;
  int heads = 0;
  int kv_heads = 0;      // default heads
  long ffn_hidden = 0;   // default 4*hidden
  FfnKind ffn_kind = FfnKind::Gelu;
  Attention attention = Attention::Unfused;
  long seq_len = 0;
  long vocab = 0;
  std::string dtype = "bf16";  // bf16 | fp16
  long global_batch = 0;
  std::optional<MoeConfig> moe;

  // GPT-style (gelu) models: linear biases, LayerNorm, learned position embeddings, dropout, and the head
  // tied to the word embedding (Brown et al. 2020; Megatron GPT). Llama-style (swiglu): no biases, RMSNorm,
  // rotary positions, no dropout, untied head (Touvron et al. 2023).
  bool gpt_style() const { return ffn_kind == FfnKind::Gelu; }
  bool tied_embeddings() const { return gpt_style(); }
  long head_dim() const { return heads > 0 ? hidden / heads : 0; }

  // MoE layers: Megatron-Core's moe_layer_freq after `first_dense` leading dense layers (layer
  // first_dense is MoE, then every `every`-th).
  bool is_moe_layer(int layer) const;
  double parameters() const;  // total parameter count
  std::string to_yaml() const;
};

// "flash" | "unfused" (the YAML spelling) and back; nullopt for any other text.
const char* attention_name(Attention a);
std::optional<Attention> parse_attention(const std::string& text);

// By path, or by bundled name (configs/models/<name>.yaml). Throws InputError (file:line: field).
ModelConfig load_model(const std::string& name_or_path);
ModelConfig parse_model_yaml(const std::string& path);

}  // namespace arachne
