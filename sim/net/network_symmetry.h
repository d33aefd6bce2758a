// A symmetry of the transfers a simulation makes, and the quotient network it allows.
//
// `gpu_image` is a permutation of the GPUs that maps every transfer of the simulation (src -> dst, bytes,
// latency, start time) onto a transfer of the simulation, along a route whose links map one-to-one onto the
// image route's with equal capacities; sim/exec/pipeline_mirror.cpp checks this for the rotation of identical
// pipelines. The induced permutation of links splits them into orbits. Transfers of one orbit then have the
// same rate at every instant and symmetric links the same state, so it suffices to simulate
//  * each orbit of transfers as one flow: the sum of their routes (a bundle), bounded per member by one
//    transfer's rate bound, and
//  * only the links that represent their orbit: the bundle keeps its hops on representatives, each with the
//    multiplicity the whole orbit puts there; the other links of an orbit carry the same loads.
// Max-min filling by levels (sim/net/flow_network.cpp) gives this quotient network the rates of the full one
// bit for bit: a representative link has the same capacity, the same weight (sum of multiplicities) and
// loses the same multiplicity x share at the same level. Byte counts weigh each representative by its
// orbit's size.
#pragma once
#include <vector>

#include "sim/net/flow_network.h"

namespace arachne {

struct NetworkSymmetry {
  std::vector<GpuId> gpu_image;        // per GPU: its image (identity: no symmetry)
  std::vector<LinkId> link_rep;        // per link: the representative of its orbit
  std::vector<int> link_orbit_size;    // per link: the size of its orbit

  // The hops of a bundle over a whole orbit of transfers, restricted to representative links.
  std::vector<Hop> quotient(const std::vector<Hop>& orbit_hops) const {
    std::vector<Hop> out;
    for (const Hop& h : orbit_hops)
      if (link_rep[h.link] == h.link) out.push_back(h);
    return out;
  }
};

}  // namespace arachne
