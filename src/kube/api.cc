#include "toposched/kube/api.h"

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "toposched/metrics/logging.h"

namespace toposched::kube {
namespace {

using nlohmann::json;

constexpr std::size_t kBodyExcerptBytes = 200;

std::string_view ReasonPhrase(int code) {
  switch (code) {
    case 300:
      return "Multiple Choices";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 307:
      return "Temporary Redirect";
    case 308:
      return "Permanent Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 412:
      return "Precondition Failed";
    case 413:
      return "Request Entity Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      break;
  }
  if (code >= 400 && code < 500) return "Client Error";
  if (code >= 500 && code < 600) return "Server Error";
  return "Unexpected Status";
}

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

std::string PercentEncode(std::string_view text, std::string_view also_safe) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c) || also_safe.find(ch) != std::string_view::npos) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

// As Go's url.PathEscape: unreserved characters and ":@&=+$" stay, '/' and the rest are
// encoded. "." and ".." are encoded too, so that no client or proxy normalises them away.
std::string EscapePathSegment(std::string_view segment) {
  if (segment == "." || segment == "..") {
    std::string out;
    for (std::size_t i = 0; i < segment.size(); ++i) out += "%2E";
    return out;
  }
  return PercentEncode(segment, ":@&=+$");
}

// Printable excerpt of untrusted text for an error message.
std::string Excerpt(std::string_view text) {
  std::string out(text.substr(0, kBodyExcerptBytes));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

const json* Member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string StringMember(const json& object, const char* key) {
  const json* value = Member(object, key);
  return value != nullptr && value->is_string() ? value->get<std::string>() : std::string();
}

std::string MetadataString(const json& object, const char* key) {
  const json* metadata = Member(object, "metadata");
  return metadata != nullptr ? StringMember(*metadata, key) : std::string();
}

std::string Dump(const json& object) {
  return object.dump(-1, ' ', false, json::error_handler_t::replace);
}

// " (GET /api/v1/pods)": the query is left out (continue tokens are long and opaque).
std::string RequestContext(std::string_view method, std::string_view path) {
  const auto query = path.find('?');
  std::string out = " (";
  out += method;
  out += ' ';
  out += path.substr(0, query);
  out += ')';
  return out;
}

// What an API server status means to a caller.
ErrorCode CodeOfStatus(int status) {
  switch (status) {
    case 404:
      return ErrorCode::kNotFound;
    case 409:
      return ErrorCode::kConflict;
    case 410:
      return ErrorCode::kGone;
    case 400:
    case 422:
      return ErrorCode::kInvalid;
    case 429:
      return ErrorCode::kUnavailable;
    default:
      return status >= 500 ? ErrorCode::kUnavailable : ErrorCode::kUnknown;
  }
}

// "<code> <Reason>: <Status.message or body excerpt> (METHOD path)".
Error StatusError(int status, std::string_view body, std::string_view method, std::string_view path) {
  if (status < 100 || status > 999) {
    return Error("transport: bad HTTP status " + std::to_string(status) + RequestContext(method, path));
  }
  std::string message = std::to_string(status);
  message += ' ';
  message += ReasonPhrase(status);
  std::string detail;
  const json parsed = json::parse(body, nullptr, false);
  if (!parsed.is_discarded() && StringMember(parsed, "kind") == "Status") {
    detail = Excerpt(StringMember(parsed, "message"));
    if (detail.empty()) detail = Excerpt(StringMember(parsed, "reason"));
  } else {
    detail = Excerpt(body);
  }
  if (!detail.empty()) message += ": " + detail;
  return Error(message + RequestContext(method, path), CodeOfStatus(status), status);
}

Error TransportError(const Error& error, std::string_view method, std::string_view path) {
  std::string message = error.message();
  if (message.rfind("transport: ", 0) != 0) message = "transport: " + message;
  return Error(message + RequestContext(method, path), ErrorCode::kUnavailable);
}

Result<json> ParseBody(const Response& response, const Request& request) {
  json parsed = json::parse(response.body, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Error("bad JSON in response: " + Excerpt(response.body) +
                 RequestContext(request.method, request.path));
  }
  return parsed;
}

// Appends name=value to a path, with '?' before the first parameter.
void AddQuery(std::string& path, std::string_view name, std::string_view value) {
  path += path.find('?') == std::string::npos ? '?' : '&';
  path += name;
  path += '=';
  path += EscapeQueryValue(value);
}

std::uint64_t RandomSeed() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

}  // namespace

