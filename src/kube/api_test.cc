// Api over a scripted fake Transport: error messages and codes, retries and backoff, paging,
// query and path escaping, watch parsing, read-modify-write, bindings.

#include "toposched/kube/api.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace toposched::kube {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// One scripted watch stream: a status (200: the lines are delivered), then the end.
struct StreamScript {
  static StreamScript Lines(std::vector<std::string> lines) {
    StreamScript s;
    s.lines = std::move(lines);
    return s;
  }
  static StreamScript Status(int status, std::string body) {
    StreamScript s;
    s.status = status;
    s.body = std::move(body);
    return s;
  }
  StreamScript&& ThenFail(std::string message) && {
    error = std::move(message);
    return std::move(*this);
  }
  StreamScript&& ThenBlock() && {
    block_until_stop = true;
    return std::move(*this);
  }

  int status = 200;
  std::string body;  // for a non-200 status
  std::vector<std::string> lines;
  std::optional<std::string> error;  // after the lines: the connection breaks
  bool block_until_stop = false;     // after the lines: no more bytes until stopped
};

// Answers Do() from a queue of scripted results and Stream() from a queue of scripts; records
// every request. Thread-safe.
class ScriptedTransport : public Transport {
 public:
  void Respond(int status, std::string body) {
    const std::lock_guard lock(mu_);
    responses_.emplace_back(Response{status, std::move(body)});
  }
  void RespondJson(int status, const json& body) { Respond(status, body.dump()); }
  void RespondRetryAfter(int status, std::chrono::seconds retry_after) {
    const std::lock_guard lock(mu_);
    responses_.emplace_back(Response{status, "busy", retry_after});
  }
  void Fail(std::string message) {
    const std::lock_guard lock(mu_);
    responses_.emplace_back(Error(std::move(message)));
  }
  void AddStream(StreamScript script) {
    const std::lock_guard lock(mu_);
    streams_.push_back(std::move(script));
  }
  std::vector<Request> requests() const {
    const std::lock_guard lock(mu_);
    return requests_;
  }
  std::size_t unused_responses() const {
    const std::lock_guard lock(mu_);
    return responses_.size();
  }

  Result<Response> Do(const Request& request) override {
    const std::lock_guard lock(mu_);
    requests_.push_back(request);
    if (responses_.empty()) return Error("fake: nothing scripted for " + request.method + " " + request.path);
    Result<Response> next = std::move(responses_.front());
    responses_.pop_front();
    return next;
  }

  Result<Response> Stream(const Request& request, const std::function<bool(std::string_view)>& on_line,
                          std::stop_token stop) override {
    StreamScript script;
    {
      const std::lock_guard lock(mu_);
      requests_.push_back(request);
      if (streams_.empty()) return Error("fake: no stream scripted for " + request.path);
      script = std::move(streams_.front());
      streams_.pop_front();
    }
    if (script.status != 200) return Response{script.status, script.body};
    for (const auto& line : script.lines) {
      if (stop.stop_requested() || !on_line(line)) return Response{200, ""};
    }
    if (script.error) return Error(*script.error);
    if (script.block_until_stop) {
      std::mutex mu;
      std::condition_variable_any cv;
      std::unique_lock lock(mu);
      cv.wait(lock, stop, [] { return false; });
    }
    return Response{200, ""};
  }

 private:
  mutable std::mutex mu_;
  std::deque<Result<Response>> responses_;
  std::deque<StreamScript> streams_;
  std::vector<Request> requests_;
};

json StatusBody(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},   {"apiVersion", "v1"}, {"status", "Failure"},
          {"message", message}, {"reason", reason},   {"code", code}};
}

