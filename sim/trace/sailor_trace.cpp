// Sailor availability traces → availability trace (traces/README.md, "sailor-csv" and "sailor-json").
#include "sim/trace/sailor_trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "sim/io/csv_fields.h"
#include "sim/io/input_error.h"
#include "sim/io/json_file.h"
#include "sim/io/numbers.h"

namespace arachne {

namespace {

// Cells lose surrounding whitespace and double quotes.
constexpr const char* kCellTrim = " \t\r\n\"";
std::string trim_cell(const std::string& s) { return csv::trim(s, kCellTrim); }
std::vector<std::string> split_row(const std::string& line) { return csv::split_row(line, kCellTrim); }

}  // namespace

std::string sailor_gpu_to_catalog(const std::string& name) {
  // Sailor writes catalog-like names ("A100-40", "V100-16"); bare family names take the smaller-memory
  // variant (a guess, stated in traces/README.md).
  static const char* const kCatalog[] = {"P100", "V100-16", "V100-32", "T4",   "A10",       "A10G", "L4",    "L40S",
                                         "A100-40", "A100-80", "H100", "H100-PCIe", "H200", "GH200", "MI250X", "MI300X"};
  for (const char* c : kCatalog)
    if (name == c) return c;
  if (name == "A100") return "A100-40";
  if (name == "V100") return "V100-16";
  if (name == "H100-80") return "H100";
  if (name == "GH-96") return "GH200";  // Sailor's name for the 96 GB Grace Hopper superchip
  return "";
}

AvailabilityTrace load_sailor_csv(const std::string& path, const std::map<std::string, int>& nodes_of_size) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "cannot open Sailor CSV trace");
  const auto where = [&](int line, const std::string& col) { return file_where(path, line - 1, col); };

  std::string line;
  int line_no = 0;
  std::vector<std::string> header;
  while (header.empty() && std::getline(in, line)) {
    ++line_no;
    if (!trim_cell(line).empty()) header = split_row(line);
  }
  if (header.empty()) throw InputError(file_where(path, 0, "header"), "empty file");
  const int header_line = line_no;
  const auto ts_it = std::find(header.begin(), header.end(), "Timestamp");
  if (ts_it == header.end()) throw InputError(where(header_line, "Timestamp"), "no 'Timestamp' column");
  const std::size_t ts_col = static_cast<std::size_t>(ts_it - header.begin());

  std::vector<std::size_t> cols;  // header index of each count column
  std::vector<GpuCountSeries> series;
  for (std::size_t c = 0; c < header.size(); ++c) {
    if (c == ts_col || header[c].empty()) continue;  // the unnamed pandas index column
    const std::string& h = header[c];
    const auto us = h.find('_');
    if (us == std::string::npos || us == 0 || us + 1 == h.size())
      throw InputError(where(header_line, h), "expected a '<GPU>_<zone>' column name");
    const std::string sailor_gpu = h.substr(0, us);
    const std::string type = sailor_gpu_to_catalog(sailor_gpu);
    if (type.empty())
      throw InputError(where(header_line, h), "unknown Sailor GPU type '" + sailor_gpu +
                                                  "' (known: catalog names, A100, V100, H100-80, GH-96)");
    const auto sz = nodes_of_size.find(type);
    const int g = sz == nodes_of_size.end() ? 8 : sz->second;
    if (g <= 0) throw InputError(where(header_line, h), "GPUs per node for " + type + " must be > 0");
    cols.push_back(c);
    series.push_back(GpuCountSeries{h + "/", type, g, {}});
  }
  if (series.empty()) throw InputError(where(header_line, "header"), "no '<GPU>_<zone>' count columns");

  std::vector<double> times;
  double t0 = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (trim_cell(line).empty()) continue;
    const std::vector<std::string> cells = split_row(line);
    if (cells.size() != header.size())
      throw InputError(where(line_no, "columns"), "expected " + std::to_string(header.size()) + " columns, got " +
                                                      std::to_string(cells.size()));
    // Unix timestamps: any finite number; the trace's span is checked below.
    const double ts = read_real(cells[ts_col], {-1e12, 1e12}, where(line_no, "Timestamp"));
    if (times.empty()) t0 = ts;
    const double t = check_real(ts - t0, limits::kTraceSeconds, where(line_no, "Timestamp"));
    if (!times.empty() && t < times.back())
      throw InputError(where(line_no, "Timestamp"), "rows not sorted by time");
    times.push_back(t);
    for (std::size_t s = 0; s < series.size(); ++s) {
      // A GPU count, possibly written as "32.0" (pandas output).
      series[s].gpus.push_back(read_whole(cells[cols[s]], limits::kTraceGpus, where(line_no, header[cols[s]])));
    }
  }
  if (times.empty()) throw InputError(where(header_line, ""), "trace has no rows");
  return trace_from_gpu_counts(path, times, series, times.back());
}

AvailabilityTrace load_sailor_json(const std::string& path, const std::string& gpu_type, int gpus_per_node) {
  if (gpus_per_node <= 0) throw InputError(path, "GPUs per node must be > 0");
  const nlohmann::json doc = read_json_file(path, "Sailor JSON trace");
  if (!doc.is_array() || doc.empty()) throw InputError(path, "expected a non-empty array of {\"Time\", \"GPUs\"}");
  std::vector<double> times;
  GpuCountSeries series{gpu_type + "/", gpu_type, gpus_per_node, {}};
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const auto& e = doc[i];
    const std::string at = path + ": [" + std::to_string(i) + "]";
    if (!e.is_object()) throw InputError(at, "expected an object {\"Time\", \"GPUs\"}");
    if (!e.contains("Time") || !e["Time"].is_number()) throw InputError(at + ".Time", "missing or not a number");
    if (!e.contains("GPUs") || !e["GPUs"].is_number()) throw InputError(at + ".GPUs", "missing or not a number");
    const double t = check_real(e["Time"].get<double>(), limits::kTraceSeconds, at + ".Time");
    if (!times.empty() && t < times.back()) throw InputError(at + ".Time", "entries not sorted by time");
    const double n = check_real(e["GPUs"].get<double>(), {0.0, static_cast<double>(limits::kTraceGpus.max)}, at + ".GPUs");
    if (n != std::floor(n)) throw InputError(at + ".GPUs", "must be a whole number of GPUs");
    times.push_back(t);
    series.gpus.push_back(static_cast<long long>(n));
  }
  // Sailor's JSON starts at Time 0; a later first entry starts the trace there (no GPUs before it).
  return trace_from_gpu_counts(path, times, {series}, times.back());
}

}  // namespace arachne
