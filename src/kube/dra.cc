// DRA objects (dra.h): ResourceSlices, ResourceClaims and their templates, DeviceClasses, and
// what they mean for one node's topology.

#include "toposched/kube/dra.h"

#include <cctype>
#include <exception>
#include <limits>
#include <set>
#include <utility>

#include "json_util.h"
#include "objects_internal.h"

namespace toposched::kube {

using namespace objects_internal;  // NOLINT(google-build-using-namespace): this library's own helpers

namespace {

// ---- shared readers ----

Status ReadMeta(const json& object, bool uid_required, std::string* name, std::string* namespace_,
                std::string* uid, std::string* resource_version, bool* deleting) {
  if (!object.is_object()) return Expected("top level", "an object", object);
  TOPOSCHED_ASSIGN_OR_RETURN(const json* meta, ReadObject(object, "metadata", "", Presence::kRequired));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*meta, "name", "metadata", Presence::kRequired, name));
  if (name->empty()) return Error("metadata.name: must not be empty");
  if (namespace_ != nullptr) {
    TOPOSCHED_RETURN_IF_ERROR(ReadString(*meta, "namespace", "metadata", Presence::kOptional, namespace_));
  }
  if (uid != nullptr) {
    TOPOSCHED_RETURN_IF_ERROR(
        ReadString(*meta, "uid", "metadata", uid_required ? Presence::kRequired : Presence::kOptional, uid));
    if (uid_required && uid->empty()) return Error("metadata.uid: must not be empty");
  }
  TOPOSCHED_RETURN_IF_ERROR(
      ReadString(*meta, "resourceVersion", "metadata", Presence::kOptional, resource_version));
  if (deleting != nullptr) {
    std::string deletion;
    TOPOSCHED_RETURN_IF_ERROR(
        ReadString(*meta, "deletionTimestamp", "metadata", Presence::kOptional, &deletion));
    *deleting = !deletion.empty();
  }
  return Status::Ok();
}

// An optional array member of at most `max` elements.
Result<const json*> ReadBoundedArray(const json& o, std::string_view key, const std::string& path,
                                     std::size_t max) {
  TOPOSCHED_ASSIGN_OR_RETURN(const json* arr, ReadArray(o, key, path, Presence::kOptional));
  if (arr != nullptr && arr->size() > max) {
    return Error(Child(path, key) + ": " + std::to_string(arr->size()) + " entries, over the limit of " +
                 std::to_string(max));
  }
  return arr;
}

Status ReadStringList(const json& o, std::string_view key, const std::string& path, std::size_t max,
                      std::vector<std::string>* out) {
  TOPOSCHED_ASSIGN_OR_RETURN(const json* arr, ReadBoundedArray(o, key, path, max));
  if (arr == nullptr) return Status::Ok();
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const json& v = (*arr)[i];
    if (!v.is_string()) return Expected(Element(Child(path, key), i), "a string", v);
    out->push_back(v.get<std::string>());
  }
  return Status::Ok();
}

// The qualified name of a slice's attribute or capacity: a C identifier takes the driver's
// domain (lookupAttribute in the structured allocator), a "domain/name" stays.
Result<std::string> QualifiedName(const std::string& name, const std::string& driver,
                                  const std::string& path) {
  const std::size_t slash = name.find('/');
  if (name.empty() || slash == 0 || slash + 1 == name.size() ||
      (slash != std::string::npos && name.find('/', slash + 1) != std::string::npos)) {
    return Error(path + ": " + Quote(name) + " is not a qualified name (an identifier or domain/identifier)");
  }
  return slash == std::string::npos ? driver + "/" + name : name;
}

template <typename T>
Result<std::vector<T>> ReadList(const json& v, const std::string& path, bool (json::*is)() const noexcept,
                                std::string_view what) {
  if (!v.is_array() || v.empty()) return Expected(path, "a non-empty array", v);
  std::vector<T> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!((v[i]).*is)()) return Expected(Element(path, i), what, v[i]);
    out.push_back(v[i].get<T>());
  }
  return out;
}

Result<DraAttributeValue> ReadAttributeValue(const json& v, const std::string& path) {
  if (!v.is_object()) return Expected(path, "an object", v);
  std::optional<DraAttributeValue> value;
  int fields = 0;
  for (const auto& [key, field] : v.items()) {
    if (field.is_null()) continue;
    ++fields;
    const std::string p = Child(path, key);
    if (key == "int") {
      std::int64_t i = 0;
      TOPOSCHED_RETURN_IF_ERROR(json_read::IntValue(field, p, std::numeric_limits<std::int64_t>::min(),
                                                    std::numeric_limits<std::int64_t>::max(), &i));
      value = i;
    } else if (key == "bool") {
      if (!field.is_boolean()) return Expected(p, "a boolean", field);
      value = field.get<bool>();
    } else if (key == "string" || key == "version") {
      if (!field.is_string()) return Expected(p, "a string", field);
      if (key == "string") {
        value = field.get<std::string>();
      } else {
        value = DraVersion{field.get<std::string>()};
      }
    } else if (key == "ints") {
      if (!field.is_array() || field.empty()) return Expected(p, "a non-empty array", field);
      std::vector<std::int64_t> ints;
      for (std::size_t i = 0; i < field.size(); ++i) {
        std::int64_t n = 0;
        TOPOSCHED_RETURN_IF_ERROR(json_read::IntValue(field[i], Element(p, i),
                                                      std::numeric_limits<std::int64_t>::min(),
                                                      std::numeric_limits<std::int64_t>::max(), &n));
        ints.push_back(n);
      }
      value = std::move(ints);
    } else if (key == "bools") {
      TOPOSCHED_ASSIGN_OR_RETURN(std::vector<bool> list,
                                 ReadList<bool>(field, p, &json::is_boolean, "a boolean"));
      value = std::move(list);
    } else if (key == "strings" || key == "versions") {
      TOPOSCHED_ASSIGN_OR_RETURN(std::vector<std::string> list,
                                 ReadList<std::string>(field, p, &json::is_string, "a string"));
      if (key == "strings") {
        value = std::move(list);
      } else {
        std::vector<DraVersion> versions;
        for (std::string& s : list) versions.push_back(DraVersion{std::move(s)});
        value = std::move(versions);
      }
    } else {
      return Error(p +
                   ": unknown attribute type (expected int, bool, string, version, ints, bools, strings or "
                   "versions)");
    }
  }
  if (fields != 1 || !value)
    return Error(path + ": must have exactly one value field, has " + std::to_string(fields));
  return std::move(*value);
}

