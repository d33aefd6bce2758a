// The policy network's shape, its parameter list and its weights file. No Torch: the plain-C++ inference
// (planner/arachne/policy_net.h) reads the file; the Torch definition used for training
// (planner/learned/policy_net.h) registers exactly the parameters that policy_parameters() lists (its
// tests check it), and the host writes what the Torch module hands over (planner/learned_module.h).
//
// The network (the same in both definitions):
//   encoder   e_k = relu(group2(relu(group1(x_k))))                  for each GPU-type group k (deep set)
//             g   = relu(global2(relu(global1(x_global))))
//             c   = relu(context([mean_k e_k, max_k e_k, g]))         invariant to the order of the groups
//   decoder   h_0 = tanh(init(c))
//             h_t = gru([in(token_t), c], h_{t-1})                    (torch.nn.GRUCell equations)
//             in(Type k) = type_in(e_k); in(any other token v) = embed[v]
//   output    logit_t[v]      = out(h_t)[v]                           for every token that is not a Type
//             logit_t[Type k] = query(h_t) . key(e_k) / sqrt(E)       (pointer: scores group k by its encoding)
//             logit_t[Type k] = -inf for k >= groups
// Type tokens reach the network only through their group's encoding, so permuting the groups and renaming
// the Type tokens alike leaves every probability unchanged; the rows of `embed` and `out` for Type ids are
// unused. Masking to the grammar's choices is the caller's (TokenGrammar::allowed()).
//
// Weights file (little-endian; why not HDF5: the simulator only writes HDF5 and loads the library lazily,
// a planner reads ~0.5 MB once per process, and a flat file needs no library and reads in well under 1 ms):
//   bytes 0-7     magic "ARAPOLv1"
//   int32 x 8     group_features, global_features, vocabulary, bos_token, max_groups, encoder_width (E),
//                 token_width (T), decoder_width (D)
//   int32 x max_groups   type_tokens: the vocabulary id of Type k
//   uint32        number of tensors, then per tensor, in policy_parameters() order:
//                 uint32 name length, name bytes (no NUL), uint32 rank, int64 x rank dims,
//                 float32 x prod(dims) values, row-major (Torch's layout: Linear weight = [out, in])
//   uint64        FNV-1a (64-bit) hash of every preceding byte
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace arachne::planner {

struct PolicyShape {
  int group_features = 0;
  int global_features = 0;
  int vocabulary = 0;
  int bos_token = 0;             // vocabulary id of Bos: the decoder's first input
  std::vector<int> type_tokens;  // vocabulary id of Type k, k < max groups (= size)
  int encoder_width = 64;        // E: group, global and context encodings
  int token_width = 32;          // T: token embeddings
  int decoder_width = 128;       // D: GRU state

  int max_groups() const { return static_cast<int>(type_tokens.size()); }
  bool operator==(const PolicyShape& o) const = default;
};

struct ParameterSpec {
  std::string name;  // Torch's parameter name (named_parameters())
  std::vector<int64_t> dims;
};

// Every parameter of the network, in file order.
inline std::vector<ParameterSpec> policy_parameters(const PolicyShape& s) {
  const int64_t e = s.encoder_width, t = s.token_width, d = s.decoder_width, v = s.vocabulary;
  auto linear = [](const std::string& name, int64_t in, int64_t out) {
    return std::vector<ParameterSpec>{{name + ".weight", {out, in}}, {name + ".bias", {out}}};
  };
  std::vector<ParameterSpec> all;
  auto add = [&all](const std::vector<ParameterSpec>& ps) { all.insert(all.end(), ps.begin(), ps.end()); };
  add(linear("group1", s.group_features, e));
  add(linear("group2", e, e));
  add(linear("global1", s.global_features, e));
  add(linear("global2", e, e));
  add(linear("context", 3 * e, e));
  add(linear("init", e, d));
  add({{"embed.weight", {v, t}}});
  add(linear("type_in", e, t));
  add({{"gru.weight_ih", {3 * d, t + e}}, {"gru.weight_hh", {3 * d, d}}, {"gru.bias_ih", {3 * d}},
       {"gru.bias_hh", {3 * d}}});
  add(linear("out", d, v));
  add(linear("query", d, e));
  add(linear("key", e, e));
  return all;
}

struct PolicyWeights {
  PolicyShape shape;
  std::map<std::string, std::vector<float>> tensors;  // by name; sizes per policy_parameters(shape)
};

// Throws std::invalid_argument naming the first missing, extra or mis-sized tensor, or a bad shape.
void check_weights(const PolicyWeights& w);
// Number of floats in the network.
int64_t parameter_count(const PolicyShape& s);

// Writes the file atomically (temporary name, then rename). Throws std::runtime_error on I/O failure,
// std::invalid_argument when check_weights fails.
void write_policy_weights(const std::string& path, const PolicyWeights& w);
// Reads and checks a weights file. Throws InputError(path, reason) for a missing, truncated, corrupt
// (hash mismatch) or inconsistent file.
PolicyWeights read_policy_weights(const std::string& path);

// FNV-1a (64-bit) of a file's bytes, as 16 hex digits (an unreadable file hashes as an empty one): names
// the weights a run used, so that a resumed run refuses shards made with other weights,
// not only with another path.
std::string file_fingerprint(const std::string& path);

}  // namespace arachne::planner
