// Runs one case of bench_iteration a given number of times without timing, for instruction-count
// profilers, which are stable on a loaded machine where wall time is not:
//   valgrind --tool=callgrind build/profile_iteration gpt3|mixtral|moe-leaves [runs] [full|unbundled]
// The instructions of one steady-state iteration (route cache warm, as in the benchmark loop) are the
// count for 2 runs minus the count for 1. `full` turns the exact shortcuts off, `unbundled` only the
// checked bundles (all-to-all and ring edges).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/iteration_cases.h"

int main(int argc, char** argv) {
  using namespace arachne;
  const std::string name = argc > 1 ? argv[1] : "gpt3";
  if (name != "gpt3" && name != "mixtral" && name != "moe-leaves") {
    std::fprintf(stderr, "usage: profile_iteration gpt3|mixtral|moe-leaves [runs] [full|unbundled]\n");
    return 2;
  }
  const int runs = argc > 2 ? std::atoi(argv[2]) : 1;
  const IterationCase c = name == "gpt3"      ? gpt3_175b_case()
                          : name == "mixtral" ? mixtral_case()
                                              : moe_across_leaves_case();
  SimOptions opt;
  opt.ignore_memory = name == "mixtral";  // as bench_iteration
  const std::string mode = argc > 3 ? argv[3] : "";
  opt.exact_shortcuts = mode != "full";
  opt.checked_bundles = mode != "unbundled";
  SimResult r;
  for (int i = 0; i < runs; ++i) r = simulate_iteration(c.cluster, c.topo, c.model, c.plan, opt);
  std::printf("iteration %.17g s, %llu events, breakdown compute %.17g pp %.17g dp %.17g ep %.17g bubble %.17g wait %.17g, nic bytes %.17g\n",
              r.iteration_time_s, static_cast<unsigned long long>(r.events), r.breakdown.compute, r.breakdown.pp_comm,
              r.breakdown.dp_comm, r.breakdown.ep_comm, r.breakdown.bubble, r.breakdown.wait, r.bytes[static_cast<int>(LinkClass::Nic)]);
  return 0;
}
