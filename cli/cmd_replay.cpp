// `arachne replay` (a job's life over an availability trace, per planner) and `arachne trace convert|stats`.
#include <boost/program_options.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "planner/planner.h"
#include "planner/replay_planner.h"
#include "sim/hw/topology.h"
#include "sim/io/atomic_file.h"
#include "sim/io/hdf5_writer.h"
#include "sim/io/input_error.h"
#include "sim/io/replay_h5.h"
#include "sim/io/units.h"
#include "sim/trace/replay.h"
#include "sim/trace/trace_formats.h"

namespace arachne::cli {
namespace {

namespace po = boost::program_options;

const char* kReplayHelp = R"(arachne replay - how much training each planner gets done over an availability trace

Replays a trace of which GPUs the job may use over time. At t = 0 and at every change the planner replans
on the GPUs available; planning time, reconfiguration (checkpoint load + restart), periodic checkpoints,
work lost when GPUs in use disappear, and waiting when nothing fits are charged as DESIGN.md states.
Each plan is measured in the simulator. A job whose GPUs all remain takes a better new plan once keeping its plan has
cost as many tokens as the switch (--switch break-even, the default) or at once (--switch always).

Usage:
  arachne replay --trace FILE [--trace-format F] [--cluster FILE] --model M --planner NAME[,NAME...]
                 [--until S] [--planning-time measured|SECONDS] [--checkpoint-interval S]
                 [--storage-bandwidth "2 GB/s"] [--restart S] [--coalesce S] [--global-batch N]
                 [--budget N] [--budget-wall S] [--no-warm-start] [--switch break-even|always]
                 [--nodes N] [--load-scale X] [--out F.h5] [--json] [--seed N]

Example:
  arachne replay --trace traces/example-native.csv --model gpt3-1.3b --planner megatron --planning-time 5

Options)";

const char* kTraceHelp = R"(arachne trace - availability traces

Usage:
  arachne trace convert --trace FILE [--trace-format F] [--nodes N] [--load-scale X] --out FILE.csv
  arachne trace stats   --trace FILE [--trace-format F] [--nodes N] [--load-scale X] [--json]
  arachne trace plot    --trace FILE [--trace-format F] --out FILE.png     (GPUs available per type over time)
  arachne trace generate --out FILE.csv [--seed N] [--duration S] [--nodes "A100-80:16,V100-32:16"] [--load X]
                         (a seeded synthetic multi-tenant trace; 'arachne trace generate --help')

convert writes any accepted format as the native CSV (time_s,node,gpu_type,gpus; traces/README.md);
stats prints the nodes, changes, change rate, GPU-hours per type and the share of capacity available.

Options)";

double parse_seconds_flag(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw InputError(flag, "expected a number of seconds >= 0, got '" + text + "'");
}

LoadedTrace load_from(const po::variables_map& vm, const GpuCatalog& catalog) {
  TraceLoadOptions o;
  if (vm.count("trace-format")) o.format = vm["trace-format"].as<std::string>();
  o.seed = parse_seed_flag("--seed", vm["seed"].as<std::string>());
  if (vm.count("nodes")) o.nodes = static_cast<int>(parse_int_flag("--nodes", vm["nodes"].as<std::string>(), 1));
  if (vm.count("load-scale")) o.load_scale = parse_seconds_flag("--load-scale", vm["load-scale"].as<std::string>());
  if (vm.count("window-start")) o.window_start_s = parse_seconds_flag("--window-start", vm["window-start"].as<std::string>());
  if (vm.count("window-end")) o.window_end_s = parse_seconds_flag("--window-end", vm["window-end"].as<std::string>());
  return load_trace(vm["trace"].as<std::string>(), o, catalog);
}

