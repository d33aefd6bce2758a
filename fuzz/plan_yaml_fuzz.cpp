// Plan YAML files as `simulate --cluster configs/clusters/hetero-a100-v100.yaml --model gpt3-1.3b --plan
// FILE` reads them: parse_plan_yaml against the cluster, then validate_plan (every structural check).
#include "fuzz/fuzz_input.h"
#include "sim/hw/cluster.h"
#include "sim/model/model.h"
#include "sim/plan/plan_yaml.h"

namespace {
const arachne::Cluster& cluster() {
  static const arachne::Cluster c =
      arachne::load_cluster(std::string(ARACHNE_SOURCE_DIR) + "/configs/clusters/hetero-a100-v100.yaml", arachne::fuzz::catalog());
  return c;
}
const arachne::ModelConfig& model() {
  static const arachne::ModelConfig m = arachne::load_model("gpt3-1.3b");
  return m;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace arachne;
  const std::string path = fuzz::write_input("plan.yaml", data, size);
  fuzz::as_cli([](const std::string& p, void*) {
    const Plan plan = parse_plan_yaml(p, cluster());
    validate_plan(plan, cluster(), model(), std::nullopt, p);
  }, path);
  return 0;
}
