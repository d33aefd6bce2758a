// `arachne simulate`: one simulated training iteration of a plan — time, throughput, memory, and where the
// time goes — as a readable report, or one JSON object with --json (DESIGN.md "CLI, exit codes").
#include <boost/program_options.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/io/chrome_trace.h"
#include "sim/io/hdf5_writer.h"
#include "sim/io/input_error.h"
#include "sim/io/report_json.h"
#include "sim/model/model.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::cli {
namespace {

namespace po = boost::program_options;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // GiB = 2^30 bytes (DESIGN.md "Units")
constexpr double kGB = 1e9;                         // GB = 10^9 bytes

const char* kSimulateHelp = R"(arachne simulate - simulate one training iteration of a parallel plan

Runs one iteration (forward, backward, gradient reduction, optimizer step of every micro-batch) of a model
under a parallel plan on a cluster, in a discrete-event simulator of its GPUs and network, and reports:
iteration time, tokens/s and samples/s, TFLOP/s per GPU and MFU, the memory of the fullest GPU by
category, where the time goes on the critical path (compute, TP/PP/DP/EP communication, pipeline bubble,
waiting for a slower pipeline or DP/EP peer, optimizer), bytes moved per link class, and warnings. A plan that does not fit in memory is reported with
its per-GPU memory and exit code 3, not simulated (unless --ignore-memory).

Usage:
  arachne simulate --cluster C --model M --plan FILE [outputs]
  arachne simulate --cluster C --model M --tp N --pp N --dp N --micro-batch N [shorthand options] [outputs]

The cluster C is a YAML file (configs/clusters/*.yaml), a bundled cluster name, or a spec string
TYPE:NODESxGPUS[,...] such as "A100-80:2x8,V100-32:4x4" (catalog default nodes; see 'arachne list gpus').
The model M is a YAML file or a bundled name such as gpt3-1.3b (see 'arachne list models').
The plan is a plan YAML file (schema in DESIGN.md "Plan"; examples in configs/plans/) or the homogeneous
Megatron-style shorthand: tp*pp*dp GPUs taken from the nodes in listing order, TP ranks fastest, then DP,
then PP, layers split evenly.

Examples:
  arachne simulate --cluster configs/clusters/tiny-a100-2x4.yaml --model gpt3-1.3b \
      --tp 2 --pp 2 --dp 2 --micro-batch 4
  arachne simulate --cluster A100-80:1x8 --model gpt3-1.3b --tp 2 --pp 2 --dp 2 --micro-batch 4 \
      --global-batch 64 --json
  arachne simulate --cluster configs/clusters/tiny-a100-2x4.yaml --model gpt3-1.3b \
      --plan configs/plans/gpt3-1.3b-tp2-pp2-dp2.yaml --out run.h5 --timeline run.json

Exit codes: 0 success; 2 bad input (one line 'error: <where>: <what>' on stderr, no output file written);
3 the plan does not fit in memory (the report or JSON is still printed; no timeline is written).
)";

struct Outputs {
  std::string out, timeline;
  bool json = false;
};

Recompute parse_recompute(const std::string& v) {
  if (v == "none") return Recompute::None;
  if (v == "selective") return Recompute::Selective;
  if (v == "full") return Recompute::Full;
  throw InputError("--recompute", "expected none, selective or full, got '" + v + "'");
}

Schedule parse_schedule(const std::string& v) {
  if (v == "1f1b") return Schedule::OneFOneB;
  if (v == "gpipe") return Schedule::GPipe;
  if (v == "interleaved") return Schedule::Interleaved;
  throw InputError("--schedule", "expected 1f1b, gpipe or interleaved, got '" + v + "'");
}

// The full input configuration, one YAML document with keys cluster, model, plan, options.
std::string config_yaml(const Cluster& cluster, const ModelConfig& model, const Plan& plan, const SimOptions& opt,
                        std::optional<long> global_batch) {
  std::ostringstream y;
  y << "cluster:\n" << indented(cluster.to_yaml());
  y << "model:\n" << indented(model.to_yaml());
  y << "plan:\n" << indented(plan_to_yaml(plan, cluster));
  y << "options:\n  seed: " << opt.seed << "\n  ignore_memory: " << (opt.ignore_memory ? "true" : "false")
    << "\n  hierarchical_alltoall: " << (opt.hierarchical_alltoall ? "true" : "false") << "\n";
  if (global_batch) y << "  global_batch: " << *global_batch << "\n";
  return y.str();
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// 1234567.8 -> "1,234,568"
std::string grouped(double v) {
  const std::string digits = fixed(v < 0 ? -v : v, 0);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

std::string pad(const std::string& s, std::size_t width) { return s.size() >= width ? s : s + std::string(width - s.size(), ' '); }
std::string lpad(const std::string& s, std::size_t width) { return s.size() >= width ? s : std::string(width - s.size(), ' ') + s; }

const GpuMemoryReport* find_gpu(const SimResult& r, const std::string& label) {
  for (const auto& g : r.per_gpu_memory)
    if (g.label == label) return &g;
  return nullptr;
}

void print_memory_table(std::ostream& os, const SimResult& r) {
  constexpr std::size_t kMaxRows = 32;
  os << "  " << pad("GPU", 16) << lpad("weights", 9) << lpad("grads", 9) << lpad("optim", 9) << lpad("activ", 9)
     << lpad("other", 9) << lpad("total", 9) << lpad("capacity", 10) << "  GiB\n";
  std::size_t shown = 0;
  for (const auto& g : r.per_gpu_memory) {
    if (shown++ == kMaxRows) break;
    const MemoryBreakdown& m = g.usage;
    os << "  " << pad(g.label + " " + g.gpu_type, 16) << lpad(fixed(m.weights / kGiB, 2), 9)
       << lpad(fixed(m.gradients / kGiB, 2), 9) << lpad(fixed(m.optimizer / kGiB, 2), 9)
       << lpad(fixed(m.activations / kGiB, 2), 9) << lpad(fixed(m.other / kGiB, 2), 9)
       << lpad(fixed(m.total() / kGiB, 2), 9) << lpad(fixed(g.capacity_bytes / kGiB, 2), 10)
       << (m.total() > g.capacity_bytes ? "  over" : "") << "\n";
  }
  if (r.per_gpu_memory.size() > kMaxRows)
    os << "  ... " << r.per_gpu_memory.size() - kMaxRows << " more GPUs (--json or --out list all)\n";
}

void print_report(std::ostream& os, const SimResult& r, const Cluster& cluster, const ModelConfig& model) {
  os << "arachne simulate: " << model.name << " (" << fixed(model.parameters() / 1e9, 2) << " B parameters, "
     << model.dtype << ") on " << cluster.name << ": " << r.gpus_used << " of " << cluster.total_gpus()
     << " GPUs, global batch " << r.global_batch << "\n\n";
  const GpuMemoryReport* peak = find_gpu(r, r.peak_memory_gpu);
  const double capacity_gib = peak ? peak->capacity_bytes / kGiB : 0;
  const std::string peak_name = r.peak_memory_gpu + (peak ? " (" + peak->gpu_type + ")" : "");
  if (!has_timing(r)) {
    os << "OUT OF MEMORY: the plan does not fit. Fullest GPU " << peak_name << " needs "
       << fixed(r.peak_memory_gib, 2) << " GiB of " << fixed(capacity_gib, 2) << " GiB.\n"
       << "Not simulated (--ignore-memory simulates it anyway). Memory per GPU:\n";
    print_memory_table(os, r);
  } else {
    os << pad("Iteration time", 18) << fixed(r.iteration_time_s, 4) << " s\n";
    os << pad("Throughput", 18) << grouped(r.tokens_per_s) << " tokens/s, " << fixed(r.samples_per_s, 2)
       << " samples/s\n";
    os << pad("Per GPU", 18) << fixed(r.tflops_per_gpu, 1) << " TFLOP/s of model FLOPs\n";
    os << pad("MFU", 18) << fixed(100 * r.mfu, 1) << " % of the GPUs used, " << fixed(100 * r.mfu_cluster, 1)
       << " % of the whole cluster\n\n";
    os << "Time on the critical path of the slowest pipeline:\n";
    const Breakdown& b = r.breakdown;
    const std::pair<const char*, double> causes[] = {
        {"compute", b.compute}, {"TP communication", b.tp_comm}, {"PP communication", b.pp_comm},
        {"DP communication", b.dp_comm}, {"EP communication", b.ep_comm}, {"pipeline bubble", b.bubble},
        {"waiting for peers", b.wait}, {"optimizer step", b.optimizer}};
    for (const auto& [name, s] : causes) {
      const double share = r.iteration_time_s > 0 ? 100 * s / r.iteration_time_s : 0;
      os << "  " << pad(name, 18) << lpad(fixed(s, 4), 10) << " s " << lpad(fixed(share, 1), 6) << " %\n";
    }
    os << "\n";
    if (r.oom) {
      os << "OUT OF MEMORY (simulated anyway, --ignore-memory): fullest GPU " << peak_name << " needs "
         << fixed(r.peak_memory_gib, 2) << " GiB of " << fixed(capacity_gib, 2) << " GiB\n";
    }
    os << "Memory of the fullest GPU, " << peak_name << ": " << fixed(r.peak_memory_gib, 2) << " GiB of "
       << fixed(capacity_gib, 2) << " GiB";
    if (capacity_gib > 0) os << " (" << fixed(100 * r.peak_memory_gib / capacity_gib, 0) << " %)";
    os << "\n";
  }
  const MemoryBreakdown& m = r.memory;
  os << "  weights " << fixed(m.weights / kGiB, 2) << ", gradients " << fixed(m.gradients / kGiB, 2)
     << ", optimizer " << fixed(m.optimizer / kGiB, 2) << ", activations " << fixed(m.activations / kGiB, 2)
     << ", other " << fixed(m.other / kGiB, 2) << " GiB\n";
  if (has_timing(r)) {
    os << "\nBytes moved: NVLink " << fixed(r.bytes[0] / kGB, 2) << " GB, PCIe " << fixed(r.bytes[1] / kGB, 2)
       << " GB, NIC " << fixed(r.bytes[2] / kGB, 2) << " GB, spine " << fixed(r.bytes[3] / kGB, 2) << " GB\n";
    if (model.moe) os << "Dropped tokens (MoE capacity): " << grouped(r.dropped_tokens) << "\n";
    os << "Simulated " << grouped(static_cast<double>(r.events)) << " events in " << fixed(r.sim_wall_s, 3)
       << " s wall time\n";
  }
  if (!r.warnings.empty()) {
    os << "\nWarnings:\n";
    for (const auto& w : r.warnings) os << "  - " << w << "\n";
  }
}

}  // namespace

int run_simulate(const std::vector<std::string>& args, const std::string& command_line) {
  po::options_description inputs("Inputs");
  inputs.add_options()
      ("cluster", po::value<std::string>()->value_name("C"), "cluster YAML file, bundled name, or spec string TYPE:NODESxGPUS[,...]")
      ("model", po::value<std::string>()->value_name("M"), "model YAML file or bundled name (gpt3-1.3b, llama2-7b, ...)")
      ("plan", po::value<std::string>()->value_name("FILE"), "plan YAML file (or use the shorthand below)")
      ("global-batch", po::value<std::string>()->value_name("N"), "global batch in samples (default: the plan's, else the model's)")
      ("seed", po::value<std::string>()->value_name("N")->default_value("0"), "seed of every random choice (MoE routing)");
  po::options_description shorthand("Homogeneous shorthand (instead of --plan)");
  shorthand.add_options()
      ("tp", po::value<std::string>()->value_name("N"), "tensor-parallel degree (default 1)")
      ("pp", po::value<std::string>()->value_name("N"), "pipeline stages (default 1)")
      ("dp", po::value<std::string>()->value_name("N"), "data-parallel pipelines (default 1)")
      ("ep", po::value<std::string>()->value_name("N"), "expert-parallel degree, divides dp (MoE models; default 1)")
      ("micro-batch", po::value<std::string>()->value_name("N"), "samples per micro-batch (default 1)")
      ("recompute", po::value<std::string>()->value_name("R"), "activation recomputation: none | selective | full")
      ("sequence-parallel", po::bool_switch(), "sequence parallelism with TP (Korthikanti et al. 2022)")
      ("interleave", po::value<std::string>()->value_name("V"), "virtual stages per GPU (implies --schedule interleaved)")
      ("zero1", po::bool_switch(), "shard optimizer state over the data-parallel group (ZeRO-1)")
      ("schedule", po::value<std::string>()->value_name("S"), "pipeline schedule: 1f1b | gpipe | interleaved");
  po::options_description outputs("Outputs");
  outputs.add_options()
      ("out", po::value<std::string>()->value_name("F.h5"), "write the results as HDF5 (summary, breakdown, memory, bytes, warnings)")
      ("timeline", po::value<std::string>()->value_name("F.json"), "write a Chrome trace-event timeline (open in https://ui.perfetto.dev)")
      ("json", po::bool_switch(), "print exactly one JSON object on stdout instead of the report")
      ("ignore-memory", po::bool_switch(), "simulate a plan even when it does not fit in memory")
      ("hierarchical-a2a", po::bool_switch(), "MoE all-to-all in two levels, inside nodes first (Tutel's 2D algorithm)")
      ("help,h", "show this help");
  po::options_description all;
  all.add(inputs).add(shorthand).add(outputs);

  po::variables_map vm;
  if (const int rc = parse_options(args, all, vm, "simulate"); rc >= 0) return rc;
  if (vm.count("help")) {
    std::cout << kSimulateHelp << "\n" << all << std::flush;
    return kExitOk;
  }

  try {
    if (!vm.count("cluster")) throw InputError("--cluster", "is required (a cluster file or spec, e.g. A100-80:1x8)");
    if (!vm.count("model")) throw InputError("--model", "is required (a model file or bundled name, e.g. gpt3-1.3b)");
    const auto str = [&vm](const char* k) { return vm[k].as<std::string>(); };
    const auto flag_int = [&](const char* k, limits::IntRange range) {
      return parse_small_int_flag(std::string("--") + k, str(k), range);
    };

    SimOptions opt;
    opt.seed = parse_seed_flag("--seed", str("seed"));
    opt.ignore_memory = vm["ignore-memory"].as<bool>();
    opt.hierarchical_alltoall = vm["hierarchical-a2a"].as<bool>();
    Outputs out;
    out.json = vm["json"].as<bool>();
    if (vm.count("out")) out.out = str("out");
    if (vm.count("timeline")) out.timeline = str("timeline");
    opt.record_timeline = !out.timeline.empty();
    std::optional<long> global_batch;
    if (vm.count("global-batch")) global_batch = flag_int("global-batch", limits::kGlobalBatch);

    // Plan source: a file, or the shorthand, never both.
    std::vector<std::string> shorthand_given;
    for (const char* k : {"tp", "pp", "dp", "ep", "micro-batch", "recompute", "interleave", "schedule"})
      if (vm.count(k)) shorthand_given.push_back(std::string("--") + k);
    for (const char* k : {"sequence-parallel", "zero1"})
      if (vm[k].as<bool>()) shorthand_given.push_back(std::string("--") + k);
    const bool use_plan_file = vm.count("plan") > 0;
    if (use_plan_file && !shorthand_given.empty())
      throw InputError(shorthand_given.front(), "cannot be combined with --plan (the plan file says how to parallelise)");
    if (!use_plan_file && shorthand_given.empty())
      throw InputError("--plan", "no plan given: use --plan FILE or the shorthand --tp N --pp N --dp N --micro-batch N");
    Shorthand sh;
    if (!use_plan_file) {
      if (vm.count("tp")) sh.tp = static_cast<int>(flag_int("tp", limits::kDegree));
      if (vm.count("pp")) sh.pp = static_cast<int>(flag_int("pp", limits::kDegree));
      if (vm.count("dp")) sh.dp = static_cast<int>(flag_int("dp", limits::kDegree));
      if (vm.count("ep")) sh.ep = static_cast<int>(flag_int("ep", limits::kDegree));
      if (vm.count("micro-batch")) sh.micro_batch = static_cast<int>(flag_int("micro-batch", limits::kMicroBatch));
      if (vm.count("interleave")) sh.interleave = static_cast<int>(flag_int("interleave", limits::kDegree));
      if (vm.count("recompute")) sh.recompute = parse_recompute(str("recompute"));
      if (vm.count("schedule")) sh.schedule = parse_schedule(str("schedule"));
      else if (sh.interleave > 1) sh.schedule = Schedule::Interleaved;
      sh.sequence_parallel = vm["sequence-parallel"].as<bool>();
      sh.zero1 = vm["zero1"].as<bool>();
      sh.global_batch = global_batch;
    }
    if (!out.out.empty()) check_output_path("--out", out.out);
    if (!out.timeline.empty()) check_output_path("--timeline", out.timeline);
    if (!out.out.empty() && !out.timeline.empty() &&
        std::filesystem::weakly_canonical(out.out) == std::filesystem::weakly_canonical(out.timeline))
      throw InputError("--timeline", "same file as --out");

    const GpuCatalog catalog = GpuCatalog::load_default();
    const Cluster cluster = load_cluster(str("cluster"), catalog);
    const ModelConfig model = load_model(str("model"));
    const Plan plan = use_plan_file ? parse_plan_yaml(str("plan"), cluster) : plan_from_shorthand(sh, cluster, model);
    validate_plan(plan, cluster, model, global_batch, use_plan_file ? str("plan") : std::string("--tp/--pp/--dp"));

    const Topology topo(cluster);
    SimResult result = simulate_iteration(cluster, topo, model, plan, opt);
    const bool simulated = has_timing(result);
    if (result.oom && simulated)
      result.warnings.push_back("the plan does not fit in memory (" + result.peak_memory_gpu + " needs " +
                                fixed(result.peak_memory_gib, 2) + " GiB); simulated anyway (--ignore-memory)");

    // Files first (atomically), so that a failed write leaves no partial output and no report.
    if (!out.out.empty()) {
      const h5::RunInfo info{ARACHNE_VERSION, command_line, opt.seed, config_yaml(cluster, model, plan, opt, global_batch)};
      try {
        write_simulate_h5(out.out, result, info);
      } catch (const std::runtime_error& e) {
        throw InputError("--out", e.what());
      }
    }
    if (!out.timeline.empty()) {
      if (simulated) {
        try {
          write_chrome_trace(out.timeline, result, timeline_track_names(cluster));
        } catch (const std::runtime_error& e) {
          throw InputError("--timeline", e.what());
        }
      } else {
        std::cerr << "note: --timeline not written: the plan does not fit in memory and was not simulated\n";
      }
    }

    if (out.json) {
      std::cout << simulate_report_json(result).dump(2) << std::endl;
    } else {
      print_report(std::cout, result, cluster, model);
      std::cout << std::flush;
    }
    return simulated ? kExitOk : kExitInfeasible;
  } catch (const InputError& e) {
    return input_error(e.where(), e.reason());
  }
}

}  // namespace arachne::cli
