// The simulated-iteration cases of bench_iteration and profile_iteration: GPT-3 175B on 1,024 A100-80
// (128 x 8; TP8 PP16 DP8, micro-batch 1, global batch 1536, full recompute), Mixtral-8x7B on 64 H100
// (8 x 8; TP1 PP4 EP8 DP16, global batch 256, full recompute, as deployed with Megatron-Core), and a
// mixture of experts whose all-to-alls cross leaves: gpt-moe-1.3b-64e on 768 H100 (192 x 4, leaves of 16
// nodes, uplinks oversubscribed 3:1; TP4 PP3 DP64 EP64, micro-batch 2, global batch 256), each stage's
// all-to-all over 64 nodes on 4 leaves.
#pragma once
#include "sim/exec/simulate.h"
#include "sim/plan/plan_yaml.h"

namespace arachne {

struct IterationCase {
  GpuCatalog catalog = GpuCatalog::load_default();
  Cluster cluster;
  Topology topo;
  ModelConfig model;
  Plan plan;
  IterationCase(const std::string& cluster_spec, const std::string& model_name, const Shorthand& s,
                const NetworkConfig& network = NetworkConfig{})
      : cluster(with_network(parse_cluster_spec(cluster_spec, catalog), network)), topo(cluster),
        model(load_model(model_name)), plan(plan_from_shorthand(s, cluster, model)) {}

 private:
  static Cluster with_network(Cluster c, const NetworkConfig& network) {
    c.network = network;
    return c;
  }
};

inline IterationCase gpt3_175b_case() {
  Shorthand s;
  s.tp = 8;
  s.pp = 16;
  s.dp = 8;
  s.micro_batch = 1;
  s.global_batch = 1536;
  s.recompute = Recompute::Full;
  return IterationCase("A100-80:128x8", "gpt3-175b", s);
}

inline IterationCase mixtral_case() {
  Shorthand s;
  s.tp = 1;
  s.pp = 4;
  s.dp = 16;
  s.ep = 8;
  s.micro_batch = 1;
  s.global_batch = 256;
  s.recompute = Recompute::Full;
  return IterationCase("H100:8x8", "mixtral-8x7b", s);
}

inline IterationCase moe_across_leaves_case() {
  Shorthand s;
  s.tp = 4;
  s.pp = 3;
  s.dp = 64;
  s.ep = 64;
  s.micro_batch = 2;
  s.global_batch = 256;
  NetworkConfig network;
  network.nodes_per_leaf = 16;
  network.oversubscription = 3;
  return IterationCase("H100:192x4", "gpt-moe-1.3b-64e", s, network);
}

}  // namespace arachne
