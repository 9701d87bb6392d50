#pragma once
// Typed readers over nlohmann::json, shared by every decoder of untrusted JSON documents (the
// NodeTopology codec, the API server's objects and HAMi's annotations, the file source's
// journal, pod requests): each checks the type before it reads, so nothing throws on bad input,
// and each error starts with the JSON path of the offending value, worded by json_errors.h
// ("status.gpus[3].index: expected a non-negative integer, got -1").
//
// One choice differs between formats: what a member whose value is JSON null means. Go's
// encoding/json reads it as absent, so the readers of what Go programs write (Kubernetes
// objects, HAMi's annotations) pass Null::kAbsent; toposched's own documents never write null
// where a value belongs, and their readers report it as a value of the wrong type.
//
// Internal header: include only from .cc files (or private headers) that already use
// nlohmann_json.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>

#include "json_errors.h"
#include "toposched/common/status.h"

namespace toposched::json_read {

using json = nlohmann::json;

enum class Presence { kRequired, kOptional };
enum class Null { kValue, kAbsent };

inline std::string Child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

inline std::string Element(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// The member `key` of object `o`; null when it is absent (or JSON null, with Null::kAbsent) and
// optional. A required member that is absent is an error.
inline Result<const json*> Member(const json& o, std::string_view key, const std::string& path,
                                  Presence presence, Null null = Null::kValue) {
  const auto it = o.find(key);
  if (it == o.end() || (null == Null::kAbsent && it->is_null())) {
    if (presence == Presence::kRequired) return Error(Child(path, key) + ": required field is missing");
    return static_cast<const json*>(nullptr);
  }
  return &*it;
}

// The object member `key` (null when absent and optional).
inline Result<const json*> ReadObject(const json& o, std::string_view key, const std::string& path,
                                      Presence presence, Null null = Null::kValue) {
  Result<const json*> v = Member(o, key, path, presence, null);
  if (!v.ok() || *v == nullptr) return v;
  if (!(*v)->is_object()) return json_errors::Expected(Child(path, key), "an object", **v);
  return v;
}

// The array member `key` (null when absent and optional).
inline Result<const json*> ReadArray(const json& o, std::string_view key, const std::string& path,
                                     Presence presence, Null null = Null::kValue) {
  Result<const json*> v = Member(o, key, path, presence, null);
  if (!v.ok() || *v == nullptr) return v;
  if (!(*v)->is_array()) return json_errors::Expected(Child(path, key), "an array", **v);
  return v;
}

// Readers into *out; an optional member that is absent leaves *out as it was.
inline Status ReadString(const json& o, std::string_view key, const std::string& path, Presence presence,
                         std::string* out, Null null = Null::kValue) {
  TOPOSCHED_ASSIGN_OR_RETURN(const json* v, Member(o, key, path, presence, null));
  if (v == nullptr) return Status::Ok();
  if (!v->is_string()) return json_errors::Expected(Child(path, key), "a string", *v);
  *out = v->get_ref<const std::string&>();
  return Status::Ok();
}

inline Status ReadBool(const json& o, std::string_view key, const std::string& path, Presence presence,
                       bool* out, Null null = Null::kValue) {
  TOPOSCHED_ASSIGN_OR_RETURN(const json* v, Member(o, key, path, presence, null));
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return json_errors::Expected(Child(path, key), "true or false", *v);
  *out = v->get<bool>();
  return Status::Ok();
}

// "a non-negative integer" for [0, the type's largest value], else "an integer in [min, max]".
template <typename T>
std::string IntegerRange(T min, T max) {
  if (min == 0 && max == std::numeric_limits<T>::max()) return "a non-negative integer";
  return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

// An integer value (not 1.0: the writers of these formats emit integers for integer fields) in
// [min, max]; `path` names the value.
template <typename T>
Status IntValue(const json& v, const std::string& path, T min, T max, T* out) {
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(max) && (min <= 0 || u >= static_cast<std::uint64_t>(min))) {
      *out = static_cast<T>(u);
      return Status::Ok();
    }
  } else if (v.is_number_integer()) {
    const std::int64_t i = v.get<std::int64_t>();
    if (i >= static_cast<std::int64_t>(min) && i <= static_cast<std::int64_t>(max)) {
      *out = static_cast<T>(i);
      return Status::Ok();
    }
  }
  return json_errors::Expected(path, IntegerRange(min, max), v);
}

template <typename T>
Status ReadInt(const json& o, std::string_view key, const std::string& path, Presence presence, T min, T max,
               T* out, Null null = Null::kValue) {
  TOPOSCHED_ASSIGN_OR_RETURN(const json* v, Member(o, key, path, presence, null));
  if (v == nullptr) return Status::Ok();
  return IntValue(*v, Child(path, key), min, max, out);
}

// A map[string]string (labels, annotations); `keep` filters the keys kept (all are type-checked).
inline Status ReadStringMap(const json& o, std::string_view key, const std::string& path,
                            bool (*keep)(const std::string&), std::map<std::string, std::string>* out,
                            Null null = Null::kValue) {
  TOPOSCHED_ASSIGN_OR_RETURN(const json* m, ReadObject(o, key, path, Presence::kOptional, null));
  if (m == nullptr) return Status::Ok();
  for (const auto& [k, v] : m->items()) {
    if (!v.is_string()) return json_errors::Expected(Child(Child(path, key), k), "a string", v);
    if (keep(k)) (*out)[k] = v.get<std::string>();
  }
  return Status::Ok();
}

}  // namespace toposched::json_read
