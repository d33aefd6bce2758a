// MoE all-to-all (expert-parallel dispatch and combine) as flows on the real links: NVLink/PCIe through the
// node's fabric inside a node; GPU>NIC, NIC>leaf, [leaf>spine>leaf], leaf>NIC, NIC>GPU across nodes.
//
// Flat: one flow per ordered member pair (i != j, different GPUs, bytes > 0) along topo.route, all started
// together (NCCL's all-to-all is a group of concurrent send/recv pairs, ncclGroupStart/End), each after its
// route's latency; concurrent flows share links max-min fairly (flow_network.h).
//
// Hierarchical (after the "2DH All-to-All" of Hwang et al., "Tutel: Adaptive Mixture-of-Experts at Scale",
// MLSys 2023; also DeepSpeed-MoE's hierarchical all-to-all): aggregate inside the node first so that each
// pair of nodes exchanges one large message instead of g x g small ones. (Tutel aligns the data by local
// rank, so each node pair exchanges g messages, one per local rank; here one proxy per node pair carries the
// node pair's whole block - same inter-node bytes, fewer and larger inter-node messages.) Members are grouped by node (nodes in order
// of first appearance in `members`, members of a node in their order in `members`); idx(X) is a node's
// position in that order, and X[k] its k-th member. For source node S and destination node D != S:
//   proxy_src(S, D) = S[idx(D) mod |S|]   the member of S that collects everything S sends to D,
//   proxy_dst(S, D) = D[idx(S) mod |D|]   the member of D that receives it.
// Three phases, each a set of concurrent flows, with a barrier between phases (Tutel runs them as separate
// collectives one after the other):
//   1. intra-node: every member i of S sends to proxy_src(S, D), for each D != S, the bytes it has for D's
//      members (sum_j in D bytes[i][j]); and sends its data for members j of its own node directly to j.
//   2. inter-node: one flow per node pair (S, D), proxy_src(S, D) -> proxy_dst(S, D), carrying
//      sum_{i in S, j in D} bytes[i][j].
//   3. intra-node: proxy_dst(S, D) forwards to every member j of D its share, sum_{i in S} bytes[i][j].
// Data already on the GPU it must reach next is not sent; transfers with the same (sender, receiver) in one
// phase are one flow (one message). Inter-node bytes are the same as the flat algorithm's; the number of
// inter-node flows drops from sum_S,D |S||D| to (number of nodes)(number of nodes - 1). With all members in
// one node, or one member per node, it reduces to the flat algorithm.
#pragma once
#include <functional>
#include <vector>

#include "sim/net/collectives.h"

namespace arachne {

// bytes[i][j]: bytes member i sends to member j (bytes.size() == members.size(), each row too; diagonal and
// pairs on the same GPU are local and not sent). `done` runs when all flows have finished (from an engine
// event, also when nothing is sent). Flows start in (i, j) order. Throws std::invalid_argument on a matrix
// whose shape does not match `members`.
void alltoall(CollectiveContext& ctx, const std::vector<GpuId>& members,
              const std::vector<std::vector<double>>& bytes, std::function<void()> done);

// Tutel 2DH all-to-all, three phases as described above.
void hierarchical_alltoall(CollectiveContext& ctx, const std::vector<GpuId>& members,
                           const std::vector<std::vector<double>>& bytes, std::function<void()> done);

// One message of an all-to-all phase, between member indices (positions in `members`).
struct AllToAllTransfer {
  int src = 0;
  int dst = 0;
  double bytes = 0;
};

// The three phases of hierarchical_alltoall (each sorted by (src, dst); empty phases stay empty), for
// inspection and tests.
std::vector<std::vector<AllToAllTransfer>> hierarchical_alltoall_phases(
    const Topology& topo, const std::vector<GpuId>& members, const std::vector<std::vector<double>>& bytes);

// Runs `phases` one after the other (barrier between them), each phase's transfers as concurrent flows in
// the order given, each after its route's latency; empty phases are skipped. `done` runs at the end.
void run_alltoall_phases(CollectiveContext& ctx, const std::vector<GpuId>& members,
                         std::vector<std::vector<AllToAllTransfer>> phases, std::function<void()> done);

// Uniform matrix: each of n members sends bytes_per_member / n to every member, itself included (local).
std::vector<std::vector<double>> uniform_alltoall_bytes(int n, double bytes_per_member);

}  // namespace arachne