json Pod(const std::string& name, const std::string& rv, const std::string& node = "",
         const std::string& uid = "uid-1") {
  json pod = {{"metadata", {{"name", name}, {"namespace", "ns"}, {"uid", uid}, {"resourceVersion", rv}}},
              {"spec", json::object()}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

// An Api whose sleeps are recorded instead of slept.
struct Harness {
  explicit Harness(int max_attempts = 5) {
    ApiOptions options;
    options.max_attempts = max_attempts;
    options.backoff_base = milliseconds(100);
    options.backoff_max = milliseconds(1000);
    options.request_timeout = milliseconds(1234);
    options.max_retry_after = milliseconds(5000);
    options.jitter_seed = 42;
    options.sleep = [this](milliseconds d) {
      const std::lock_guard lock(mu);
      sleeps.push_back(d);
    };
    api = std::make_unique<Api>(transport, options);
  }
  std::vector<milliseconds> Sleeps() {
    const std::lock_guard lock(mu);
    return sleeps;
  }
  ScriptedTransport transport;
  std::mutex mu;
  std::vector<milliseconds> sleeps;
  std::unique_ptr<Api> api;
};

// Callers classify an API error by its code and status, which the Api sets from the response;
// the message is for people and is never parsed back.
TEST(ApiCodeTest, ReadsTheStatusTheErrorCarriesNeverItsMessage) {
  EXPECT_EQ(ApiCode(Error("409 Conflict: x", ErrorCode::kConflict, 409)), 409);
  EXPECT_TRUE(IsNotFound(Error("404 Not Found: x", ErrorCode::kNotFound, 404)));
  EXPECT_TRUE(IsConflict(Error("409 Conflict: x", ErrorCode::kConflict, 409)));
  EXPECT_TRUE(IsGone(Error("410 Gone: x", ErrorCode::kGone, 410)));
  // A text that reads like a status is not one.
  for (const char* message : {"409 Conflict: the object has been modified (PUT /x)", "404", "410 Gone"}) {
    EXPECT_EQ(ApiCode(Error(message)), 0) << message;
    EXPECT_FALSE(IsConflict(Error(message)) || IsNotFound(Error(message)) || IsGone(Error(message)))
        << message;
  }
  // The code and status survive added context.
  const Error wrapped = Error("409 Conflict: x", ErrorCode::kConflict, 409).WithContext("bind p");
  EXPECT_TRUE(IsConflict(wrapped));
  EXPECT_EQ(ApiCode(wrapped), 409);
}

TEST(ApiErrorTest, StatusBodyGivesTheServersMessage) {
  Harness h;
  h.transport.RespondJson(
      409, StatusBody(409, "Conflict",
                      "Operation cannot be fulfilled on pods \"p\": the object has been modified"));
  auto got = h.api->Get(PodPath("ns", "p"));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().message(),
            "409 Conflict: Operation cannot be fulfilled on pods \"p\": the object has been modified "
            "(GET /api/v1/namespaces/ns/pods/p)");
  EXPECT_TRUE(IsConflict(got.error()));
}

TEST(ApiErrorTest, PlainBodyIsQuotedUpTo200Bytes) {
  Harness h;
  h.transport.Respond(404, "404 page not found\n");
  auto got = h.api->Get("/apis/x/v1/things?limit=1");
  ASSERT_FALSE(got.ok());
  // The query is left out of the context.
  EXPECT_EQ(got.error().message(), "404 Not Found: 404 page not found (GET /apis/x/v1/things)");

  h.transport.Respond(400, std::string(1000, 'x'));
  got = h.api->Get("/y");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().message(), "400 Bad Request: " + std::string(200, 'x') + " (GET /y)");
  EXPECT_EQ(ApiCode(got.error()), 400);

  h.transport.Respond(403, "");
  got = h.api->Get("/z");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().message(), "403 Forbidden (GET /z)");
}

TEST(ApiErrorTest, TransportErrorsAreMarked) {
  Harness h(1);
  h.transport.Fail("connection refused");
  auto got = h.api->Get("/x");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().message(), "transport: connection refused (GET /x)");
  EXPECT_EQ(ApiCode(got.error()), 0);
}

TEST(ApiErrorTest, BadJsonInA2xxBodyIsAnError) {
  Harness h;
  h.transport.Respond(200, "{not json");
  auto got = h.api->Get("/x");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.error().message().find("bad JSON"), std::string::npos) << got.error().message();
  EXPECT_EQ(h.transport.requests().size(), 1u);  // not retried
}

