// Sailor's JSON traces (`--trace-format sailor-json`).
#include "fuzz/trace_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  arachne::fuzz::load_trace_as_cli(arachne::fuzz::write_input("sailor.json", data, size), "sailor-json");
  return 0;
}
