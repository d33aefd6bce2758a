// Data-parallel gradient reduction across pipelines of any structure.
//
// Layers are cut into segments at every stage boundary of every pipeline; a segment's holders are all the
// TP groups (of any pipeline, and the several groups of a split stage) that hold it. Each segment is reduced
// in Megatron's buckets (DistributedDataParallel: ≥ 40M local parameters or 1M·dp, filled from the last
// layer backwards, Megatron-LM core/distributed). A bucket's collective starts once every holder has
// produced its gradients: during the last micro-batch's backward when overlap_grad_reduce, after the whole
// backward otherwise. Holders with different TP degrees hold different shards: the bucket is cut into
// lcm(tp) slices and each slice is all-reduced over the GPUs holding it. With ZeRO-1 the bucket is
// reduce-scattered, each holder steps its shard, and the bf16 parameters are all-gathered.
// Tied embeddings (GPT) with PP > 1: after its data-parallel buckets, the first stage all-reduces the word
// embedding's gradient with the last stage's copy, then both step (Megatron-LM megatron/training.py
// train_step, "backward-embedding-all-reduce"; megatron/core/distributed/finalize_model_grads.py,
// _allreduce_word_embedding_grads). It is one more bucket, over the first and last stage of a pipeline.
#pragma once
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "sim/exec/stage_work.h"
#include "sim/net/collectives.h"

namespace arachne {

// What the bucket layout needs of a TP group (a worker of build_stage_work): its TP degree and, per model
// chunk, the layers it holds and its expert-parallel rank and routed experts (-1: all experts, no EP).
struct GradBucketChunk {
  int layer_begin = 0, layer_end = 0;
  int ep_rank = 0;
  double local_experts = -1;
  bool operator==(const GradBucketChunk&) const = default;
};
struct GradBucketWorker {
  int tp = 1;
  std::vector<GradBucketChunk> chunks;
  bool operator==(const GradBucketWorker&) const = default;
};
// A holder of a bucket's gradients: worker and chunk index.
struct GradHolder {
  int worker = 0;
  int chunk = 0;
};
struct GradBucket {
  int layer_begin = 0, layer_end = 0;
  bool embedding = false, head = false;
  bool tied_embedding = false;  // the first/last-stage word-embedding all-reduce, after the DP buckets
  std::vector<GradHolder> holders;
  double full_params = 0;  // parameters of the bucket without TP sharding
  int lcm_tp = 1;
  int communicator = 0;    // buckets on one communicator run one at a time (NCCL issue order)
};
struct GradBuckets {
  std::vector<GradBucket> buckets;  // per segment in layer order: fill order (expert buckets as reached); tied last
  int communicators = 0;            // communicator ids are below this
};
// The buckets GradSync reduces (the layout described above): segments cut at every stage boundary, each filled
// from its last layer backwards; expert-data-parallel buckets per MoE layer; the tied-embedding buckets per
// pipeline whose ends are different workers. worker_of and physical_depth as in StageWork.
GradBuckets gradient_buckets(const ModelConfig& model, const std::vector<GradBucketWorker>& workers,
                             const std::vector<std::vector<std::vector<int>>>& worker_of,
                             const std::vector<int>& physical_depth);

class GradSync {
 public:
  struct Callbacks {
    std::function<void(int worker)> grads_reduced;  // every bucket of the worker reduced: run optimizer
    std::function<void(int worker)> finished;       // worker done (after the ZeRO-1 all-gather)
    std::function<void(int worker, TimeNs start, TimeNs end)> bucket_span;  // for the timeline
  };
  GradSync(const ModelConfig& model, const Plan& plan, const StageWork& work, CollectiveContext& ctx,
           Callbacks cb);

