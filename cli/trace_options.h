// The flags that say which availability trace to read and how (--trace, --trace-format, --nodes,
// --load-scale, --window-start, --window-end, --seed): one definition for every command that reads a trace.
#pragma once
#include <string>

#include <boost/program_options/options_description.hpp>
#include <boost/program_options/variables_map.hpp>

#include "sim/hw/gpu.h"
#include "sim/trace/trace_formats.h"

namespace arachne::cli {

// Adds the trace flags to `opts` (values as text, read by trace_load_options).
void add_trace_options(boost::program_options::options_description& opts);
// How to read the trace, from the flags given; each value range-checked (throws InputError(flag, ...)).
TraceLoadOptions trace_load_options(const boost::program_options::variables_map& vm);
// The trace named by --trace (required: checked by the caller), read with trace_load_options(vm).
LoadedTrace load_trace_from(const boost::program_options::variables_map& vm, const GpuCatalog& catalog);

}  // namespace arachne::cli
