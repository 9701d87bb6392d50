#include "testing/k8s_schema.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <utility>

namespace toposched::testing {
namespace {

using nlohmann::json;

// Deeper than any Kubernetes schema or object nests; bounds a $ref cycle.
constexpr int kMaxDepth = 256;

std::string Child(const std::string& path, std::string_view key) {
  const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-';
  });
  if (!plain) return path + "[" + json(std::string(key)).dump() + "]";
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string Element(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// JSON Schema's name for a value's type ("integer" for integral numbers).
std::string TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "unknown";
  }
}

// "string \"0\"", "object", "integer 7": enough to recognise the value in a message.
std::string Show(const json& v) {
  if (v.is_object() || v.is_array() || v.is_null()) return TypeName(v);
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return TypeName(v) + " " + text;
}

bool HasType(const json& v, std::string_view type) {
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_number_integer();
  return TypeName(v) == type;
}

bool IsTrue(const json& schema, const char* key) {
  auto it = schema.find(key);
  return it != schema.end() && it->is_boolean() && it->get<bool>();
}

// RFC 3339 as Kubernetes' metav1.Time and the OpenAPI "date-time" format accept it.
bool IsDateTime(const std::string& s) {
  static const std::regex kDateTime(
      R"(^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$)");
  return std::regex_match(s, kDateTime);
}

bool IsBase64(const std::string& s) {
  static const std::regex kBase64(R"(^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$)");
  return std::regex_match(s, kBase64);
}

bool FitsInt64(const json& v) {
  return !v.is_number_unsigned() ||
         v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
}

bool FitsInt32(const json& v) {
  if (!FitsInt64(v)) return false;
  const std::int64_t i = v.get<std::int64_t>();
  return i >= std::numeric_limits<std::int32_t>::min() && i <= std::numeric_limits<std::int32_t>::max();
}

double AsDouble(const json& v) {
  return v.get<double>();
}

enum class Dialect {
  kJsonSchema,  // kubeconform's standalone-strict files
  kStructural,  // a CRD's openAPIV3Schema, applied as the API server does
};

// Keywords each dialect understands. x-* keys are annotations in kJsonSchema (the
// x-kubernetes-* hints of the OpenAPI source) and are ignored there.
const std::set<std::string, std::less<>>& KnownKeywords(Dialect dialect) {
  static const std::set<std::string, std::less<>> kCommon = {
      "description", "title",    "type",    "properties", "required", "items",     "additionalProperties",
      "enum",        "format",   "default", "minimum",    "maximum",  "minLength", "maxLength",
      "pattern",     "minItems", "maxItems"};
  static const std::set<std::string, std::less<>> kJson = [] {
    auto s = kCommon;
    s.insert({"$schema", "$ref", "definitions", "oneOf", "anyOf", "allOf"});
    return s;
  }();
  static const std::set<std::string, std::less<>> kStructural = [] {
    auto s = kCommon;
    s.insert({"nullable", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
              "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type"});
    return s;
  }();
  return dialect == Dialect::kJsonSchema ? kJson : kStructural;
}

class Validator {
 public:
  Validator(Dialect dialect, const json& root_schema) : dialect_(dialect), root_(root_schema) {}

  void Validate(const json& value, const json& schema, const std::string& path, int depth) {
    if (depth > kMaxDepth)
      return Add(path, "schema nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) Add(path, "no value is allowed here");
      return;
    }
    if (!schema.is_object()) return Add(path, "schema is not an object: " + Show(schema));
    CheckKeywords(schema, path);

    if (dialect_ == Dialect::kJsonSchema) {
      if (auto ref = schema.find("$ref"); ref != schema.end()) {
        const json* target = Resolve(*ref);
        if (target == nullptr) return Add(path, "unresolvable $ref " + ref->dump());
        Validate(value, *target, path, depth + 1);
      }
      if (!CheckJsonSchemaType(value, schema, path)) return;
      CheckCombinators(value, schema, path, depth);
    } else if (!CheckStructuralType(value, schema, path)) {
      return;
    }

    if (auto e = schema.find("enum"); e != schema.end() && e->is_array()) {
      if (std::find(e->begin(), e->end(), value) == e->end()) {
        Add(path, "unsupported value " + Show(value) + ": expected one of " + e->dump());
      }
    }
    CheckFormat(value, schema, path);
    CheckBounds(value, schema, path);
    if (value.is_object()) CheckObject(value, schema, path, depth);
    if (value.is_array()) CheckArray(value, schema, path, depth);
  }

