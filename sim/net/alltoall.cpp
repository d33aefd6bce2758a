// All-to-all as flows on the topology's links (see alltoall.h for the model and its sources).
#include "sim/net/alltoall.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace arachne {

namespace {

void check_shape(const std::vector<GpuId>& members, const std::vector<std::vector<double>>& bytes) {
  const std::size_t n = members.size();
  if (bytes.size() != n) {
    throw std::invalid_argument("all-to-all: " + std::to_string(bytes.size()) + " matrix rows for " +
                                std::to_string(n) + " members");
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (bytes[i].size() != n) {
      throw std::invalid_argument("all-to-all: row " + std::to_string(i) + " has " +
                                  std::to_string(bytes[i].size()) + " entries for " + std::to_string(n) +
                                  " members");
    }
  }
}

// Whether a transfer between these member indices crosses a link at all.
bool moves(const std::vector<GpuId>& members, int src, int dst, double bytes) {
  return bytes > 0 && members[static_cast<std::size_t>(src)] != members[static_cast<std::size_t>(dst)];
}

// Member indices grouped by node: nodes in order of first appearance, members in their order in `members`.
std::vector<std::vector<int>> members_by_node(const Topology& topo, const std::vector<GpuId>& members) {
  std::vector<std::vector<int>> groups;
  for (int i = 0; i < static_cast<int>(members.size()); ++i) {
    const GpuId g = members[static_cast<std::size_t>(i)];
    bool placed = false;
    for (auto& grp : groups) {
      if (topo.same_node(members[static_cast<std::size_t>(grp.front())], g)) {
        grp.push_back(i);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({i});
  }
  return groups;
}

struct Transfer {  // one moving transfer of an all-to-all phase: GPUs a -> b, members src -> dst
  GpuId a = 0, b = 0;
  int src = 0, dst = 0;
  double bytes = 0;
  TimeNs latency = 0;
  int links = 0;  // of its route
};

// Scratch of PhaseRunner::start. Starting a phase's flows never starts another phase (completions come from
// later events), so one set per thread serves every runner, without allocating per all-to-all.
struct StartScratch {
  std::vector<Transfer> moving;
  std::vector<int> group, other, last, head, prev, order;
  std::vector<std::size_t> begin, fill;
  std::vector<char> seen;
  std::vector<std::pair<GpuId, GpuId>> pairs;
};

StartScratch& start_scratch() {
  thread_local StartScratch s;
  return s;
}

// Runs the phases one after the other; each phase's flows run concurrently and the next phase starts when
// the last of them finishes (a barrier, as between Tutel's separate all-to-all calls).
struct PhaseRunner : std::enable_shared_from_this<PhaseRunner> {
  CollectiveContext ctx;
  std::vector<GpuId> members;
  std::vector<std::vector<AllToAllTransfer>> phases;
  std::function<void()> done;
  int left = 0;

  PhaseRunner(CollectiveContext c, std::vector<GpuId> m, std::vector<std::vector<AllToAllTransfer>> p,
              std::function<void()> d)
      : ctx(c), members(std::move(m)), phases(std::move(p)), done(std::move(d)) {}

  void start(std::size_t k) {
    for (; k < phases.size(); ++k) {
      int flows = 0;
      for (const auto& t : phases[k]) flows += moves(members, t.src, t.dst, t.bytes) ? 1 : 0;
      if (flows > 0) {
        left = flows;
        break;
      }
    }
    if (k >= phases.size()) {
      ctx.engine.schedule_after(0, [d = std::move(done)] {
        if (d) d();
      });
      const auto release = std::move(self);  // the runner ends with this call
      return;
    }
    if (!self) self = shared_from_this();
    // Transfers that may keep equal rates start as one checked bundle (flow_network.h): the flows into one
    // member, or out of one, with equal bytes, latency and route length (equal_transfers). The network
    // splits a bundle whose members would diverge, so this changes no time.
    StartScratch& sc = start_scratch();
    std::vector<Transfer>& moving = sc.moving;
    moving.clear();
    for (const auto& t : phases[k]) {
      if (!moves(members, t.src, t.dst, t.bytes)) continue;
      const GpuId a = members[static_cast<std::size_t>(t.src)];
      const GpuId b = members[static_cast<std::size_t>(t.dst)];
      moving.push_back(Transfer{a, b, t.src, t.dst, t.bytes, seconds_to_ns(ctx.topo.latency_s(a, b)),
                                ctx.topo.route_length(a, b)});
    }
    if (!ctx.net.checked_bundles()) {
      for (const Transfer& t : moving) start_one(t, k);
      return;
    }
    equal_transfers(moving, sc);  // group b: transfers sc.order[sc.begin[b] .. sc.begin[b + 1])
    std::vector<std::pair<GpuId, GpuId>>& pairs = sc.pairs;
    for (std::size_t b = 0; b + 1 < sc.begin.size(); ++b) {
      const Transfer& t0 = moving[static_cast<std::size_t>(sc.order[sc.begin[b]])];
      if (sc.begin[b + 1] - sc.begin[b] == 1) {
        start_one(t0, k);
        continue;
      }
      pairs.clear();
      for (std::size_t i = sc.begin[b]; i < sc.begin[b + 1]; ++i) {
        const Transfer& t = moving[static_cast<std::size_t>(sc.order[i])];
        pairs.emplace_back(t.a, t.b);
      }
      ctx.net.start_bundle(ctx.topo, pairs, t0.bytes, t0.latency, [runner = this, k](int n) { runner->arrived(n, k); });
    }
  }

  void start_one(const Transfer& t, std::size_t k) {
    // A callback of two words fits std::function's inline storage (no allocation per flow).
    ctx.net.start_route(ctx.topo.route(t.a, t.b), t.bytes, t.latency, [runner = this, k] { runner->arrived(1, k); });
  }

  void arrived(int n, std::size_t k) {
    left -= n;
    if (left == 0) start(k + 1);
  }

  // The transfers grouped by destination member, bytes, latency and route length, or by source member and
  // the same three. Routes of different lengths (same node, same leaf, across the spine) rarely keep equal
  // rates, and a bundle that diverges is split and its whole component filled again; kept apart, the
  // members of each length keep the bundle whole on symmetric leaves. The grouping the first two transfers
  // suggest (by source when they share source and bytes), unless the other gives fewer groups (numbered
  // only when it could: it gives at least one per distinct endpoint).
  // Groups in order of first appearance, transfers in order: group b is sc.order[sc.begin[b] ..
  // sc.begin[b + 1]).
  void equal_transfers(const std::vector<Transfer>& ts, StartScratch& sc) const {
    const bool src_first = ts.size() >= 2 && ts[0].src == ts[1].src && ts[0].bytes == ts[1].bytes;
    int n = group_ids(ts, !src_first, sc, sc.group);
    if (n > distinct_endpoints(ts, src_first, sc)) {
      const int n_other = group_ids(ts, src_first, sc, sc.other, n - 1);
      if (n_other < n) {
        n = n_other;
        sc.group.swap(sc.other);
      }
    }
    sc.begin.assign(static_cast<std::size_t>(n) + 1, 0);
    for (const int x : sc.group) ++sc.begin[static_cast<std::size_t>(x) + 1];
    for (int b = 0; b < n; ++b) sc.begin[static_cast<std::size_t>(b) + 1] += sc.begin[static_cast<std::size_t>(b)];
    sc.order.resize(ts.size());
    sc.fill.assign(sc.begin.begin(), sc.begin.end() - 1);
    for (std::size_t i = 0; i < ts.size(); ++i) sc.order[sc.fill[static_cast<std::size_t>(sc.group[i])]++] = static_cast<int>(i);
  }

  int distinct_endpoints(const std::vector<Transfer>& ts, bool dst, StartScratch& sc) const {
    sc.seen.assign(members.size(), 0);
    int n = 0;
    for (const Transfer& t : ts) {
      char& s = sc.seen[static_cast<std::size_t>(dst ? t.dst : t.src)];
      n += s ? 0 : 1;
      s = 1;
    }
    return n;
  }

  // Numbers the groups of equal (endpoint member, bytes, latency, route length) in order of first
  // appearance: group[i] is transfer i's; returns the number of groups, or stops at limit + 1 of them
  // (`group` then incomplete).
  int group_ids(const std::vector<Transfer>& ts, bool by_dst, StartScratch& sc, std::vector<int>& group,
                int limit = std::numeric_limits<int>::max()) const {
    sc.last.assign(members.size(), -1);  // per endpoint member: its latest group
    sc.head.clear();                     // per group: its first transfer
    sc.prev.clear();                     // per group: the member's previous group
    group.resize(ts.size());
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const Transfer& t = ts[i];
      int& mine = sc.last[static_cast<std::size_t>(by_dst ? t.dst : t.src)];
      int g = mine;
      while (g >= 0) {
        const Transfer& t0 = ts[static_cast<std::size_t>(sc.head[static_cast<std::size_t>(g)])];
        if (t0.bytes == t.bytes && t0.latency == t.latency && t0.links == t.links) break;
        g = sc.prev[static_cast<std::size_t>(g)];
      }
      if (g < 0) {
        g = static_cast<int>(sc.head.size());
        if (g == limit) return limit + 1;
        sc.head.push_back(static_cast<int>(i));
        sc.prev.push_back(mine);
        mine = g;
      }
      group[i] = g;
    }
    return static_cast<int>(sc.head.size());
  }

  std::shared_ptr<PhaseRunner> self;  // keeps the runner alive while its flows run
};

}  // namespace

void run_alltoall_phases(CollectiveContext& ctx, const std::vector<GpuId>& members,
                         std::vector<std::vector<AllToAllTransfer>> phases, std::function<void()> done) {
  auto runner = std::make_shared<PhaseRunner>(ctx, members, std::move(phases), std::move(done));
  runner->start(0);
}

void alltoall(CollectiveContext& ctx, const std::vector<GpuId>& members,
              const std::vector<std::vector<double>>& bytes, std::function<void()> done) {
  check_shape(members, bytes);
  const int n = static_cast<int>(members.size());
  std::vector<AllToAllTransfer> pairs;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const double b = bytes[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
      if (i != j && moves(members, i, j, b)) pairs.push_back(AllToAllTransfer{i, j, b});
    }
  }
  std::vector<std::vector<AllToAllTransfer>> phases(1);
  phases[0] = std::move(pairs);
  run_alltoall_phases(ctx, members, std::move(phases), std::move(done));
}

