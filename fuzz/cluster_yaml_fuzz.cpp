// Cluster YAML files as `--cluster FILE` reads them (simulate, plan, replay): load_cluster, then the
// topology that every command builds from the cluster before its work.
#include "fuzz/fuzz_input.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace arachne;
  const std::string path = fuzz::write_input("cluster.yaml", data, size);
  fuzz::as_cli([](const std::string& p, void*) {
    const Cluster c = load_cluster(p, fuzz::catalog());
    const Topology topo(c);
  }, path);
  return 0;
}