TEST(ApiRetryTest, RetriesTransientFailuresWithBoundedBackoff) {
  Harness h;
  h.transport.Respond(503, "overloaded");
  h.transport.Respond(429, "slow down");
  h.transport.Fail("transport: connection reset");
  h.transport.RespondJson(200, Pod("p", "7"));
  auto got = h.api->Get(PodPath("ns", "p"));
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ((*got)["metadata"]["resourceVersion"], "7");
  EXPECT_EQ(h.transport.requests().size(), 4u);
  const auto sleeps = h.Sleeps();
  ASSERT_EQ(sleeps.size(), 3u);
  // Attempt n waits uniform(0, min(1000, 100 * 2^n)): at most 100, 200, 400 ms.
  EXPECT_LE(sleeps[0], milliseconds(100));
  EXPECT_LE(sleeps[1], milliseconds(200));
  EXPECT_LE(sleeps[2], milliseconds(400));
  for (const auto& request : h.transport.requests()) {
    EXPECT_EQ(request.timeout, milliseconds(1234));  // options.request_timeout
    EXPECT_EQ(request.method, "GET");
  }
}

// A server's Retry-After replaces the backoff (up to max_retry_after, 5 s here); replies
// without one fall back to the backoff.
TEST(ApiRetryTest, RetryAfterReplacesTheBackoff) {
  Harness h(6);
  h.transport.RespondRetryAfter(429, std::chrono::seconds(2));
  h.transport.RespondRetryAfter(503, std::chrono::seconds(0));
  h.transport.RespondRetryAfter(503, std::chrono::seconds(600));
  h.transport.Respond(500, "no header");
  h.transport.RespondJson(200, Pod("p", "9"));
  auto got = h.api->Get(PodPath("ns", "p"));
  ASSERT_TRUE(got.ok()) << got.error().message();
  const auto sleeps = h.Sleeps();
  ASSERT_EQ(sleeps.size(), 4u);
  EXPECT_EQ(sleeps[0], milliseconds(2000));
  EXPECT_EQ(sleeps[1], milliseconds(0));
  EXPECT_EQ(sleeps[2], milliseconds(5000));  // capped
  EXPECT_LE(sleeps[3], milliseconds(100));   // the backoff's first step: uniform(0, 100 ms)
}

TEST(ApiRetryTest, GivesUpAfterMaxAttempts) {
  Harness h(3);
  for (int i = 0; i < 3; ++i)
    h.transport.RespondJson(503, StatusBody(503, "ServiceUnavailable", "etcd down"));
  auto got = h.api->Get("/x");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().message(), "503 Service Unavailable: etcd down (GET /x)");
  EXPECT_EQ(h.transport.requests().size(), 3u);
  EXPECT_EQ(h.Sleeps().size(), 2u);
}

TEST(ApiRetryTest, ClientErrorsAreNotRetried) {
  for (const int code : {400, 403, 404, 409, 410, 422}) {
    Harness h;
    h.transport.RespondJson(code, StatusBody(code, "X", "no"));
    h.transport.RespondJson(200, Pod("p", "1"));  // would be taken by a retry
    auto got = h.api->Get("/x");
    ASSERT_FALSE(got.ok()) << code;
    EXPECT_EQ(ApiCode(got.error()), code);
    EXPECT_EQ(h.transport.requests().size(), 1u) << code;
    EXPECT_TRUE(h.Sleeps().empty()) << code;
  }
}

TEST(ApiRetryTest, ReplaceRetriesOnlyWhenConditional) {
  {
    Harness h;
    h.transport.Respond(503, "");
    h.transport.RespondJson(200, Pod("p", "2"));
    auto put = h.api->Replace(PodPath("ns", "p"), Pod("p", "1"));
    ASSERT_TRUE(put.ok()) << put.error().message();
    EXPECT_EQ(h.transport.requests().size(), 2u);
    EXPECT_EQ(h.transport.requests()[0].method, "PUT");
    EXPECT_EQ(h.transport.requests()[0].content_type, "application/json");
  }
  {
    Harness h;
    json unconditional = Pod("p", "");
    unconditional["metadata"].erase("resourceVersion");
    h.transport.Respond(503, "");
    h.transport.RespondJson(200, Pod("p", "2"));
    auto put = h.api->Replace(PodPath("ns", "p"), unconditional);
    ASSERT_FALSE(put.ok());
    EXPECT_EQ(ApiCode(put.error()), 503);
    EXPECT_EQ(h.transport.requests().size(), 1u);
  }
}

