#include "testing/fake_apiserver.h"

#include "../../src/common/json_errors.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include "toposched/common/text.h"

namespace toposched::testing {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A watch waiting for events looks this often whether its client has hung up, so a client that
// walks away frees its watch (and open_watches() drops) without the server having to write.
constexpr std::chrono::milliseconds kPeerCheckInterval{50};
// JSON bodies nested deeper than this are refused before parsing (the parser recurses).
constexpr int kMaxJsonDepth = 256;

// ---------------------------------------------------------------------------------------------
// Resources.

enum class StatusOnCreate : std::uint8_t { kKeep, kPodPending, kDrop };

struct ResourceType {
  std::string_view group, version, plural, kind;
  bool namespaced;
  bool status_subresource;  // object writes keep status; /status writes change only status
  StatusOnCreate status_on_create;
};

constexpr ResourceType kResources[] = {
    {"", "v1", "pods", "Pod", true, true, StatusOnCreate::kPodPending},
    {"", "v1", "nodes", "Node", false, true, StatusOnCreate::kKeep},
    {"", "v1", "events", "Event", true, false, StatusOnCreate::kKeep},
    {"events.k8s.io", "v1", "events", "Event", true, false, StatusOnCreate::kKeep},
    {"coordination.k8s.io", "v1", "leases", "Lease", true, false, StatusOnCreate::kKeep},
    {"toposched.io", "v1alpha1", "nodetopologies", "NodeTopology", false, true, StatusOnCreate::kDrop},
    {"topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", false, true, StatusOnCreate::kKeep},
    {"resource.k8s.io", "v1", "resourceslices", "ResourceSlice", false, false, StatusOnCreate::kKeep},
    {"resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", true, true, StatusOnCreate::kKeep},
    {"resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", true, false,
     StatusOnCreate::kKeep},
    {"resource.k8s.io", "v1", "deviceclasses", "DeviceClass", false, false, StatusOnCreate::kKeep},
};
constexpr std::size_t kResourceCount = std::size(kResources);

bool IsCorePods(const ResourceType& t) {
  return t.group.empty() && t.plural == "pods";
}

std::string ApiVersion(const ResourceType& t) {
  return t.group.empty() ? std::string(t.version) : std::string(t.group) + "/" + std::string(t.version);
}

// How kube-apiserver names a resource in messages: "pods", "pods/binding",
// "nodetopologies.toposched.io".
std::string Qualified(const ResourceType& t, std::string_view subresource = {}) {
  std::string s(t.plural);
  if (!subresource.empty()) s.append("/").append(subresource);
  if (!t.group.empty()) s.append(".").append(t.group);
  return s;
}

// Field selectors the real server accepts for each resource (others are a 400 there too).
bool FieldSupported(const ResourceType& t, std::string_view field) {
  if (field == "metadata.name" || field == "metadata.namespace") return true;
  if (IsCorePods(t)) {
    return field == "spec.nodeName" || field == "status.phase" || field == "spec.schedulerName" ||
           field == "spec.restartPolicy" || field == "spec.serviceAccountName" || field == "status.podIP" ||
           field == "status.nominatedNodeName";
  }
  if (t.group.empty() && t.plural == "nodes") return field == "spec.unschedulable";
  if (t.group.empty() && t.plural == "events") {
    return field.starts_with("involvedObject.") || field == "reason" || field == "type" ||
           field == "reportingComponent";
  }
  return false;
}

// A request path, resolved: which resource, namespace, object and subresource.
struct Route {
  const ResourceType* type = nullptr;
  std::string ns;           // namespaced resources: the namespace, "" = all namespaces
  std::string name;         // "" = the collection
  std::string subresource;  // "", "status" or "binding"

  std::size_t index() const { return static_cast<std::size_t>(type - kResources); }
  bool collection() const { return name.empty(); }
  std::string key_prefix() const { return ns.empty() ? std::string() : ns + "/"; }
};

// Store keys sort like etcd's (namespace, then name), so paging and all-namespace lists follow
// the real order. Names never contain '/' (refused on create).
std::string StoreKey(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoding; in query strings '+' is a space (as Go's url.ParseQuery has it).
bool PercentDecode(std::string_view in, bool plus_is_space, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (in[i] == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(in[i]);
    }
  }
  return true;
}

bool ParseUint(std::string_view s, std::uint64_t& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::optional<Route> ParseRoute(std::string_view path) {
  if (path.empty() || path.front() != '/') return std::nullopt;
  std::vector<std::string> seg;
  for (std::string_view part : Split(path.substr(1), '/')) {
    std::string decoded;
    if (part.empty() || !PercentDecode(part, false, decoded) || decoded.empty()) return std::nullopt;
    seg.push_back(std::move(decoded));
  }
  std::string group, version;
  std::size_t i = 0;
  if (seg.size() >= 2 && seg[0] == "api") {
    version = seg[1];
    i = 2;
  } else if (seg.size() >= 3 && seg[0] == "apis") {
    group = seg[1];
    version = seg[2];
    i = 3;
  } else {
    return std::nullopt;
  }
  Route route;
  bool in_namespace = false;
  if (seg.size() >= i + 3 && seg[i] == "namespaces") {
    route.ns = seg[i + 1];
    in_namespace = true;
    i += 2;
  }
  if (i >= seg.size()) return std::nullopt;
  for (const ResourceType& t : kResources) {
    if (t.group == group && t.version == version && t.plural == seg[i]) route.type = &t;
  }
  if (route.type == nullptr || (in_namespace && !route.type->namespaced)) return std::nullopt;
  ++i;
  if (i < seg.size()) route.name = seg[i++];
  if (i < seg.size()) route.subresource = seg[i++];
  if (i < seg.size()) return std::nullopt;
  // A namespaced object is only addressed inside its namespace; "/api/v1/pods" is a collection.
  if (route.type->namespaced && !in_namespace && !route.name.empty()) return std::nullopt;
  if (!route.subresource.empty() && !(route.subresource == "status" && route.type->status_subresource) &&
      !(route.subresource == "binding" && IsCorePods(*route.type))) {
    return std::nullopt;
  }
  return route;
}

// ---------------------------------------------------------------------------------------------
// Object helpers. Every object in the store has an object "metadata" with string fields.

std::string MetaString(const json& object, const char* field) {
  if (!object.is_object()) return {};
  const auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return {};
  const auto value = meta->find(field);
  return value != meta->end() && value->is_string() ? value->get<std::string>() : std::string();
}

// "" when `object` has the shape the store relies on, else what is wrong with it.
std::string CheckObjectShape(const json& object) {
  if (!object.is_object()) return "the object must be a JSON object";
  const auto meta = object.find("metadata");
  if (meta == object.end() || meta->is_null()) return {};
  if (!meta->is_object()) return "metadata must be an object";
  for (const char* field :
       {"name", "namespace", "generateName", "resourceVersion", "uid", "creationTimestamp"}) {
    const auto value = meta->find(field);
    if (value != meta->end() && !value->is_string() && !value->is_null()) {
      return std::string("metadata.") + field + " must be a string";
    }
  }
  for (const char* field : {"labels", "annotations"}) {
    const auto map = meta->find(field);
    if (map == meta->end() || map->is_null()) continue;
    if (!map->is_object()) return std::string("metadata.") + field + " must be an object";
    for (const auto& [key, value] : map->items()) {
      if (!value.is_string()) return std::string("metadata.") + field + "." + key + " must be a string";
    }
  }
  const std::string name = MetaString(object, "name");
  if (name.find('/') != std::string::npos || name == "." || name == "..") {
    return "metadata.name: Invalid value: \"" + name + "\": may not contain '/'";
  }
  return {};
}

// The value a field selector compares: the field as a string, "" when absent.
std::string FieldValue(const json& object, std::string_view field) {
  const json* node = &object;
  for (std::string_view part : Split(field, '.')) {
    if (!node->is_object()) return {};
    const auto next = node->find(std::string(part));
    if (next == node->end()) {
      return field == "spec.unschedulable" ? "false" : "";
    }
    node = &*next;
  }
  if (node->is_string()) return node->get<std::string>();
  if (node->is_null()) return {};
  return node->dump();
}

std::string NowRfc3339() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<json> ParseJson(std::string_view text, std::string& error) {
  // The parser recurses per level; a body of 8 MiB of '[' must not exhaust the stack.
  if (json_errors::ScanShape(text).max_depth > kMaxJsonDepth) {
    error = "the request body is nested too deeply";
    return std::nullopt;
  }
  json parsed = json::parse(text.begin(), text.end(), nullptr, false);
  if (parsed.is_discarded()) {
    error = "the request body is not valid JSON";
    return std::nullopt;
  }
  return parsed;
}

// ---------------------------------------------------------------------------------------------
// Selectors.

struct LabelRequirement {
  enum class Op : std::uint8_t { kEquals, kNotEquals, kIn, kNotIn, kExists, kNotExists };
  Op op = Op::kExists;
  std::string key;
  std::vector<std::string> values;
};

struct FieldRequirement {
  std::string field;
  bool equals = true;
  std::string value;
};

struct Selector {
  std::vector<LabelRequirement> labels;
  std::vector<FieldRequirement> fields;

  bool empty() const { return labels.empty() && fields.empty(); }

  bool Matches(const json& object) const {
    const json* labels_map = nullptr;
    if (const auto meta = object.find("metadata"); meta != object.end() && meta->is_object()) {
      if (const auto l = meta->find("labels"); l != meta->end() && l->is_object()) labels_map = &*l;
    }
    for (const LabelRequirement& r : labels) {
      std::optional<std::string> value;
      if (labels_map != nullptr) {
        if (const auto v = labels_map->find(r.key); v != labels_map->end() && v->is_string()) {
          value = v->get<std::string>();
        }
      }
      const bool listed = value && std::find(r.values.begin(), r.values.end(), *value) != r.values.end();
      bool ok = false;
      switch (r.op) {
        case LabelRequirement::Op::kEquals:
        case LabelRequirement::Op::kIn:
          ok = listed;
          break;
        case LabelRequirement::Op::kNotEquals:
        case LabelRequirement::Op::kNotIn:
          ok = !listed;
          break;
        case LabelRequirement::Op::kExists:
          ok = value.has_value();
          break;
        case LabelRequirement::Op::kNotExists:
          ok = !value.has_value();
          break;
      }
      if (!ok) return false;
    }
    for (const FieldRequirement& r : fields) {
      if ((FieldValue(object, r.field) == r.value) != r.equals) return false;
    }
    return true;
  }
};

bool ValidLabelKey(std::string_view key) {
  if (key.empty() || key.size() > 316) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/';
  });
}

bool ValidLabelValue(std::string_view value) {
  return value.size() <= 63 && std::all_of(value.begin(), value.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
         });
}

