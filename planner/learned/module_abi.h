/* The C interface of the learned planner's Torch module (libarachne_learned_module.so).
 *
 * LibTorch costs ~1.4 s of library loading and static initialisation per process, so no Torch code is
 * linked into `arachne`: everything that needs Torch is built into this module, which the host loads with
 * dlopen() on first use (planner/learned_module.h) and asks for one symbol, ARACHNE_LEARNED_ENTRY. The
 * module exports nothing else (planner/learned/module.map). Plain C types only, so that host and module
 * share no C++ objects, allocator or exceptions: the host keeps the planner logic (templates, features,
 * pricing with the simulator, decoding with the exported weights in plain C++) and hands the module numbers;
 * the module keeps the network while it trains.
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

#define ARACHNE_LEARNED_ABI_VERSION 3u
#define ARACHNE_LEARNED_ENTRY "arachne_learned_module"
#define ARACHNE_LEARNED_MODULE_FILE "libarachne_learned_module.so"
#define ARACHNE_POLICY_MAX_GROUPS 16 /* room for type_tokens; the shape's max_groups may be smaller */

typedef struct ArachnePolicy ArachnePolicy; /* opaque: a policy network and its optimiser, owned by the module */

/* The network's shape (planner/arachne/policy_weights.h, PolicyShape). */
typedef struct ArachnePolicyShape {
  int64_t group_features, global_features, vocabulary, bos_token;
  int64_t max_groups;                             /* Type tokens, 1..ARACHNE_POLICY_MAX_GROUPS */
  int64_t type_tokens[ARACHNE_POLICY_MAX_GROUPS]; /* vocabulary id of Type k, k < max_groups */
  int64_t encoder_width, token_width, decoder_width;
} ArachnePolicyShape;

/* Training options (planner/learned/training.h, TrainOptions). */
typedef struct ArachneTrainOptions {
  uint64_t seed;        /* parameters are drawn after torch::manual_seed(seed) */
  int64_t threads;      /* intra-op threads during every step (determinism needs a fixed count) */
  double learning_rate; /* Adam */
  double grad_clip;     /* maximum global gradient L2 norm; 0 = none */
} ArachneTrainOptions;

/* A batch of `size` requests with one token sequence each, row-major arrays, padded to `max_groups` groups
 * and `steps` predicted tokens. */
typedef struct ArachneBatch {
  int64_t size, max_groups, steps;
  const float* group_x;       /* size x max_groups x group_features; rows past group_counts[b] ignored */
  const int64_t* group_counts;/* size: groups of request b, 1..max_groups */
  const float* global_x;      /* size x global_features */
  const int64_t* tokens;      /* size x (steps + 1): Bos, then the sequence; anything past lengths[b] */
  const int64_t* lengths;     /* size: tokens of sequence b, Bos included, 2..steps + 1 */
  const uint8_t* allowed;     /* size x steps x vocabulary: 1 when token v may follow tokens[b][0..t] */
  const double* rewards;      /* policy gradient only (else NULL): size */
  const int64_t* request;     /* policy gradient only (else NULL): request id of each sequence (baseline) */
} ArachneBatch;

typedef struct ArachneLearnedModule {
  uint32_t abi_version;        /* ARACHNE_LEARNED_ABI_VERSION of the module's build */
  const char* arachne_version; /* ARACHNE_VERSION of the module's build */
  const char* torch_version;   /* LibTorch version the module was built against, e.g. "1.13.0" */

  /* A new policy network with its Adam optimiser, seeded (planner/learned/training.h). NULL on failure. */
  ArachnePolicy* (*policy_create)(const ArachnePolicyShape* shape, const ArachneTrainOptions* options, char* err,
                                  size_t err_len);
  /* A policy resumed from a checkpoint written by policy_save; threads > 0 overrides the stored count. */
  ArachnePolicy* (*policy_load)(const char* path, int64_t threads, char* err, size_t err_len);
  /* Writes a torch::save checkpoint (network, optimiser state, options, step count). 0 on success. */
  int (*policy_save)(ArachnePolicy* policy, const char* path, char* err, size_t err_len);
  void (*policy_shape)(const ArachnePolicy* policy, ArachnePolicyShape* shape);
  /* One teacher-forced imitation step: Adam on the mean masked cross-entropy of the targets; *loss = the
   * loss before the step. 0 on success. */
  int (*policy_imitation_step)(ArachnePolicy* policy, const ArachneBatch* batch, double* loss, char* err,
                               size_t err_len);
  /* The imitation loss without a step (validation). 0 on success. */
  int (*policy_imitation_loss)(ArachnePolicy* policy, const ArachneBatch* batch, double* loss, char* err,
                               size_t err_len);
  /* One REINFORCE step on sampled sequences with batch->rewards, baseline = mean reward of the same
   * batch->request; *loss = the loss before the step. 0 on success. */
  int (*policy_gradient_step)(ArachnePolicy* policy, const ArachneBatch* batch, double* loss, char* err,
                              size_t err_len);
  /* Parameters for export, in planner/arachne/policy_weights.h's policy_parameters() order: the number of
   * tensors, and tensor `index`: its name (valid while the policy lives) and its values (row-major) copied
   * to `out`, which holds `out_len` floats. 0 on success; non-zero for a bad index or a short `out`. */
  int64_t (*policy_tensor_count)(const ArachnePolicy* policy);
  int (*policy_tensor)(const ArachnePolicy* policy, int64_t index, const char** name, int64_t* numel, float* out,
                       int64_t out_len, char* err, size_t err_len);
  void (*policy_destroy)(ArachnePolicy* policy);
  /* Sets Adam's learning rate for the steps that follow (kept in later checkpoints). 0 on success; non-zero
   * for a rate that is not positive and finite. */
  int (*policy_set_learning_rate)(ArachnePolicy* policy, double learning_rate, char* err, size_t err_len);
} ArachneLearnedModule;

/* The type of the ARACHNE_LEARNED_ENTRY symbol: returns the module's table (static storage). */
typedef const ArachneLearnedModule* (*ArachneLearnedEntry)(void);

#ifdef __cplusplus
}
#endif

#endif /* ARACHNE_PLANNER_LEARNED_MODULE_ABI_H */
