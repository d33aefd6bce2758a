// Reading JSON input files (traces) with `file:line` errors: a syntax error, a number beyond the range of
// a double, or an unreadable file becomes InputError (exit 2), never a JSON library exception.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace arachne {

// The parsed document of `path`; `what` names the file in errors ("SkyPilot trace").
nlohmann::json read_json_file(const std::string& path, const std::string& what);

}  // namespace arachne
