// What one simulated training iteration reports (DESIGN.md, `simulate --json`).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/hw/topology.h"
#include "sim/model/memory.h"

namespace arachne {

// Seconds of the worker that finishes last, by cause; sums to the iteration time. Idle time is `bubble` while
// a neighbouring stage of the same pipeline has not reached the matching exchange, and `wait` while a peer of
// another pipeline (a holder of the same layers at the gradient reduction, an expert-parallel peer at an
// all-to-all) has not reached the collective; the collectives' own running time is dp_comm / ep_comm.
struct Breakdown {
  double compute = 0, tp_comm = 0, pp_comm = 0, dp_comm = 0, ep_comm = 0, bubble = 0, wait = 0, optimizer = 0;
  double sum() const { return compute + tp_comm + pp_comm + dp_comm + ep_comm + bubble + wait + optimizer; }
};

struct GpuMemoryReport {
  GpuId gpu = 0;
  std::string label;     // "n0:3"
  std::string gpu_type;
  double capacity_bytes = 0;
  MemoryBreakdown usage;
};

// One interval on a track of the timeline. Tracks: GPU g's compute stream is g; link class k is
// num_gpus + k; GPU g's communication stream (DP reduction, overlapping its compute) is num_gpus + 4 + g.
// Spans on a GPU stream never overlap (Chrome "X" events); link-class spans overlap freely (`overlaps`,
// written as async events).
struct TimelineSpan {
  int track = 0;
  std::string name;      // "F3 L0-11", "B3", "allreduce dp", "send 3->4", ...
  std::string cat;       // compute | tp_comm | pp_comm | dp_comm | ep_comm | wait | optimizer
  double start_s = 0, dur_s = 0;
  bool overlaps = false;
};

struct SimResult {
  bool oom = false;
  double iteration_time_s = 0;
  double tokens_per_s = 0, samples_per_s = 0;
  double tflops_per_gpu = 0;   // model FLOPs (no recompute) per second per GPU used, in TFLOP/s
  double mfu = 0;              // against the peaks of the GPUs the plan uses
  double mfu_cluster = 0;      // against every GPU of the cluster
  double peak_memory_gib = 0;  // of the GPU with the highest fraction of its memory in use
  MemoryBreakdown memory;      // bytes, of that same GPU
  std::string peak_memory_gpu; // its label
  std::vector<GpuMemoryReport> per_gpu_memory;  // every GPU the plan uses
  Breakdown breakdown;
  std::array<double, kLinkClasses> bytes{};     // nvlink, pcie, nic, spine
  double dropped_tokens = 0;
  std::uint64_t events = 0;
  double sim_wall_s = 0;
  std::vector<std::string> warnings;
  int gpus_used = 0;
  long global_batch = 0;
  std::vector<TimelineSpan> timeline;  // filled when requested
  int timeline_tracks = 0;
};

}  // namespace arachne
