#include "sim/io/yaml_fields.h"

#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <filesystem>
#include <ios>
#include <stdexcept>
#include <system_error>

#include "sim/io/input_error.h"
#include "sim/io/numbers.h"

namespace arachne::yaml_fields {

void syntax_error(const YAML::ParserException& e, const std::string& file) {
  if (dynamic_cast<const YAML::DeepRecursion*>(&e))
    throw InputError(file_where(file, e.mark.line, ""), "YAML nested too deeply");
  throw InputError(file_where(file, e.mark.line, ""), "YAML syntax error: " + e.msg);
}

YAML::Node load_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw InputError(path, "cannot open " + what);
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw InputError(path, "cannot open " + what);
  } catch (const YAML::ParserException& e) {
    syntax_error(e, path);
  } catch (const YAML::Exception& e) {  // any other yaml-cpp error, at its mark
    throw InputError(file_where(path, e.mark.line, ""), e.msg);
  } catch (const std::ios_base::failure& e) {
    throw InputError(path, "cannot read " + what + ": " + e.what());
  }
}

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

std::string where_of(const YAML::Node& parent, const std::string& key, const std::string& file,
                     const std::string& prefix) {
  const YAML::Node n = parent[key];
  return file_where(file, n.IsDefined() ? n.Mark().line : parent.Mark().line, prefix + key);
}

double dimensioned(const YAML::Node& parent, const std::string& key, double (*parse)(const std::string&),
                   limits::RealRange range, const std::string& file, const std::string& prefix) {
  const std::string text = require_scalar(parent, key, file, prefix);
  double v = 0;
  try {
    v = parse(text);
  } catch (const std::invalid_argument& e) {
    fail(file, parent[key], prefix + key, e.what());
  }
  return check_real(v, range, where_of(parent, key, file, prefix));
}

double plain_number(const YAML::Node& parent, const std::string& key, limits::RealRange range,
                    const std::string& file, const std::string& prefix) {
  return read_real(require_scalar(parent, key, file, prefix), range, where_of(parent, key, file, prefix));
}

int whole_number(const YAML::Node& parent, const std::string& key, limits::IntRange range, const std::string& file,
                 const std::string& prefix) {
  return read_int(require_scalar(parent, key, file, prefix), range, where_of(parent, key, file, prefix));
}

}  // namespace arachne::yaml_fields
