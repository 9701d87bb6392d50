#include "testing/fake_apiserver.h"

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace toposched::testing {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr std::chrono::milliseconds kIoTimeout = 5s;
constexpr std::string_view kUserAgent = "fake-apiserver-test";

// Runs one asynchronous operation to completion on `ioc` (a beast::tcp_stream's expiry bounds
// it), so a broken server fails a test instead of hanging it.
template <class Start>
beast::error_code RunOp(net::io_context& ioc, Start&& start) {
  beast::error_code result = net::error::would_block;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  ioc.restart();
  ioc.run();
  return result;
}

std::string Escape(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

struct HttpResult {
  int status = 0;  // 0: no reply (the connection failed or was dropped)
  std::string body;
  json object;  // the body parsed (discarded when it is not JSON)
  std::string retry_after;
};

// A small blocking keep-alive HTTP/1.1 client on Beast (a test's view of the wire).
class TestClient {
 public:
  explicit TestClient(int port, std::string token = {}) : port_(port), token_(std::move(token)) {}

  HttpResult Send(const std::string& method, const std::string& target, const std::string& body = {},
                  const std::string& content_type = "application/json") {
    HttpResult result;
    if (!connected_) {
      stream_.expires_after(kIoTimeout);
      const tcp::endpoint endpoint(net::ip::address_v4::loopback(), static_cast<unsigned short>(port_));
      if (RunOp(ioc_, [&](auto handler) { stream_.async_connect(endpoint, handler); })) return result;
      connected_ = true;
    }
    http::request<http::string_body> req{http::verb::get, target, 11};
    req.method_string(method);
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::user_agent, std::string(kUserAgent));
    if (!token_.empty()) req.set(http::field::authorization, "Bearer " + token_);
    if (!body.empty()) req.set(http::field::content_type, content_type);
    req.body() = body;
    req.prepare_payload();
    stream_.expires_after(kIoTimeout);
    if (RunOp(ioc_, [&](auto handler) { http::async_write(stream_, req, handler); })) {
      Close();
      return result;
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    if (RunOp(ioc_, [&](auto handler) { http::async_read(stream_, buffer_, parser, handler); })) {
      Close();
      return result;
    }
    const auto& res = parser.get();
    result.status = res.result_int();
    result.body = res.body();
    result.object = json::parse(result.body, nullptr, false);
    if (const auto it = res.find(http::field::retry_after); it != res.end())
      result.retry_after = std::string(it->value());
    if (!res.keep_alive()) Close();
    return result;
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().close(ec);
    buffer_.clear();
    connected_ = false;
  }

 private:
  int port_;
  std::string token_;
  net::io_context ioc_;
  beast::tcp_stream stream_{ioc_};
  beast::flat_buffer buffer_;
  bool connected_ = false;
};

// One watch: the response header, then the chunked body line by line as it arrives.
class WatchStream {
 public:
  enum class End : std::uint8_t { kOpen, kClean, kBroken, kTimeout };

  WatchStream(int port, const std::string& target) {
    on_body_ = [this](std::uint64_t, beast::string_view chunk, beast::error_code&) {
      pending_.append(chunk.data(), chunk.size());
      return chunk.size();
    };
    parser_.on_chunk_body(on_body_);
    parser_.body_limit(boost::none);
    stream_.expires_after(kIoTimeout);
    const tcp::endpoint endpoint(net::ip::address_v4::loopback(), static_cast<unsigned short>(port));
    if (RunOp(ioc_, [&](auto handler) { stream_.async_connect(endpoint, handler); })) {
      end_ = End::kBroken;
      return;
    }
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::user_agent, std::string(kUserAgent));
    if (RunOp(ioc_, [&](auto handler) { http::async_write(stream_, req, handler); }) ||
        RunOp(ioc_, [&](auto handler) { http::async_read_header(stream_, buffer_, parser_, handler); })) {
      end_ = End::kBroken;
      return;
    }
    status_ = parser_.get().result_int();
    content_type_ = std::string(parser_.get()[http::field::content_type]);
    chunked_ = parser_.get().chunked();
  }

  int status() const { return status_; }
  const std::string& content_type() const { return content_type_; }
  bool chunked() const { return chunked_; }
  End end() const { return end_; }

  // The next event, as soon as its line has arrived; nullopt when the stream ended (end() says
  // how) or nothing came within `timeout`.
  std::optional<json> Next(std::chrono::milliseconds timeout = kIoTimeout) {
    for (;;) {
      if (const std::size_t nl = pending_.find('\n'); nl != std::string::npos) {
        const std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        if (line.empty()) continue;
        return json::parse(line, nullptr, false);
      }
      if (end_ != End::kOpen) return std::nullopt;
      if (parser_.is_done()) {
        end_ = End::kClean;
        return std::nullopt;
      }
      stream_.expires_after(timeout);
      const beast::error_code ec =
          RunOp(ioc_, [&](auto handler) { http::async_read_some(stream_, buffer_, parser_, handler); });
      if (ec == beast::error::timeout) {
        end_ = End::kTimeout;
      } else if (ec) {
        end_ = End::kBroken;
      }
    }
  }

  // The next event that is not a BOOKMARK.
  std::optional<json> NextEvent(std::chrono::milliseconds timeout = kIoTimeout) {
    for (;;) {
      std::optional<json> event = Next(timeout);
      if (!event || (*event)["type"] != "BOOKMARK") return event;
    }
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

 private:
  net::io_context ioc_;
  beast::tcp_stream stream_{ioc_};
  beast::flat_buffer buffer_;
  std::string pending_;
  std::function<std::size_t(std::uint64_t, beast::string_view, beast::error_code&)> on_body_;
  http::response_parser<http::empty_body> parser_;
  int status_ = 0;
  std::string content_type_;
  bool chunked_ = false;
  End end_ = End::kOpen;
};

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds limit = 3s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// ---- builders ----

// A Fault with `edit` applied (GCC 12 warns on designated initializers that skip members).
Fault MakeFault(const std::function<void(Fault&)>& edit) {
  Fault fault;
  edit(fault);
  return fault;
}

const std::string kDefaultPods = "/api/v1/namespaces/default/pods";
const std::string kTopologies = "/apis/toposched.io/v1alpha1/nodetopologies";

std::string PodsIn(const std::string& ns) {
  return "/api/v1/namespaces/" + ns + "/pods";
}

json Pod(const std::string& name, const std::string& ns = "default", json labels = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"labels", std::move(labels)}}},
          {"spec", {{"containers", json::array({{{"name", "main"}, {"image", "busybox"}}})}}}};
}

json Topology(const std::string& name, json status = nullptr) {
  json t = {{"apiVersion", "toposched.io/v1alpha1"},
            {"kind", "NodeTopology"},
            {"metadata", {{"name", name}}},
            {"spec", {{"nodeName", name}}}};
  if (!status.is_null()) t["status"] = std::move(status);
  return t;
}

std::vector<std::string> Names(const json& list) {
  std::vector<std::string> names;
  for (const json& item : list["items"]) names.push_back(item["metadata"]["name"]);
  return names;
}

