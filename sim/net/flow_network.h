// Flow-level network: transfers are flows over directed links; concurrent flows share every link
// max-min fairly (progressive filling, Bertsekas & Gallager "Data Networks" §6.5.2; as SimGrid's lmm),
// and every rate is recomputed when any flow starts or ends - those are the discrete events.
//
// A flow may be a *bundle* of `members` identical transfers moving in lockstep (e.g. the TP ranks of a
// group sending their shards): each hop carries a multiplicity, the number of members whose path uses
// that link, so the link's load is multiplicity x member rate.
//
// A *checked bundle* (start_bundle) groups transfers on different routes that the caller expects to keep
// equal rates (e.g. the flows of an all-to-all into one GPU). It is filled as one flow, and every filling
// checks that each member would have frozen at the bundle's level on its own (see flow_network.cpp); a
// bundle that fails the check is split into its members before any rate is applied, so rates and
// completion times are those of the separate transfers bit for bit.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "sim/core/engine.h"
#include "sim/hw/topology.h"

namespace arachne {

using FlowId = std::uint64_t;

struct Hop {
  LinkId link;
  int mult = 1;
};

class FlowNetwork {
 public:
  // How the rates are recomputed after a change. Component (default): only the flows connected to the
  // changed ones through shared links (transitively); Global: every active flow. Both give bit-identical
  // rates and completion times (tests/sim/flow_network_test.cpp checks it); Global exists for that test.
  enum class Recompute { Component, Global };

  FlowNetwork(Engine& engine, const std::vector<Link>& links, Recompute mode = Recompute::Component);
  ~FlowNetwork();
  FlowNetwork(FlowNetwork&&) noexcept;
  FlowNetwork(const FlowNetwork&) = delete;
  FlowNetwork& operator=(const FlowNetwork&) = delete;
  FlowNetwork& operator=(FlowNetwork&&) = delete;

  // Starts a transfer of `bytes` per member over `hops` after `latency` (the first byte arrives after the
  // latency; then the flow drains at its max-min rate). `done` runs at completion. Zero bytes or no hops:
  // completes after the latency alone. Rates change at the instant a flow activates or ends; all changes at
  // one instant are applied together by one reallocation event at that instant (so rate() read from the
  // same instant, before that event, may still show the old rates).
  // `rate_bound` (optional) is an upper bound on the member rate known to the caller, used when it exceeds
  // the computed one (min over hops of capacity / mult): a bundle of k identical copies of a transfer passes
  // the bound of one copy, so that links are judged slack exactly as with k separate copies.
  FlowId start(std::vector<Hop> hops, double bytes, TimeNs latency, std::function<void()> done,
               double rate_bound = 0);
  // Starts the transfers along `routes` (one member each), `bytes` each, all after `latency`, as one checked
  // bundle (see above) when checked bundles are enabled, else as separate flows. `done(k)` runs when k of
  // them have completed (k = all members at once while they are bundled). Members are bundled only when they
  // all cross links and share one rate bound (min capacity / multiplicity on their route), and bytes > 0.
  void start_bundle(const std::vector<const std::vector<LinkId>*>& routes, double bytes, TimeNs latency,
                    std::function<void(int)> done);
  // The same for the transfers src -> dst of `pairs`, along topo.route (`topo` must be the topology whose
  // links this network was built on): routes are looked up only the first time a list of pairs is seen.
  void start_bundle(const Topology& topo, const std::vector<std::pair<GpuId, GpuId>>& pairs, double bytes,
                    TimeNs latency, std::function<void(int)> done);
  // Whether start_bundle() bundles (default) or starts separate flows: the switch the tests compare.
  void set_checked_bundles(bool on) { checked_bundles_ = on; }
  bool checked_bundles() const { return checked_bundles_; }
  // Checked bundles split so far because a member would have diverged (diagnostics, tests).
  std::uint64_t bundles_split() const;

  // Convenience: a single transfer along a route.
  FlowId start_route(const std::vector<LinkId>& route, double bytes, TimeNs latency,
                     std::function<void()> done);

  // Each link stands for `copies[l]` symmetric links in bytes_by_class() (the representative of an orbit in a
  // quotient network, sim/net/network_symmetry.h); 1 for every link unless set.
  void set_link_copies(std::vector<int> copies);

  // Current member rate of an active flow (bytes/s), 0 if not (yet) active.
  double rate(FlowId id) const;
  std::size_t active_flows() const;
  // Bytes carried so far on each link class (bytes x multiplicity, counted at flow start). Summed in fixed
  // point (multiples of 2^-20 byte, each transfer's bytes rounded to that), so the total does not depend on
  // the order in which flows start, nor on whether copies run as separate flows or as one bundle.
  std::array<double, kLinkClasses> bytes_by_class() const;
  std::uint64_t flows_started() const { return flows_started_; }
  // Links any started flow has used (a census: which links a set of transfers touches).
  const std::vector<bool>& links_used() const { return links_used_; }
  // Number of rate reallocations run so far (diagnostics, benchmarks).
  std::uint64_t reallocations() const;
  // Sum over reallocations of the flows whose rates were recomputed (diagnostics, benchmarks).
  std::uint64_t flows_recomputed() const;

 private:
  // start() on `hops`, which it normalises in place (sorted by link, repeated links merged).
  FlowId start_hops(std::vector<Hop>& hops, double bytes, TimeNs latency, std::function<void()> done,
                    double rate_bound);
  // bytes_by_class_ and links_used_ for a transfer over normalised `hops`.
  void count_bytes(const std::vector<Hop>& hops, double bytes);
  struct State;  // flows, per-link adjacency, scratch of the progressive filling (flow_network.cpp)
  struct BundleShape;  // what a checked bundle derives from its members' routes (flow_network.cpp)
  // Starts a checked bundle of k members of `shape`.
  void start_shape(const BundleShape& shape, std::size_t k, double bytes, TimeNs latency, std::function<void(int)> done);
  std::array<__int128, kLinkClasses> bytes_by_class_{};  // in units of 2^-20 byte (kBytesPerUnit)
  std::uint64_t flows_started_ = 0;
  std::vector<bool> links_used_;
  std::vector<int> link_copies_;
  bool checked_bundles_ = true;
  std::unique_ptr<State> st_;  // stable address: engine events refer to it
};

}  // namespace arachne
