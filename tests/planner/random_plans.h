// Random valid plans, for testing planners against a search that shares none of their code.
//
// draw_random_plan() draws one plan that passes validate_plan (sim/plan/plan_yaml.h) for a cluster, a model
// and a global batch. It is written from the plan schema (DESIGN.md "Plan") alone, independently of every
// planner's enumeration, and reaches any plan of this form:
//   - TP groups: each node's GPUs are cut into groups of a random tp (a power of two dividing the model's
//     heads and key/value heads, all GPUs of a group in one node, in rank order); a random subset of the
//     groups is used, so GPUs may stay idle;
//   - any number of pipelines (<= groups, <= global batch), each with any number of stages (<= its groups,
//     <= layers), each stage one or more TP groups that may mix GPU types, a random contiguous layer
//     partition per pipeline;
//   - per pipeline its own micro-batch size and count, the pipelines' samples summing exactly to the global
//     batch; each stage splits its micro-batch over its groups in random integer shares (share = k / micro_batch,
//     k >= 1);
//   - a random recompute policy, ZeRO-1 on or off, a schedule from RandomPlanSpace::schedules;
//   - MoE models: no EP, EP inside each stage (ep_scope stage: a random divisor of the stage's GPU count and
//     the expert count), or EP across blocks of `ep` consecutive pipelines of identical shape (ep_scope
//     pipelines, Megatron-Core), each with probability 1/3; even expert placement unless uneven_experts.
// Sequence parallelism and the interleaved schedule are not drawn.
//
// The distribution: counts are uniform over their ranges; groups per stage uniform over all compositions
// (stars and bars); layer partitions, batch splits and group shares half the time uniform over all
// compositions, half the time balanced (even layers, samples in proportion to GPUs, shares to TP degrees).
// It is not uniform over plans: it is meant to reach every dimension of the space, extreme and balanced
// plans alike, not to weigh them.
//
// Determinism: a seed gives the same plans on one platform (std::mt19937_64 with libstdc++'s
// uniform_int_distribution and std::shuffle, whose outputs the C++ standard does not fix across libraries).
//
// draw_fitting_plans() draws until `count` plans fit in memory, by the simulator's own check (a plan out of
// memory comes back from simulate_iteration with oom set, before any event runs), and returns them with their
// simulated results, so a caller comparing iteration times does not simulate them again.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "sim/exec/sim_result.h"
#include "sim/hw/topology.h"
#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne::test {

// Which optional dimensions a draw may use.
struct RandomPlanSpace {
  std::vector<Schedule> schedules = {Schedule::OneFOneB};  // drawn uniformly; Interleaved is not supported
  bool idle_gpus = true;        // may leave GPUs unused (with probability 1/3 per plan)
  bool uneven_experts = false;  // MoE: may give EP ranks uneven expert counts (`experts:` lists)
};

// One random valid plan for `global_batch` samples per iteration. Consumes draws from `rng`.
// Requires global_batch >= 1 and a cluster with at least one GPU; the plan is not checked for memory.
Plan draw_random_plan(const Cluster& cluster, const ModelConfig& model, long global_batch, std::mt19937_64& rng,
                      const RandomPlanSpace& space = {});

struct SimulatedPlan {
  Plan plan;
  SimResult result;  // simulate_iteration with SimOptions{} (seed 0, exact shortcuts)
};

struct FittingDraws {
  std::vector<SimulatedPlan> plans;  // in draw order; fewer than asked when max_attempts ran out
  int attempts = 0;                  // plans drawn, the rejected (out of memory) included
};

// Draws plans from a generator seeded with `seed` until `count` of them fit in memory, or `max_attempts`
// plans were drawn. Every plan is checked with validate_plan (a failure there is a generator bug: throws).
FittingDraws draw_fitting_plans(const Cluster& cluster, const Topology& topo, const ModelConfig& model, long global_batch,
                                int count, std::uint64_t seed, int max_attempts, const RandomPlanSpace& space = {});

}  // namespace arachne::test
