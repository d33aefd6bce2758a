#include "sim/exec/pipeline_schedule.h"

#include <algorithm>

namespace arachne {

std::vector<ScheduledTask> rank_task_order(Schedule schedule, int pp, int rank, int chunks, int m) {
  std::vector<ScheduledTask> order;
  order.reserve(static_cast<size_t>(2 * m * chunks));
  if (schedule == Schedule::GPipe) {
    for (int c = 0; c < chunks; ++c)
      for (int i = 0; i < m; ++i) order.push_back({c, i, true});
    for (int c = chunks - 1; c >= 0; --c)
      for (int i = 0; i < m; ++i) order.push_back({c, i, false});
    return order;
  }
  if (schedule == Schedule::OneFOneB || chunks == 1) {
    const int warmup = std::min(pp - rank - 1, m);
    int f = 0, b = 0;
    for (; f < warmup; ++f) order.push_back({0, f, true});
    while (f < m) {
      order.push_back({0, f++, true});
      order.push_back({0, b++, false});
    }
    while (b < m) order.push_back({0, b++, false});
    return order;
  }
  // Interleaved: Megatron-LM forward_backward_pipelining_with_interleaving. Virtual micro-batch k maps to
  // chunk (k / pp) % v and micro-batch (k / (pp*v)) * pp + k % pp; backward chunks run in reverse.
  const int v = chunks;
  const int total = m * v;
  auto fwd_of = [&](int k) {
    const int group = k / (pp * v);
    const int in_group = k % (pp * v);
    return ScheduledTask{in_group / pp, group * pp + in_group % pp, true};
  };
  auto bwd_of = [&](int k) {
    ScheduledTask t = fwd_of(k);
    t.chunk = v - 1 - t.chunk;
    t.forward = false;
    return t;
  };
  const int warmup = std::min(total, (pp - rank - 1) * 2 + (v - 1) * pp);
  int f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back(fwd_of(f));
  while (f < total) {
    order.push_back(fwd_of(f++));
    order.push_back(bwd_of(b++));
  }
  while (b < total) order.push_back(bwd_of(b++));
  return order;
}

double activations_in_flight(Schedule schedule, int pp, int rank, int chunks, int m) {
  if (schedule == Schedule::GPipe) return static_cast<double>(m) * chunks;
  if (schedule == Schedule::OneFOneB || chunks == 1) return std::min(pp - rank, m);
  // Interleaved: warm-up chunk-forwards plus the one in progress (Megatron-LM; Narayanan et al. §2.2.1).
  return std::min(m * chunks, (pp - rank - 1) * 2 + (chunks - 1) * pp + 1);
}

}  // namespace arachne
