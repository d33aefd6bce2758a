// Cluster spec strings as `--cluster TYPE:NODESxGPUS[,...]` reads them: load_cluster on the text itself
// (which also tries it as a file and a bundled name, as the CLI does), then the topology.
#include "fuzz/fuzz_input.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace arachne;
  // A command-line word: no NUL byte can reach the CLI inside one.
  const std::string spec(reinterpret_cast<const char*>(data), size);
  if (spec.find('\0') != std::string::npos) return 0;
  fuzz::as_cli([](const std::string& s, void*) {
    const Cluster c = load_cluster(s, fuzz::catalog());
    const Topology topo(c);
  }, spec);
  return 0;
}