// The label selector grammar: k=v, k==v, k!=v, k in (a,b), k notin (a,b), k, !k; comma = and.
std::string ParseLabelSelector(std::string_view text, std::vector<LabelRequirement>& out) {
  if (TrimSpace(text).empty()) return {};
  std::vector<std::string_view> parts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')' && --depth < 0) return "unbalanced parentheses in label selector";
    if (text[i] == ',' && depth == 0) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return "unbalanced parentheses in label selector";
  parts.push_back(text.substr(start));
  const std::string bad = "unable to parse requirement: invalid label selector \"" + std::string(text) + "\"";
  for (std::string_view raw : parts) {
    const std::string_view part = TrimSpace(raw);
    if (part.empty()) return bad;
    LabelRequirement r;
    std::size_t pos;
    if (part.front() == '!') {
      r.op = LabelRequirement::Op::kNotExists;
      r.key = TrimSpace(part.substr(1));
    } else if ((pos = part.find("!=")) != std::string_view::npos) {
      r.op = LabelRequirement::Op::kNotEquals;
      r.key = TrimSpace(part.substr(0, pos));
      r.values.emplace_back(TrimSpace(part.substr(pos + 2)));
    } else if ((pos = part.find("==")) != std::string_view::npos) {
      r.op = LabelRequirement::Op::kEquals;
      r.key = TrimSpace(part.substr(0, pos));
      r.values.emplace_back(TrimSpace(part.substr(pos + 2)));
    } else if ((pos = part.find('=')) != std::string_view::npos) {
      r.op = LabelRequirement::Op::kEquals;
      r.key = TrimSpace(part.substr(0, pos));
      r.values.emplace_back(TrimSpace(part.substr(pos + 1)));
    } else if ((pos = part.find('(')) != std::string_view::npos) {
      const std::string_view head = TrimSpace(part.substr(0, pos));
      const std::size_t space = head.find_last_of(" \t");
      if (part.back() != ')' || space == std::string_view::npos) return bad;
      const std::string_view op = head.substr(space + 1);
      if (op == "in") {
        r.op = LabelRequirement::Op::kIn;
      } else if (op == "notin") {
        r.op = LabelRequirement::Op::kNotIn;
      } else {
        return bad;
      }
      r.key = TrimSpace(head.substr(0, space));
      for (std::string_view v : Split(part.substr(pos + 1, part.size() - pos - 2), ',')) {
        r.values.emplace_back(TrimSpace(v));
      }
    } else {
      r.op = LabelRequirement::Op::kExists;
      r.key = part;
    }
    if (!ValidLabelKey(r.key)) return bad;
    for (const std::string& v : r.values) {
      if (!ValidLabelValue(v)) return bad;
    }
    out.push_back(std::move(r));
  }
  return {};
}

std::string ParseFieldSelector(std::string_view text, const ResourceType& type,
                               std::vector<FieldRequirement>& out) {
  if (TrimSpace(text).empty()) return {};
  for (std::string_view raw : Split(text, ',')) {
    const std::string_view part = TrimSpace(raw);
    FieldRequirement r;
    std::size_t pos, width;
    if ((pos = part.find("!=")) != std::string_view::npos) {
      r.equals = false;
      width = 2;
    } else if ((pos = part.find("==")) != std::string_view::npos) {
      width = 2;
    } else if ((pos = part.find('=')) != std::string_view::npos) {
      width = 1;
    } else {
      return "invalid field selector: \"" + std::string(text) + "\"";
    }
    r.field = TrimSpace(part.substr(0, pos));
    r.value = TrimSpace(part.substr(pos + width));
    if (!FieldSupported(type, r.field)) return "field label not supported: " + r.field;
    out.push_back(std::move(r));
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Continue tokens: base64url (no padding) of {"rv":N,"start":"last key"}, like the real ones.

constexpr std::string_view kBase64Url = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string Base64UrlEncode(std::string_view in) {
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (const unsigned char c : in) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kBase64Url[(acc >> bits) & 0x3f]);
    }
  }
  if (bits > 0) out.push_back(kBase64Url[(acc << (6 - bits)) & 0x3f]);
  return out;
}

std::optional<std::string> Base64UrlDecode(std::string_view in) {
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : in) {
    if (c == '=') break;
    const std::size_t v = kBase64Url.find(c);
    if (v == std::string_view::npos) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

std::string EncodeContinue(std::uint64_t rv, const std::string& last_key) {
  return Base64UrlEncode(Dump(json{{"v", "meta.k8s.io/v1"}, {"rv", rv}, {"start", last_key}}));
}

std::optional<std::pair<std::uint64_t, std::string>> DecodeContinue(std::string_view token) {
  const std::optional<std::string> text = Base64UrlDecode(token);
  if (!text) return std::nullopt;
  const json parsed = json::parse(*text, nullptr, false);
  if (!parsed.is_object()) return std::nullopt;
  const auto rv = parsed.find("rv");
  const auto start = parsed.find("start");
  if (rv == parsed.end() || !rv->is_number_unsigned() || start == parsed.end() || !start->is_string()) {
    return std::nullopt;
  }
  return std::make_pair(rv->get<std::uint64_t>(), start->get<std::string>());
}

// ---------------------------------------------------------------------------------------------
// Replies.

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

std::string_view ReasonFor(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 409:
      return "Conflict";
    case 410:
      return "Expired";
    case 413:
      return "RequestEntityTooLarge";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return code < 500 ? "BadRequest" : "InternalError";
  }
}