TEST(ApiRetryTest, CreateRetriedThenAlreadyExistsIsReturned) {
  Harness h;
  h.transport.Fail("timeout");  // the first POST may have landed
  h.transport.RespondJson(
      409, StatusBody(409, "AlreadyExists", "leases.coordination.k8s.io \"l\" already exists"));
  auto created = h.api->Create(LeaseCollection("ns"), {{"metadata", {{"name", "l"}}}});
  ASSERT_FALSE(created.ok());
  EXPECT_TRUE(IsConflict(created.error()));
  EXPECT_NE(created.error().message().find("already exists"), std::string::npos);
  ASSERT_EQ(h.transport.requests().size(), 2u);
  EXPECT_EQ(h.transport.requests()[1].method, "POST");
  EXPECT_EQ(json::parse(h.transport.requests()[1].body)["metadata"]["name"], "l");
}

TEST(ApiRequestTest, PatchTypesAndDelete) {
  struct Case {
    PatchType type;
    const char* content_type;
  };
  const Case cases[] = {{PatchType::kMerge, "application/merge-patch+json"},
                        {PatchType::kJson, "application/json-patch+json"},
                        {PatchType::kStrategicMerge, "application/strategic-merge-patch+json"}};
  for (const auto& c : cases) {
    Harness h;
    h.transport.RespondJson(200, Pod("p", "3"));
    auto patched = h.api->Patch(PodPath("ns", "p"), c.type, {{"metadata", {{"labels", {{"a", "b"}}}}}});
    ASSERT_TRUE(patched.ok());
    ASSERT_EQ(h.transport.requests().size(), 1u);
    EXPECT_EQ(h.transport.requests()[0].method, "PATCH");
    EXPECT_EQ(h.transport.requests()[0].content_type, c.content_type);
    EXPECT_EQ(json::parse(h.transport.requests()[0].body)["metadata"]["labels"]["a"], "b");
  }
  // A 5xx is retried.
  Harness h;
  h.transport.Respond(500, "");
  h.transport.RespondJson(200, Pod("p", "4"));
  EXPECT_TRUE(
      h.api->Patch(PodPath("ns", "p"), PatchType::kMerge, {{"metadata", {{"labels", {{"a", "b"}}}}}}).ok());
  EXPECT_EQ(h.transport.requests().size(), 2u);
  EXPECT_EQ(h.transport.requests()[1].method, "PATCH");
}

