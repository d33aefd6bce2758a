// Sailor's GPU-count CSV traces (`--trace-format sailor-csv`).
#include "fuzz/trace_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  arachne::fuzz::load_trace_as_cli(arachne::fuzz::write_input("sailor.csv", data, size), "sailor-csv");
  return 0;
}