json StatusObject(int code, std::string_view reason, const std::string& message, json details = nullptr) {
  json status = {
      {"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
      {"status", "Failure"}, {"message", message}, {"reason", reason.empty() ? ReasonFor(code) : reason},
      {"code", code}};
  if (!details.is_null()) status["details"] = std::move(details);
  return status;
}

Reply Failure(int code, const std::string& message, std::string_view reason = {}, json details = nullptr) {
  return {code, Dump(StatusObject(code, reason, message, std::move(details)))};
}

json Details(const ResourceType& t, const std::string& name, std::string_view kind = {}) {
  json d = {{"name", name}, {"kind", kind.empty() ? t.plural : kind}};
  if (!t.group.empty()) d["group"] = t.group;
  return d;
}

Reply NotFound(const ResourceType& t, const std::string& name) {
  return Failure(404, Qualified(t) + " \"" + name + "\" not found", "NotFound", Details(t, name));
}

// 409 as kube-apiserver words it: "Operation cannot be fulfilled on pods "p": <why>".
Reply Conflict(const ResourceType& t, std::string_view subresource, const std::string& name,
               const std::string& why) {
  return Failure(
      409, "Operation cannot be fulfilled on " + Qualified(t, subresource) + " \"" + name + "\": " + why,
      "Conflict",
      Details(t, name,
              subresource.empty() ? t.plural : std::string(t.plural) + "/" + std::string(subresource)));
}

const std::string kStaleMessage =
    "the object has been modified; please apply your changes to the latest version and try again";

std::string NameMismatch(const std::string& body_name, const std::string& url_name) {
  return "the name of the object (" + body_name + ") does not match the name on the URL (" + url_name + ")";
}

const std::string kNamespaceMismatch =
    "the namespace of the provided object does not match the namespace sent on the request";

std::string EventLine(std::string_view type, const json& object) {
  return Dump(json{{"type", type}, {"object", object}}) + "\n";
}

std::string BookmarkLine(const ResourceType& t, std::uint64_t rv) {
  return EventLine("BOOKMARK", json{{"kind", t.kind},
                                    {"apiVersion", ApiVersion(t)},
                                    {"metadata", {{"resourceVersion", std::to_string(rv)}}}});
}

std::string ExpiredLine(std::uint64_t requested, std::uint64_t oldest) {
  return EventLine("ERROR", StatusObject(410, "Expired",
                                         "too old resource version: " + std::to_string(requested) + " (" +
                                             std::to_string(oldest) + ")"));
}

// A client that has shut down its side (or reset the connection): its watch is over.
bool PeerClosed(int fd) {
  pollfd p{};
  p.fd = fd;
  p.events = POLLRDHUP;
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// One stored write, as watches see it.
struct Change {
  std::uint64_t rv = 0;
  std::size_t resource = 0;
  std::string key, ns;
  std::string_view type;  // "ADDED", "MODIFIED", "DELETED"
  json object;            // after the write; for DELETED the last state at the deletion's version
  json prev;              // before the write; null for ADDED
};

enum class Outcome : std::uint8_t { kKeepAlive, kClose, kAbort };

struct Incoming {
  std::string method, path, query, body, content_type, authorization;
  std::map<std::string, std::string> params;
  std::optional<Route> route;
  bool watch = false;
  RequestRecord record;

  std::string Param(const std::string& key) const {
    const auto it = params.find(key);
    return it == params.end() ? std::string() : it->second;
  }
};

template <class Body>
Incoming Describe(const http::request<Body>& req) {
  Incoming in;
  in.method = std::string(req.method_string());
  const std::string_view target(req.target().data(), req.target().size());
  const std::size_t q = target.find('?');
  in.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) {
    in.query = std::string(target.substr(q + 1));
    for (std::string_view pair : Split(in.query, '&')) {
      if (pair.empty()) continue;
      const std::size_t eq = pair.find('=');
      std::string key, value;
      if (!PercentDecode(pair.substr(0, eq), true, key)) continue;
      if (eq != std::string_view::npos && !PercentDecode(pair.substr(eq + 1), true, value)) continue;
      in.params.emplace(std::move(key), std::move(value));
    }
  }
  if (const auto it = req.find(http::field::content_type); it != req.end())
    in.content_type = std::string(it->value());
  if (const auto it = req.find(http::field::authorization); it != req.end())
    in.authorization = std::string(it->value());
  in.route = ParseRoute(in.path);
  const std::string watch = in.Param("watch");
  in.watch = in.method == "GET" && in.route && in.route->collection() && in.route->subresource.empty() &&
             (watch == "true" || watch == "1");

  RequestRecord& rec = in.record;
  rec.method = in.method;
  rec.path = in.path;
  rec.query = in.query;
  if (const auto it = req.find(http::field::user_agent); it != req.end())
    rec.user_agent = std::string(it->value());
  if (in.route) {
    const Route& r = *in.route;
    rec.group = r.type->group;
    rec.resource = std::string(r.type->plural) + (r.subresource.empty() ? "" : "/" + r.subresource);
    if (in.method == "GET") {
      rec.verb = r.collection() ? (in.watch ? "watch" : "list") : "get";
    } else if (in.method == "POST") {
      rec.verb = "create";
    } else if (in.method == "PUT") {
      rec.verb = "update";
    } else if (in.method == "PATCH") {
      rec.verb = "patch";
    } else if (in.method == "DELETE") {
      rec.verb = r.collection() ? "deletecollection" : "delete";
    } else {
      rec.verb = AsciiLower(in.method);
    }
  } else {
    rec.verb = AsciiLower(in.method);  // a nonResourceURL: RBAC's verb is the lowercase method
  }
  return in;
}

bool SameMethod(std::string_view a, std::string_view b) {
  return AsciiLower(a) == AsciiLower(b);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct FakeApiServer::Impl {
  struct Connection {
    int fd = -1;            // conn_mu; -1 once closed
    bool watching = false;  // conn_mu
    std::atomic<bool> done{false};
    std::thread thread;
  };

  explicit Impl(FakeApiServerOptions o) : options(std::move(o)), store(kResourceCount) {
    if (options.bookmark_interval < std::chrono::milliseconds(1))
      options.bookmark_interval = std::chrono::milliseconds(1);
    std::random_device seed;
    rng.seed(seed());
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%08x", static_cast<unsigned>(rng()));
    uid_prefix = prefix;
    if (!options.tls_cert_pem.empty() && !options.tls_key_pem.empty()) {
      tls.emplace(net::ssl::context::tls_server);
      tls->use_certificate_chain(net::buffer(options.tls_cert_pem));
      tls->use_private_key(net::buffer(options.tls_key_pem), net::ssl::context::pem);
    }
  }

  FakeApiServerOptions options;
  std::optional<net::ssl::context> tls;

  // The store, the watch history, faults and records; watches and delays wait on `cv`.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<std::map<std::string, json>> store;  // per kResources entry: key -> object
  std::uint64_t rv = 0;
  std::uint64_t history_start = 0;  // `history` holds every change after this version
  std::uint64_t compacted_rv = 0;   // Compact(): new watches and continue tokens from before get 410
  std::deque<Change> history;
  std::vector<Fault> faults;
  std::vector<RequestRecord> records;
  int open_watch_count = 0;
  std::uint64_t drop_epoch = 0;  // bumped by DropWatches and Stop: watches from before end
  bool stopping = false;
  std::uint64_t uid_counter = 0;
  std::string uid_prefix;
  std::mt19937 rng;

  // The listener. Start and Stop run on the test's thread.
  std::mutex lifecycle_mu;
  net::io_context ioc;  // never run: every socket operation here is synchronous
  std::unique_ptr<tcp::acceptor> acceptor;
  std::thread accept_thread;
  std::atomic<bool> accept_stop{false};
  std::atomic<int> bound_port{0};

  // Open connections, so Stop and DropWatches can shut their sockets down. A connection thread
  // closes its socket under conn_mu, so a shutdown never hits a reused descriptor.
  std::mutex conn_mu;
  std::list<Connection> connections;

  // ---- store (callers hold mu) ----

  std::uint64_t Floor() const { return std::max(history_start, compacted_rv); }

  std::string NewUid() {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s-0000-4000-8000-%012llx", uid_prefix.c_str(),
                  static_cast<unsigned long long>(++uid_counter));
    return buf;
  }

  std::string RandomSuffix() {
    static constexpr std::string_view kAlphabet = "bcdfghjklmnpqrstvwxz2456789";
    std::string s;
    for (int i = 0; i < 5; ++i) s.push_back(kAlphabet[rng() % kAlphabet.size()]);
    return s;
  }

  // Sets what the API server sets on create. `keep_given`: direct access keeps a given uid and
  // creationTimestamp (tests pin UIDs for binding preconditions).
  void InitMetadata(json& object, const ResourceType& t, const std::string& ns, const std::string& name,
                    bool keep_given) {
    object["apiVersion"] = ApiVersion(t);
    object["kind"] = t.kind;
    json& meta = object["metadata"];
    if (!meta.is_object()) meta = json::object();
    meta["name"] = name;
    if (t.namespaced) {
      meta["namespace"] = ns;
    } else {
      meta.erase("namespace");
    }
    if (!keep_given || MetaString(object, "uid").empty()) meta["uid"] = NewUid();
    if (!keep_given || MetaString(object, "creationTimestamp").empty())
      meta["creationTimestamp"] = NowRfc3339();
    if (!keep_given || !meta.contains("generation")) meta["generation"] = 1;
    meta.erase("resourceVersion");
  }

  // Stores one write under a new resourceVersion and wakes the watches.
  json Commit(std::size_t resource, const std::string& key, const std::string& ns, std::string_view type,
              json object, json prev) {
    ++rv;
    object["metadata"]["resourceVersion"] = std::to_string(rv);
    if (type == "DELETED") {
      store[resource].erase(key);
    } else {
      store[resource][key] = object;
    }
    history.push_back(Change{rv, resource, key, ns, type, object, std::move(prev)});
    while (history.size() > options.history_limit) {
      history_start = history.front().rv;
      history.pop_front();
    }
    if (options.history_limit == 0) history_start = rv;
    cv.notify_all();
    return object;
  }

  // Replaces `stored` with `next`: identity metadata stays, generation follows spec, and a write
  // that changes nothing is no write (as etcd has it). `force`: always write (direct access).
  json UpdateStored(std::size_t resource, const std::string& key, const std::string& ns, const json& stored,
                    json next, bool force) {
    const ResourceType& t = kResources[resource];
    next["apiVersion"] = ApiVersion(t);
    next["kind"] = t.kind;
    json& meta = next["metadata"];
    if (!meta.is_object()) meta = json::object();
    const json& old_meta = stored.at("metadata");
    const auto keep = [&](const char* field) {
      if (const auto v = old_meta.find(field); v != old_meta.end()) meta[field] = *v;
    };
    for (const char* field : {"name", "namespace", "resourceVersion"}) keep(field);
    for (const char* field : {"uid", "creationTimestamp"}) {
      if (!force || MetaString(next, field).empty()) keep(field);
    }
    std::int64_t generation = 0;
    if (const auto g = old_meta.find("generation"); g != old_meta.end() && g->is_number_integer()) {
      generation = g->get<std::int64_t>();
    }
    const auto without_meta_status = [](json o) {
      o.erase("metadata");
      o.erase("status");
      return o;
    };
    if (without_meta_status(stored) != without_meta_status(next)) ++generation;
    if (generation > 0) meta["generation"] = generation;
    if (!force && next == stored) return stored;
    json prev = stored;
    return Commit(resource, key, ns, "MODIFIED", std::move(next), std::move(prev));
  }

  // The collection as it was at `at` (>= Floor()): the live map with later changes undone.
  std::map<std::string, json> SnapshotAt(std::size_t resource, std::uint64_t at) const {
    std::map<std::string, json> snapshot = store[resource];
    for (auto it = history.rbegin(); it != history.rend() && it->rv > at; ++it) {
      if (it->resource != resource) continue;
      if (it->prev.is_null()) {
        snapshot.erase(it->key);
      } else {
        snapshot[it->key] = it->prev;
      }
    }
    return snapshot;
  }

  // What one change means to a watch on `route` with `selector`: nothing, or one event line.
  static std::optional<std::string> WatchLine(const Change& c, const Route& route, const Selector& selector) {
    if (c.resource != route.index() || (!route.ns.empty() && c.ns != route.ns)) return std::nullopt;
    if (c.type != "MODIFIED") {
      if (!selector.Matches(c.object)) return std::nullopt;
      return EventLine(c.type, c.object);
    }
    const bool now = selector.Matches(c.object), before = selector.Matches(c.prev);
    if (now) return EventLine(before ? "MODIFIED" : "ADDED", c.object);
    if (!before) return std::nullopt;
    // It left the selection: the real watch cache sends the old object at the new version.
    json gone = c.prev;
    gone["metadata"]["resourceVersion"] = std::to_string(c.rv);
    return EventLine("DELETED", gone);
  }

  // ---- direct access ----

  static Route CollectionRoute(const std::string& collection) {
    std::optional<Route> route = ParseRoute(collection);
    if (!route || !route->collection() || !route->subresource.empty()) {
      throw std::invalid_argument("FakeApiServer: not a collection path: " + collection);
    }
    return *route;
  }

  // The namespace an object goes into through `route` (an all-namespaces route: the object's).
  static std::string TargetNamespace(const Route& route, const json& object) {
    if (!route.type->namespaced) return {};
    std::string ns = route.ns.empty() ? MetaString(object, "namespace") : route.ns;
    if (ns.empty())
      throw std::invalid_argument("FakeApiServer: a namespaced object needs metadata.namespace");
    return ns;
  }

  json DirectWrite(const std::string& collection, json object, bool allow_replace) {
    const Route route = CollectionRoute(collection);
    if (const std::string error = CheckObjectShape(object); !error.empty()) {
      throw std::invalid_argument("FakeApiServer: " + error);
    }
    const std::string ns = TargetNamespace(route, object);
    const std::string name = MetaString(object, "name");
    if (name.empty()) throw std::invalid_argument("FakeApiServer: the object has no metadata.name");
    const ResourceType& t = *route.type;
    const std::string key = StoreKey(ns, name);
    std::lock_guard lock(mu);
    auto& objects = store[route.index()];
    if (const auto it = objects.find(key); it != objects.end()) {
      if (!allow_replace)
        throw std::runtime_error("FakeApiServer: " + Qualified(t) + " \"" + name + "\" already exists");
      if (t.namespaced) object["metadata"]["namespace"] = ns;
      return UpdateStored(route.index(), key, ns, it->second, std::move(object), /*force=*/true);
    }
    InitMetadata(object, t, ns, name, /*keep_given=*/true);
    return Commit(route.index(), key, ns, "ADDED", std::move(object), nullptr);
  }

  // ---- HTTP handlers (each takes mu itself) ----

  std::string ParseSelectors(const Incoming& in, const ResourceType& t, Selector& selector) const {
    if (std::string e = ParseLabelSelector(in.Param("labelSelector"), selector.labels); !e.empty()) return e;
    return ParseFieldSelector(in.Param("fieldSelector"), t, selector.fields);
  }

  Reply ListObjects(const Incoming& in) {
    const Route& r = *in.route;
    const ResourceType& t = *r.type;
    Selector selector;
    if (const std::string e = ParseSelectors(in, t, selector); !e.empty()) return Failure(400, e);
    std::uint64_t limit = 0;
    if (const std::string text = in.Param("limit"); !text.empty() && !ParseUint(text, limit)) {
      return Failure(400, "invalid limit: " + text);
    }
    const std::string token = in.Param("continue");
    std::lock_guard lock(mu);
    std::uint64_t list_rv = rv;
    std::string start;
    std::map<std::string, json> snapshot;
    const std::map<std::string, json>* objects = &store[r.index()];
    if (!token.empty()) {
      const auto decoded = DecodeContinue(token);
      if (!decoded) return Failure(400, "continue key is not valid: " + token);
      if (decoded->first < Floor()) {
        return Failure(
            410,
            "The provided continue parameter is too old to display a consistent list result. You can "
            "start a new list without the continue parameter, or use the continue value from the new "
            "list.",
            "Expired");
      }
      list_rv = decoded->first;
      start = decoded->second;
      snapshot = SnapshotAt(r.index(), list_rv);
      objects = &snapshot;
    }
    const std::string prefix = r.key_prefix();
    json items = json::array();
    json meta = {{"resourceVersion", std::to_string(list_rv)}};
    std::string last;
    for (auto it = start.empty() ? objects->begin() : objects->upper_bound(start); it != objects->end();
         ++it) {
      if (!it->first.starts_with(prefix) || !selector.Matches(it->second)) continue;
      if (limit > 0 && items.size() == limit) {
        meta["continue"] = EncodeContinue(list_rv, last);
        if (selector.empty()) {
          meta["remainingItemCount"] = std::count_if(
              it, objects->end(), [&](const auto& entry) { return entry.first.starts_with(prefix); });
        }
        break;
      }
      items.push_back(it->second);
      last = it->first;
    }
    return {200, Dump(json{{"kind", std::string(t.kind) + "List"},
                           {"apiVersion", ApiVersion(t)},
                           {"metadata", std::move(meta)},
                           {"items", std::move(items)}})};
  }

  Reply GetObject(const Incoming& in) {
    const Route& r = *in.route;
    std::lock_guard lock(mu);
    const auto& objects = store[r.index()];
    const auto it = objects.find(StoreKey(r.ns, r.name));
    if (it == objects.end()) return NotFound(*r.type, r.name);
    return {200, Dump(it->second)};
  }

  Reply CreateObject(const Incoming& in) {
    const Route& r = *in.route;
    const ResourceType& t = *r.type;
    if (t.namespaced && r.ns.empty()) return Failure(405, "create needs a namespace in the path");
    std::string error;
    std::optional<json> body = ParseJson(in.body, error);
    if (!body) return Failure(400, error);
    if (error = CheckObjectShape(*body); !error.empty()) return Failure(400, error);
    json object = std::move(*body);
    const std::string given_ns = MetaString(object, "namespace");
    if (t.namespaced && !given_ns.empty() && given_ns != r.ns) return Failure(400, kNamespaceMismatch);
    const std::string ns = t.namespaced ? r.ns : std::string();
    std::string name = MetaString(object, "name");
    std::lock_guard lock(mu);
    auto& objects = store[r.index()];
    if (name.empty()) {
      const std::string generate = MetaString(object, "generateName");
      if (generate.empty()) {
        return Failure(
            422, std::string(t.kind) +
                     " \"\" is invalid: metadata.name: Required value: name or generateName is required");
      }
      do {
        name = generate + RandomSuffix();
      } while (objects.contains(StoreKey(ns, name)));
    }
    const std::string key = StoreKey(ns, name);
    if (objects.contains(key)) {
      return Failure(409, Qualified(t) + " \"" + name + "\" already exists", "AlreadyExists",
                     Details(t, name));
    }
    InitMetadata(object, t, ns, name, /*keep_given=*/false);
    switch (t.status_on_create) {
      case StatusOnCreate::kKeep:
        break;
      case StatusOnCreate::kPodPending:
        object["status"] = json{{"phase", "Pending"}};
        break;
      case StatusOnCreate::kDrop:
        object.erase("status");
        break;
    }
    return {201, Dump(Commit(r.index(), key, ns, "ADDED", std::move(object), nullptr))};
  }

  // The name and namespace of a body written to `r` agree with the URL ("" when they do).
  static std::string CheckIdentity(const Route& r, json& object) {
    const std::string name = MetaString(object, "name");
    if (name.empty()) {
      object["metadata"]["name"] = r.name;
    } else if (name != r.name) {
      return NameMismatch(name, r.name);
    }
    if (r.type->namespaced) {
      const std::string ns = MetaString(object, "namespace");
      if (!ns.empty() && ns != r.ns) return kNamespaceMismatch;
      object["metadata"]["namespace"] = r.ns;
    }
    return {};
  }

  // What a write through `r` stores: /status takes only the status from `written`; the object
  // of a resource with a status subresource keeps the stored status.
  static json ApplySubresource(const Route& r, const json& stored, json written) {
    if (r.subresource == "status") {
      json next = stored;
      if (const auto s = written.find("status"); s != written.end() && !s->is_null()) {
        next["status"] = *s;
      } else {
        next.erase("status");
      }
      return next;
    }
    if (r.type->status_subresource) {
      if (const auto s = stored.find("status"); s != stored.end()) {
        written["status"] = *s;
      } else {
        written.erase("status");
      }
    }
    return written;
  }

  Reply ReplaceObject(const Incoming& in) {
    const Route& r = *in.route;
    std::string error;
    std::optional<json> body = ParseJson(in.body, error);
    if (!body) return Failure(400, error);
    if (error = CheckObjectShape(*body); !error.empty()) return Failure(400, error);
    if (error = CheckIdentity(r, *body); !error.empty()) return Failure(400, error);
    std::lock_guard lock(mu);
    auto& objects = store[r.index()];
    const std::string key = StoreKey(r.ns, r.name);
    const auto it = objects.find(key);
    if (it == objects.end()) return NotFound(*r.type, r.name);
    const std::string precondition = MetaString(*body, "resourceVersion");
    if (!precondition.empty() && precondition != MetaString(it->second, "resourceVersion")) {
      return Conflict(*r.type, {}, r.name, kStaleMessage);
    }
    json next = ApplySubresource(r, it->second, std::move(*body));
    return {200, Dump(UpdateStored(r.index(), key, r.ns, it->second, std::move(next), false))};
  }

  Reply PatchObject(const Incoming& in) {
    const Route& r = *in.route;
    const std::string media =
        AsciiLower(TrimSpace(std::string_view(in.content_type).substr(0, in.content_type.find(';'))));
    const bool merge =
        media == "application/merge-patch+json" || media == "application/strategic-merge-patch+json";
    if (!merge && media != "application/json-patch+json") {
      return Failure(415,
                     "the body of the request was in an unknown format - accepted media types include: "
                     "application/json-patch+json, application/merge-patch+json, "
                     "application/strategic-merge-patch+json");
    }
    std::string error;
    std::optional<json> patch = ParseJson(in.body, error);
    if (!patch) return Failure(400, error);
    if (merge && !patch->is_object()) return Failure(400, "a merge patch must be a JSON object");
    if (!merge) {
      // The document's shape is a 400 (the real server's decode step); applying it is a 422.
      if (!patch->is_array()) return Failure(400, "a JSON patch must be an array of operations");
      for (const json& op : *patch) {
        const auto name = op.is_object() ? op.find("op") : json::const_iterator();
        if (!op.is_object() || name == op.end() || !name->is_string() || !op.contains("path") ||
            !op["path"].is_string()) {
          return Failure(400, "each JSON patch operation needs a string \"op\" and \"path\"");
        }
        const std::string kind = name->get<std::string>();
        const bool needs_value = kind == "add" || kind == "replace" || kind == "test";
        const bool needs_from = kind == "move" || kind == "copy";
        if (!needs_value && !needs_from && kind != "remove")
          return Failure(400, "unknown JSON patch operation: " + kind);
        if ((needs_value && !op.contains("value")) ||
            (needs_from && (!op.contains("from") || !op["from"].is_string()))) {
          return Failure(400, "JSON patch operation " + kind + " is missing its operand");
        }
      }
    }
    std::lock_guard lock(mu);
    auto& objects = store[r.index()];
    const std::string key = StoreKey(r.ns, r.name);
    const auto it = objects.find(key);
    if (it == objects.end()) return NotFound(*r.type, r.name);
    const json& stored = it->second;
    json patched = stored;
    try {
      if (merge) {
        patched.merge_patch(*patch);
      } else {
        patched = patched.patch(*patch);
      }
    } catch (const json::exception& e) {
      return Failure(422, std::string("the patch could not be applied: ") + e.what(), "Invalid");
    }
    if (error = CheckObjectShape(patched); !error.empty()) return Failure(422, error, "Invalid");
    if (const std::string name = MetaString(patched, "name"); name != r.name)
      return Failure(400, NameMismatch(name, r.name));
    if (r.type->namespaced && MetaString(patched, "namespace") != r.ns)
      return Failure(400, kNamespaceMismatch);
    const std::string precondition = MetaString(patched, "resourceVersion");
    if (!precondition.empty() && precondition != MetaString(stored, "resourceVersion")) {
      return Conflict(*r.type, {}, r.name, kStaleMessage);
    }
    json next = ApplySubresource(r, stored, std::move(patched));
    return {200, Dump(UpdateStored(r.index(), key, r.ns, stored, std::move(next), false))};
  }

  Reply DeleteObject(const Incoming& in) {
    const Route& r = *in.route;
    std::string want_uid, want_rv;
    if (!TrimSpace(in.body).empty()) {
      std::string error;
      const std::optional<json> options_body = ParseJson(in.body, error);
      if (!options_body || !options_body->is_object())
        return Failure(400, error.empty() ? "DeleteOptions must be an object" : error);
      if (const auto p = options_body->find("preconditions"); p != options_body->end() && p->is_object()) {
        if (const auto u = p->find("uid"); u != p->end() && u->is_string()) want_uid = u->get<std::string>();
        if (const auto v = p->find("resourceVersion"); v != p->end() && v->is_string())
          want_rv = v->get<std::string>();
      }
    }
    std::lock_guard lock(mu);
    auto& objects = store[r.index()];
    const std::string key = StoreKey(r.ns, r.name);
    const auto it = objects.find(key);
    if (it == objects.end()) return NotFound(*r.type, r.name);
    const std::string uid = MetaString(it->second, "uid"),
                      version = MetaString(it->second, "resourceVersion");
    if (!want_uid.empty() && want_uid != uid) {
      return Conflict(
          *r.type, {}, r.name,
          "Precondition failed: UID in precondition: " + want_uid + ", UID in object meta: " + uid);
    }
    if (!want_rv.empty() && want_rv != version) {
      return Conflict(*r.type, {}, r.name,
                      "Precondition failed: ResourceVersion in precondition: " + want_rv +
                          ", ResourceVersion in object meta: " + version);
    }
    json last = it->second;
    json prev = it->second;
    return {200, Dump(Commit(r.index(), key, r.ns, "DELETED", std::move(last), std::move(prev)))};
  }

  Reply Bind(const Incoming& in) {
    const Route& r = *in.route;
    const ResourceType& t = *r.type;
    std::string error;
    const std::optional<json> body = ParseJson(in.body, error);
    if (!body) return Failure(400, error);
    if (error = CheckObjectShape(*body); !error.empty()) return Failure(400, error);
    std::string node;
    if (const auto target = body->find("target"); target != body->end() && target->is_object()) {
      if (const auto n = target->find("name"); n != target->end() && n->is_string())
        node = n->get<std::string>();
    }
    if (node.empty())
      return Failure(422, "Binding \"" + r.name + "\" is invalid: target.name: Required value");
    if (const std::string name = MetaString(*body, "name"); !name.empty() && name != r.name) {
      return Failure(400, "name in URL does not match name in Binding object");
    }
    std::lock_guard lock(mu);
    auto& objects = store[r.index()];
    const std::string key = StoreKey(r.ns, r.name);
    const auto it = objects.find(key);
    if (it == objects.end()) return NotFound(t, r.name);
    const json& pod = it->second;
    const std::string want_uid = MetaString(*body, "uid"), uid = MetaString(pod, "uid");
    if (!want_uid.empty() && want_uid != uid) {
      return Conflict(
          t, "binding", r.name,
          "Precondition failed: UID in precondition: " + want_uid + ", UID in object meta: " + uid);
    }
    if (const std::string assigned = FieldValue(pod, "spec.nodeName"); !assigned.empty()) {
      return Conflict(t, "binding", r.name,
                      "pod " + r.name + " is already assigned to node \"" + assigned + "\"");
    }
    json next = pod;
    if (!next["spec"].is_object()) next["spec"] = json::object();
    next["spec"]["nodeName"] = node;
    if (const auto meta = body->find("metadata"); meta != body->end() && meta->is_object()) {
      if (const auto a = meta->find("annotations"); a != meta->end() && a->is_object()) {
        for (const auto& [k, v] : a->items()) next["metadata"]["annotations"][k] = v;
      }
    }
    // As the real binding does: the pod's PodScheduled condition becomes True.
    json& status = next["status"];
    if (!status.is_object()) status = json::object();
    json& conditions = status["conditions"];
    if (!conditions.is_array()) conditions = json::array();
    const json scheduled = {{"type", "PodScheduled"},
                            {"status", "True"},
                            {"lastProbeTime", nullptr},
                            {"lastTransitionTime", NowRfc3339()}};
    const auto existing = std::find_if(conditions.begin(), conditions.end(), [](const json& c) {
      return c.is_object() && c.value("type", json()) == "PodScheduled";
    });
    if (existing == conditions.end()) {
      conditions.push_back(scheduled);
    } else if (existing->value("status", json()) != "True") {
      *existing = scheduled;
    }
    UpdateStored(r.index(), key, r.ns, pod, std::move(next), false);
    return {201, Dump(json{{"kind", "Status"},
                           {"apiVersion", "v1"},
                           {"metadata", json::object()},
                           {"status", "Success"},
                           {"code", 201}})};
  }

  Reply HandleRest(const Incoming& in) {
    if (!in.route) {
      if (in.method == "GET" && in.path == "/version") {
        return {200, Dump(json{{"major", "1"},
                               {"minor", "30"},
                               {"gitVersion", "v1.30.0-toposched-fake"},
                               {"platform", "linux/amd64"}})};
      }
      if (in.method == "GET" && (in.path == "/healthz" || in.path == "/readyz" || in.path == "/livez")) {
        return {200, "ok", "text/plain"};
      }
      return Failure(404, "the server could not find the requested resource", "NotFound", json::object());
    }
    const Route& r = *in.route;
    const Reply not_allowed = Failure(405, "the server does not allow this method on the requested resource");
    try {
      if (r.collection()) {
        if (in.method == "GET") return ListObjects(in);
        if (in.method == "POST") return CreateObject(in);
        return not_allowed;
      }
      if (r.subresource == "binding") return in.method == "POST" ? Bind(in) : not_allowed;
      if (in.method == "GET") return GetObject(in);
      if (in.method == "PUT") return ReplaceObject(in);
      if (in.method == "PATCH") return PatchObject(in);
      if (in.method == "DELETE" && r.subresource.empty()) return DeleteObject(in);
      return not_allowed;
    } catch (const std::exception& e) {
      return Failure(500, std::string("fake API server: ") + e.what());
    }
  }

  // ---- connections ----

  void Record(const RequestRecord& record) {
    std::lock_guard lock(mu);
    records.push_back(record);
  }

  bool Stopping() const {
    std::lock_guard lock(mu);
    return stopping;
  }

  std::optional<Fault> TakeFault(const Incoming& in) {
    std::lock_guard lock(mu);
    for (auto it = faults.begin(); it != faults.end(); ++it) {
      if (!it->method.empty() && !SameMethod(it->method, in.method)) continue;
      if (!in.path.starts_with(it->path_prefix)) continue;
      if (it->watch_only && !in.watch) continue;
      Fault fault = *it;
      if (it->times > 0 && --it->times == 0) faults.erase(it);
      return fault;
    }
    return std::nullopt;
  }

  template <class Stream>
  Outcome Respond(Stream& stream, Incoming& in, unsigned version, bool keep_alive, const Reply& reply) {
    in.record.status = reply.status;
    Record(in.record);
    http::response<http::string_body> res{static_cast<http::status>(reply.status), version};
    res.set(http::field::content_type, reply.content_type);
    if (reply.status == 429) res.set(http::field::retry_after, "1");
    res.keep_alive(keep_alive);
    res.body() = reply.body;
    res.prepare_payload();
    beast::error_code ec;
    http::write(stream, res, ec);
    if (ec) return Outcome::kAbort;
    return keep_alive && !Stopping() ? Outcome::kKeepAlive : Outcome::kClose;
  }

  template <class Stream>
  Outcome Handle(Stream& stream, Connection& conn, Incoming& in, unsigned version, bool keep_alive) {
    const std::optional<Fault> fault = TakeFault(in);
    if (fault) {
      if (fault->delay.count() > 0) {
        std::unique_lock lock(mu);
        if (cv.wait_for(lock, fault->delay, [&] { return stopping; })) {
          records.push_back(in.record);  // status 0: never answered
          return Outcome::kAbort;
        }
      }
      if (fault->drop) {
        Record(in.record);
        return Outcome::kAbort;
      }
      if (fault->status != 0) {
        return Respond(stream, in, version, keep_alive, Failure(fault->status, "injected fault"));
      }
    }
    if (!options.required_token.empty() && in.authorization != "Bearer " + options.required_token) {
      return Respond(stream, in, version, keep_alive, Failure(401, "Unauthorized"));
    }
    if (in.watch)
      return ServeWatch(stream, conn, in, version, keep_alive, fault ? fault->drop_watch_after_events : -1);
    return Respond(stream, in, version, keep_alive, HandleRest(in));
  }

  template <class Stream>
  Outcome ServeWatch(Stream& stream, Connection& conn, Incoming& in, unsigned version, bool keep_alive,
                     int drop_after) {
    const Route& r = *in.route;
    const ResourceType& t = *r.type;
    Selector selector;
    std::string error = ParseSelectors(in, t, selector);
    std::optional<std::chrono::seconds> timeout;
    if (const std::string text = in.Param("timeoutSeconds"); error.empty() && !text.empty()) {
      std::uint64_t seconds = 0;
      if (!ParseUint(text, seconds)) {
        error = "invalid timeoutSeconds: " + text;
      } else if (seconds > 0) {
        timeout = std::chrono::seconds(static_cast<std::int64_t>(std::min<std::uint64_t>(seconds, 1u << 30)));
      }
    }
    const std::string from_text = in.Param("resourceVersion");
    const bool from_given = !from_text.empty() && from_text != "0";
    std::uint64_t from = 0;
    if (error.empty() && from_given && !ParseUint(from_text, from))
      error = "invalid resourceVersion: " + from_text;
    if (!error.empty()) return Respond(stream, in, version, keep_alive, Failure(400, error));
    const std::string bookmarks_param = in.Param("allowWatchBookmarks");
    const bool bookmarks = bookmarks_param == "true" || bookmarks_param == "1";

    std::vector<std::string> initial;
    std::uint64_t cursor = from, floor = 0, epoch = 0;
    bool expired = false;
    {
      std::lock_guard lock(mu);
      if (stopping) {
        records.push_back(in.record);
        return Outcome::kAbort;
      }
      epoch = drop_epoch;
      floor = Floor();
      if (from_given) {
        expired = from < floor;
      } else {
        // No version: the current state as synthetic ADDED events, then what follows.
        const std::string prefix = r.key_prefix();
        for (const auto& [key, object] : store[r.index()]) {
          if (key.starts_with(prefix) && selector.Matches(object))
            initial.push_back(EventLine("ADDED", object));
        }
        cursor = rv;
      }
      if (!expired) ++open_watch_count;
      in.record.status = 200;
      records.push_back(in.record);
    }
    struct OpenWatch {
      Impl* impl;
      bool counted;
      ~OpenWatch() {
        if (!counted) return;
        std::lock_guard lock(impl->mu);
        --impl->open_watch_count;
      }
    } open_watch{this, !expired};
    {
      std::lock_guard lock(conn_mu);
      conn.watching = true;
    }

    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::content_type, "application/json");
    res.chunked(true);
    res.keep_alive(keep_alive);
    http::response_serializer<http::empty_body> serializer{res};
    beast::error_code ec;
    http::write_header(stream, serializer, ec);
    if (ec) return Outcome::kAbort;
    const auto send = [&](const std::string& line) {
      net::write(stream, http::make_chunk(net::buffer(line)), ec);
      return !ec;
    };
    const auto finish = [&] {
      net::write(stream, http::make_chunk_last(), ec);
      if (ec) return Outcome::kAbort;
      {
        std::lock_guard lock(conn_mu);
        conn.watching = false;
      }
      return keep_alive && !Stopping() ? Outcome::kKeepAlive : Outcome::kClose;
    };
    if (expired) return send(ExpiredLine(from, floor)) ? finish() : Outcome::kAbort;

    int sent = 0;
    const auto broken_now = [&] { return drop_after >= 0 && sent >= drop_after; };
    if (broken_now()) return Outcome::kAbort;
    for (const std::string& line : initial) {
      if (!send(line)) return Outcome::kAbort;
      ++sent;
      if (broken_now()) return Outcome::kAbort;
    }
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = timeout ? start + *timeout : Clock::time_point::max();
    Clock::time_point next_bookmark = start + options.bookmark_interval;
    const int fd = beast::get_lowest_layer(stream).native_handle();
    for (;;) {
      std::vector<std::string> lines;
      bool dropped = false, gone = false;
      {
        std::unique_lock lock(mu);
        Clock::time_point wake = std::min(deadline, Clock::now() + kPeerCheckInterval);
        if (bookmarks) wake = std::min(wake, next_bookmark);
        cv.wait_until(lock, wake, [&] { return stopping || drop_epoch != epoch || rv > cursor; });
        if (stopping || drop_epoch != epoch) {
          dropped = true;
        } else if (cursor < history_start) {
          gone = true;  // the history moved past what this watch has seen (a slow watcher)
          floor = history_start;
        } else if (rv > cursor) {
          const auto first = std::upper_bound(history.begin(), history.end(), cursor,
                                              [](std::uint64_t v, const Change& c) { return v < c.rv; });
          for (auto it = first; it != history.end(); ++it) {
            if (std::optional<std::string> line = WatchLine(*it, r, selector))
              lines.push_back(std::move(*line));
          }
          cursor = rv;
        }
      }
      if (dropped) return Outcome::kAbort;
      if (gone) return send(ExpiredLine(cursor, floor)) ? finish() : Outcome::kAbort;
      for (const std::string& line : lines) {
        if (!send(line)) return Outcome::kAbort;
        ++sent;
        if (broken_now()) return Outcome::kAbort;
      }
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        if (bookmarks && !send(BookmarkLine(t, cursor))) return Outcome::kAbort;
        return finish();
      }
      if (bookmarks && now >= next_bookmark) {
        if (!send(BookmarkLine(t, cursor))) return Outcome::kAbort;
        next_bookmark = now + options.bookmark_interval;
      }
      if (PeerClosed(fd)) return Outcome::kAbort;
    }
  }

  template <class Stream>
  void Serve(Stream& stream, Connection& conn) {
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(64 * 1024);
      parser.body_limit(options.max_body_bytes);
      beast::error_code ec;
      http::read(stream, buffer, parser, ec);
      if (ec == http::error::body_limit) {
        Incoming in = Describe(parser.get());
        Respond(stream, in, parser.get().version(), false,
                Failure(413, "the request body is larger than " + std::to_string(options.max_body_bytes) +
                                 " bytes"));
        // Read (and drop) what the client is still sending, so closing does not reset the
        // connection under the 413 before the client has read it.
        // (Raw reads with a poll timeout: a client that neither sends nor closes must not hold
        // this thread.)
        auto& socket = beast::get_lowest_layer(stream);
        socket.shutdown(tcp::socket::shutdown_send, ec);
        char sink[16 * 1024];
        pollfd p{};
        p.fd = socket.native_handle();
        p.events = POLLIN;
        for (std::size_t drained = 0; drained <= 2 * options.max_body_bytes + (1u << 20);) {
          if (::poll(&p, 1, 1000) <= 0) break;
          const ssize_t n = ::recv(p.fd, sink, sizeof sink, 0);
          if (n <= 0) break;
          drained += static_cast<std::size_t>(n);
        }
        return;
      }
      if (ec) {
        // A malformed request gets a 400; a closed or shut-down connection just ends.
        if (&ec.category() == &http::make_error_code(http::error::bad_method).category() &&
            ec != http::error::end_of_stream && ec != http::error::partial_message) {
          Incoming in;
          Respond(stream, in, 11, false, Failure(400, "malformed HTTP request: " + ec.message()));
        }
        return;
      }
      http::request<http::string_body> req = parser.release();
      Incoming in = Describe(req);
      in.body = std::move(req.body());
      if (Handle(stream, conn, in, req.version(), req.keep_alive()) != Outcome::kKeepAlive) return;
    }
  }

  void CloseConnection(tcp::socket& socket, Connection& conn) {
    std::lock_guard lock(conn_mu);
    beast::error_code ec;
    socket.close(ec);
    conn.fd = -1;
    conn.watching = false;
  }

  void RunConnection(Connection& conn, tcp::socket socket) {
    if (tls) {
      net::ssl::stream<tcp::socket> stream(std::move(socket), *tls);
      beast::error_code ec;
      stream.handshake(net::ssl::stream_base::server, ec);
      if (!ec) Serve(stream, conn);
      CloseConnection(stream.next_layer(), conn);
    } else {
      Serve(socket, conn);
      CloseConnection(socket, conn);
    }
    conn.done = true;
  }

  // Joins connection threads that have ended (accept thread only).
  void ReapConnections() {
    std::lock_guard lock(conn_mu);
    for (auto it = connections.begin(); it != connections.end();) {
      if (it->done) {
        it->thread.join();
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
  }

  void AcceptLoop() {
    for (;;) {
      tcp::socket socket(ioc);
      beast::error_code ec;
      acceptor->accept(socket, ec);
      if (accept_stop) return;
      if (ec) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // e.g. out of descriptors
        continue;
      }
      ReapConnections();
      socket.set_option(tcp::no_delay(true), ec);
      std::lock_guard lock(conn_mu);
      Connection& conn = connections.emplace_back();
      conn.fd = socket.native_handle();
      conn.thread =
          std::thread([this, &conn, s = std::move(socket)]() mutable { RunConnection(conn, std::move(s)); });
    }
  }

  void Start(int port) {
    std::lock_guard lifecycle(lifecycle_mu);
    if (acceptor) throw std::logic_error("FakeApiServer::Start: already running");
    if (port == 0) port = bound_port;
    auto listener = std::make_unique<tcp::acceptor>(ioc);
    const tcp::endpoint endpoint(net::ip::address_v4::loopback(), static_cast<unsigned short>(port));
    listener->open(endpoint.protocol());
    listener->set_option(tcp::acceptor::reuse_address(true));
    listener->bind(endpoint);
    listener->listen();
    bound_port = listener->local_endpoint().port();
    {
      std::lock_guard lock(mu);
      stopping = false;
    }
    accept_stop = false;
    acceptor = std::move(listener);
    accept_thread = std::thread([this] { AcceptLoop(); });
  }

  void Stop() {
    std::lock_guard lifecycle(lifecycle_mu);
    if (!acceptor) return;
    {
      std::lock_guard lock(mu);
      stopping = true;
      ++drop_epoch;
    }
    cv.notify_all();
    accept_stop = true;
    ::shutdown(acceptor->native_handle(), SHUT_RDWR);  // wakes the blocked accept()
    accept_thread.join();
    beast::error_code ec;
    acceptor->close(ec);
    acceptor.reset();
    {
      std::lock_guard lock(conn_mu);
      for (Connection& c : connections) {
        if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);
      }
    }
    for (Connection& c : connections) c.thread.join();
    std::lock_guard lock(conn_mu);  // DropWatches may be reading the list
    connections.clear();
  }

  void DropWatches() {
    {
      std::lock_guard lock(mu);
      ++drop_epoch;
    }
    cv.notify_all();
    // A watch blocked writing to a client that does not read sees its socket go away.
    std::lock_guard lock(conn_mu);
    for (Connection& c : connections) {
      if (c.watching && c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);
    }
  }
};

