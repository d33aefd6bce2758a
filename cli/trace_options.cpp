#include "cli/trace_options.h"

#include <boost/program_options.hpp>

#include "cli/commands.h"
#include "sim/io/limits.h"

namespace arachne::cli {

namespace po = boost::program_options;

void add_trace_options(po::options_description& opts) {
  opts.add_options()("trace", po::value<std::string>()->value_name("FILE"), "availability trace")
      ("trace-format", po::value<std::string>()->value_name("F"), "native | alibaba-gpu-v2023 | skypilot | sailor-csv | sailor-json (default: detected)")
      ("nodes", po::value<std::string>()->value_name("N"), "alibaba: seeded node subset keeping the type mix")
      ("load-scale", po::value<std::string>()->value_name("X"), "alibaba: multiply the other tenants' load")
      ("window-start", po::value<std::string>()->value_name("S"), "alibaba: start of the time window replayed (seconds)")
      ("window-end", po::value<std::string>()->value_name("S"), "alibaba: end of the time window (seconds; default: the end)")
      ("seed", po::value<std::string>()->value_name("N")->default_value("0"), "seed of every random choice");
}

TraceLoadOptions trace_load_options(const po::variables_map& vm) {
  const auto text = [&vm](const char* name) { return vm[name].as<std::string>(); };
  TraceLoadOptions o;
  if (vm.count("trace-format")) o.format = text("trace-format");
  o.seed = parse_seed_flag("--seed", text("seed"));
  if (vm.count("nodes")) o.nodes = parse_small_int_flag("--nodes", text("nodes"), limits::kNodes);
  if (vm.count("load-scale")) o.load_scale = parse_double_flag("--load-scale", text("load-scale"), limits::kLoadScale);
  if (vm.count("window-start")) o.window_start_s = parse_double_flag("--window-start", text("window-start"), limits::kTraceSeconds);
  if (vm.count("window-end")) o.window_end_s = parse_double_flag("--window-end", text("window-end"), limits::kTraceSeconds);
  return o;
}

LoadedTrace load_trace_from(const po::variables_map& vm, const GpuCatalog& catalog) {
  return load_trace(vm["trace"].as<std::string>(), trace_load_options(vm), catalog);
}

}  // namespace arachne::cli
