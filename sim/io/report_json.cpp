#include "sim/io/report_json.h"

namespace arachne {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // GiB = 2^30 bytes (DESIGN.md "Units")

nlohmann::json memory_gib(const MemoryBreakdown& m) {
  return {{"weights", m.weights / kGiB},
          {"gradients", m.gradients / kGiB},
          {"optimizer", m.optimizer / kGiB},
          {"activations", m.activations / kGiB},
          {"other", m.other / kGiB}};
}

}  // namespace

nlohmann::json simulate_report_json(const SimResult& r) {
  const bool timed = has_timing(r);
  const auto timing = [timed](double v) { return timed ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json j;
  j["iteration_time_s"] = timing(r.iteration_time_s);
  j["tokens_per_s"] = timing(r.tokens_per_s);
  j["samples_per_s"] = timing(r.samples_per_s);
  j["tflops_per_gpu"] = timing(r.tflops_per_gpu);
  j["mfu"] = timing(r.mfu);
  j["mfu_cluster"] = timing(r.mfu_cluster);
  j["oom"] = r.oom;
  j["peak_memory_gib"] = r.peak_memory_gib;
  j["peak_memory_gpu"] = r.peak_memory_gpu;
  j["memory_gib"] = memory_gib(r.memory);
  if (timed) {
    const Breakdown& b = r.breakdown;
    j["breakdown_s"] = {{"compute", b.compute}, {"tp_comm", b.tp_comm},   {"pp_comm", b.pp_comm},
                        {"dp_comm", b.dp_comm}, {"ep_comm", b.ep_comm},   {"bubble", b.bubble}, {"wait", b.wait},
                        {"optimizer", b.optimizer}};
  } else {
    j["breakdown_s"] = nullptr;
  }
  j["bytes"] = {{"nvlink", r.bytes[0]}, {"pcie", r.bytes[1]}, {"nic", r.bytes[2]}, {"spine", r.bytes[3]}};
  j["dropped_tokens"] = r.dropped_tokens;
  j["events"] = r.events;
  j["sim_wall_s"] = r.sim_wall_s;
  j["warnings"] = r.warnings;
  j["gpus_used"] = r.gpus_used;
  j["global_batch"] = r.global_batch;
  if (!timed) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& g : r.per_gpu_memory) {
      nlohmann::json e = memory_gib(g.usage);
      e["gpu"] = g.label;
      e["type"] = g.gpu_type;
      e["capacity"] = g.capacity_bytes / kGiB;
      e["total"] = g.usage.total() / kGiB;
      list.push_back(std::move(e));
    }
    j["per_gpu_memory_gib"] = std::move(list);
  }
  return j;
}

}  // namespace arachne
