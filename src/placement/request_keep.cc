// The keep readers of request_keep.h: nlohmann's parse with a filter that keeps only the fields
// ParsePodRequest reads, and the faster simdjson pass that keeps the same fields or gives up.
// They must agree (the pod_request fuzz target checks it); request.cc reads what they keep.
#include "request_keep.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <simdjson.h>
#include <nlohmann/json.hpp>

namespace toposched {
namespace {

using nlohmann::json;

// The deepest value the parser keeps is spec.containers[i].resources.limits.<name> (depth 6);
// everything deeper is dropped while parsing, which bounds the memory a hostile document costs.
constexpr int kMaxKeptDepth = 6;

// ---------------------------------------------------------------------------------------------
// Parsing with a filter: only the fields read below are kept, so a 4 MiB pod full of
// managedFields, volumes or hostile nesting costs little more than its bytes.

// The path of the value an event belongs to: slot[d] is the key at depth d, or "[]" for an
// array element.
class KeepFilter {
 public:
  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::key:
        if (depth > kMaxKeptDepth) return false;
        Set(depth, parsed.is_string() ? parsed.get_ref<const std::string&>() : std::string());
        return Wanted(depth);
      case json::parse_event_t::array_start:
        // Elements of this array are at depth + 1 and have no key.
        if (depth + 1 <= kMaxKeptDepth) Set(depth + 1, "[]");
        return depth <= kMaxKeptDepth;
      case json::parse_event_t::object_start:
        return depth <= kMaxKeptDepth;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
      case json::parse_event_t::value:
        return true;
    }
    return true;
  }

 private:
  void Set(int depth, const std::string& s) {
    const auto d = static_cast<std::size_t>(depth);
    if (slots_.size() <= d) slots_.resize(d + 1);
    slots_[d] = s;
  }
  const std::string& At(int depth) const {
    static const std::string kNone;
    const auto d = static_cast<std::size_t>(depth);
    return d < slots_.size() ? slots_[d] : kNone;
  }

  // Whether the key just read at `depth` (path slots_[1..depth]) leads to a field we read.
  bool Wanted(int depth) const {
    const std::string& k = At(depth);
    switch (depth) {
      case 1:
        return k == "kind" || k == "metadata" || k == "spec";
      case 2:
        if (At(1) == "metadata") {
          return k == "name" || k == "namespace" || k == "uid" || k == "labels" || k == "annotations";
        }
        return At(1) == "spec" &&
               (k == "containers" || k == "initContainers" || k == "overhead" || k == "resourceClaims");
      case 3:
        // A label or annotation, or a resource of the pod's overhead (RuntimeClass).
        return (At(1) == "metadata" && (At(2) == "labels" || At(2) == "annotations")) ||
               (At(1) == "spec" && At(2) == "overhead");
      default:
        break;
    }
    // spec.resourceClaims[i].<field> (DRA: the claim or template each entry names).
    if (At(1) == "spec" && At(2) == "resourceClaims" && At(3) == "[]" && depth == 4) {
      return k == "name" || k == "resourceClaimName" || k == "resourceClaimTemplateName";
    }
    // spec.<containers>[i].<field>...
    if (At(1) != "spec" || (At(2) != "containers" && At(2) != "initContainers") || At(3) != "[]") {
      return false;
    }
    if (depth == 4) return k == "name" || k == "restartPolicy" || k == "resources";
    if (At(4) != "resources") return false;
    if (depth == 5) return k == "requests" || k == "limits";
    return depth == 6;  // a resource name
  }

  std::vector<std::string> slots_;
};

}  // namespace

