// The out-of-line half of the shared field readers (json_fields.h): the error builders, which
// format the JSON path and quote the offending value in the wording of src/common/json_errors.h,
// Skip, which walks and checks a value the readers do not keep, and RawSince, which cuts the raw
// text of an object just walked.

#include "json_fields.h"

#include <simdjson.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "toposched/common/status.h"

namespace toposched::extender::wire_internal {

Status Fail(const Path& p, std::string_view what) {
  return Error(p.ToString() + ": " + std::string(what));
}

Status Malformed(const Path& p, simdjson::error_code e) {
  return Fail(p, "malformed JSON (" + std::string(simdjson::error_message(e)) + ")");
}

Status Missing(const Path& p) {
  return Fail(p, "missing");
}

// "<path>: expected <what>, got <value>", the wording of src/common/json_errors.h: scalars as
// their JSON text (cut), containers by kind. `token` is simdjson's raw token for the value.
Status Expected(const Path& p, std::string_view what, std::string_view token) {
  token = TrimRight(token);
  std::string got;
  if (token.empty()) {
    got = "nothing";
  } else if (token.front() == '{') {
    got = "an object";
  } else if (token.front() == '[') {
    got = "an array";
  } else {
    got = std::string(token.substr(0, kMaxQuotedLength));
    if (token.size() > kMaxQuotedLength) got += "...";
  }
  return Fail(p, "expected " + std::string(what) + ", got " + got);
}

// Walks any value without keeping it, checking it is well-formed JSON.
Status Skip(const Ctx& c, od::value& v, const Path& p, int depth) {
  const std::string_view token = v.raw_json_token();
  if (token.empty()) return Fail(p, "malformed JSON (no value)");
  switch (token.front()) {
    case '{':
      return ForEachField(c, v, p, depth, nullptr, [&](std::string_view, od::field& f, const Path& fp) {
        return Skip(c, f.value(), fp, depth + 1);
      });
    case '[':
      return ForEachElement(v, p, depth, nullptr, [&](od::value& e, const Path& ep, std::size_t) {
        return Skip(c, e, ep, depth + 1);
      });
    case '"': {
      std::size_t length = 0;
      bool escaped = false;
      if (!ScanString(token.data() + 1, c.BodyEnd(), &length, &escaped))
        return Fail(p, "malformed JSON (bad string escape)");
      if (TrimRight(token).size() != length + 2) return Fail(p, "malformed JSON (content after a string)");
      return Status::Ok();
    }
    case 't':
      return CheckLiteral(token, "true", p);
    case 'f':
      return CheckLiteral(token, "false", p);
    case 'n':
      return CheckLiteral(token, "null", p);
    default:
      if (!IsJsonNumber(TrimRight(token)))
        return Fail(p, "malformed JSON (unexpected " +
                           std::string(TrimRight(token).substr(0, kMaxQuotedLength)) + ")");
      return Status::Ok();
  }
}

// The JSON text of the object value `v` just walked, which started at `start`: from its '{' to the
// next token, less the whitespace before that token.
Status RawSince(od::value& v, const Path& p, const char* start, std::string_view* raw) {
  const char* end = nullptr;
  if (auto e = v.current_location().get(end)) return Malformed(p, e);
  *raw = TrimRight(std::string_view(start, static_cast<std::size_t>(end - start)));
  return Status::Ok();
}

}  // namespace toposched::extender::wire_internal
