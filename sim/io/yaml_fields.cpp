#include "sim/io/yaml_fields.h"

#include <algorithm>
#include <stdexcept>

#include "sim/io/input_error.h"

namespace arachne::yaml_fields {

void fail(const std::string& file, const YAML::Node& at, const std::string& field, const std::string& why) {
  throw InputError(file_where(file, at.IsDefined() ? at.Mark().line : -1, field), why);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

void check_keys(const YAML::Node& map, const std::vector<std::string>& allowed, const std::string& file,
                const std::string& prefix) {
  for (const auto& kv : map) {
    const std::string key = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      fail(file, kv.first, prefix + key, "unknown field (known: " + join(allowed) + ")");
  }
}

YAML::Node require_map(const YAML::Node& parent, const std::string& key, const std::string& file,
                       const std::string& prefix) {
  const YAML::Node n = parent[key];
  if (!n.IsDefined()) fail(file, parent, prefix + key, "missing field");
  if (!n.IsMap()) fail(file, n, prefix + key, "expected a mapping like {key: value, ...}");
  return n;
}

YAML::Node optional_map(const YAML::Node& parent, const std::string& key, const std::string& file,
                        const std::string& prefix) {
  const YAML::Node n = parent[key];
  if (n.IsDefined() && !n.IsMap()) fail(file, n, prefix + key, "expected a mapping like {key: value, ...}");
  return n;
}

std::string require_scalar(const YAML::Node& parent, const std::string& key, const std::string& file,
                           const std::string& prefix) {
  const YAML::Node n = parent[key];
  if (!n.IsDefined()) fail(file, parent, prefix + key, "missing field");
  if (!n.IsScalar()) fail(file, n, prefix + key, "expected a single value");
  return n.Scalar();
}

double dimensioned(const YAML::Node& parent, const std::string& key, double (*parse)(const std::string&),
                   const std::string& file, const std::string& prefix) {
  const std::string text = require_scalar(parent, key, file, prefix);
  try {
    return parse(text);
  } catch (const std::invalid_argument& e) {
    fail(file, parent[key], prefix + key, e.what());
  }
}

namespace {
double number(const YAML::Node& parent, const std::string& key, const std::string& file, const std::string& prefix) {
  require_scalar(parent, key, file, prefix);
  const YAML::Node n = parent[key];
  try {
    return n.as<double>();
  } catch (const YAML::Exception&) {
    fail(file, n, prefix + key, "expected a number, got '" + n.Scalar() + "'");
  }
}
}  // namespace

double plain_number(const YAML::Node& parent, const std::string& key, double lo, double hi,
                    const std::string& file, const std::string& prefix) {
  const double v = number(parent, key, file, prefix);
  if (!(v >= lo && v <= hi))
    fail(file, parent[key], prefix + key,
         "value " + parent[key].Scalar() + " out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

double positive_number(const YAML::Node& parent, const std::string& key, const std::string& file,
                       const std::string& prefix) {
  const double v = number(parent, key, file, prefix);
  if (!(v > 0)) fail(file, parent[key], prefix + key, "must be positive");
  return v;
}

int whole_number(const YAML::Node& parent, const std::string& key, int lo, const std::string& file,
                 const std::string& prefix) {
  require_scalar(parent, key, file, prefix);
  const YAML::Node n = parent[key];
  int v = 0;
  try {
    v = n.as<int>();
  } catch (const YAML::Exception&) {
    fail(file, n, prefix + key, "expected a whole number, got '" + n.Scalar() + "'");
  }
  if (v < lo) fail(file, n, prefix + key, "must be at least " + std::to_string(lo));
  return v;
}

}  // namespace arachne::yaml_fields
