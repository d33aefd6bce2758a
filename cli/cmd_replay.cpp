// `arachne replay` (a job's life over an availability trace, per planner) and `arachne trace convert|stats`.
#include <boost/program_options.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/trace_options.h"
#include "planner/arachne/arachne_planner.h"
#include "planner/arachne/policy_weights.h"
#include "planner/planner.h"
#include "planner/replay_planner.h"
#include "sim/hw/topology.h"
#include "sim/io/atomic_file.h"
#include "sim/io/hdf5_writer.h"
#include "sim/io/input_error.h"
#include "sim/io/numbers.h"
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
With --pool stable the job also plans without the nodes that left most often over the last
--volatility-window seconds and runs the plan that trains the most once each used node's departures
(rate x lost work) are counted: volatile GPUs are left idle when they would cost more than they add.

Reproducibility: with the default --planning-time measured, the wall-clock time each planner takes is
charged as downtime, so tokens trained, lost work and downtime differ slightly between two runs of the same
command. --planning-time SECONDS charges a fixed time per replan instead: then the same inputs and --seed
give the same results (the reproducible mode; tests use it).

Usage:
  arachne replay --trace FILE [--trace-format F] [--cluster FILE] --model M --planner NAME[,NAME...]
                 [--until S] [--planning-time measured|SECONDS] [--checkpoint-interval S]
                 [--storage-bandwidth "2 GB/s"] [--restart S] [--coalesce S] [--global-batch N]
                 [--budget N] [--budget-wall S] [--no-warm-start] [--switch break-even|always] [--policy FILE]
                 [--pool all|stable] [--volatility-window S]
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

double seconds_flag(const po::variables_map& vm, const char* name) {
  return parse_double_flag(std::string("--") + name, vm[name].as<std::string>(), limits::kTraceSeconds);
}

// Everything a replay depends on, checked before the first planner runs.
struct ReplaySetup {
  ReplayOptions options;
  std::vector<std::string> planners;
  std::optional<long> global_batch;  // default: the model's
  planner::ReplanSettings settings;
  std::string out_path;  // "" when no --out
  std::string png_path;  // next to out_path
};

