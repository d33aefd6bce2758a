#include "planner/common/work_group.h"

#include "sim/io/input_error.h"

namespace arachne::planner {
namespace {

class SingleProcess final : public WorkGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> all_gather(const std::string& mine) override { return {mine}; }
  std::vector<std::string> gather(const std::string& mine) override { return {mine}; }
  void send(int, const std::string&) override { throw std::logic_error("a single process sends no messages"); }
  std::string receive(int) override { throw std::logic_error("a single process receives no messages"); }
  int poll() override { throw std::logic_error("a single process receives no messages"); }
  [[noreturn]] void fail(std::exception_ptr error) override { std::rethrow_exception(error); }
};

}  // namespace

WorkGroup& single_process() {
  static SingleProcess group;
  return group;
}

int exit_code_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const FailedElsewhere& e) {
    return e.exit_code;
  } catch (const InputError&) {
    return 2;
  } catch (...) {
    return 1;
  }
}

void agree(WorkGroup& group, const std::exception_ptr& error) {
  const std::vector<std::string> codes = group.all_gather(std::to_string(error ? exit_code_of(error) : 0));
  for (std::size_t r = 0; r < codes.size(); ++r) {
    if (codes[r] == "0") continue;
    group.failed_together_ = true;
    if (static_cast<int>(r) == group.rank()) std::rethrow_exception(error);
    throw FailedElsewhere(static_cast<int>(r), std::stoi(codes[r]));
  }
}

}  // namespace arachne::planner