  SchemaViolations Take() { return std::move(violations_); }

 private:
  void Add(const std::string& path, std::string message) {
    violations_.push_back({path, std::move(message)});
  }

  void CheckKeywords(const json& schema, const std::string& path) {
    const auto& known = KnownKeywords(dialect_);
    for (const auto& [key, unused] : schema.items()) {
      if (known.count(key) != 0) continue;
      if (dialect_ == Dialect::kJsonSchema && key.rfind("x-", 0) == 0) continue;
      Add(path, "schema keyword \"" + key + "\" is not supported by this validator");
    }
  }

  const json* Resolve(const json& ref) const {
    if (!ref.is_string()) return nullptr;
    const std::string& s = ref.get_ref<const std::string&>();
    if (s.empty() || s[0] != '#') return nullptr;
    try {
      const json::json_pointer pointer(s.substr(1));
      return root_.contains(pointer) ? &root_.at(pointer) : nullptr;
    } catch (const json::exception&) {
      return nullptr;
    }
  }

  // `type` is a name or a list of names; absent allows any type.
  bool CheckJsonSchemaType(const json& value, const json& schema, const std::string& path) {
    auto it = schema.find("type");
    if (it == schema.end()) return true;
    std::vector<std::string> types;
    if (it->is_string()) types.push_back(it->get<std::string>());
    if (it->is_array()) {
      for (const json& t : *it) {
        if (t.is_string()) types.push_back(t.get<std::string>());
      }
    }
    for (const std::string& t : types) {
      if (HasType(value, t)) return true;
    }
    std::string expected;
    for (const std::string& t : types) expected += (expected.empty() ? "" : " or ") + t;
    Add(path, "expected " + expected + ", got " + Show(value));
    return false;
  }

  void CheckCombinators(const json& value, const json& schema, const std::string& path, int depth) {
    if (auto all = schema.find("allOf"); all != schema.end() && all->is_array()) {
      for (const json& sub : *all) Validate(value, sub, path, depth + 1);
    }
    for (const char* key : {"oneOf", "anyOf"}) {
      auto it = schema.find(key);
      if (it == schema.end() || !it->is_array()) continue;
      int matches = 0;
      for (const json& sub : *it) {
        Validator trial(dialect_, root_);
        trial.Validate(value, sub, path, depth + 1);
        if (trial.violations_.empty()) ++matches;
      }
      const bool one_of = std::string_view(key) == "oneOf";
      if (matches == 0) {
        Add(path, Show(value) + " matches none of the " + key + " alternatives " + it->dump());
      } else if (one_of && matches > 1) {
        Add(path,
            Show(value) + " matches " + std::to_string(matches) + " oneOf alternatives, not exactly one");
      }
    }
  }

  // A single `type`; null only when `nullable` (the API server drops other nulls);
  // x-kubernetes-int-or-string admits an integer or a string; preserve-unknown-fields without
  // a type admits anything.
  bool CheckStructuralType(const json& value, const json& schema, const std::string& path) {
    if (value.is_null()) {
      if (IsTrue(schema, "nullable")) return false;  // valid; nothing else applies to null
      Add(path, "null is not allowed (not nullable: the API server would drop the field)");
      return false;
    }
    if (IsTrue(schema, "x-kubernetes-int-or-string")) {
      if (value.is_number_integer() || value.is_string()) return true;
      Add(path, "expected an integer or a string, got " + Show(value));
      return false;
    }
    auto it = schema.find("type");
    if (it == schema.end() || !it->is_string()) {
      if (IsTrue(schema, "x-kubernetes-preserve-unknown-fields")) return true;
      Add(path, "schema has no type (not structural)");
      return false;
    }
    if (HasType(value, it->get<std::string>())) return true;
    Add(path, "expected " + it->get<std::string>() + ", got " + Show(value));
    return false;
  }