Status ReadDevice(const json& d, const std::string& path, const std::string& driver, DraDevice* out) {
  if (!d.is_object()) return Expected(path, "an object", d);
  TOPOSCHED_RETURN_IF_ERROR(ReadString(d, "name", path, Presence::kRequired, &out->name));
  if (out->name.empty()) return Error(Child(path, "name") + ": must not be empty");
  TOPOSCHED_RETURN_IF_ERROR(ReadString(d, "nodeName", path, Presence::kOptional, &out->node_name));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* attributes, ReadObject(d, "attributes", path, Presence::kOptional));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* capacity, ReadObject(d, "capacity", path, Presence::kOptional));
  const std::size_t entries =
      (attributes != nullptr ? attributes->size() : 0) + (capacity != nullptr ? capacity->size() : 0);
  if (entries > kDraMaxAttributesAndCapacities) {
    return Error(path + ": " + std::to_string(entries) + " attributes and capacities, over the limit of " +
                 std::to_string(kDraMaxAttributesAndCapacities));
  }
  if (attributes != nullptr) {
    const std::string p = Child(path, "attributes");
    for (const auto& [key, value] : attributes->items()) {
      TOPOSCHED_ASSIGN_OR_RETURN(std::string name, QualifiedName(key, driver, Child(p, key)));
      TOPOSCHED_ASSIGN_OR_RETURN(DraAttributeValue v, ReadAttributeValue(value, Child(p, key)));
      // "type" and "<driver>/type" would be one attribute to the allocator: which it reads is
      // not ours to pick.
      if (!out->attributes.emplace(name, std::move(v)).second) {
        return Error(Child(p, key) + ": attribute " + Quote(name) +
                     " is given twice (with and without its domain)");
      }
    }
  }
  if (capacity != nullptr) {
    const std::string p = Child(path, "capacity");
    for (const auto& [key, value] : capacity->items()) {
      TOPOSCHED_ASSIGN_OR_RETURN(std::string name, QualifiedName(key, driver, Child(p, key)));
      if (!value.is_object()) return Expected(Child(p, key), "an object", value);
      std::string quantity;
      const auto it = value.find("value");
      if (it != value.end()) {
        if (it->is_string()) {
          quantity = it->get<std::string>();
        } else if (it->is_number_integer()) {
          quantity = it->dump();
        } else {
          return Expected(Child(Child(p, key), "value"), "a quantity", *it);
        }
      }
      out->capacity[name] = quantity;
    }
  }
  return Status::Ok();
}

Status ReadSliceImpl(const json& slice, DraSlice* s) {
  TOPOSCHED_RETURN_IF_ERROR(
      ReadMeta(slice, false, &s->name, nullptr, nullptr, &s->resource_version, nullptr));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* spec, ReadObject(slice, "spec", "", Presence::kRequired));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*spec, "driver", "spec", Presence::kRequired, &s->driver));
  if (s->driver.empty()) return Error("spec.driver: must not be empty");
  TOPOSCHED_ASSIGN_OR_RETURN(const json* pool, ReadObject(*spec, "pool", "spec", Presence::kRequired));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*pool, "name", "spec.pool", Presence::kRequired, &s->pool));
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  TOPOSCHED_RETURN_IF_ERROR(ReadInt<std::int64_t>(*pool, "generation", "spec.pool", Presence::kOptional, 0,
                                                  kMax, &s->pool_generation));
  TOPOSCHED_RETURN_IF_ERROR(ReadInt<std::int64_t>(*pool, "resourceSliceCount", "spec.pool",
                                                  Presence::kOptional, 0, kMax, &s->pool_slice_count));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*spec, "nodeName", "spec", Presence::kOptional, &s->node_name));
  TOPOSCHED_RETURN_IF_ERROR(ReadBool(*spec, "allNodes", "spec", &s->all_nodes));
  TOPOSCHED_RETURN_IF_ERROR(ReadBool(*spec, "perDeviceNodeSelection", "spec", &s->per_device_node_selection));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* selector,
                             ReadObject(*spec, "nodeSelector", "spec", Presence::kOptional));
  s->has_node_selector = selector != nullptr;
  const int placements = (s->node_name.empty() ? 0 : 1) + (s->all_nodes ? 1 : 0) +
                         (s->has_node_selector ? 1 : 0) + (s->per_device_node_selection ? 1 : 0);
  if (placements != 1) {
    return Error(
        "spec: exactly one of nodeName, nodeSelector, allNodes and perDeviceNodeSelection must be set, " +
        std::to_string(placements) + " are");
  }
  TOPOSCHED_ASSIGN_OR_RETURN(const json* devices,
                             ReadBoundedArray(*spec, "devices", "spec", kDraSliceMaxDevices));
  if (devices == nullptr) return Status::Ok();
  std::set<std::string> names;
  for (std::size_t i = 0; i < devices->size(); ++i) {
    const std::string p = Element("spec.devices", i);
    DraDevice d;
    TOPOSCHED_RETURN_IF_ERROR(ReadDevice((*devices)[i], p, s->driver, &d));
    if (!names.insert(d.name).second) return Error(Child(p, "name") + ": duplicate device " + Quote(d.name));
    s->devices.push_back(std::move(d));
  }
  return Status::Ok();
}

