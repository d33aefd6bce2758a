// Max-min fair sharing by progressive filling (Bertsekas & Gallager, "Data Networks", 2nd ed., §6.5.2):
// raise every unfrozen flow's rate together; the first link to saturate freezes the flows crossing it at
// its fair share; repeat. With bundles a link's fair share is remaining capacity / sum of multiplicities.
//
// Exactness and determinism:
//  * Filling proceeds by levels (see fill()): all links at the smallest share saturate together and each
//    link's remaining capacity drops by (integer sum of multiplicities) x share once per level, so rates
//    depend on the flow-link incidence, multiplicities and capacities only, never on ids or visiting order.
//    Links that can never saturate ("slack", see is_slack()) are left out. Restricted to one component of
//    the relation "flows share a non-slack link", the floating-point operations are the same whether other
//    components are filled in the same run or not, so recomputing only the components touched by a change
//    is bit-identical to recomputing every active flow (FlowNetworkTest.ComponentRecomputeMatchesGlobalBitForBit).
//  * A flow's remaining bytes are rebased (remaining -= old rate x elapsed) only when its rate changes
//    bitwise, so its completion time is a function of its own rate history, not of how often it was revisited.
//  * All changes at one instant (activations, completions) are applied by one reallocation event at that
//    instant; equal-time events run in insertion order, so this batching is deterministic too.
//
// Checked bundles (start_bundle): k transfers on different routes with equal bytes and activation time,
// filled as one flow whose hops are the sum of their routes. Compare the filling of this network with the
// filling of the one where the members are separate flows. Suppose both have frozen the same flows at the
// same levels so far (a bundle counting as its members); then every link has the same remaining capacity
// and the same weight (sum of multiplicities) in both, hence the same share, and the next level s and its
// set of links are the same. A separate member freezes at s exactly when its own route crosses a link whose
// share is s (a shared link at s is in the level; a private link at s is its tightest, since a smaller one
// would have frozen it before). So if, whenever a bundle freezes at s, each member's route crosses a
// non-slack link of share exactly s (freeze() checks it), both fillings freeze the same flows at s, remove
// the same multiplicity x s from every link, and by induction give every member the bundle's rate bit for
// bit. Slack is the same in both: a member's rate bound is the bundle's (start_bundle bundles only equal
// bounds), so every link's demand is the same multiset of (bound, multiplicity). If the check fails, the
// bundle is split into its members (same rate history, so the same remaining bytes and finish time) and the
// component is filled again before any rate is applied. Skipping a refill after removals
// (unchanged_by_removals) likewise requires each member's route, not just the bundle's, to cross a link at
// the common share. Members hold consecutive ids, reserved when the bundle starts, so flows order
// (completions at one instant) as the separate members would, and a bundle completes at the instant its
// members would, all together. A link's list of flows has no order (a leaving flow's entry is replaced by
// the last one): filling, slack and the skipped refill read it as a set.
#include "sim/net/flow_network.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace arachne {

namespace {
constexpr TimeNs kNever = std::numeric_limits<TimeNs>::max();
constexpr std::uint32_t kNoSlot = std::numeric_limits<std::uint32_t>::max();
// A flow with at most this fraction of its bytes left completes (guards against endless rounding steps).
constexpr double kDoneFraction = 1e-6;
// Completion delta is clamped here (~126 years) so the integer conversion never overflows.
constexpr double kMaxDeltaNs = 4e18;
// Fixed-point unit of bytes_by_class_: 2^-20 byte (a power of two, so scaling is exact).
constexpr double kBytesPerUnit = 1048576.0;
}  // namespace

namespace {
// Sorts hops by link and merges repeated links (their multiplicities add up), after dropping hops of no
// multiplicity; throws on a link id outside [0, nlinks) with a positive multiplicity. Hops already in that form are left as they are.
void normalise(std::vector<Hop>& hops, LinkId nlinks) {
  bool canonical = true;
  for (std::size_t i = 0; i < hops.size(); ++i) {
    const Hop& h = hops[i];
    if (h.mult > 0 && (h.link < 0 || h.link >= nlinks)) {
      throw std::out_of_range("FlowNetwork::start: link id " + std::to_string(h.link) + " out of range");
    }
    canonical = canonical && h.mult > 0 && (i == 0 || hops[i - 1].link < h.link);
  }
  if (canonical) return;
  std::erase_if(hops, [](const Hop& h) { return h.mult <= 0; });
  std::sort(hops.begin(), hops.end(), [](const Hop& a, const Hop& b) { return a.link < b.link; });
  std::size_t out = 0;
  for (std::size_t i = 0; i < hops.size(); ++i) {
    if (out > 0 && hops[out - 1].link == hops[i].link) {
      hops[out - 1].mult += hops[i].mult;
    } else {
      hops[out++] = hops[i];
    }
  }
  hops.resize(out);
}
}  // namespace

// What a checked bundle derives from its members' routes alone, cached per list of routes (an all-to-all
// repeats the same bundles at every layer and micro-batch).
struct FlowNetwork::BundleShape {
  bool bundles = false;  // every member crosses a link, all with one rate bound
  double bound = 0;
  std::vector<Hop> member_hops;          // each member's normalised hops, one after another
  std::vector<std::uint32_t> member_end;
  std::vector<Hop> hops;                 // their sum, sorted by link
  std::vector<LinkId> common_links;      // links every member crosses
  std::array<std::int64_t, kLinkClasses> class_mult{};  // per link class: sum of multiplicity x link copies
};