  void CheckFormat(const json& value, const json& schema, const std::string& path) {
    auto it = schema.find("format");
    if (it == schema.end() || !it->is_string()) return;
    const std::string& format = it->get_ref<const std::string&>();
    if (value.is_number_integer()) {
      if (format == "int32" && !FitsInt32(value)) Add(path, Show(value) + " does not fit format int32");
      if (format == "int64" && !FitsInt64(value)) Add(path, Show(value) + " does not fit format int64");
    } else if (value.is_string()) {
      const std::string& s = value.get_ref<const std::string&>();
      if (format == "date-time" && !IsDateTime(s)) Add(path, Show(value) + " is not an RFC 3339 date-time");
      if (format == "byte" && !IsBase64(s)) Add(path, Show(value) + " is not base64 (format byte)");
    }
    if (format == "int-or-string" && !value.is_number_integer() && !value.is_string()) {
      Add(path, "expected an integer or a string (format int-or-string), got " + Show(value));
    }
  }

  const std::regex& Pattern(const std::string& pattern) {
    auto it = patterns_.find(pattern);
    if (it == patterns_.end())
      it = patterns_.emplace(pattern, std::regex(pattern, std::regex::ECMAScript)).first;
    return it->second;
  }

  void CheckBounds(const json& value, const json& schema, const std::string& path) {
    auto number = [&](const char* key) -> const json* {
      auto it = schema.find(key);
      return it != schema.end() && it->is_number() ? &*it : nullptr;
    };
    if (value.is_number()) {
      if (const json* min = number("minimum"); min != nullptr && AsDouble(value) < AsDouble(*min)) {
        Add(path, Show(value) + " is less than the minimum " + min->dump());
      }
      if (const json* max = number("maximum"); max != nullptr && AsDouble(value) > AsDouble(*max)) {
        Add(path, Show(value) + " is greater than the maximum " + max->dump());
      }
    }
    if (value.is_string()) {
      const std::string& s = value.get_ref<const std::string&>();
      // JSON Schema counts code points; every string we check is ASCII, where bytes are the same.
      if (const json* min = number("minLength"); min != nullptr && s.size() < min->get<std::size_t>()) {
        Add(path, Show(value) + " is shorter than minLength " + min->dump());
      }
      if (const json* max = number("maxLength"); max != nullptr && s.size() > max->get<std::size_t>()) {
        Add(path, Show(value) + " is longer than maxLength " + max->dump());
      }
      if (auto p = schema.find("pattern"); p != schema.end() && p->is_string()) {
        try {
          if (!std::regex_search(s, Pattern(p->get<std::string>()))) {
            Add(path, Show(value) + " does not match the pattern " + p->dump());
          }
        } catch (const std::regex_error&) {
          Add(path, "schema pattern " + p->dump() + " is not a valid regular expression");
        }
      }
    }
    if (value.is_array()) {
      if (const json* min = number("minItems"); min != nullptr && value.size() < min->get<std::size_t>()) {
        Add(path, std::to_string(value.size()) + " items, fewer than minItems " + min->dump());
      }
      if (const json* max = number("maxItems"); max != nullptr && value.size() > max->get<std::size_t>()) {
        Add(path, std::to_string(value.size()) + " items, more than maxItems " + max->dump());
      }
    }
  }