void add_trace_options(po::options_description& o) {
  o.add_options()("trace", po::value<std::string>()->value_name("FILE"), "availability trace")
      ("trace-format", po::value<std::string>()->value_name("F"), "native | alibaba-gpu-v2023 | skypilot | sailor-csv | sailor-json (default: detected)")
      ("nodes", po::value<std::string>()->value_name("N"), "alibaba: seeded node subset keeping the type mix")
      ("load-scale", po::value<std::string>()->value_name("X"), "alibaba: multiply the other tenants' load")
      ("window-start", po::value<std::string>()->value_name("S"), "alibaba: start of the time window replayed (seconds)")
      ("window-end", po::value<std::string>()->value_name("S"), "alibaba: end of the time window (seconds; default: the end)")
      ("seed", po::value<std::string>()->value_name("N")->default_value("0"), "seed of every random choice");
}

}  // namespace

int run_trace(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    po::options_description o("");
    add_trace_options(o);
    std::cout << kTraceHelp << "\n" << o;
    return args.empty() ? input_error("trace", "which subcommand? convert, stats, plot or generate (see 'arachne trace --help')")
                        : kExitOk;
  }
  const std::string sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "generate") return run_trace_generate(rest);
  if (sub == "plot") return run_trace_plot(rest);
  po::options_description opts("");
  add_trace_options(opts);
  opts.add_options()("help", "this help")("out", po::value<std::string>()->value_name("FILE"), "convert: output CSV")
      ("json", po::bool_switch(), "stats: one JSON object on stdout");
  po::variables_map vm;
  if (const int rc = parse_options(rest, opts, vm, "trace " + sub); rc >= 0) return rc;
  if (vm.count("help")) {
    std::cout << kTraceHelp << "\n" << opts;
    return kExitOk;
  }
  if (!vm.count("trace")) return input_error("--trace", "required");
  const GpuCatalog catalog = GpuCatalog::load_default();
  if (sub == "convert") {
    if (!vm.count("out")) return input_error("--out", "required (the native CSV to write)");
    const LoadedTrace t = load_from(vm, catalog);
    write_text_atomically(vm["out"].as<std::string>(), to_native_csv(t.trace));
    return kExitOk;
  }
  if (sub == "stats") {
    const LoadedTrace t = load_from(vm, catalog);
    const TraceStats s = trace_stats(t.trace);
    nlohmann::json j = {{"format", t.format},         {"duration_s", s.duration_s}, {"nodes", s.nodes},
                        {"changes", s.changes},       {"changes_per_hour", s.changes_per_hour},
                        {"gpu_hours", s.gpu_hours},   {"capacity_gpus", s.capacity},
                        {"availability", s.availability}};
    if (t.tenant_utilisation >= 0) j["tenant_utilisation"] = t.tenant_utilisation;
    if (vm["json"].as<bool>()) {
      std::cout << j.dump() << "\n";
      return kExitOk;
    }
    std::printf("trace %s (%s): %d nodes, %.1f h, %d changes (%.2f per hour), %.1f %% of capacity available\n",
                vm["trace"].as<std::string>().c_str(), t.format.c_str(), s.nodes, s.duration_s / 3600, s.changes,
                s.changes_per_hour, 100 * s.availability);
    for (const auto& [type, c] : s.capacity)
      std::printf("  %-10s %5d GPUs, %12.1f GPU-hours available\n", type.c_str(), c, s.gpu_hours.count(type) ? s.gpu_hours.at(type) : 0.0);
    if (t.tenant_utilisation >= 0) std::printf("  other tenants' utilisation: %.1f %%\n", 100 * t.tenant_utilisation);
    return kExitOk;
  }
  return input_error(sub, "unknown trace subcommand (convert, stats, plot, generate)");
}

