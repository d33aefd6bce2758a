// Reading typed fields out of YAML mappings with `file:line: field: reason` errors (InputError; lines
// 1-based). Shared by every config parser (GPU catalog, clusters).
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "sim/io/limits.h"

namespace arachne::yaml_fields {

// A yaml-cpp parse failure as InputError("file:line", "YAML syntax error: ..."); nesting beyond yaml-cpp's
// depth guard is said so in words (yaml-cpp reports it as "bad file").
[[noreturn]] void syntax_error(const YAML::ParserException& e, const std::string& file);
// The YAML document of a file: InputError(path, "cannot open <what>") when the path names no regular file
// (a directory, a name too long for the file system, none at all) or cannot be read, syntax errors as
// syntax_error has them.
YAML::Node load_file(const std::string& path, const std::string& what);
[[noreturn]] void fail(const std::string& file, const YAML::Node& at, const std::string& field,
                       const std::string& why);
std::string join(const std::vector<std::string>& items);  // "a, b, c"
// Rejects keys outside `allowed` (typos would otherwise silently fall back to defaults).
void check_keys(const YAML::Node& map, const std::vector<std::string>& allowed, const std::string& file,
                const std::string& prefix);
YAML::Node require_map(const YAML::Node& parent, const std::string& key, const std::string& file,
                       const std::string& prefix);
YAML::Node optional_map(const YAML::Node& parent, const std::string& key, const std::string& file,
                        const std::string& prefix);
std::string require_scalar(const YAML::Node& parent, const std::string& key, const std::string& file,
                           const std::string& prefix);
// A value with a unit, parsed by `parse` (sim/io/units.h; its std::invalid_argument becomes the reason),
// within `range` (in the base unit: bytes/s, bytes, seconds, FLOP/s).
double dimensioned(const YAML::Node& parent, const std::string& key, double (*parse)(const std::string&),
                   limits::RealRange range, const std::string& file, const std::string& prefix);
// A plain number or integer within `range` (sim/io/numbers.h: no hex, no inf/nan, no truncation).
double plain_number(const YAML::Node& parent, const std::string& key, limits::RealRange range,
                    const std::string& file, const std::string& prefix);
int whole_number(const YAML::Node& parent, const std::string& key, limits::IntRange range, const std::string& file,
                 const std::string& prefix);
// The `file:line: field` of parent[key] (of parent when the key is missing).
std::string where_of(const YAML::Node& parent, const std::string& key, const std::string& file,
                     const std::string& prefix);

}  // namespace arachne::yaml_fields