// ---- claims ----

Status ReadSelection(const json& r, const std::string& path, DraDeviceSelection* out) {
  TOPOSCHED_RETURN_IF_ERROR(ReadString(r, "deviceClassName", path, Presence::kRequired, &out->device_class));
  if (out->device_class.empty()) return Error(Child(path, "deviceClassName") + ": must not be empty");
  TOPOSCHED_ASSIGN_OR_RETURN(const json* selectors,
                             ReadBoundedArray(r, "selectors", path, kDraSelectorsMaxSize));
  if (selectors != nullptr) {
    for (std::size_t i = 0; i < selectors->size(); ++i) {
      const json& s = (*selectors)[i];
      const std::string p = Element(Child(path, "selectors"), i);
      if (!s.is_object()) return Expected(p, "an object", s);
      TOPOSCHED_ASSIGN_OR_RETURN(const json* cel, ReadObject(s, "cel", p, Presence::kOptional));
      if (cel == nullptr) {
        ++out->unknown_selectors;
        continue;
      }
      std::string expression;
      TOPOSCHED_RETURN_IF_ERROR(
          ReadString(*cel, "expression", Child(p, "cel"), Presence::kRequired, &expression));
      if (expression.size() > kDraCelExpressionMaxLength) {
        return Error(Child(Child(p, "cel"), "expression") + ": " + std::to_string(expression.size()) +
                     " bytes, over the limit of " + std::to_string(kDraCelExpressionMaxLength));
      }
      out->cel_selectors.push_back(std::move(expression));
    }
  }
  std::string mode;
  TOPOSCHED_RETURN_IF_ERROR(ReadString(r, "allocationMode", path, Presence::kOptional, &mode));
  // "Clients must refuse to handle requests with unknown modes" (types.go).
  if (mode.empty() || mode == "ExactCount") {
    out->mode = DraAllocationMode::kExactCount;
  } else if (mode == "All") {
    out->mode = DraAllocationMode::kAll;
  } else {
    return Error(Child(path, "allocationMode") + ": unknown mode " + Quote(mode) + " (ExactCount or All)");
  }
  TOPOSCHED_ASSIGN_OR_RETURN(const json* count, Member(r, "count", path, Presence::kOptional));
  if (out->mode == DraAllocationMode::kAll) {
    out->count = 0;
    if (count != nullptr && !(count->is_number_integer() && count->get<std::int64_t>() == 0)) {
      return Error(Child(path, "count") + ": must not be set when allocationMode is All");
    }
  } else if (count != nullptr) {
    TOPOSCHED_RETURN_IF_ERROR(
        json_read::IntValue<std::int64_t>(*count, Child(path, "count"), 1, kDraMaxCount, &out->count));
  }
  TOPOSCHED_RETURN_IF_ERROR(ReadBool(r, "adminAccess", path, &out->admin_access));
  return Status::Ok();
}

Status ReadRequest(const json& r, const std::string& path, DraRequest* out) {
  if (!r.is_object()) return Expected(path, "an object", r);
  TOPOSCHED_RETURN_IF_ERROR(ReadString(r, "name", path, Presence::kRequired, &out->name));
  if (out->name.empty()) return Error(Child(path, "name") + ": must not be empty");
  TOPOSCHED_ASSIGN_OR_RETURN(const json* exactly, ReadObject(r, "exactly", path, Presence::kOptional));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* first,
                             ReadBoundedArray(r, "firstAvailable", path, kDraFirstAvailableMaxSize));
  const bool has_first = first != nullptr && !first->empty();
  if ((exactly != nullptr) == has_first) {
    return Error(path + ": exactly one of exactly and firstAvailable must be set");
  }
  if (exactly != nullptr) {
    DraDeviceSelection s;
    TOPOSCHED_RETURN_IF_ERROR(ReadSelection(*exactly, Child(path, "exactly"), &s));
    out->exactly = std::move(s);
    return Status::Ok();
  }
  std::set<std::string> names;
  for (std::size_t i = 0; i < first->size(); ++i) {
    const json& e = (*first)[i];
    const std::string p = Element(Child(path, "firstAvailable"), i);
    if (!e.is_object()) return Expected(p, "an object", e);
    DraSubRequest sub;
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "name", p, Presence::kRequired, &sub.name));
    if (sub.name.empty()) return Error(Child(p, "name") + ": must not be empty");
    if (!names.insert(sub.name).second) return Error(Child(p, "name") + ": duplicate " + Quote(sub.name));
    TOPOSCHED_RETURN_IF_ERROR(ReadSelection(e, p, &sub.selection));
    out->first_available.push_back(std::move(sub));
  }
  return Status::Ok();
}