int run_replay(const std::vector<std::string>& args, const std::string& command_line) {
  po::options_description opts("");
  add_trace_options(opts);
  opts.add_options()("help", "this help")
      ("cluster", po::value<std::string>()->value_name("FILE"), "link properties per GPU type (node groups matched by type)")
      ("model", po::value<std::string>()->value_name("M"), "model YAML or bundled name")
      ("planner", po::value<std::string>()->value_name("NAMES"), "planner(s), comma-separated")
      ("global-batch", po::value<std::string>()->value_name("N"), "global batch (default: the model's)")
      ("until", po::value<std::string>()->value_name("S"), "end of the replay in seconds (default: the trace's end)")
      ("planning-time", po::value<std::string>()->value_name("T")->default_value("measured"), "measured | SECONDS charged per replan")
      ("checkpoint-interval", po::value<std::string>()->value_name("S")->default_value("1800"), "seconds of training between checkpoints (0: none)")
      ("storage-bandwidth", po::value<std::string>()->value_name("BW")->default_value("2 GB/s"), "checkpoint save/load bandwidth")
      ("restart", po::value<std::string>()->value_name("S")->default_value("60"), "process restart on reconfiguration, seconds")
      ("coalesce", po::value<std::string>()->value_name("S")->default_value("0"), "merge changes closer than this")
      ("budget", po::value<std::string>()->value_name("N")->default_value("2000"), "planner evaluations per replan")
      ("budget-wall", po::value<std::string>()->value_name("S"), "wall-clock cap per replan, seconds (default: none)")
      ("switch", po::value<std::string>()->value_name("RULE")->default_value("break-even"), "break-even | always: when a running job takes a new plan")
      ("no-warm-start", po::bool_switch(), "do not give the planner the plan the job runs (arachne: no warm-start template)")
      ("out", po::value<std::string>()->value_name("F.h5"), "intervals and totals per planner as HDF5, and F.png (throughput and cumulative tokens)")
      ("json", po::bool_switch(), "one JSON object on stdout");
  po::variables_map vm;
  if (const int rc = parse_options(args, opts, vm, "replay"); rc >= 0) return rc;
  if (vm.count("help")) {
    std::cout << kReplayHelp << "\n" << opts;
    return kExitOk;
  }
  for (const char* f : {"trace", "model", "planner"})
    if (!vm.count(f)) return input_error(std::string("--") + f, "required");
  const GpuCatalog catalog = GpuCatalog::load_default();
  const ModelConfig model = load_model(vm["model"].as<std::string>());
  std::optional<Cluster> tmpl;
  if (vm.count("cluster")) tmpl = load_cluster(vm["cluster"].as<std::string>(), catalog);
  ReplayOptions ro;
  ro.link_template = tmpl ? &*tmpl : nullptr;
  if (vm.count("until")) ro.until_s = parse_seconds_flag("--until", vm["until"].as<std::string>());
  const std::string pt = vm["planning-time"].as<std::string>();
  if (pt != "measured") ro.fixed_planning_s = parse_seconds_flag("--planning-time", pt);
  ro.checkpoint_interval_s = parse_seconds_flag("--checkpoint-interval", vm["checkpoint-interval"].as<std::string>());
  ro.restart_s = parse_seconds_flag("--restart", vm["restart"].as<std::string>());
  ro.coalesce_s = parse_seconds_flag("--coalesce", vm["coalesce"].as<std::string>());
  const std::string rule = vm["switch"].as<std::string>();
  if (rule == "always") ro.switch_rule = SwitchRule::Always;
  else if (rule != "break-even") return input_error("--switch", "unknown rule '" + rule + "' (known: break-even, always)");
  try {
    ro.storage_bandwidth = units::parse_bandwidth(vm["storage-bandwidth"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    return input_error("--storage-bandwidth", e.what());
  }
  const long gb = vm.count("global-batch") ? parse_int_flag("--global-batch", vm["global-batch"].as<std::string>(), 1)
                                           : model.global_batch;
  const long budget = parse_int_flag("--budget", vm["budget"].as<std::string>(), 1);
  const double budget_wall = vm.count("budget-wall") ? parse_seconds_flag("--budget-wall", vm["budget-wall"].as<std::string>()) : 0;
  const bool warm_start = !vm["no-warm-start"].as<bool>();
  std::vector<std::string> names;
  {
    std::stringstream ss(vm["planner"].as<std::string>());
    std::string n;
    while (std::getline(ss, n, ',')) names.push_back(n);
  }
  std::vector<std::unique_ptr<planner::Planner>> planners;
  for (const auto& n : names) planners.push_back(planner::make_planner(n));  // unknown name: exit 2
  std::string out_path;
  if (vm.count("out")) out_path = vm["out"].as<std::string>();
  const LoadedTrace trace = load_from(vm, catalog);

  nlohmann::json results = nlohmann::json::array();
  std::vector<std::pair<std::string, ReplayResult>> all;
  for (auto& p : planners) {
    std::fprintf(stderr, "replay: %s over %s (%zu nodes, %.1f h)\n", p->name().c_str(), trace.trace.source.c_str(),
                 trace.trace.nodes.size(), (ro.until_s >= 0 ? ro.until_s : trace.trace.end_s) / 3600);
    const bool tty = isatty(fileno(stderr)) != 0;
    long planned = 0;
    planner::ReplanSettings settings;
    settings.budget_evaluations = budget;
    settings.budget_wall_s = budget_wall;
    settings.seed = parse_seed_flag("--seed", vm["seed"].as<std::string>());
    settings.warm_start = warm_start;
    // Progress on a terminal: distinct snapshots planned so far (repeated snapshots come from the cache).
    const ReplanCallback cb = planner::replan_callback(*p, model, settings, [&] {
      if (tty && ++planned % 10 == 0) std::fprintf(stderr, "\rreplay: %s: %ld snapshots planned", p->name().c_str(), planned);
    });
    ReplayResult r = replay(trace.trace, catalog, model, gb, cb, ro);
    if (tty && planned >= 10) std::fprintf(stderr, "\n");
    const ReplayTotals& t = r.totals;
    results.push_back({{"planner", p->name()},
                       {"tokens_trained", t.tokens_trained},
                       {"effective_tokens_per_s", t.effective_tokens_per_s},
                       {"downtime_s", {{"planning", t.planning_s}, {"reconfig", t.reconfig_s},
                                       {"checkpoint", t.checkpoint_s}, {"idle", t.idle_s}}},
                       {"work_lost_s", t.work_lost_s},
                       {"replans", t.replans}});
    all.emplace_back(p->name(), std::move(r));
  }
  if (!out_path.empty()) {
    h5::RunInfo info{ARACHNE_VERSION, command_line, 0, model.to_yaml()};
    h5::write_h5_atomically(out_path, info, [&](h5::File& f) {
      for (const auto& [name, r] : all) write_replay_tables(f, "/" + name, r);
    });
  }
  if (!out_path.empty()) {
    std::string png = out_path;
    if (png.size() > 3 && png.compare(png.size() - 3, 3, ".h5") == 0) png.resize(png.size() - 3);
    plot_replay_png(out_path, png + ".png");
  }
  if (vm["json"].as<bool>()) {
    std::cout << nlohmann::json{{"results", results}}.dump() << "\n";
  } else {
    for (const auto& r : results)
      std::printf("%-10s %14.4g tokens, %10.1f tokens/s effective, %d replans, downtime: planning %.1f s, reconfig %.1f s, checkpoint %.1f s, idle %.1f s; work lost %.1f s\n",
                  r["planner"].get<std::string>().c_str(), r["tokens_trained"].get<double>(),
                  r["effective_tokens_per_s"].get<double>(), r["replans"].get<int>(),
                  r["downtime_s"]["planning"].get<double>(), r["downtime_s"]["reconfig"].get<double>(),
                  r["downtime_s"]["checkpoint"].get<double>(), r["downtime_s"]["idle"].get<double>(),
                  r["work_lost_s"].get<double>());
  }
  return kExitOk;
}

}  // namespace arachne::cli
