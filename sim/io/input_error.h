// Typed error for bad user input (exit code 2). The core assumes valid input;
// parsers and validators throw InputError with the place the problem was found.
#pragma once
#include <stdexcept>
#include <string>

namespace arachne {

class InputError : public std::runtime_error {
 public:
  // where: "file:line: field" for files (line 1-based), "--flag" for flags, the spec string for specs.
  InputError(std::string where, std::string what)
      : std::runtime_error(where + ": " + what), where_(std::move(where)), what_(std::move(what)) {}
  const std::string& where() const { return where_; }
  const std::string& reason() const { return what_; }

 private:
  std::string where_;
  std::string what_;
};

// "file:line: field" with a 1-based line (yaml-cpp marks are 0-based; pass mark.line directly).
inline std::string file_where(const std::string& file, int zero_based_line, const std::string& field) {
  std::string w = file;
  if (zero_based_line >= 0) w += ":" + std::to_string(zero_based_line + 1);
  if (!field.empty()) w += ": " + field;
  return w;
}

}  // namespace arachne
