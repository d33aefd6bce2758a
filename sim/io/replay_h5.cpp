#include "sim/io/replay_h5.h"

#include <cstdint>
#include <vector>

namespace arachne {

void write_replay_tables(h5::File& f, const std::string& group, const ReplayResult& r) {
  using h5::ColumnType;
  f.ensure_groups(group);
  h5::Table iv(f, group + "/intervals",
               {{"start_s", ColumnType::Float64, "s"}, {"end_s", ColumnType::Float64, "s"},
                {"gpus_available", ColumnType::Int64, "1"}, {"gpus_used", ColumnType::Int64, "1"},
                {"plan", ColumnType::String, "-"}, {"tokens_per_s", ColumnType::Float64, "1/s"},
                {"tokens", ColumnType::Float64, "tokens"}, {"planning_s", ColumnType::Float64, "s"},
                {"reconfig_s", ColumnType::Float64, "s"}, {"checkpoint_s", ColumnType::Float64, "s"},
                {"idle_s", ColumnType::Float64, "s"}, {"work_lost_s", ColumnType::Float64, "s"}});
  std::vector<h5::Row> rows;
  for (const ReplayInterval& x : r.intervals) {
    std::int64_t avail = 0;
    for (const auto& [type, n] : x.gpus_per_type) avail += n;
    rows.push_back({x.start_s, x.end_s, avail, static_cast<std::int64_t>(x.gpus_used), x.plan_summary, x.tokens_per_s,
                    x.tokens, x.planning_s, x.reconfig_s, x.checkpoint_s, x.idle_s, x.work_lost_s});
  }
  iv.append(rows);
  const ReplayTotals& t = r.totals;
  h5::Table tot(f, group + "/totals",
                {{"tokens_trained", ColumnType::Float64, "tokens"},
                 {"effective_tokens_per_s", ColumnType::Float64, "1/s"},
                 {"planning_s", ColumnType::Float64, "s"}, {"reconfig_s", ColumnType::Float64, "s"},
                 {"checkpoint_s", ColumnType::Float64, "s"}, {"idle_s", ColumnType::Float64, "s"},
                 {"work_lost_s", ColumnType::Float64, "s"}, {"replans", ColumnType::Int64, "1"}});
  tot.append({{t.tokens_trained, t.effective_tokens_per_s, t.planning_s, t.reconfig_s, t.checkpoint_s, t.idle_s,
               t.work_lost_s, static_cast<std::int64_t>(t.replans)}});
}

}  // namespace arachne
