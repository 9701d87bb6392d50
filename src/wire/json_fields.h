#pragma once
// The shared field readers of the wire readers (internal to src/wire): the JSON path kept for
// error messages (Path), the per-call scan state (Ctx), the scalar readers (string, number,
// integer, literal, key), the object and array walkers (ForEachField, ForEachElement) and Skip,
// which checks a value nobody reads is well-formed JSON. The per-verb and per-object readers in
// wire_reader.cc are built from these. The scalar readers run once per field of every body, so
// they stay inline here; the error builders and Skip are in json_fields.cc.

#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "toposched/common/status.h"

namespace toposched::extender::wire_internal {

namespace od = simdjson::ondemand;

// Deeper nesting is refused. Kubernetes objects nest about 15 levels, Volcano's session snapshot
// about 25 (Jobs > JobInfo > Tasks > TaskInfo > Pod > spec > affinity > ...); Skip recurses once
// per level, so this also bounds the stack a hostile body can take.
constexpr int kMaxNesting = 256;

// Error messages quote at most this much of a value (same cut as src/common/json_errors.h).
constexpr std::size_t kMaxQuotedLength = 60;

inline bool IsJsonSpace(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

inline std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && IsJsonSpace(s.back())) s.remove_suffix(1);
  return s;
}

// A JSON path, built on the stack as the readers descend and formatted only when an error needs
// it: ExtenderArgs.Nodes.items[3].metadata.name, ExtenderPreemptionArgs.NodeNameToVictims["n1"].
class Path {
 public:
  explicit Path(std::string_view root) : text_(root) {}
  Path Field(std::string_view key) const { return Path(this, Kind::kField, key, 0); }
  Path MapKey(std::string_view key) const { return Path(this, Kind::kMapKey, key, 0); }
  Path Index(std::size_t i) const { return Path(this, Kind::kIndex, {}, i); }

  std::string ToString() const {
    std::string out = parent_ == nullptr ? std::string(text_) : parent_->ToString();
    switch (kind_) {
      case Kind::kRoot:
        break;
      case Kind::kField:
        out.append(".").append(text_);
        break;
      case Kind::kMapKey:  // keys are raw JSON string contents, so already escaped for quoting
        out.append("[\"").append(text_.substr(0, kMaxQuotedLength));
        out.append(text_.size() > kMaxQuotedLength ? "...\"]" : "\"]");
        break;
      case Kind::kIndex:
        out.append("[").append(std::to_string(index_)).append("]");
        break;
    }
    return out;
  }

 private:
  enum class Kind { kRoot, kField, kMapKey, kIndex };
  Path(const Path* parent, Kind kind, std::string_view text, std::size_t index)
      : parent_(parent), kind_(kind), text_(text), index_(index) {}

  const Path* parent_ = nullptr;
  Kind kind_ = Kind::kRoot;
  std::string_view text_;
  std::size_t index_ = 0;
};

Status Fail(const Path& p, std::string_view what);
Status Malformed(const Path& p, simdjson::error_code e);
Status Missing(const Path& p);
// "<path>: expected <what>, got <value>", the wording of src/common/json_errors.h: scalars as
// their JSON text (cut), containers by kind. `token` is simdjson's raw token for the value.
Status Expected(const Path& p, std::string_view what, std::string_view token);

inline bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Scans a JSON string's contents, `p` just past the opening quote, for its closing quote, checking
// the escapes (\" \\ \/ \b \f \n \r \t \uXXXX) on the way. Control characters and UTF-8 were
// checked by simdjson's first stage for the whole body. Returns false on a bad escape or when no
// closing quote comes before `end`.
inline bool ScanString(const char* p, const char* end, std::size_t* length, bool* escaped) {
  const char* const begin = p;
  const auto* quote = static_cast<const char*>(std::memchr(p, '"', static_cast<std::size_t>(end - p)));
  if (quote == nullptr) return false;
  if (std::memchr(p, '\\', static_cast<std::size_t>(quote - p)) == nullptr) {
    *length = static_cast<std::size_t>(quote - p);
    *escaped = false;
    return true;
  }
  *escaped = true;
  while (p < end) {
    const char c = *p;
    if (c == '"') {
      *length = static_cast<std::size_t>(p - begin);
      return true;
    }
    if (c != '\\') {
      ++p;
      continue;
    }
    if (end - p < 2) return false;
    switch (p[1]) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        p += 2;
        break;
      case 'u':
        if (end - p < 6 || !IsHex(p[2]) || !IsHex(p[3]) || !IsHex(p[4]) || !IsHex(p[5])) return false;
        p += 6;
        break;
      default:
        return false;
    }
  }
  return false;
}