std::uint64_t Rv(const json& object) {
  return std::stoull(object["metadata"]["resourceVersion"].get<std::string>());
}

class FakeApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServerOptions options;
    options.bookmark_interval = 100ms;
    server_ = std::make_unique<FakeApiServer>(options);
    server_->Start();
  }

  TestClient Client() { return TestClient(server_->port()); }
  std::unique_ptr<WatchStream> Watch(const std::string& target) {
    return std::make_unique<WatchStream>(server_->port(), target);
  }

  std::unique_ptr<FakeApiServer> server_;
};

// ---- objects ----

TEST_F(FakeApiServerTest, CreateGetAndListCarryTheResourceVersion) {
  TestClient client = Client();
  const HttpResult created = client.Send("POST", kDefaultPods, Pod("a").dump());
  ASSERT_EQ(created.status, 201) << created.body;
  const json& meta = created.object["metadata"];
  EXPECT_EQ(created.object["kind"], "Pod");
  EXPECT_EQ(created.object["apiVersion"], "v1");
  EXPECT_EQ(meta["resourceVersion"], "1");  // the first write
  EXPECT_EQ(meta["generation"], 1);
  EXPECT_EQ(meta["namespace"], "default");
  EXPECT_FALSE(meta["uid"].get<std::string>().empty());
  EXPECT_EQ(meta["creationTimestamp"].get<std::string>().size(), 20u);  // 2024-01-02T03:04:05Z
  EXPECT_EQ(created.object["status"], json({{"phase", "Pending"}}));

  ASSERT_EQ(client.Send("POST", PodsIn("other"), Pod("b", "other").dump()).status, 201);
  const HttpResult got = client.Send("GET", kDefaultPods + "/a");
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(got.object, created.object);

  const HttpResult list = client.Send("GET", kDefaultPods);
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.object["kind"], "PodList");
  EXPECT_EQ(list.object["metadata"]["resourceVersion"], "2");
  EXPECT_EQ(Names(list.object), std::vector<std::string>{"a"});
  EXPECT_EQ(Names(client.Send("GET", "/api/v1/pods").object), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(server_->resource_version(), 2u);

  const HttpResult missing = client.Send("GET", kDefaultPods + "/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.object["kind"], "Status");
  EXPECT_EQ(missing.object["reason"], "NotFound");
  EXPECT_EQ(missing.object["message"], "pods \"nope\" not found");
  EXPECT_EQ(missing.object["code"], 404);
}

TEST_F(FakeApiServerTest, CreatingTwiceIsAlreadyExists) {
  TestClient client = Client();
  ASSERT_EQ(client.Send("POST", kTopologies, Topology("n1").dump()).status, 201);
  const HttpResult again = client.Send("POST", kTopologies, Topology("n1").dump());
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(again.object["reason"], "AlreadyExists");
  EXPECT_EQ(again.object["message"], "nodetopologies.toposched.io \"n1\" already exists");
  EXPECT_EQ(server_->resource_version(), 1u);
}

TEST_F(FakeApiServerTest, GenerateNameMakesAUniqueName) {
  json pod = Pod("");
  pod["metadata"].erase("name");
  pod["metadata"]["generateName"] = "worker-";
  const HttpResult created = Client().Send("POST", kDefaultPods, pod.dump());
  ASSERT_EQ(created.status, 201);
  const std::string name = created.object["metadata"]["name"];
  EXPECT_TRUE(name.starts_with("worker-"));
  EXPECT_EQ(name.size(), 12u);  // "worker-" + 5 random characters
}

TEST_F(FakeApiServerTest, ReplaceIsConditionalOnTheResourceVersion) {
  TestClient client = Client();
  json pod = client.Send("POST", kDefaultPods, Pod("a").dump()).object;
  pod["metadata"]["labels"]["v"] = "2";
  const HttpResult replaced = client.Send("PUT", kDefaultPods + "/a", pod.dump());
  ASSERT_EQ(replaced.status, 200) << replaced.body;
  EXPECT_EQ(replaced.object["metadata"]["resourceVersion"], "2");
  EXPECT_EQ(replaced.object["metadata"]["uid"], pod["metadata"]["uid"]);

  pod["metadata"]["labels"]["v"] = "3";  // still carries resourceVersion 1
  const HttpResult stale = client.Send("PUT", kDefaultPods + "/a", pod.dump());
  EXPECT_EQ(stale.status, 409);
  EXPECT_EQ(stale.object["reason"], "Conflict");
  EXPECT_EQ(stale.object["message"],
            "Operation cannot be fulfilled on pods \"a\": the object has been modified; please apply your "
            "changes to "
            "the latest version and try again");

  pod["metadata"].erase("resourceVersion");  // unconditional
  EXPECT_EQ(client.Send("PUT", kDefaultPods + "/a", pod.dump()).status, 200);
  EXPECT_EQ(server_->resource_version(), 3u);

  // The same object again changes nothing: no new version (as etcd has it).
  const HttpResult same = client.Send("PUT", kDefaultPods + "/a", pod.dump());
  EXPECT_EQ(same.status, 200);
  EXPECT_EQ(same.object["metadata"]["resourceVersion"], "3");
  EXPECT_EQ(server_->resource_version(), 3u);

  EXPECT_EQ(client.Send("PUT", kDefaultPods + "/b", Pod("b").dump()).status, 404);
  EXPECT_EQ(client.Send("PUT", kDefaultPods + "/a", Pod("b").dump()).status, 400);  // name differs from URL
}

TEST_F(FakeApiServerTest, MergePatchNullDeletesAKey) {
  TestClient client = Client();
  for (const std::string name : {"merge", "strategic"}) {
    SCOPED_TRACE(name);
    ASSERT_EQ(client.Send("POST", kDefaultPods, Pod(name, "default", {{"x", "1"}, {"y", "2"}}).dump()).status,
              201);
    const std::uint64_t before = server_->resource_version();
    const json patch = {{"metadata", {{"labels", {{"x", nullptr}, {"z", "3"}}}}}};
    const std::string type =
        "application/" + std::string(name == "merge" ? "" : "strategic-") + "merge-patch+json";
    const HttpResult patched = client.Send("PATCH", kDefaultPods + "/" + name, patch.dump(), type);
    ASSERT_EQ(patched.status, 200) << patched.body;
    EXPECT_EQ(patched.object["metadata"]["labels"], json({{"y", "2"}, {"z", "3"}}));
    EXPECT_EQ(Rv(patched.object), before + 1);
  }
  ASSERT_EQ(client.Send("POST", kDefaultPods, Pod("a").dump()).status, 201);
  const json stale = {{"metadata", {{"resourceVersion", "1"}, {"labels", {{"z", "1"}}}}}};
  EXPECT_EQ(client.Send("PATCH", kDefaultPods + "/a", stale.dump(), "application/merge-patch+json").status,
            409);
  EXPECT_EQ(client.Send("PATCH", kDefaultPods + "/b", "{}", "application/merge-patch+json").status, 404);
  EXPECT_EQ(client.Send("PATCH", kDefaultPods + "/a", "{}", "application/apply-patch+yaml").status, 415);
  EXPECT_EQ(client.Send("PATCH", kDefaultPods + "/a", "[]", "application/merge-patch+json").status, 400);
}

TEST_F(FakeApiServerTest, JsonPatchOperations) {
  struct Case {
    std::string name;
    json patch;
    int status;
    std::string pointer;  // checked in the stored object when status is 200
    json expected;        // null: the pointer must be absent
  };
  const std::vector<Case> cases = {
      {"add a label", json::parse(R"([{"op":"add","path":"/metadata/labels/new","value":"x"}])"), 200,
       "/metadata/labels/new", "x"},
      {"~1 escapes a slash",
       json::parse(R"([{"op":"add","path":"/metadata/labels/example.com~1role","value":"gpu"}])"),
       200,
       "/metadata/labels",
       {{"app", "web"}, {"example.com/role", "gpu"}}},
      {"~0 escapes a tilde",
       json::parse(R"([{"op":"add","path":"/metadata/labels/a~0b","value":"1"}])"),
       200,
       "/metadata/labels",
       {{"app", "web"}, {"a~b", "1"}}},
      {"replace", json::parse(R"([{"op":"replace","path":"/metadata/labels/app","value":"db"}])"), 200,
       "/metadata/labels/app", "db"},
      {"remove", json::parse(R"([{"op":"remove","path":"/metadata/labels/app"}])"), 200,
       "/metadata/labels/app", nullptr},
      {"test then replace", json::parse(R"([{"op":"test","path":"/metadata/labels/app","value":"web"},
                       {"op":"replace","path":"/metadata/labels/app","value":"api"}])"),
       200, "/metadata/labels/app", "api"},
      {"failed test is 422", json::parse(R"([{"op":"test","path":"/metadata/labels/app","value":"db"},
                       {"op":"replace","path":"/metadata/labels/app","value":"api"}])"),
       422, "", nullptr},
      {"remove of a missing path is 422", json::parse(R"([{"op":"remove","path":"/metadata/labels/none"}])"),
       422, "", nullptr},
      {"not an array is 400", json::parse(R"({"op":"remove","path":"/a"})"), 400, "", nullptr},
      {"unknown op is 400", json::parse(R"([{"op":"frobnicate","path":"/a"}])"), 400, "", nullptr},
      {"add without value is 400", json::parse(R"([{"op":"add","path":"/a"}])"), 400, "", nullptr},
  };
  TestClient client = Client();
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string name = "p" + std::to_string(i++);
    ASSERT_EQ(client.Send("POST", kDefaultPods, Pod(name, "default", {{"app", "web"}}).dump()).status, 201);
    const HttpResult result =
        client.Send("PATCH", kDefaultPods + "/" + name, c.patch.dump(), "application/json-patch+json");
    EXPECT_EQ(result.status, c.status) << result.body;
    const json stored = *server_->Get(kDefaultPods, name);
    if (c.status == 200) {
      const json::json_pointer pointer(c.pointer);
      if (c.expected.is_null()) {
        EXPECT_FALSE(stored.contains(pointer));
      } else {
        EXPECT_EQ(stored.value(pointer, json()), c.expected);
      }
    } else {
      EXPECT_EQ(result.object["code"], c.status);
      if (c.status == 422) {
        EXPECT_EQ(result.object["reason"], "Invalid");
      }
      EXPECT_EQ(stored["metadata"]["labels"], json({{"app", "web"}}));  // unchanged
      EXPECT_EQ(stored["metadata"]["resourceVersion"], std::to_string(server_->resource_version()));
    }
  }
}

