// `arachne trace generate`: writes a seeded synthetic multi-tenant availability trace in the native format
// (sim/trace/trace_generate.h; model in traces/README.md, "Synthetic traces").
#include <boost/program_options.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/commands.h"
#include "sim/hw/gpu.h"
#include "sim/io/atomic_file.h"
#include "sim/io/input_error.h"
#include "sim/io/numbers.h"
#include "sim/trace/trace_generate.h"

namespace arachne::cli {

int run_trace_generate(const std::vector<std::string>& args);

namespace {

const char* kGenerateHelp = R"(arachne trace generate - write a synthetic availability trace (native CSV)

Simulates other tenants sharing a cluster and writes, per node over time, how many GPUs they leave free
for your job (the native trace format of traces/README.md, ready for `arachne replay --trace`). Tenants
arrive at random (more by day than by night), ask for 1, 2, 4 or 8 GPUs, prefer one GPU type, hold their
GPUs for an exponentially distributed time and leave; optional spot reclaims take whole nodes away for a
while. The arrival rate is set so that on average a fraction --load of the GPUs is held by tenants.
The same --seed always gives the same file.

Usage:
  arachne trace generate --out FILE.csv [--seed N] [--duration S] [--nodes TYPE:COUNT,...]
                         [--load X | --arrivals-per-hour X] [--mean-duration S]
                         [--daily-amplitude X] [--spot-reclaims-per-day X]

Example (two days, 8 A100-80 and 8 T4 nodes, half the GPUs busy, a few spot reclaims):
  arachne trace generate --out /tmp/busy.csv --seed 1 --duration 172800 \
      --nodes A100-80:8,T4:8 --load 0.5 --spot-reclaims-per-day 3

Options)";

std::vector<std::pair<std::string, int>> parse_nodes(const std::string& text) {
  std::vector<std::pair<std::string, int>> out;
  long long total = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const std::size_t colon = item.rfind(':');
    if (item.empty() || colon == std::string::npos || colon == 0)
      throw InputError("--nodes", "'" + item + "' is not TYPE:COUNT (e.g. A100-80:16,T4:8)");
    const int count = parse_small_int_flag("--nodes", item.substr(colon + 1), limits::kNodes);
    out.emplace_back(item.substr(0, colon), count);
    total += count;
    pos = comma + 1;
  }
  check_integer(total, limits::kNodes, "--nodes");
  return out;
}

}  // namespace

int run_trace_generate(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  const GenerateOptions defaults;
  po::options_description opts("");
  opts.add_options()("help", "this help")
      ("out", po::value<std::string>()->value_name("FILE.csv"), "where to write the trace (required)")
      ("seed", po::value<std::string>()->value_name("N")->default_value("0"), "random seed")
      ("duration", po::value<std::string>()->value_name("S")->default_value("604800"), "trace length, seconds (default 7 days)")
      ("nodes", po::value<std::string>()->value_name("TYPE:COUNT,...")->default_value("A100-80:16,V100-32:16,T4:16"),
       "node groups; GPUs per node from the catalog's default node")
      ("load", po::value<std::string>()->value_name("X"), "mean fraction of GPUs held by tenants, in [0, 1) (default 0.7)")
      ("arrivals-per-hour", po::value<std::string>()->value_name("X"), "fixed tenant arrival rate instead of --load")
      ("mean-duration", po::value<std::string>()->value_name("S")->default_value("14400"), "mean tenant holding time, seconds")
      ("daily-amplitude", po::value<std::string>()->value_name("X")->default_value("0.3"),
       "daily cycle: arrival rate x (1 + X sin(2 pi t / 1 day)), X in [0, 1]")
      ("spot-reclaims-per-day", po::value<std::string>()->value_name("X")->default_value("0"),
       "whole-node reclaims per day over the cluster (mean 2 h each)");
  po::variables_map vm;
  if (const int rc = parse_options(args, opts, vm, "trace generate"); rc >= 0) return rc;
  if (vm.count("help")) {
    std::cout << kGenerateHelp << "\n" << opts;
    return kExitOk;
  }
  if (!vm.count("out")) return input_error("--out", "required (the CSV file to write)");
  try {
    GenerateOptions o = defaults;
    o.seed = parse_seed_flag("--seed", vm["seed"].as<std::string>());
    const std::string out = vm["out"].as<std::string>();
    check_output_path("--out", out);
    o.duration_s = parse_double_flag("--duration", vm["duration"].as<std::string>(),
                                     {0.0, limits::kTraceSeconds.max, true});
    o.node_types = parse_nodes(vm["nodes"].as<std::string>());
    if (vm.count("load") && vm.count("arrivals-per-hour"))
      return input_error("--arrivals-per-hour", "give either --load or --arrivals-per-hour, not both");
    if (vm.count("load")) {
      o.load = parse_double_flag("--load", vm["load"].as<std::string>(), limits::kFraction);
    }
    if (vm.count("arrivals-per-hour")) {
      o.tenant_arrivals_per_hour = parse_double_flag("--arrivals-per-hour", vm["arrivals-per-hour"].as<std::string>(), limits::kEventRate);
      o.load = -1;  // unscaled: the rate is taken as given
    }
    o.mean_duration_s = parse_double_flag("--mean-duration", vm["mean-duration"].as<std::string>(),
                                          {1.0, limits::kTraceSeconds.max});
    o.daily_amplitude = parse_double_flag("--daily-amplitude", vm["daily-amplitude"].as<std::string>(), limits::kFraction);
    o.spot_reclaims_per_day =
        parse_double_flag("--spot-reclaims-per-day", vm["spot-reclaims-per-day"].as<std::string>(), limits::kEventRate);
    const GpuCatalog catalog = GpuCatalog::load_default();
    const AvailabilityTrace trace = generate_trace(o, catalog);
    write_text_atomically(out, to_native_csv(trace));
    long long gpus = 0;
    for (const auto& n : trace.nodes) gpus += n.capacity;
    std::fprintf(stderr, "trace generate: wrote %s (%zu nodes, %lld GPUs, %zu events, %.0f s)\n", out.c_str(),
                 trace.nodes.size(), gpus, trace.events.size(), trace.end_s);
  } catch (const InputError& e) {
    return input_error(e.where(), e.reason());
  }
  return kExitOk;
}

}  // namespace arachne::cli
