// Hand-built clusters for network tests: one node group of a test GPU with link_eff = 1, so every link
// capacity is exactly the nominal bandwidth given here.
#pragma once
#include "sim/hw/cluster.h"

namespace arachne::test {

struct ClusterShape {
  int nodes = 4;
  int gpus_per_node = 8;
  double intra_bw = 100e9;  // bytes/s per GPU per direction
  int nics = 8;
  double nic_bw = 25e9;     // bytes/s per NIC per direction
  double latency_s = 5e-6;
  int nodes_per_leaf = 16;
};

inline Cluster exact_cluster(const ClusterShape& s, const std::string& name) {
  Cluster c;
  c.name = name;
  c.source = name;
  c.network.nodes_per_leaf = s.nodes_per_leaf;
  c.network.latency_s = s.latency_s;
  GpuSpec spec;
  spec.name = "TESTGPU";
  spec.compute.link_eff = 1.0;  // capacities are exactly the nominal bandwidths
  c.catalog.add(spec);
  c.groups.push_back(NodeGroup{"TESTGPU", s.nodes, s.gpus_per_node, LinkKind::NvLink, s.intra_bw, s.nics, s.nic_bw});
  for (int n = 0; n < s.nodes; ++n) c.nodes.push_back(Node{n, 0, n * s.gpus_per_node, s.gpus_per_node});
  return c;
}

}  // namespace arachne::test
