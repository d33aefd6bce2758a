// Reading typed fields out of YAML mappings with `file:line: field: reason` errors (InputError; lines
// 1-based). Shared by every config parser (GPU catalog, clusters).
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace arachne::yaml_fields {

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
// A value with a unit, parsed by `parse` (sim/io/units.h); its std::invalid_argument becomes the reason.
double dimensioned(const YAML::Node& parent, const std::string& key, double (*parse)(const std::string&),
                   const std::string& file, const std::string& prefix);
double plain_number(const YAML::Node& parent, const std::string& key, double lo, double hi,
                    const std::string& file, const std::string& prefix);
double positive_number(const YAML::Node& parent, const std::string& key, const std::string& file,
                       const std::string& prefix);
int whole_number(const YAML::Node& parent, const std::string& key, int lo, const std::string& file,
                 const std::string& prefix);

}  // namespace arachne::yaml_fields