TEST_F(FakeApiServerTest, StatusSubresourceIsolatesStatusFromTheObject) {
  TestClient client = Client();
  const std::string path = kTopologies + "/n1";
  const HttpResult created = client.Send("POST", kTopologies, Topology("n1", {{"gpus", 8}}).dump());
  ASSERT_EQ(created.status, 201);
  EXPECT_FALSE(created.object.contains("status"));  // create drops it: only /status sets it

  json with_status = created.object;
  with_status["status"] = {{"gpus", 4}};
  with_status["spec"]["nodeName"] = "ignored-by-status";
  const HttpResult status_put = client.Send("PUT", path + "/status", with_status.dump());
  ASSERT_EQ(status_put.status, 200) << status_put.body;
  EXPECT_EQ(status_put.object["status"], json({{"gpus", 4}}));
  EXPECT_EQ(status_put.object["spec"]["nodeName"], "n1");
  EXPECT_EQ(status_put.object["metadata"]["generation"], 1);

  json object = status_put.object;
  object["spec"]["zone"] = "a";
  object["status"] = {{"gpus", 99}};
  const HttpResult object_put = client.Send("PUT", path, object.dump());
  ASSERT_EQ(object_put.status, 200);
  EXPECT_EQ(object_put.object["status"], json({{"gpus", 4}}));
  EXPECT_EQ(object_put.object["spec"]["zone"], "a");
  EXPECT_EQ(object_put.object["metadata"]["generation"], 2);  // spec changed

  const json both = {{"spec", {{"zone", "b"}}}, {"status", {{"ready", true}}}};
  const HttpResult status_patch =
      client.Send("PATCH", path + "/status", both.dump(), "application/merge-patch+json");
  ASSERT_EQ(status_patch.status, 200);
  EXPECT_EQ(status_patch.object["status"], json({{"gpus", 4}, {"ready", true}}));
  EXPECT_EQ(status_patch.object["spec"]["zone"], "a");

  const std::uint64_t before = server_->resource_version();
  const json status_only = {{"status", {{"gpus", 1}}}};
  const HttpResult object_patch =
      client.Send("PATCH", path, status_only.dump(), "application/merge-patch+json");
  ASSERT_EQ(object_patch.status, 200);
  EXPECT_EQ(object_patch.object["status"]["gpus"], 4);
  EXPECT_EQ(server_->resource_version(), before);  // nothing changed, nothing written

  // Pods too: tests set Ready through pods/status.
  ASSERT_EQ(client.Send("POST", kDefaultPods, Pod("a").dump()).status, 201);
  const json ready = {
      {"status", {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};
  const HttpResult pod =
      client.Send("PATCH", kDefaultPods + "/a/status", ready.dump(), "application/merge-patch+json");
  ASSERT_EQ(pod.status, 200);
  EXPECT_EQ(pod.object["status"]["conditions"][0]["type"], "Ready");
  EXPECT_EQ(client.Send("GET", kDefaultPods + "/a/status").object["status"]["phase"], "Running");
  EXPECT_EQ(client.Send("GET", "/api/v1/namespaces/default/events/e/status").status,
            404);  // no such subresource
}

TEST_F(FakeApiServerTest, Binding) {
  json free_pod = Pod("free");
  free_pod["metadata"]["uid"] = "uid-free";
  server_->Create(kDefaultPods, free_pod);
  json taken = Pod("taken");
  taken["spec"]["nodeName"] = "n1";
  server_->Create(kDefaultPods, taken);
  json other = Pod("other");
  other["metadata"]["uid"] = "uid-other";
  server_->Create(kDefaultPods, other);

  struct Case {
    std::string name, pod, uid, node;
    int status;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"binds a free pod", "free", "uid-free", "n2", 201, ""},
      {"already assigned", "taken", "", "n2", 409,
       "Operation cannot be fulfilled on pods/binding \"taken\": pod taken is already assigned to node "
       "\"n1\""},
      {"uid precondition", "other", "uid-stale", "n2", 409,
       "Operation cannot be fulfilled on pods/binding \"other\": Precondition failed: UID in precondition: "
       "uid-stale, "
       "UID in object meta: uid-other"},
      {"missing pod", "ghost", "", "n2", 404, "pods \"ghost\" not found"},
      {"no target", "other", "", "", 422, "Binding \"other\" is invalid: target.name: Required value"},
  };
  TestClient client = Client();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    json binding = {{"apiVersion", "v1"},
                    {"kind", "Binding"},
                    {"metadata", {{"name", c.pod}, {"namespace", "default"}}},
                    {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", c.node}}}};
    if (!c.uid.empty()) binding["metadata"]["uid"] = c.uid;
    const std::uint64_t before = server_->resource_version();
    const HttpResult result = client.Send("POST", kDefaultPods + "/" + c.pod + "/binding", binding.dump());
    EXPECT_EQ(result.status, c.status) << result.body;
    if (c.status == 201) {
      EXPECT_EQ(result.object["kind"], "Status");
      EXPECT_EQ(result.object["status"], "Success");
      const json pod = *server_->Get(kDefaultPods, c.pod);
      EXPECT_EQ(pod["spec"]["nodeName"], c.node);
      EXPECT_EQ(pod["status"]["conditions"][0]["type"], "PodScheduled");
      EXPECT_EQ(pod["status"]["conditions"][0]["status"], "True");
      EXPECT_EQ(server_->resource_version(), before + 1);
    } else {
      EXPECT_EQ(result.object["message"], c.message);
      EXPECT_EQ(server_->resource_version(), before);
    }
  }
}

TEST_F(FakeApiServerTest, ListPagesAreASnapshotAtTheFirstPagesVersion) {
  for (int i = 0; i < 5; ++i) server_->Create(kDefaultPods, Pod("p" + std::to_string(i)));
  TestClient client = Client();
  const HttpResult first = client.Send("GET", kDefaultPods + "?limit=2");
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(Names(first.object), (std::vector<std::string>{"p0", "p1"}));
  EXPECT_EQ(first.object["metadata"]["resourceVersion"], "5");
  EXPECT_EQ(first.object["metadata"]["remainingItemCount"], 3);
  const std::string token = first.object["metadata"]["continue"];

  // Writes after the first page are not in the later pages (a consistent list at version 5).
  server_->Delete(kDefaultPods, "p2");
  server_->Create(kDefaultPods, Pod("p3a"));
  const HttpResult second = client.Send("GET", kDefaultPods + "?limit=2&continue=" + Escape(token));
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(Names(second.object), (std::vector<std::string>{"p2", "p3"}));
  EXPECT_EQ(second.object["metadata"]["resourceVersion"], "5");
  const HttpResult third = client.Send(
      "GET",
      kDefaultPods + "?limit=2&continue=" + Escape(second.object["metadata"]["continue"].get<std::string>()));
  EXPECT_EQ(Names(third.object), std::vector<std::string>{"p4"});
  EXPECT_FALSE(third.object["metadata"].contains("continue"));

  EXPECT_EQ(Names(client.Send("GET", kDefaultPods).object),
            (std::vector<std::string>{"p0", "p1", "p3", "p3a", "p4"}));
  EXPECT_EQ(client.Send("GET", kDefaultPods + "?limit=2&continue=bm90LWEtdG9rZW4").status, 400);
  server_->Compact();
  const HttpResult expired = client.Send("GET", kDefaultPods + "?limit=2&continue=" + Escape(token));
  EXPECT_EQ(expired.status, 410);
  EXPECT_EQ(expired.object["reason"], "Expired");
}

TEST_F(FakeApiServerTest, Selectors) {
  json a = Pod("a", "default", {{"app", "web"}, {"tier", "front"}});
  a["spec"]["nodeName"] = "n1";
  a["status"] = {{"phase", "Running"}};
  json b = Pod("b", "default", {{"app", "db"}});
  b["status"] = {{"phase", "Pending"}};
  json c = Pod("c", "other", {{"app", "web"}});
  c["spec"]["nodeName"] = "n2";
  c["status"] = {{"phase", "Running"}};
  json d = Pod("d", "other");
  for (const json& pod : {a, b, c, d}) server_->Create("/api/v1/pods", pod);

  struct Case {
    std::string collection, labels, fields;
    int status;
    std::vector<std::string> names;
  };
  const std::vector<Case> cases = {
      {"/api/v1/pods", "app=web", "", 200, {"a", "c"}},
      {"/api/v1/pods", "app==web", "", 200, {"a", "c"}},
      {"/api/v1/pods", "app!=web", "", 200, {"b", "d"}},  // absent counts as "not web"
      {"/api/v1/pods", "tier", "", 200, {"a"}},
      {"/api/v1/pods", "!tier", "", 200, {"b", "c", "d"}},
      {"/api/v1/pods", "app in (web, db)", "", 200, {"a", "b", "c"}},
      {"/api/v1/pods", "app notin (web)", "", 200, {"b", "d"}},
      {"/api/v1/pods", "app=web,tier=front", "", 200, {"a"}},
      {"/api/v1/pods", "", "spec.nodeName=", 200, {"b", "d"}},
      {"/api/v1/pods", "", "spec.nodeName!=", 200, {"a", "c"}},
      {"/api/v1/pods", "", "status.phase=Running,metadata.namespace=default", 200, {"a"}},
      {"/api/v1/pods", "app=web", "spec.nodeName==n2", 200, {"c"}},
      {kDefaultPods, "app=web", "", 200, {"a"}},
      {PodsIn("other"), "", "metadata.name!=c", 200, {"d"}},
      {"/api/v1/pods", "app=(", "", 400, {}},
      {"/api/v1/pods", "a b", "", 400, {}},
      {"/api/v1/pods", "", "spec.priority=1", 400, {}},  // not a pod field selector
      {"/api/v1/pods", "", "spec.nodeName", 400, {}},
  };
  TestClient client = Client();
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.collection + " ? " + tc.labels + " ; " + tc.fields);
    const HttpResult result = client.Send(
        "GET", tc.collection + "?labelSelector=" + Escape(tc.labels) + "&fieldSelector=" + Escape(tc.fields));
    EXPECT_EQ(result.status, tc.status) << result.body;
    if (tc.status == 200) {
      EXPECT_EQ(Names(result.object), tc.names);
    }
  }
}

