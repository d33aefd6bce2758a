// A plan in one line for the bench tools (label_gaps, price_plans): per pipeline its micro-batch size x
// count and per stage its layers (and group shares where a stage has several groups); recompute and ZeRO-1.
#pragma once
#include <cstddef>
#include <sstream>
#include <string>

#include "sim/plan/plan.h"

namespace arachne {

inline std::string plan_brief(const Plan& p) {
  std::ostringstream s;
  s.precision(3);
  for (const Pipeline& pl : p.pipelines) {
    s << " [" << pl.micro_batch << "x" << pl.micro_batches << ":";
    for (const Stage& st : pl.stages) {
      s << " " << st.layer_begin << "-" << st.layer_end;
      if (st.groups.size() > 1) {
        s << "(";
        for (std::size_t g = 0; g < st.groups.size(); ++g) s << (g ? "/" : "") << st.groups[g].share;
        s << ")";
      }
    }
    s << "]";
  }
  s << " recompute " << to_string(p.recompute) << (p.zero1 ? ", zero1" : "");
  return s.str();
}

}  // namespace arachne
