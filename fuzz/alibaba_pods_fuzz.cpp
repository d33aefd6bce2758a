// Alibaba GPU traces (`--trace-format alibaba-gpu-v2023`): the fuzzed pod list, with the fixture's node
// list beside it (alibaba_nodes_fuzz fuzzes that one).
#include "fuzz/trace_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool fixture = (arachne::fuzz::copy_fixture("traces/alibaba-fixture/openb_node_list_gpu_node.csv",
                                                           "openb_node_list_gpu_node.csv"), true);
  (void)fixture;
  arachne::fuzz::load_trace_as_cli(arachne::fuzz::write_input("openb_pod_list_default.csv", data, size),
                                   "alibaba-gpu-v2023");
  return 0;
}