int ApiCode(const Error& error) {
  return error.http_status();
}

Backoff::Backoff(std::chrono::milliseconds base, std::chrono::milliseconds max, std::uint64_t seed)
    : base_(std::max(base, std::chrono::milliseconds(0))),
      max_(std::max(max, std::chrono::milliseconds(0))),
      rng_(seed != 0 ? seed : RandomSeed()) {}

std::chrono::milliseconds Backoff::Next() {
  std::int64_t cap = base_.count();
  for (int i = 0; i < attempt_ && cap < max_.count(); ++i) cap *= 2;
  cap = std::min(cap, max_.count());
  if (attempt_ < 64) ++attempt_;
  std::uniform_int_distribution<std::int64_t> uniform(0, cap);
  return std::chrono::milliseconds(uniform(rng_));
}

void Backoff::Reset() {
  attempt_ = 0;
}

Api::Api(Transport& transport, ApiOptions options)
    : transport_(transport),
      options_(std::move(options)),
      rng_(options_.jitter_seed != 0 ? options_.jitter_seed : RandomSeed()) {
  if (!options_.sleep) {
    options_.sleep = [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); };
  }
}

Result<Response> Api::Send(const Request& request, bool retry) {
  Request sent = request;
  sent.timeout = options_.request_timeout;
  const int attempts = retry ? std::max(1, options_.max_attempts) : 1;
  std::uint64_t seed = 0;
  {
    const std::lock_guard lock(rng_mu_);
    seed = rng_() | 1;  // never 0 (Backoff reads 0 as "seed from the device")
  }
  Backoff backoff(options_.backoff_base, options_.backoff_max, seed);
  std::optional<Error> last;
  std::optional<std::chrono::milliseconds> asked;  // the last reply's Retry-After
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0) {
      const auto delay = asked ? std::min(*asked, options_.max_retry_after) : backoff.Next();
      if (metrics::LogEnabled(metrics::LogLevel::kDebug)) {
        metrics::Log(metrics::LogLevel::kDebug, {"kube/api", "-", "-"},
                     "retrying in " + std::to_string(delay.count()) + "ms" + (asked ? " (Retry-After)" : "") +
                         " after: " + last->message());
      }
      options_.sleep(delay);
    }
    asked.reset();
    Result<Response> response = transport_.Do(sent);
    if (!response) {
      last = TransportError(response.error(), sent.method, sent.path);
      continue;
    }
    const int status = response->status;
    if (status >= 200 && status < 300) return std::move(response).value();
    Error error = StatusError(status, response->body, sent.method, sent.path);
    if (status != 429 && status < 500) return error;
    if (response->retry_after)
      asked = std::chrono::duration_cast<std::chrono::milliseconds>(*response->retry_after);
    last = std::move(error);
  }
  return *last;
}

Result<nlohmann::json> Api::Get(const std::string& path) {
  Request request;
  request.path = path;
  auto response = Send(request, true);
  if (!response) return response.error();
  return ParseBody(*response, request);
}

Result<ObjectList> Api::List(const std::string& collection_path, const ListOptions& options) {
  ObjectList out;
  std::string continue_token;
  bool restarted = false;
  while (true) {
    Request request;
    request.path = collection_path;
    if (options.limit > 0) AddQuery(request.path, "limit", std::to_string(options.limit));
    if (!continue_token.empty()) AddQuery(request.path, "continue", continue_token);
    if (!options.label_selector.empty()) AddQuery(request.path, "labelSelector", options.label_selector);
    if (!options.field_selector.empty()) AddQuery(request.path, "fieldSelector", options.field_selector);
    // A continued page reads the first page's snapshot; the token carries its resourceVersion.
    if (continue_token.empty() && !options.resource_version.empty()) {
      AddQuery(request.path, "resourceVersion", options.resource_version);
    }
    auto response = Send(request, true);
    if (!response) {
      // The continue token expired (the snapshot was compacted away): start over, once.
      if (!continue_token.empty() && IsGone(response.error()) && !restarted) {
        restarted = true;
        continue_token.clear();
        out = ObjectList{};
        continue;
      }
      return response.error();
    }
    auto page = ParseBody(*response, request);
    if (!page) return page.error();
    if (const json* items = Member(*page, "items"); items != nullptr && !items->is_null()) {
      if (!items->is_array()) {
        return Error("bad list: items is not an array" + RequestContext(request.method, request.path));
      }
      auto& array = (*page)["items"];
      out.items.reserve(out.items.size() + array.size());
      for (auto& item : array) out.items.push_back(std::move(item));
    }
    out.resource_version = MetadataString(*page, "resourceVersion");
    continue_token = MetadataString(*page, "continue");
    if (continue_token.empty()) return out;
  }
}

