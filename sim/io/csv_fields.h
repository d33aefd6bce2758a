// Splitting and trimming the cells of simple CSV lines (no quoting), shared by the CSV readers
// (traces, measurements).
#pragma once
#include <string>
#include <vector>

namespace arachne::csv {

inline constexpr const char* kSpace = " \t\r\n";

// `s` without leading and trailing characters from `chars`.
std::string trim(const std::string& s, const char* chars = kSpace);
// The cells of one line split at commas, each trimmed of `chars`; a trailing comma, or an empty line,
// gives a final empty cell.
std::vector<std::string> split_row(const std::string& line, const char* chars = kSpace);

}  // namespace arachne::csv
