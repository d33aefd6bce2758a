// The processes one run is split across: a single process (the default), or the ranks of an MPI job
// (`mpirun -np N arachne experiment ...`; the CLI's cli/mpi_group.h supplies that group, so no MPI code is
// in planner/ or sim/). Long runs over numbered items (planner/common/shards.h) use it to split the items,
// to bring every item's result to rank 0, which alone writes the output files, and to agree on failures so
// that no rank waits forever for a rank that has stopped.
#pragma once
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace arachne::planner {

class WorkGroup {
 public:
  virtual ~WorkGroup() = default;
  virtual int rank() const = 0;  // 0 .. size() - 1; rank 0 writes the outputs
  virtual int size() const = 0;

  // Collectives: every rank calls them, in the same order.
  // Every rank's text, in rank order, on every rank.
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;
  // On rank 0 every rank's text in rank order; on the other ranks an empty list.
  virtual std::vector<std::string> gather(const std::string& mine) = 0;

  // Messages between two ranks (rank 0's dispatch of items, planner/common/shards.cpp); those from one
  // rank arrive in the order sent. receive() blocks; poll() does not: a rank whose message waits, or -1.
  // A single process has no one to talk to: they throw std::logic_error.
  virtual void send(int dest, const std::string& message) = 0;
  virtual std::string receive(int source) = 0;
  virtual int poll() = 0;

  // A failure met by this rank alone, where the others cannot know of it (an exception while its items
  // run): a single process rethrows it; a rank of a group prints it and ends every rank's process.
  [[noreturn]] virtual void fail(std::exception_ptr error) = 0;

  // True after agree() found a failure: every rank knows, and every rank may end normally.
  bool failed_together() const { return failed_together_; }

 private:
  friend void agree(WorkGroup& group, const std::exception_ptr& error);
  bool failed_together_ = false;
};

// The group of one process (rank 0 of 1).
WorkGroup& single_process();

// Thrown on the ranks that met no error when another rank did (agree()): end with exit_code, printing
// nothing (the rank that met the error prints it).
class FailedElsewhere : public std::runtime_error {
 public:
  FailedElsewhere(int rank, int exit_code)
      : std::runtime_error("rank " + std::to_string(rank) + " failed"), exit_code(exit_code) {}
  int exit_code;
};

// The exit code an error ends the process with: 2 for bad input (InputError), a FailedElsewhere's own,
// else 1.
int exit_code_of(const std::exception_ptr& error);

// Collective: each rank passes the error it met (null: none). When any rank met one, the lowest such rank
// rethrows its own and every other rank throws FailedElsewhere with that rank's exit code, so that every
// rank ends with the same exit code and one error line is printed. Used for checks of the input, which
// every rank makes before any item runs.
void agree(WorkGroup& group, const std::exception_ptr& error);

}  // namespace arachne::planner
