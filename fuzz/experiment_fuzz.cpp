// Experiment files as `arachne experiment FILE --list` reads them: load_experiment (which loads every
// cluster, model, trace and planner name the file gives; relative paths from the file's directory or the
// repository) and the expansion into cells.
#include "fuzz/fuzz_input.h"
#include "planner/experiment/experiment.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace arachne;
  const std::string path = fuzz::write_input("experiment.yaml", data, size);
  fuzz::as_cli([](const std::string& p, void*) {
    const planner::Experiment x = planner::load_experiment(p, fuzz::catalog());
    (void)planner::expand(x);
  }, path);
  return 0;
}