struct FlowNetwork::State {
  struct Flow {
    FlowId id = 0;
    std::vector<Hop> hops;  // sorted by link, merged, mult > 0
    std::vector<std::uint32_t> at;  // while active: per hop, the position of its entry in link_flows
    double bytes = 0;
    double bound = 0;       // upper bound on its member rate: min over hops of capacity / mult
    double remaining = 0;   // bytes per member left as of t_last
    double rate = 0;        // bytes/s per member
    TimeNs t_last = 0;
    TimeNs finish = kNever;
    std::function<void()> done;
    // Checked bundle (members > 1): each member's normalised hops, one after another in member_hops, member m
    // ending at member_end[m]; `hops` is their sum. done_n(k) reports k completed members.
    int members = 1;
    std::vector<Hop> member_hops;
    std::vector<std::uint32_t> member_end;
    std::vector<LinkId> common_links;  // checked bundle: the links every member crosses
    const BundleShape* shape = nullptr;  // checked bundle: its shape (member routes, sum of hops)
    std::function<void(int)> done_n;
    bool in_use = false;
    bool active = false;
    // scratch of reallocate()
    std::uint64_t mark = 0;
    bool frozen = false;
    double new_rate = 0;
    double private_share = 0;
    LinkId private_link = -1;
    // The rate s of every flow of the last filling that computed this flow's rate, when that filling froze
    // all its flows at one level s; 0 otherwise (see unchanged_by_removals()).
    double uniform_share = 0;
  };
  struct LinkEntry {
    std::uint32_t slot;
    std::uint32_t hop;  // the index of this link in the flow's hops
  };
  struct Key {  // candidate saturating link (see fill())
    double share;
    LinkId link;
    std::uint32_t slot;  // kNoSlot: a shared link; else the flow whose tightest private link this is
  };
  struct Due {  // candidate completion
    TimeNs finish;
    FlowId id;
    std::uint32_t slot;
  };

  State(Engine& e, const std::vector<Link>& l, Recompute m) : engine(e), mode(m) {
    const std::size_t n = l.size();
    capacity.reserve(n);
    link_class.reserve(n);
    for (const Link& link : l) {
      capacity.push_back(link.capacity);
      link_class.push_back(link.cls);
    }
    link_flows.resize(n);
    link_bounds.resize(n);
    link_mark.assign(n, 0);
    link_weight.assign(n, 0);
    slack.assign(n, 1);
    slack_stale.assign(n, 0);
    cap_left.assign(n, 0.0);
    weight.assign(n, 0);
    freed.assign(n, 0);
    link_level.assign(n, 0);
    slot_of_id.push_back(kNoSlot);  // FlowId 0 is never issued
  }

  Engine& engine;
  std::vector<double> capacity;        // per link, bytes/s
  std::vector<LinkClass> link_class;   // per link
  const Recompute mode;

  std::vector<Flow> flows;  // by slot
  std::vector<std::uint32_t> free_flow_slots;
  std::vector<std::uint32_t> slot_of_id;             // by FlowId; kNoSlot once finished
  // Active flows on each link, in no particular order (rates do not depend on it: see fill()); a flow
  // leaves by moving the last entry into its place.
  std::vector<std::vector<LinkEntry>> link_flows;
  std::vector<std::int64_t> link_weight;             // sum of multiplicities of the active flows on each link
  // Per link, the distinct rate bounds of its active flows, increasing, each with the sum of their
  // multiplicities (demand()).
  std::vector<std::vector<std::pair<double, std::int64_t>>> link_bounds;
  std::vector<char> slack;        // the link cannot saturate whatever the allocation (see is_slack)
  std::vector<char> slack_stale;  // its flows changed since `slack` was computed
  std::size_t active = 0;

  // scratch of reallocate(), per link
  std::vector<std::uint64_t> link_mark;
  std::vector<double> cap_left;
  std::vector<std::int64_t> weight;  // sum of multiplicities of unfrozen flows
  std::vector<std::int64_t> freed;   // multiplicities frozen on the link in the current level
  std::vector<std::uint64_t> link_level;  // last level the link joined (a link joins a level once)
  std::vector<Key> level;
  std::vector<LinkId> touched;
  std::uint64_t level_no = 0;
  std::vector<LinkId> comp_links, stack;
  std::vector<std::uint32_t> comp_flows;
  std::vector<Key> pq;
  std::uint64_t epoch = 0;

  struct ActivationBatch {
    TimeNs now = 0, at = 0;  // started at `now`, activate at `at`
    std::vector<std::uint32_t> slots;
  };
  std::vector<ActivationBatch> batches;
  std::vector<int> free_batches;
  int open_batch = -1;  // the batch that flows started now with the same activation time join
  std::vector<std::uint32_t> finished_scratch;  // of on_due()
  struct Callback {
    std::function<void()> done;
    std::function<void(int)> done_n;
    int members = 1;
  };
  std::vector<Callback> callbacks_scratch;
  std::vector<std::uint32_t> diverged;  // checked bundles the current filling found diverging (see freeze())
  std::uint64_t splits = 0;
  std::vector<Hop> route_scratch;  // of start_route()

  struct KeyHash {
    template <class T>
    std::size_t operator()(const std::vector<T>& v) const {
      std::uint64_t h = 1469598103934665603ULL;  // FNV-1a over the words
      for (const T x : v) h = (h ^ static_cast<std::uint64_t>(x)) * 1099511628211ULL;
      return static_cast<std::size_t>(h);
    }
  };
  std::unordered_map<std::vector<LinkId>, BundleShape, KeyHash> shapes;  // never erased: flows point to them
  // Rates of earlier fillings of components made of checked bundles only (see fill_component()).
  std::unordered_map<std::vector<std::uintptr_t>, std::vector<double>, KeyHash> fill_memo;
  std::vector<std::uintptr_t> memo_key;
  std::vector<LinkId> shape_key;
  std::vector<int> crossing_scratch;
  std::vector<int> hop_of_link;  // per link, its position in a sum of hops being built, or -1

  // The shape of the bundle whose k members' routes `route(m)` gives, cached under `key` (which must
  // determine the routes); a new shape marks its links in `links_used` and weighs them by `link_copies`.
  template <class RouteOf>
  const BundleShape& shape_of(const std::vector<LinkId>& key, RouteOf route, std::size_t k,
                              const std::vector<int>& link_copies, std::vector<bool>& links_used) {
    const auto [it, added] = shapes.try_emplace(key);
    if (added) build_shape(route, k, link_copies, links_used, it->second);
    return it->second;
  }

