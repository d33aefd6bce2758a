// Parsing of dimensioned values ("300 GB/s", "200 Gbit/s", "80 GiB", "2 us", "312 TFLOP/s").
// GB = 1e9 bytes, GiB = 2^30 bytes. A bare number where a unit is required is an error.
#pragma once
#include <string>

namespace arachne::units {

// Each throws std::invalid_argument with a human-readable reason on a bad value.
double parse_bandwidth(const std::string& text);   // -> bytes per second (B/s, KB/s, MB/s, GB/s, TB/s, GiB/s, bit/s, Kbit/s, Mbit/s, Gbit/s, Tbit/s)
double parse_bytes(const std::string& text);       // -> bytes (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)
double parse_duration(const std::string& text);    // -> seconds (ns, us, ms, s, min, h)
double parse_flops_rate(const std::string& text);  // -> FLOP per second (FLOP/s, GFLOP/s, TFLOP/s, PFLOP/s)

// Inverses, for writing configurations back out: "300 GB/s", "80 GB", "5 us", "312 TFLOP/s"
// (12 significant digits: parsing the result gives the value back to a relative 1e-12).
std::string format_bandwidth(double bytes_per_s);
std::string format_bytes(double bytes);
std::string format_duration(double seconds);
std::string format_flops_rate(double flop_per_s);

}  // namespace arachne::units