ReplaySetup replay_setup(const po::variables_map& vm) {
  ReplaySetup r;
  ReplayOptions& ro = r.options;
  if (vm.count("until")) ro.until_s = seconds_flag(vm, "until");
  const std::string pt = vm["planning-time"].as<std::string>();
  if (pt != "measured") ro.fixed_planning_s = seconds_flag(vm, "planning-time");
  ro.checkpoint_interval_s = seconds_flag(vm, "checkpoint-interval");
  check_checkpoint_interval(ro.checkpoint_interval_s, "--checkpoint-interval");
  ro.restart_s = seconds_flag(vm, "restart");
  ro.coalesce_s = seconds_flag(vm, "coalesce");
  const std::string rule = vm["switch"].as<std::string>();
  if (rule == "always") ro.switch_rule = SwitchRule::Always;
  else if (rule != "break-even") throw InputError("--switch", "unknown rule '" + rule + "' (known: break-even, always)");
  const std::string pool = vm["pool"].as<std::string>();
  const std::optional<PoolRule> pool_rule = pool_rule_named(pool);
  if (!pool_rule) throw InputError("--pool", "unknown rule '" + pool + "' (known: " + kPoolRuleNames + ")");
  ro.pool_rule = *pool_rule;
  ro.volatility_window_s = seconds_flag(vm, "volatility-window");
  check_volatility_window(ro.volatility_window_s, "--volatility-window");
  try {
    ro.storage_bandwidth = units::parse_bandwidth(vm["storage-bandwidth"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw InputError("--storage-bandwidth", e.what());
  }
  check_real(ro.storage_bandwidth, limits::kBandwidth, "--storage-bandwidth");
  if (vm.count("global-batch"))
    r.global_batch = parse_int_flag("--global-batch", vm["global-batch"].as<std::string>(), limits::kGlobalBatch);
  r.settings.budget_evaluations = parse_int_flag("--budget", vm["budget"].as<std::string>(), limits::kCount);
  if (vm.count("budget-wall"))
    r.settings.budget_wall_s = parse_double_flag("--budget-wall", vm["budget-wall"].as<std::string>(), limits::kWallSeconds);
  r.settings.seed = parse_seed_flag("--seed", vm["seed"].as<std::string>());
  r.settings.warm_start = !vm["no-warm-start"].as<bool>();
  r.planners = parse_planner_names("--planner", vm["planner"].as<std::string>(), false);
  if (vm.count("policy")) r.settings.arachne_policy = vm["policy"].as<std::string>();
  load_policy_if_used(r.planners, r.settings.arachne_policy);
  if (vm.count("out")) {
    r.out_path = vm["out"].as<std::string>();
    r.png_path = r.out_path;
    if (r.png_path.size() > 3 && r.png_path.compare(r.png_path.size() - 3, 3, ".h5") == 0) r.png_path.resize(r.png_path.size() - 3);
    r.png_path += ".png";
    check_output_path("--out", r.out_path);
    check_output_path("--out", r.png_path);
  }
  return r;
}

// The full input configuration of a replay (DESIGN.md "Results"): trace and how it was read, model, link
// template, planners and every option, so that the file alone says how to rerun it.
std::string replay_config_yaml(const po::variables_map& vm, const ReplaySetup& r, const ModelConfig& model, long global_batch,
                               const Cluster* link_template) {
  const TraceLoadOptions t = trace_load_options(vm);
  const ReplayOptions& o = r.options;
  std::ostringstream y;
  y << "trace:\n  path: " << vm["trace"].as<std::string>() << "\n  format: " << (t.format.empty() ? "detected" : t.format)
    << "\n  nodes: " << t.nodes << "\n  load_scale: " << t.load_scale << "\n  window_start_s: " << t.window_start_s
    << "\n  window_end_s: " << t.window_end_s << "\n";
  y << "model:\n" << indented(model.to_yaml());
  if (link_template) y << "cluster:\n" << indented(link_template->to_yaml());
  y << "planners: [";
  for (std::size_t i = 0; i < r.planners.size(); ++i) y << (i ? ", " : "") << r.planners[i];
  y << "]\noptions:\n  seed: " << r.settings.seed << "\n  global_batch: " << global_batch << "\n  until_s: " << o.until_s
    << "\n  planning_time: ";
  if (o.fixed_planning_s) y << *o.fixed_planning_s;
  else y << "measured (wall clock: not reproducible)";
  y << "\n  checkpoint_interval_s: " << o.checkpoint_interval_s
    << "\n  storage_bandwidth: " << units::format_bandwidth(o.storage_bandwidth) << "\n  restart_s: " << o.restart_s
    << "\n  coalesce_s: " << o.coalesce_s << "\n  switch: " << (o.switch_rule == SwitchRule::Always ? "always" : "break-even")
    << "\n  pool: " << pool_rule_name(o.pool_rule) << "\n  volatility_window_s: " << o.volatility_window_s
    << "\n  budget_evaluations: " << r.settings.budget_evaluations << "\n  budget_wall_s: " << r.settings.budget_wall_s
    << "\n  warm_start: " << (r.settings.warm_start ? "true" : "false") << "\n";
  if (std::find(r.planners.begin(), r.planners.end(), "arachne") != r.planners.end()) {
    const std::string& given = r.settings.arachne_policy;
    const std::string policy = given.empty() ? planner::default_policy_path() : given;
    y << "  arachne_policy: " << policy << " (fnv1a " << planner::file_fingerprint(policy) << ")\n";
  }
  return y.str();
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
    check_output_path("--out", vm["out"].as<std::string>());
    const LoadedTrace t = load_trace_from(vm, catalog);
    write_text_atomically(vm["out"].as<std::string>(), to_native_csv(t.trace));
    return kExitOk;
  }
  if (sub == "stats") {
    const LoadedTrace t = load_trace_from(vm, catalog);
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
      ("planning-time", po::value<std::string>()->value_name("T")->default_value("measured"), "measured (wall clock; not reproducible) | SECONDS charged per replan (reproducible)")
      ("checkpoint-interval", po::value<std::string>()->value_name("S")->default_value("1800"), "seconds of training between checkpoints (0: none)")
      ("storage-bandwidth", po::value<std::string>()->value_name("BW")->default_value("2 GB/s"), "checkpoint save/load bandwidth")
      ("restart", po::value<std::string>()->value_name("S")->default_value("60"), "process restart on reconfiguration, seconds")
      ("coalesce", po::value<std::string>()->value_name("S")->default_value("0"), "merge changes closer than this")
      ("budget", po::value<std::string>()->value_name("N")->default_value("2000"), "planner evaluations per replan")
      ("budget-wall", po::value<std::string>()->value_name("S"), "wall-clock cap per replan, seconds (default: none)")
      ("switch", po::value<std::string>()->value_name("RULE")->default_value("break-even"), "break-even | always: when a running job takes a new plan")
      ("pool", po::value<std::string>()->value_name("RULE")->default_value("all"), "all | stable: which GPUs the job offers its planner (stable: also without the nodes that left most often; the expected-best plan runs)")
      ("volatility-window", po::value<std::string>()->value_name("S")->default_value("21600"), "--pool stable: seconds of history behind each node's departure rate")
      ("policy", po::value<std::string>()->value_name("FILE"), "arachne: policy weights (default: the shipped configs/policy/arachne.weights)")
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
  ReplaySetup setup = replay_setup(vm);
  const GpuCatalog catalog = GpuCatalog::load_default();
  const ModelConfig model = load_model(vm["model"].as<std::string>());
  std::optional<Cluster> tmpl;
  if (vm.count("cluster")) tmpl = load_cluster(vm["cluster"].as<std::string>(), catalog);
  ReplayOptions& ro = setup.options;
  ro.link_template = tmpl ? &*tmpl : nullptr;
  const long gb = setup.global_batch.value_or(model.global_batch);
  std::vector<std::unique_ptr<planner::Planner>> planners;
  for (const auto& n : setup.planners) planners.push_back(planner::make_planner(n));
  const LoadedTrace trace = load_trace_from(vm, catalog);
  const std::string& out_path = setup.out_path;

  nlohmann::json results = nlohmann::json::array();
  std::vector<std::pair<std::string, ReplayResult>> all;
  for (auto& p : planners) {
    std::fprintf(stderr, "replay: %s over %s (%zu nodes, %.1f h)\n", p->name().c_str(), trace.trace.source.c_str(),
                 trace.trace.nodes.size(), (ro.until_s >= 0 ? ro.until_s : trace.trace.end_s) / 3600);
    const bool tty = isatty(fileno(stderr)) != 0;
    long planned = 0;
    const planner::ReplanSettings& settings = setup.settings;
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
    const h5::RunInfo info{ARACHNE_VERSION, command_line, setup.settings.seed,
                           replay_config_yaml(vm, setup, model, gb, ro.link_template)};
    h5::write_h5_atomically(out_path, info, [&](h5::File& f) {
      for (const auto& [name, r] : all) write_replay_tables(f, "/" + name, r);
    });
    plot_replay_png(out_path, setup.png_path);
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