Result<std::string> Api::Watch(const std::string& collection_path, const WatchOptions& options,
                               const std::function<bool(WatchEvent&&)>& on_event, std::stop_token stop) {
  Request request;
  request.path = collection_path;
  AddQuery(request.path, "watch", "true");
  if (!options.resource_version.empty()) AddQuery(request.path, "resourceVersion", options.resource_version);
  if (options.allow_bookmarks) AddQuery(request.path, "allowWatchBookmarks", "true");
  if (options.timeout_seconds > 0) {
    AddQuery(request.path, "timeoutSeconds", std::to_string(options.timeout_seconds));
  }
  if (!options.label_selector.empty()) AddQuery(request.path, "labelSelector", options.label_selector);
  if (!options.field_selector.empty()) AddQuery(request.path, "fieldSelector", options.field_selector);
  request.timeout = options.idle_timeout;

  std::string last_rv = options.resource_version;
  std::optional<Error> failure;
  const auto on_line = [&](std::string_view line) -> bool {
    json event = json::parse(line, nullptr, false);
    const std::string type = event.is_discarded() ? std::string() : StringMember(event, "type");
    json* object = nullptr;
    if (event.is_object()) {
      const auto it = event.find("object");
      if (it != event.end() && it->is_object()) object = &*it;
    }
    if (type.empty() || object == nullptr) {
      failure = Error("watch: malformed event: " + Excerpt(line) + RequestContext("GET", request.path));
      return false;
    }
    if (type == "ERROR") {
      // The object is a metav1.Status; 410 means the resourceVersion is too old (relist).
      const json* code_value = Member(*object, "code");
      const int code = code_value != nullptr && code_value->is_number_integer() ? code_value->get<int>() : 0;
      const std::string message = Excerpt(StringMember(*object, "message"));
      if (code >= 100 && code <= 999) {
        std::string text = std::to_string(code) + " " + std::string(ReasonPhrase(code));
        if (!message.empty()) text += ": " + message;
        failure = Error(text + RequestContext("GET", request.path), CodeOfStatus(code), code);
      } else {
        failure = Error("watch: ERROR event: " + (message.empty() ? Excerpt(line) : message) +
                        RequestContext("GET", request.path));
      }
      return false;
    }
    WatchEventType event_type = WatchEventType::kAdded;
    if (type == "ADDED") {
      event_type = WatchEventType::kAdded;
    } else if (type == "MODIFIED") {
      event_type = WatchEventType::kModified;
    } else if (type == "DELETED") {
      event_type = WatchEventType::kDeleted;
    } else if (type == "BOOKMARK") {
      event_type = WatchEventType::kBookmark;
    } else {
      failure =
          Error("watch: unknown event type \"" + Excerpt(type) + "\"" + RequestContext("GET", request.path));
      return false;
    }
    std::string rv = MetadataString(*object, "resourceVersion");
    if (!rv.empty()) last_rv = std::move(rv);
    if (!on_event(WatchEvent{event_type, std::move(*object)})) return false;
    return !stop.stop_requested();
  };
  auto response = transport_.Stream(request, on_line, stop);
  if (failure) return *failure;
  if (!response) return TransportError(response.error(), request.method, request.path);
  if (response->status != 200)
    return StatusError(response->status, response->body, request.method, request.path);
  return last_rv;
}

Result<nlohmann::json> Api::Create(const std::string& collection_path, const nlohmann::json& object) {
  Request request;
  request.method = "POST";
  request.path = collection_path;
  request.body = Dump(object);
  request.content_type = "application/json";
  // Retried like the others: a retry after a lost reply may answer 409 AlreadyExists, which is
  // returned as is (the caller knows whether the object can be its own).
  auto response = Send(request, true);
  if (!response) return response.error();
  return ParseBody(*response, request);
}

Result<nlohmann::json> Api::Replace(const std::string& path, const nlohmann::json& object) {
  Request request;
  request.method = "PUT";
  request.path = path;
  request.body = Dump(object);
  request.content_type = "application/json";
  // Only a conditional PUT is safe to repeat: a retry cannot overwrite someone else's write.
  const bool conditional = !MetadataString(object, "resourceVersion").empty();
  auto response = Send(request, conditional);
  if (!response) return response.error();
  return ParseBody(*response, request);
}

