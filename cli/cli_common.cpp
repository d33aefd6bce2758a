#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "cli/commands.h"

#include <boost/program_options/parsers.hpp>
#include "sim/io/input_error.h"

namespace arachne::cli {

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

long parse_int_flag(const std::string& flag, const std::string& text, long min_value) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end == nullptr || *end != '\0' || errno == ERANGE)
    throw InputError(flag, "expected an integer, got '" + text + "'");
  if (v < min_value) throw InputError(flag, "must be at least " + std::to_string(min_value) + ", got " + text);
  return v;
}

unsigned long long parse_seed_flag(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  if (text.empty() || text[0] == '-') throw InputError(flag, "expected a non-negative integer, got '" + text + "'");
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == nullptr || *end != '\0' || errno == ERANGE)
    throw InputError(flag, "expected a non-negative integer, got '" + text + "'");
  return v;
}

int parse_options(const std::vector<std::string>& args, const boost::program_options::options_description& opts,
                  boost::program_options::variables_map& vm, const std::string& subcommand) {
  namespace po = boost::program_options;
  try {
    po::store(po::command_line_parser(args).options(opts).style(po::command_line_style::default_style &
                                                                 ~po::command_line_style::allow_guessing).run(),
              vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return option_error(e, subcommand);
  }
  return -1;
}

double parse_double_flag(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    throw InputError(flag, "'" + text + "' is not a number");
  return v;
}

}  // namespace arachne::cli
