// The work group (planner/common/work_group.h) of an `arachne experiment` or `arachne gen-data` process:
// the ranks of an MPI job when an MPI launcher (mpirun, srun) started it, else the single process.
//
// A plain `arachne` invocation neither loads MPI nor needs mpirun: the MPI module (cli/mpi/module_abi.h) is
// dlopen()ed, and MPI initialised, only when the environment shows an MPI launcher. Where the module is
// looked for: $ARACHNE_MPI_MODULE if set, else beside the running executable.
#pragma once
#include <memory>

#include "planner/common/work_group.h"

namespace arachne::cli {

// True when an MPI launcher started this process: Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE in every
// process (Open MPI docs, "Environment variables set for MPI applications"); a PMIx launcher (Open MPI 4's
// mpirun, `srun --mpi=pmix`) sets PMIX_RANK; a PMI-2 launcher (`srun --mpi=pmi2`) sets PMI_RANK.
bool started_by_mpi_launcher();

// The MPI group this process runs in, or null when no MPI launcher started it (then the group is
// planner::single_process()). Throws InputError("MPI", reason) when an MPI launcher started it but the
// MPI module cannot be loaded (a build without ARACHNE_WITH_MPI), so that N copies of the same run never
// write the same files unawares.
std::unique_ptr<planner::WorkGroup> join_process_group();

// Ends this process's part in the group; returns exit_code. An MPI rank calls MPI_Finalize after success
// or a failure every rank agreed on (planner::agree), and MPI_Abort(exit_code) after a failure it met alone,
// since the other ranks may be waiting for it in a collective (MPI_Finalize would wait for them in turn).
int leave_process_group(std::unique_ptr<planner::WorkGroup> group, int exit_code);

// For an error a command found and printed before any collective, alike on every rank (a bad flag): agrees
// on it with the other ranks (planner::agree), so that every rank then ends normally with exit_code.
// Returns exit_code when it is 0; otherwise throws (FailedElsewhere on every rank).
int agreed_exit_code(planner::WorkGroup& group, int exit_code);

}  // namespace arachne::cli
