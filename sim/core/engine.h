// Discrete-event engine: a future-event set ordered by (time, insertion sequence). Equal times run in
// insertion order; cancellation is lazy (a cancelled event is skipped when popped). Integer nanoseconds.
// After ns-3's scheduler (ts, uid) order and OMNeT++'s cEventHeap; no ordering by pointer or hash.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace arachne {

using TimeNs = std::int64_t;
using EventId = std::uint64_t;

inline TimeNs seconds_to_ns(double s) { return static_cast<TimeNs>(s * 1e9 + 0.5); }
inline double ns_to_seconds(TimeNs t) { return static_cast<double>(t) * 1e-9; }

class Engine {
 public:
  using Action = std::function<void()>;

  EventId schedule_at(TimeNs t, Action a);       // t >= now()
  EventId schedule_after(TimeNs dt, Action a) { return schedule_at(now_ + dt, std::move(a)); }
  void cancel(EventId id);                       // no-op if already run or cancelled
  bool step();                                   // run the next live event; false when none left
  void run();                                    // until the future-event set is empty
  TimeNs now() const { return now_; }
  std::uint64_t executed() const { return executed_; }
  std::size_t pending() const { return live_; }

 private:
  struct Entry {
    TimeNs time;
    std::uint64_t seq;
    std::uint32_t slot;
  };
  static bool later(const Entry& a, const Entry& b) {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
  std::vector<Entry> heap_;
  std::vector<Action> actions_;          // by slot
  std::vector<std::uint64_t> slot_seq_;  // seq currently owning the slot (0 = free/cancelled)
  std::vector<std::uint32_t> free_slots_;
  TimeNs now_ = 0;
  std::uint64_t next_seq_ = 1;
  std::uint64_t executed_ = 0;
  std::size_t live_ = 0;
};

}  // namespace arachne
