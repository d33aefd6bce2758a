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

namespace arachne {

struct CollectiveContext {
  Engine& engine;
  FlowNetwork& net;
  const Topology& topo;
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
