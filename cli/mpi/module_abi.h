/* The C interface of the MPI module (libarachne_mpi_module.so, built when ARACHNE_WITH_MPI is on).
 *
 * Linking Debian's libmpi (and its dependency chain) costs every process start library loading: an empty C
 * program linked with it, MPI_Init never called, started 4-12 ms slower than unlinked (200 starts each,
 * 3 alternations, on this project's loaded 2-core machine). `arachne` is started often by scripts and
 * tests, so no MPI code is linked into it: the CLI loads this module with dlopen() only when the process
 * was started by an MPI launcher (cli/mpi_group.h) and asks for one symbol, ARACHNE_MPI_ENTRY. Plain C
 * types only; the module is the only code that includes <mpi.h>. Every call is made by the process's main
 * thread (MPI_THREAD_FUNNELED). Every function that can fail returns 0 on success, else an MPI error code
 * (with MPI's default error handler, MPI_ERRORS_ARE_FATAL, an error usually ends the job before that).
 * Change ARACHNE_MPI_ABI_VERSION whenever this struct changes; the host refuses another version. */
#ifndef ARACHNE_CLI_MPI_MODULE_ABI_H
#define ARACHNE_CLI_MPI_MODULE_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ARACHNE_MPI_ABI_VERSION 2u
#define ARACHNE_MPI_ENTRY "arachne_mpi_module"
#define ARACHNE_MPI_MODULE_FILE "libarachne_mpi_module.so"

typedef struct ArachneMpiModule {
  uint32_t abi_version;
  /* MPI_Init_thread (MPI_THREAD_FUNNELED) and this process's rank and size in MPI_COMM_WORLD. */
  int (*init)(int* rank, int* size);
  /* Every rank's number, in rank order (MPI_Allgather): all has size entries. */
  int (*all_gather_u64)(uint64_t mine, uint64_t* all);
  /* Blocking transfers of len bytes with a tag (both sides pass the same len), in messages of at most
   * INT_MAX bytes (MPI counts are int); messages between two ranks with one tag arrive in order. */
  int (*send)(int dest, int tag, const void* data, uint64_t len);
  int (*recv)(int source, int tag, void* data, uint64_t len);
  /* Without blocking (MPI_Iprobe): *source = a rank whose message with this tag waits, else -1. */
  int (*probe)(int tag, int* source);
  int (*broadcast)(int root, void* data, uint64_t len);
  /* MPI_Abort(MPI_COMM_WORLD, exit_code): ends every rank's process; does not return. */
  void (*abort)(int exit_code);
  int (*finalize)(void);
} ArachneMpiModule;

typedef const ArachneMpiModule* (*ArachneMpiEntry)(void);

#ifdef __cplusplus
}
#endif

#endif
