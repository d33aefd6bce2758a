// Flow network: textbook max-min fairness (Bertsekas & Gallager, Data Networks §6.5.2), completion
// times under changing rates, bundles, latency, determinism, and exactness of the component recompute.
#include "sim/net/flow_network.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace arachne {
namespace {

constexpr double kGB = 1e9;
// Completion times are rounded up to whole nanoseconds once per rate change; a couple of ns is the
// largest error the rounding can introduce in these scenarios (at most one rounding per rate change).
constexpr TimeNs kRoundNs = 2;

std::vector<Link> make_links(const std::vector<double>& caps, LinkClass cls = LinkClass::Nic) {
  std::vector<Link> links;
  for (std::size_t i = 0; i < caps.size(); ++i) links.push_back(Link{caps[i], cls});
  return links;
}

struct Probe {
  std::map<FlowId, double> rate;
};

void probe_at(Engine& e, FlowNetwork& net, TimeNs t, std::vector<FlowId> ids, Probe& p) {
  e.schedule_at(t, [&e, &net, ids, &p] {
    for (FlowId id : ids) p.rate[id] = net.rate(id);
  });
}

TEST(FlowNetworkTest, OneFlowOnOneLinkGetsFullCapacity) {
  // A lone flow is limited only by its link: rate c, and S bytes take S/c.
  Engine e;
  FlowNetwork net(e, make_links({10 * kGB}));
  TimeNs done_at = -1;
  const FlowId f = net.start_route({0}, 5 * kGB, 0, [&] { done_at = e.now(); });
  Probe p;
  probe_at(e, net, 1, {f}, p);
  e.run();
  EXPECT_DOUBLE_EQ(p.rate[f], 10 * kGB);
  EXPECT_NEAR(done_at, seconds_to_ns(0.5), kRoundNs);
  EXPECT_EQ(net.active_flows(), 0u);
}

TEST(FlowNetworkTest, TwoFlowsOnOneLinkGetHalfEach) {
  Engine e;
  FlowNetwork net(e, make_links({8 * kGB}));
  const FlowId a = net.start_route({0}, kGB, 0, nullptr);
  const FlowId b = net.start_route({0}, kGB, 0, nullptr);
  Probe p;
  probe_at(e, net, 1, {a, b}, p);
  e.run();
  EXPECT_DOUBLE_EQ(p.rate[a], 4 * kGB);
  EXPECT_DOUBLE_EQ(p.rate[b], 4 * kGB);
}

TEST(FlowNetworkTest, ThreeFlowsOverTwoEqualLinksGetHalfEach) {
  // A uses L1 and L2, B uses L1, C uses L2, capacities c: each link is shared by two flows -> c/2 each.
  Engine e;
  const double c = 6 * kGB;
  FlowNetwork net(e, make_links({c, c}));
  const FlowId a = net.start_route({0, 1}, kGB, 0, nullptr);
  const FlowId b = net.start_route({0}, kGB, 0, nullptr);
  const FlowId cc = net.start_route({1}, kGB, 0, nullptr);
  Probe p;
  probe_at(e, net, 1, {a, b, cc}, p);
  e.run();
  EXPECT_DOUBLE_EQ(p.rate[a], c / 2);
  EXPECT_DOUBLE_EQ(p.rate[b], c / 2);
  EXPECT_DOUBLE_EQ(p.rate[cc], c / 2);
}

TEST(FlowNetworkTest, BottleneckedFlowLeavesCapacityToOthers) {
  // L1 = 1, L2 = 2 (GB/s); A: L1+L2, B: L1, C: L2. L1 saturates first at 0.5 each for A and B; C takes the
  // rest of L2: 2 - 0.5 = 1.5 (textbook max-min: every flow has a bottleneck link where it is the largest).
  Engine e;
  FlowNetwork net(e, make_links({1 * kGB, 2 * kGB}));
  const FlowId a = net.start_route({0, 1}, kGB, 0, nullptr);
  const FlowId b = net.start_route({0}, kGB, 0, nullptr);
  const FlowId c = net.start_route({1}, kGB, 0, nullptr);
  Probe p;
  probe_at(e, net, 1, {a, b, c}, p);
  e.run();
  EXPECT_DOUBLE_EQ(p.rate[a], 0.5 * kGB);
  EXPECT_DOUBLE_EQ(p.rate[b], 0.5 * kGB);
  EXPECT_DOUBLE_EQ(p.rate[c], 1.5 * kGB);
}

TEST(FlowNetworkTest, SurvivorSpeedsUpWhenAFlowEnds) {
  // Two flows of S and 2S on one link c: both at c/2 until the first ends at 2S/c; the second then has S
  // left at full rate c and ends at 3S/c.
  Engine e;
  const double c = 4 * kGB, S = 2 * kGB;
  FlowNetwork net(e, make_links({c}));
  TimeNs t1 = -1, t2 = -1;
  const FlowId f2 = net.start_route({0}, 2 * S, 0, [&] { t2 = e.now(); });
  net.start_route({0}, S, 0, [&] { t1 = e.now(); });
  Probe before, after;
  probe_at(e, net, seconds_to_ns(2 * S / c) - 10, {f2}, before);
  probe_at(e, net, seconds_to_ns(2 * S / c) + 10, {f2}, after);
  e.run();
  EXPECT_NEAR(t1, seconds_to_ns(2 * S / c), kRoundNs);
  EXPECT_NEAR(t2, seconds_to_ns(3 * S / c), kRoundNs);
  EXPECT_DOUBLE_EQ(before.rate[f2], c / 2);
  EXPECT_DOUBLE_EQ(after.rate[f2], c);
}

TEST(FlowNetworkTest, BundleMultiplicityLoadsTheLink) {
  // A bundle whose 2 members both use a link of capacity c loads it 2 x r, so r = c/2 per member, and S
  // bytes per member take 2S/c. Next to it a single flow on the same link: weights 2 + 1 -> c/3 each.
  {
    Engine e;
    const double c = 3 * kGB, S = kGB;
    FlowNetwork net(e, make_links({c}));
    TimeNs t = -1;
    const FlowId f = net.start({Hop{0, 2}}, S, 0, [&] { t = e.now(); });
    Probe p;
    probe_at(e, net, 1, {f}, p);
    e.run();
    EXPECT_DOUBLE_EQ(p.rate[f], c / 2);
    EXPECT_NEAR(t, seconds_to_ns(2 * S / c), kRoundNs);
  }
  {
    Engine e;
    const double c = 3 * kGB;
    FlowNetwork net(e, make_links({c}));
    const FlowId bundle = net.start({Hop{0, 2}}, kGB, 0, nullptr);
    const FlowId single = net.start_route({0}, kGB, 0, nullptr);
    Probe p;
    probe_at(e, net, 1, {bundle, single}, p);
    e.run();
    EXPECT_DOUBLE_EQ(p.rate[bundle], c / 3);
    EXPECT_DOUBLE_EQ(p.rate[single], c / 3);
  }
}

TEST(FlowNetworkTest, LatencyDelaysTheStart) {
  // A (S, no latency) runs alone at c until B (S, latency 0.5 s) activates: A has moved c*0.5 = S/2,
  // then both run at c/2: A's last S/2 takes 1 s (ends at 1.5 s); B has S/2 left then, at c: ends at 2 s.
  Engine e;
  const double c = kGB, S = kGB;
  FlowNetwork net(e, make_links({c}));
  TimeNs ta = -1, tb = -1;
  net.start_route({0}, S, 0, [&] { ta = e.now(); });
  const FlowId b = net.start_route({0}, S, seconds_to_ns(0.5), [&] { tb = e.now(); });
  Probe p;
  probe_at(e, net, seconds_to_ns(0.25), {b}, p);
  e.run();
  EXPECT_EQ(p.rate[b], 0.0);  // still in flight: no bandwidth yet
  EXPECT_NEAR(ta, seconds_to_ns(1.5), kRoundNs);
  EXPECT_NEAR(tb, seconds_to_ns(2.0), kRoundNs);
}

TEST(FlowNetworkTest, ZeroBytesOrNoHopsCompleteAfterLatency) {
  Engine e;
  FlowNetwork net(e, make_links({kGB}));
  TimeNs t0 = -1, t1 = -1, t2 = -1;
  net.start_route({0}, 0, 1234, [&] { t0 = e.now(); });
  net.start({}, kGB, 77, [&] { t1 = e.now(); });
  net.start_route({0}, 0, 0, [&] { t2 = e.now(); });
  e.run();
  EXPECT_EQ(t0, 1234);
  EXPECT_EQ(t1, 77);
  EXPECT_EQ(t2, 0);
  EXPECT_EQ(net.flows_started(), 3u);
}

TEST(FlowNetworkTest, CountsBytesByLinkClassAtStart) {
  // bytes x multiplicity per hop, by the hop's link class, as soon as the flow starts.
  Engine e;
  std::vector<Link> links = {Link{100 * kGB, LinkClass::NvLink}, Link{25 * kGB, LinkClass::Nic},
                             Link{400 * kGB, LinkClass::Spine}};
  FlowNetwork net(e, links);
  net.start({Hop{0, 2}, Hop{1, 1}, Hop{2, 1}}, 1000, 5, nullptr);
  const auto& b = net.bytes_by_class();
  EXPECT_DOUBLE_EQ(b[static_cast<int>(LinkClass::NvLink)], 2000);
  EXPECT_DOUBLE_EQ(b[static_cast<int>(LinkClass::Nic)], 1000);
  EXPECT_DOUBLE_EQ(b[static_cast<int>(LinkClass::Spine)], 1000);
  EXPECT_DOUBLE_EQ(b[static_cast<int>(LinkClass::Pcie)], 0);
  e.run();
}

TEST(FlowNetworkTest, RepeatedLinkInHopsAddsMultiplicity) {
  // Hops {L0 x1, L0 x1} load L0 like one hop of multiplicity 2: rate c/2.
  Engine e;
  FlowNetwork net(e, make_links({2 * kGB}));
  const FlowId f = net.start({Hop{0, 1}, Hop{0, 1}}, kGB, 0, nullptr);
  Probe p;
  probe_at(e, net, 1, {f}, p);
  e.run();
  EXPECT_DOUBLE_EQ(p.rate[f], kGB);
}

TEST(FlowNetworkTest, SharedUplinkBindsOnlyWhenOversubscribed) {
  // Three flows, each with its own 1 GB/s access link, crossing one 2.5 GB/s uplink. Two of them fit (2 <
  // 2.5): each runs at its access rate 1. The third makes the uplink the bottleneck: 2.5/3 each. When it
  // ends, the other two return to 1.
  Engine e;
  FlowNetwork net(e, make_links({kGB, kGB, kGB, 2.5 * kGB}));
  const FlowId a = net.start_route({0, 3}, 10 * kGB, 0, nullptr);
  const FlowId b = net.start_route({1, 3}, 10 * kGB, 0, nullptr);
  const FlowId c = net.start_route({2, 3}, 0.5 * kGB, seconds_to_ns(1.0), nullptr);
  Probe two, three, after;
  probe_at(e, net, seconds_to_ns(0.5), {a, b}, two);
  probe_at(e, net, seconds_to_ns(1.1), {a, b, c}, three);
  // c: 0.5 GB at 2.5/3 GB/s = 0.6 s after its start at 1 s
  probe_at(e, net, seconds_to_ns(1.7), {a, b}, after);
  e.run();
  EXPECT_DOUBLE_EQ(two.rate[a], kGB);
  EXPECT_DOUBLE_EQ(two.rate[b], kGB);
  EXPECT_DOUBLE_EQ(three.rate[a], 2.5 * kGB / 3);
  EXPECT_DOUBLE_EQ(three.rate[b], 2.5 * kGB / 3);
  EXPECT_DOUBLE_EQ(three.rate[c], 2.5 * kGB / 3);
  EXPECT_DOUBLE_EQ(after.rate[a], kGB);
  EXPECT_DOUBLE_EQ(after.rate[b], kGB);
}

// ---- random scenarios: max-min optimality, determinism, component vs global recompute

struct RandomFlow {
  std::vector<Hop> hops;
  double bytes;
  TimeNs latency;
  int chained;  // -1, or a flow index whose completion starts this one
};

struct Scenario {
  std::vector<Link> links;
  std::vector<RandomFlow> flows;
};

Scenario random_scenario(unsigned seed, int nlinks, int nflows) {
  std::mt19937_64 rng(seed);
  Scenario s;
  for (int l = 0; l < nlinks; ++l) {
    // capacities with awkward ratios so that rounding paths are exercised
    s.links.push_back(Link{(1.0 + static_cast<double>(rng() % 1000) / 7.0) * kGB, LinkClass::Nic});
  }
  // two "spine" links shared across groups: with several flows on them they may or may not be able to
  // saturate, so they switch between slack and binding as flows come and go
  const int spine = nlinks;
  s.links.push_back(Link{250 * kGB, LinkClass::Spine});
  s.links.push_back(Link{1200 * kGB, LinkClass::Spine});
  for (int i = 0; i < nflows; ++i) {
    RandomFlow f;
    const int hops = 1 + static_cast<int>(rng() % 4);
    // links in groups of 8 so that several components coexist; one flow in 8 bridges two groups
    const int groups = nlinks / 8;
    const int g = static_cast<int>(rng() % static_cast<unsigned>(groups));
    for (int h = 0; h < hops; ++h) {
      const int gg = (h == 0 && rng() % 8 == 0) ? (g + 1) % groups : g;
      f.hops.push_back(Hop{gg * 8 + static_cast<int>(rng() % 8), 1 + static_cast<int>(rng() % 3)});
    }
    if (rng() % 3 == 0) f.hops.push_back(Hop{spine + static_cast<int>(rng() % 2), 1});
    f.bytes = static_cast<double>(1 + rng() % 100000) * 1e4 / 3.0;
    f.latency = static_cast<TimeNs>(rng() % 2000000);
    f.chained = (i > 0 && rng() % 3 == 0) ? static_cast<int>(rng() % static_cast<unsigned>(i)) : -1;
    s.flows.push_back(f);
  }
  return s;
}

struct RunStats {
  std::uint64_t events = 0;
  std::uint64_t flows_recomputed = 0;
};

std::vector<TimeNs> run_scenario(const Scenario& s, FlowNetwork::Recompute mode, RunStats* stats = nullptr) {
  Engine e;
  FlowNetwork net(e, s.links, mode);
  std::vector<TimeNs> done(s.flows.size(), -1);
  std::vector<std::vector<int>> children(s.flows.size());
  for (std::size_t i = 0; i < s.flows.size(); ++i) {
    if (s.flows[i].chained >= 0) children[static_cast<std::size_t>(s.flows[i].chained)].push_back(static_cast<int>(i));
  }
  std::function<void(int)> launch = [&](int i) {
    const RandomFlow& f = s.flows[static_cast<std::size_t>(i)];
    net.start(f.hops, f.bytes, f.latency, [&, i] {
      done[static_cast<std::size_t>(i)] = e.now();
      for (int c : children[static_cast<std::size_t>(i)]) launch(c);
    });
  };
  for (std::size_t i = 0; i < s.flows.size(); ++i) {
    if (s.flows[i].chained < 0) launch(static_cast<int>(i));
  }
  e.run();
  if (stats) *stats = RunStats{e.executed(), net.flows_recomputed()};
  return done;
}

TEST(FlowNetworkTest, ComponentRecomputeMatchesGlobalBitForBit) {
  // Recomputing only the connected component of the changed flows must give exactly the completion times
  // of a recompute over every active flow (the argument is in flow_network.cpp's header comment).
  for (unsigned seed = 1; seed <= 12; ++seed) {
    const Scenario s = random_scenario(seed, 80, 400);
    RunStats cs, gs;
    const auto comp = run_scenario(s, FlowNetwork::Recompute::Component, &cs);
    const auto glob = run_scenario(s, FlowNetwork::Recompute::Global, &gs);
    ASSERT_EQ(comp, glob) << "seed " << seed;
    EXPECT_LT(cs.flows_recomputed, gs.flows_recomputed) << "the component path was not exercised";
    for (TimeNs t : comp) ASSERT_GE(t, 0) << "a flow never completed, seed " << seed;
  }
}

TEST(FlowNetworkTest, SameInputsGiveIdenticalTimes) {
  const Scenario s = random_scenario(99, 32, 400);
  RunStats s1, s2;
  const auto a = run_scenario(s, FlowNetwork::Recompute::Component, &s1);
  const auto b = run_scenario(s, FlowNetwork::Recompute::Component, &s2);
  EXPECT_EQ(a, b);
  EXPECT_EQ(s1.events, s2.events);
}

TEST(FlowNetworkTest, RandomAllocationsAreMaxMinFair) {
  // Characterisation of max-min fairness (Bertsekas & Gallager Prop. 6.5.1 with weights): the allocation is
  // feasible (sum of mult x rate <= capacity on every link) and every flow has a bottleneck link: one that
  // is saturated and on which no flow has a larger member rate. Relative tolerance 1e-9 for float sums.
  for (unsigned seed = 1; seed <= 6; ++seed) {
    const Scenario s = random_scenario(seed + 100, 24, 120);
    Engine e;
    FlowNetwork net(e, s.links);
    int checks = 0;
    std::vector<FlowId> ids;
    for (TimeNs t = 1000001; t < 40000000; t += 1000003) {  // probes first: they run before same-time events
      e.schedule_at(t, [&] {
        std::vector<double> load(s.links.size(), 0.0), maxrate(s.links.size(), 0.0);
        std::vector<std::size_t> live;
        for (std::size_t i = 0; i < ids.size(); ++i) {
          const double r = net.rate(ids[i]);
          if (r <= 0) continue;
          live.push_back(i);
          for (const Hop& h : s.flows[i].hops) {
            load[static_cast<std::size_t>(h.link)] += h.mult * r;
            maxrate[static_cast<std::size_t>(h.link)] = std::max(maxrate[static_cast<std::size_t>(h.link)], r);
          }
        }
        for (std::size_t l = 0; l < s.links.size(); ++l) {
          EXPECT_LE(load[l], s.links[l].capacity * (1 + 1e-9)) << "link " << l;
        }
        for (std::size_t i : live) {
          const double r = net.rate(ids[i]);
          bool has_bottleneck = false;
          for (const Hop& h : s.flows[i].hops) {
            const auto l = static_cast<std::size_t>(h.link);
            if (load[l] >= s.links[l].capacity * (1 - 1e-9) && r >= maxrate[l] * (1 - 1e-9)) has_bottleneck = true;
          }
          EXPECT_TRUE(has_bottleneck) << "flow " << i << " at t=" << e.now();
        }
        checks += static_cast<int>(live.size());
      });
    }
    for (const RandomFlow& f : s.flows) ids.push_back(net.start(f.hops, f.bytes * 10, f.latency * 10, nullptr));
    e.run();
    EXPECT_GT(checks, 100) << "seed " << seed;
  }
}

TEST(FlowNetworkTest, TinyAndAwkwardFlowsTerminate) {
  // Rates that are not representable exactly and sub-nanosecond flows must still complete, with a number
  // of events linear in the number of flows (no endless re-rounding).
  Engine e;
  FlowNetwork net(e, make_links({kGB / 3.0, 7 * kGB / 11.0}));
  int done = 0;
  for (int i = 0; i < 50; ++i) {
    net.start({Hop{0, 1 + i % 3}, Hop{1, 1}}, 1.0 + i * 0.1, i, [&] { ++done; });
    net.start_route({1}, 1e-3, 0, [&] { ++done; });
  }
  e.run();
  EXPECT_EQ(done, 100);
  EXPECT_LT(e.executed(), 1000u);
}

}  // namespace
}  // namespace arachne

