#include "sim/io/json_file.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "sim/io/input_error.h"

namespace arachne {
namespace {

// nlohmann's DOM builder, keeping the byte offset and token of the first error instead of throwing (the
// library's own exception carries no position for an overflowing number).
struct PositionedDomParser : nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
  using json_sax_dom_parser::json_sax_dom_parser;
  std::size_t error_byte = 0;
  std::string error_token;
  bool number_overflow = false;

  template <class Exception>
  bool parse_error(std::size_t byte, const std::string& token, const Exception& e) {
    error_byte = byte;
    error_token = token;
    number_overflow = e.id == 406;  // out_of_range.406: number overflow
    return false;
  }
};

std::string shortened(const std::string& s) { return s.size() <= 40 ? s : s.substr(0, 40) + "..."; }

}  // namespace

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot open " + what);
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  nlohmann::json doc;
  PositionedDomParser sax(doc, false);
  if (nlohmann::json::sax_parse(text, &sax)) return doc;
  const std::size_t end = std::min(sax.error_byte, text.size());
  const int zero_based_line = static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(end), '\n'));
  const std::string where = file_where(path, zero_based_line, "");
  if (sax.number_overflow)
    throw InputError(where, "number '" + shortened(sax.error_token) + "' is beyond the range of a double");
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw InputError(where, "empty " + what);
  throw InputError(where, "not valid JSON near '" + shortened(sax.error_token) + "'");
}

}  // namespace arachne