  void CheckObject(const json& value, const json& schema, const std::string& path, int depth) {
    static const json kNoProperties = json::object();
    auto props_it = schema.find("properties");
    const json& props = props_it != schema.end() && props_it->is_object() ? *props_it : kNoProperties;
    auto additional = schema.find("additionalProperties");
    const bool preserve = IsTrue(schema, "x-kubernetes-preserve-unknown-fields");
    for (const auto& [key, child] : value.items()) {
      const std::string child_path = Child(path, key);
      if (auto p = props.find(key); p != props.end()) {
        // The API server validates a custom resource's ObjectMeta itself and never prunes it;
        // the CRD schema may say no more than `type: object` there.
        if (dialect_ == Dialect::kStructural && path.empty() && key == "metadata") {
          if (!child.is_object()) Add(child_path, "expected object, got " + Show(child));
          continue;
        }
        Validate(child, *p, child_path, depth + 1);
      } else if (additional != schema.end() && !additional->is_boolean()) {
        Validate(child, *additional, child_path, depth + 1);
      } else if (additional != schema.end()) {
        if (!additional->get<bool>()) Add(child_path, "unknown field (additionalProperties is false)");
      } else if (dialect_ == Dialect::kStructural && !preserve &&
                 !(path.empty() && (key == "apiVersion" || key == "kind" || key == "metadata"))) {
        Add(child_path, "unknown field: not in the schema, the API server would prune it");
      }
    }
    if (auto req = schema.find("required"); req != schema.end() && req->is_array()) {
      for (const json& name : *req) {
        if (name.is_string() && !value.contains(name.get<std::string>())) {
          Add(Child(path, name.get<std::string>()), "required field is missing");
        }
      }
    }
  }

  void CheckArray(const json& value, const json& schema, const std::string& path, int depth) {
    auto items = schema.find("items");
    if (items == schema.end()) return;
    if (items->is_array())
      return Add(path, "tuple `items` (an array of schemas) is not supported by this validator");
    for (std::size_t i = 0; i < value.size(); ++i) Validate(value[i], *items, Element(path, i), depth + 1);
  }

  Dialect dialect_;
  const json& root_;
  SchemaViolations violations_;
  std::map<std::string, std::regex> patterns_;
};

// ---------------------------------------------------------------------------------------------
// Structural schema rules (apiextensions.k8s.io/v1), on the schema itself.