// ---- watches ----

TEST_F(FakeApiServerTest, WatchStreamsEachEventAsItHappens) {
  server_->Create(kDefaultPods, Pod("a"));
  const std::uint64_t from = server_->resource_version();
  auto watch = Watch(kDefaultPods + "?watch=true&resourceVersion=" + std::to_string(from));
  ASSERT_EQ(watch->status(), 200);
  EXPECT_TRUE(watch->chunked());
  EXPECT_EQ(watch->content_type(), "application/json");

  TestClient client = Client();
  // Each event is read while the stream stays open, before the next write happens.
  ASSERT_EQ(client.Send("POST", kDefaultPods, Pod("b").dump()).status, 201);
  const std::optional<json> added = watch->Next();
  ASSERT_TRUE(added);
  EXPECT_EQ((*added)["type"], "ADDED");
  EXPECT_EQ((*added)["object"]["metadata"]["name"], "b");
  EXPECT_EQ(Rv((*added)["object"]), from + 1);

  ASSERT_EQ(client
                .Send("PATCH", kDefaultPods + "/b", R"({"metadata":{"labels":{"x":"1"}}})",
                      "application/merge-patch+json")
                .status,
            200);
  const std::optional<json> modified = watch->Next();
  ASSERT_TRUE(modified);
  EXPECT_EQ((*modified)["type"], "MODIFIED");
  EXPECT_EQ((*modified)["object"]["metadata"]["labels"]["x"], "1");
  EXPECT_EQ(Rv((*modified)["object"]), from + 2);

  ASSERT_EQ(client.Send("DELETE", kDefaultPods + "/b").status, 200);
  const std::optional<json> deleted = watch->Next();
  ASSERT_TRUE(deleted);
  EXPECT_EQ((*deleted)["type"], "DELETED");
  EXPECT_EQ(Rv((*deleted)["object"]), from + 3);
  EXPECT_EQ(watch->end(), WatchStream::End::kOpen);
  EXPECT_EQ(server_->open_watches(), 1);
}

