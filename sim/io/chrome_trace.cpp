#include "sim/io/chrome_trace.h"

#include <set>

#include "sim/io/atomic_file.h"

namespace arachne {

std::vector<std::string> timeline_track_names(const Cluster& cluster) {
  std::vector<std::string> names;
  const int n = cluster.total_gpus();
  names.reserve(static_cast<std::size_t>(n) + 4);
  for (GpuId g = 0; g < n; ++g) names.push_back(cluster.gpu_label(g) + " " + cluster.group_of_node(cluster.node_of(g)).gpu);
  for (const char* c : {"nvlink", "pcie", "nic", "spine"}) names.push_back(std::string("link ") + c);
  for (GpuId g = 0; g < n; ++g)
    names.push_back(cluster.gpu_label(g) + " " + cluster.group_of_node(cluster.node_of(g)).gpu + " DP comm");
  return names;
}

nlohmann::json chrome_trace_json(const SimResult& r, const std::vector<std::string>& track_names) {
  constexpr double kUsPerS = 1e6;  // trace-event timestamps are in microseconds
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0},
                    {"args", {{"name", "arachne simulate"}}}});
  std::set<int> tracks;  // ordered: metadata in track order
  for (const auto& s : r.timeline) tracks.insert(s.track);
  for (const int t : tracks) {
    const std::string name = t >= 0 && t < static_cast<int>(track_names.size()) ? track_names[static_cast<std::size_t>(t)]
                                                                                : "track " + std::to_string(t);
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", t}, {"args", {{"name", name}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", t},
                      {"args", {{"sort_index", t}}}});
  }
  long async_id = 0;
  for (const auto& s : r.timeline) {
    if (s.overlaps) {
      // Overlapping transfers on a link class: async begin/end pairs, which trace viewers stack freely.
      const nlohmann::json base = {{"name", s.name}, {"cat", s.cat}, {"pid", 0}, {"tid", s.track}, {"id", ++async_id}};
      nlohmann::json b = base, e = base;
      b["ph"] = "b";
      b["ts"] = s.start_s * kUsPerS;
      e["ph"] = "e";
      e["ts"] = (s.start_s + s.dur_s) * kUsPerS;
      events.push_back(std::move(b));
      events.push_back(std::move(e));
      continue;
    }
    events.push_back({{"name", s.name},
                      {"cat", s.cat},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", s.track},
                      {"ts", s.start_s * kUsPerS},
                      {"dur", s.dur_s * kUsPerS}});
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

void write_chrome_trace(const std::string& path, const SimResult& r, const std::vector<std::string>& track_names) {
  write_text_atomically(path, chrome_trace_json(r, track_names).dump() + "\n");
}

}  // namespace arachne
