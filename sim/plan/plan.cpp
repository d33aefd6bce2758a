// Plan value types: names of the enumerations and batch/GPU arithmetic (DESIGN.md "Plan").
#include "sim/plan/plan.h"

#include <set>
#include <stdexcept>

namespace arachne {

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::OneFOneB: return "1f1b";
    case Schedule::GPipe: return "gpipe";
    case Schedule::Interleaved: return "interleaved";
  }
  return "?";
}

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "?";
}

const char* to_string(EpScope s) {
  switch (s) {
    case EpScope::Pipelines: return "pipelines";
    case EpScope::Stage: return "stage";
  }
  return "?";
}

Schedule parse_schedule(const std::string& text) {
  for (const Schedule s : {Schedule::OneFOneB, Schedule::GPipe, Schedule::Interleaved})
    if (text == to_string(s)) return s;
  throw std::invalid_argument("unknown schedule '" + text + "' (expected one of: 1f1b, gpipe, interleaved)");
}

Recompute parse_recompute(const std::string& text) {
  for (const Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
    if (text == to_string(r)) return r;
  throw std::invalid_argument("unknown recompute policy '" + text + "' (expected one of: none, selective, full)");
}

EpScope parse_ep_scope(const std::string& text) {
  for (const EpScope s : {EpScope::Pipelines, EpScope::Stage})
    if (text == to_string(s)) return s;
  throw std::invalid_argument("unknown ep_scope '" + text + "' (expected one of: pipelines, stage)");
}

long Plan::global_batch() const {
  long total = 0;
  for (const Pipeline& p : pipelines) total += p.samples();
  return total;
}

int Plan::num_gpus() const {
  std::set<GpuId> used;
  for (const Pipeline& p : pipelines)
    for (const Stage& s : p.stages)
      for (const TpGroup& g : s.groups) used.insert(g.gpus.begin(), g.gpus.end());
  return static_cast<int>(used.size());
}

int Plan::physical_stages(int pipeline) const {
  const int n = static_cast<int>(pipelines.at(pipeline).stages.size());
  if (schedule == Schedule::Interleaved && interleave > 1) return n / interleave;
  return n;
}

namespace {

// Appends the bytes of a trivially copyable value.
template <class T>
void put(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}
// Appends a vector's size, then the bytes of its elements.
template <class T>
void put_all(std::string& key, const std::vector<T>& v) {
  put(key, v.size());
  key.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

std::string execution_key(const Plan& plan) {
  size_t bytes = 64;  // at least what the fields below take: one allocation of the key
  for (const Pipeline& p : plan.pipelines) {
    bytes += 32;
    for (const Stage& s : p.stages) {
      bytes += 48 + s.experts.size() * sizeof(int);
      for (const TpGroup& g : s.groups) bytes += 24 + g.gpus.size() * sizeof(GpuId);
    }
  }
  std::string key;
  key.reserve(bytes);
  put(key, plan.schedule);
  put(key, plan.interleave);
  put(key, plan.recompute);
  put(key, plan.sequence_parallel);
  put(key, plan.zero1);
  put(key, plan.overlap_grad_reduce);
  put(key, plan.pipelines.size());
  for (const Pipeline& p : plan.pipelines) {
    put(key, p.micro_batch);
    put(key, p.micro_batches);
    put(key, p.stages.size());
    for (const Stage& s : p.stages) {
      put(key, s.layer_begin);
      put(key, s.layer_end);
      put(key, s.ep);
      put(key, s.ep_scope);
      put_all(key, s.experts);
      put(key, s.groups.size());
      for (const TpGroup& g : s.groups) {
        put(key, g.tp);
        put(key, g.share);
        put_all(key, g.gpus);
      }
    }
  }
  return key;
}

}  // namespace arachne