TEST_F(FakeApiServerTest, WatchFromAnOldVersionReplaysTheHistoryInOrder) {
  server_->Create(kDefaultPods, Pod("a"));                           // 1
  server_->Upsert(kDefaultPods, Pod("a", "default", {{"v", "2"}}));  // 2
  server_->Create(kDefaultPods, Pod("b"));                           // 3
  server_->Delete(kDefaultPods, "a");                                // 4
  auto watch = Watch(kDefaultPods + "?watch=1&resourceVersion=1");
  std::vector<std::pair<std::string, std::uint64_t>> seen;
  for (int i = 0; i < 3; ++i) {
    const std::optional<json> event = watch->Next();
    ASSERT_TRUE(event);
    seen.emplace_back((*event)["type"], Rv((*event)["object"]));
  }
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, std::uint64_t>>{
                      {"MODIFIED", 2}, {"ADDED", 3}, {"DELETED", 4}}));
}

TEST_F(FakeApiServerTest, WatchWithoutAVersionStartsWithTheCurrentObjects) {
  server_->Create(kDefaultPods, Pod("a"));
  server_->Create(kDefaultPods, Pod("b"));
  auto watch = Watch(kDefaultPods + "?watch=true");
  for (const std::string name : {"a", "b"}) {
    const std::optional<json> event = watch->Next();
    ASSERT_TRUE(event);
    EXPECT_EQ((*event)["type"], "ADDED");
    EXPECT_EQ((*event)["object"]["metadata"]["name"], name);
  }
  server_->Upsert(kDefaultPods, Pod("a", "default", {{"v", "2"}}));
  const std::optional<json> event = watch->Next();
  ASSERT_TRUE(event);
  EXPECT_EQ((*event)["type"], "MODIFIED");
}

TEST_F(FakeApiServerTest, WatchSelectorSeesObjectsEnterAndLeave) {
  auto watch = Watch(kDefaultPods + "?watch=true&resourceVersion=0&labelSelector=" + Escape("app=web"));
  server_->Create(kDefaultPods, Pod("x", "default", {{"app", "db"}}));   // not selected: no event
  server_->Upsert(kDefaultPods, Pod("x", "default", {{"app", "web"}}));  // enters: ADDED
  server_->Upsert(kDefaultPods, Pod("x", "default", {{"app", "db"}}));   // leaves: DELETED
  server_->Create(kDefaultPods, Pod("y", "default", {{"app", "web"}}));
  std::vector<std::string> seen;
  for (int i = 0; i < 3; ++i) {
    const std::optional<json> event = watch->Next();
    ASSERT_TRUE(event);
    seen.push_back((*event)["type"].get<std::string>() + " " +
                   (*event)["object"]["metadata"]["name"].get<std::string>());
    if ((*event)["type"] == "DELETED") {
      EXPECT_EQ(Rv((*event)["object"]), 3u);  // the old object at the version that moved it out
      EXPECT_EQ((*event)["object"]["metadata"]["labels"]["app"], "web");
    }
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED x", "DELETED x", "ADDED y"}));
}

TEST_F(FakeApiServerTest, NamespacedWatchSeesOnlyItsNamespace) {
  const std::string from = std::to_string(server_->resource_version());
  auto in_default = Watch(kDefaultPods + "?watch=true&resourceVersion=" + from);
  auto everywhere = Watch("/api/v1/pods?watch=true&resourceVersion=" + from);
  server_->Create(PodsIn("other"), Pod("o", "other"));
  server_->Create(kDefaultPods, Pod("d"));
  const std::optional<json> first = in_default->Next();
  ASSERT_TRUE(first);
  EXPECT_EQ((*first)["object"]["metadata"]["name"], "d");
  for (const std::string name : {"o", "d"}) {
    const std::optional<json> event = everywhere->Next();
    ASSERT_TRUE(event);
    EXPECT_EQ((*event)["object"]["metadata"]["name"], name);
  }
}

TEST_F(FakeApiServerTest, BookmarksCarryTheLatestVersion) {
  server_->Create(kDefaultPods, Pod("a"));
  auto watch = Watch(kDefaultPods + "?watch=true&allowWatchBookmarks=true&resourceVersion=1");
  const std::optional<json> bookmark = watch->Next(2s);  // bookmark_interval is 100 ms here
  ASSERT_TRUE(bookmark);
  EXPECT_EQ(*bookmark, json::parse(R"({"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1",
                                       "metadata":{"resourceVersion":"1"}}})"));
  // A write elsewhere still moves the bookmark on: the watch has seen everything up to it.
  server_->Create("/api/v1/nodes", json{{"metadata", {{"name", "n1"}}}});
  std::optional<json> later;
  ASSERT_TRUE(WaitFor([&] {
    later = watch->Next(2s);
    return !later || (*later)["object"]["metadata"]["resourceVersion"] == "2";
  }));
  ASSERT_TRUE(later);
  EXPECT_EQ((*later)["type"], "BOOKMARK");

  auto without = Watch(kDefaultPods + "?watch=true&resourceVersion=2");
  EXPECT_FALSE(without->Next(300ms));  // no bookmarks unless asked for
  EXPECT_EQ(without->end(), WatchStream::End::kTimeout);
}

