// Alibaba cluster-trace-gpu-v2023 ("openb", Weng et al., ATC'23) → AvailabilityTrace (DESIGN.md,
// "Availability traces and replay"; traces/README.md says the same in prose).
//
// Inputs: the pod list `openb_pod_list_default.csv` and, beside it, the node list
// `openb_node_list_gpu_node.csv`. The pod list has no node column, so pods are placed by this policy:
//
// Nodes. One trace node per node-list row (`sn,cpu_milli,memory_mib,gpu,model`), named by `sn`, with
//   `gpu` GPUs of the catalog type the GPU map (traces/alibaba_gpu_map.yaml) gives `model`. CPU and memory
//   are read and checked but not used for placement (GPU-only accounting).
// --nodes N (N > 0). A stratified subset: node models get N·count/total nodes each, rounded by largest
//   remainder (ties: model name ascending), so every model is within ±1 node of proportional; within a
//   model the nodes are a seeded uniform sample. Nodes keep file order. N > node count is an error.
// Pods. Only pods that ran occupy GPUs: `pod_phase` Running, Succeeded or Failed AND a `scheduled_time`.
//   Pending pods, pods without scheduled_time, zero-length pods (deletion == scheduled) and CPU-only pods
//   (`num_gpu` 0) occupy nothing. A pod that ran occupies [scheduled_time, deletion_time); an empty
//   deletion_time means until the end of the trace. `num_gpu` ≥ 1 with `gpu_milli` 1000 takes that many
//   whole GPUs; `num_gpu` 1 with `gpu_milli` < 1000 is a shared GPU: it takes gpu_milli/1000 of one GPU, and
//   a GPU carrying any tenant share is not free for the job (shares pack: several may sit on one GPU).
// --load-scale X (X ≥ 0). Each pod that ran is replicated floor(X) times, plus once more with probability
//   frac(X) (a seeded Bernoulli draw per pod, in file order); replicas have the pod's times.
// Placement. Pod instances in order of (scheduled_time, file line, replica); at equal times departures
//   come first. Nodes are tried in one seeded random order (fixed for the whole trace), first fit: a node
//   fits if its model is listed in `gpu_spec` (`|`-separated node models; empty = any) and has enough free
//   GPUs (whole pods: the lowest-numbered free GPUs) or, for a share, a GPU with room — preferring the
//   fullest partly-used GPU that fits (best fit), else an empty one. A pod that fits nowhere is skipped
//   for its whole life and counted in pods_skipped.
// Window. The placement is simulated from the trace's time 0; the returned trace covers
//   [window_start_s, window_end_s) shifted so window_start_s is time 0 (window_end_s -1: the last pod
//   deletion / scheduled time in the file). Events: at 0 one row per node (its free GPUs), then one per
//   node whose free-GPU count changes (events only on change). end_s = window length.
// Utilisation = 1 − (∫ free GPUs dt) / (total GPUs × window length): GPU-hours held by other tenants over
//   GPU-hours offered. Counts (placed / skipped) cover pod instances whose life overlaps the window.
// Randomness: independent splitmix64 streams derived from `seed` for subset, load replication and node
//   order — the same seed gives the same trace on every platform.
// Errors: a malformed row throws InputError("file:line: column", reason) (line 1-based, header = line 1);
//   an unknown node model throws at the node list's `model` column; a bad option throws with the flag name.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "sim/trace/availability.h"

namespace arachne {

struct AlibabaOptions {
  std::uint64_t seed = 0;
  int nodes = 0;  // 0: all
  double load_scale = 1.0;
  double window_start_s = 0, window_end_s = -1;  // -1: to the end
  std::string gpu_map_path;  // empty: traces/alibaba_gpu_map.yaml under the source dir
};

struct AlibabaLoad {
  AvailabilityTrace trace;
  double utilisation = 0;  // GPU-hours occupied by other tenants / GPU-hours offered, over the window
  int pods_placed = 0, pods_skipped = 0;  // pod instances (after --load-scale) that ran, overlapping the window
  int pods_not_run = 0;   // pods (file rows) that occupy nothing: never ran, zero length, or CPU-only
  int tenant_gpus_peak = 0;  // most GPUs held by tenants at once, within the window
};

// Node model (`model` column) → catalog GPU type. Throws InputError("file:line: key", …) on a malformed map.
std::map<std::string, std::string> load_alibaba_gpu_map(const std::string& path);

// Default location of the GPU map: <source dir>/traces/alibaba_gpu_map.yaml.
std::string default_alibaba_gpu_map_path();

AlibabaLoad load_alibaba_trace(const std::string& pod_list_path, const AlibabaOptions& options);

}  // namespace arachne
