// SkyPilot spot traces (`--trace-format skypilot`): JSON under a file name whose `_<type>_<count>` suffix
// gives the instance (as the bundled fixture's).
#include "fuzz/trace_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  arachne::fuzz::load_trace_as_cli(arachne::fuzz::write_input("fuzz_v100_4.json", data, size), "skypilot");
  return 0;
}