class StructuralChecker {
 public:
  void Check(const json& node, const std::string& path, bool root, int depth) {
    if (depth > kMaxDepth)
      return Add(path, "schema nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (!node.is_object()) return Add(path, "expected a schema object, got " + Show(node));
    const auto& known = KnownKeywords(Dialect::kStructural);
    for (const auto& [key, unused] : node.items()) {
      if (known.count(key) == 0)
        Add(Child(path, key), "keyword not allowed in a structural schema or not supported here");
    }
    const bool int_or_string = IsTrue(node, "x-kubernetes-int-or-string");
    const bool preserve = IsTrue(node, "x-kubernetes-preserve-unknown-fields");
    std::string type;
    if (auto t = node.find("type"); t != node.end()) {
      if (!t->is_string()) {
        Add(Child(path, "type"), "must be a single type name, got " + Show(*t));
      } else {
        type = t->get<std::string>();
        static const std::set<std::string, std::less<>> kTypes = {"object",  "array",  "string",
                                                                  "integer", "number", "boolean"};
        if (kTypes.count(type) == 0) Add(Child(path, "type"), "unknown type \"" + type + "\"");
        if (int_or_string) Add(Child(path, "type"), "must be empty with x-kubernetes-int-or-string");
      }
    } else if (!int_or_string && !preserve) {
      Add(path, "no type: every schema node needs one (or x-kubernetes-preserve-unknown-fields)");
    }
    if (root && type != "object") Add(path, "the root must be of type object");
    if (root && IsTrue(node, "nullable")) Add(Child(path, "nullable"), "the root cannot be nullable");

    for (const char* key :
         {"description", "title", "format", "pattern", "x-kubernetes-list-type", "x-kubernetes-map-type"}) {
      if (auto it = node.find(key); it != node.end() && !it->is_string()) {
        Add(Child(path, key), "must be a string, got " + Show(*it));
      }
    }
    for (const char* key :
         {"nullable", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string"}) {
      if (auto it = node.find(key); it != node.end() && !it->is_boolean()) {
        Add(Child(path, key), "must be true or false, got " + Show(*it));
      }
    }
    for (const char* key : {"minimum", "maximum"}) {
      if (auto it = node.find(key); it != node.end() && !it->is_number()) {
        Add(Child(path, key), "must be a number, got " + Show(*it));
      }
    }
    for (const char* key : {"minLength", "maxLength", "minItems", "maxItems"}) {
      if (auto it = node.find(key); it != node.end() && !it->is_number_unsigned()) {
        Add(Child(path, key), "must be a non-negative integer, got " + Show(*it));
      }
    }
    if (auto p = node.find("pattern"); p != node.end() && p->is_string()) {
      try {
        std::regex(p->get<std::string>(), std::regex::ECMAScript);
      } catch (const std::regex_error&) {
        Add(Child(path, "pattern"), "not a valid regular expression: " + p->dump());
      }
    }
    if (auto lt = node.find("x-kubernetes-list-type"); lt != node.end() && lt->is_string()) {
      const std::string v = lt->get<std::string>();
      if (v != "atomic" && v != "set" && v != "map")
        Add(Child(path, "x-kubernetes-list-type"), "unknown list type " + lt->dump());
      if (type != "array") Add(Child(path, "x-kubernetes-list-type"), "only for arrays");
    }

    const auto props = node.find("properties");
    const auto additional = node.find("additionalProperties");
    if ((props != node.end() || additional != node.end()) && type != "object") {
      Add(path, "properties/additionalProperties need type object");
    }
    if (props != node.end() && additional != node.end()) {
      Add(path, "properties and additionalProperties are mutually exclusive in a structural schema");
    }
    if (additional != node.end()) {
      if (additional->is_boolean()) {
        if (!additional->get<bool>())
          Add(Child(path, "additionalProperties"), "false is forbidden in CRD schemas");
      } else {
        Check(*additional, Child(path, "additionalProperties"), false, depth + 1);
      }
    }
    if (props != node.end()) {
      if (!props->is_object()) {
        Add(Child(path, "properties"), "must be an object");
      } else {
        for (const auto& [name, sub] : props->items()) {
          const std::string sub_path = Child(Child(path, "properties"), name);
          if (root && name == "metadata") {
            CheckRootMetadata(sub, sub_path);
          } else {
            Check(sub, sub_path, false, depth + 1);
          }
        }
      }
    }
    if (auto req = node.find("required"); req != node.end()) {
      if (!req->is_array()) {
        Add(Child(path, "required"), "must be a list of property names");
      } else {
        for (const json& name : *req) {
          if (!name.is_string() || props == node.end() || !props->is_object() ||
              !props->contains(name.get<std::string>())) {
            Add(Child(path, "required"), "names " + name.dump() + ", which is not a property");
          }
        }
      }
    }
    const auto items = node.find("items");
    if (type == "array" && items == node.end()) Add(path, "an array needs items");
    if (items != node.end()) {
      if (type != "array") Add(path, "items needs type array");
      Check(*items, Child(path, "items"), false, depth + 1);
    }
    if (auto e = node.find("enum"); e != node.end()) {
      if (!e->is_array() || e->empty()) {
        Add(Child(path, "enum"), "must be a non-empty list");
      } else if (!type.empty()) {
        for (const json& v : *e) {
          if (!HasType(v, type) && !(v.is_null() && IsTrue(node, "nullable"))) {
            Add(Child(path, "enum"), "value " + Show(v) + " is not of type " + type);
          }
        }
      }
    }
  }

  SchemaViolations Take() { return std::move(violations_); }

 private:
  void Add(const std::string& path, std::string message) {
    violations_.push_back({path, std::move(message)});
  }

  // apiextensions: at the root, metadata may only restrict name and generateName.
  void CheckRootMetadata(const json& node, const std::string& path) {
    if (!node.is_object()) return Add(path, "expected a schema object");
    for (const auto& [key, sub] : node.items()) {
      if (key == "type") {
        if (sub != "object") Add(Child(path, key), "metadata must be of type object");
      } else if (key == "properties") {
        for (const auto& [name, unused] : sub.items()) {
          if (name != "name" && name != "generateName") {
            Add(Child(Child(path, key), name), "only name and generateName may be specified under metadata");
          }
        }
      } else if (key != "description") {
        Add(Child(path, key), "not allowed under the root metadata");
      }
    }
    if (!node.contains("type")) Add(path, "metadata needs type object");
  }

  SchemaViolations violations_;
};

// ---------------------------------------------------------------------------------------------
// YAML -> JSON.

// Plain scalars, per the YAML 1.2 core schema (yaml.org/spec/1.2.2 §10.3.2).
Result<json> ResolvePlain(const std::string& s, const std::string& path) {
  static const std::regex kNull("^(null|Null|NULL|~)?$");
  static const std::regex kTrue("^(true|True|TRUE)$");
  static const std::regex kFalse("^(false|False|FALSE)$");
  static const std::regex kDecimal("^[-+]?[0-9]+$");
  static const std::regex kOctal("^0o[0-7]+$");
  static const std::regex kHex("^0x[0-9a-fA-F]+$");
  static const std::regex kFloat(R"(^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$)");
  static const std::regex kInfNan(R"(^([-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))$)");
  // What sigs.k8s.io/yaml (go-yaml, YAML 1.1) reads differently from YAML 1.2.
  static const std::regex kYaml11Bool("^(y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)$");
  static const std::regex kYaml11Octal("^[-+]?0[0-9]+$");
  const std::string where = path.empty() ? "document" : path;

  if (std::regex_match(s, kNull)) return json(nullptr);
  if (std::regex_match(s, kTrue)) return json(true);
  if (std::regex_match(s, kFalse)) return json(false);
  if (std::regex_match(s, kYaml11Bool)) {
    return Error(where + ": plain " + s +
                 " is a boolean to Kubernetes (YAML 1.1) but a string in YAML 1.2; quote it");
  }
  if (std::regex_match(s, kYaml11Octal)) {
    return Error(where + ": plain " + s +
                 " is octal to Kubernetes (YAML 1.1) but decimal in YAML 1.2; quote it");
  }
  const bool decimal = std::regex_match(s, kDecimal);
  if (decimal || std::regex_match(s, kOctal) || std::regex_match(s, kHex)) {
    const bool negative = s[0] == '-';
    const char* digits = s.c_str() + ((s[0] == '-' || s[0] == '+') ? 1 : 0);
    int base = 10;
    if (!decimal) {
      base = s[1] == 'o' ? 8 : 16;
      digits = s.c_str() + 2;
    }
    errno = 0;
    char* end = nullptr;
    const unsigned long long magnitude = std::strtoull(digits, &end, base);
    if (errno == ERANGE || *end != '\0') return Error(where + ": integer " + s + " is out of range");
    if (!negative) return json(static_cast<std::uint64_t>(magnitude));
    if (magnitude > static_cast<unsigned long long>(std::numeric_limits<std::int64_t>::max()) + 1) {
      return Error(where + ": integer " + s + " is out of range");
    }
    return json(static_cast<std::int64_t>(0 - magnitude));
  }
  if (std::regex_match(s, kFloat)) return json(std::strtod(s.c_str(), nullptr));
  if (std::regex_match(s, kInfNan)) return Error(where + ": " + s + " has no JSON representation");
  return json(s);
}

Result<json> Convert(const YAML::Node& node, const std::string& path, int depth) {
  const std::string where = path.empty() ? "document" : path;
  if (depth > kMaxDepth)
    return Error(where + ": nested deeper than " + std::to_string(kMaxDepth) + " levels");
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar: {
      const std::string& tag = node.Tag();
      const std::string& text = node.Scalar();
      if (tag == "!" || tag == "tag:yaml.org,2002:str") return json(text);
      if (tag == "?") return ResolvePlain(text, path);
      if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
          tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
        Result<json> v = ResolvePlain(text, path);
        if (!v.ok()) return v;
        const std::string kind = tag.substr(tag.rfind(':') + 1);
        const bool fits = (kind == "int" && v->is_number_integer()) || (kind == "float" && v->is_number()) ||
                          (kind == "bool" && v->is_boolean()) || (kind == "null" && v->is_null());
        if (!fits) return Error(where + ": " + text + " is not a valid !!" + kind);
        return v;
      }
      return Error(where + ": unsupported tag " + tag);
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      std::size_t i = 0;
      for (const YAML::Node& item : node) {
        Result<json> v = Convert(item, Element(path, i++), depth + 1);
        if (!v.ok()) return v;
        out.push_back(std::move(v.value()));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (auto it = node.begin(); it != node.end(); ++it) {
        if (!it->first.IsScalar()) return Error(where + ": a mapping key is not a scalar");
        const std::string key = it->first.Scalar();
        if (out.contains(key)) return Error(Child(path, key) + ": duplicate key");
        Result<json> v = Convert(it->second, Child(path, key), depth + 1);
        if (!v.ok()) return v;
        out[key] = std::move(v.value());
      }
      return out;
    }
    case YAML::NodeType::Undefined:
      break;
  }
  return Error(where + ": undefined YAML node");
}

}  // namespace

