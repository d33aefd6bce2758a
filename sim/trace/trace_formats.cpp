#include "sim/trace/trace_formats.h"

#include <fstream>

#include "sim/io/input_error.h"
#include "sim/trace/alibaba_trace.h"
#include "sim/trace/sailor_trace.h"
#include "sim/trace/skypilot_trace.h"

namespace arachne {

const std::vector<std::string>& trace_formats() {
  static const std::vector<std::string> f = {"native", "alibaba-gpu-v2023", "skypilot", "sailor-csv", "sailor-json"};
  return f;
}

std::string detect_trace_format(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("--trace", "cannot open " + path);
  std::string first;
  while (std::getline(in, first) && (first.empty() || first[0] == '#')) {
  }
  while (!first.empty() && (first.back() == '\r' || first.back() == ' ')) first.pop_back();
  if (first.rfind("time_s,node,gpu_type,gpus", 0) == 0) return "native";
  if (first.rfind("name,cpu_milli", 0) == 0) return "alibaba-gpu-v2023";
  if (first.find("Timestamp") != std::string::npos) return "sailor-csv";
  const auto p = first.find_first_not_of(" \t");
  if (p != std::string::npos && first[p] == '[') return "sailor-json";
  if (p != std::string::npos && first[p] == '{') return "skypilot";
  throw InputError(path + ":1", "cannot tell the trace format from the first line; pass --trace-format (" +
                                    std::string("native, alibaba-gpu-v2023, skypilot, sailor-csv, sailor-json)"));
}

LoadedTrace load_trace(const std::string& path, const TraceLoadOptions& opt, const GpuCatalog& catalog) {
  LoadedTrace out;
  out.format = opt.format.empty() ? detect_trace_format(path) : opt.format;
  if (out.format == "native") {
    out.trace = load_native_trace(path, catalog.names());
  } else if (out.format == "alibaba-gpu-v2023") {
    AlibabaOptions a;
    a.seed = opt.seed;
    a.nodes = opt.nodes;
    a.load_scale = opt.load_scale;
    a.window_start_s = opt.window_start_s;
    a.window_end_s = opt.window_end_s;
    AlibabaLoad l = load_alibaba_trace(path, a);
    out.trace = std::move(l.trace);
    out.tenant_utilisation = l.utilisation;
  } else if (out.format == "skypilot") {
    out.trace = load_skypilot_trace(path);
  } else if (out.format == "sailor-csv") {
    // Nodes of each GPU type's catalog default size.
    std::map<std::string, int> sizes;
    for (const auto& n : catalog.names()) sizes[n] = catalog.at(n).node.gpus_per_node;
    out.trace = load_sailor_csv(path, sizes);
  } else if (out.format == "sailor-json") {
    out.trace = load_sailor_json(path, "A100-40", catalog.at("A100-40").node.gpus_per_node);
  } else {
    throw InputError("--trace-format", "unknown format '" + out.format +
                                           "' (native, alibaba-gpu-v2023, skypilot, sailor-csv, sailor-json)");
  }
  for (const TraceNode& n : out.trace.nodes)
    if (!catalog.contains(n.gpu_type))
      throw InputError(path, "node " + n.name + ": unknown GPU type '" + n.gpu_type + "'");
  return out;
}

TraceStats trace_stats(const AvailabilityTrace& t) {
  TraceStats s;
  s.duration_s = t.end_s;
  s.nodes = static_cast<int>(t.nodes.size());
  for (const TraceNode& n : t.nodes) s.capacity[n.gpu_type] += n.capacity;
  const std::vector<double> times = t.change_times();
  for (double x : times) s.changes += x > 0 ? 1 : 0;
  s.changes_per_hour = t.end_s > 0 ? s.changes / (t.end_s / 3600.0) : 0;
  double offered = 0, capacity = 0;
  for (size_t k = 0; k < times.size(); ++k) {
    if (times[k] >= t.end_s) break;
    const double span = (k + 1 < times.size() ? std::min(times[k + 1], t.end_s) : t.end_s) - times[k];
    const std::vector<int> g = t.snapshot(times[k]);
    for (size_t i = 0; i < g.size(); ++i) {
      s.gpu_hours[t.nodes[i].gpu_type] += g[i] * span / 3600.0;
      offered += g[i] * span;
    }
  }
  for (const auto& [type, c] : s.capacity) capacity += c * t.end_s;
  s.availability = capacity > 0 ? offered / capacity : 0;
  return s;
}

}  // namespace arachne