Status ReadClaimSpec(const json& spec, const std::string& path, DraClaimSpec* out) {
  TOPOSCHED_ASSIGN_OR_RETURN(const json* devices, ReadObject(spec, "devices", path, Presence::kOptional));
  if (devices == nullptr) return Status::Ok();
  const std::string dp = Child(path, "devices");
  TOPOSCHED_ASSIGN_OR_RETURN(const json* requests,
                             ReadBoundedArray(*devices, "requests", dp, kDraDeviceRequestsMaxSize));
  std::set<std::string> names;
  if (requests != nullptr) {
    for (std::size_t i = 0; i < requests->size(); ++i) {
      const std::string p = Element(Child(dp, "requests"), i);
      DraRequest r;
      TOPOSCHED_RETURN_IF_ERROR(ReadRequest((*requests)[i], p, &r));
      if (!names.insert(r.name).second)
        return Error(Child(p, "name") + ": duplicate request " + Quote(r.name));
      out->requests.push_back(std::move(r));
    }
  }
  TOPOSCHED_ASSIGN_OR_RETURN(const json* constraints,
                             ReadBoundedArray(*devices, "constraints", dp, kDraConstraintsMaxSize));
  if (constraints == nullptr) return Status::Ok();
  for (std::size_t i = 0; i < constraints->size(); ++i) {
    const json& c = (*constraints)[i];
    const std::string p = Element(Child(dp, "constraints"), i);
    if (!c.is_object()) return Expected(p, "an object", c);
    DraConstraint constraint;
    TOPOSCHED_RETURN_IF_ERROR(
        ReadStringList(c, "requests", p, kDraDeviceRequestsMaxSize, &constraint.requests));
    TOPOSCHED_RETURN_IF_ERROR(
        ReadString(c, "matchAttribute", p, Presence::kOptional, &constraint.match_attribute));
    TOPOSCHED_RETURN_IF_ERROR(
        ReadString(c, "distinctAttribute", p, Presence::kOptional, &constraint.distinct_attribute));
    out->constraints.push_back(std::move(constraint));
  }
  return Status::Ok();
}

// The node of `selector` when it is the allocator's node-local form, else "".
std::string SelectedNode(const json& selector) {
  const json* terms = FieldAt(selector, "/nodeSelectorTerms");
  if (terms == nullptr || !terms->is_array() || terms->size() != 1 || !(*terms)[0].is_object()) return {};
  const json& term = (*terms)[0];
  const json* expressions = FieldAt(term, "/matchExpressions");
  if (expressions != nullptr && !expressions->is_null() &&
      !(expressions->is_array() && expressions->empty())) {
    return {};
  }
  const json* fields = FieldAt(term, "/matchFields");
  if (fields == nullptr || !fields->is_array() || fields->size() != 1) return {};
  const json& r = (*fields)[0];
  const json* values = FieldAt(r, "/values");
  if (StringAt(r, "/key") != "metadata.name" || StringAt(r, "/operator") != "In" || values == nullptr ||
      !values->is_array() || values->size() != 1 || !(*values)[0].is_string()) {
    return {};
  }
  return (*values)[0].get<std::string>();
}

Status ReadClaimImpl(const json& claim, DraClaim* c) {
  TOPOSCHED_RETURN_IF_ERROR(
      ReadMeta(claim, true, &c->name, &c->namespace_, &c->uid, &c->resource_version, &c->deleting));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* spec, ReadObject(claim, "spec", "", Presence::kRequired));
  TOPOSCHED_RETURN_IF_ERROR(ReadClaimSpec(*spec, "spec", &c->spec));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* status, ReadObject(claim, "status", "", Presence::kOptional));
  if (status == nullptr) return Status::Ok();
  TOPOSCHED_ASSIGN_OR_RETURN(const json* allocation,
                             ReadObject(*status, "allocation", "status", Presence::kOptional));
  if (allocation != nullptr) {
    c->allocated = true;
    TOPOSCHED_ASSIGN_OR_RETURN(const json* devices,
                               ReadObject(*allocation, "devices", "status.allocation", Presence::kOptional));
    if (devices != nullptr) {
      const std::string dp = "status.allocation.devices";
      TOPOSCHED_ASSIGN_OR_RETURN(const json* results,
                                 ReadBoundedArray(*devices, "results", dp, kDraAllocationResultsMaxSize));
      for (std::size_t i = 0; results != nullptr && i < results->size(); ++i) {
        const json& r = (*results)[i];
        const std::string p = Element(Child(dp, "results"), i);
        if (!r.is_object()) return Expected(p, "an object", r);
        DraAllocationResult result;
        TOPOSCHED_RETURN_IF_ERROR(ReadString(r, "request", p, Presence::kRequired, &result.request));
        TOPOSCHED_RETURN_IF_ERROR(ReadString(r, "driver", p, Presence::kRequired, &result.driver));
        TOPOSCHED_RETURN_IF_ERROR(ReadString(r, "pool", p, Presence::kRequired, &result.pool));
        TOPOSCHED_RETURN_IF_ERROR(ReadString(r, "device", p, Presence::kRequired, &result.device));
        c->results.push_back(std::move(result));
      }
    }
    TOPOSCHED_ASSIGN_OR_RETURN(const json* selector, ReadObject(*allocation, "nodeSelector",
                                                                "status.allocation", Presence::kOptional));
    if (selector != nullptr) c->allocated_node = SelectedNode(*selector);
  }
  TOPOSCHED_ASSIGN_OR_RETURN(const json* reserved,
                             ReadBoundedArray(*status, "reservedFor", "status", kDraReservedForMaxSize));
  for (std::size_t i = 0; reserved != nullptr && i < reserved->size(); ++i) {
    const json& r = (*reserved)[i];
    const std::string p = Element("status.reservedFor", i);
    if (!r.is_object()) return Expected(p, "an object", r);
    std::string group, resource, uid;
    TOPOSCHED_RETURN_IF_ERROR(ReadString(r, "apiGroup", p, Presence::kOptional, &group));
    TOPOSCHED_RETURN_IF_ERROR(ReadString(r, "resource", p, Presence::kRequired, &resource));
    TOPOSCHED_RETURN_IF_ERROR(ReadString(r, "uid", p, Presence::kRequired, &uid));
    if (group.empty() && resource == "pods") {
      c->reserved_pod_uids.push_back(std::move(uid));
    } else {
      ++c->reserved_other;
    }
  }
  return Status::Ok();
}

