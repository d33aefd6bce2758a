// Counts the templates of the token space (planner/template/enumerate.h) for a cluster and a model, and
// the time the walk takes:
//   build/template_space CLUSTER MODEL [--classes K] [--stages S] [--types T] [--divisors] [--blocks] [--max N] [--wall SECONDS]
// e.g. build/template_space A100-80:2x8,V100-32:2x8 gpt3-1.3b --classes 2 --stages 4
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "planner/template/enumerate.h"
#include "sim/io/input_error.h"

int main(int argc, char** argv) {
  using namespace arachne;
  using namespace arachne::planner;
  if (argc < 3) {
    std::fprintf(stderr, "usage: template_space CLUSTER MODEL [--classes K] [--stages S] [--types T] [--divisors] [--blocks] [--max N] [--wall S]\n");
    return 2;
  }
  EnumerationLimits limits;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--divisors") limits.divisor_counts = true;
    else if (a == "--blocks") limits.type_blocks = true;
    else if (a == "--classes" && has_value) limits.max_classes = std::atoi(argv[++i]);
    else if (a == "--stages" && has_value) limits.max_stages = std::atoi(argv[++i]);
    else if (a == "--types" && has_value) limits.max_types_per_stage = std::atoi(argv[++i]);
    else if (a == "--max" && has_value) limits.max_templates = std::atol(argv[++i]);
    else if (a == "--wall" && has_value) limits.max_wall_s = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "template_space: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    const Cluster cluster = load_cluster(argv[1], GpuCatalog::load_default());
    const ModelConfig model = load_model(argv[2]);
    const auto start = std::chrono::steady_clock::now();
    const TokenWalk w = walk_template_tokens(cluster, model, limits, [](const std::vector<int>&) { return true; });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s %s: %ld templates%s, %ld grammar states, %.2f s\n", argv[1], argv[2], w.templates,
                w.complete ? "" : " (stopped by a cap: incomplete)", w.states, s);
  } catch (const InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
