// MoE routing of one micro-batch through one MoE layer (DESIGN.md, Model: routing_skew).
// Expert i receives a share of the routed tokens proportional to rank(i)^(-s) under a fresh seeded
// permutation of ranks (Zipf; s = 0 is uniform); the tokens x top_k assignments are drawn as a multinomial
// sample of those shares; then each expert keeps at most its capacity, capacity_factor x tokens x top_k /
// experts (GShard, Lepikhin et al. 2021 §2.2; Switch Transformer, Fedus et al. 2022 §2.2), and the rest
// are dropped.
#pragma once
#include <cstdint>
#include <vector>

#include "sim/model/model.h"

namespace arachne {

// Zipf shares of ranks 1..experts with exponent s, summing to 1.
std::vector<double> zipf_shares(int experts, double s);

struct RoutingDraw {
  std::vector<long> routed;  // token assignments per expert before the capacity cut
  std::vector<long> kept;    // after it
  long dropped = 0;          // Σ routed - Σ kept
  long dispatched() const;   // Σ kept = tokens x top_k - dropped
};

// The routing of `tokens` tokens in (micro-batch, layer) of a run with `seed`. Draws depend only on these
// numbers (a counter-based stream), not on the order in which the simulator asks for them.
RoutingDraw draw_routing(const MoeConfig& moe, long tokens, std::uint64_t seed, std::uint64_t micro_batch,
                         std::uint64_t layer);

}  // namespace arachne