TEST(BackoffTest, StaysWithinTheCappedExponentialAndResets) {
  Backoff backoff(milliseconds(100), milliseconds(1000), 7);
  // Caps: 100, 200, 400, 800, 1000, 1000, ...
  const std::int64_t caps[] = {100, 200, 400, 800, 1000, 1000, 1000};
  std::int64_t largest_late = 0;
  for (int round = 0; round < 200; ++round) {
    backoff.Reset();
    for (const auto cap : caps) {
      const auto d = backoff.Next().count();
      EXPECT_GE(d, 0);
      EXPECT_LE(d, cap);
      if (cap == 1000) largest_late = std::max(largest_late, d);
    }
  }
  EXPECT_GT(largest_late, 800);  // the full range is used (600 draws below 800: p < 1e-40)
  backoff.Reset();
  for (int i = 0; i < 50; ++i) {
    backoff.Reset();
    EXPECT_LE(backoff.Next().count(), 100);
  }
  // Many attempts never overflow past the cap.
  Backoff long_run(milliseconds(1), milliseconds(30'000), 3);
  for (int i = 0; i < 200; ++i) EXPECT_LE(long_run.Next().count(), 30'000);
}

TEST(PathsTest, EscapesSegmentsAndQueryValues) {
  EXPECT_EQ(CorePath("nodes"), "/api/v1/nodes");
  EXPECT_EQ(NamespacedPath("kube-system", "pods"), "/api/v1/namespaces/kube-system/pods");
  EXPECT_EQ(PodPath("ns", "web-0"), "/api/v1/namespaces/ns/pods/web-0");
  EXPECT_EQ(PodPath("ns", "a/b c"), "/api/v1/namespaces/ns/pods/a%2Fb%20c");
  EXPECT_EQ(NodePath("gpu-node.example.com"), "/api/v1/nodes/gpu-node.example.com");
  EXPECT_EQ(NodePath(".."), "/api/v1/nodes/%2E%2E");
  EXPECT_EQ(NodePath("system:node?x#y"), "/api/v1/nodes/system:node%3Fx%23y");
  EXPECT_EQ(NodeTopologyPath("n1"), "/apis/toposched.io/v1alpha1/nodetopologies/n1");
  EXPECT_EQ(LeaseCollection("ns"), "/apis/coordination.k8s.io/v1/namespaces/ns/leases");
  EXPECT_EQ(LeasePath("ns", "toposched-extender"),
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/toposched-extender");
  EXPECT_EQ(EventCollection("ns"), "/api/v1/namespaces/ns/events");
  EXPECT_EQ(EscapeQueryValue("app=web,tier in (a,b)"), "app%3Dweb%2Ctier%20in%20%28a%2Cb%29");
  EXPECT_EQ(EscapeQueryValue("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(EscapeQueryValue("a+b/c&d\xC3\xA9"), "a%2Bb%2Fc%26d%C3%A9");
}

TEST(ApiListTest, CollectsAllPagesAndEscapesTheQuery) {
  Harness h;
  h.transport.RespondJson(200, {{"metadata", {{"resourceVersion", "5"}, {"continue", "tok/1="}}},
                                {"items", {Pod("a", "1"), Pod("b", "2")}}});
  h.transport.RespondJson(200, {{"metadata", {{"resourceVersion", "6"}}}, {"items", {Pod("c", "3")}}});
  ListOptions options;
  options.limit = 2;
  options.label_selector = "app=web,tier!=db";
  options.field_selector = "spec.nodeName=n 1";
  options.resource_version = "0";
  auto list = h.api->List(CorePath("pods"), options);
  ASSERT_TRUE(list.ok()) << list.error().message();
  ASSERT_EQ(list->items.size(), 3u);
  EXPECT_EQ(list->items[0]["metadata"]["name"], "a");
  EXPECT_EQ(list->items[2]["metadata"]["name"], "c");
  EXPECT_EQ(list->resource_version, "6");  // the final page's
  const auto requests = h.transport.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].path,
            "/api/v1/pods?limit=2&labelSelector=app%3Dweb%2Ctier%21%3Ddb&fieldSelector=spec.nodeName%3Dn%201"
            "&resourceVersion=0");
  // Later pages: the continue token instead of the resourceVersion.
  EXPECT_EQ(requests[1].path,
            "/api/v1/pods?limit=2&continue=tok%2F1%3D&labelSelector=app%3Dweb%2Ctier%21%3Ddb"
            "&fieldSelector=spec.nodeName%3Dn%201");
}

TEST(ApiListTest, UnpagedAndEmpty) {
  Harness h;
  h.transport.RespondJson(
      200, {{"kind", "NodeList"}, {"metadata", {{"resourceVersion", "9"}}}, {"items", nullptr}});
  ListOptions options;
  options.limit = 0;
  auto list = h.api->List(CorePath("nodes"), options);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->items.empty());
  EXPECT_EQ(list->resource_version, "9");
  EXPECT_EQ(h.transport.requests()[0].path, "/api/v1/nodes");

  h.transport.RespondJson(200, {{"metadata", json::object()}, {"items", "nope"}});
  EXPECT_FALSE(h.api->List(CorePath("nodes")).ok());
}

TEST(ApiListTest, ExpiredContinueRestartsOnce) {
  Harness h;
  const json page1 = {{"metadata", {{"resourceVersion", "5"}, {"continue", "c1"}}},
                      {"items", {Pod("old", "1")}}};
  h.transport.RespondJson(200, page1);
  h.transport.RespondJson(410, StatusBody(410, "Expired", "The provided continue parameter is too old"));
  h.transport.RespondJson(
      200, {{"metadata", {{"resourceVersion", "20"}, {"continue", "c2"}}}, {"items", {Pod("a", "11")}}});
  h.transport.RespondJson(200, {{"metadata", {{"resourceVersion", "20"}}}, {"items", {Pod("b", "12")}}});
  auto list = h.api->List(CorePath("pods"));
  ASSERT_TRUE(list.ok()) << list.error().message();
  ASSERT_EQ(list->items.size(), 2u);  // nothing from the abandoned first pass
  EXPECT_EQ(list->items[0]["metadata"]["name"], "a");
  EXPECT_EQ(list->items[1]["metadata"]["name"], "b");
  EXPECT_EQ(list->resource_version, "20");
  const auto requests = h.transport.requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[2].path, "/api/v1/pods?limit=500");

  // A second expiry is returned.
  Harness again;
  for (int i = 0; i < 2; ++i) {
    again.transport.RespondJson(200, page1);
    again.transport.RespondJson(410, StatusBody(410, "Expired", "too old"));
  }
  auto failed = again.api->List(CorePath("pods"));
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(IsGone(failed.error()));
  EXPECT_EQ(again.transport.requests().size(), 4u);
}

std::string Line(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump();
}

json Bookmark(const std::string& rv) {
  return {{"kind", "Pod"}, {"metadata", {{"resourceVersion", rv}}}};
}

TEST(ApiWatchTest, DeliversEventsInOrderAndTracksTheResourceVersion) {
  Harness h;
  h.transport.AddStream(StreamScript::Lines(
      {Line("ADDED", Pod("a", "11")), Line("MODIFIED", Pod("a", "12")), Line("BOOKMARK", Bookmark("13")),
       Line("DELETED", Pod("b", "14")), Line("BOOKMARK", Bookmark("15"))}));
  WatchOptions options;
  options.resource_version = "10";
  options.label_selector = "app=web";
  options.idle_timeout = milliseconds(4321);
  std::vector<std::pair<WatchEventType, std::string>> seen;
  auto rv =
      h.api->Watch(CorePath("pods"), options,
                   [&](WatchEvent&& e) {
                     seen.emplace_back(e.type, e.object["metadata"]["resourceVersion"].get<std::string>());
                     return true;
                   },
                   {});
  ASSERT_TRUE(rv.ok()) << rv.error().message();
  EXPECT_EQ(*rv, "15");
  const std::vector<std::pair<WatchEventType, std::string>> want = {{WatchEventType::kAdded, "11"},
                                                                    {WatchEventType::kModified, "12"},
                                                                    {WatchEventType::kBookmark, "13"},
                                                                    {WatchEventType::kDeleted, "14"},
                                                                    {WatchEventType::kBookmark, "15"}};
  EXPECT_EQ(seen, want);
  const auto requests = h.transport.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].path,
            "/api/v1/pods?watch=true&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=300"
            "&labelSelector=app%3Dweb");
  EXPECT_EQ(requests[0].timeout, milliseconds(4321));  // the idle timeout
}