Status ReadTemplateImpl(const json& t, DraClaimTemplate* out) {
  TOPOSCHED_RETURN_IF_ERROR(
      ReadMeta(t, false, &out->name, &out->namespace_, nullptr, &out->resource_version, nullptr));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* spec, ReadObject(t, "spec", "", Presence::kRequired));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* inner, ReadObject(*spec, "spec", "spec", Presence::kRequired));
  return ReadClaimSpec(*inner, "spec.spec", &out->spec);
}

// ---- DeviceClass selectors ----

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits on && outside string literals and parentheses; nullopt when quotes or parentheses do
// not balance.
std::optional<std::vector<std::string_view>> SplitAnd(std::string_view e) {
  std::vector<std::string_view> terms;
  int depth = 0;
  char quote = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    const char c = e[i];
    if (quote != 0) {
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      if (--depth < 0) return std::nullopt;
    } else if (c == '&' && depth == 0 && i + 1 < e.size() && e[i + 1] == '&') {
      terms.push_back(Trim(e.substr(start, i - start)));
      start = i + 2;
      ++i;
    }
  }
  if (quote != 0 || depth != 0) return std::nullopt;
  terms.push_back(Trim(e.substr(start)));
  return terms;
}

// A small cursor over one term.
struct Cursor {
  std::string_view s;
  void Space() { s = Trim(s); }
  bool Eat(std::string_view token) {
    Space();
    if (!s.starts_with(token)) return false;
    s.remove_prefix(token.size());
    return true;
  }
  // A quoted literal without escapes (driver names and attribute values need none).
  std::optional<std::string> Quoted() {
    Space();
    if (s.empty() || (s.front() != '"' && s.front() != '\'')) return std::nullopt;
    const char q = s.front();
    const std::size_t end = s.find(q, 1);
    if (end == std::string_view::npos) return std::nullopt;
    const std::string_view body = s.substr(1, end - 1);
    if (body.find('\\') != std::string_view::npos) return std::nullopt;
    s.remove_prefix(end + 1);
    return std::string(body);
  }
  std::optional<std::string> Identifier() {
    Space();
    std::size_t n = 0;
    while (n < s.size() && (std::isalnum(static_cast<unsigned char>(s[n])) || s[n] == '_')) ++n;
    if (n == 0 || std::isdigit(static_cast<unsigned char>(s[0]))) return std::nullopt;
    std::string out(s.substr(0, n));
    s.remove_prefix(n);
    return out;
  }
  bool Done() {
    Space();
    return s.empty();
  }
};

// `device.driver == "X"` or `"X" == device.driver`.
std::optional<std::string> DriverTerm(std::string_view term) {
  Cursor c{term};
  if (c.Eat("device.driver")) {
    if (!c.Eat("==")) return std::nullopt;
    std::optional<std::string> v = c.Quoted();
    return v && c.Done() ? v : std::nullopt;
  }
  std::optional<std::string> v = c.Quoted();
  if (!v || !c.Eat("==") || !c.Eat("device.driver") || !c.Done()) return std::nullopt;
  return v;
}

// `device.attributes["domain"].name == literal`.
std::optional<DraAttributeEquality> AttributeTerm(std::string_view term) {
  Cursor c{term};
  if (!c.Eat("device.attributes") || !c.Eat("[")) return std::nullopt;
  std::optional<std::string> domain = c.Quoted();
  if (!domain || domain->empty() || !c.Eat("]") || !c.Eat(".")) return std::nullopt;
  std::optional<std::string> name = c.Identifier();
  if (!name || !c.Eat("==")) return std::nullopt;
  DraAttributeEquality eq;
  eq.attribute = *domain + "/" + *name;
  c.Space();
  if (std::optional<std::string> quoted = c.Quoted()) {
    eq.value = std::move(*quoted);
    eq.is_string = true;
  } else {
    std::size_t n = 0;
    while (n < c.s.size() && (std::isalnum(static_cast<unsigned char>(c.s[n])) || c.s[n] == '-')) ++n;
    eq.value = std::string(c.s.substr(0, n));
    c.s.remove_prefix(n);
    const bool literal =
        eq.value == "true" || eq.value == "false" || ParseInt<std::int64_t>(eq.value).has_value();
    if (!literal) return std::nullopt;
  }
  if (!c.Done()) return std::nullopt;
  return eq;
}

