// Exact shortcut: identical pipelines simulated once.
//
// A pipeline is *mirrored* by an earlier one (its representative) when both have the same structure, GPU
// types and per-pass costs, worker for worker, their pipeline sends are isomorphic (walking the member
// routes of corresponding sends maps the representative's links one-to-one onto the mirror's, with equal
// capacities), and one of:
//  (a) isolation: no link carrying any pipeline's sends is touched by another pipeline's sends or by any
//      data-parallel collective; then each pipeline's forward/backward phase depends on its own tasks and
//      links only;
//  (b) symmetry: rotating the pipelines of every class of identical pipelines (each to the next one of its
//      class, the last to the first; GPU for GPU) maps every transfer of the iteration - every pipeline
//      send and every flow of every gradient collective - onto a transfer with the same bytes, latency and
//      phase, along routes whose links map one-to-one with equal capacities. A data-parallel collective maps
//      onto itself; a pipeline's tied-embedding all-reduce onto the next pipeline's, slice for slice. The rotation is then a
//      symmetry of the whole simulation, so the pipelines of a class run the same events at the same
//      times; their sends share NICs with the gradient rings, but symmetrically, and the max-min rates of
//      symmetric flows are bit-identical (sim/net/flow_network.cpp fills by levels, independently of ids).
// In both cases the mirrors run no tasks of their own: each representative send carries the mirrors'
// copies as one bundle (members of all copies, with multiplicities, and the rate bound of one copy), so
// every link sees the load it has in the full simulation; the gradient reduction and optimizer, which couple
// pipelines, are simulated for every worker. Under (b) the whole network is reduced by the rotation: each
// orbit of ring transfers is one bundle (for the tied-embedding all-reduces, whose orbits span pipelines,
// GradSync::fold_symmetric_embedding_buckets), and only one link of each orbit of links is simulated
// (sim/net/network_symmetry.h). No TP group may cross nodes and no expert all-to-all may run.
// Tests compare the result with the full simulation.
#pragma once
#include <vector>

#include "sim/exec/grad_sync.h"
#include "sim/exec/stage_work.h"

namespace arachne {

struct PipelineMirroring {
  std::vector<int> mirror_of;  // per worker: the worker whose pipeline phase it copies (itself: simulated)
  // Under (b): the rotation as a symmetry of every transfer (sim/net/network_symmetry.h), so that the
  // simulation runs on the quotient network: each orbit of transfers as one bundle on representative links.
  // Empty gpu_image otherwise.
  NetworkSymmetry symmetry;
};

PipelineMirroring find_mirrored_workers(const Topology& topo, const Plan& plan, const StageWork& work,
                                        const GradSync& grads);

// Folds each mirror's pipeline sends into its representative's corresponding send: one bundle over the
// union of their member routes (multiplicities add up), bounded per member by one copy's rate bound, and
// restricted to representative links under a symmetry.
void bundle_mirrored_sends(const Topology& topo, const PipelineMirroring& mirroring, StageWork& work);

}  // namespace arachne