  template <class RouteOf>
  void build_shape(RouteOf route, std::size_t k, const std::vector<int>& link_copies, std::vector<bool>& links_used,
                   BundleShape& sh) {
    std::vector<Hop>& one = route_scratch;
    sh.bundles = true;
    for (std::size_t m = 0; m < k && sh.bundles; ++m) {
      one.clear();
      for (const LinkId l : route(m)) one.push_back(Hop{l, 1});
      normalise(one, static_cast<LinkId>(capacity.size()));
      double b = std::numeric_limits<double>::infinity();
      for (const Hop& h : one) b = std::min(b, capacity[h.link] / static_cast<double>(h.mult));
      sh.bundles = !one.empty() && (m == 0 || b == sh.bound);
      sh.bound = b;
      sh.member_hops.insert(sh.member_hops.end(), one.begin(), one.end());
      sh.member_end.push_back(static_cast<std::uint32_t>(sh.member_hops.size()));
    }
    if (!sh.bundles) return;
    // The sum of the members' hops, and the links every member crosses (a member crosses a link at most
    // once after normalising, so: crossed by k members).
    if (hop_of_link.size() != capacity.size()) hop_of_link.assign(capacity.size(), -1);
    crossing_scratch.clear();
    for (const Hop& h : sh.member_hops) {
      int& at = hop_of_link[static_cast<std::size_t>(h.link)];
      if (at < 0) {
        at = static_cast<int>(sh.hops.size());
        sh.hops.push_back(h);
        crossing_scratch.push_back(1);
      } else {
        sh.hops[static_cast<std::size_t>(at)].mult += h.mult;
        ++crossing_scratch[static_cast<std::size_t>(at)];
      }
    }
    for (std::size_t i = 0; i < sh.hops.size(); ++i) {
      hop_of_link[static_cast<std::size_t>(sh.hops[i].link)] = -1;
      if (crossing_scratch[i] == static_cast<int>(k)) sh.common_links.push_back(sh.hops[i].link);
    }
    std::sort(sh.hops.begin(), sh.hops.end(), [](const Hop& a, const Hop& b) { return a.link < b.link; });
    for (const Hop& h : sh.hops) {
      const std::int64_t copies = link_copies.empty() ? 1 : link_copies[static_cast<std::size_t>(h.link)];
      sh.class_mult[static_cast<int>(link_class[h.link])] += h.mult * copies;
      links_used[static_cast<std::size_t>(h.link)] = true;
    }
  }

  std::vector<LinkId> dirty_links;           // links whose flows changed since the last reallocation
  std::vector<std::uint32_t> new_flows;      // flows activated since the last reallocation
  bool realloc_pending = false;
  std::vector<Due> due;  // min-heap on (finish, id), lazily invalidated
  EventId next_event = 0;
  TimeNs next_event_time = kNever;
  std::uint64_t reallocs = 0;
  std::uint64_t recomputed = 0;

  struct KeyAfter {  // heap order: smallest (share, link) on top
    bool operator()(const Key& a, const Key& b) const {
      return a.share != b.share ? a.share > b.share : a.link > b.link;
    }
  };
  struct DueAfter {  // heap order: smallest (finish, id) on top
    bool operator()(const Due& a, const Due& b) const {
      return a.finish != b.finish ? a.finish > b.finish : a.id > b.id;
    }
  };

  bool due_valid(const Due& d) const {
    const Flow& f = flows[d.slot];
    return f.in_use && f.active && f.id == d.id && f.finish == d.finish;
  }

  void request_realloc() {
    if (realloc_pending) return;
    realloc_pending = true;
    engine.schedule_at(engine.now(), [this] { reallocate(); });
  }

  void activate(std::uint32_t slot) {
    Flow& f = flows[slot];
    f.active = true;
    f.rate = 0;
    f.remaining = f.bytes;
    f.t_last = engine.now();
    f.finish = kNever;
    attach(slot);
    active += static_cast<std::size_t>(f.members);
    new_flows.push_back(slot);
    request_realloc();
  }

  // Enters the flow on its links.
  void attach(std::uint32_t slot) {
    Flow& f = flows[slot];
    f.at.resize(f.hops.size());
    for (std::uint32_t k = 0; k < f.hops.size(); ++k) {
      const Hop& h = f.hops[k];
      auto& lf = link_flows[h.link];
      f.at[k] = static_cast<std::uint32_t>(lf.size());
      lf.push_back(LinkEntry{slot, k});
      link_weight[h.link] += h.mult;
      add_bound(h.link, f.bound, h.mult);
      slack_stale[h.link] = 1;
      dirty_links.push_back(h.link);
    }
  }

  // Flows started at one instant with the same activation time activate in one event, in start order.
  // Activations at one instant commute with every other event there (they change no rate until the
  // reallocation, which runs after all of them), so this saves one event per flow and changes nothing else.
  void activate_later(std::uint32_t slot, TimeNs at) {
    if (open_batch >= 0 && batches[open_batch].now == engine.now() && batches[open_batch].at == at) {
      batches[open_batch].slots.push_back(slot);
      return;
    }
    int b;
    if (!free_batches.empty()) {
      b = free_batches.back();
      free_batches.pop_back();
    } else {
      b = static_cast<int>(batches.size());
      batches.emplace_back();
    }
    batches[b].now = engine.now();
    batches[b].at = at;
    batches[b].slots.assign(1, slot);
    open_batch = b;
    engine.schedule_at(at, [this, b] { activate_batch(b); });
  }

  void activate_batch(int b) {
    if (open_batch == b) open_batch = -1;
    for (const std::uint32_t slot : batches[b].slots) activate(slot);
    batches[b].slots.clear();
    free_batches.push_back(b);
  }

  // Takes the flows of `slots` off their links (inactive).
  void detach_all(const std::vector<std::uint32_t>& slots) {
    for (const std::uint32_t slot : slots) {
      leave_links(slot);
      flows[slot].active = false;
      active -= static_cast<std::size_t>(flows[slot].members);
    }
  }

