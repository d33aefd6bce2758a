// Alibaba GPU traces (`--trace-format alibaba-gpu-v2023`): the fuzzed node list found beside the
// fixture's pod list.
#include "fuzz/trace_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool fixture = (arachne::fuzz::copy_fixture("traces/alibaba-fixture/openb_pod_list_default.csv",
                                                           "openb_pod_list_default.csv"), true);
  (void)fixture;
  arachne::fuzz::write_input("openb_node_list_gpu_node.csv", data, size);
  arachne::fuzz::load_trace_as_cli(arachne::fuzz::scratch_dir() + "/openb_pod_list_default.csv", "alibaba-gpu-v2023");
  return 0;
}
