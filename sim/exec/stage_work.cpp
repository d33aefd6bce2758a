#include "sim/exec/stage_work.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "sim/exec/pipeline_schedule.h"
#include "sim/model/compute_time.h"
#include "sim/model/moe_costs.h"
#include "sim/net/collectives.h"

namespace arachne {
namespace {

double flops_of(const std::vector<OpCost>& ops) {
  double f = 0;
  for (const auto& o : ops) f += o.flops;
  return f;
}

// HBM bytes per parameter of Megatron's mixed-precision optimizer step (Float16OptimizerWithFloat16Params,
// megatron/optimizer/optimizer.py, with apex FusedAdam; Rajbhandari et al. 2020 §3 count its 16 bytes of
// fp32 state per parameter), in the order it runs:
//   fp16: copy the fp16 gradient to the fp32 main gradient (r 2 + w 4), unscale and check for inf/NaN
//         (r 4 + w 4), gradient norm for clipping (r 4), Adam (r param, grad, m, v 16 + w param, m, v 12),
//         copy the fp32 master weight to the fp16 model weight (r 4 + w 2), zero the fp16 gradient buffer
//         for the next iteration (w 2): 54 bytes;
//   bf16: the gradient buffer is already fp32 (no copy) and there is no loss scaling (no unscale): norm 4 +
//         Adam 28 + copy 6 + zeroing the fp32 buffer 4 = 42 bytes.
double adam_step_bytes_per_param(const ModelConfig& m) { return m.dtype == "bf16" ? 42.0 : 54.0; }

LinkClass intra_class(LinkKind k) { return k == LinkKind::Pcie ? LinkClass::Pcie : LinkClass::NvLink; }

}  // namespace

PassCost price_pass(const std::vector<OpCost>& ops, const std::vector<TpCollectives>& calls, const Worker& w,
                    const Cluster& cluster, const ModelConfig& model) {
  PassCost pc;
  const GpuSpec& gpu = cluster.gpu_spec(w.gpus.front());
  pc.compute_s = ops_time_s(ops, gpu, model.dtype);
  if (w.tp <= 1) return pc;
  for (const TpCollectives& c : calls) {
    if (c.count <= 0) continue;
    pc.tp_bytes += c.count * c.bytes;
    pc.tp_collectives += c.count;
    if (!w.tp_closed_form) continue;
    const NodeGroup& ng = cluster.group_of_node(cluster.node_of(w.gpus.front()));
    pc.tp_closed_form_s += intra_node_tp_collectives_s({c}, w.tp, ng, gpu, model.dtype);
    // Ring all-reduce: every rank sends 2(t-1)/t of the buffer (Patarasuk & Yuan 2009).
    pc.tp_closed_form_bytes[static_cast<int>(intra_class(ng.intra_kind))] += c.count * c.bytes * 2.0 * (w.tp - 1);
  }
  return pc;
}

double optimizer_step_s(double params, const GpuSpec& gpu, const ModelConfig& model) {
  return op_time_s(OpCost{OpClass::Memory, 0.0, params * adam_step_bytes_per_param(model)}, gpu, model.dtype);
}

namespace {

// Sample interval [lo, hi) of group g of a stage, as fractions of the micro-batch.
std::pair<double, double> share_interval(const Stage& st, int g) {
  double lo = 0;
  for (int i = 0; i < g; ++i) lo += st.groups[i].share;
  return {lo, lo + st.groups[g].share};
}

StageLink make_link(const Worker& src, const Worker& dst, int dst_worker, int dst_chunk, double bytes,
                    const Topology& topo) {
  StageLink l;
  l.peer_worker = dst_worker;
  l.peer_chunk = dst_chunk;
  // Megatron's scatter/gather p2p optimisation (Narayanan et al. SC'21 §4.1): each of k rank pairs sends
  // 1/k of the activation.
  const int k = std::min(src.tp, dst.tp);
  std::map<LinkId, int> mult;
  for (int j = 0; j < k; ++j) {
    const GpuId a = src.gpus[static_cast<size_t>(j) * src.tp / k];
    const GpuId b = dst.gpus[static_cast<size_t>(j) * dst.tp / k];
    l.members.emplace_back(a, b);
    for (LinkId id : topo.route(a, b)) ++mult[id];
    l.latency_s = std::max(l.latency_s, topo.latency_s(a, b));
  }
  for (const auto& [id, m] : mult) l.hops.push_back({id, m});
  l.bytes_per_member = bytes / k;
  return l;
}

}  // namespace

// Per call: the NCCL ring inside the node (nccl_intra_node_collective_time) at the achieved link bandwidth,
// plus the per-call software overhead. Blocking calls add all of it. A call beside a kernel of time t_k
// (Megatron's async TP all-reduce next to the weight-gradient GEMM) slows that kernel (1 + kappa) times while
// it is in flight (shared SMs and HBM; kappa = overlap_slowdown, Lee et al. 2025, see gpu.h), so the pair
// ends at max(t_c, t_k + t_c·kappa/(1 + kappa)) and adds that minus t_k.
double intra_node_tp_collectives_s(const std::vector<TpCollectives>& calls, int tp, const NodeGroup& node,
                                   const GpuSpec& gpu, const std::string& dtype) {
  if (tp <= 1) return 0.0;
  const double bw = node.intra_bw * gpu.compute.link_eff;
  const double k = gpu.compute.overlap_slowdown;
  double total = 0;
  for (const TpCollectives& c : calls) {
    if (c.count <= 0) continue;
    const double call_s = gpu.compute.collective_overhead_s +
                          nccl_intra_node_collective_time(CollectiveKind::AllReduce, tp, c.bytes, bw,
                                                          node.intra_kind != LinkKind::Pcie);
    double exposed = call_s;
    if (c.overlaps.flops > 0) {
      const double kernel_s = op_time_s(c.overlaps, gpu, dtype);
      exposed = std::max(call_s, kernel_s + call_s * k / (1.0 + k)) - kernel_s;
    }
    total += c.count * exposed;
  }
  return total;
}

double reduced_grad_bytes_per_param(const ModelConfig& m) { return m.dtype == "bf16" ? 4.0 : 2.0; }

StageWork build_stage_work(const Cluster& cluster, const Topology& topo, const ModelConfig& model,
                           const Plan& plan) {
  StageWork sw;
  const bool interleaved = plan.schedule == Schedule::Interleaved;
  const int chunks = interleaved ? plan.interleave : 1;
  sw.worker_of.resize(plan.pipelines.size());
  sw.physical_depth.resize(plan.pipelines.size());

  // Workers: one per (pipeline, physical rank, group).
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pl = plan.pipelines[p];
    const int depth = static_cast<int>(pl.stages.size()) / chunks;
    sw.physical_depth[p] = depth;
    sw.worker_of[p].resize(pl.stages.size());
    for (int r = 0; r < depth; ++r) {
      const Stage& st = pl.stages[r];
      for (size_t g = 0; g < st.groups.size(); ++g) {
        Worker w;
        w.pipeline = static_cast<int>(p);
        w.rank = r;
        w.group = static_cast<int>(g);
        w.gpus = st.groups[g].gpus;
        w.tp = st.groups[g].tp;
        w.share = st.groups[g].share;
        const int node0 = cluster.node_of(w.gpus.front());
        w.collective_overhead_s = cluster.gpu_spec(w.gpus.front()).compute.collective_overhead_s;
        w.tp_closed_form = std::all_of(w.gpus.begin(), w.gpus.end(),
                                       [&](GpuId x) { return cluster.node_of(x) == node0; });
        const int id = static_cast<int>(sw.workers.size());
        for (int c = 0; c < chunks; ++c) sw.worker_of[p][c * depth + r].push_back(id);
        sw.workers.push_back(std::move(w));
      }
    }
  }