Result<nlohmann::json> Api::Patch(const std::string& path, PatchType type, const nlohmann::json& patch) {
  Request request;
  request.method = "PATCH";
  request.path = path;
  request.body = Dump(patch);
  switch (type) {
    case PatchType::kMerge:
      request.content_type = "application/merge-patch+json";
      break;
    case PatchType::kJson:
      request.content_type = "application/json-patch+json";
      break;
    case PatchType::kStrategicMerge:
      request.content_type = "application/strategic-merge-patch+json";
      break;
  }
  auto response = Send(request, true);
  if (!response) return response.error();
  return ParseBody(*response, request);
}

Result<nlohmann::json> Api::Update(const std::string& path,
                                   const std::function<Result<bool>(nlohmann::json& object)>& mutate) {
  // Conflicts clear up at once when the other writer is done: short waits, as client-go's
  // retry.DefaultRetry (10ms steps), not the transport backoff.
  std::uint64_t seed = 0;
  {
    const std::lock_guard lock(rng_mu_);
    seed = rng_() | 1;
  }
  Backoff backoff(std::chrono::milliseconds(10), options_.backoff_max, seed);
  std::optional<Error> last;
  const int attempts = std::max(1, options_.max_attempts);
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0) options_.sleep(backoff.Next());
    auto object = Get(path);
    if (!object) return object.error();
    auto changed = mutate(*object);
    if (!changed) return changed.error();
    if (!*changed) return object;
    auto written = Replace(path, *object);
    if (written) return written;
    if (!IsConflict(written.error())) return written.error();
    last = written.error();
  }
  return *last;
}

Status Api::CreateBinding(const std::string& pod_namespace, const std::string& pod_name,
                          const std::string& pod_uid, const std::string& node, const json& annotations) {
  json metadata = {{"name", pod_name}, {"namespace", pod_namespace}};
  if (!pod_uid.empty()) metadata["uid"] = pod_uid;
  if (annotations.is_object() && !annotations.empty()) metadata["annotations"] = annotations;
  const json binding = {{"apiVersion", "v1"},
                        {"kind", "Binding"},
                        {"metadata", std::move(metadata)},
                        {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  Request request;
  request.method = "POST";
  request.path = PodPath(pod_namespace, pod_name) + "/binding";
  request.body = Dump(binding);
  request.content_type = "application/json";
  auto response = Send(request, true);
  if (response) return Status::Ok();
  if (!IsConflict(response.error())) return response.error();
  // 409: already bound. When it is this pod on this node, an earlier attempt (ours, or one
  // whose reply was lost) did the work.
  auto pod = Get(PodPath(pod_namespace, pod_name));
  if (pod) {
    const json* spec = Member(*pod, "spec");
    const std::string bound_to = spec != nullptr ? StringMember(*spec, "nodeName") : std::string();
    const std::string uid = MetadataString(*pod, "uid");
    if (bound_to == node && (pod_uid.empty() || uid == pod_uid)) return Status::Ok();
  }
  return response.error();
}

std::string CorePath(std::string_view resource) {
  return "/api/v1/" + std::string(resource);
}

std::string NamespacedPath(std::string_view ns, std::string_view resource) {
  return "/api/v1/namespaces/" + EscapePathSegment(ns) + "/" + std::string(resource);
}

std::string PodPath(std::string_view ns, std::string_view name) {
  return NamespacedPath(ns, "pods") + "/" + EscapePathSegment(name);
}

std::string NodePath(std::string_view name) {
  return "/api/v1/nodes/" + EscapePathSegment(name);
}

std::string NodeTopologyPath(std::string_view name) {
  return std::string(kNodeTopologyCollection) + "/" + EscapePathSegment(name);
}

std::string LeaseCollection(std::string_view ns) {
  return "/apis/coordination.k8s.io/v1/namespaces/" + EscapePathSegment(ns) + "/leases";
}

std::string LeasePath(std::string_view ns, std::string_view name) {
  return LeaseCollection(ns) + "/" + EscapePathSegment(name);
}

std::string EventCollection(std::string_view ns) {
  return NamespacedPath(ns, "events");
}

std::string EscapeQueryValue(std::string_view value) {
  return PercentEncode(value, "");
}

}  // namespace toposched::kube
