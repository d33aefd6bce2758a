// Future-event set: a binary min-heap of (time, seq, slot) entries. The action lives in a slot that is
// reused after its entry is popped; cancellation clears the slot's owning seq (lazy: the heap entry is
// skipped when it surfaces). Ties on time are broken by the insertion counter, never by address
// (ns-3 scheduler.h (m_ts, m_uid); OMNeT++ cEventHeap's insertion counter).
#include "sim/core/engine.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace arachne {

namespace {
// EventId layout: low 40 bits the event's insertion sequence, high 24 bits its slot. Sequence 0 is never
// issued, so id 0 is never a valid event.
constexpr int kSeqBits = 40;
constexpr std::uint64_t kSeqMask = (std::uint64_t{1} << kSeqBits) - 1;
constexpr std::uint64_t kMaxSlots = std::uint64_t{1} << (64 - kSeqBits);
}  // namespace

EventId Engine::schedule_at(TimeNs t, Action a) {
  if (t < now_) {
    throw std::logic_error("Engine::schedule_at: time " + std::to_string(t) + " ns is before now (" +
                           std::to_string(now_) + " ns)");
  }
  std::uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    actions_[slot] = std::move(a);
  } else {
    if (actions_.size() >= kMaxSlots) throw std::length_error("Engine: too many pending events");
    slot = static_cast<std::uint32_t>(actions_.size());
    actions_.push_back(std::move(a));
    slot_seq_.push_back(0);
  }
  const std::uint64_t seq = next_seq_++;
  if (seq > kSeqMask) throw std::length_error("Engine: event sequence exhausted");
  slot_seq_[slot] = seq;
  heap_.push_back(Entry{t, seq, slot});
  std::push_heap(heap_.begin(), heap_.end(), [](const Entry& a, const Entry& b) { return later(a, b); });
  ++live_;
  return (static_cast<std::uint64_t>(slot) << kSeqBits) | seq;
}

void Engine::cancel(EventId id) {
  const std::uint64_t seq = id & kSeqMask;
  const std::uint64_t slot = id >> kSeqBits;
  if (seq == 0 || slot >= slot_seq_.size() || slot_seq_[slot] != seq) return;  // ran, cancelled or bogus
  slot_seq_[slot] = 0;
  actions_[slot] = nullptr;  // release captured state now; the heap entry is dropped when it surfaces
  --live_;
}

bool Engine::step() {
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), [](const Entry& a, const Entry& b) { return later(a, b); });
    const Entry e = heap_.back();
    heap_.pop_back();
    const bool live = slot_seq_[e.slot] == e.seq;
    Action action;
    if (live) action = std::move(actions_[e.slot]);
    actions_[e.slot] = nullptr;
    slot_seq_[e.slot] = 0;
    free_slots_.push_back(e.slot);
    if (!live) continue;
    --live_;
    now_ = e.time;
    ++executed_;
    action();  // may schedule or cancel further events
    return true;
  }
  return false;
}

void Engine::run() {
  while (step()) {
  }
}

}  // namespace arachne