TEST_F(FakeApiServerTest, TimeoutSecondsEndsTheStreamCleanlyAfterABookmark) {
  const auto start = std::chrono::steady_clock::now();
  auto watch = Watch("/api/v1/nodes?watch=true&resourceVersion=0&timeoutSeconds=1&allowWatchBookmarks=true");
  std::optional<json> last, event;
  while ((event = watch->Next(3s))) last = event;
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(watch->end(), WatchStream::End::kClean);
  EXPECT_GE(elapsed, 1s);
  EXPECT_LT(elapsed, 3s);
  ASSERT_TRUE(last);
  EXPECT_EQ((*last)["type"], "BOOKMARK");
  EXPECT_TRUE(WaitFor([&] { return server_->open_watches() == 0; }));
}

TEST_F(FakeApiServerTest, WatchFromACompactedVersionGetsAnExpiredErrorEvent) {
  server_->Create(kDefaultPods, Pod("a"));
  server_->Create(kDefaultPods, Pod("b"));
  server_->Compact();
  auto watch = Watch(kDefaultPods + "?watch=true&resourceVersion=1");
  ASSERT_EQ(watch->status(), 200);
  const std::optional<json> error = watch->Next();
  ASSERT_TRUE(error);
  EXPECT_EQ(*error,
            json::parse(R"json({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},
      "status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}})json"));
  EXPECT_FALSE(watch->Next());
  EXPECT_EQ(watch->end(), WatchStream::End::kClean);

  // From the compaction point on, watching works.
  auto current = Watch(kDefaultPods + "?watch=true&resourceVersion=2");
  server_->Create(kDefaultPods, Pod("c"));
  const std::optional<json> added = current->Next();
  ASSERT_TRUE(added);
  EXPECT_EQ((*added)["type"], "ADDED");
}

TEST(FakeApiServerHistoryTest, HistoryLimitExpiresOldVersions) {
  FakeApiServerOptions options;
  options.history_limit = 2;
  FakeApiServer server(options);
  server.Start();
  for (int i = 0; i < 4; ++i)
    server.Create("/api/v1/nodes", json{{"metadata", {{"name", "n" + std::to_string(i)}}}});
  WatchStream old(server.port(), "/api/v1/nodes?watch=true&resourceVersion=1");
  const std::optional<json> error = old.Next();
  ASSERT_TRUE(error);
  EXPECT_EQ((*error)["object"]["message"], "too old resource version: 1 (2)");  // versions 3 and 4 are kept
  WatchStream kept(server.port(), "/api/v1/nodes?watch=true&resourceVersion=2");
  const std::optional<json> event = kept.Next();
  ASSERT_TRUE(event);
  EXPECT_EQ(Rv((*event)["object"]), 3u);
}

// ---- faults ----

TEST_F(FakeApiServerTest, StatusFaultsAnswerWithAStatusOnce) {
  struct Case {
    int status;
    std::string reason;
  };
  const std::vector<Case> cases = {{409, "Conflict"},           {410, "Expired"},
                                   {429, "TooManyRequests"},    {500, "InternalError"},
                                   {503, "ServiceUnavailable"}, {504, "Timeout"}};
  TestClient client = Client();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.status);
    server_->InjectFault(MakeFault([&](Fault& f) {
      f.method = "GET";
      f.path_prefix = "/api/v1/nodes";
      f.status = c.status;
    }));
    EXPECT_EQ(
        client
            .Send("POST", "/api/v1/nodes", R"({"metadata":{"name":"n)" + std::to_string(c.status) + R"("}})")
            .status,
        201);  // another method: not faulted
    const HttpResult faulted = client.Send("GET", "/api/v1/nodes");
    EXPECT_EQ(faulted.status, c.status);
    EXPECT_EQ(faulted.object["kind"], "Status");
    EXPECT_EQ(faulted.object["reason"], c.reason);
    EXPECT_EQ(faulted.object["code"], c.status);
    if (c.status == 429) {
      EXPECT_EQ(faulted.retry_after, "1");
    }
    EXPECT_EQ(client.Send("GET", "/api/v1/nodes").status, 200);  // `times` was 1
  }
}

TEST_F(FakeApiServerTest, FaultsApplyInOrderAndCountDown) {
  server_->InjectFault(MakeFault([&](Fault& f) {
    f.path_prefix = "/api/v1/nodes";
    f.times = 2;
    f.status = 503;
  }));
  server_->InjectFault(MakeFault([&](Fault& f) {
    f.path_prefix = "/api/v1/nodes";
    f.status = 500;
  }));
  server_->InjectFault(MakeFault([&](Fault& f) {
    f.path_prefix = "/api/v1/namespaces/";
    f.times = -1;
    f.status = 429;
  }));
  TestClient client = Client();
  std::vector<int> statuses;
  for (int i = 0; i < 4; ++i) statuses.push_back(client.Send("GET", "/api/v1/nodes?limit=1").status);
  EXPECT_EQ(statuses, (std::vector<int>{503, 503, 500, 200}));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(client.Send("GET", kDefaultPods).status, 429);  // times -1: until cleared
  server_->ClearFaults();
  EXPECT_EQ(client.Send("GET", kDefaultPods).status, 200);
}

TEST_F(FakeApiServerTest, DropAndDelayFaults) {
  server_->InjectFault(MakeFault([&](Fault& f) {
    f.method = "POST";
    f.path_prefix = kDefaultPods;
    f.drop = true;
  }));
  TestClient client = Client();
  const HttpResult dropped = client.Send("POST", kDefaultPods, Pod("a").dump());
  EXPECT_EQ(dropped.status, 0);
  EXPECT_FALSE(server_->Get(kDefaultPods, "a"));  // dropped before it was handled
  EXPECT_EQ(client.Send("POST", kDefaultPods, Pod("a").dump()).status, 201);

  server_->InjectFault(MakeFault([&](Fault& f) {
    f.method = "GET";
    f.delay = 300ms;
  }));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(client.Send("GET", kDefaultPods + "/a").status, 200);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);

  const std::vector<RequestRecord> records = server_->requests();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].status, 0);  // dropped: never answered
}

TEST_F(FakeApiServerTest, WatchOnlyFaultsAndBrokenWatches) {
  for (const std::string name : {"a", "b", "c"}) server_->Create(kDefaultPods, Pod(name));
  server_->InjectFault(MakeFault([&](Fault& f) {
    f.path_prefix = "/api/v1/pods";
    f.watch_only = true;
    f.status = 500;
  }));
  TestClient client = Client();
  EXPECT_EQ(client.Send("GET", "/api/v1/pods").status, 200);  // a list: not a watch
  EXPECT_EQ(client.Send("GET", "/api/v1/pods?watch=true").status, 500);

  server_->InjectFault(MakeFault([&](Fault& f) {
    f.path_prefix = "/api/v1/pods";
    f.watch_only = true;
    f.drop_watch_after_events = 2;
  }));
  auto watch = Watch("/api/v1/pods?watch=true");
  EXPECT_TRUE(watch->Next());
  EXPECT_TRUE(watch->Next());
  EXPECT_FALSE(watch->Next());
  EXPECT_EQ(watch->end(), WatchStream::End::kBroken);  // no terminating chunk
}

// ---- lifecycle ----

