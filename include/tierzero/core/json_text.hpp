// Parsing JSON text from a user's file with errors that point into it: the file, the line and
// column, and what was wrong (bad syntax, or a number that overflows a double such as 1e400,
// which nlohmann reports as out_of_range.406 with no position). Every JSON input (configs,
// profiles, safetensors headers) goes through here, so none escapes as a bare nlohmann error.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace tierzero {

// Throws Error "<source> is not valid JSON at line L, column C: <problem>" with `hint`.
// `allow_comments`: // and /* */ comments are skipped (configs allow them). Objects and arrays
// nested deeper than `max_depth` are an Error too.
nlohmann::json parse_json_text(const std::string& text, const std::string& source,
                               const std::string& hint, bool allow_comments = false,
                               size_t max_depth = 64);

}  // namespace tierzero