  void leave_links(std::uint32_t slot) {
    const Flow& f = flows[slot];
    for (std::uint32_t k = 0; k < f.hops.size(); ++k) {
      const Hop& h = f.hops[k];
      auto& lf = link_flows[h.link];
      const std::uint32_t p = f.at[k];
      if (p + 1 != lf.size()) {
        lf[p] = lf.back();
        flows[lf[p].slot].at[lf[p].hop] = p;
      }
      lf.pop_back();
      link_weight[h.link] -= h.mult;
      remove_bound(h.link, f.bound, h.mult);
      slack_stale[h.link] = 1;
      dirty_links.push_back(h.link);
    }
  }

  // Replaces checked bundle `slot` by its members as separate flows in the bundle's state (they had its rate
  // history, hence its remaining bytes and finish time), ids id, id + 1, ... in member order; member 0 keeps
  // the slot and its due entry.
  void split(std::uint32_t slot) {
    ++splits;
    leave_links(slot);
    Flow b = std::move(flows[slot]);
    const auto done_n = std::make_shared<std::function<void(int)>>(std::move(b.done_n));
    for (int m = 0; m < b.members; ++m) {
      const std::uint32_t s = m == 0 ? slot : allocate();
      Flow& f = flows[s];
      f.id = b.id + static_cast<FlowId>(m);
      f.hops.assign(b.member_hops.begin() + (m == 0 ? 0 : b.member_end[m - 1]),
                    b.member_hops.begin() + b.member_end[m]);
      f.bytes = b.bytes;
      f.bound = b.bound;
      f.remaining = b.remaining;
      f.rate = b.rate;
      f.t_last = b.t_last;
      f.finish = b.finish;
      f.done = [done_n] { (*done_n)(1); };
      f.members = 1;
      f.member_hops.clear();
      f.member_end.clear();
      f.common_links.clear();
      f.shape = nullptr;
      f.done_n = nullptr;
      f.in_use = true;
      f.active = true;
      f.frozen = false;
      f.uniform_share = b.uniform_share;
      slot_of_id[f.id] = s;
      attach(s);
      if (m > 0 && f.finish != kNever) {
        due.push_back(Due{f.finish, f.id, s});
        std::push_heap(due.begin(), due.end(), DueAfter{});
      }
    }
    // The moved-from slot storage went to member 0; give the bundle's vectors back for reuse.
    flows[slot].member_hops = std::move(b.member_hops);
    flows[slot].member_hops.clear();
    flows[slot].member_end = std::move(b.member_end);
    flows[slot].member_end.clear();
  }

  // A link is slack when even every flow on it at its own rate bound (the smallest capacity/mult on its
  // path) would leave capacity unused: it can never be the saturating link, so leaving it out of the
  // filling changes no rate, and flows that share only slack links do not interact. The margin 1e-9 keeps
  // a link whose demand equals its capacity (a flow's own bottleneck) in the filling.
  bool is_slack(LinkId l) {
    if (slack_stale[l]) {
      slack[l] = capacity[l] > demand(l) * (1 + 1e-9) ? 1 : 0;
      slack_stale[l] = 0;
    }
    return slack[l] != 0;
  }

  // Sum over the link's flows of mult x rate bound, as sum over distinct bounds (increasing) of bound x the
  // integer sum of their multiplicities: a function of the multiset of (bound, mult) alone, so it does not
  // depend on flow ids, and k copies of a flow weigh exactly what one bundle of multiplicity k does.
  double demand(LinkId l) const {
    double d = 0;
    for (const auto& [bound, mult] : link_bounds[l]) d += bound * static_cast<double>(mult);
    return d;
  }
  // link_bounds[l] as a flow of rate bound `bound` and multiplicity `mult` on l enters or leaves it.
  void add_bound(LinkId l, double bound, std::int64_t mult) {
    auto& v = link_bounds[l];
    if (!v.empty() && v.back().first == bound) {  // the usual case: every flow on the link has one bound
      v.back().second += mult;
      return;
    }
    const auto at = std::lower_bound(v.begin(), v.end(), bound, [](const auto& p, double b) { return p.first < b; });
    if (at != v.end() && at->first == bound) at->second += mult;
    else v.insert(at, {bound, mult});
  }
  void remove_bound(LinkId l, double bound, std::int64_t mult) {
    auto& v = link_bounds[l];
    if (v.size() == 1 && v.front().first == bound) {
      if ((v.front().second -= mult) == 0) v.clear();
      return;
    }
    const auto at = std::lower_bound(v.begin(), v.end(), bound, [](const auto& p, double b) { return p.first < b; });
    if (at == v.end() || at->first != bound)
      throw std::logic_error("flow network: a leaving flow's rate bound is not on its link");
    if ((at->second -= mult) == 0) v.erase(at);
  }

  void add_flow(std::uint32_t slot) {
    Flow& f = flows[slot];
    f.mark = epoch;
    comp_flows.push_back(slot);
    for (const Hop& h : f.hops) {
      if (link_mark[h.link] != epoch) {
        link_mark[h.link] = epoch;
        stack.push_back(h.link);
      }
    }
  }

  // The flows whose rates may change: the new flows, every flow on a changed link that was or is not slack,
  // and everything connected to those through non-slack links. That is a union of whole components of the
  // "share a non-slack link" relation, whose rates depend on nothing outside them (see the file comment).
  // Invariant: between reallocations slack[l] is the status under which the current rates were computed
  // (every changed link is re-evaluated here, and a link's status only changes when its flows do).
  void collect_component() {
    ++epoch;
    comp_links.clear();
    comp_flows.clear();
    stack.clear();
    if (mode == Recompute::Global) {
      for (std::uint32_t s = 0; s < flows.size(); ++s) {
        if (flows[s].in_use && flows[s].active) add_flow(s);
      }
      comp_links.swap(stack);
      dirty_links.clear();
      new_flows.clear();
      return;
    }
    for (const LinkId l : dirty_links) {
      if (link_mark[l] == epoch) continue;
      link_mark[l] = epoch;
      comp_links.push_back(l);
      const bool was_slack = slack[l] != 0;
      if (is_slack(l) && was_slack) continue;  // connected nothing before, connects nothing now
      for (const LinkEntry& e : link_flows[l]) {
        if (flows[e.slot].mark != epoch) add_flow(e.slot);
      }
    }
    dirty_links.clear();
    // Redundant today (a new flow's tightest link carries at least its own demand, so it is never slack and
    // is traversed above), kept so that correctness does not hinge on that margin.
    for (const std::uint32_t s : new_flows) {
      if (flows[s].mark != epoch) add_flow(s);
    }
    new_flows.clear();
    while (!stack.empty()) {
      const LinkId l = stack.back();
      stack.pop_back();
      comp_links.push_back(l);
      if (is_slack(l)) continue;
      for (const LinkEntry& e : link_flows[l]) {
        if (flows[e.slot].mark != epoch) add_flow(e.slot);
      }
    }
  }

