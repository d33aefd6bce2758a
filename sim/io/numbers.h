// Strict reading of numbers from text (YAML scalars, CSV cells, JSON values, command-line flags) with the
// supported range (sim/io/limits.h) checked where the value is read. Every reader of user input goes
// through these, so no value is silently truncated to int, and non-finite, overflowing, hexadecimal or
// space-padded numbers are bad input (InputError, exit 2) with the caller's `where` (file:line: field,
// --flag or the spec).
#pragma once
#include <string>
#include <string_view>

#include "sim/io/limits.h"

namespace arachne {

// A decimal integer (optional sign, digits only) within `range`.
long long read_integer(std::string_view text, limits::IntRange range, const std::string& where);
// The same narrowed to int; `range` must lie within int (every bound of limits.h does).
int read_int(std::string_view text, limits::IntRange range, const std::string& where);
// A finite decimal number ("12", "-0.5", "1e3"; no hex, inf or nan) within `range`.
double read_real(std::string_view text, limits::RealRange range, const std::string& where);
// A whole number that may be written as a real ("32", "32.0", "3.2e1"; pandas writes counts so) within range.
long long read_whole(std::string_view text, limits::IntRange range, const std::string& where);
// A seed: a decimal integer in [0, 2^64 - 1].
unsigned long long read_seed(std::string_view text, const std::string& where);
// A real already parsed elsewhere (JSON, computed): finite and within `range`.
double check_real(double value, limits::RealRange range, const std::string& where);
// An integer already parsed elsewhere within `range`.
long long check_integer(long long value, limits::IntRange range, const std::string& where);

// "[min, max]" or "(min, max]" as the error messages say it.
std::string range_text(limits::IntRange range);
std::string range_text(limits::RealRange range);

}  // namespace arachne
