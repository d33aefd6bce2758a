// One trace format as `replay`/`trace stats`/`trace convert --trace FILE --trace-format F` read it:
// load_trace, then the statistics and the native CSV that `trace stats` and `trace convert` derive.
#pragma once
#include "fuzz/fuzz_input.h"
#include "sim/trace/availability.h"
#include "sim/trace/trace_formats.h"

namespace arachne::fuzz {

inline void load_trace_as_cli(const std::string& path, const std::string& format) {
  as_cli([](const std::string& p, void* f) {
    TraceLoadOptions opt;
    opt.format = *static_cast<const std::string*>(f);
    const LoadedTrace t = load_trace(p, opt, catalog());
    (void)trace_stats(t.trace);
    (void)to_native_csv(t.trace);
  }, path, const_cast<std::string*>(&format));
}

}  // namespace arachne::fuzz