  // Progressive filling over comp_links / comp_flows, level by level; leaves each flow's result in new_rate.
  //
  // A level is the smallest current share s among the links that still carry unfrozen flows (a link used
  // by several flows: "shared", share = cap_left / weight) and the flows' tightest private links (used by
  // that flow alone: share = capacity / mult, fixed). Every link whose share equals s, and every flow whose
  // private share equals s, freezes at s together; then each shared link it crossed loses, in one step,
  // (sum of the multiplicities frozen on it) x s. Because the level is a set and the sum of multiplicities
  // an integer, the rates do not depend on link or flow ids: two links related by a symmetry of the flows
  // (same capacities, same multiplicities) get bit-identical shares at every level, and a bundle of k
  // identical copies frozen on a link removes exactly what k separate copies remove. The mirrored
  // simulation of symmetric pipelines (sim/exec/pipeline_mirror.h) rests on that.
  //
  // Heap entries are (share, link); every live shared link always has an entry whose key is its current
  // share (pushed at the start and whenever a level changes its share); an entry whose key differs from
  // the link's current share, or whose link is dead (weight 0), is stale and dropped.
  void fill() {
    pq.clear();
    for (const std::uint32_t s : comp_flows) {
      Flow& f = flows[s];
      f.frozen = false;
      f.new_rate = 0;
      f.private_share = std::numeric_limits<double>::infinity();
      f.private_link = -1;
    }
    for (const LinkId l : comp_links) {
      const auto& lf = link_flows[l];
      if (lf.empty() || is_slack(l)) continue;
      cap_left[l] = capacity[l];
      weight[l] = link_weight[l];
      freed[l] = 0;
      const double share = cap_left[l] / static_cast<double>(weight[l]);
      if (lf.size() > 1) {
        pq.push_back(Key{share, l, kNoSlot});
        continue;
      }
      Flow& f = flows[lf.front().slot];
      if (share < f.private_share || (share == f.private_share && l < f.private_link)) {
        f.private_share = share;
        f.private_link = l;
      }
    }
    for (const std::uint32_t s : comp_flows) {
      const Flow& f = flows[s];
      if (f.private_link >= 0) pq.push_back(Key{f.private_share, f.private_link, s});
    }
    std::make_heap(pq.begin(), pq.end(), KeyAfter{});
    while (!pq.empty()) {
      const Key top = pop_key();
      if (!live(top)) continue;
      const double s = top.share;
      level.clear();
      level.push_back(top);
      ++level_no;
      if (top.slot == kNoSlot) link_level[top.link] = level_no;
      while (!pq.empty() && pq.front().share == s) {
        const Key k = pop_key();
        if (!live(k) || (k.slot == kNoSlot && link_level[k.link] == level_no)) continue;
        if (k.slot == kNoSlot) link_level[k.link] = level_no;
        level.push_back(k);
      }
      freeze_level(s);
    }
  }

  Key pop_key() {
    std::pop_heap(pq.begin(), pq.end(), KeyAfter{});
    const Key k = pq.back();
    pq.pop_back();
    return k;
  }

  bool live(const Key& k) const {
    if (k.slot != kNoSlot) return !flows[k.slot].frozen;
    return weight[k.link] > 0 && cap_left[k.link] / static_cast<double>(weight[k.link]) == k.share;
  }

  // Freezes the flows of the level at share s (rate max(s, 0)).
  void freeze_level(double s) {
    const double r = std::max(s, 0.0);
    touched.clear();
    for (const Key& k : level) {
      if (k.slot != kNoSlot) {
        if (!flows[k.slot].frozen) freeze(k.slot, s, r);
        continue;
      }
      for (const LinkEntry& e : link_flows[k.link])
        if (!flows[e.slot].frozen) freeze(e.slot, s, r);
    }
    for (const LinkId l : touched) {
      weight[l] -= freed[l];
      cap_left[l] = std::max(cap_left[l] - static_cast<double>(freed[l]) * r, 0.0);
      freed[l] = 0;
      if (weight[l] > 0) {
        pq.push_back(Key{cap_left[l] / static_cast<double>(weight[l]), l, kNoSlot});
        std::push_heap(pq.begin(), pq.end(), KeyAfter{});
      }
    }
  }

  void freeze(std::uint32_t slot, double s, double r) {
    Flow& f = flows[slot];
    f.frozen = true;
    f.new_rate = r;
    if (f.members > 1 && !members_at_share(f, s)) diverged.push_back(slot);
    for (const Hop& h : f.hops) {
      if (link_flows[h.link].size() < 2 || slack[h.link]) continue;  // private or slack: not read again
      if (freed[h.link] == 0) touched.push_back(h.link);
      freed[h.link] += h.mult;
    }
  }

  // Whether every member of checked bundle f crosses a non-slack link whose share in the current filling
  // (before this level's freezes are subtracted) is exactly s: then each would freeze at s on its own (see
  // the file comment).
  bool members_at_share(const Flow& f, double s) const {
    auto at_share = [&](LinkId l) { return !slack[l] && cap_left[l] / static_cast<double>(weight[l]) == s; };
    for (const LinkId l : f.common_links)
      if (at_share(l)) return true;
    std::uint32_t begin = 0;
    for (const std::uint32_t end : f.member_end) {
      bool at = false;
      for (std::uint32_t i = begin; i < end && !at; ++i) at = at_share(f.member_hops[i].link);
      if (!at) return false;
      begin = end;
    }
    return true;
  }

