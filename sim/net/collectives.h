// Collectives as flows on the real links. A ring collective is one flow per ring edge carrying the
// whole volume that edge moves during the collective (not one flow per ring step), plus the per-step
// latency; ring volumes after Patarasuk & Yuan 2009 / NCCL: all-reduce 2(n-1)/n*S per edge,
// reduce-scatter and all-gather (n-1)/n*S. Groups that span nodes with several members per node run
// hierarchically (intra-node reduce-scatter, inter-node all-reduce of the shards per local rank, intra-node
// all-gather), as NCCL's tree/ring hybrids and Megatron's distributed optimizer do.
#pragma once
#include <functional>
#include <vector>

#include "sim/net/flow_network.h"
#include "sim/net/network_symmetry.h"

namespace arachne {

struct CollectiveContext {
  Engine& engine;
  FlowNetwork& net;
  const Topology& topo;
  // Optional symmetry of every transfer of the simulation (sim/net/network_symmetry.h): collectives then run
  // each orbit of their transfers as one bundle on the quotient network.
  const NetworkSymmetry* symmetry = nullptr;
};

enum class CollectiveKind { AllReduce, ReduceScatter, AllGather };

// Runs `kind` over every ring in `rings` concurrently (e.g. one DP ring per TP rank) on `bytes`
// (the full buffer size per member); `done` runs when every ring has finished.
void ring_collective(CollectiveContext& ctx, CollectiveKind kind, const std::vector<std::vector<GpuId>>& rings,
                     double bytes, std::function<void()> done);

// All-reduce over `members`: flat ring when at most one member per node or all in one node, hierarchical
// otherwise. `done` runs at completion.
void allreduce(CollectiveContext& ctx, const std::vector<GpuId>& members, double bytes,
               std::function<void()> done);

// All-reduces over each of `member_sets` at once (each as `allreduce` runs it), as one collective whose
// phases wait for every set; `done` runs when all have finished. Used for sets that a symmetry of the
// simulation maps onto one another (they progress together, so joining their phases changes no time): under
// ctx.symmetry each orbit of their transfers is then one bundle. The sets must share one shape (flat, or the
// same number of members per node); a logic error otherwise.
void allreduce_each(CollectiveContext& ctx, const std::vector<std::vector<GpuId>>& member_sets, double bytes,
                    std::function<void()> done);

// One flow of a collective: src -> dst carrying `bytes` after `latency`, in phase `phase` (a collective's
// phases run one after another; the flows of one phase run together).
struct CollectiveTransfer {
  GpuId src = 0, dst = 0;
  int phase = 0;
  double bytes = 0;
  TimeNs latency = 0;
};

// The flows ring_collective (kind != AllReduce, one ring) or allreduce (kind == AllReduce) starts over
// `members` for a buffer of `bytes`: the single definition both use.
std::vector<CollectiveTransfer> collective_transfers(const Topology& topo, CollectiveKind kind,
                                                     const std::vector<GpuId>& members, double bytes);

// Point-to-point transfer src -> dst.
void send(CollectiveContext& ctx, GpuId src, GpuId dst, double bytes, std::function<void()> done);

// Closed form for a ring collective inside one node with no competing traffic (allowed by DESIGN.md):
// steps x latency + volume / per-GPU link bandwidth.
double intra_node_collective_time(CollectiveKind kind, int n, double bytes, double link_bw, double latency_s);

// The same ring inside one node with NCCL's latency terms (NVIDIA/nccl src/graph/tuning.cc, the model NCCL
// uses to pick a protocol): for each protocol p, baseLat_p + steps·hwLat_p + volume / (link_bw·bw_p), and
// NCCL runs the fastest. Small messages pay the per-step latency of LL/LL128 instead of Simple's. LL128
// needs NVLink (tuning.cc enables it by default only there).
double nccl_intra_node_collective_time(CollectiveKind kind, int n, double bytes, double link_bw, bool nvlink);

}  // namespace arachne
