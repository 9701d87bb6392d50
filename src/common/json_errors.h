#pragma once
// Wording of JSON validation errors, shared by every decoder of untrusted JSON (topology codec,
// pod requests, workload files): "<path>: expected <what>, got <value>", with quoted values cut
// and containers named by kind, since messages end up in logs and HTTP responses. Internal
// header: include only from .cc files that already use nlohmann_json.

#include <nlohmann/json.hpp>

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
  std::string out =
      json(s.substr(0, kMaxQuotedLength)).dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMaxQuotedLength) out += "...";
  return out;
}

// A short rendering of a value: scalars as JSON, containers by kind (they can be large).
inline std::string Describe(const nlohmann::json& v) {
  using nlohmann::json;
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return Quote(v.get_ref<const std::string&>());
    case json::value_t::boolean:
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return v.dump();
    default: return "an unsupported value";
  }
}

inline Error Expected(const std::string& path, std::string_view what, const nlohmann::json& got) {
  return Error(path + ": expected " + std::string(what) + ", got " + Describe(got));
}

}  // namespace toposched::json_errors
