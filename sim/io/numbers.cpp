#include "sim/io/numbers.h"

#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <system_error>

#include "sim/io/input_error.h"

namespace arachne {
namespace {

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

std::string shortest(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// from_chars takes no leading '+'; everything else (spaces, "0x", trailing text) fails the whole-text test.
std::string_view without_plus(std::string_view text) {
  if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.remove_prefix(1);
  return text;
}

}  // namespace

std::string range_text(limits::IntRange range) {
  return "[" + std::to_string(range.min) + ", " + std::to_string(range.max) + "]";
}

std::string range_text(limits::RealRange range) {
  return (range.min_exclusive ? "(" : "[") + shortest(range.min) + ", " + shortest(range.max) + "]";
}

long long check_integer(long long value, limits::IntRange range, const std::string& where) {
  if (value < range.min || value > range.max)
    throw InputError(where, std::to_string(value) + " is outside the supported range " + range_text(range));
  return value;
}

double check_real(double value, limits::RealRange range, const std::string& where) {
  if (std::isnan(value)) throw InputError(where, "not a number");
  const bool low = range.min_exclusive ? !(value > range.min) : !(value >= range.min);
  if (low || value > range.max)
    throw InputError(where, shortest(value) + " is outside the supported range " + range_text(range));
  return value;
}

long long read_integer(std::string_view text, limits::IntRange range, const std::string& where) {
  const std::string_view digits = without_plus(text);
  long long v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec == std::errc::result_out_of_range && end == digits.data() + digits.size())
    throw InputError(where, quoted(text) + " is outside the supported range " + range_text(range));
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
    throw InputError(where, "expected an integer, got " + quoted(text));
  return check_integer(v, range, where);
}

int read_int(std::string_view text, limits::IntRange range, const std::string& where) {
  if (range.min < INT_MIN || range.max > INT_MAX) throw std::logic_error("read_int: range beyond int");
  return static_cast<int>(read_integer(text, range, where));
}

double read_real(std::string_view text, limits::RealRange range, const std::string& where) {
  const std::string_view digits = without_plus(text);
  double v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, std::chars_format::general);
  const bool whole_text = end == digits.data() + digits.size();
  if (ec == std::errc::result_out_of_range && whole_text)
    throw InputError(where, quoted(text) + " is outside the supported range " + range_text(range));
  if (digits.empty() || ec != std::errc() || !whole_text)
    throw InputError(where, "expected a number, got " + quoted(text));
  if (!std::isfinite(v)) throw InputError(where, "expected a finite number, got " + quoted(text));
  return check_real(v, range, where);
}

long long read_whole(std::string_view text, limits::IntRange range, const std::string& where) {
  const double v = read_real(text, {static_cast<double>(range.min), static_cast<double>(range.max)}, where);
  if (v != std::floor(v)) throw InputError(where, "expected a whole number, got " + quoted(text));
  return static_cast<long long>(v);
}

unsigned long long read_seed(std::string_view text, const std::string& where) {
  unsigned long long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw InputError(where, "expected an integer in [0, 2^64 - 1], got " + quoted(text));
  return v;
}

}  // namespace arachne
