#pragma once
// Reading fields of API objects that may be malformed: never throws, a missing or mistyped
// field reads as empty. (nlohmann's value() throws on a non-object or a wrong type.)

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace toposched::kube {

inline const nlohmann::json* FieldAt(const nlohmann::json& doc, std::string_view pointer) {
  const nlohmann::json* at = &doc;
  std::size_t pos = 1;  // pointers here are "/a/b", keys without '~' or '/'
  while (pos <= pointer.size() && pos > 0) {
    const std::size_t next = pointer.find('/', pos);
    const std::string key(
        pointer.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
    if (!at->is_object()) return nullptr;
    const auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  return at;
}

inline std::string StringAt(const nlohmann::json& doc, std::string_view pointer) {
  const nlohmann::json* v = FieldAt(doc, pointer);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

inline nlohmann::json ObjectAt(const nlohmann::json& doc, std::string_view pointer) {
  const nlohmann::json* v = FieldAt(doc, pointer);
  return v != nullptr && v->is_object() ? *v : nlohmann::json::object();
}

}  // namespace toposched::kube
