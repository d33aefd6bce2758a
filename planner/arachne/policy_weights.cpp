// The policy's weights file; the layout is documented in policy_weights.h.
#include "planner/arachne/policy_weights.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "sim/io/atomic_file.h"
#include "sim/io/input_error.h"

namespace arachne::planner {

static_assert(std::endian::native == std::endian::little, "the weights file is read and written little-endian");

namespace {

constexpr char kMagic[8] = {'A', 'R', 'A', 'P', 'O', 'L', 'v', '1'};
constexpr int kMaxTensorRank = 4;

// FNV-1a, 64-bit (Fowler, Noll, Vo; http://www.isthe.com/chongo/tech/comp/fnv/).
uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

int64_t elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

template <class T>
void put(std::string& out, T value) {
  char b[sizeof(T)];
  std::memcpy(b, &value, sizeof(T));
  out.append(b, sizeof(T));
}

std::vector<int32_t> header_ints(const PolicyShape& s) {
  return {s.group_features, s.global_features, s.vocabulary, s.bos_token, s.max_groups(),
          s.encoder_width,  s.token_width,     s.decoder_width};
}

// Sequential reads from the file's bytes; a read past the end is a truncated file.
class Reader {
 public:
  Reader(const std::string& bytes, const std::string& path) : bytes_(bytes), path_(path) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string text(size_t n) {
    need(n);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  void floats(float* out, int64_t n) {
    need(static_cast<size_t>(n) * sizeof(float));
    std::memcpy(out, bytes_.data() + pos_, static_cast<size_t>(n) * sizeof(float));
    pos_ += static_cast<size_t>(n) * sizeof(float);
  }
  size_t position() const { return pos_; }
  [[noreturn]] void fail(const std::string& why) const { throw InputError(path_, why); }

 private:
  void need(size_t n) const {
    if (pos_ + n > bytes_.size()) fail("truncated policy weights file");
  }
  const std::string& bytes_;
  const std::string& path_;
  size_t pos_ = 0;
};

void check_shape(const PolicyShape& s) {
  if (s.group_features < 1 || s.global_features < 1 || s.vocabulary < 2 || s.encoder_width < 1 ||
      s.token_width < 1 || s.decoder_width < 1 || s.max_groups() < 1)
    throw std::invalid_argument("policy shape: every width and the vocabulary must be positive");
  auto in_vocabulary = [&s](int id) { return id >= 0 && id < s.vocabulary; };
  if (!in_vocabulary(s.bos_token)) throw std::invalid_argument("policy shape: Bos id outside the vocabulary");
  for (int id : s.type_tokens)
    if (!in_vocabulary(id) || id == s.bos_token)
      throw std::invalid_argument("policy shape: a Type token id is outside the vocabulary or is Bos");
}

PolicyShape read_shape(Reader& r) {
  PolicyShape s;
  s.group_features = r.get<int32_t>();
  s.global_features = r.get<int32_t>();
  s.vocabulary = r.get<int32_t>();
  s.bos_token = r.get<int32_t>();
  const int32_t max_groups = r.get<int32_t>();
  s.encoder_width = r.get<int32_t>();
  s.token_width = r.get<int32_t>();
  s.decoder_width = r.get<int32_t>();
  if (max_groups < 1 || max_groups > 1024) r.fail("implausible number of groups in the header");
  for (int k = 0; k < max_groups; ++k) s.type_tokens.push_back(r.get<int32_t>());
  return s;
}

}  // namespace

int64_t parameter_count(const PolicyShape& s) {
  int64_t n = 0;
  for (const ParameterSpec& p : policy_parameters(s)) n += elements(p.dims);
  return n;
}

void check_weights(const PolicyWeights& w) {
  check_shape(w.shape);
  const std::vector<ParameterSpec> specs = policy_parameters(w.shape);
  for (const ParameterSpec& p : specs) {
    const auto it = w.tensors.find(p.name);
    if (it == w.tensors.end()) throw std::invalid_argument("policy weights: missing tensor " + p.name);
    if (static_cast<int64_t>(it->second.size()) != elements(p.dims))
      throw std::invalid_argument("policy weights: tensor " + p.name + " has " + std::to_string(it->second.size()) +
                                  " values, the shape needs " + std::to_string(elements(p.dims)));
  }
  if (w.tensors.size() != specs.size()) throw std::invalid_argument("policy weights: tensors the network does not have");
}

void write_policy_weights(const std::string& path, const PolicyWeights& w) {
  check_weights(w);
  std::string bytes(kMagic, sizeof kMagic);
  for (int32_t v : header_ints(w.shape)) put(bytes, v);
  for (int32_t id : w.shape.type_tokens) put(bytes, id);
  const std::vector<ParameterSpec> specs = policy_parameters(w.shape);
  put(bytes, static_cast<uint32_t>(specs.size()));
  for (const ParameterSpec& p : specs) {
    put(bytes, static_cast<uint32_t>(p.name.size()));
    bytes += p.name;
    put(bytes, static_cast<uint32_t>(p.dims.size()));
    for (int64_t d : p.dims) put(bytes, d);
    const std::vector<float>& v = w.tensors.at(p.name);
    bytes.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  put(bytes, fnv1a(bytes));
  write_file_atomically(path, [&bytes](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
  });
}

PolicyWeights read_policy_weights(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot open the policy weights file");
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  Reader r(bytes, path);
  if (r.text(sizeof kMagic) != std::string(kMagic, sizeof kMagic)) r.fail("not an arachne policy weights file");
  if (bytes.size() < sizeof kMagic + sizeof(uint64_t)) r.fail("truncated policy weights file");
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - sizeof stored, sizeof stored);
  if (fnv1a(bytes.substr(0, bytes.size() - sizeof stored)) != stored) r.fail("corrupt policy weights file (hash mismatch)");

  PolicyWeights w;
  w.shape = read_shape(r);
  try {
    check_shape(w.shape);
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
  const std::vector<ParameterSpec> specs = policy_parameters(w.shape);
  if (r.get<uint32_t>() != specs.size()) r.fail("the number of tensors does not match the network");
  for (const ParameterSpec& p : specs) {
    const std::string name = r.text(r.get<uint32_t>());
    const uint32_t rank = r.get<uint32_t>();
    if (name != p.name || rank != p.dims.size() || rank > kMaxTensorRank) r.fail("unexpected tensor " + name);
    for (int64_t d : p.dims)
      if (r.get<int64_t>() != d) r.fail("tensor " + name + " has dimensions the header's shape does not give");
    std::vector<float>& v = w.tensors[name];
    v.resize(static_cast<size_t>(elements(p.dims)));
    r.floats(v.data(), static_cast<int64_t>(v.size()));
  }
  if (r.position() + sizeof(uint64_t) != bytes.size()) r.fail("trailing bytes after the last tensor");
  return w;
}

std::string file_fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a offset basis and prime (64-bit)
  char ch;
  while (in.get(ch)) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace arachne::planner