  void apply_rate(std::uint32_t slot, TimeNs now) {
    Flow& f = flows[slot];
    if (f.new_rate == f.rate) return;  // bitwise unchanged: keep the rate history (see file comment)
    if (f.rate > 0) f.remaining -= f.rate * (static_cast<double>(now - f.t_last) * 1e-9);
    f.t_last = now;
    f.rate = f.new_rate;
    TimeNs finish;
    if (f.remaining <= kDoneFraction * f.bytes) {
      finish = now;
    } else if (f.rate <= 0) {
      finish = kNever;
    } else {
      const double dt = std::ceil(f.remaining / f.rate * 1e9);
      finish = now + static_cast<TimeNs>(std::min(dt, kMaxDeltaNs));
    }
    if (finish != f.finish) {
      f.finish = finish;
      if (finish != kNever) {
        due.push_back(Due{finish, f.id, slot});
        std::push_heap(due.begin(), due.end(), DueAfter{});
      }
    }
  }

  void reallocate() {
    realloc_pending = false;
    ++reallocs;
    if (unchanged_by_removals()) {
      schedule_next();
      return;
    }
    collect_component();
    fill_component();
    recomputed += comp_flows.size();
    mark_uniform();
    const TimeNs now = engine.now();
    for (const std::uint32_t s : comp_flows) apply_rate(s, now);
    schedule_next();
  }

  // fill() on the collected component, splitting diverging bundles until none diverges. A component of
  // checked bundles only takes the rates of an earlier filling of the same component when there is one:
  // filling reads the component's flows (hops, multiplicities, members: their shapes), the capacities of
  // its links (fixed) and which of them are slack, and nothing else (every flow on a non-slack link is in
  // the component), so the same key gives the same rates bit for bit. All-to-alls repeat the same
  // components at every layer and micro-batch.
  void fill_component() {
    memo_key.clear();
    bool keyed = !comp_flows.empty();
    for (const std::uint32_t s : comp_flows) {
      keyed = keyed && flows[s].shape != nullptr;
      memo_key.push_back(reinterpret_cast<std::uintptr_t>(flows[s].shape));
    }
    if (keyed) {
      for (const LinkId l : comp_links) memo_key.push_back((static_cast<std::uintptr_t>(l) << 1) | (slack[l] ? 1 : 0));
      const auto it = fill_memo.find(memo_key);
      if (it != fill_memo.end()) {
        for (std::size_t i = 0; i < comp_flows.size(); ++i) flows[comp_flows[i]].new_rate = it->second[i];
        return;
      }
    }
    fill();
    if (keyed && diverged.empty()) {
      std::vector<double>& rates = fill_memo[memo_key];
      for (const std::uint32_t s : comp_flows) rates.push_back(flows[s].new_rate);
    }
    while (!diverged.empty()) refill_split();
  }

  // Splits the checked bundles the last filling found diverging and fills their whole component again.
  void refill_split() {
    for (const std::uint32_t b : diverged) split(b);
    diverged.clear();
    dirty_links.insert(dirty_links.end(), comp_links.begin(), comp_links.end());
    collect_component();
    fill();
  }

  // Records on every flow just filled whether the filling froze them all at one level (their common rate).
  void mark_uniform() {
    double s = comp_flows.empty() ? 0 : flows[comp_flows.front()].new_rate;
    for (const std::uint32_t f : comp_flows) {
      if (flows[f].new_rate != s) {
        s = 0;
        break;
      }
    }
    for (const std::uint32_t f : comp_flows) flows[f].uniform_share = s;
  }

  // Whether the changes since the last reallocation are removals only that leave every rate as it is, so
  // that filling again is not needed. Filled components are whole components of the "share a non-slack
  // link" relation, and removals only split them, so every flow on a changed link belongs to a component
  // whose last filling froze all its flows at one level s when its uniform_share is s > 0. For such a
  // component after removals: no link's share cap/weight went below s (weights only dropped), and links
  // only turned slack; if every flow on a changed link still crosses a non-slack link whose share is
  // exactly s (flows on unchanged links keep theirs), filling again starts with a level at s (the smallest
  // share, the same division capacity / weight as fill()) that contains a link of every flow: it freezes
  // them all at s, bit for bit their current rates. Not used in Global mode (the reference it is checked
  // against in tests/sim/flow_network_test.cpp).
  bool unchanged_by_removals() {
    if (mode != Recompute::Component || !new_flows.empty()) return false;
    ++epoch;  // marks the links and flows checked (each once, however often it changed)
    for (const LinkId l : dirty_links) {
      if (link_mark[l] == epoch) continue;
      link_mark[l] = epoch;
      if (slack[l] && slack_now(l)) continue;  // as collect_component(): it couples nothing
      for (const LinkEntry& e : link_flows[l]) {
        Flow& f = flows[e.slot];
        if (f.mark == epoch) continue;
        f.mark = epoch;
        if (!(f.uniform_share > 0) || !covered_at(f, f.uniform_share)) return false;
      }
    }
    for (const LinkId l : dirty_links) is_slack(l);  // the status the kept rates stand for (collect_component)
    dirty_links.clear();
    return true;
  }

  // Whether the flow (each member of a checked bundle) crosses a non-slack link whose share
  // capacity / weight is exactly s.
  bool covered_at(const Flow& f, double s) {
    if (f.members == 1) return crosses_share(f.hops.data(), f.hops.data() + f.hops.size(), s);
    for (const LinkId l : f.common_links)
      if (capacity[l] / static_cast<double>(link_weight[l]) == s && !slack_now(l)) return true;
    std::uint32_t begin = 0;
    for (const std::uint32_t end : f.member_end) {
      if (!crosses_share(f.member_hops.data() + begin, f.member_hops.data() + end, s)) return false;
      begin = end;
    }
    return true;
  }

  bool crosses_share(const Hop* begin, const Hop* end, double s) {
    for (const Hop* h = begin; h != end; ++h) {
      if (capacity[h->link] / static_cast<double>(link_weight[h->link]) == s && !slack_now(h->link)) return true;
    }
    return false;
  }

