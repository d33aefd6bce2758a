// Parsing of dimensioned values: decimal prefixes are powers of 10, binary ones powers of 2, bits are 1/8 byte.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "sim/io/units.h"

namespace arachne::units {
namespace {

// Reason text of the std::invalid_argument thrown by f(text); empty if nothing was thrown.
template <class F>
std::string reason_of(F f, const std::string& text) {
  try {
    f(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(UnitsParse, BandwidthDecimalBytesAndBits) {
  EXPECT_DOUBLE_EQ(parse_bandwidth("300 GB/s"), 300e9);  // GB = 1e9 bytes
  EXPECT_DOUBLE_EQ(parse_bandwidth("300GB/s"), 300e9);   // the space is optional
  EXPECT_DOUBLE_EQ(parse_bandwidth("  16 GB/s "), 16e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("200 Gbit/s"), 25e9);  // 200e9 bits / 8
  EXPECT_DOUBLE_EQ(parse_bandwidth("100 Gbit/s"), 12.5e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1.5 TB/s"), 1.5e12);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1 GiB/s"), 1073741824.0);  // 2^30
  EXPECT_DOUBLE_EQ(parse_bandwidth("800 Mbit/s"), 100e6);
}

TEST(UnitsParse, BytesDecimalAndBinary) {
  EXPECT_DOUBLE_EQ(parse_bytes("80 GiB"), 80.0 * 1073741824.0);
  EXPECT_DOUBLE_EQ(parse_bytes("80 GB"), 80e9);
  EXPECT_DOUBLE_EQ(parse_bytes("512 MiB"), 512.0 * 1048576.0);
  EXPECT_DOUBLE_EQ(parse_bytes("1 TB"), 1e12);
  EXPECT_DOUBLE_EQ(parse_bytes("7 B"), 7.0);
}

TEST(UnitsParse, Durations) {
  EXPECT_DOUBLE_EQ(parse_duration("2 us"), 2e-6);
  EXPECT_DOUBLE_EQ(parse_duration("1.5 ms"), 1.5e-3);
  EXPECT_DOUBLE_EQ(parse_duration("30 s"), 30.0);
  EXPECT_DOUBLE_EQ(parse_duration("250 ns"), 250e-9);
  EXPECT_DOUBLE_EQ(parse_duration("2 min"), 120.0);
  EXPECT_DOUBLE_EQ(parse_duration("1 h"), 3600.0);
}

TEST(UnitsParse, FlopRates) {
  EXPECT_DOUBLE_EQ(parse_flops_rate("312 TFLOP/s"), 312e12);
  EXPECT_DOUBLE_EQ(parse_flops_rate("191.5 TFLOP/s"), 191.5e12);
  EXPECT_DOUBLE_EQ(parse_flops_rate("1.2 PFLOP/s"), 1.2e15);
  EXPECT_DOUBLE_EQ(parse_flops_rate("0 TFLOP/s"), 0.0);  // "no bf16" is written this way
  EXPECT_DOUBLE_EQ(parse_flops_rate("5e3 GFLOP/s"), 5e12);
}

TEST(UnitsParse, BareNumberIsMissingUnit) {
  const std::string r = reason_of(parse_bandwidth, "300");
  EXPECT_NE(r.find("missing unit"), std::string::npos) << r;
  EXPECT_NE(r.find("300 GB/s"), std::string::npos) << "the reason shows an example: " << r;
  EXPECT_NE(reason_of(parse_bytes, "80").find("missing unit"), std::string::npos);
  EXPECT_NE(reason_of(parse_duration, "5").find("missing unit"), std::string::npos);
  EXPECT_NE(reason_of(parse_flops_rate, "312").find("missing unit"), std::string::npos);
}

TEST(UnitsParse, RejectsUnknownUnitsNegativesAndGarbage) {
  EXPECT_NE(reason_of(parse_bandwidth, "300 furlongs/s").find("unknown unit"), std::string::npos);
  // A unit of the wrong dimension is unknown for that parser.
  EXPECT_NE(reason_of(parse_bytes, "300 GB/s").find("unknown unit"), std::string::npos);
  EXPECT_NE(reason_of(parse_duration, "5 GB").find("unknown unit"), std::string::npos);
  EXPECT_NE(reason_of(parse_bandwidth, "-5 GB/s").find("negative"), std::string::npos);
  EXPECT_THROW(parse_bandwidth(""), std::invalid_argument);
  EXPECT_THROW(parse_bandwidth("fast"), std::invalid_argument);
  EXPECT_THROW(parse_bandwidth("GB/s"), std::invalid_argument);
  EXPECT_THROW(parse_bandwidth("nan GB/s"), std::invalid_argument);
  EXPECT_THROW(parse_bandwidth("inf GB/s"), std::invalid_argument);
}

TEST(UnitsFormat, RoundTripsThroughTheParsers) {
  // Formatting keeps 12 significant digits, so a round trip is exact to a relative 1e-12.
  for (double v : {300e9, 25e9, 12.5e9, 1555e9, 1.0 / 3.0 * 1e9}) {
    EXPECT_NEAR(parse_bandwidth(format_bandwidth(v)), v, v * 1e-12) << format_bandwidth(v);
  }
  for (double v : {80e9, 80.0 * 1073741824.0, 141e9}) EXPECT_NEAR(parse_bytes(format_bytes(v)), v, v * 1e-12);
  for (double v : {5e-6, 2.5e-3, 30.0, 0.0}) EXPECT_NEAR(parse_duration(format_duration(v)), v, v * 1e-12);
  for (double v : {312e12, 191.5e12, 0.0}) EXPECT_NEAR(parse_flops_rate(format_flops_rate(v)), v, v * 1e-12);
  EXPECT_EQ(format_bandwidth(300e9), "300 GB/s");
  EXPECT_EQ(format_duration(5e-6), "5 us");
}

}  // namespace
}  // namespace arachne::units