TEST_F(FakeApiServerTest, StopAndStartKeepStateAndPortButEndWatches) {
  TestClient client = Client();
  const HttpResult created = client.Send("POST", kDefaultPods, Pod("a").dump());
  ASSERT_EQ(created.status, 201);
  auto watch = Watch(kDefaultPods + "?watch=true&resourceVersion=1");
  ASSERT_TRUE(WaitFor([&] { return server_->open_watches() == 1; }));
  const int port = server_->port();

  server_->Stop();
  EXPECT_FALSE(watch->Next());
  EXPECT_EQ(watch->end(), WatchStream::End::kBroken);
  EXPECT_EQ(server_->open_watches(), 0);
  EXPECT_EQ(TestClient(port).Send("GET", kDefaultPods).status, 0);  // refused while stopped

  server_->Start();
  EXPECT_EQ(server_->port(), port);
  TestClient again(port);
  EXPECT_EQ(again.Send("GET", kDefaultPods + "/a").object, created.object);
  EXPECT_EQ(again.Send("POST", kDefaultPods, Pod("b").dump()).object["metadata"]["resourceVersion"], "2");
}

TEST_F(FakeApiServerTest, DropWatchesEndsOpenWatchesOnly) {
  TestClient client = Client();
  ASSERT_EQ(client.Send("GET", kDefaultPods).status, 200);  // a kept-alive connection
  auto first = Watch(kDefaultPods + "?watch=true&resourceVersion=0");
  auto second = Watch("/api/v1/nodes?watch=true&resourceVersion=0");
  ASSERT_TRUE(WaitFor([&] { return server_->open_watches() == 2; }));

  server_->DropWatches();
  EXPECT_FALSE(first->Next());
  EXPECT_EQ(first->end(), WatchStream::End::kBroken);
  EXPECT_FALSE(second->Next());
  EXPECT_EQ(second->end(), WatchStream::End::kBroken);
  EXPECT_TRUE(WaitFor([&] { return server_->open_watches() == 0; }));
  EXPECT_EQ(client.Send("GET", kDefaultPods).status, 200);

  auto after = Watch(kDefaultPods + "?watch=true&resourceVersion=0");
  server_->Create(kDefaultPods, Pod("a"));
  EXPECT_TRUE(after->Next());
}

TEST_F(FakeApiServerTest, AClientThatHangsUpEndsItsWatch) {
  auto watch = Watch(kDefaultPods + "?watch=true&resourceVersion=0");
  ASSERT_TRUE(WaitFor([&] { return server_->open_watches() == 1; }));
  watch->Close();
  EXPECT_TRUE(WaitFor([&] { return server_->open_watches() == 0; }));
}

// ---- records, auth, bad input, TLS, direct access ----

TEST_F(FakeApiServerTest, RequestRecordsNameTheKubernetesVerbAndResource) {
  server_->Create("/api/v1/nodes", json{{"metadata", {{"name", "n1"}}}});
  struct Case {
    std::string method, target, body, content_type;
    std::string verb, group, resource;
    int status;
  };
  const std::string json_type = "application/json", merge = "application/merge-patch+json";
  const std::string pod = Pod("a").dump();
  const std::string binding = R"({"metadata":{"name":"a"},"target":{"name":"n1"}})";
  const std::vector<Case> cases = {
      {"GET", "/api/v1/nodes", "", json_type, "list", "", "nodes", 200},
      {"POST", kDefaultPods, pod, json_type, "create", "", "pods", 201},
      {"GET", kDefaultPods + "/a", "", json_type, "get", "", "pods", 200},
      {"PUT", kDefaultPods + "/a", pod, json_type, "update", "", "pods", 200},
      {"PATCH", kDefaultPods + "/a/status", R"({"status":{"phase":"Running"}})", merge, "patch", "",
       "pods/status", 200},
      {"POST", kDefaultPods + "/a/binding", binding, json_type, "create", "", "pods/binding", 201},
      {"POST", "/api/v1/namespaces/default/events", R"({"metadata":{"name":"e"}})", json_type, "create", "",
       "events", 201},
      {"GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/l", "", json_type, "get",
       "coordination.k8s.io", "leases", 404},
      {"PUT", kTopologies + "/t/status", Topology("t").dump(), json_type, "update", "toposched.io",
       "nodetopologies/status", 404},
      {"PATCH", "/api/v1/nodes/n1", R"({"metadata":{"labels":{"a":"b"}}})", merge, "patch", "", "nodes", 200},
      {"DELETE", kDefaultPods + "/a", "", json_type, "delete", "", "pods", 200},
      {"DELETE", kDefaultPods, "", json_type, "deletecollection", "", "pods", 405},
      {"GET", "/nope", "", json_type, "get", "", "", 404},
  };
  TestClient client = Client();
  server_->ClearRequests();
  for (const Case& c : cases) {
    const HttpResult result = client.Send(c.method, c.target, c.body, c.content_type);
    EXPECT_EQ(result.status, c.status) << c.method << " " << c.target << ": " << result.body;
  }
  auto watch = Watch("/api/v1/nodes?watch=true&resourceVersion=0");
  ASSERT_EQ(watch->status(), 200);
  const std::vector<RequestRecord> records = server_->requests();
  ASSERT_EQ(records.size(), cases.size() + 1);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].method + " " + cases[i].target);
    EXPECT_EQ(records[i].method, cases[i].method);
    EXPECT_EQ(records[i].verb, cases[i].verb);
    EXPECT_EQ(records[i].group, cases[i].group);
    EXPECT_EQ(records[i].resource, cases[i].resource);
    EXPECT_EQ(records[i].status, cases[i].status);
    EXPECT_EQ(records[i].user_agent, kUserAgent);
  }
  EXPECT_EQ(records.back().verb, "watch");
  EXPECT_EQ(records.back().resource, "nodes");
  EXPECT_EQ(records.back().query, "watch=true&resourceVersion=0");
  server_->ClearRequests();
  EXPECT_TRUE(server_->requests().empty());
}

TEST(FakeApiServerAuthTest, BearerTokenIsRequiredWhenConfigured) {
  FakeApiServerOptions options;
  options.required_token = "s3cret";
  FakeApiServer server(options);
  server.Start();
  const HttpResult anonymous = TestClient(server.port()).Send("GET", "/api/v1/nodes");
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_EQ(anonymous.object["reason"], "Unauthorized");
  EXPECT_EQ(TestClient(server.port(), "wrong").Send("GET", "/api/v1/nodes").status, 401);
  EXPECT_EQ(TestClient(server.port(), "wrong").Send("GET", "/api/v1/nodes?watch=true").status, 401);
  EXPECT_EQ(TestClient(server.port(), "s3cret").Send("GET", "/api/v1/nodes").status, 200);
}