Status ReadDeviceClassImpl(const json& object, DeviceClassInfo* out) {
  TOPOSCHED_RETURN_IF_ERROR(
      ReadMeta(object, false, &out->name, nullptr, nullptr, &out->resource_version, nullptr));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* spec, ReadObject(object, "spec", "", Presence::kOptional));
  const json* selectors = nullptr;
  if (spec != nullptr) {
    TOPOSCHED_ASSIGN_OR_RETURN(selectors, ReadBoundedArray(*spec, "selectors", "spec", kDraSelectorsMaxSize));
  }
  if (selectors == nullptr || selectors->empty()) {
    out->reason = "no selectors: the class matches devices of every driver";
    return Status::Ok();
  }
  std::string driver;
  for (std::size_t i = 0; i < selectors->size(); ++i) {
    const json& s = (*selectors)[i];
    const std::string p = Element("spec.selectors", i);
    if (!s.is_object()) return Expected(p, "an object", s);
    TOPOSCHED_ASSIGN_OR_RETURN(const json* cel, ReadObject(s, "cel", p, Presence::kOptional));
    if (cel == nullptr) {
      out->reason = p + " is not a CEL selector";
      return Status::Ok();
    }
    std::string expression;
    TOPOSCHED_RETURN_IF_ERROR(
        ReadString(*cel, "expression", Child(p, "cel"), Presence::kRequired, &expression));
    const std::optional<std::vector<std::string_view>> terms = SplitAnd(expression);
    if (!terms) {
      out->reason = p + ": quotes or parentheses do not balance";
      return Status::Ok();
    }
    for (std::string_view term : *terms) {
      if (std::optional<std::string> d = DriverTerm(term)) {
        if (!driver.empty() && driver != *d) {
          out->reason = "selects two drivers, " + Quote(driver) + " and " + Quote(*d);
          return Status::Ok();
        }
        driver = std::move(*d);
      } else if (std::optional<DraAttributeEquality> eq = AttributeTerm(term)) {
        out->clauses.push_back(std::move(*eq));
      } else {
        out->reason =
            p + ": " + Quote(term) +
            " is neither device.driver == \"X\" nor an attribute equality: toposched does not evaluate "
            "CEL";
        out->clauses.clear();
        return Status::Ok();
      }
    }
  }
  if (driver.empty()) {
    out->reason = "no selector names a driver (device.driver == \"X\")";
    out->clauses.clear();
    return Status::Ok();
  }
  out->driver = std::move(driver);
  return Status::Ok();
}

template <typename T, typename F>
Result<T> Guarded(const char* what, F&& read) {
  try {
    T v;
    if (Status s = read(&v); !s.ok()) return s.error().WithContext(what);
    return v;
  } catch (const std::exception& e) {
    return Error(std::string(what) + ": " + e.what());
  }
}

// ---- mapping ----

bool IsMigType(std::string_view type) {
  // "mig" (kubernetes-sigs/dra-driver-nvidia-gpu mig.go CommonAttributesMig); "migdyn" for the
  // dynamic MIG devices and "migstatic" (a name a maintainer's branch used) in
  // cmd/gpu-kubelet-plugin/types.go of NVIDIA/k8s-dra-driver-gpu and jgehrcke/k8s-dra-driver-gpu.
  return type == "mig" || type == "migdyn" || type == "migstatic";
}

struct Address {
  std::string bus_id;  // normalized
  std::string reason;  // when it cannot be read
};

Address AddressOf(const DraDevice& d) {
  Address out;
  std::string from;
  for (std::string_view name :
       {kDraPciBusIdAttribute, kNvidiaPcieBusIdAttribute, kDranetPciAddressAttribute}) {
    const auto it = d.attributes.find(std::string(name));
    if (it == d.attributes.end()) continue;
    const std::string* text = std::get_if<std::string>(&it->second);
    const std::string normalized = text != nullptr ? NormalizePciBusId(*text) : std::string();
    if (normalized.empty()) {
      out.reason =
          std::string(name) + " is not a PCI address" + (text != nullptr ? " (" + Quote(*text) + ")" : "");
      out.bus_id.clear();
      return out;
    }
    if (!out.bus_id.empty() && out.bus_id != normalized) {
      out.reason = from + " says " + out.bus_id + " but " + std::string(name) + " says " + normalized;
      out.bus_id.clear();
      return out;
    }
    if (out.bus_id.empty()) from = name;
    out.bus_id = normalized;
  }
  if (out.bus_id.empty()) {
    out.reason = "no PCI address (" + std::string(kDraPciBusIdAttribute) + ", " +
                 std::string(kNvidiaPcieBusIdAttribute) + " or " + std::string(kDranetPciAddressAttribute) +
                 "): not a PCI device toposched can place";
  }
  return out;
}

std::string Names(const NodeTopology& t, const std::vector<int>& nics) {
  std::string out;
  for (int n : nics)
    out += (out.empty() ? "" : ", ") + Quote(t.nics[static_cast<std::size_t>(n)].DisplayName());
  return out;
}

