// `arachne trace plot`: a PNG of the GPUs available per type over time. The trace (any format) is written
// as native CSV to a temporary file and drawn by scripts/plot_trace.py (/usr/bin/python3, matplotlib).
// Also `plot_replay_png`, which `arachne replay` uses to draw its HDF5 result with scripts/plot_replay.py.
#include <boost/program_options.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/trace_options.h"
#include "sim/hw/gpu.h"
#include "sim/io/atomic_file.h"
#include "sim/io/input_error.h"
#include "sim/trace/availability.h"
#include "sim/trace/trace_formats.h"

extern char** environ;

namespace arachne::cli {

int run_trace_plot(const std::vector<std::string>& args);
int plot_replay_png(const std::string& h5_path, const std::string& png_path);

namespace {

const char* kPython = "/usr/bin/python3";  // Debian's, with python3-matplotlib and python3-h5py (DESIGN.md)

const char* kTracePlotHelp = R"(arachne trace plot - a PNG of the GPUs available per GPU type over time

Loads the trace (any accepted format, traces/README.md), and draws a stacked step plot of the GPUs each
GPU type offers over time (hours), with the total, using scripts/plot_trace.py (needs /usr/bin/python3
with matplotlib). The PNG is written atomically.

Usage:
  arachne trace plot --trace FILE [--trace-format F] [--nodes N] [--load-scale X] [--window-start S]
                     [--window-end S] [--seed N] --out FILE.png

Options)";

struct ScriptResult {
  int status = -1;          // exit status of the script, or -1 when it could not be started / was killed
  std::string last_error;   // last non-empty line it wrote to stderr
};

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  const std::string prefix = "error: ";  // the scripts' own prefix; the caller adds "error: --out: "
  if (last.rfind(prefix, 0) == 0) last = last.substr(prefix.size());
  return last;
}

// Runs /usr/bin/python3 <source>/scripts/<script> args... without a shell (no quoting issues), its stderr
// captured in a temporary file beside `output` (the first file the script writes), after removing the
// temporary files that killed runs left beside it (no AtomicFile of ours writes that path to do it).
ScriptResult run_script(const std::string& script, const std::vector<std::string>& args, const std::string& output) {
  remove_stale_temporaries(output);
  ScriptResult r;
  const std::string path = std::string(ARACHNE_SOURCE_DIR) + "/scripts/" + script;
  std::vector<std::string> words = {kPython, path};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const std::string err_path = temporary_path_for(output) + ".stderr";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, kPython, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    r.last_error = std::string("cannot run ") + kPython;
  } else {
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(wstatus)) r.status = WEXITSTATUS(wstatus);
    r.last_error = last_line(err_path);
    if (r.status != 0 && r.last_error.empty()) r.last_error = "the plot script " + path + " failed";
  }
  std::error_code ec;
  std::filesystem::remove(err_path, ec);
  return r;
}

}  // namespace

int run_trace_plot(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("");
  opts.add_options()("help", "this help");
  add_trace_options(opts);
  opts.add_options()("out", po::value<std::string>()->value_name("FILE.png"), "the PNG to write");
  po::variables_map vm;
  if (const int rc = parse_options(args, opts, vm, "trace plot"); rc >= 0) return rc;
  if (vm.count("help")) {
    std::cout << kTracePlotHelp << "\n" << opts;
    return kExitOk;
  }
  if (!vm.count("trace")) return input_error("--trace", "required (an availability trace file)");
  if (!vm.count("out")) return input_error("--out", "required (the PNG to write)");
  const TraceLoadOptions options = trace_load_options(vm);
  const std::string trace_path = vm["trace"].as<std::string>();
  const std::string out = vm["out"].as<std::string>();
  check_output_path("--out", out);
  const LoadedTrace loaded = load_trace(trace_path, options, GpuCatalog::load_default());

  // The native CSV goes next to the output (".<name>.tmp-<pid>.csv"), removed once plotted.
  const std::string csv = temporary_path_for(out) + ".csv";
  {
    std::ofstream f(csv);
    f << to_native_csv(loaded.trace);
    f.close();
    if (!f) {
      std::error_code ec;
      std::filesystem::remove(csv, ec);
      std::fprintf(stderr, "error: --out: cannot write the temporary trace %s\n", csv.c_str());
      return kExitInternal;
    }
  }
  const std::string title = "GPUs available: " + std::filesystem::path(trace_path).filename().string() + " (" +
                            loaded.format + ")";
  const ScriptResult r = run_script("plot_trace.py", {out, csv, title}, out);
  std::error_code ec;
  std::filesystem::remove(csv, ec);
  if (r.status != 0) {
    std::fprintf(stderr, "error: --out: %s\n", r.last_error.c_str());
    return kExitInternal;
  }
  std::fprintf(stderr, "trace plot: wrote %s\n", out.c_str());
  return kExitOk;
}

int plot_training_png(const std::string& h5_path, const std::string& png_path) {
  const ScriptResult r = run_script("plot_training.py", {png_path, h5_path}, png_path);
  if (r.status != 0) std::fprintf(stderr, "error: --out: %s\n", r.last_error.c_str());
  return r.status == 0 ? 0 : (r.status > 0 ? r.status : kExitInternal);
}

int plot_evaluation_png(const std::string& h5_path, const std::string& out_dir) {
  const std::string ratio = (std::filesystem::path(out_dir) / "ratio.png").string();
  const std::string time = (std::filesystem::path(out_dir) / "planning_time.png").string();
  const ScriptResult r = run_script("plot_evaluation.py", {ratio, time, h5_path}, ratio);
  if (r.status != 0) std::fprintf(stderr, "error: --out: %s\n", r.last_error.c_str());
  return r.status == 0 ? 0 : (r.status > 0 ? r.status : kExitInternal);
}

int plot_experiment_png(const std::string& h5_path, const std::string& out_dir) {
  const std::string first = (std::filesystem::path(out_dir) / "throughput.png").string();
  const ScriptResult r = run_script("plot_experiment.py", {out_dir, h5_path}, first);
  if (r.status != 0) std::fprintf(stderr, "error: --out: %s\n", r.last_error.c_str());
  return r.status == 0 ? 0 : (r.status > 0 ? r.status : kExitInternal);
}

int plot_replay_png(const std::string& h5_path, const std::string& png_path) {
  const ScriptResult r = run_script("plot_replay.py", {png_path, h5_path}, png_path);
  if (r.status != 0) std::fprintf(stderr, "error: --out: %s\n", r.last_error.c_str());
  return r.status == 0 ? 0 : (r.status > 0 ? r.status : kExitInternal);
}

}  // namespace arachne::cli
