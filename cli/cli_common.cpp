#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli/commands.h"

#include <boost/program_options/parsers.hpp>
#include <boost/program_options/positional_options.hpp>
#include "planner/arachne/arachne_planner.h"
#include "planner/registry.h"
#include "sim/io/atomic_file.h"
#include "sim/io/input_error.h"
#include "sim/io/numbers.h"

namespace arachne::cli {
namespace {

namespace fs = std::filesystem;

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

int input_error(const std::string& where, const std::string& reason) {
  std::string one_line = reason;
  for (char& c : one_line)
    if (c == '\n' || c == '\r') c = ' ';
  std::cerr << "error: " << where << ": " << one_line << std::endl;
  return kExitBadInput;
}

int option_error(const boost::program_options::error& e, const std::string& subcommand) {
  namespace po = boost::program_options;
  const std::string help = "see 'arachne " + subcommand + " --help'";
  const auto* named = dynamic_cast<const po::error_with_option_name*>(&e);
  std::string flag = named ? named->get_option_name() : std::string();
  if (flag.empty()) flag = "arachne " + subcommand;
  if (dynamic_cast<const po::unknown_option*>(&e)) return input_error(flag, "unknown option (" + help + ")");
  if (dynamic_cast<const po::ambiguous_option*>(&e)) return input_error(flag, "ambiguous option (" + help + ")");
  if (dynamic_cast<const po::multiple_occurrences*>(&e)) return input_error(flag, "given more than once");
  if (dynamic_cast<const po::required_option*>(&e)) return input_error(flag, "is required (" + help + ")");
  if (dynamic_cast<const po::invalid_command_line_syntax*>(&e)) {
    const auto& syn = dynamic_cast<const po::invalid_command_line_syntax&>(e);
    if (syn.kind() == po::invalid_syntax::missing_parameter) return input_error(flag, "needs a value");
    if (syn.kind() == po::invalid_syntax::extra_parameter) return input_error(flag, "takes no value");
  }
  if (dynamic_cast<const po::too_many_positional_options_error*>(&e))
    return input_error("arachne " + subcommand, "unexpected argument (" + help + ")");
  if (dynamic_cast<const po::validation_error*>(&e)) return input_error(flag, "invalid value");
  return input_error(flag, e.what());
}

std::string indented(const std::string& text) {
  std::string out = "  ";
  for (std::size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '\n' && i + 1 < text.size()) out += "  ";
  }
  if (out.empty() || out.back() != '\n') out += '\n';
  return out;
}

std::string quoted_command_line(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    const std::string w = argv[i];
    if (i > 0) out += ' ';
    const bool plain = !w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                        "0123456789-_./:=,+@%") == std::string::npos;
    if (plain) {
      out += w;
    } else {
      out += '\'';
      for (const char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

long long parse_int_flag(const std::string& flag, const std::string& text, limits::IntRange range) {
  return read_integer(text, range, flag);
}

int parse_small_int_flag(const std::string& flag, const std::string& text, limits::IntRange range) {
  return read_int(text, range, flag);
}

double parse_double_flag(const std::string& flag, const std::string& text, limits::RealRange range) {
  return read_real(text, range, flag);
}

unsigned long long parse_seed_flag(const std::string& flag, const std::string& text) { return read_seed(text, flag); }

void check_output_path(const std::string& flag, const std::string& path) {
  if (path.empty()) throw InputError(flag, "empty file name");
  const fs::path p(path);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError(flag, "directory '" + dir.string() + "' does not exist");
  if (fs::is_directory(p, ec)) throw InputError(flag, "'" + path + "' is a directory");
  remove_stale_temporaries(path);
  const std::string probe = temporary_path_for(path);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) throw InputError(flag, "cannot create a file in '" + dir.string() + "': " + std::strerror(errno));
  ::close(fd);
  fs::remove(probe, ec);
}

void check_output_dir(const std::string& flag, const std::string& dir) {
  if (dir.empty()) throw InputError(flag, "empty directory name");
  const fs::path p(dir);
  std::error_code ec;
  if (fs::exists(p, ec) && !fs::is_directory(p, ec)) throw InputError(flag, "'" + dir + "' exists and is not a directory");
  const fs::path existing = fs::is_directory(p, ec) ? p : (p.has_parent_path() ? p.parent_path() : fs::path("."));
  if (!fs::is_directory(existing, ec)) throw InputError(flag, "the directory '" + existing.string() + "' does not exist");
  if (::access(existing.c_str(), W_OK) != 0)
    throw InputError(flag, "the directory '" + existing.string() + "' is not writable");
}

std::vector<std::string> split_list(const std::string& flag, const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string w;
  while (std::getline(ss, w, ',')) {
    if (w.empty()) throw InputError(flag, "empty name in '" + text + "'");
    if (std::find(out.begin(), out.end(), w) != out.end()) throw InputError(flag, "'" + w + "' is listed twice");
    out.push_back(w);
  }
  if (!text.empty() && text.back() == ',') throw InputError(flag, "empty name in '" + text + "'");
  if (out.empty()) throw InputError(flag, "expected a comma-separated list");
  return out;
}

std::vector<std::string> parse_planner_names(const std::string& flag, const std::string& text, bool allow_all) {
  if (allow_all && text == "all") return planner::registered_planner_names();
  const std::vector<std::string> names = split_list(flag, text);
  const std::vector<std::string> known = planner::registered_planner_names();
  for (const std::string& n : names)
    if (std::find(known.begin(), known.end(), n) == known.end())
      throw InputError(flag, "unknown planner '" + n + "' (known: " + join_names(known) + (allow_all ? ", or all)" : ")"));
  return names;
}

bool load_policy_if_used(const std::vector<std::string>& planners, const std::string& policy_path) {
  const bool used = std::find(planners.begin(), planners.end(), "arachne") != planners.end();
  if (used) planner::load_policy(policy_path);
  return used;
}

int parse_options(const std::vector<std::string>& args, const boost::program_options::options_description& opts,
                  boost::program_options::variables_map& vm, const std::string& subcommand) {
  namespace po = boost::program_options;
  try {
    // No abbreviations; no positional words (an empty positional description makes them an error).
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(args).options(opts).positional(po::positional_options_description()).style(style).run(),
              vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return option_error(e, subcommand);
  }
  for (const auto& [name, value] : vm) {
    const auto* text = boost::any_cast<std::string>(&value.value());
    const bool takes_value = opts.find(name, false).semantic()->max_tokens() > 0;
    if (takes_value && text && !value.defaulted() && text->empty()) return input_error("--" + name, "empty value");
  }
  return -1;
}

}  // namespace arachne::cli
