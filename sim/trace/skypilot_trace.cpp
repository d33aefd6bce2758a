// SkyPilot spot traces → availability trace (traces/README.md, "skypilot").
#include "sim/trace/skypilot_trace.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <vector>

#include "sim/io/input_error.h"
#include "sim/io/json_file.h"
#include "sim/io/numbers.h"

namespace arachne {

namespace {

// Instance GPU names in spot-traces file names → catalog types (AWS: p3 = V100-16 SXM2, p4d = A100-40,
// g5 = A10G, g4dn = T4, p5 = H100; AWS EC2 instance-types page).
std::string catalog_type_for(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "v100") return "V100-16";
  if (lower == "a100") return "A100-40";
  if (lower == "a10g") return "A10G";
  if (lower == "t4") return "T4";
  if (lower == "h100") return "H100";
  return "";  // unknown: the caller falls back to V100-16
}

}  // namespace

SkypilotFileName parse_skypilot_file_name(const std::string& path) {
  const std::string stem = std::filesystem::path(path).stem().string();
  static const std::regex re(R"(_([A-Za-z][A-Za-z0-9]*)_([0-9]+)$)");
  std::smatch m;
  if (!std::regex_search(stem, m, re)) return {};
  const int n = read_int(m[2].str(), limits::kGpusPerNode, path + ": GPUs per instance in the file name");
  return SkypilotFileName{m[1].str(), n};
}

AvailabilityTrace load_skypilot_trace(const std::string& path, const SkypilotOptions& opt) {
  const nlohmann::json doc = read_json_file(path, "SkyPilot trace file");
  if (!doc.is_object() || !doc.contains("metadata") || !doc["metadata"].is_object() ||
      !doc["metadata"].contains("gap_seconds") || !doc["metadata"]["gap_seconds"].is_number())
    throw InputError(path + ": metadata.gap_seconds", "missing or not a number");
  const double gap = check_real(doc["metadata"]["gap_seconds"].get<double>(), {0.0, limits::kTraceSeconds.max, true},
                                path + ": metadata.gap_seconds");
  if (!doc.contains("data") || !doc["data"].is_array() || doc["data"].empty())
    throw InputError(path + ": data", "missing, not an array, or empty");

  const SkypilotFileName fn = parse_skypilot_file_name(path);
  const int per_instance = opt.gpus_per_instance ? *opt.gpus_per_instance : (fn.gpus > 0 ? fn.gpus : 1);
  if (per_instance <= 0) throw InputError(path, "gpus_per_instance must be > 0");
  std::string type = opt.gpu_type ? *opt.gpu_type : catalog_type_for(fn.instance_gpu);
  if (type.empty()) type = "V100-16";

  const auto& data = doc["data"];
  std::vector<double> times;
  GpuCountSeries series{"i-", type, per_instance, {}};
  times.reserve(data.size());
  series.gpus.reserve(data.size());
  for (std::size_t i = 0; i < data.size(); ++i) {
    const auto& v = data[i];
    const std::string where = path + ": data[" + std::to_string(i) + "]";
    if (!v.is_number()) throw InputError(where, "not a number");
    const double x = check_real(v.get<double>(), {0.0, static_cast<double>(limits::kTraceGpus.max / per_instance)}, where);
    if (x != std::floor(x)) throw InputError(where, "instance count must be a whole number, got " + v.dump());
    times.push_back(static_cast<double>(i) * gap);
    series.gpus.push_back(static_cast<long long>(x) * per_instance);  // instances × GPUs per instance
  }
  const double end_s = check_real(static_cast<double>(data.size()) * gap, limits::kTraceSeconds, path + ": data");
  return trace_from_gpu_counts(path, times, {series}, end_s);
}

}  // namespace arachne