  // The last backward of `chunk` on worker w starts at `start`: with overlap, buckets become ready while
  // it runs (`compute_s` is its kernel time).
  void on_last_backward_start(int w, int chunk, TimeNs start, double compute_s);
  // Expert-parallel passes (no fixed kernel timeline): during the last backward of `chunk`, every layer
  // from `first_done_layer` up is finished (and the embedding, when `embedding_done`).
  void on_layers_done(int w, int chunk, int first_done_layer, bool embedding_done);
  // Worker w finished all its backward passes.
  void on_backward_done(int w, TimeNs now);
  // Worker w finished its optimizer step.
  void on_optimizer_done(int w, TimeNs now);

  int buckets() const { return static_cast<int>(buckets_.size()); }
  // Time within [from, to] during which a collective of one of worker w's buckets (its reduction or ZeRO-1
  // all-gather) was running.
  TimeNs collective_time(int w, TimeNs from, TimeNs to) const;
  // Every collective the reduction will run (kind, members), for a census of the links it touches; stops
  // when `f` returns false.
  void for_each_collective(const std::function<bool(CollectiveKind, const std::vector<GpuId>&)>& f) const;
  // The tied-embedding all-reduces (not in for_each_collective): pipeline and members of each. Each runs after
  // its own pipeline's last transfer, so it couples only pipelines that share its links.
  void for_each_tied_embedding_collective(const std::function<bool(int, const std::vector<GpuId>&)>& f) const;
  // Under ctx.symmetry (set after construction; sim/exec/pipeline_mirror.h checked that it maps each
  // pipeline's tied-embedding all-reduce onto another's, slice for slice): each orbit of these all-reduces
  // runs as one collective, launched by its first bucket with the others' slices as images of its own
  // (allreduce_each); the other buckets of the orbit finish when it does, at the same time as in the full
  // simulation since the symmetry makes them start and progress together.
  void fold_symmetric_embedding_buckets();

 private:
  using Holder = GradHolder;
  struct Bucket : GradBucket {
    int waiting = 0;         // holders not yet ready
    int phase_pending = 0;   // slices still running
    int opt_waiting = 0;     // ZeRO-1: holders whose optimizer has not finished
    TimeNs started = -1, reduced_at = -1;          // the reduction's collective
    TimeNs gather_started = -1, gathered_at = -1;  // ZeRO-1's parameter all-gather
  };
  void ready(int b);
  void start(int b);
  void launch(int b, CollectiveKind kind, double bytes_per_param, std::function<void()> done);
  void reduced(int b);
  // Starts the tied-embedding all-reduce of worker w once only it is left (DP buckets reduced, backward done).
  void maybe_sync_embedding(int w);
  std::vector<GpuId> slice_members(const Bucket& bk, int k) const;
  // The member sets one collective of slice k of bucket b runs over: its own, or its orbit's.
  std::vector<std::vector<GpuId>> slice_sets(int b, int k) const;

  const Plan& plan_;
  const StageWork& work_;
  CollectiveContext& ctx_;
  Callbacks cb_;
  double grad_bytes_ = 4;
  double param_bytes_ = 2;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<int>> buckets_of_worker_;
  std::vector<int> pending_;        // per worker: buckets not yet reduced
  std::vector<int> tied_bucket_;    // per worker: its tied-embedding bucket, or -1
  std::vector<int> gather_pending_; // per worker: ZeRO-1 all-gathers not yet done
  std::vector<bool> backward_done_;
  std::set<std::pair<int, int>> reported_;  // (bucket, worker) readiness already reported
  // NCCL runs the collectives of one communicator in issue order: per segment, the bucket in flight and
  // the ready ones queued behind it.
  std::vector<bool> segment_busy_;
  std::vector<std::vector<int>> segment_queue_;
  // Folded tied-embedding orbits: per bucket, the orbit's first bucket (-1: not folded); per first bucket,
  // per slice, the member sets of the whole orbit, and the completions of the other buckets that wait for it.
  std::vector<int> orbit_first_;
  std::vector<std::vector<std::vector<std::vector<GpuId>>>> orbit_sets_;
  std::vector<std::vector<std::function<void()>>> orbit_waiting_;
};

}  // namespace arachne
