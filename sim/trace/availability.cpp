// Availability trace model, native CSV format (traces/README.md, "native") and the count-to-node packing
// shared by the SkyPilot and Sailor loaders.
#include "sim/trace/availability.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include "sim/io/csv_fields.h"
#include "sim/io/input_error.h"
#include "sim/io/numbers.h"

namespace arachne {

namespace {

using csv::trim;

std::vector<std::string> split_commas(const std::string& line) { return csv::split_row(line); }

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (std::size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + xs[i];
  return out;
}

// Shortest text that parses back to exactly `v`.
std::string format_time(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::vector<int> AvailabilityTrace::snapshot(double t) const {
  std::vector<int> gpus(nodes.size(), 0);
  for (const TraceEvent& e : events) {
    if (e.time_s > t) break;  // events are sorted by time
    gpus[static_cast<std::size_t>(e.node)] = e.gpus;
  }
  return gpus;
}

std::vector<double> AvailabilityTrace::change_times() const {
  std::vector<double> times;
  for (const TraceEvent& e : events)
    if (times.empty() || e.time_s != times.back()) times.push_back(e.time_s);
  return times;
}

AvailabilityTrace load_native_trace(const std::string& path, const std::vector<std::string>& known_gpu_types) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "cannot open trace file");
  AvailabilityTrace trace;
  trace.source = path;
  const auto where = [&](int line, const std::string& col) { return file_where(path, line - 1, col); };

  std::string line;
  int line_no = 0;
  bool have_header = false;
  std::map<std::string, int> index;  // node name -> index into trace.nodes
  double last_time = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string text = trim(line);
    if (text.empty() || text[0] == '#') continue;  // blank lines and comments
    const std::vector<std::string> cells = split_commas(text);
    if (!have_header) {
      const std::vector<std::string> expected = {"time_s", "node", "gpu_type", "gpus"};
      if (cells != expected)
        throw InputError(where(line_no, "header"), "expected header 'time_s,node,gpu_type,gpus', got '" + text + "'");
      have_header = true;
      continue;
    }
    if (cells.size() != 4)
      throw InputError(where(line_no, "columns"),
                       "expected 4 columns (time_s,node,gpu_type,gpus), got " + std::to_string(cells.size()));
    const double t = read_real(cells[0], limits::kTraceSeconds, where(line_no, "time_s"));
    if (!trace.events.empty() && t < last_time)
      throw InputError(where(line_no, "time_s"),
                       "rows not sorted by time (" + cells[0] + " after " + format_time(last_time) + ")");
    const std::string& name = cells[1];
    if (name.empty()) throw InputError(where(line_no, "node"), "empty node name");
    const std::string& type = cells[2];
    if (type.empty()) throw InputError(where(line_no, "gpu_type"), "empty GPU type");
    if (!known_gpu_types.empty() &&
        std::find(known_gpu_types.begin(), known_gpu_types.end(), type) == known_gpu_types.end())
      throw InputError(where(line_no, "gpu_type"),
                       "unknown GPU type '" + type + "' (known: " + join(known_gpu_types) + ")");
    const int g = read_int(cells[3], {0, limits::kGpusPerNode.max}, where(line_no, "gpus"));

    auto it = index.find(name);
    if (it == index.end()) {
      if (static_cast<long long>(trace.nodes.size()) >= limits::kNodes.max)
        throw InputError(where(line_no, "node"), "more than the supported " + std::to_string(limits::kNodes.max) + " nodes");
      it = index.emplace(name, static_cast<int>(trace.nodes.size())).first;
      trace.nodes.push_back(TraceNode{name, type, 0});
    }
    TraceNode& node = trace.nodes[static_cast<std::size_t>(it->second)];
    if (node.gpu_type != type)
      throw InputError(where(line_no, "gpu_type"),
                       "node '" + name + "' changes GPU type from '" + node.gpu_type + "' to '" + type + "'");
    node.capacity = std::max(node.capacity, g);
    trace.events.push_back(TraceEvent{t, it->second, g});
    last_time = t;
  }
  if (!have_header) throw InputError(file_where(path, 0, "header"), "empty trace file (expected header 'time_s,node,gpu_type,gpus')");
  if (trace.events.empty()) throw InputError(file_where(path, line_no - 1, ""), "trace has no rows");
  trace.end_s = last_time;
  return trace;
}

std::string to_native_csv(const AvailabilityTrace& trace) {
  std::string out = "time_s,node,gpu_type,gpus\n";
  for (const TraceNode& n : trace.nodes)
    if (n.name.find_first_of(",\n\r#") != std::string::npos || n.gpu_type.find_first_of(",\n\r") != std::string::npos)
      throw InputError(trace.source, "node '" + n.name + "' cannot be written as native CSV (',', '#' or newline in a name)");
  const auto row = [&](double t, int node, int gpus) {
    const TraceNode& n = trace.nodes[static_cast<std::size_t>(node)];
    out += format_time(t) + "," + n.name + "," + n.gpu_type + "," + std::to_string(gpus) + "\n";
  };
  for (const TraceEvent& e : trace.events) row(e.time_s, e.node, e.gpus);
  // The native trace ends at its last row: keep a later end with a no-op row (node 0 repeats its value).
  const double last = trace.events.empty() ? 0.0 : trace.events.back().time_s;
  if (!trace.nodes.empty() && trace.end_s > last) row(trace.end_s, 0, trace.snapshot(trace.end_s)[0]);
  return out;
}

AvailabilityTrace trace_from_gpu_counts(std::string source, const std::vector<double>& times,
                                        const std::vector<GpuCountSeries>& series, double end_s) {
  AvailabilityTrace trace;
  trace.source = std::move(source);
  trace.end_s = end_s;
  struct Group {
    int first_node;
    int count;
  };
  std::vector<Group> groups;
  for (const GpuCountSeries& s : series) {
    const int g = std::max(1, s.gpus_per_node);
    long long peak = 0;
    for (const long long v : s.gpus) peak = std::max(peak, v);
    const int count = static_cast<int>((peak + g - 1) / g);  // ceil(peak / g)
    groups.push_back(Group{static_cast<int>(trace.nodes.size()), count});
    for (int k = 0; k < count; ++k) {
      const long long full = std::min<long long>(g, peak - static_cast<long long>(k) * g);
      trace.nodes.push_back(TraceNode{s.node_prefix + std::to_string(k), s.gpu_type, static_cast<int>(full)});
    }
  }
  std::vector<int> current(trace.nodes.size(), -1);
  for (std::size_t i = 0; i < times.size(); ++i) {
    for (std::size_t s = 0; s < series.size(); ++s) {
      const long long g = std::max(1, series[s].gpus_per_node);
      const long long total = i < series[s].gpus.size() ? std::max(0LL, series[s].gpus[i]) : 0;
      for (int k = 0; k < groups[s].count; ++k) {
        const int node = groups[s].first_node + k;
        const int v = static_cast<int>(std::clamp(total - k * g, 0LL, g));
        if (v != current[static_cast<std::size_t>(node)]) {
          trace.events.push_back(TraceEvent{times[i], node, v});
          current[static_cast<std::size_t>(node)] = v;
        }
      }
    }
  }
  return trace;
}

}  // namespace arachne
