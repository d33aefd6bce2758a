// Model description (configs/models/*.yaml): parsing with file:line errors, bundled-name lookup,
// parameter count and YAML output. Schema in DESIGN.md "Model".
#include "sim/model/model.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <vector>

#include "sim/hw/gpu.h"
#include "sim/io/input_error.h"
#include "sim/io/yaml_fields.h"
#include "sim/io/numbers.h"
#include "sim/model/layer_costs.h"

namespace arachne {

const char* attention_name(Attention a) { return a == Attention::Flash ? "flash" : "unfused"; }

std::optional<Attention> parse_attention(const std::string& text) {
  for (const Attention a : {Attention::Unfused, Attention::Flash})
    if (text == attention_name(a)) return a;
  return std::nullopt;
}

bool ModelConfig::is_moe_layer(int layer) const {
  if (!moe) return false;
  if (layer < moe->first_dense) return false;
  // Megatron-Core's moe_layer_freq: layer i (after the dense prefix) is MoE when i % freq == 0,
  // i.e. the first non-dense layer is MoE (megatron/core/models/gpt/moe_module_specs / transformer_config).
  return (layer - moe->first_dense) % moe->every == 0;
}

double ModelConfig::parameters() const {
  // Unique parameters: every layer at tp = 1, the embeddings, and the head unless it is tied to the
  // word embedding (GPT-style models share one matrix; layer_costs.cpp explains the last-stage copy).
  double p = 0;
  for (int l = 0; l < layers; ++l) p += layer_params_per_rank(*this, l, 1);
  p += embedding_params_per_rank(*this, 1);
  p += head_params_per_rank(*this, 1);
  if (tied_embeddings()) p -= static_cast<double>(vocab) * static_cast<double>(hidden);
  return p;
}

std::string ModelConfig::to_yaml() const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "version" << YAML::Value << 1;
  out << YAML::Key << "name" << YAML::Value << name;
  out << YAML::Key << "layers" << YAML::Value << layers;
  out << YAML::Key << "hidden" << YAML::Value << hidden;
  out << YAML::Key << "heads" << YAML::Value << heads;
  out << YAML::Key << "kv_heads" << YAML::Value << kv_heads;
  out << YAML::Key << "ffn_hidden" << YAML::Value << ffn_hidden;
  out << YAML::Key << "ffn_kind" << YAML::Value << (ffn_kind == FfnKind::Gelu ? "gelu" : "swiglu");
  out << YAML::Key << "attention" << YAML::Value << attention_name(attention);
  out << YAML::Key << "seq_len" << YAML::Value << seq_len;
  out << YAML::Key << "vocab" << YAML::Value << vocab;
  out << YAML::Key << "dtype" << YAML::Value << dtype;
  out << YAML::Key << "global_batch" << YAML::Value << global_batch;
  if (moe) {
    out << YAML::Key << "moe" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "experts" << YAML::Value << moe->experts;
    out << YAML::Key << "top_k" << YAML::Value << moe->top_k;
    out << YAML::Key << "every" << YAML::Value << moe->every;
    out << YAML::Key << "first_dense" << YAML::Value << moe->first_dense;
    out << YAML::Key << "expert_ffn_hidden" << YAML::Value << moe->expert_ffn_hidden;
    out << YAML::Key << "shared_experts" << YAML::Value << moe->shared_experts;
    out << YAML::Key << "capacity_factor" << YAML::Value << moe->capacity_factor;
    out << YAML::Key << "routing_skew" << YAML::Value << moe->routing_skew;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

namespace {

// Reads one mapping with typo safety: every key must be known; each accessor reports file:line: field.
class MapReader {
 public:
  MapReader(std::string file, YAML::Node node, std::string prefix, std::vector<std::string> allowed)
      : file_(std::move(file)), node_(std::move(node)), prefix_(std::move(prefix)), allowed_(std::move(allowed)) {
    if (!node_.IsMap()) throw InputError(file_where(file_, node_.Mark().line, prefix_.empty() ? "" : prefix_),
                                         "expected a mapping of model fields");
    for (const auto& kv : node_) {
      const std::string key = kv.first.Scalar();
      if (std::find(allowed_.begin(), allowed_.end(), key) == allowed_.end()) {
        std::string list;
        for (const auto& a : allowed_) list += (list.empty() ? "" : ", ") + a;
        throw InputError(file_where(file_, kv.first.Mark().line, field(key)),
                         "unknown field (expected one of: " + list + ")");
      }
    }
  }

  bool has(const std::string& key) const { return static_cast<bool>(node_[key]); }

  // Integer fields are int in ModelConfig: every range of limits.h lies within int.
  int integer(const std::string& key, limits::IntRange range) const {
    const YAML::Node v = value(key);
    if (!v.IsScalar()) throw InputError(where(v, key), "expected an integer, got " + text(v));
    return read_int(v.Scalar(), range, where(v, key));
  }

  int integer_or(const std::string& key, limits::IntRange range, int fallback) const {
    return has(key) ? integer(key, range) : fallback;
  }

  double real_or(const std::string& key, limits::RealRange range, double fallback) const {
    if (!has(key)) return fallback;
    const YAML::Node v = value(key);
    if (!v.IsScalar()) throw InputError(where(v, key), "expected a number, got " + text(v));
    return read_real(v.Scalar(), range, where(v, key));
  }

  std::string string(const std::string& key) const {
    const YAML::Node v = value(key);
    if (!v.IsScalar() || v.Scalar().empty()) throw InputError(where(v, key), "expected a non-empty string");
    return v.Scalar();
  }

  std::string string_or(const std::string& key, const std::string& fallback) const {
    return has(key) ? string(key) : fallback;
  }

  YAML::Node value(const std::string& key) const {
    const YAML::Node v = node_[key];
    if (!v) throw InputError(file_where(file_, node_.Mark().line, field(key)), "missing required field");
    return v;
  }

  std::string where(const YAML::Node& v, const std::string& key) const {
    return file_where(file_, v.Mark().line, field(key));
  }

  std::string field(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

 private:
  static std::string text(const YAML::Node& v) {
    if (v.IsScalar()) return v.Scalar();
    if (v.IsSequence()) return "a list";
    if (v.IsMap()) return "a mapping";
    return "null";
  }

  std::string file_;
  YAML::Node node_;
  std::string prefix_;
  std::vector<std::string> allowed_;
};

MoeConfig parse_moe(const std::string& file, const YAML::Node& node, const ModelConfig& m) {
  const MapReader r(file, node, "moe",
                    {"experts", "top_k", "every", "first_dense", "expert_ffn_hidden", "shared_experts",
                     "capacity_factor", "routing_skew"});
  MoeConfig c;
  c.experts = r.integer("experts", limits::kExperts);
  c.top_k = r.integer_or("top_k", limits::kExperts, 1);
  if (c.top_k > c.experts)
    throw InputError(r.where(r.value("top_k"), "top_k"),
                     "top_k " + std::to_string(c.top_k) + " exceeds experts " + std::to_string(c.experts));
  c.every = r.integer_or("every", limits::kLayers, 1);
  c.first_dense = r.integer_or("first_dense", {0, limits::kLayers.max}, 0);
  if (c.first_dense >= m.layers)
    throw InputError(r.where(r.value("first_dense"), "first_dense"),
                     "first_dense " + std::to_string(c.first_dense) + " leaves no MoE layer among " +
                         std::to_string(m.layers) + " layers");
  c.expert_ffn_hidden = r.integer_or("expert_ffn_hidden", limits::kFfnHidden, static_cast<int>(m.ffn_hidden));  // default: the dense FFN width
  c.shared_experts = r.integer_or("shared_experts", limits::kSharedExperts, 0);
  c.capacity_factor = r.real_or("capacity_factor", {0.0, limits::kMoeFactor.max, true}, 1.0);
  c.routing_skew = r.real_or("routing_skew", limits::kMoeFactor, 0.0);
  return c;
}

std::vector<std::string> bundled_models() {
  std::vector<std::string> names;
  const std::filesystem::path dir = std::filesystem::path(configs_dir()) / "models";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

ModelConfig parse_model_yaml(const std::string& path) {
  const YAML::Node root = yaml_fields::load_file(path, "model file");
  if (!root || root.IsNull()) throw InputError(path, "empty model file");

  const MapReader r(path, root, "",
                    {"version", "name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "ffn_kind",
                     "attention", "seq_len", "vocab", "dtype", "global_batch", "moe"});
  if (r.has("version")) {
    const long v = r.integer("version", limits::kFormatVersion);
    if (v != 1) throw InputError(r.where(r.value("version"), "version"), "unsupported version " + std::to_string(v));
  }
  ModelConfig m;
  m.source = path;
  m.name = r.string("name");
  m.layers = r.integer("layers", limits::kLayers);
  m.hidden = r.integer("hidden", limits::kHidden);
  m.heads = r.integer("heads", limits::kHeads);
  if (m.hidden % m.heads != 0)
    throw InputError(r.where(r.value("heads"), "heads"), "heads " + std::to_string(m.heads) +
                                                             " does not divide hidden " + std::to_string(m.hidden));
  m.kv_heads = r.integer_or("kv_heads", limits::kHeads, m.heads);
  if (m.heads % m.kv_heads != 0)
    throw InputError(r.where(r.value("kv_heads"), "kv_heads"),
                     "kv_heads " + std::to_string(m.kv_heads) + " does not divide heads " + std::to_string(m.heads));
  m.ffn_hidden = r.integer_or("ffn_hidden", limits::kFfnHidden, static_cast<int>(4 * m.hidden));
  const std::string kind = r.string_or("ffn_kind", "gelu");
  if (kind == "gelu") {
    m.ffn_kind = FfnKind::Gelu;
  } else if (kind == "swiglu") {
    m.ffn_kind = FfnKind::Swiglu;
  } else {
    throw InputError(r.where(r.value("ffn_kind"), "ffn_kind"), "unknown ffn_kind '" + kind + "' (gelu|swiglu)");
  }
  const std::string attention = r.string_or("attention", attention_name(Attention::Unfused));
  const std::optional<Attention> parsed = parse_attention(attention);
  if (!parsed)
    throw InputError(r.where(r.value("attention"), "attention"), "unknown attention '" + attention + "' (flash|unfused)");
  m.attention = *parsed;
  m.seq_len = r.integer("seq_len", limits::kSeqLen);
  m.vocab = r.integer("vocab", limits::kVocab);
  m.dtype = r.string_or("dtype", "bf16");
  if (m.dtype != "bf16" && m.dtype != "fp16")
    throw InputError(r.where(r.value("dtype"), "dtype"), "unknown dtype '" + m.dtype + "' (bf16|fp16)");
  m.global_batch = r.integer("global_batch", limits::kGlobalBatch);
  if (r.has("moe")) m.moe = parse_moe(path, r.value("moe"), m);
  return m;
}

ModelConfig load_model(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               name_or_path.ends_with(".yaml") || name_or_path.ends_with(".yml");
  std::error_code ec;  // a name too long for the file system names no file
  if (looks_like_path || fs::is_regular_file(name_or_path, ec)) return parse_model_yaml(name_or_path);
  const fs::path bundled = fs::path(configs_dir()) / "models" / (name_or_path + ".yaml");
  if (fs::is_regular_file(bundled, ec)) return parse_model_yaml(bundled.string());
  std::string list;
  for (const auto& n : bundled_models()) list += (list.empty() ? "" : ", ") + n;
  throw InputError(name_or_path, "unknown model '" + name_or_path + "' (bundled: " + list + ")");
}

}  // namespace arachne