TEST(ApiWatchTest, ErrorEvents) {
  struct Case {
    const char* name;
    json status;
    int code;
    std::string prefix;
  };
  const Case cases[] = {
      {"expired", StatusBody(410, "Expired", "too old resource version: 5 (100)"), 410,
       "410 Gone: too old resource version: 5 (100) (GET /api/v1/pods)"},
      {"internal", StatusBody(500, "InternalError", "etcd"), 500, "500 Internal Server Error: etcd"},
      {"no code", {{"kind", "Status"}, {"message", "odd"}}, 0, "watch: ERROR event: odd"},
  };
  for (const auto& c : cases) {
    Harness h;
    h.transport.AddStream(StreamScript::Lines(
        {Line("ADDED", Pod("a", "11")), Line("ERROR", c.status), Line("ADDED", Pod("z", "99"))}));
    int events = 0;
    WatchOptions options;
    options.resource_version = "10";
    auto rv = h.api->Watch(CorePath("pods"), options,
                           [&](WatchEvent&&) {
                             ++events;
                             return true;
                           },
                           {});
    ASSERT_FALSE(rv.ok()) << c.name;
    EXPECT_EQ(ApiCode(rv.error()), c.code) << c.name;
    EXPECT_EQ(rv.error().message().rfind(c.prefix, 0), 0u) << c.name << ": " << rv.error().message();
    EXPECT_EQ(events, 1) << c.name;  // nothing after the error
  }
}

TEST(ApiWatchTest, MalformedLinesAreErrors) {
  const std::string lines[] = {"{not json",           "[1,2]",
                               R"({"type":"ADDED"})", R"({"type":"ADDED","object":3})",
                               R"({"object":{}})",    R"({"type":"RENAMED","object":{}})"};
  for (const auto& bad : lines) {
    Harness h;
    h.transport.AddStream(StreamScript::Lines({bad, Line("ADDED", Pod("a", "11"))}));
    int events = 0;
    WatchOptions options;
    options.resource_version = "10";
    auto rv = h.api->Watch(CorePath("pods"), options,
                           [&](WatchEvent&&) {
                             ++events;
                             return true;
                           },
                           {});
    ASSERT_FALSE(rv.ok()) << bad;
    EXPECT_EQ(ApiCode(rv.error()), 0) << bad;
    EXPECT_EQ(rv.error().message().rfind("watch: ", 0), 0u) << rv.error().message();
    EXPECT_EQ(events, 0) << bad;
  }
}