  // is_slack() without recording the result (the old status must survive until the changes are applied).
  bool slack_now(LinkId l) {
    if (!slack_stale[l]) return slack[l] != 0;
    return capacity[l] > demand(l) * (1 + 1e-9);
  }

  void schedule_next() {
    while (!due.empty() && !due_valid(due.front())) {
      std::pop_heap(due.begin(), due.end(), DueAfter{});
      due.pop_back();
    }
    const TimeNs t = due.empty() ? kNever : due.front().finish;
    if (t == next_event_time) return;
    if (next_event != 0) engine.cancel(next_event);
    next_event = 0;
    next_event_time = t;
    if (t != kNever) next_event = engine.schedule_at(t, [this] { on_due(); });
  }

  void on_due() {
    next_event = 0;
    next_event_time = kNever;
    const TimeNs now = engine.now();
    std::vector<std::uint32_t>& finished = finished_scratch;
    finished.clear();
    while (!due.empty() && due.front().finish <= now) {
      std::pop_heap(due.begin(), due.end(), DueAfter{});
      const Due d = due.back();
      due.pop_back();
      if (due_valid(d)) finished.push_back(d.slot);
    }
    if (finished.empty()) {
      schedule_next();
      return;
    }
    std::sort(finished.begin(), finished.end(),
              [this](std::uint32_t a, std::uint32_t b) { return flows[a].id < flows[b].id; });
    // A flow whose finish time was recomputed to the same instant has two valid heap entries: complete it
    // once (detaching or releasing it twice would corrupt the active count and the free-slot list).
    finished.erase(std::unique(finished.begin(), finished.end()), finished.end());
    std::vector<Callback>& callbacks = callbacks_scratch;
    callbacks.clear();
    detach_all(finished);
    for (const std::uint32_t s : finished) {
      Flow& f = flows[s];
      callbacks.push_back(Callback{std::move(f.done), std::move(f.done_n), f.members});
      release(s);
    }
    request_realloc();  // also reschedules the next completion
    for (auto& cb : callbacks) {  // they may start flows, never complete one: the scratch is not reused here
      if (cb.done) cb.done();
      if (cb.done_n) cb.done_n(cb.members);
    }
    callbacks.clear();
  }

  void release(std::uint32_t slot) {
    Flow& f = flows[slot];
    for (int m = 0; m < f.members; ++m) slot_of_id[f.id + static_cast<FlowId>(m)] = kNoSlot;
    f.in_use = false;
    f.active = false;
    f.done = nullptr;
    f.done_n = nullptr;
    f.members = 1;
    f.member_hops.clear();
    f.member_end.clear();
    f.common_links.clear();
    f.shape = nullptr;
    f.hops.clear();
    f.finish = kNever;
    f.rate = 0;
    free_flow_slots.push_back(slot);
  }

  std::uint32_t allocate() {
    if (!free_flow_slots.empty()) {
      const std::uint32_t s = free_flow_slots.back();
      free_flow_slots.pop_back();
      return s;
    }
    flows.emplace_back();
    return static_cast<std::uint32_t>(flows.size() - 1);
  }
};

FlowNetwork::FlowNetwork(Engine& engine, const std::vector<Link>& links, Recompute mode)
    : links_used_(links.size(), false), st_(std::make_unique<State>(engine, links, mode)) {
  // A NaN or non-positive capacity would stall progressive filling forever: refuse it up front.
  for (std::size_t l = 0; l < links.size(); ++l)
    if (!(links[l].capacity > 0) || !std::isfinite(links[l].capacity))
      throw std::invalid_argument("link " + std::to_string(l) + " (" + to_string(links[l].cls) +
                                  ") has no positive finite capacity");
}
FlowNetwork::~FlowNetwork() = default;

void FlowNetwork::set_link_copies(std::vector<int> copies) {
  link_copies_ = std::move(copies);
  for (auto& [key, sh] : st_->shapes) {  // their byte weights count copies
    sh.class_mult = {};
    for (const Hop& h : sh.hops)
      sh.class_mult[static_cast<int>(st_->link_class[h.link])] += h.mult * (link_copies_.empty() ? 1 : link_copies_[h.link]);
  }
}
FlowNetwork::FlowNetwork(FlowNetwork&&) noexcept = default;

FlowId FlowNetwork::start(std::vector<Hop> hops, double bytes, TimeNs latency, std::function<void()> done,
                          double rate_bound) {
  return start_hops(hops, bytes, latency, std::move(done), rate_bound);
}


FlowId FlowNetwork::start_hops(std::vector<Hop>& hops, double bytes, TimeNs latency, std::function<void()> done,
                               double rate_bound) {
  State& st = *st_;
  const FlowId id = st.slot_of_id.size();
  st.slot_of_id.push_back(kNoSlot);
  ++flows_started_;
  if (latency < 0) latency = 0;

  normalise(hops, static_cast<LinkId>(st.capacity.size()));
  count_bytes(hops, bytes);

  const TimeNs at = st.engine.now() + latency;
  if (!(bytes > 0) || hops.empty()) {
    st.engine.schedule_at(at, [d = std::move(done)] {
      if (d) d();
    });
    return id;
  }
  const std::uint32_t slot = st.allocate();
  State::Flow& f = st.flows[slot];
  f.id = id;
  f.hops.assign(hops.begin(), hops.end());  // into the slot's storage, reused from flow to flow
  f.bytes = bytes;
  f.bound = std::numeric_limits<double>::infinity();
  for (const Hop& h : f.hops) f.bound = std::min(f.bound, st.capacity[h.link] / static_cast<double>(h.mult));
  f.bound = std::max(f.bound, rate_bound);
  f.remaining = bytes;
  f.rate = 0;
  f.finish = kNever;
  f.done = std::move(done);
  f.in_use = true;
  f.active = false;
  st.slot_of_id[id] = slot;
  if (latency == 0) st.activate(slot);
  else st.activate_later(slot, at);
  return id;
}