// RFC 8259 number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
inline bool IsJsonNumber(std::string_view s) {
  std::size_t i = 0;
  const auto digits = [&] {
    const std::size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > from;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i < s.size() && s[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

// What the readers share within one Read* call.
class Ctx {
 public:
  explicit Ctx(std::string_view body)
      : end_(body.data() + body.size()), scanned_from_(body.data()), backslash_(nullptr) {}

  const char* BodyEnd() const { return end_; }

  // Whether [from, to) holds a backslash. The readers move forward through the body, so one
  // memchr answers for every string up to the next backslash: names cost no byte loop each.
  bool HasBackslash(const char* from, const char* to) const {
    if (backslash_ == nullptr || from < scanned_from_ || from > backslash_) {
      scanned_from_ = from;
      const void* hit = std::memchr(from, '\\', static_cast<std::size_t>(end_ - from));
      backslash_ = hit == nullptr ? end_ : static_cast<const char*>(hit);
    }
    return backslash_ < to;
  }

 private:
  const char* end_;
  mutable const char* scanned_from_;  // the first backslash at or after scanned_from_ ...
  mutable const char* backslash_;     // ... is here (end_ when none); nullptr: not scanned yet
};

// The contents of a string token without escapes, or false. simdjson's first stage makes a string
// token exactly the quoted string plus the whitespace before the next structural character (a
// character right after the closing quote starts a new token), so the closing quote is the
// token's last non-space byte and no unescaped quote lies inside.
inline bool PlainString(const Ctx& c, std::string_view token, std::string_view* out) {
  while (!token.empty() && IsJsonSpace(token.back())) token.remove_suffix(1);
  if (token.size() < 2 || token.front() != '"' || token.back() != '"') return false;
  token = token.substr(1, token.size() - 2);
  if (c.HasBackslash(token.data(), token.data() + token.size())) return false;
  *out = token;
  return true;
}

// A string value. Null reads as empty (the caller decides whether empty is allowed).
inline Status ReadString(const Ctx& c, od::value& v, const Path& p, std::string_view* out) {
  const std::string_view token = v.raw_json_token();
  // Left unconsumed on this path: the enclosing object or array iteration steps over it.
  if (PlainString(c, token, out)) return Status::Ok();
  if (token.empty()) return Fail(p, "malformed JSON (no value)");
  if (token.front() == 'n') {
    if (TrimRight(token) != "null") return Fail(p, "malformed JSON (bad literal)");
    *out = {};
    return Status::Ok();
  }
  if (token.front() != '"') return Expected(p, "a string", token);
  std::size_t length = 0;
  bool escaped = false;
  if (!ScanString(token.data() + 1, c.BodyEnd(), &length, &escaped))
    return Fail(p, "malformed JSON (bad string escape)");
  if (TrimRight(token).size() != length + 2) return Fail(p, "malformed JSON (content after a string)");
  if (auto e = v.get_string().get(*out))
    return Fail(p, "malformed JSON (" + std::string(simdjson::error_message(e)) + ")");
  return Status::Ok();
}

// A number. Null reads as 0.
inline Status ReadDouble(od::value& v, const Path& p, double* out) {
  const std::string_view token = v.raw_json_token();
  if (!token.empty() && token.front() == 'n') {
    if (TrimRight(token) != "null") return Fail(p, "malformed JSON (bad literal)");
    *out = 0;
    return Status::Ok();
  }
  if (token.empty() || !(token.front() == '-' || (token.front() >= '0' && token.front() <= '9'))) {
    return Expected(p, "a number", token);
  }
  if (!IsJsonNumber(TrimRight(token))) return Fail(p, "malformed JSON (bad number)");
  if (v.get_double().get(*out)) return Expected(p, "a finite number", token);
  return Status::Ok();
}

// An integer. Null reads as 0.
inline Status ReadInt64(od::value& v, const Path& p, std::int64_t* out) {
  const std::string_view token = v.raw_json_token();
  if (!token.empty() && token.front() == 'n') {
    if (TrimRight(token) != "null") return Fail(p, "malformed JSON (bad literal)");
    *out = 0;
    return Status::Ok();
  }
  if (token.empty() || !(token.front() == '-' || (token.front() >= '0' && token.front() <= '9'))) {
    return Expected(p, "an integer", token);
  }
  if (!IsJsonNumber(TrimRight(token))) return Fail(p, "malformed JSON (bad number)");
  if (v.get_int64().get(*out)) return Expected(p, "a 64-bit integer", token);
  return Status::Ok();
}

inline Status CheckLiteral(std::string_view token, std::string_view literal, const Path& p) {
  if (TrimRight(token) != literal) return Fail(p, "malformed JSON (bad literal)");
  return Status::Ok();
}

// A key's raw contents (escapes left in), checked.
inline Status KeyOf(const Ctx& c, od::field& f, const Path& p, std::string_view* key, bool* escaped) {
  const char* raw = f.key().raw();
  std::size_t length = 0;
  if (!ScanString(raw, c.BodyEnd(), &length, escaped)) return Fail(p, "malformed JSON (bad key)");
  *key = std::string_view(raw, length);
  return Status::Ok();
}

// Walks any value without keeping it, checking it is well-formed JSON.
Status Skip(const Ctx& c, od::value& v, const Path& p, int depth);

// Calls on_field(key, value, path) for each field of the object `v`: `key` is the raw key (a key
// written with escapes only matches a name written the same way; upstream never escapes field
// names). A null `v` has no fields and sets *was_null. Anything else is a type error.
template <typename OnField>
Status ForEachField(const Ctx& c, od::value& v, const Path& p, int depth, bool* was_null,
                    OnField&& on_field) {
  if (depth > kMaxNesting) return Fail(p, "nested deeper than " + std::to_string(kMaxNesting) + " levels");
  const std::string_view token = v.raw_json_token();
  if (was_null != nullptr) *was_null = false;
  if (!token.empty() && token.front() == 'n') {
    if (was_null != nullptr) *was_null = true;
    return CheckLiteral(token, "null", p);
  }
  if (token.empty() || token.front() != '{') return Expected(p, "an object", token);
  od::object object;
  if (auto e = v.get_object().get(object)) return Malformed(p, e);
  for (auto field_result : object) {
    od::field field;
    if (auto e = std::move(field_result).get(field)) return Malformed(p, e);
    std::string_view key;
    bool escaped = false;
    TOPOSCHED_RETURN_IF_ERROR(KeyOf(c, field, p, &key, &escaped));
    TOPOSCHED_RETURN_IF_ERROR(on_field(key, field, p.Field(key)));
  }
  return Status::Ok();
}

// Calls on_element(value, path, index) for each element of the array `v`; null as above.
template <typename OnElement>
Status ForEachElement(od::value& v, const Path& p, int depth, bool* was_null, OnElement&& on_element) {
  if (depth > kMaxNesting) return Fail(p, "nested deeper than " + std::to_string(kMaxNesting) + " levels");
  const std::string_view token = v.raw_json_token();
  if (was_null != nullptr) *was_null = false;
  if (!token.empty() && token.front() == 'n') {
    if (was_null != nullptr) *was_null = true;
    return CheckLiteral(token, "null", p);
  }
  if (token.empty() || token.front() != '[') return Expected(p, "an array", token);
  od::array array;
  if (auto e = v.get_array().get(array)) return Malformed(p, e);
  std::size_t index = 0;
  for (auto element_result : array) {
    od::value element;
    if (auto e = element_result.get(element)) return Malformed(p.Index(index), e);
    TOPOSCHED_RETURN_IF_ERROR(on_element(element, p.Index(index), index));
    ++index;
  }
  return Status::Ok();
}

// The JSON text of the object value `v` just walked, which started at `start`: from its '{' to the
// next token, less the whitespace before that token.
Status RawSince(od::value& v, const Path& p, const char* start, std::string_view* raw);

}  // namespace toposched::extender::wire_internal
