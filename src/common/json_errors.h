#pragma once
// Wording of JSON validation errors, shared by every decoder of untrusted JSON (topology codec,
// pod requests, workload files): "<path>: expected <what>, got <value>", with quoted values cut
// and containers named by kind, since messages end up in logs and HTTP responses. Internal
// header: include only from .cc files that already use nlohmann_json.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

#include "toposched/common/status.h"

namespace toposched::json_errors {

inline constexpr std::size_t kMaxQuotedLength = 60;

// A string as JSON, cut to kMaxQuotedLength characters ("..." marks a cut); invalid UTF-8 is
// replaced rather than thrown on.
inline std::string Quote(std::string_view s) {
  using nlohmann::json;
  std::string out = json(s.substr(0, kMaxQuotedLength)).dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMaxQuotedLength) out += "...";
  return out;
}

// A short rendering of a value: scalars as JSON, containers by kind (they can be large).
inline std::string Describe(const nlohmann::json& v) {
  using nlohmann::json;
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return Quote(v.get_ref<const std::string&>());
    case json::value_t::boolean:
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return v.dump();
    default:
      return "an unsupported value";
  }
}

inline Error Expected(const std::string& path, std::string_view what, const nlohmann::json& got) {
  return Error(path + ": expected " + std::string(what) + ", got " + Describe(got));
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the tag means nothing to
// a user.
inline std::string StripExceptionTag(const char* what) {
  std::string s = what;
  if (!s.empty() && s[0] == '[') {
    const std::size_t end = s.find("] ");
    if (end != std::string::npos) s.erase(0, end + 2);
  }
  return s;
}

// Maximum bracket nesting of `text` and an upper bound on its number of values (commas plus
// openings plus one), skipping strings. Exact for valid JSON; on invalid JSON exact up to the
// first error, which is as far as a parser builds values. Decoders of untrusted JSON check both
// before parsing, so that 16 MiB of "[]," cannot become ~400 MB of nested values and "[[[[..."
// cannot recurse deeply.
struct Shape {
  int max_depth = 0;
  std::size_t values = 1;
};

inline Shape ScanShape(std::string_view text) {
  Shape shape;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      shape.max_depth = std::max(shape.max_depth, ++depth);
      ++shape.values;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',') {
      ++shape.values;
    }
  }
  return shape;
}

}  // namespace toposched::json_errors