namespace arachne {
namespace {

// k copies of a random set of flows, rotated onto each other (copy i's flow uses per-copy link j of copy
// i + d_j, plus links shared by all copies), started in shuffled order, must finish exactly when one bundle
// per set of copies finishes on the quotient network (one link per orbit of links, multiplicity = how many
// copies cross it; sim/net/network_symmetry.h): max-min filling by levels does not depend on flow or link
// ids, and a bundle of k copies on a shared link weighs what k separate copies weigh.
TEST(FlowNetworkTest, SymmetricCopiesFinishWithTheirBundleOnTheQuotientBitForBit) {
  for (unsigned seed = 1; seed <= 8; ++seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    const int k = 2 + static_cast<int>(seed % 3), per_copy = 6, shared = 2, nflows = 14;
    std::vector<double> caps;
    for (int j = 0; j < per_copy; ++j) {
      const double c = (1 + 9 * u(rng)) * kGB;
      for (int i = 0; i < k; ++i) caps.push_back(c);  // link (j, copy i) has id j*k + i
    }
    for (int j = 0; j < shared; ++j) caps.push_back((2 + 18 * u(rng)) * k * kGB);
    struct Template {
      std::vector<std::pair<int, int>> links;  // (per-copy link, copy offset)
      std::vector<int> shared;
      double bytes;
      TimeNs latency;
    };
    std::vector<Template> ts(nflows);
    for (Template& t : ts) {
      std::vector<int> js(per_copy);
      std::iota(js.begin(), js.end(), 0);
      std::shuffle(js.begin(), js.end(), rng);
      const int n = 1 + static_cast<int>(rng() % 3);
      for (int a = 0; a < n; ++a) t.links.push_back({js[a], static_cast<int>(rng() % k)});
      for (int s = 0; s < shared; ++s)
        if (u(rng) < 0.4) t.shared.push_back(per_copy * k + s);
      t.bytes = (0.1 + 3 * u(rng)) * kGB;
      t.latency = static_cast<TimeNs>(2e6 * u(rng));
    }
    const std::vector<Link> links = make_links(caps);

    Engine e;
    FlowNetwork full(e, links);
    std::vector<std::vector<TimeNs>> full_done(nflows, std::vector<TimeNs>(k, -1));
    for (int f = 0; f < nflows; ++f) {
      std::vector<int> copies(k);
      std::iota(copies.begin(), copies.end(), 0);
      std::shuffle(copies.begin(), copies.end(), rng);
      for (int i : copies) {
        std::vector<LinkId> route;
        for (auto [j, d] : ts[f].links) route.push_back(j * k + (i + d) % k);
        for (int s : ts[f].shared) route.push_back(s);
        full.start_route(route, ts[f].bytes, ts[f].latency, [&, f, i] { full_done[f][i] = e.now(); });
      }
    }
    e.run();

    Engine eq;
    FlowNetwork quotient(eq, links);
    std::vector<int> orbit_size(caps.size(), k);
    for (int s = 0; s < shared; ++s) orbit_size[per_copy * k + s] = 1;
    quotient.set_link_copies(orbit_size);
    std::vector<TimeNs> bundle_done(nflows, -1);
    for (int f = 0; f < nflows; ++f) {
      std::vector<Hop> hops;
      double member_bound = std::numeric_limits<double>::infinity();
      for (auto [j, d] : ts[f].links) {
        hops.push_back({j * k, 1});  // the representative (copy 0) of the orbit, crossed by one copy
        member_bound = std::min(member_bound, caps[j * k]);
      }
      for (int s : ts[f].shared) {
        hops.push_back({s, k});  // every copy crosses it
        member_bound = std::min(member_bound, caps[s]);
      }
      quotient.start(hops, ts[f].bytes, ts[f].latency, [&, f] { bundle_done[f] = eq.now(); }, member_bound);
    }
    eq.run();

    for (int f = 0; f < nflows; ++f)
      for (int i = 0; i < k; ++i) ASSERT_EQ(full_done[f][i], bundle_done[f]) << "seed " << seed << " flow " << f;
    // The same volumes summed in another order (k x hops additions against one product per hop): equal up
    // to one rounding per addition, far below 1e-12 relative for these ~100 terms.
    const double nic = full.bytes_by_class()[static_cast<int>(LinkClass::Nic)];
    EXPECT_NEAR(quotient.bytes_by_class()[static_cast<int>(LinkClass::Nic)], nic, 1e-12 * nic);
  }
}

// Runs `flows` (hops, bytes; all started at 0 without latency) and returns their completion times and the
// number of flow rates the network recomputed.
std::pair<std::vector<TimeNs>, std::uint64_t> run_batch(const std::vector<Link>& links,
                                                        const std::vector<std::pair<std::vector<Hop>, double>>& flows,
                                                        FlowNetwork::Recompute mode) {
  Engine e;
  FlowNetwork net(e, links, mode);
  std::vector<TimeNs> done(flows.size(), -1);
  for (std::size_t i = 0; i < flows.size(); ++i) net.start(flows[i].first, flows[i].second, 0, [&, i] { done[i] = e.now(); });
  e.run();
  return {done, net.flows_recomputed()};
}

TEST(FlowNetworkTest, RemovalsThatLeaveEveryRateAsItIsAreNotRefilled) {
  // Flat all-to-all among 8 GPUs behind one switch (out-link i, in-link 8 + j, equal capacities), every
  // destination receiving a different amount, in both directions (dispatch: bytes set by the receiver;
  // combine: by the sender). Every link carries 7 flows, so all run at c/7 until they end; each group of
  // completions leaves every remaining flow on a link still at c/7, so nothing is refilled after the first
  // filling, and the completion times are those of the full recompute, bit for bit.
  const double c = 400 * kGB;
  const std::vector<Link> links = make_links(std::vector<double>(16, c), LinkClass::NvLink);
  for (const bool by_receiver : {true, false}) {
    std::vector<std::pair<std::vector<Hop>, double>> flows;
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j)
        if (i != j) flows.push_back({{Hop{i, 1}, Hop{8 + j, 1}}, 1e6 * (1 + (by_receiver ? j : i))});
    const auto [comp, recomputed] = run_batch(links, flows, FlowNetwork::Recompute::Component);
    const auto [glob, unused] = run_batch(links, flows, FlowNetwork::Recompute::Global);
    EXPECT_EQ(comp, glob);
    EXPECT_EQ(recomputed, flows.size()) << "only the first filling";
    for (std::size_t k = 0; k < flows.size(); ++k) EXPECT_NEAR(comp[k], std::ceil(flows[k].second / (c / 7) * 1e9), kRoundNs);
  }
}

TEST(FlowNetworkTest, RemovalThatFreesABottleneckIsRefilled) {
  // A and B share link 0 (2 GB/s): 1 GB/s each; A's own link 1 (1 GB/s) also holds it at 1 GB/s. When A
  // (1 GB) ends at 1 s, B is alone on link 0 and speeds up to 2 GB/s: its 3 GB take 1 s + 2 GB / 2 GB/s = 2 s.
  const std::vector<Link> links = make_links({2 * kGB, 1 * kGB, 10 * kGB});
  const std::vector<std::pair<std::vector<Hop>, double>> flows = {{{Hop{0, 1}, Hop{1, 1}}, 1 * kGB},
                                                                  {{Hop{0, 1}, Hop{2, 1}}, 3 * kGB}};
  const auto [comp, recomputed] = run_batch(links, flows, FlowNetwork::Recompute::Component);
  const auto [glob, unused] = run_batch(links, flows, FlowNetwork::Recompute::Global);
  EXPECT_EQ(comp, glob);
  EXPECT_EQ(recomputed, 3u) << "B refilled after A ended";
  EXPECT_NEAR(comp[0], seconds_to_ns(1), kRoundNs);
  EXPECT_NEAR(comp[1], seconds_to_ns(2), kRoundNs);
}

// ---- checked bundles: transfers on different routes filled as one flow while they keep equal rates

// Members that would diverge split: m0 alone on link 0 (c), m1 sharing link 1 with X (c/2 each). As one
// bundle they would freeze together at c/2; the check sees that m0 crosses no link at that share, splits the
// bundle, and every completion is that of three separate flows.
TEST(FlowNetworkTest, CheckedBundleWhoseMembersWouldDivergeIsSplit) {
  const double c = 10 * kGB;
  const std::vector<Link> links = make_links({c, c});
  const std::vector<LinkId> r0 = {0}, r1 = {1};
  for (const bool bundled : {true, false}) {
    Engine e;
    FlowNetwork net(e, links);
    net.set_checked_bundles(bundled);
    std::vector<TimeNs> member_done;
    TimeNs x_done = -1;
    net.start_bundle({&r0, &r1}, 10 * kGB, 0, [&](int n) { member_done.insert(member_done.end(), n, e.now()); });
    net.start_route(r1, 10 * kGB, 0, [&] { x_done = e.now(); });
    e.run();
    ASSERT_EQ(member_done.size(), 2u);
    // m0: 10 GB at c = 1 s; m1 and X: 10 GB at c/2 = 2 s.
    EXPECT_NEAR(member_done[0], seconds_to_ns(1), kRoundNs);
    EXPECT_NEAR(member_done[1], seconds_to_ns(2), kRoundNs);
    EXPECT_NEAR(x_done, seconds_to_ns(2), kRoundNs);
    EXPECT_EQ(net.bundles_split(), bundled ? 1u : 0u);
  }
}

// A flat all-to-all among 8 GPUs behind one switch (out-link i, in-link 8 + j), skewed so that every
// destination (dispatch) or source (combine) moves a different amount: the flows into (out of) one GPU,
// bundled, keep the rate c/7 of the separate flows throughout; nothing splits, the completion times are
// the separate flows' bit for bit, and the network fills 8 flows instead of 56.
TEST(FlowNetworkTest, AllToAllBundlesPerGpuMatchSeparateFlowsBitForBit) {
  const double c = 400 * kGB;
  const std::vector<Link> links = make_links(std::vector<double>(16, c), LinkClass::NvLink);
  std::vector<std::vector<LinkId>> route(64);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) route[static_cast<std::size_t>(i * 8 + j)] = {i, 8 + j};
  for (const bool by_receiver : {true, false}) {
    std::vector<TimeNs> times[2];
    std::uint64_t recomputed[2] = {0, 0};
    for (const bool bundled : {true, false}) {
      Engine e;
      FlowNetwork net(e, links);
      net.set_checked_bundles(bundled);
      std::vector<TimeNs>& t = times[bundled ? 1 : 0];
      t.assign(8, -1);
      for (int g = 0; g < 8; ++g) {
        std::vector<const std::vector<LinkId>*> routes;
        for (int o = 0; o < 8; ++o)
          if (o != g) routes.push_back(&route[static_cast<std::size_t>(by_receiver ? o * 8 + g : g * 8 + o)]);
        int left = 7;
        net.start_bundle(routes, 1e6 * (1 + g), 0, [&t, &e, g, left](int n) mutable {
          left -= n;
          if (left == 0) t[static_cast<std::size_t>(g)] = e.now();
        });
      }
      e.run();
      EXPECT_EQ(net.bundles_split(), 0u);
      recomputed[bundled ? 1 : 0] = net.flows_recomputed();
    }
    EXPECT_EQ(times[0], times[1]);
    EXPECT_EQ(recomputed[0], 56u);
    EXPECT_EQ(recomputed[1], 8u);
    for (int g = 0; g < 8; ++g) EXPECT_NEAR(times[1][static_cast<std::size_t>(g)], std::ceil(1e6 * (1 + g) / (c / 7) * 1e9), kRoundNs);
  }
}

