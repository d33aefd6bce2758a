// The label search of `arachne gen-data`: for one sampled configuration, the best templates an expensive
// search finds, with every candidate it priced.
//
// Steps:
//   1. candidates: the heuristic generator's templates, the first templates of the restricted enumeration
//      in token order (planner/template/enumerate.h; capped by count, never by wall time, so labels are
//      reproducible) and `sampled` templates of the same space drawn by seeded random walks (the capped
//      enumeration alone sees only one corner of a large space), without repeats;
//   2. price: each template completed (planner/template/completion.h) with the fast estimator as the
//      pricer; its best completion's estimate is the template's; then `refine_rounds` rounds of local moves
//      (planner/template/neighbors.h) from the `refine_width` best-priced templates, priced alike;
//   3. judge: the `simulate_top` templates with the best estimates simulated (their best completion);
//   4. labels: the `labels` fastest simulated templates, best first, as token sequences;
//   5. reference: on clusters of at most `oracle_max_gpus` GPUs the oracle (no phase-0 seeds, a simulation
//      cap) runs too, and its time is kept where its search completes, to compare the labels with.
#pragma once
#include <string>

#include "planner/arachne/config_sampler.h"
#include "planner/arachne/dataset.h"
#include "planner/template/enumerate.h"

namespace arachne::planner {

struct LabelOptions {
  EnumerationLimits enumeration{.max_templates = 1500, .max_wall_s = 0, .max_classes = 2, .max_stages = 8,
                                .max_types_per_stage = 2, .divisor_counts = true};
  int heuristic = 16;        // templates from the heuristic generator
  int sampled = 300;         // templates drawn by random walks (seeded by the configuration)
  int completions = 2;       // completed plans priced per template
  int refine_rounds = 0;     // rounds of local moves from the best-priced templates (0: none)
  int refine_width = 4;      // templates whose neighbours are priced each round
  long refine_max = 2000;    // new templates priced by the local moves, at most
  int simulate_top = 8;      // templates simulated
  int labels = 4;            // templates kept as labels
  int oracle_max_gpus = 4;   // run the oracle on clusters up to this size (0: never)
  long oracle_simulations = 20000;

  // Every option, as text (for the gen-data options check and the file's metadata).
  std::string text() const;
};

// The dataset's schema for this build (vocabulary and feature names).
DatasetSchema dataset_schema();

// Thread-safe (shares nothing between calls).
ConfigRecord label_config(const SampledConfig& cfg, const LabelOptions& opt);

}  // namespace arachne::planner
