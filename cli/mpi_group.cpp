#include "cli/mpi_group.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/mpi/module_abi.h"
#include "planner/learned_module.h"  // executable_dir
#include "sim/io/input_error.h"

namespace arachne::cli {
namespace {

constexpr const char* kModuleEnv = "ARACHNE_MPI_MODULE";

[[noreturn]] void fail(const std::string& reason) { throw InputError("MPI", reason); }

std::string module_path() {
  const char* env = std::getenv(kModuleEnv);
  if (env != nullptr && *env != '\0') return env;
  return (std::filesystem::path(planner::executable_dir()) / ARACHNE_MPI_MODULE_FILE).string();
}

const ArachneMpiModule& load_module() {
  const std::string path = module_path();
  // RTLD_GLOBAL: Open MPI's own plugins (dlopen()ed by libmpi) resolve symbols of libmpi and its
  // dependencies in the global namespace.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    fail("started by an MPI launcher, but the MPI module " + path + " cannot be loaded (" + (why ? why : "unknown") +
         "); build with -DARACHNE_WITH_MPI=ON (Debian: libopenmpi-dev) or point " + kModuleEnv + " at it");
  }
  void* sym = dlsym(handle, ARACHNE_MPI_ENTRY);
  if (sym == nullptr) fail(path + " is not an arachne MPI module (no symbol " ARACHNE_MPI_ENTRY ")");
  // POSIX guarantees that a function's address survives the round trip through void* (dlsym's contract).
  const ArachneMpiModule* table = reinterpret_cast<ArachneMpiEntry>(sym)();
  if (table == nullptr || table->abi_version != ARACHNE_MPI_ABI_VERSION)
    fail(path + " speaks another module ABI than this arachne; rebuild it with this arachne");
  return *table;
}

void check(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(std::string("MPI: ") + what + " failed (error " + std::to_string(rc) + ")");
}

class MpiGroup final : public planner::WorkGroup {
 public:
  explicit MpiGroup(const ArachneMpiModule& mpi) : mpi_(mpi) { check(mpi_.init(&rank_, &size_), "MPI_Init_thread"); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::string> all_gather(const std::string& mine) override {
    const std::vector<std::uint64_t> sizes = sizes_of(mine);
    std::vector<std::string> all(sizes.size());
    for (int r = 0; r < size_; ++r) {
      all[r] = r == rank_ ? mine : std::string(sizes[r], '\0');
      check(mpi_.broadcast(r, all[r].data(), sizes[r]), "MPI_Bcast");
    }
    return all;
  }

  std::vector<std::string> gather(const std::string& mine) override {
    const std::vector<std::uint64_t> sizes = sizes_of(mine);
    if (rank_ != 0) {
      check(mpi_.send(0, kGatherTag, mine.data(), mine.size()), "MPI_Send");
      return {};
    }
    std::vector<std::string> all(sizes.size());
    all[0] = mine;
    for (int r = 1; r < size_; ++r) {
      all[r].resize(sizes[r]);
      check(mpi_.recv(r, kGatherTag, all[r].data(), sizes[r]), "MPI_Recv");
    }
    return all;
  }

  // A message: its length (8 bytes), then its bytes.
  void send(int dest, const std::string& message) override {
    const std::uint64_t len = message.size();
    check(mpi_.send(dest, kMessageTag, &len, sizeof len), "MPI_Send");
    check(mpi_.send(dest, kMessageTag, message.data(), len), "MPI_Send");
  }

  std::string receive(int source) override {
    std::uint64_t len = 0;
    check(mpi_.recv(source, kMessageTag, &len, sizeof len), "MPI_Recv");
    std::string message(len, '\0');
    check(mpi_.recv(source, kMessageTag, message.data(), len), "MPI_Recv");
    return message;
  }

  int poll() override {
    int source = -1;
    check(mpi_.probe(kMessageTag, &source), "MPI_Iprobe");
    return source;
  }

  [[noreturn]] void fail(std::exception_ptr error) override {
    const int code = planner::exit_code_of(error);
    try {
      std::rethrow_exception(error);
    } catch (const InputError& e) {
      input_error(e.where(), e.reason());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: internal: rank %d of %d: %s\n", rank_, size_, e.what());
    } catch (...) {
      std::fprintf(stderr, "error: internal: rank %d of %d: unknown exception\n", rank_, size_);
    }
    std::fflush(stderr);
    abort_all(code);
  }

  [[noreturn]] void abort_all(int exit_code) {
    mpi_.abort(exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; in case it does
  }

  void finalize() { check(mpi_.finalize(), "MPI_Finalize"); }

 private:
  std::vector<std::uint64_t> sizes_of(const std::string& mine) {
    std::vector<std::uint64_t> sizes(static_cast<std::size_t>(size_));
    check(mpi_.all_gather_u64(mine.size(), sizes.data()), "MPI_Allgather");
    return sizes;
  }

  // Tags keep gather()'s transfers apart from send()'s messages.
  static constexpr int kGatherTag = 1, kMessageTag = 2;
  const ArachneMpiModule& mpi_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool started_by_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

std::unique_ptr<planner::WorkGroup> join_process_group() {
  if (!started_by_mpi_launcher()) return nullptr;
  auto group = std::make_unique<MpiGroup>(load_module());
  // A launcher whose wiring MPI cannot use (Open MPI started by `srun --mpi=pmi2` without PMI-2 support)
  // leaves every process a job of its own: each would run every item and write the same files.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* n = std::getenv(v);
    if (n != nullptr && std::atoi(n) != group->size())
      fail(std::string("the launcher started ") + n + " processes (" + v + ") but MPI sees " +
           std::to_string(group->size()) + "; under Slurm use srun --mpi=pmix");
  }
  return group;
}

int leave_process_group(std::unique_ptr<planner::WorkGroup> group, int exit_code) {
  auto* mpi = dynamic_cast<MpiGroup*>(group.get());
  if (mpi == nullptr) return exit_code;
  if (exit_code != kExitOk && !mpi->failed_together()) mpi->abort_all(exit_code);
  mpi->finalize();
  return exit_code;
}

int agreed_exit_code(planner::WorkGroup& group, int exit_code) {
  if (exit_code != kExitOk)
    planner::agree(group, std::make_exception_ptr(planner::FailedElsewhere(group.rank(), exit_code)));
  return exit_code;
}

}  // namespace arachne::cli