TEST(ApiWatchTest, StatusAndTransportFailures) {
  Harness h;
  h.transport.AddStream(StreamScript::Status(403, StatusBody(403, "Forbidden", "pods is forbidden").dump()));
  WatchOptions options;
  options.resource_version = "1";
  options.allow_bookmarks = false;
  options.timeout_seconds = 0;
  auto rv = h.api->Watch(CorePath("pods"), options, [](WatchEvent&&) { return true; }, {});
  ASSERT_FALSE(rv.ok());
  EXPECT_EQ(rv.error().message(), "403 Forbidden: pods is forbidden (GET /api/v1/pods)");
  EXPECT_EQ(h.transport.requests()[0].path, "/api/v1/pods?watch=true&resourceVersion=1");

  h.transport.AddStream(StreamScript::Lines({Line("ADDED", Pod("a", "2"))}).ThenFail("connection reset"));
  rv = h.api->Watch(CorePath("pods"), options, [](WatchEvent&&) { return true; }, {});
  ASSERT_FALSE(rv.ok());
  EXPECT_EQ(rv.error().message().rfind("transport: connection reset", 0), 0u);
}

TEST(ApiWatchTest, EndsWhenTheHandlerDeclinesOrOnStop) {
  Harness h;
  h.transport.AddStream(StreamScript::Lines(
      {Line("ADDED", Pod("a", "11")), Line("ADDED", Pod("b", "12")), Line("ADDED", Pod("c", "13"))}));
  WatchOptions options;
  options.resource_version = "10";
  int events = 0;
  auto rv = h.api->Watch(CorePath("pods"), options, [&](WatchEvent&&) { return ++events < 2; }, {});
  ASSERT_TRUE(rv.ok());
  EXPECT_EQ(events, 2);
  EXPECT_EQ(*rv, "12");

  // A stream with no more bytes ends when stop is requested.
  h.transport.AddStream(StreamScript::Lines({Line("ADDED", Pod("a", "21"))}).ThenBlock());
  std::stop_source stop;
  std::atomic<int> delivered{0};
  Result<std::string> result = Error("not run");
  std::thread watcher([&] {
    result = h.api->Watch(
        CorePath("pods"), options, [&](WatchEvent&&) { return ++delivered, true; }, stop.get_token());
  });
  while (delivered.load() == 0) std::this_thread::sleep_for(milliseconds(1));
  stop.request_stop();
  watcher.join();
  ASSERT_TRUE(result.ok()) << result.error().message();
  EXPECT_EQ(*result, "21");
}

TEST(ApiUpdateTest, RetriesConflictsWithTheFreshObject) {
  Harness h;
  const json conflict = StatusBody(409, "Conflict", "the object has been modified");
  h.transport.RespondJson(200, Pod("p", "1"));
  h.transport.RespondJson(409, conflict);
  h.transport.RespondJson(200, Pod("p", "2"));
  h.transport.RespondJson(409, conflict);
  h.transport.RespondJson(200, Pod("p", "3"));
  h.transport.RespondJson(200, Pod("p", "4"));
  int calls = 0;
  auto updated = h.api->Update(PodPath("ns", "p"), [&](json& pod) -> Result<bool> {
    ++calls;
    pod["metadata"]["labels"]["x"] = "y";
    return true;
  });
  ASSERT_TRUE(updated.ok()) << updated.error().message();
  EXPECT_EQ((*updated)["metadata"]["resourceVersion"], "4");
  EXPECT_EQ(calls, 3);
  const auto requests = h.transport.requests();
  ASSERT_EQ(requests.size(), 6u);
  // Each PUT carries the resourceVersion its GET read.
  EXPECT_EQ(json::parse(requests[1].body)["metadata"]["resourceVersion"], "1");
  EXPECT_EQ(json::parse(requests[3].body)["metadata"]["resourceVersion"], "2");
  EXPECT_EQ(json::parse(requests[5].body)["metadata"]["resourceVersion"], "3");
  EXPECT_EQ(json::parse(requests[5].body)["metadata"]["labels"]["x"], "y");
}