void MapNic(const DraDevice& d, const NodeTopology& t, const std::vector<int>& candidates,
            DraDeviceMapping* m) {
  m->kind = DraDeviceKind::kNic;
  if (candidates.size() == 1) {
    m->index = candidates[0];
    return;
  }
  const std::string* rdma = DraStringAttribute(d, kDranetRdmaDeviceAttribute);
  const std::string* ifname = DraStringAttribute(d, kDranetIfNameAttribute);
  std::vector<int> named;
  for (int n : candidates) {
    const Nic& nic = t.nics[static_cast<std::size_t>(n)];
    const bool by_rdma = rdma != nullptr && !rdma->empty() && *rdma == nic.name;
    bool by_ifname = ifname != nullptr && !ifname->empty() && *ifname == nic.name;
    for (const std::string& netdev : nic.netdevs)
      by_ifname = by_ifname || (ifname != nullptr && *ifname == netdev);
    if (by_rdma || by_ifname) named.push_back(n);
  }
  if (named.size() == 1) {
    m->index = named[0];
    return;
  }
  m->reason = "PCI address " + m->pci_bus_id + " is shared by NICs " + Names(t, candidates) +
              " and the device's " + std::string(kDranetRdmaDeviceAttribute) + "/" +
              std::string(kDranetIfNameAttribute) + " (" + (rdma != nullptr ? Quote(*rdma) : "none") + "/" +
              (ifname != nullptr ? Quote(*ifname) : "none") + ") names " +
              (named.empty() ? "none of them" : "several of them");
}

DraDeviceMapping MapDevice(const DraSlice& slice, const DraDevice& d, const NodeTopology& t,
                           const DraDrivers& drivers) {
  DraDeviceMapping m;
  m.device = d.name;
  const bool gpu_driver = drivers.gpu.contains(slice.driver);
  const bool nic_driver = drivers.nic.contains(slice.driver);
  if (gpu_driver) m.kind = DraDeviceKind::kGpu;
  if (nic_driver) m.kind = DraDeviceKind::kNic;
  const std::string type_attribute = slice.driver + "/type";
  const std::string* type = gpu_driver ? DraStringAttribute(d, type_attribute) : nullptr;
  if (type != nullptr && IsMigType(*type)) {
    m.reason = type_attribute + " is " + Quote(*type) + ": a MIG device, a slice of a GPU, not a whole GPU";
    return m;
  }
  if (type != nullptr && *type != "gpu" && *type != "vfio") {
    m.reason = type_attribute + " is " + Quote(*type) + ", not a whole GPU (gpu or vfio)";
    return m;
  }
  Address address = AddressOf(d);
  if (address.bus_id.empty()) {
    m.reason = std::move(address.reason);
    return m;
  }
  m.pci_bus_id = address.bus_id;
  int gpu = -1;
  for (const Gpu& g : t.gpus) {
    if (g.pci_bus_id == m.pci_bus_id) gpu = g.index;
  }
  std::vector<int> nics;
  for (std::size_t n = 0; n < t.nics.size(); ++n) {
    if (t.nics[n].pci_bus_id == m.pci_bus_id) nics.push_back(static_cast<int>(n));
  }
  const std::string where = "PCI address " + m.pci_bus_id;
  if (gpu_driver || (!nic_driver && gpu >= 0)) {
    m.kind = DraDeviceKind::kGpu;
    if (gpu >= 0) {
      m.index = gpu;
    } else {
      m.reason = where + (nics.empty() ? " is no GPU of the node" : " is a NIC of the node, not a GPU");
    }
    return m;
  }
  if (!nics.empty()) {
    MapNic(d, t, nics, &m);
    return m;
  }
  m.reason = where + (gpu >= 0 ? " is a GPU of the node, not a NIC" : " is no GPU or NIC of the node");
  return m;
}

// ---- demand ----

bool IsWholeGpuClause(const DraAttributeEquality& c, const std::string& driver) {
  return c.attribute == driver + "/type" && c.is_string && c.value == "gpu";
}

// What one selection counts, or a reason it cannot be counted.
Result<DraDeviceCount> CountOf(const DraDeviceSelection& s, const std::string& where,
                               const std::map<std::string, DeviceClassInfo>& classes,
                               const DraDrivers& drivers) {
  if (s.unknown_selectors > 0) return Error(where + " has selectors of a kind toposched does not know");
  if (s.mode == DraAllocationMode::kAll) return Error(where + " asks for All devices of its class");
  if (s.admin_access) return Error(where + " asks for admin access, which takes no device");
  const auto it = classes.find(s.device_class);
  if (it == classes.end()) return Error(where + ": device class " + Quote(s.device_class) + " is unknown");
  const DeviceClassInfo& c = it->second;
  if (c.driver.empty()) return Error(where + ": device class " + Quote(c.name) + ": " + c.reason);
  const bool gpu = drivers.gpu.contains(c.driver);
  const bool nic = drivers.nic.contains(c.driver);
  if (!gpu && !nic) {
    return Error(where + ": device class " + Quote(c.name) + " selects driver " + Quote(c.driver) +
                 ", neither a GPU nor a NIC driver");
  }
  // The equalities toposched can tell (a whole GPU of the GPU driver, an RDMA NIC of DRANET), in
  // the class's selector or in the request's own; any other CEL is not evaluated.
  const auto known = [&](const DraAttributeEquality& clause) {
    return (gpu && IsWholeGpuClause(clause, c.driver)) ||
           (nic && clause.attribute == kDranetRdmaAttribute && !clause.is_string && clause.value == "true");
  };
  for (const DraAttributeEquality& clause : c.clauses) {
    if (!known(clause)) {
      return Error(where + ": device class " + Quote(c.name) + " also requires " + clause.attribute +
                   " == " + (clause.is_string ? Quote(clause.value) : clause.value) +
                   ", which toposched does not evaluate");
    }
  }
  for (const std::string& expression : s.cel_selectors) {
    const std::optional<DraAttributeEquality> clause = AttributeTerm(expression);
    if (!clause || !known(*clause)) {
      return Error(where + " has a CEL selector toposched does not evaluate (" + Quote(expression) + ")");
    }
  }
  const int count = static_cast<int>(s.count);
  return gpu ? DraDeviceCount{count, 0} : DraDeviceCount{0, count};
}

}  // namespace