namespace request_keep {

json ByFilter(std::string_view text) {
  return json::parse(text.begin(), text.end(), KeepFilter());
}

namespace {

namespace dom = simdjson::dom;

// The element as an object (array), held in a local: a range-for over get_object()'s result
// would iterate a temporary that is gone.
bool AsObject(dom::element v, dom::object& out) {
  return v.get(out) == simdjson::SUCCESS;
}
bool AsArray(dom::element v, dom::array& out) {
  return v.get(out) == simdjson::SUCCESS;
}

// A kept leaf: a string or null (names, labels, annotations), or for a resource quantity also
// a number, typed as nlohmann types it (a non-negative integer unsigned). False: another type.
bool KeepLeaf(dom::element v, bool number_ok, json& out) {
  switch (v.type()) {
    case dom::element_type::STRING:
      out = std::string(v.get_string().value_unsafe());
      return true;
    case dom::element_type::NULL_VALUE:
      out = nullptr;
      return true;
    case dom::element_type::INT64: {
      if (!number_ok) return false;
      const std::int64_t n = v.get_int64().value_unsafe();
      if (n >= 0) {
        out = static_cast<std::uint64_t>(n);
      } else {
        out = n;
      }
      return true;
    }
    case dom::element_type::UINT64:
      if (!number_ok) return false;
      out = v.get_uint64().value_unsafe();
      return true;
    case dom::element_type::DOUBLE:
      if (!number_ok) return false;
      out = v.get_double().value_unsafe();
      return true;
    default:
      return false;
  }
}

// An object, or null where `null_ok`, of which `field(key, value, out)` keeps what it wants
// (returning false for a field of another type than a Pod gives it). False: another type.
template <typename Field>
bool KeepObject(dom::element v, bool null_ok, json& out, Field&& field) {
  if (null_ok && v.is_null()) {
    out = nullptr;
    return true;
  }
  dom::object object;
  if (!AsObject(v, object)) return false;
  out = json::object();
  for (dom::key_value_pair f : object) {
    if (!field(f.key, f.value, out)) return false;
  }
  return true;
}

// An object of kept leaves (labels, annotations, requests, limits), or null.
bool KeepMap(dom::element v, bool number_ok, json& out) {
  return KeepObject(v, true, out, [number_ok](std::string_view key, dom::element value, json& o) {
    return KeepLeaf(value, number_ok, o[std::string(key)]);
  });
}

// A container: its name, restart policy and resources' requests and limits.
bool KeepContainer(dom::element v, json& out) {
  return KeepObject(v, false, out, [](std::string_view key, dom::element value, json& o) {
    if (key == "name" || key == "restartPolicy") return KeepLeaf(value, false, o[std::string(key)]);
    if (key != "resources") return true;
    return KeepObject(value, true, o["resources"], [](std::string_view k, dom::element r, json& resources) {
      return (k != "requests" && k != "limits") || KeepMap(r, true, resources[std::string(k)]);
    });
  });
}

bool KeepContainers(dom::element v, json& out) {
  if (v.is_null()) {
    out = nullptr;
    return true;
  }
  dom::array containers;
  if (!AsArray(v, containers)) return false;
  out = json::array();
  for (dom::element c : containers) {
    json kept;
    if (!KeepContainer(c, kept)) return false;
    out.push_back(std::move(kept));
  }
  return true;
}

// spec.resourceClaims: each entry's name and the claim or template it names, or null.
bool KeepResourceClaims(dom::element v, json& out) {
  if (v.is_null()) {
    out = nullptr;
    return true;
  }
  dom::array claims;
  if (!AsArray(v, claims)) return false;
  out = json::array();
  for (dom::element c : claims) {
    json kept;
    const bool ok = KeepObject(c, false, kept, [](std::string_view key, dom::element value, json& o) {
      if (key == "name" || key == "resourceClaimName" || key == "resourceClaimTemplateName") {
        return KeepLeaf(value, false, o[std::string(key)]);
      }
      return true;
    });
    if (!ok) return false;
    out.push_back(std::move(kept));
  }
  return true;
}

}  // namespace

std::optional<json> BySimdjson(std::string_view text) {
  // The thread's parser keeps buffers sized to the largest document it read (its tape can take
  // several times the text): a large pod (up to kMaxPodJsonBytes; real pods are a few KB, those
  // with big managedFields tens of KB) goes to nlohmann's filter, which keeps nothing.
  if (text.size() > kMaxBytes) return std::nullopt;
  thread_local dom::parser parser;
  dom::element root;
  if (parser.parse(text.data(), text.size()).get(root) != simdjson::SUCCESS) return std::nullopt;
  json out;
  const bool kept = KeepObject(root, false, out, [](std::string_view key, dom::element value, json& pod) {
    if (key == "kind") return KeepLeaf(value, false, pod["kind"]);
    if (key == "metadata") {
      return KeepObject(value, true, pod["metadata"], [](std::string_view k, dom::element m, json& metadata) {
        if (k == "name" || k == "namespace" || k == "uid")
          return KeepLeaf(m, false, metadata[std::string(k)]);
        if (k == "labels" || k == "annotations") return KeepMap(m, false, metadata[std::string(k)]);
        return true;
      });
    }
    if (key == "spec") {
      return KeepObject(value, true, pod["spec"], [](std::string_view k, dom::element m, json& spec) {
        if (k == "overhead") return KeepMap(m, true, spec["overhead"]);
        if (k == "resourceClaims") return KeepResourceClaims(m, spec["resourceClaims"]);
        return (k != "containers" && k != "initContainers") || KeepContainers(m, spec[std::string(k)]);
      });
    }
    return true;
  });
  if (!kept) return std::nullopt;
  return out;
}

}  // namespace request_keep

}  // namespace toposched