std::string SchemaViolation::ToString() const {
  return (path.empty() ? "<root>" : path) + ": " + message;
}

std::string Describe(const SchemaViolations& violations) {
  std::string out;
  for (const SchemaViolation& v : violations) out += v.ToString() + "\n";
  return out;
}

SchemaViolations ValidateJsonSchema(const nlohmann::json& document, const nlohmann::json& schema) {
  Validator v(Dialect::kJsonSchema, schema);
  v.Validate(document, schema, "", 0);
  return v.Take();
}

SchemaViolations ValidateCrdSchema(const nlohmann::json& object, const nlohmann::json& open_api_v3_schema) {
  Validator v(Dialect::kStructural, open_api_v3_schema);
  v.Validate(object, open_api_v3_schema, "", 0);
  return v.Take();
}

SchemaViolations CheckStructuralSchema(const nlohmann::json& open_api_v3_schema) {
  StructuralChecker c;
  c.Check(open_api_v3_schema, "", true, 0);
  return c.Take();
}

std::string K8sSchemaFileName(std::string_view api_version, std::string_view kind) {
  std::string name;
  for (char c : kind) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::size_t slash = api_version.find('/');
  if (slash != std::string_view::npos) {
    const std::string_view group = api_version.substr(0, slash);
    name += "-" + std::string(group.substr(0, group.find('.')));
  }
  name += "-" + std::string(slash == std::string_view::npos ? api_version : api_version.substr(slash + 1));
  return name + ".json";
}

Result<std::vector<nlohmann::json>> YamlToJson(std::string_view yaml_text) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return Error(std::string("not valid YAML: ") + e.what());
  }
  std::vector<nlohmann::json> out;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (docs[i].IsNull()) continue;
    Result<json> doc = Convert(docs[i], "", 0);
    if (!doc.ok()) return doc.error().WithContext("document " + std::to_string(i));
    out.push_back(std::move(doc.value()));
  }
  return out;
}

}  // namespace toposched::testing
