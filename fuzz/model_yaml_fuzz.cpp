// Model YAML files as `--model FILE` reads them, then what `simulate --cluster A100-80:1x8 --model FILE
// --tp 1 --pp 1 --dp 1 --micro-batch 1` does before simulating: the shorthand plan and its validation.
#include "fuzz/fuzz_input.h"
#include "sim/hw/cluster.h"
#include "sim/model/model.h"
#include "sim/plan/plan_yaml.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace arachne;
  static const Cluster cluster = load_cluster("A100-80:1x8", fuzz::catalog());
  const std::string path = fuzz::write_input("model.yaml", data, size);
  fuzz::as_cli([](const std::string& p, void*) {
    const ModelConfig model = load_model(p);
    Shorthand sh;  // --tp 1 --pp 1 --dp 1 --micro-batch 1
    const Plan plan = plan_from_shorthand(sh, cluster, model);
    validate_plan(plan, cluster, model, std::nullopt, "--tp/--pp/--dp");
  }, path);
  return 0;
}
