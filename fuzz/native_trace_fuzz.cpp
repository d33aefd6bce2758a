// Native CSV traces (`time_s,node,gpu_type,gpus`), with the format detected from the first line as when
// no --trace-format is given: a mutated header reaches the other loaders too.
#include "fuzz/trace_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  arachne::fuzz::load_trace_as_cli(arachne::fuzz::write_input("trace.csv", data, size), "");
  return 0;
}