// ---------------------------------------------------------------------------------------------

FakeApiServer::FakeApiServer(FakeApiServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

FakeApiServer::~FakeApiServer() {
  Stop();
}

void FakeApiServer::Start(int port) {
  impl_->Start(port);
}
void FakeApiServer::Stop() {
  impl_->Stop();
}
int FakeApiServer::port() const {
  return impl_->bound_port;
}

std::string FakeApiServer::url() const {
  return std::string(impl_->tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port());
}

nlohmann::json FakeApiServer::Create(const std::string& collection, nlohmann::json object) {
  return impl_->DirectWrite(collection, std::move(object), /*allow_replace=*/false);
}

nlohmann::json FakeApiServer::Upsert(const std::string& collection, nlohmann::json object) {
  return impl_->DirectWrite(collection, std::move(object), /*allow_replace=*/true);
}

std::optional<nlohmann::json> FakeApiServer::Get(const std::string& collection,
                                                 const std::string& name) const {
  const Route route = Impl::CollectionRoute(collection);
  if (route.type->namespaced && route.ns.empty()) {
    throw std::invalid_argument("FakeApiServer::Get needs a namespaced collection: " + collection);
  }
  std::lock_guard lock(impl_->mu);
  const auto& objects = impl_->store[route.index()];
  const auto it = objects.find(StoreKey(route.ns, name));
  if (it == objects.end()) return std::nullopt;
  return it->second;
}

std::vector<nlohmann::json> FakeApiServer::List(const std::string& collection) const {
  const Route route = Impl::CollectionRoute(collection);
  const std::string prefix = route.key_prefix();
  std::vector<nlohmann::json> items;
  std::lock_guard lock(impl_->mu);
  for (const auto& [key, object] : impl_->store[route.index()]) {
    if (key.starts_with(prefix)) items.push_back(object);
  }
  return items;
}

bool FakeApiServer::Delete(const std::string& collection, const std::string& name) {
  const Route route = Impl::CollectionRoute(collection);
  if (route.type->namespaced && route.ns.empty()) {
    throw std::invalid_argument("FakeApiServer::Delete needs a namespaced collection: " + collection);
  }
  const std::string key = StoreKey(route.ns, name);
  std::lock_guard lock(impl_->mu);
  auto& objects = impl_->store[route.index()];
  const auto it = objects.find(key);
  if (it == objects.end()) return false;
  json last = it->second;
  json prev = it->second;
  impl_->Commit(route.index(), key, route.ns, "DELETED", std::move(last), std::move(prev));
  return true;
}

std::uint64_t FakeApiServer::resource_version() const {
  std::lock_guard lock(impl_->mu);
  return impl_->rv;
}

void FakeApiServer::Compact() {
  std::lock_guard lock(impl_->mu);
  impl_->compacted_rv = impl_->rv;
}

void FakeApiServer::InjectFault(Fault fault) {
  if (fault.times == 0) return;
  std::lock_guard lock(impl_->mu);
  impl_->faults.push_back(std::move(fault));
}

void FakeApiServer::ClearFaults() {
  std::lock_guard lock(impl_->mu);
  impl_->faults.clear();
}

void FakeApiServer::DropWatches() {
  impl_->DropWatches();
}

int FakeApiServer::open_watches() const {
  std::lock_guard lock(impl_->mu);
  return impl_->open_watch_count;
}

std::vector<RequestRecord> FakeApiServer::requests() const {
  std::lock_guard lock(impl_->mu);
  return impl_->records;
}

void FakeApiServer::ClearRequests() {
  std::lock_guard lock(impl_->mu);
  impl_->records.clear();
}

}  // namespace toposched::testing