// Random bundles on random routes (shared links, links of two capacities so that many members share a rate
// bound, latencies, bundles started by other bundles' completions), run twice in a row: with checked bundles
// every member completes at the instant it does as a separate flow, in component and in global recompute;
// the bundled, the split and the reused-filling paths are exercised.
TEST(FlowNetworkTest, RandomCheckedBundlesMatchSeparateFlowsBitForBit) {
  struct Group {
    std::vector<std::vector<LinkId>> routes;
    double bytes;
    TimeNs latency;
    int chained;
  };
  std::uint64_t splits = 0, formed = 0;
  for (unsigned seed = 1; seed <= 10; ++seed) {
    std::mt19937_64 rng(seed);
    const int nlinks = 24;
    std::vector<double> caps;
    for (int l = 0; l < nlinks; ++l) caps.push_back((rng() % 4 == 0 ? 200.0 : 100.0) * kGB);
    const std::vector<Link> links = make_links(caps);
    std::vector<Group> groups;
    for (int g = 0; g < 60; ++g) {
      Group gr;
      const int k = 1 + static_cast<int>(rng() % 6);
      const LinkId shared = static_cast<LinkId>(rng() % nlinks);  // e.g. the receiver's link
      for (int m = 0; m < k; ++m) {
        std::vector<LinkId> r = {shared};
        const int extra = static_cast<int>(rng() % 3);
        for (int h = 0; h < extra; ++h) {
          const auto l = static_cast<LinkId>(rng() % nlinks);
          if (std::find(r.begin(), r.end(), l) == r.end()) r.push_back(l);  // a route crosses a link once
        }
        gr.routes.push_back(r);
      }
      gr.bytes = static_cast<double>(1 + rng() % 100000) * 1e4 / 3.0;
      gr.latency = static_cast<TimeNs>(rng() % 3) * 500000;
      gr.chained = g > 0 && rng() % 3 == 0 ? static_cast<int>(rng() % static_cast<unsigned>(g)) : -1;
      groups.push_back(gr);
      // bundled when k >= 2 and every member's bound (min capacity on its route) is the same
      std::vector<double> bounds;
      for (const auto& r : gr.routes) {
        double b = 1e300;
        for (const LinkId l : r) b = std::min(b, caps[static_cast<std::size_t>(l)]);
        bounds.push_back(b);
      }
      // (started once per round)
      formed += k >= 2 && std::all_of(bounds.begin(), bounds.end(), [&](double b) { return b == bounds[0]; }) ? 2 : 0;
    }
    auto run = [&](bool bundled, FlowNetwork::Recompute mode) {
      Engine e;
      FlowNetwork net(e, links, mode);
      net.set_checked_bundles(bundled);
      std::vector<std::vector<TimeNs>> done(groups.size());
      std::function<void(int)> launch = [&](int g) {
        const Group& gr = groups[static_cast<std::size_t>(g)];
        std::vector<const std::vector<LinkId>*> routes;
        for (const auto& r : gr.routes) routes.push_back(&r);
        net.start_bundle(routes, gr.bytes, gr.latency, [&, g](int n) {
          auto& d = done[static_cast<std::size_t>(g)];
          d.insert(d.end(), n, e.now());
          if (d.size() % groups[static_cast<std::size_t>(g)].routes.size() != 0) return;
          for (int c = 0; c < static_cast<int>(groups.size()); ++c)
            if (groups[static_cast<std::size_t>(c)].chained == g) launch(c);
        });
      };
      // Twice over: the second round repeats the first round's components (fillings reused from the first).
      for (int round = 0; round < 2; ++round) {
        for (int g = 0; g < static_cast<int>(groups.size()); ++g)
          if (groups[static_cast<std::size_t>(g)].chained < 0) launch(g);
        e.run();
      }
      if (bundled && mode == FlowNetwork::Recompute::Component) splits += net.bundles_split();
      for (auto& d : done) std::sort(d.begin(), d.end());  // members' times (their order within a bundle is free)
      return done;
    };
    const auto separate = run(false, FlowNetwork::Recompute::Global);
    for (const auto mode : {FlowNetwork::Recompute::Component, FlowNetwork::Recompute::Global}) {
      const auto bundled = run(true, mode);
      ASSERT_EQ(bundled, separate) << "seed " << seed;
    }
    for (const auto& d : separate) ASSERT_FALSE(d.empty());
  }
  EXPECT_GT(splits, 0u) << "no bundle diverged: the split path was not exercised";
  EXPECT_LT(splits, formed) << "every bundle split: the bundled path was not exercised";
}

}  // namespace
}  // namespace arachne