void FlowNetwork::count_bytes(const std::vector<Hop>& hops, double bytes) {
  std::array<std::int64_t, kLinkClasses> weight{};  // per class: sum of multiplicity x copies
  for (const Hop& h : hops) {
    links_used_[h.link] = true;
    const std::int64_t copies = link_copies_.empty() ? 1 : link_copies_[h.link];
    weight[static_cast<int>(st_->link_class[h.link])] += h.mult * copies;
  }
  if (!(bytes > 0)) return;
  const auto units = static_cast<__int128>(std::nearbyint(bytes * kBytesPerUnit));
  for (int c = 0; c < kLinkClasses; ++c)
    if (weight[c] != 0) bytes_by_class_[c] += units * weight[c];
}

std::array<double, kLinkClasses> FlowNetwork::bytes_by_class() const {
  std::array<double, kLinkClasses> out{};
  for (int k = 0; k < kLinkClasses; ++k) out[k] = static_cast<double>(bytes_by_class_[k]) / kBytesPerUnit;
  return out;
}

void FlowNetwork::start_bundle(const std::vector<const std::vector<LinkId>*>& routes, double bytes, TimeNs latency,
                               std::function<void(int)> done) {
  State& st = *st_;
  const std::size_t k = routes.size();
  bool bundles = checked_bundles_ && k >= 2 && bytes > 0;
  if (bundles) {
    st.shape_key.clear();
    for (const auto* r : routes) {
      st.shape_key.insert(st.shape_key.end(), r->begin(), r->end());
      st.shape_key.push_back(-1);
    }
    const BundleShape& shape = st.shape_of(st.shape_key, [&](std::size_t m) -> const std::vector<LinkId>& { return *routes[m]; }, k,
                                                 link_copies_, links_used_);
    bundles = shape.bundles;
    if (bundles) start_shape(shape, k, bytes, latency, std::move(done));
  }
  if (!bundles) {  // separate flows
    const auto shared = std::make_shared<std::function<void(int)>>(std::move(done));
    for (const auto* r : routes) start_route(*r, bytes, latency, [shared] { (*shared)(1); });
  }
}

void FlowNetwork::start_bundle(const Topology& topo, const std::vector<std::pair<GpuId, GpuId>>& pairs, double bytes,
                               TimeNs latency, std::function<void(int)> done) {
  State& st = *st_;
  const std::size_t k = pairs.size();
  bool bundles = checked_bundles_ && k >= 2 && bytes > 0;
  if (bundles) {
    std::vector<LinkId>& key = st.shape_key;
    key.resize(1 + 2 * k);
    key[0] = -2;  // a key of GPU pairs, never equal to a key of links
    for (std::size_t m = 0; m < k; ++m) {
      key[1 + 2 * m] = pairs[m].first;
      key[2 + 2 * m] = pairs[m].second;
    }
    const BundleShape& shape = st.shape_of(
        st.shape_key, [&](std::size_t m) -> const std::vector<LinkId>& { return topo.route(pairs[m].first, pairs[m].second); }, k,
        link_copies_, links_used_);
    bundles = shape.bundles;
    if (bundles) start_shape(shape, k, bytes, latency, std::move(done));
  }
  if (!bundles) {  // separate flows
    const auto shared = std::make_shared<std::function<void(int)>>(std::move(done));
    for (const auto& [a, b] : pairs) start_route(topo.route(a, b), bytes, latency, [shared] { (*shared)(1); });
  }
}

void FlowNetwork::start_shape(const BundleShape& sh, std::size_t k, double bytes, TimeNs latency,
                              std::function<void(int)> done) {
  State& st = *st_;
  const BundleShape* shape = &sh;
  const FlowId id = st.slot_of_id.size();
  st.slot_of_id.resize(st.slot_of_id.size() + k, kNoSlot);
  flows_started_ += k;
  if (latency < 0) latency = 0;
  const std::uint32_t slot = st.allocate();
  State::Flow& f = st.flows[slot];
  f.hops.assign(shape->hops.begin(), shape->hops.end());
  f.member_hops.assign(shape->member_hops.begin(), shape->member_hops.end());
  f.member_end.assign(shape->member_end.begin(), shape->member_end.end());
  f.common_links.assign(shape->common_links.begin(), shape->common_links.end());
  f.shape = shape;
  // The members' byte counts, exact integer sums in any order: units x (multiplicity x copies) per class.
  if (bytes > 0) {
    const auto units = static_cast<__int128>(std::nearbyint(bytes * kBytesPerUnit));
    for (int c = 0; c < kLinkClasses; ++c) bytes_by_class_[c] += units * shape->class_mult[c];
  }
  f.id = id;
  f.bytes = bytes;
  f.bound = shape->bound;  // each member's; the sum's min capacity / multiplicity is at most that
  f.remaining = bytes;
  f.rate = 0;
  f.finish = kNever;
  f.done = nullptr;
  f.done_n = std::move(done);
  f.members = static_cast<int>(k);
  f.in_use = true;
  f.active = false;
  for (std::size_t m = 0; m < k; ++m) st.slot_of_id[id + m] = slot;
  if (latency == 0) st.activate(slot);
  else st.activate_later(slot, st.engine.now() + latency);
}

std::uint64_t FlowNetwork::bundles_split() const { return st_->splits; }

FlowId FlowNetwork::start_route(const std::vector<LinkId>& route, double bytes, TimeNs latency,
                                std::function<void()> done) {
  std::vector<Hop>& hops = st_->route_scratch;
  hops.clear();
  for (const LinkId l : route) hops.push_back(Hop{l, 1});
  return start_hops(hops, bytes, latency, std::move(done), 0);
}

double FlowNetwork::rate(FlowId id) const {
  const State& st = *st_;
  if (id >= st.slot_of_id.size()) return 0;
  const std::uint32_t slot = st.slot_of_id[id];
  if (slot == kNoSlot) return 0;
  const State::Flow& f = st.flows[slot];
  return f.active ? f.rate : 0;
}

std::size_t FlowNetwork::active_flows() const { return st_->active; }

std::uint64_t FlowNetwork::reallocations() const { return st_->reallocs; }

std::uint64_t FlowNetwork::flows_recomputed() const { return st_->recomputed; }

}  // namespace arachne