TEST(ApiUpdateTest, GivesUpAfterMaxAttempts) {
  Harness h(2);
  for (int i = 0; i < 2; ++i) {
    h.transport.RespondJson(200, Pod("p", std::to_string(i)));
    h.transport.RespondJson(409, StatusBody(409, "Conflict", "modified"));
  }
  auto updated = h.api->Update(PodPath("ns", "p"), [](json&) -> Result<bool> { return true; });
  ASSERT_FALSE(updated.ok());
  EXPECT_TRUE(IsConflict(updated.error()));
  EXPECT_EQ(h.transport.requests().size(), 4u);
}

TEST(ApiUpdateTest, NothingToChangeOrMutateErrorWritesNothing) {
  Harness h;
  h.transport.RespondJson(200, Pod("p", "1"));
  auto unchanged = h.api->Update(PodPath("ns", "p"), [](json&) -> Result<bool> { return false; });
  ASSERT_TRUE(unchanged.ok());
  EXPECT_EQ((*unchanged)["metadata"]["resourceVersion"], "1");
  EXPECT_EQ(h.transport.requests().size(), 1u);

  h.transport.RespondJson(200, Pod("p", "1"));
  auto refused =
      h.api->Update(PodPath("ns", "p"), [](json&) -> Result<bool> { return Error("bad annotation"); });
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message(), "bad annotation");
  EXPECT_EQ(h.transport.requests().size(), 2u);
  EXPECT_EQ(h.transport.unused_responses(), 0u);
}

TEST(ApiBindingTest, PostsTheBinding) {
  Harness h;
  h.transport.RespondJson(201, {{"kind", "Status"}, {"status", "Success"}, {"code", 201}});
  ASSERT_TRUE(h.api->CreateBinding("ns", "p", "uid-1", "node-a").ok());
  const auto requests = h.transport.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].path, "/api/v1/namespaces/ns/pods/p/binding");
  EXPECT_EQ(requests[0].content_type, "application/json");
  const json want = {{"apiVersion", "v1"},
                     {"kind", "Binding"},
                     {"metadata", {{"name", "p"}, {"namespace", "ns"}, {"uid", "uid-1"}}},
                     {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "node-a"}}}};
  EXPECT_EQ(json::parse(requests[0].body), want);
}

TEST(ApiBindingTest, ConflictIsSuccessOnlyWhenAlreadyOnThisNode) {
  struct Case {
    const char* name;
    json pod;
    bool ok;
  };
  const Case cases[] = {
      {"same node, same pod", Pod("p", "5", "node-a", "uid-1"), true},
      {"other node", Pod("p", "5", "node-b", "uid-1"), false},
      {"recreated pod", Pod("p", "5", "node-a", "uid-2"), false},
      {"unbound", Pod("p", "5", "", "uid-1"), false},
  };
  for (const auto& c : cases) {
    Harness h;
    h.transport.Respond(503, "");  // the first attempt's reply is lost
    h.transport.RespondJson(409, StatusBody(409, "Conflict", "pod p is already assigned to node \"x\""));
    h.transport.RespondJson(200, c.pod);
    const Status bound = h.api->CreateBinding("ns", "p", "uid-1", "node-a");
    EXPECT_EQ(bound.ok(), c.ok) << c.name;
    if (!bound.ok()) {
      EXPECT_TRUE(IsConflict(bound.error())) << c.name;
    }
    const auto requests = h.transport.requests();
    ASSERT_EQ(requests.size(), 3u) << c.name;
    EXPECT_EQ(requests[2].method, "GET");
    EXPECT_EQ(requests[2].path, "/api/v1/namespaces/ns/pods/p");
  }
}

TEST(ApiBindingTest, OtherErrorsAreReturned) {
  Harness h;
  h.transport.RespondJson(404, StatusBody(404, "NotFound", "pods \"p\" not found"));
  const Status bound = h.api->CreateBinding("ns", "p", "uid-1", "node-a");
  ASSERT_FALSE(bound.ok());
  EXPECT_TRUE(IsNotFound(bound.error()));
  EXPECT_EQ(h.transport.requests().size(), 1u);
}

}  // namespace
}  // namespace toposched::kube
