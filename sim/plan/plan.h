// A parallel execution plan: data-parallel pipelines (which may differ in structure), their stages, and
// the TP groups that split each stage's micro-batch (stage-level data parallelism, as in Metis).
// Schema: DESIGN.md "Plan". Parsed, validated and written back as YAML by sim/plan/plan_yaml.h.
//
// Interleaved schedules (Narayanan et al. SC'21 §2.2, Megatron's virtual pipeline stages): with
// `schedule: interleaved` and `interleave: V`, a pipeline lists pp*V stages in execution (layer) order,
// and stage j runs on exactly the TP groups of physical stage j % pp (same GPUs in the same order, same
// tp and shares). So stage j and stage j+pp share GPUs: GPU p holds model chunks p, p+pp, p+2pp, ...
// This is the only way a GPU may appear twice, and only inside one pipeline; validate_plan enforces
// the pattern. The shorthand `--pp P --interleave V` builds exactly this form (layers split into P*V chunks).
//
// Source lines: every element read from YAML remembers the 0-based yaml-cpp line of its mapping
// (`line`, -1 when the plan was built in code), so validation errors can say "file:line: field".
// Pass them to file_where() unchanged (it prints them 1-based).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "sim/hw/cluster.h"
#include "sim/model/layer_costs.h"

namespace arachne {

enum class Schedule { OneFOneB, GPipe, Interleaved };
enum class EpScope { Pipelines, Stage };
const char* to_string(Schedule s);
const char* to_string(Recompute r);
const char* to_string(EpScope s);
// Inverses of to_string ("1f1b"|"gpipe"|"interleaved", "none"|"selective"|"full", "pipelines"|"stage").
// Throw std::invalid_argument whose what() is the reason, e.g. "unknown schedule 'zb' (expected one of:
// 1f1b, gpipe, interleaved)". For flags such as --schedule and --recompute as well as for plan YAML.
Schedule parse_schedule(const std::string& text);
Recompute parse_recompute(const std::string& text);
EpScope parse_ep_scope(const std::string& text);

struct TpGroup {
  std::vector<GpuId> gpus;  // in rank order
  int tp = 1;
  double share = 1.0;       // fraction of the stage's micro-batch this group processes
  std::string selector;     // as written ("n0:0-3"), for messages and YAML round trip
  int line = -1;            // 0-based YAML line of this group, -1 if not read from a file
};

struct Stage {
  int layer_begin = 0;  // half-open [layer_begin, layer_end)
  int layer_end = 0;
  std::vector<TpGroup> groups;
  int ep = 1;
  EpScope ep_scope = EpScope::Pipelines;
  std::vector<int> experts;  // experts per EP rank; empty = even
  int line = -1;             // 0-based YAML line of this stage, -1 if not read from a file
};

struct Pipeline {
  int micro_batch = 1;
  int micro_batches = 1;
  std::vector<Stage> stages;
  int line = -1;  // 0-based YAML line of this pipeline, -1 if not read from a file
  long samples() const { return static_cast<long>(micro_batch) * micro_batches; }
};

struct Plan {
  Schedule schedule = Schedule::OneFOneB;
  int interleave = 1;
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;
  bool zero1 = false;
  bool overlap_grad_reduce = true;
  std::vector<Pipeline> pipelines;
  // 0-based YAML lines of top-level keys (-1 when absent or built in code), for validation messages.
  int schedule_line = -1;
  int interleave_line = -1;
  int pipelines_line = -1;

  long global_batch() const;  // Σ micro_batch·micro_batches over pipelines
  int num_gpus() const;       // distinct GPUs used (an interleaved GPU counts once)
  // Physical pipeline depth of pipeline i: its stage count, divided by `interleave` when interleaved.
  int physical_stages(int pipeline) const;
};

// Every field of `plan` that its execution depends on, packed into a string: two plans with equal keys run
// the same way (the simulator and the planners' estimators give them the same times); the YAML source lines
// and the selectors as written are left out. For memoising the pricing of plans built twice.
std::string execution_key(const Plan& plan);

// Megatron-style homogeneous shorthand (DESIGN.md): tp*pp*dp GPUs from the nodes in listing order,
// ranked TP fastest, then DP, then PP; even layer split.
struct Shorthand {
  int tp = 1, pp = 1, dp = 1, ep = 1;
  int micro_batch = 1;
  std::optional<long> global_batch{};
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;
  int interleave = 1;
  bool zero1 = false;
  Schedule schedule = Schedule::OneFOneB;
};

}  // namespace arachne