std::vector<std::vector<AllToAllTransfer>> hierarchical_alltoall_phases(
    const Topology& topo, const std::vector<GpuId>& members, const std::vector<std::vector<double>>& bytes) {
  check_shape(members, bytes);
  const auto nodes = members_by_node(topo, members);
  const int n = static_cast<int>(members.size());
  std::vector<int> node_of(static_cast<std::size_t>(n), 0);
  for (int s = 0; s < static_cast<int>(nodes.size()); ++s) {
    for (const int i : nodes[static_cast<std::size_t>(s)]) node_of[static_cast<std::size_t>(i)] = s;
  }
  // member of node X at position `pos` mod |X| (the proxy rule of alltoall.h)
  auto proxy = [&](int x, int pos) {
    const auto& grp = nodes[static_cast<std::size_t>(x)];
    return grp[static_cast<std::size_t>(pos) % grp.size()];
  };
  // (src, dst) -> bytes; std::map keeps the (src, dst) order deterministic
  std::array<std::map<std::pair<int, int>, double>, 3> agg;
  auto add = [&](int phase, int a, int b, double v) {
    if (a != b && members[static_cast<std::size_t>(a)] != members[static_cast<std::size_t>(b)]) {
      agg[static_cast<std::size_t>(phase)][{a, b}] += v;
    }
  };
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const double b = bytes[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
      if (i == j || b <= 0) continue;
      const int s = node_of[static_cast<std::size_t>(i)];
      const int d = node_of[static_cast<std::size_t>(j)];
      if (s == d) {
        add(0, i, j, b);  // same node: straight to the destination in the intra-node phase
        continue;
      }
      const int ps = proxy(s, d);  // proxy_src(S, D) = S[idx(D) mod |S|]
      const int pd = proxy(d, s);  // proxy_dst(S, D) = D[idx(S) mod |D|]
      add(0, i, ps, b);
      add(1, ps, pd, b);
      add(2, pd, j, b);
    }
  }
  std::vector<std::vector<AllToAllTransfer>> phases(3);
  for (std::size_t p = 0; p < 3; ++p) {
    for (const auto& [key, v] : agg[p]) phases[p].push_back(AllToAllTransfer{key.first, key.second, v});
  }
  return phases;
}

void hierarchical_alltoall(CollectiveContext& ctx, const std::vector<GpuId>& members,
                           const std::vector<std::vector<double>>& bytes, std::function<void()> done) {
  run_alltoall_phases(ctx, members, hierarchical_alltoall_phases(ctx.topo, members, bytes), std::move(done));
}

std::vector<std::vector<double>> uniform_alltoall_bytes(int n, double bytes_per_member) {
  if (n <= 0) return {};
  const double each = bytes_per_member / static_cast<double>(n);
  return std::vector<std::vector<double>>(static_cast<std::size_t>(n),
                                          std::vector<double>(static_cast<std::size_t>(n), each));
}

}  // namespace arachne