Result<DraSlice> ReadResourceSlice(const nlohmann::json& slice) {
  return Guarded<DraSlice>("ResourceSlice", [&](DraSlice* s) { return ReadSliceImpl(slice, s); });
}

Result<DraClaim> ReadResourceClaim(const nlohmann::json& claim) {
  return Guarded<DraClaim>("ResourceClaim", [&](DraClaim* c) { return ReadClaimImpl(claim, c); });
}

Result<DraClaimTemplate> ReadResourceClaimTemplate(const nlohmann::json& claim_template) {
  return Guarded<DraClaimTemplate>("ResourceClaimTemplate",
                                   [&](DraClaimTemplate* t) { return ReadTemplateImpl(claim_template, t); });
}

Result<DeviceClassInfo> ReadDeviceClass(const nlohmann::json& device_class) {
  return Guarded<DeviceClassInfo>("DeviceClass",
                                  [&](DeviceClassInfo* c) { return ReadDeviceClassImpl(device_class, c); });
}

const std::string* DraStringAttribute(const DraDevice& device, std::string_view name) {
  const auto it = device.attributes.find(std::string(name));
  return it == device.attributes.end() ? nullptr : std::get_if<std::string>(&it->second);
}

std::optional<std::int64_t> DraIntAttribute(const DraDevice& device, std::string_view name) {
  const auto it = device.attributes.find(std::string(name));
  if (it == device.attributes.end()) return std::nullopt;
  if (const auto* i = std::get_if<std::int64_t>(&it->second)) return *i;
  if (const auto* list = std::get_if<std::vector<std::int64_t>>(&it->second);
      list != nullptr && !list->empty()) {
    return list->front();
  }
  return std::nullopt;
}

std::optional<bool> DraBoolAttribute(const DraDevice& device, std::string_view name) {
  const auto it = device.attributes.find(std::string(name));
  if (it == device.attributes.end()) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&it->second)) return *b;
  return std::nullopt;
}

std::vector<DraDeviceMapping> MapDraDevices(const DraSlice& slice, const NodeTopology& topology,
                                            const DraDrivers& drivers) {
  std::vector<DraDeviceMapping> out;
  out.reserve(slice.devices.size());
  for (const DraDevice& d : slice.devices) out.push_back(MapDevice(slice, d, topology, drivers));
  return out;
}

DraDeviceMapping MapDraDevice(const DraSlice& slice, const DraDevice& device, const NodeTopology& topology,
                              const DraDrivers& drivers) {
  return MapDevice(slice, device, topology, drivers);
}

DraDemand DemandOf(const DraClaimSpec& spec, const std::map<std::string, DeviceClassInfo>& classes,
                   const DraDrivers& drivers) {
  DraDemand demand;
  auto fail = [&](const std::string& reason) {
    if (demand.evaluable) {
      demand.evaluable = false;
      demand.reason = reason;
    }
  };
  std::set<std::string> with_devices;  // requests that ask for GPUs or NICs
  for (const DraRequest& r : spec.requests) {
    DraRequestDemand rd;
    rd.request = r.name;
    const std::string where = "request " + Quote(r.name);
    if (r.exactly) {
      Result<DraDeviceCount> c = CountOf(*r.exactly, where, classes, drivers);
      if (!c.ok()) fail(c.error().message());
      rd.options.push_back(c.ok() ? *c : DraDeviceCount{});
    }
    for (const DraSubRequest& sub : r.first_available) {
      rd.subrequests.push_back(sub.name);
      Result<DraDeviceCount> c = CountOf(sub.selection, where + "/" + Quote(sub.name), classes, drivers);
      // Only the first alternative must be evaluable: a later one is tried by the scheduler
      // after it, and the caller sees every option's count (0/0 for one it cannot count).
      if (!c.ok() && rd.options.empty()) fail(c.error().message());
      rd.options.push_back(c.ok() ? *c : DraDeviceCount{});
    }
    if (!rd.options.empty()) {
      demand.total.gpus += rd.options.front().gpus;
      demand.total.nics += rd.options.front().nics;
      if (rd.options.front().gpus + rd.options.front().nics > 0) with_devices.insert(r.name);
    }
    demand.requests.push_back(std::move(rd));
  }
  for (const DraConstraint& c : spec.constraints) {
    if (!c.distinct_attribute.empty()) {
      fail("constraint distinctAttribute " + Quote(c.distinct_attribute) + " is not evaluated by toposched");
      continue;
    }
    const bool root = c.match_attribute == kDraPcieRootAttribute;
    const bool numa = c.match_attribute == kDraNumaNodeAttribute;
    if (!root && !numa) {
      fail("constraint matchAttribute " + Quote(c.match_attribute) + " is neither " +
           std::string(kDraPcieRootAttribute) + " nor " + std::string(kDraNumaNodeAttribute));
      continue;
    }
    // A request is named by itself or, for its firstAvailable alternatives, "request/sub".
    std::set<std::string> covered;
    for (const std::string& name : c.requests) covered.insert(name.substr(0, name.find('/')));
    bool all = true;
    if (!c.requests.empty()) {
      for (const std::string& r : with_devices) all = all && covered.contains(r);
    }
    if (!all) {
      fail("constraint matchAttribute " + Quote(c.match_attribute) + " covers only some of the requests");
      continue;
    }
    (root ? demand.same_pcie_root : demand.same_numa_node) = true;
  }
  return demand;
}

}  // namespace toposched::kube