TEST(FakeApiServerLimitsTest, BadInputGetsAStatusNotACrash) {
  FakeApiServerOptions options;
  options.max_body_bytes = 1024;
  FakeApiServer server(options);
  server.Start();
  TestClient client(server.port());
  struct Case {
    std::string name, method, target, body;
    int status;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"invalid JSON", "POST", kDefaultPods, "{not json", 400, "BadRequest"},
      {"not an object", "POST", kDefaultPods, "[1,2]", 400, "BadRequest"},
      {"metadata of the wrong type", "POST", kDefaultPods, R"({"metadata":{"name":7}})", 400, "BadRequest"},
      {"a name with a slash", "POST", kDefaultPods, R"({"metadata":{"name":"a/b"}})", 400, "BadRequest"},
      {"deep nesting", "POST", kDefaultPods, std::string(600, '['), 400, "BadRequest"},
      {"no name", "POST", kDefaultPods, R"({"metadata":{}})", 422, "Invalid"},
      {"namespace differs from the path", "POST", kDefaultPods, Pod("a", "other").dump(), 400, "BadRequest"},
      {"unknown resource", "GET", "/api/v1/secrets", "", 404, "NotFound"},
      {"unknown path", "GET", "/apis/toposched.io/v1alpha1/nodetopologies/a/b/c", "", 404, "NotFound"},
      {"create without a namespace", "POST", "/api/v1/pods", Pod("a").dump(), 405, "MethodNotAllowed"},
      {"bad limit", "GET", kDefaultPods + "?limit=x", "", 400, "BadRequest"},
      {"bad watch version", "GET", kDefaultPods + "?watch=true&resourceVersion=x", "", 400, "BadRequest"},
      {"body over the limit", "POST", kDefaultPods, std::string(2048, ' '), 413, "RequestEntityTooLarge"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const HttpResult result = client.Send(c.method, c.target, c.body);
    EXPECT_EQ(result.status, c.status) << result.body;
    EXPECT_EQ(result.object["reason"], c.reason);
  }
  EXPECT_EQ(TestClient(server.port()).Send("GET", "/version").object["major"], "1");  // still serving
}

constexpr std::string_view kTestCert = R"(-----BEGIN CERTIFICATE-----
MIIBpjCCAUugAwIBAgIULIzQFyHQAYRqTy2qOQ0A/dtOPnAwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOZmFrZS1hcGlzZXJ2ZXIwIBcNMjYxMjAyMTY0ODIwWhgPMjEy
NjExMDgxNjQ4MjBaMBkxFzAVBgNVBAMMDmZha2UtYXBpc2VydmVyMFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAE4S3vnth6eWHrdEN6I/ECGnddGpz/Tlbvq/aaudoL
SjqtnSPg8C2LzLtqA+RgKVxd8ga8SEXkxg0rF/NuvyPndKNvMG0wHQYDVR0OBBYE
FJklEizAgj/1/5dU+xY3RLkHrp1HMB8GA1UdIwQYMBaAFJklEizAgj/1/5dU+xY3
RLkHrp1HMA8GA1UdEwEB/wQFMAMBAf8wGgYDVR0RBBMwEYcEfwAAAYIJbG9jYWxo
b3N0MAoGCCqGSM49BAMCA0kAMEYCIQDb7IS9nNjUoRhvgHHeTARqUbiz+fy6bVxP
0HEvU1A6mwIhAKBLfdxK267Qx6KfuHF5HWF5MzeWKigQv69f0/YDu39t
-----END CERTIFICATE-----
)";
constexpr std::string_view kTestKey = R"(-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgYfPAEUhs6rFAtQ99
dYMLVCCZwTBvVU3b8jDongzJBs6hRANCAAThLe+e2Hp5Yet0Q3oj8QIad10anP9O
Vu+r9pq52gtKOq2dI+DwLYvMu2oD5GApXF3yBrxIReTGDSsX826/I+d0
-----END PRIVATE KEY-----
)";

TEST(FakeApiServerTlsTest, ServesOverTls) {
  FakeApiServerOptions options;
  options.tls_cert_pem = kTestCert;
  options.tls_key_pem = kTestKey;
  FakeApiServer server(options);
  server.Start();
  EXPECT_EQ(server.url(), "https://127.0.0.1:" + std::to_string(server.port()));
  server.Create("/api/v1/nodes", json{{"metadata", {{"name", "n1"}}}});

  net::io_context ioc;
  net::ssl::context ctx(net::ssl::context::tls_client);
  ctx.set_verify_mode(net::ssl::verify_none);  // the certificate's dates follow this machine's clock
  beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
  beast::get_lowest_layer(stream).expires_after(kIoTimeout);
  const tcp::endpoint endpoint(net::ip::address_v4::loopback(), static_cast<unsigned short>(server.port()));
  ASSERT_FALSE(
      RunOp(ioc, [&](auto handler) { beast::get_lowest_layer(stream).async_connect(endpoint, handler); }));
  ASSERT_FALSE(
      RunOp(ioc, [&](auto handler) { stream.async_handshake(net::ssl::stream_base::client, handler); }));
  http::request<http::empty_body> req{http::verb::get, "/api/v1/nodes/n1", 11};
  req.set(http::field::host, "127.0.0.1");
  ASSERT_FALSE(RunOp(ioc, [&](auto handler) { http::async_write(stream, req, handler); }));
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  ASSERT_FALSE(RunOp(ioc, [&](auto handler) { http::async_read(stream, buffer, res, handler); }));
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(json::parse(res.body())["metadata"]["name"], "n1");
  beast::error_code ec;
  beast::get_lowest_layer(stream).socket().close(ec);
  server.Stop();
}

TEST_F(FakeApiServerTest, DirectAccess) {
  json pod = Pod("a", "ns1");
  pod["metadata"]["uid"] = "fixed-uid";
  const json created = server_->Create("/api/v1/pods", pod);  // all namespaces: the object's own
  EXPECT_EQ(created["metadata"]["uid"], "fixed-uid");
  EXPECT_EQ(created["metadata"]["resourceVersion"], "1");
  EXPECT_THROW(server_->Create(PodsIn("ns1"), pod), std::runtime_error);
  EXPECT_THROW(server_->Create("/api/v1/pods", Pod("b", "")), std::invalid_argument);
  EXPECT_THROW(server_->Create("/api/v1/nope", pod), std::invalid_argument);
  EXPECT_THROW(server_->Get("/api/v1/pods", "a"), std::invalid_argument);

  const json replaced = server_->Upsert(PodsIn("ns1"), Pod("a", "ns1", {{"v", "2"}}));
  EXPECT_EQ(replaced["metadata"]["uid"], "fixed-uid");
  EXPECT_EQ(replaced["metadata"]["resourceVersion"], "2");
  EXPECT_EQ(replaced["metadata"]["generation"], 1);  // only labels changed
  server_->Upsert(PodsIn("ns2"), Pod("c", "ns2"));
  EXPECT_EQ(server_->List("/api/v1/pods").size(), 2u);
  EXPECT_EQ(server_->List(PodsIn("ns1")).size(), 1u);
  EXPECT_EQ((*server_->Get(PodsIn("ns1"), "a"))["metadata"]["labels"]["v"], "2");
  EXPECT_TRUE(server_->Delete(PodsIn("ns1"), "a"));
  EXPECT_FALSE(server_->Delete(PodsIn("ns1"), "a"));
  EXPECT_FALSE(server_->Get(PodsIn("ns1"), "a"));
  EXPECT_EQ(server_->resource_version(), 4u);
}

}  // namespace
}  // namespace toposched::testing
