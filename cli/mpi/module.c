/* The MPI module (cli/mpi/module_abi.h): thin wrappers of the MPI calls the CLI's MPI work group needs. */
#include <limits.h>
#include <mpi.h>

#include "cli/mpi/module_abi.h"

/* The largest message: MPI counts are int. */
static const uint64_t kChunk = INT_MAX;

static int init(int* rank, int* size) {
  int provided = 0;
  int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return rc;
  if (provided < MPI_THREAD_FUNNELED) return MPI_ERR_OTHER;
  rc = MPI_Comm_rank(MPI_COMM_WORLD, rank);
  return rc != MPI_SUCCESS ? rc : MPI_Comm_size(MPI_COMM_WORLD, size);
}

static int all_gather_u64(uint64_t mine, uint64_t* all) {
  return MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
}

static int send_bytes(int dest, int tag, const void* data, uint64_t len) {
  const char* p = (const char*)data;
  for (uint64_t done = 0; done < len;) {
    const int n = (int)(len - done < kChunk ? len - done : kChunk);
    const int rc = MPI_Send(p + done, n, MPI_BYTE, dest, tag, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return rc;
    done += (uint64_t)n;
  }
  return MPI_SUCCESS;
}

static int recv_bytes(int source, int tag, void* data, uint64_t len) {
  char* p = (char*)data;
  for (uint64_t done = 0; done < len;) {
    const int n = (int)(len - done < kChunk ? len - done : kChunk);
    const int rc = MPI_Recv(p + done, n, MPI_BYTE, source, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
    done += (uint64_t)n;
  }
  return MPI_SUCCESS;
}

static int probe(int tag, int* source) {
  int flag = 0;
  MPI_Status status;
  const int rc = MPI_Iprobe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &flag, &status);
  *source = flag ? status.MPI_SOURCE : -1;
  return rc;
}

static int broadcast(int root, void* data, uint64_t len) {
  char* p = (char*)data;
  for (uint64_t done = 0; done < len;) {
    const int n = (int)(len - done < kChunk ? len - done : kChunk);
    const int rc = MPI_Bcast(p + done, n, MPI_BYTE, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return rc;
    done += (uint64_t)n;
  }
  return MPI_SUCCESS;
}

static void abort_all(int exit_code) { MPI_Abort(MPI_COMM_WORLD, exit_code); }

static int finalize(void) { return MPI_Finalize(); }

__attribute__((visibility("default"))) const ArachneMpiModule* arachne_mpi_module(void) {
  static const ArachneMpiModule table = {ARACHNE_MPI_ABI_VERSION, init, all_gather_u64, send_bytes, recv_bytes,
                                         probe, broadcast, abort_all, finalize};
  return &table;
}
