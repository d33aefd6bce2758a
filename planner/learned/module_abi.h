/* The C interface of the learned planner's Torch module (libarachne_learned_module.so).
 *
 * LibTorch costs ~1.4 s of library loading and static initialisation per process, so no Torch code is
 * linked into `arachne`: everything that needs Torch is built into this module, which the host loads with
 * dlopen() on first use (planner/learned_module.h) and asks for one symbol, ARACHNE_LEARNED_ENTRY. The
 * module exports nothing else (planner/learned/module.map). Plain C types only, so that host and module
 * share no C++ objects, allocator or exceptions: the host keeps the planner logic (templates, features,
 * pricing with the simulator) and hands the module numbers; the module keeps the network.
 *
 * Errors: functions that can fail return NULL or a non-zero int and write a NUL-terminated message of
 * at most err_len bytes (including the NUL) to err. No C++ exception crosses this boundary.
 * Change ARACHNE_LEARNED_ABI_VERSION whenever this struct changes; the host refuses another version. */
#ifndef ARACHNE_PLANNER_LEARNED_MODULE_ABI_H
#define ARACHNE_PLANNER_LEARNED_MODULE_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ARACHNE_LEARNED_ABI_VERSION 1u
#define ARACHNE_LEARNED_ENTRY "arachne_learned_module"
#define ARACHNE_LEARNED_MODULE_FILE "libarachne_learned_module.so"

typedef struct ArachnePolicy ArachnePolicy; /* opaque: a policy network owned by the module */

typedef struct ArachneLearnedModule {
  uint32_t abi_version;        /* ARACHNE_LEARNED_ABI_VERSION of the module's build */
  const char* arachne_version; /* ARACHNE_VERSION of the module's build */
  const char* torch_version;   /* LibTorch version the module was built against, e.g. "1.13.0" */

  /* A structure-policy network (planner/learned/structure_policy.h): `features` inputs, `layers` hidden
   * layers of `hidden` units, parameters drawn from a generator seeded with `seed`. NULL on failure. */
  ArachnePolicy* (*policy_create)(int64_t features, int64_t hidden, int64_t layers, uint64_t seed, char* err,
                                  size_t err_len);
  /* Number of input features of `policy`. */
  int64_t (*policy_features)(const ArachnePolicy* policy);
  /* Scores `candidates` rows of policy_features(policy) floats each (row-major in `x`): writes one logit
   * per row to `out`. Returns 0 on success. */
  int (*policy_score)(const ArachnePolicy* policy, const float* x, int64_t candidates, float* out, char* err,
                      size_t err_len);
  void (*policy_destroy)(ArachnePolicy* policy);
} ArachneLearnedModule;

/* The type of the ARACHNE_LEARNED_ENTRY symbol: returns the module's table (static storage). */
typedef const ArachneLearnedModule* (*ArachneLearnedEntry)(void);

#ifdef __cplusplus
}
#endif

#endif /* ARACHNE_PLANNER_LEARNED_MODULE_ABI_H */
