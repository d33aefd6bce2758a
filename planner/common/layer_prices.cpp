#include "planner/common/layer_prices.h"

#include "sim/model/compute_time.h"
#include "sim/model/layer_costs.h"
#include "sim/model/moe_costs.h"

namespace arachne::planner {

LayerPrices price_layers(const Cluster& cluster, const ModelConfig& m, int node_group, int tp, double samples,
                         Recompute rc, bool sequence_parallel) {
  Worker w;
  for (const Node& n : cluster.nodes)
    if (n.group == node_group) {
      w.gpus = {n.first_gpu};
      break;
    }
  w.tp = tp;
  w.tp_closed_form = true;
  const GpuSpec& gpu = cluster.gpu_spec(w.gpus.front());
  const ShardSpec sh{tp, sequence_parallel, samples};
  auto price = [&](const std::vector<OpCost>& ops, const std::vector<TpCollectives>& calls) {
    return price_pass(ops, calls, w, cluster, m);
  };
  auto time = [&](const std::vector<OpCost>& ops) { return ops_time_s(ops, gpu, m.dtype); };
  LayerPrices p;
  // A layer's ops and collectives depend on its index only through is_moe_layer (sim/model/layer_costs.h),
  // so each kind is priced once, at its first layer, and copied to the others.
  int first_of_kind[2] = {-1, -1};
  for (int l = 0; l < m.layers; ++l) {
    int& first = first_of_kind[m.is_moe_layer(l) ? 1 : 0];
    if (first >= 0) {
      p.forward.push_back(p.forward[first]);
      p.backward.push_back(p.backward[first]);
      if (m.moe) p.forward_dense_s.push_back(p.forward_dense_s[first]), p.backward_dense_s.push_back(p.backward_dense_s[first]);
      continue;
    }
    first = l;
    const TpCollectives tc = layer_tp_collectives(m, sh);
    std::vector<TpCollectives> bcalls;
    if (rc == Recompute::Full) bcalls.push_back(tc);
    const std::vector<TpCollectives> bc = layer_tp_backward_collectives(m, l, sh);
    bcalls.insert(bcalls.end(), bc.begin(), bc.end());
    std::vector<OpCost> bops = layer_recompute_ops(m, l, sh, rc);
    const std::vector<OpCost> b = layer_backward_ops(m, l, sh);
    bops.insert(bops.end(), b.begin(), b.end());
    p.forward.push_back(price(layer_forward_ops(m, l, sh), {tc}));
    p.backward.push_back(price(bops, bcalls));
    if (!m.moe) continue;
    const std::vector<OpCost> d = m.is_moe_layer(l) ? moe_dense_forward_ops(m, l, sh) : layer_forward_ops(m, l, sh);
    std::vector<OpCost> rec;
    if (rc == Recompute::Full) rec = d;
    if (rc == Recompute::Selective) rec = layer_recompute_ops(m, l, sh, Recompute::Selective);
    p.forward_dense_s.push_back(time(d));
    p.backward_dense_s.push_back(time(rec) + time(backward_of(d)));
  }
  p.embedding_forward = price(embedding_forward_ops(m, sh), embedding_tp_collectives(m, sh, true));
  p.embedding_backward = price(embedding_backward_ops(m, sh), {});
  p.head_forward = price(head_forward_ops(m, sh), head_tp_collectives(m, sh, true));
  p.head_backward = price(head_backward_ops(m, sh), head_tp_collectives(m, sh, false));
  return p;
}

}  // namespace arachne::planner
