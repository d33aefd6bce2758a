// Parsing of dimensioned values: "<number> <unit>" with optional whitespace between them.
// Decimal prefixes are powers of 10 (GB = 1e9 bytes), binary prefixes powers of 2 (GiB = 2^30 bytes);
// bit rates are divided by 8 to give bytes per second.
#include "sim/io/units.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string_view>

namespace arachne::units {
namespace {

struct Unit {
  std::string_view symbol;
  double factor;  // to the base unit (bytes/s, bytes, seconds, FLOP/s)
};

constexpr double kKi = 1024.0;
constexpr double kMi = kKi * 1024.0;
constexpr double kGi = kMi * 1024.0;
constexpr double kTi = kGi * 1024.0;

constexpr std::array kBandwidthUnits{
    Unit{"B/s", 1.0},          Unit{"KB/s", 1e3},          Unit{"MB/s", 1e6},
    Unit{"GB/s", 1e9},         Unit{"TB/s", 1e12},         Unit{"KiB/s", kKi},
    Unit{"MiB/s", kMi},        Unit{"GiB/s", kGi},         Unit{"TiB/s", kTi},
    Unit{"bit/s", 1.0 / 8},    Unit{"Kbit/s", 1e3 / 8},    Unit{"Mbit/s", 1e6 / 8},
    Unit{"Gbit/s", 1e9 / 8},   Unit{"Tbit/s", 1e12 / 8},   Unit{"Gb/s", 1e9 / 8},
    Unit{"Mb/s", 1e6 / 8},     Unit{"Tb/s", 1e12 / 8},     Unit{"Gbps", 1e9 / 8},
    Unit{"Mbps", 1e6 / 8},     Unit{"GBps", 1e9},
};
constexpr std::array kByteUnits{
    Unit{"B", 1.0},   Unit{"KB", 1e3},  Unit{"MB", 1e6},  Unit{"GB", 1e9},  Unit{"TB", 1e12},
    Unit{"KiB", kKi}, Unit{"MiB", kMi}, Unit{"GiB", kGi}, Unit{"TiB", kTi},
};
constexpr std::array kDurationUnits{
    Unit{"ns", 1e-9}, Unit{"us", 1e-6}, Unit{"\xC2\xB5s", 1e-6} /* µs */, Unit{"ms", 1e-3},
    Unit{"s", 1.0},   Unit{"min", 60.0}, Unit{"h", 3600.0},
};
constexpr std::array kFlopsUnits{
    Unit{"FLOP/s", 1.0}, Unit{"GFLOP/s", 1e9}, Unit{"TFLOP/s", 1e12}, Unit{"PFLOP/s", 1e15},
    Unit{"FLOPS", 1.0},  Unit{"GFLOPS", 1e9},  Unit{"TFLOPS", 1e12},  Unit{"PFLOPS", 1e15},
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

template <std::size_t N>
std::string known_list(const std::array<Unit, N>& units) {
  std::string out;
  for (const Unit& u : units) {
    if (!out.empty()) out += ", ";
    out += u.symbol;
  }
  return out;
}

// Parses "<number>[ ]<unit>" against a unit table; `example` is quoted in error messages.
template <std::size_t N>
double parse_with(const std::string& text, const std::array<Unit, N>& units, const char* example) {
  const std::string_view s = trim(text);
  const std::string expected = std::string(" (expected e.g. \"") + example + "\")";
  if (s.empty()) throw std::invalid_argument("empty value" + expected);
  std::string_view num = s;
  if (!num.empty() && num.front() == '+') num.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), value);
  if (ec != std::errc() || end == num.data())
    throw std::invalid_argument("'" + std::string(s) + "' does not start with a number" + expected);
  if (!std::isfinite(value)) throw std::invalid_argument("'" + std::string(s) + "' is not finite");
  const std::string_view unit = trim(std::string_view(end, static_cast<std::size_t>(num.data() + num.size() - end)));
  if (unit.empty()) throw std::invalid_argument("missing unit" + expected);
  if (value < 0) throw std::invalid_argument("negative value '" + std::string(s) + "'");
  for (const Unit& u : units)
    if (u.symbol == unit) return value * u.factor;
  throw std::invalid_argument("unknown unit '" + std::string(unit) + "' (known: " + known_list(units) + ")");
}

}  // namespace

double parse_bandwidth(const std::string& text) { return parse_with(text, kBandwidthUnits, "300 GB/s"); }
double parse_bytes(const std::string& text) { return parse_with(text, kByteUnits, "80 GiB"); }
double parse_duration(const std::string& text) { return parse_with(text, kDurationUnits, "2 us"); }
double parse_flops_rate(const std::string& text) { return parse_with(text, kFlopsUnits, "312 TFLOP/s"); }

}  // namespace arachne::units

namespace arachne::units {
namespace {

// value/scale with 12 significant digits (so 5e-6 s prints as "5 us", not "5.000000000000001 us").
std::string format_scaled(double value, double scale, std::string_view symbol) {
  std::array<char, 64> buf{};
  std::snprintf(buf.data(), buf.size(), "%.12g", value / scale);
  std::string out(buf.data());
  out += ' ';
  out += symbol;
  return out;
}

}  // namespace

std::string format_bandwidth(double v) { return format_scaled(v, 1e9, "GB/s"); }
std::string format_bytes(double v) { return format_scaled(v, 1e9, "GB"); }
std::string format_duration(double v) {
  if (v != 0 && v < 1e-3) return format_scaled(v, 1e-6, "us");
  if (v != 0 && v < 1.0) return format_scaled(v, 1e-3, "ms");
  return format_scaled(v, 1.0, "s");
}
std::string format_flops_rate(double v) { return format_scaled(v, 1e12, "TFLOP/s"); }

}  // namespace arachne::units
