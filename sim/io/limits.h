// Supported ranges of user input (DESIGN.md "Supported ranges"), in one place. Every number read from a
// file or a flag is checked against one of these where it is read (sim/io/numbers.h), so that an absurd
// size is refused with exit 2 before any work starts instead of hanging, exhausting memory or wrapping
// around in an int. Each bound is far above any real system of today (the reason is given next to it)
// and low enough that the work it allows stays bounded.
#pragma once

namespace arachne::limits {

struct IntRange {
  long long min;
  long long max;
};
struct RealRange {
  double min;
  double max;
  bool min_exclusive = false;  // (min, max] instead of [min, max]
};

// File format versions (the `version:` field): read as a small integer, then compared with the one supported.
inline constexpr IntRange kFormatVersion{0, 1'000'000};

// ---- Clusters
// GPUs in one cluster: 65,536 is above the largest training clusters reported (~100k GPUs are split into
// several NVLink/InfiniBand pods) as a single homogeneous job, and keeps the topology (one node object per
// machine, one route per GPU pair used) within memory and a second of setup.
inline constexpr long long kMaxClusterGpus = 65'536;
// Nodes per group and per cluster: the GPU bound with one GPU per node.
inline constexpr IntRange kNodes{1, kMaxClusterGpus};
// GPUs per node (one NVLink/PCIe domain): 72 in a GB200 NVL72 rack, 256 in a DGX GH200; 256 is the bound.
inline constexpr IntRange kGpusPerNode{1, 256};
// NICs per node: 8 on DGX-class machines, one per GPU at most in practice.
inline constexpr IntRange kNicsPerNode{1, 256};
// Nodes under one leaf switch (nodes_per_leaf): at most every node.
inline constexpr IntRange kNodesPerLeaf{1, kMaxClusterGpus};
// Link and NIC bandwidths, HBM bandwidth (bytes/s): positive; NVLink 5 is 1.8 TB/s per GPU and HBM3e
// ~8 TB/s, so 100 TB/s leaves a 10x margin while keeping transfer times far from underflow.
inline constexpr RealRange kBandwidth{0.0, 1e14, true};
// Latencies and per-operation overheads in configuration files (seconds): microseconds in practice.
inline constexpr RealRange kLatency{0.0, 1.0};
// Memory sizes (bytes): 288 GB of HBM on the largest GPU of today; 10 TB.
inline constexpr RealRange kMemoryBytes{0.0, 1e13, true};
// Peak FLOP rates: ~10 PFLOP/s dense FP8 on a B200 GPU; 100 PFLOP/s.
inline constexpr RealRange kFlopsRate{0.0, 1e17, true};
// Fitted efficiencies (compute-model constants of a GPU): fractions of the peak, above zero.
inline constexpr RealRange kEfficiency{0.0, 1.0, true};
// Plain fractions (overlap slowdown).
inline constexpr RealRange kFraction{0.0, 1.0};
// FLOPs at which a GEMM reaches half its peak efficiency: 1e18 is beyond any single kernel.
inline constexpr RealRange kHalfEfficiencyFlops{0.0, 1e18};
// Oversubscription of the spine (fabric): 1 (full bisection) up to a deliberately extreme 1000:1.
inline constexpr RealRange kOversubscription{0.0, 1000.0, true};

// ---- Models
// Transformer layers: 126 in Llama 3.1 405B, 118 in PaLM 540B; 1,000 (the simulator's work grows with it).
inline constexpr IntRange kLayers{1, 1'000};
// Hidden size: 18,432 in PaLM 540B, 25,600 in MT-NLG 530B; 2^17.
inline constexpr IntRange kHidden{1, 131'072};
// Attention heads (and KV heads): 128 in Llama 3.1 405B; 1,024.
inline constexpr IntRange kHeads{1, 1'024};
// FFN hidden size (dense and expert): 73,728 in PaLM 540B; 2^20.
inline constexpr IntRange kFfnHidden{1, 1'048'576};
// Sequence length: 1M-token contexts exist (Llama 4 Scout reports 10M at inference, not in training); 2^20.
inline constexpr IntRange kSeqLen{1, 1'048'576};
// Vocabulary: 256k in Gemma; 2^22.
inline constexpr IntRange kVocab{1, 4'194'304};
// Experts per MoE layer: 256 routed in DeepSeek-V3; 4,096. top_k, every, first_dense, shared_experts
// are bounded by experts or layers where they are read.
inline constexpr IntRange kExperts{1, 4'096};
inline constexpr IntRange kSharedExperts{0, 4'096};
// MoE capacity factor and routing skew: plain factors, 1 to 2 in the papers; 1000 is far beyond use.
inline constexpr RealRange kMoeFactor{0.0, 1000.0};

// ---- Plans and batches
// Global batch in samples: 1,536 for GPT-3 175B, 1,024 samples of 4,096 tokens for Llama 2, 65,536
// sequences in LAMB's BERT pre-training (the largest reported); 2^16. The simulator's work grows with the
// micro-batches of an iteration and AMP enumerates the batch's divisors: the bound keeps both small.
inline constexpr IntRange kGlobalBatch{1, 65'536};
// Micro-batch in samples: at most the global batch.
inline constexpr IntRange kMicroBatch = kGlobalBatch;
// Micro-batch x stage steps of one pipeline in one iteration (the simulator's events grow with them):
// 2^20 simulate in ~4 s and ~0.5 GB; GPT-3 175B on 1,024 GPUs (PP 16, 192 micro-batches) needs 3,072.
inline constexpr long long kMaxPipelineSteps = 1'048'576;
// Parallel degrees (tp, pp, dp, ep, virtual stages, pipeline and stage indices): at most every GPU.
inline constexpr IntRange kDegree{1, kMaxClusterGpus};

// ---- Traces and replays (seconds of simulated time)
// A trace or a replay spans at most ten years (the Alibaba GPU trace covers ~2 months, spot traces weeks);
// with checkpoints at least a second apart the replay loop stays under ~3e8 cheap steps.
inline constexpr RealRange kTraceSeconds{0.0, 3.2e8};
// GPUs of one trace row (one node or a whole count series): the cluster bound.
inline constexpr IntRange kTraceGpus{0, kMaxClusterGpus};
// Other numeric cells of trace files (time stamps, CPU millicores, MiB): non-negative, below 1e12.
inline constexpr RealRange kTraceCell{0.0, 1e12};
// Checkpoint interval: 0 (no checkpoints) or at least one second (see kTraceSeconds).
inline constexpr double kMinCheckpointIntervalS = 1.0;
// Alibaba tenant-load multiplier: 0 (no other tenants) up to 1000x the recorded load.
inline constexpr RealRange kLoadScale{0.0, 1000.0};

// Counts and sizes in measurement CSVs (GPUs, batches, layers, hidden sizes): below 1e9, so they fit an int.
inline constexpr IntRange kMeasurementCount{0, 999'999'999};

// Published measurements (tokens/s, TFLOP/s, seconds, ratios): positive and finite.
inline constexpr RealRange kMeasuredValue{0.0, 1e30, true};

// ---- Search sizes and counts given on the command line or in experiment files
// Evaluations, templates, configurations: a billion is days of work, never a typo-sized hang at parse time.
inline constexpr IntRange kCount{1, 1'000'000'000};
inline constexpr IntRange kCountOrZero{0, 1'000'000'000};
// Rounds and epochs: loops whose iterations each cost a full search or an epoch over the data.
inline constexpr IntRange kRounds{0, 1'000'000};
// Worker threads: more than any machine this runs on.
inline constexpr IntRange kThreads{1, 4'096};
// Candidates decoded, simulated or labelled per search (beam width, simulate-top, labels, samples): each
// may cost a simulation of milliseconds to seconds.
inline constexpr IntRange kSearchWidth{1, 100'000};
// Event rates of the synthetic trace generator (tenant arrivals per hour, spot reclaims per day): a week
// at the bound is ~2e7 events.
inline constexpr RealRange kEventRate{0.0, 1e5};
// Candidate tenant arrivals and spot reclaims the trace generator draws: 1e7 takes ~10 s and ~1 GB.
inline constexpr double kMaxGeneratedEvents = 1e7;
// Learning rate of the policy's optimiser (Adam): 1e-3 typical; above 1 diverges.
inline constexpr RealRange kLearningRate{0.0, 1.0, true};
// Wall-clock caps (seconds): up to a week.
inline constexpr RealRange kWallSeconds{0.0, 604'800.0, true};

}  // namespace arachne::limits