  // Groups holding each layer across all pipelines (the data-parallel degree of that layer).
  std::vector<int> holders(model.layers, 0);
  for (const Pipeline& pl : plan.pipelines)
    for (const Stage& st : pl.stages)
      for (int l = st.layer_begin; l < st.layer_end; ++l) holders[l] += static_cast<int>(st.groups.size());

  // A chunk's passes, gradient-ready times, expert segments and parameters, and the model FLOPs of one of
  // its micro-batches on one rank: they depend only on the memo key below (the replicas of a pipeline class
  // repeat them), so each is priced once.
  auto price_chunk = [&](ChunkCost& cc, const Worker& w, const Stage& st) {
    ShardSpec sh{w.tp, plan.sequence_parallel, cc.samples};
    const GpuSpec& gpu = cluster.gpu_spec(w.gpus.front());
    std::vector<OpCost> fwd, bwd;
    if (cc.has_embedding) {
      auto e = embedding_forward_ops(model, sh);
      fwd.insert(fwd.end(), e.begin(), e.end());
    }
    // Backward order: head, layers from last to first, embedding.
    double t = 0;
    if (cc.has_head) {
      auto h = head_forward_ops(model, sh);
      fwd.insert(fwd.end(), h.begin(), h.end());
      auto hb = head_backward_ops(model, sh);
      t += ops_time_s(hb, gpu, model.dtype);
      bwd.insert(bwd.end(), hb.begin(), hb.end());
      cc.head_grad_ready_s = t;
    }
    cc.layer_grad_ready_s.assign(st.layer_end - st.layer_begin, 0.0);
    // TP collectives of the pass: the ends of the model, then every layer's.
    std::vector<TpCollectives> tp_fwd, tp_bwd;
    auto add_calls = [](std::vector<TpCollectives>& to, const std::vector<TpCollectives>& calls) {
      to.insert(to.end(), calls.begin(), calls.end());
    };
    if (cc.has_embedding) add_calls(tp_fwd, embedding_tp_collectives(model, sh, true));
    if (cc.has_head) {
      add_calls(tp_fwd, head_tp_collectives(model, sh, true));
      add_calls(tp_bwd, head_tp_collectives(model, sh, false));
    }
    for (int l = st.layer_begin; l < st.layer_end; ++l) {
      auto f = layer_forward_ops(model, l, sh);
      fwd.insert(fwd.end(), f.begin(), f.end());
    }
    for (int l = st.layer_end - 1; l >= st.layer_begin; --l) {
      auto rc = layer_recompute_ops(model, l, sh, plan.recompute);
      auto b = layer_backward_ops(model, l, sh);
      t += ops_time_s(rc, gpu, model.dtype) + ops_time_s(b, gpu, model.dtype);
      cc.layer_grad_ready_s[l - st.layer_begin] = t;
      bwd.insert(bwd.end(), rc.begin(), rc.end());
      bwd.insert(bwd.end(), b.begin(), b.end());
      const TpCollectives tc = layer_tp_collectives(model, sh);
      tp_fwd.push_back(tc);
      // Full recompute re-runs the forward, including its all-reduces (Korthikanti et al. 2022 §5).
      if (plan.recompute == Recompute::Full) tp_bwd.push_back(tc);
      add_calls(tp_bwd, layer_tp_backward_collectives(model, l, sh));
    }
    if (cc.has_embedding) {
      auto eb = embedding_backward_ops(model, sh);
      t += ops_time_s(eb, gpu, model.dtype);
      bwd.insert(bwd.end(), eb.begin(), eb.end());
    }
    cc.embedding_grad_ready_s = t;
    cc.forward = price_pass(fwd, tp_fwd, w, cluster, model);
    cc.backward = price_pass(bwd, tp_bwd, w, cluster, model);
    if (cc.ep > 1) {
      // Dense kernels per segment; the routed experts run between each MoE layer's all-to-alls.
      auto time = [&](const std::vector<OpCost>& ops) { return ops_time_s(ops, gpu, model.dtype); };
      auto dense = [&](int l) { return model.is_moe_layer(l) ? moe_dense_forward_ops(model, l, sh) : layer_forward_ops(model, l, sh); };
      cc.forward_segments_s.assign(1, 0.0);
      cc.backward_segments_s.assign(1, 0.0);
      if (cc.has_embedding) cc.forward_segments_s.back() += time(embedding_forward_ops(model, sh));
      for (int l = st.layer_begin; l < st.layer_end; ++l) {
        cc.forward_segments_s.back() += time(dense(l));
        if (model.is_moe_layer(l)) cc.moe_layers.push_back(l), cc.forward_segments_s.push_back(0.0);
      }
      if (cc.has_head) cc.forward_segments_s.back() += time(head_forward_ops(model, sh));
      if (cc.has_head) cc.backward_segments_s.back() += time(head_backward_ops(model, sh));
      for (int l = st.layer_end - 1; l >= st.layer_begin; --l) {
        if (model.is_moe_layer(l)) cc.backward_segments_s.push_back(0.0);
        const std::vector<OpCost> d = dense(l);
        std::vector<OpCost> rec;
        if (plan.recompute == Recompute::Full) rec = d;
        if (plan.recompute == Recompute::Selective) rec = layer_recompute_ops(model, l, sh, Recompute::Selective);
        cc.backward_segments_s.back() += time(rec) + time(backward_of(d));
      }
      if (cc.has_embedding) cc.backward_segments_s.back() += time(embedding_backward_ops(model, sh));
      double f = 0, b = 0;
      for (double x : cc.forward_segments_s) f += x;
      for (double x : cc.backward_segments_s) b += x;
      cc.forward.compute_s = f;
      cc.backward.compute_s = b;
      const int experts = model.moe->experts;
      cc.ep_experts = st.experts.empty() ? std::vector<int>(st.ep, experts / st.ep) : st.experts;
    }

    cc.params_per_rank = 0;
    for (int l = st.layer_begin; l < st.layer_end; ++l) {
      if (cc.local_experts >= 0 && model.is_moe_layer(l)) {
        const MoeLayerParams mp = moe_layer_params_per_rank(model, l, w.tp, 1);
        cc.params_per_rank += mp.dense + cc.local_experts * mp.experts;
      } else {
        cc.params_per_rank += layer_params_per_rank(model, l, w.tp);
      }
    }
    if (cc.has_embedding) cc.params_per_rank += embedding_params_per_rank(model, w.tp);
    if (cc.has_head) cc.params_per_rank += head_params_per_rank(model, w.tp);

    // Model FLOPs (no recompute): forward + backward of every sample this group processes.
    const std::vector<OpCost> bwd_only = [&] {
      std::vector<OpCost> v;
      for (int l = st.layer_begin; l < st.layer_end; ++l) {
        auto b = layer_backward_ops(model, l, sh);
        v.insert(v.end(), b.begin(), b.end());
      }
      if (cc.has_head) {
        auto hb = head_backward_ops(model, sh);
        v.insert(v.end(), hb.begin(), hb.end());
      }
      return v;
    }();
    return flops_of(fwd) + flops_of(bwd_only);
  };
  std::map<std::tuple<const GpuSpec*, int, int, bool, double, int, int, bool, bool, int, double, std::vector<int>>,
           std::pair<ChunkCost, double>>
      priced;  // by GPU type, node group, TP, closed-form TP, samples, layers, ends, EP, local experts, placement

  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pl = plan.pipelines[p];
    const int depth = sw.physical_depth[p];
    const int nst = static_cast<int>(pl.stages.size());
    for (int j = 0; j < nst; ++j) {
      const Stage& st = pl.stages[j];
      for (size_t g = 0; g < st.groups.size(); ++g) {
        Worker& w = sw.workers[sw.worker_of[p][j][g]];
        ChunkCost cc;
        cc.vstage = j;
        cc.layer_begin = st.layer_begin;
        cc.layer_end = st.layer_end;
        cc.has_embedding = j == 0;
        cc.has_head = j == nst - 1;
        cc.samples = pl.micro_batch * w.share;
        if (model.moe && st.ep > 1) {
          // EP ranks: the same stage in `ep` consecutive pipelines (Megatron-Core), or this stage's groups.
          const int experts = model.moe->experts;
          cc.ep = st.ep;
          if (st.ep_scope == EpScope::Pipelines || static_cast<int>(st.groups.size()) == st.ep) {
            cc.ep_rank = st.ep_scope == EpScope::Pipelines ? static_cast<int>(p) % st.ep : static_cast<int>(g);
            cc.local_experts = st.experts.empty() ? static_cast<double>(experts) / st.ep : st.experts[cc.ep_rank];
          } else {
            // EP inside the stage's GPUs beyond its groups: each GPU holds experts/ep at TP-equivalent tp·ep/N.
            int n_gpus = 0;
            for (const TpGroup& tg : st.groups) n_gpus += static_cast<int>(tg.gpus.size());
            cc.ep_rank = static_cast<int>(g);  // GPU k of group g holds the same experts in every pipeline
            cc.local_experts = static_cast<double>(experts) * w.tp / n_gpus;
          }
        }
        const GpuSpec& gpu = cluster.gpu_spec(w.gpus.front());
        const auto key = std::make_tuple(&gpu, cluster.nodes[cluster.node_of(w.gpus.front())].group, w.tp, w.tp_closed_form,
                                         cc.samples, cc.layer_begin, cc.layer_end, cc.has_embedding, cc.has_head, cc.ep,
                                         cc.local_experts, st.experts);
        auto it = priced.find(key);
        if (it == priced.end()) {
          ChunkCost fresh = cc;
          const double flops = price_chunk(fresh, w, st);
          it = priced.emplace(key, std::make_pair(std::move(fresh), flops)).first;
        }
        const ChunkCost& done = it->second.first;
        cc.forward = done.forward;
        cc.backward = done.backward;
        cc.layer_grad_ready_s = done.layer_grad_ready_s;
        cc.head_grad_ready_s = done.head_grad_ready_s;
        cc.embedding_grad_ready_s = done.embedding_grad_ready_s;
        cc.params_per_rank = done.params_per_rank;
        cc.moe_layers = done.moe_layers;
        cc.forward_segments_s = done.forward_segments_s;
        cc.backward_segments_s = done.backward_segments_s;
        cc.ep_experts = done.ep_experts;
        sw.model_flops += it->second.second * w.tp * pl.micro_batches;

        // Transfers to the groups of the neighbouring stages whose sample intervals overlap.
        const auto [lo, hi] = share_interval(st, static_cast<int>(g));
        for (int dir = 0; dir < 2; ++dir) {
          const int nj = dir == 0 ? j + 1 : j - 1;
          if (nj < 0 || nj >= nst) continue;
          const Stage& ns = pl.stages[nj];
          for (size_t h = 0; h < ns.groups.size(); ++h) {
            const auto [nlo, nhi] = share_interval(ns, static_cast<int>(h));
            const double overlap = std::min(hi, nhi) - std::max(lo, nlo);
            if (overlap <= 1e-12) continue;
            const int pw = sw.worker_of[p][nj][h];
            cc.sends[dir].push_back(make_link(w, sw.workers[pw], pw, nj / depth,
                                              p2p_bytes(model, overlap * pl.micro_batch), topo));
            cc.sends[dir].back().latency_s += gpu.compute.collective_overhead_s;
          }
        }
        w.chunks.push_back(std::move(cc));
      }
    }
  }
  // Expert-parallel groups: the same stage (and group) of `ep` consecutive pipelines, or a stage's groups.
  {
    std::map<std::tuple<int, int, int>, int> group_ids;
    for (size_t p = 0; p < plan.pipelines.size(); ++p)
      for (size_t j = 0; j < plan.pipelines[p].stages.size(); ++j) {
        const Stage& st = plan.pipelines[p].stages[j];
        for (size_t g = 0; g < st.groups.size(); ++g) {
          const int wid = sw.worker_of[p][j][g];
          ChunkCost& cc = sw.workers[wid].chunks[j / sw.physical_depth[p]];
          if (cc.moe_layers.empty()) continue;
          const bool across = st.ep_scope == EpScope::Pipelines;
          const int p0 = across ? static_cast<int>(p) - static_cast<int>(p) % st.ep : static_cast<int>(p);
          const auto key = std::make_tuple(p0, static_cast<int>(j), across ? static_cast<int>(g) : -1);
          const auto [it, fresh] = group_ids.emplace(key, static_cast<int>(group_ids.size()));
          cc.ep_group = it->second;
          const bool by_groups = across || static_cast<int>(st.groups.size()) == st.ep;
          if (by_groups) {
            for (int k = 0; k < st.ep; ++k)
              cc.ep_peers.push_back(across ? sw.worker_of[p0 + k][j][g] : sw.worker_of[p][j][k]);
          } else {
            // EP ranks are sets of the stage's GPUs (in group order), N/ep GPUs each sharing their experts
            // tensor-parallel; every group of the stage meets at the all-to-alls.
            for (size_t k = 0; k < st.groups.size(); ++k) cc.ep_peers.push_back(sw.worker_of[p][j][k]);
            for (const TpGroup& tg : st.groups) cc.ep_members.insert(cc.ep_members.end(), tg.gpus.begin(), tg.gpus.end());
            cc.ep_etp = static_cast<int>(cc.ep_members.size()) / st.ep;
          }
        }
      }
  }

  // Receives: a chunk's forward waits for one transfer from each overlapping group of the previous stage.
  for (Worker& w : sw.workers)
    for (ChunkCost& cc : w.chunks) cc.receives = {0, 0};
  for (Worker& w : sw.workers)
    for (ChunkCost& cc : w.chunks)
      for (int dir = 0; dir < 2; ++dir)
        for (const StageLink& l : cc.sends[dir]) ++sw.workers[l.peer_worker].chunks[l.peer_chunk].receives[dir];

  // Memory and optimizer per worker.
  for (Worker& w : sw.workers) {
    const Pipeline& pl = plan.pipelines[w.pipeline];
    const int depth = sw.physical_depth[w.pipeline];
    w.dp_degree = holders[w.chunks.front().layer_begin];
    const double in_flight = activations_in_flight(plan.schedule, depth, w.rank, chunks, pl.micro_batches);
    double params = 0;
    for (const ChunkCost& cc : w.chunks) {
      StageMemoryInput in;
      in.layer_begin = cc.layer_begin;
      in.layer_end = cc.layer_end;
      in.has_embedding = cc.has_embedding;
      in.has_head = cc.has_head;
      in.shard = {w.tp, plan.sequence_parallel, cc.samples};
      in.recompute = plan.recompute;
      in.zero1 = plan.zero1;
      in.dp = w.dp_degree;
      in.in_flight = in_flight / static_cast<double>(w.chunks.size());
      in.local_experts = cc.local_experts;
      in.ep = cc.ep;
      const MemoryBreakdown mb = stage_memory(model, in);
      w.memory.weights += mb.weights;
      w.memory.gradients += mb.gradients;
      w.memory.optimizer += mb.optimizer;
      w.memory.activations += mb.activations;
      // Framework overhead is per GPU, not per chunk.
      w.memory.other = std::max(w.memory.other, mb.other);
      params += cc.params_per_rank;
    }
    const double opt_params = plan.zero1 ? params / w.dp_degree : params;
    w.optimizer_s = optimizer_step_s(opt_params, cluster.gpu_spec(w.gpus.front()), model);
  }
  return sw;
}

}  // namespace arachne
