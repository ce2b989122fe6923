// JSON parsing whose errors name the file, the line and the column.
#include "tierzero/core/json_text.hpp"

#include <set>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"

namespace tierzero {

namespace {

// nlohmann's DOM builder, but a parse error (syntax, or a number overflowing a double) is kept
// with the byte where it happened instead of thrown without one.
// Nesting beyond `max_depth` stops the parse before the value is built: a deep document would
// recurse through the stack in nlohmann's destructor.
class LocatingParser : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
 public:
  LocatingParser(nlohmann::json& out, size_t max_depth)
      : json_sax_dom_parser(out, false), max_depth_(max_depth) {}

  bool start_object(std::size_t n) {
    if (!deeper()) return false;
    keys_.emplace_back();
    names_.emplace_back();
    return json_sax_dom_parser::start_object(n);
  }
  bool start_array(std::size_t n) { return deeper() && json_sax_dom_parser::start_array(n); }
  bool end_object() {
    keys_.pop_back();
    names_.pop_back();
    return --depth_, json_sax_dom_parser::end_object();
  }
  // A key given twice in one object: nlohmann keeps the last silently, so a config's first value
  // would be dropped without a word. The parse stops there, naming the key and its object.
  bool key(std::string& name) {
    if (!keys_.back().insert(name).second) {
      duplicate = name;
      for (size_t i = 0; i + 1 < names_.size(); ++i)
        duplicate_in += (duplicate_in.empty() ? "" : ".") + names_[i];
      return false;
    }
    names_.back() = name;
    return json_sax_dom_parser::key(name);
  }
  bool end_array() { return --depth_, json_sax_dom_parser::end_array(); }

  template <class Exception>
  bool parse_error(std::size_t byte, const std::string& token, const Exception& e) {
    failed = true;
    error_byte = byte >= token.size() ? byte - token.size() : byte;
    message = e.what();
    return false;
  }

  bool failed = false;
  bool too_deep = false;
  std::string duplicate;     // a key given twice, if one was
  std::string duplicate_in;  // the dotted keys of its object ("" at the top)
  size_t error_byte = 0;
  std::string message;

 private:
  bool deeper() {
    if (++depth_ <= max_depth_) return true;
    too_deep = true;
    return false;
  }
  size_t max_depth_;
  size_t depth_ = 0;
  std::vector<std::set<std::string>> keys_;  // the keys seen in each open object
  std::vector<std::string> names_;           // each open object's current key
};

// "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..." ->
// "syntax error ...": the position is given separately.
std::string problem_of(std::string m) {
  if (m.rfind("[json.exception.", 0) == 0) {
    const size_t close = m.find("] ");
    if (close != std::string::npos) m = m.substr(close + 2);
  }
  if (m.rfind("parse error at line ", 0) == 0) {
    const size_t colon = m.find(": ");
    if (colon != std::string::npos) m = m.substr(colon + 2);
  }
  if (m.rfind("number overflow parsing", 0) == 0) m += " (a number beyond the range of a double)";
  return m;
}

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& source,
                               const std::string& hint, bool allow_comments, size_t max_depth) {
  nlohmann::json root;
  LocatingParser parser(root, max_depth);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text, &parser, nlohmann::json::input_format_t::json,
                                   /*strict=*/true, allow_comments);
  } catch (const nlohmann::json::exception& e) {
    TZ_THROW(source + " is not valid JSON: " + problem_of(e.what()), hint);
  }
  if (ok && !parser.failed) return root;
  TZ_CHECK(!parser.too_deep, source + " nests deeper than " + std::to_string(max_depth) + " levels",
           hint);
  TZ_CHECK(parser.duplicate.empty(),
           source + " gives the key '" + parser.duplicate + "' twice in " +
               (parser.duplicate_in.empty() ? std::string("its top-level object")
                                            : "the object '" + parser.duplicate_in + "'"),
           "keep one: a JSON reader would silently take the last");
  const size_t at = std::min(parser.error_byte, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < at; ++i)
    if (text[i] == '\n') ++line, line_start = i + 1;
  TZ_THROW(source + " is not valid JSON at line " + std::to_string(line) + ", column " +
               std::to_string(at - line_start + 1) + ": " +
               (parser.failed ? problem_of(parser.message) : std::string("it is incomplete")),
           hint);
}

}  // namespace tierzero
