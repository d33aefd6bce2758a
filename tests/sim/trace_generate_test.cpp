// `arachne trace generate`: determinism, capacity bounds, mean load, daily cycle, spot reclaims, CSV round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "sim/hw/gpu.h"
#include "sim/io/atomic_file.h"
#include "sim/io/input_error.h"
#include "sim/trace/trace_generate.h"

namespace arachne {
namespace {

const GpuCatalog& catalog() {
  static const GpuCatalog c = GpuCatalog::load_default();
  return c;
}

int total_capacity(const AvailabilityTrace& t) {
  int total = 0;
  for (const auto& n : t.nodes) total += n.capacity;
  return total;
}

// Time-weighted mean of the offered GPUs over [from, to) of every period (period 0 = whole trace once).
double mean_offered(const AvailabilityTrace& t, double from, double to, double period) {
  const std::vector<double> times = t.change_times();
  double weighted = 0, span = 0;
  for (std::size_t i = 0; i < times.size(); ++i) {
    const double a = times[i];
    const double b = i + 1 < times.size() ? times[i + 1] : t.end_s;
    if (b <= a) continue;
    if (period > 0) {
      const double phase = std::fmod(a, period);  // step intervals are short next to the window (many changes/h)
      if (phase < from || phase >= to) continue;
    }
    int offered = 0;
    for (const int g : t.snapshot(a)) offered += g;
    weighted += offered * (b - a);
    span += b - a;
  }
  return span > 0 ? weighted / span : 0;
}

TEST(TraceGenerate, SameSeedSameCsvDifferentSeedDifferent) {
  GenerateOptions o;
  o.duration_s = 2 * 86400;
  o.seed = 7;
  const std::string a = to_native_csv(generate_trace(o, catalog()));
  const std::string b = to_native_csv(generate_trace(o, catalog()));
  EXPECT_EQ(a, b);
  o.seed = 8;
  EXPECT_NE(a, to_native_csv(generate_trace(o, catalog())));
}

TEST(TraceGenerate, NodesFromCatalogAndOfferWithinCapacity) {
  GenerateOptions o;
  o.duration_s = 3 * 86400;
  o.spot_reclaims_per_day = 4;
  const AvailabilityTrace t = generate_trace(o, catalog());
  ASSERT_EQ(t.nodes.size(), 48u);
  for (const auto& n : t.nodes) EXPECT_EQ(n.capacity, catalog().at(n.gpu_type).node.gpus_per_node) << n.name;
  EXPECT_EQ(t.end_s, o.duration_s);
  ASSERT_FALSE(t.events.empty());
  EXPECT_EQ(t.events.front().time_s, 0.0);
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const TraceEvent& e = t.events[i];
    EXPECT_GE(e.gpus, 0);
    EXPECT_LE(e.gpus, t.nodes[e.node].capacity);
    EXPECT_LT(e.time_s, t.end_s);
    if (i > 0) {
      EXPECT_LE(t.events[i - 1].time_s, e.time_s);
    }
  }
  // Every node appears at t = 0 (the steady-state start), and later rows are real changes.
  std::vector<int> last(t.nodes.size(), -1);
  for (const TraceEvent& e : t.events) {
    if (e.time_s > 0) {
      EXPECT_NE(last[e.node], e.gpus) << "no-op row at " << e.time_s;
    }
    last[e.node] = e.gpus;
  }
  for (const int v : last) EXPECT_GE(v, 0);
}

// Little's law sets the offered load to `load`; the held fraction is lower by the tenants blocked when no type
// has room (most at the daily peak, where the offered load reaches load x (1 + a)) and, over 14 days of ~20
// tenants/h, the sampling noise of ~6,000 tenants is ~1-2 % of the mean. +-0.1 covers both.
TEST(TraceGenerate, MeanHeldFractionNearRequestedLoad) {
  for (const double load : {0.3, 0.7}) {
    GenerateOptions o;
    o.duration_s = 14 * 86400;
    o.load = load;
    o.seed = 3;
    const AvailabilityTrace t = generate_trace(o, catalog());
    const double held = 1 - mean_offered(t, 0, 0, 0) / total_capacity(t);
    EXPECT_NEAR(held, load, 0.1) << "load " << load;
  }
}

// Arrivals peak at t = 6 h of each day (sin = 1) and bottom out at 18 h; with 1 h tenants the held load lags by
// atan(2 pi / 24) ~ 1 h, so the 3 h windows around 7 h and 19 h sit at the load's peak and trough.
TEST(TraceGenerate, DailyCycleShows) {
  GenerateOptions o;
  o.duration_s = 14 * 86400;
  o.mean_duration_s = 3600;
  o.daily_amplitude = 0.5;
  o.load = 0.5;
  const AvailabilityTrace t = generate_trace(o, catalog());
  const double at_peak = mean_offered(t, 5.5 * 3600, 8.5 * 3600, 86400);
  const double at_trough = mean_offered(t, 17.5 * 3600, 20.5 * 3600, 86400);
  EXPECT_LT(at_peak, at_trough);
  // Expected gap: 2 x 0.5 x 0.5 x cos(lag) ~ 0.48 of the GPUs; demand half of it.
  EXPECT_GT((at_trough - at_peak) / total_capacity(t), 0.2);
}

TEST(TraceGenerate, SpotReclaimsEmptyWholeNodes) {
  GenerateOptions o;
  o.duration_s = 2 * 86400;
  o.load = 0;  // no tenants: any node at 0 is a reclaim
  const AvailabilityTrace idle = generate_trace(o, catalog());
  for (const TraceEvent& e : idle.events) EXPECT_EQ(e.gpus, idle.nodes[e.node].capacity);
  o.spot_reclaims_per_day = 6;
  const AvailabilityTrace t = generate_trace(o, catalog());
  int zeros = 0;
  for (const TraceEvent& e : t.events) zeros += e.gpus == 0;
  EXPECT_GT(zeros, 0);
  for (const TraceEvent& e : t.events) EXPECT_TRUE(e.gpus == 0 || e.gpus == t.nodes[e.node].capacity);
}

TEST(TraceGenerate, CsvLoadsBackAndRoundTrips) {
  GenerateOptions o;
  o.duration_s = 86400;
  o.spot_reclaims_per_day = 2;
  const AvailabilityTrace t = generate_trace(o, catalog());
  const std::string csv = to_native_csv(t);
  const auto path = (std::filesystem::temp_directory_path() / "arachne_trace_generate_test.csv").string();
  write_text_atomically(path, csv);
  const AvailabilityTrace back = load_native_trace(path, catalog().names());
  std::filesystem::remove(path);
  ASSERT_EQ(back.nodes.size(), t.nodes.size());
  EXPECT_EQ(back.end_s, t.end_s);
  for (const double when : {0.0, 3600.0, 43200.0, 86399.0}) EXPECT_EQ(back.snapshot(when), t.snapshot(when)) << when;
  EXPECT_EQ(to_native_csv(back).substr(csv.find('\n')), csv.substr(csv.find('\n')));
}

TEST(TraceGenerate, RejectsBadOptions) {
  GenerateOptions o;
  o.node_types = {{"NoSuchGPU", 2}};
  try {
    generate_trace(o, catalog());
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "--nodes");
  }
  o = GenerateOptions{};
  o.load = 1.2;
  EXPECT_THROW(generate_trace(o, catalog()), InputError);
  o = GenerateOptions{};
  o.daily_amplitude = 2;
  EXPECT_THROW(generate_trace(o, catalog()), InputError);
}

}  // namespace
}  // namespace arachne
