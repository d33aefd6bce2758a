#include "sim/io/csv_fields.h"

#include <sstream>

namespace arachne::csv {

std::string trim(const std::string& s, const char* chars) {
  const auto b = s.find_first_not_of(chars);
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(chars);
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split_row(const std::string& line, const char* chars) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) out.push_back(trim(cell, chars));
  if (line.empty() || line.back() == ',') out.emplace_back();
  return out;
}

}  // namespace arachne::csv
