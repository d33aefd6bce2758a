// What every fuzz target shares (scripts/fuzz.sh builds and runs them; CMake option ARACHNE_FUZZ).
// The CLI reads its inputs from files by path, so a target writes the fuzzed bytes to a file in a private
// directory and calls the same loader the CLI calls on it. The CLI's error contract is modelled as in
// cli/main.cpp: an InputError is bad input (exit 2) and must say where; any other exception would print
// `error: internal` (exit 1), which an input must never cause - so it aborts, and libFuzzer records the
// input as a finding. Crashes, sanitizer reports, timeouts and out-of-memory are findings by themselves.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "sim/hw/gpu.h"

namespace arachne::fuzz {

// A directory of this process's own under $TMPDIR (removed at exit), with `fixtures` copied into it.
const std::string& scratch_dir();
// Copies a repository file (path relative to the source root) into the scratch directory as `name`.
void copy_fixture(const std::string& repo_path, const std::string& name);
// Writes the fuzzed bytes to scratch_dir()/name and returns the path.
std::string write_input(const std::string& name, const std::uint8_t* data, std::size_t size);
// The bundled GPU catalog, loaded once (every command loads it before reading its inputs).
const GpuCatalog& catalog();

// Runs `load` as the CLI's main() runs a command: returns normally after success or an InputError that
// names where; aborts with the text on an InputError with an empty `where` or any other exception.
void as_cli(void (*load)(const std::string& path, void* context), const std::string& path, void* context = nullptr);

}  // namespace arachne::fuzz
