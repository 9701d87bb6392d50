// The cpprestsdk transport against a real server on an ephemeral port: a small synchronous
// Boost.Beast server (a thread per connection) whose handlers write raw bytes, so that tests
// control chunk boundaries, pauses and abrupt closes, plus TLS with certificates made here.

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "rest_transport_internal.h"
#include "toposched/kube/transport.h"

namespace toposched::kube {

namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

// ---- the test server --------------------------------------------------------------------

struct RecordedRequest {
  std::string method, target, body;
  std::map<std::string, std::string> headers;  // names lower-cased

  std::string Header(const std::string& name) const {
    const auto it = headers.find(name);
    return it == headers.end() ? "<absent>" : it->second;
  }
};

// The connection a handler answers on: raw bytes out.
struct Peer {
  std::function<bool(std::string_view)> write;
  std::string client_common_name;  // TLS with a client certificate
};

class TestServer {
 public:
  // Answers one request; false closes the connection (abruptly, mid-body if it likes).
  using Handler = std::function<bool(Peer& peer, const RecordedRequest& request)>;

  explicit TestServer(Handler handler, std::shared_ptr<ssl::context> tls = nullptr, bool ipv6 = false)
      : handler_(std::move(handler)), tls_(std::move(tls)), ipv6_(ipv6), acceptor_(io_) {
    acceptor_.open(ipv6 ? tcp::v6() : tcp::v4());
    acceptor_.bind(ipv6 ? tcp::endpoint(net::ip::address_v6::loopback(), 0)
                        : tcp::endpoint(net::ip::address_v4::loopback(), 0));
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~TestServer() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      for (const int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    changed_.notify_all();
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // wakes accept()
    accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      for (const int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
      threads.swap(connection_threads_);
    }
    for (std::thread& thread : threads) thread.join();
  }

  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  std::uint16_t port() const { return port_; }
  std::string url() const {
    return std::string(tls_ ? "https" : "http") + (ipv6_ ? "://[::1]:" : "://127.0.0.1:") +
           std::to_string(port_);
  }

  std::vector<RecordedRequest> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  int connections() const { return connections_.load(); }
  int handshake_failures() const { return handshake_failures_.load(); }
  std::string last_client_common_name() const {
    std::lock_guard lock(mutex_);
    return last_client_common_name_;
  }

  // Named flags shared by handlers and tests; Await gives up after `timeout` or at shutdown.
  void Set(const std::string& flag) {
    {
      std::lock_guard lock(mutex_);
      flags_.insert(flag);
    }
    changed_.notify_all();
  }
  bool Await(const std::string& flag, milliseconds timeout = 5s) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return stopping_ || flags_.count(flag) > 0; });
    return flags_.count(flag) > 0;
  }

 private:
  void AcceptLoop() {
    while (true) {
      tcp::socket socket(io_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      if (ec) continue;
      connection_threads_.emplace_back([this, s = std::move(socket)]() mutable { Serve(std::move(s)); });
    }
  }

  void Serve(tcp::socket socket) {
    ++connections_;
    const int fd = socket.native_handle();
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      open_fds_.insert(fd);
    }
    if (tls_) {
      ssl::stream<tcp::socket&> stream(socket, *tls_);
      boost::system::error_code ec;
      stream.handshake(ssl::stream_base::server, ec);
      if (ec) {
        ++handshake_failures_;
      } else {
        Peer peer;
        peer.write = [&stream](std::string_view bytes) {
          boost::system::error_code write_error;
          net::write(stream, net::buffer(bytes.data(), bytes.size()), write_error);
          return !write_error;
        };
        if (X509* certificate = SSL_get_peer_certificate(stream.native_handle())) {
          char name[256] = {};
          X509_NAME_get_text_by_NID(X509_get_subject_name(certificate), NID_commonName, name, sizeof name);
          X509_free(certificate);
          peer.client_common_name = name;
          std::lock_guard lock(mutex_);
          last_client_common_name_ = name;
        }
        Exchanges(stream, peer);
      }
    } else {
      Peer peer;
      peer.write = [&socket](std::string_view bytes) {
        boost::system::error_code write_error;
        net::write(socket, net::buffer(bytes.data(), bytes.size()), write_error);
        return !write_error;
      };
      Exchanges(socket, peer);
    }
    std::lock_guard lock(mutex_);
    open_fds_.erase(fd);
    boost::system::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
  }

  template <typename Stream>
  void Exchanges(Stream& stream, Peer& peer) {
    boost::beast::flat_buffer buffer;
    while (true) {
      http::request<http::string_body> message;
      boost::system::error_code ec;
      http::read(stream, buffer, message, ec);
      if (ec) return;
      RecordedRequest request;
      request.method = std::string(message.method_string());
      request.target = std::string(message.target());
      request.body = message.body();
      for (const auto& field : message) {
        std::string name(field.name_string());
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        request.headers[name] = std::string(field.value());
      }
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        requests_.push_back(request);
      }
      if (!handler_(peer, request)) return;
    }
  }

  const Handler handler_;
  const std::shared_ptr<ssl::context> tls_;
  const bool ipv6_;
  net::io_context io_;
  tcp::acceptor acceptor_;
  std::uint16_t port_ = 0;
  std::thread accept_thread_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::set<int> open_fds_;
  std::vector<std::thread> connection_threads_;
  std::vector<RecordedRequest> requests_;
  std::set<std::string> flags_;
  std::string last_client_common_name_;
  std::atomic<int> connections_{0};
  std::atomic<int> handshake_failures_{0};
};

bool Reply(Peer& peer, int status, const std::string& body,
           const std::string& content_type = "application/json") {
  return peer.write("HTTP/1.1 " + std::to_string(status) + " Status\r\nContent-Type: " + content_type +
                    "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
}

bool StartChunked(Peer& peer, int status = 200) {
  return peer.write("HTTP/1.1 " + std::to_string(status) +
                    " Status\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
}

bool Chunk(Peer& peer, std::string_view data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return peer.write(std::string(size) + std::string(data) + "\r\n");
}

bool EndChunked(Peer& peer) {
  return peer.write("0\r\n\r\n");
}

// ---- transports -------------------------------------------------------------------------

ClientConfig ConfigFor(const TestServer& server) {
  ClientConfig config;
  config.server = server.url();
  config.token = "t0k3n";
  return config;
}

std::unique_ptr<Transport> MustMake(const ClientConfig& config) {
  auto transport = MakeRestTransport(config);
  EXPECT_TRUE(transport.ok()) << transport.error().message();
  return transport.ok() ? std::move(*transport) : nullptr;
}

std::unique_ptr<Transport> MustMakeWithLimits(const ClientConfig& config, std::size_t max_response_bytes,
                                              std::size_t max_line_bytes, milliseconds token_period = 60s) {
  auto transport =
      internal::MakeRestTransportForTesting(config, token_period, max_response_bytes, max_line_bytes);
  EXPECT_TRUE(transport.ok()) << transport.error().message();
  return transport.ok() ? std::move(*transport) : nullptr;
}

Request Get(const std::string& path, milliseconds timeout = 20s) {  // generous: only failures wait
  Request request;
  request.path = path;
  request.timeout = timeout;
  return request;
}

// The lines a stream delivered, and how it ended.
struct StreamRun {
  Result<Response> result{Error("not run")};
  std::vector<std::string> lines;
  milliseconds took{0};
};

StreamRun RunStream(Transport& transport, const Request& request, std::stop_token stop = {},
                    const std::function<bool(std::string_view)>& also = nullptr) {
  StreamRun run;
  const auto start = Clock::now();
  run.result = transport.Stream(
      request,
      [&](std::string_view line) {
        run.lines.emplace_back(line);
        return also ? also(line) : true;
      },
      std::move(stop));
  run.took = Since(start);
  return run;
}

// ---- Do ---------------------------------------------------------------------------------

TEST(RestTransportDo, SendsMethodPathHeadersAndBody) {
  TestServer server([](Peer& peer, const RecordedRequest&) { return Reply(peer, 201, R"({"kind":"Pod"})"); });
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  Request request;
  request.method = "PATCH";
  request.path = "/api/v1/namespaces/default/pods/p%2Fq?fieldSelector=spec.nodeName%3Dnode-1&limit=5";
  request.body = R"({"metadata":{"labels":{"a":"b"}}})";
  request.content_type = "application/merge-patch+json";

  auto response = transport->Do(request);
  ASSERT_TRUE(response.ok()) << response.error().message();
  EXPECT_EQ(response->status, 201);
  EXPECT_EQ(response->body, R"({"kind":"Pod"})");
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  const RecordedRequest& seen = requests[0];
  EXPECT_EQ(seen.method, "PATCH");
  EXPECT_EQ(seen.target, request.path);  // sent as given: no re-escaping
  EXPECT_EQ(seen.body, request.body);
  EXPECT_EQ(seen.Header("authorization"), "Bearer t0k3n");
  EXPECT_EQ(seen.Header("content-type"), "application/merge-patch+json");
  EXPECT_EQ(seen.Header("accept"), "application/json");
  EXPECT_EQ(seen.Header("user-agent"), "toposched/0.1");
  EXPECT_EQ(seen.Header("host"), "127.0.0.1:" + std::to_string(server.port()));
}

TEST(RestTransportDo, GetWithoutBodyOrTokenSendsNeitherContentTypeNorAuthorization) {
  TestServer server([](Peer& peer, const RecordedRequest&) { return Reply(peer, 200, "{}"); });
  ClientConfig config = ConfigFor(server);
  config.token.clear();
  config.user_agent = "toposched-test/9";
  auto transport = MustMake(config);
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/version"));
  ASSERT_TRUE(response.ok()) << response.error().message();
  const auto seen = server.requests().at(0);
  EXPECT_EQ(seen.method, "GET");
  EXPECT_EQ(seen.Header("content-type"), "<absent>");
  EXPECT_EQ(seen.Header("authorization"), "<absent>");
  EXPECT_EQ(seen.Header("user-agent"), "toposched-test/9");
}

TEST(RestTransportDo, AnyStatusIsAResponseAndRedirectsAreNotFollowed) {
  struct Case {
    const char* name;
    int status;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"not found", 404, R"({"kind":"Status","reason":"NotFound"})"},
      {"conflict", 409, R"({"kind":"Status","reason":"Conflict"})"},
      {"server error", 500, "boom"},
      {"unauthorized", 401, ""},
      {"redirect", 302, "elsewhere"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestServer server([&](Peer& peer, const RecordedRequest&) {
      if (c.status == 302) {
        return peer.write("HTTP/1.1 302 Found\r\nLocation: /other\r\nContent-Length: 9\r\n\r\nelsewhere");
      }
      return Reply(peer, c.status, c.body);
    });
    auto transport = MustMake(ConfigFor(server));
    ASSERT_NE(transport, nullptr);
    auto response = transport->Do(Get("/api/v1/pods"));
    ASSERT_TRUE(response.ok()) << response.error().message();
    EXPECT_EQ(response->status, c.status);
    EXPECT_EQ(response->body, c.body);
    EXPECT_EQ(server.requests().size(), 1u);
  }
}

// Retry-After in delay-seconds form on 429 and 5xx replies; anything else (an HTTP date, a
// negative number, another status) reads as none.
TEST(RestTransportDo, RetryAfterOnOverloadReplies) {
  struct Case {
    const char* name;
    int status;
    std::string header;  // "" = none
    std::optional<std::chrono::seconds> want;
  };
  const std::vector<Case> cases = {
      {"429 seconds", 429, "7", std::chrono::seconds(7)},
      {"503 with spaces", 503, " 3 ", std::chrono::seconds(3)},
      {"zero", 500, "0", std::chrono::seconds(0)},
      {"capped at a day", 429, "99999999", std::chrono::hours(24)},
      {"an HTTP date", 503, "Fri, 31 Dec 1999 23:59:59 GMT", std::nullopt},
      {"negative", 429, "-1", std::nullopt},
      {"no header", 503, "", std::nullopt},
      {"not an overload status", 404, "5", std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestServer server([&](Peer& peer, const RecordedRequest&) {
      const std::string extra = c.header.empty() ? "" : "Retry-After: " + c.header + "\r\n";
      return peer.write("HTTP/1.1 " + std::to_string(c.status) + " Status\r\n" + extra +
                        "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
    });
    auto transport = MustMake(ConfigFor(server));
    ASSERT_NE(transport, nullptr);
    auto response = transport->Do(Get("/api/v1/pods"));
    ASSERT_TRUE(response.ok()) << response.error().message();
    EXPECT_EQ(response->status, c.status);
    EXPECT_EQ(response->retry_after, c.want);
  }
}

TEST(RestTransportDo, ReadsLargeContentLengthAndChunkedBodies) {
  std::string big(3u << 20, 'x');
  for (std::size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>('a' + (i / 4096) % 26);
  TestServer server([&](Peer& peer, const RecordedRequest& request) {
    if (request.target == "/chunked") {
      if (!StartChunked(peer)) return false;
      for (std::size_t i = 0; i < big.size(); i += 100'000) {
        if (!Chunk(peer, std::string_view(big).substr(i, 100'000))) return false;
      }
      return EndChunked(peer);
    }
    return Reply(peer, 200, big);
  });
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  for (const std::string path : {"/length", "/chunked"}) {
    SCOPED_TRACE(path);
    auto response = transport->Do(Get(path));
    ASSERT_TRUE(response.ok()) << response.error().message();
    EXPECT_EQ(response->status, 200);
    EXPECT_TRUE(response->body == big) << response->body.size();
  }
}

TEST(RestTransportDo, ReusesOneConnectionForSequentialRequests) {
  TestServer server([](Peer& peer, const RecordedRequest&) { return Reply(peer, 200, "{}"); });
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(transport->Do(Get("/healthz")).ok());
    std::this_thread::sleep_for(50ms);  // cpprestsdk pools the connection once its request is torn down
  }
  EXPECT_EQ(server.requests().size(), 3u);
  EXPECT_EQ(server.connections(), 1);
}

TEST(RestTransportDo, ConcurrentCallsFromManyThreads) {
  TestServer server(
      [](Peer& peer, const RecordedRequest& request) { return Reply(peer, 200, request.target); });
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  std::vector<std::future<bool>> results;
  for (int t = 0; t < 4; ++t) {
    results.push_back(std::async(std::launch::async, [&, t] {
      for (int i = 0; i < 5; ++i) {
        const std::string path = "/x/" + std::to_string(t) + "/" + std::to_string(i);
        auto response = transport->Do(Get(path));
        if (!response.ok() || response->body != path) return false;
      }
      return true;
    }));
  }
  for (auto& result : results) EXPECT_TRUE(result.get());
  EXPECT_EQ(server.requests().size(), 20u);
}

TEST(RestTransportDo, BodyOverTheLimitIsAnError) {
  TestServer server(
      [](Peer& peer, const RecordedRequest&) { return Reply(peer, 200, std::string(5000, 'y')); });
  auto transport = MustMakeWithLimits(ConfigFor(server), /*max_response_bytes=*/4096, kMaxWatchLineBytes);
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/big"));
  ASSERT_FALSE(response.ok());
  EXPECT_NE(response.error().message().find("over 4096 bytes"), std::string::npos)
      << response.error().message();
}

TEST(RestTransportDo, TimeoutBoundsTheWholeExchange) {
  // Headers come at once, then the body trickles in more slowly than the timeout allows.
  TestServer server([&](Peer& peer, const RecordedRequest&) {
    if (!StartChunked(peer)) return false;
    for (int i = 0; i < 20; ++i) {
      if (!Chunk(peer, "{}\n")) return false;
      std::this_thread::sleep_for(100ms);
    }
    return EndChunked(peer);
  });
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  const auto start = Clock::now();
  auto response = transport->Do(Get("/trickle", 400ms));
  const auto took = Since(start);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().message().rfind("transport: GET /trickle: ", 0), 0u)
      << response.error().message();
  EXPECT_GE(took, 350ms);
  EXPECT_LT(took, 1500ms);
}

TEST(RestTransportDo, NoResponseWithinTheTimeoutIsAnError) {
  TestServer* self = nullptr;
  TestServer server([&](Peer& peer, const RecordedRequest&) {
    self->Await("release");
    return Reply(peer, 200, "{}");
  });
  self = &server;
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  const auto start = Clock::now();
  auto response = transport->Do(Get("/slow", 300ms));
  const auto took = Since(start);
  server.Set("release");
  ASSERT_FALSE(response.ok());
  EXPECT_NE(response.error().message().find("no response within 300 ms"), std::string::npos)
      << response.error().message();
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 1500ms);
}

TEST(RestTransportDo, BodyCutShortIsAnError) {
  TestServer server([](Peer& peer, const RecordedRequest&) {
    peer.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
    return false;  // closes with 90 bytes missing
  });
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/short"));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().message().rfind("transport: ", 0), 0u) << response.error().message();
}

TEST(RestTransportDo, ConnectionRefusedIsATransportError) {
  std::uint16_t port = 0;
  {
    net::io_context io;
    tcp::acceptor acceptor(io, tcp::endpoint(net::ip::address_v4::loopback(), 0));
    port = acceptor.local_endpoint().port();
  }  // closed: nothing listens there now
  ClientConfig config;
  config.server = "http://127.0.0.1:" + std::to_string(port);
  auto transport = MustMake(config);
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/api"));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().message().rfind("transport: GET /api: ", 0), 0u) << response.error().message();
}

bool Ipv6LoopbackAvailable() {
  net::io_context io;
  tcp::acceptor acceptor(io);
  boost::system::error_code ec;
  acceptor.open(tcp::v6(), ec);
  if (!ec) acceptor.bind(tcp::endpoint(net::ip::address_v6::loopback(), 0), ec);
  return !ec;
}

TEST(RestTransportDo, ReachesAnIpv6Server) {
  if (!Ipv6LoopbackAvailable()) GTEST_SKIP() << "no IPv6 loopback here";
  TestServer server([](Peer& peer, const RecordedRequest&) { return Reply(peer, 200, "v6"); }, nullptr,
                    /*ipv6=*/true);
  auto transport = MustMake(ConfigFor(server));  // http://[::1]:PORT
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/version"));
  ASSERT_TRUE(response.ok()) << response.error().message();
  EXPECT_EQ(response->body, "v6");
  EXPECT_EQ(server.requests().at(0).Header("host"), "[::1]:" + std::to_string(server.port()));
}

// ---- Stream -----------------------------------------------------------------------------

TEST(RestTransportStream, DeliversEachLineAsSoonAsItArrives) {
  TestServer* self = nullptr;
  std::atomic<bool> first_line_seen_before_second_sent{false};
  TestServer server([&](Peer& peer, const RecordedRequest&) {
    if (!StartChunked(peer) || !Chunk(peer, R"({"type":"ADDED","n":1})"
                                            "\n"))
      return false;
    // The second event is only sent once the client has handed over the first.
    first_line_seen_before_second_sent = self->Await("line 1 delivered");
    if (!Chunk(peer, R"({"type":"MODI)")) return false;  // one line split across chunks...
    std::this_thread::sleep_for(20ms);
    if (!Chunk(peer, R"(FIED","n":2})"
                     "\n\n"
                     R"({"n":3})"
                     "\r\n"
                     R"({"n":4})"
                     "\n"))
      return false;  // ...several in one
    return EndChunked(peer);
  });
  self = &server;
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  const StreamRun run = RunStream(*transport, Get("/api/v1/pods?watch=true"), {}, [&](std::string_view line) {
    if (line.find("\"n\":1") != std::string_view::npos) server.Set("line 1 delivered");
    return true;
  });
  ASSERT_TRUE(run.result.ok()) << run.result.error().message();
  EXPECT_EQ(run.result->status, 200);
  EXPECT_EQ(run.result->body, "");
  EXPECT_TRUE(first_line_seen_before_second_sent);
  const std::vector<std::string> expected = {R"({"type":"ADDED","n":1})", R"({"type":"MODIFIED","n":2})",
                                             R"({"n":3})", R"({"n":4})"};
  EXPECT_EQ(run.lines, expected);
  EXPECT_EQ(server.requests().at(0).target, "/api/v1/pods?watch=true");
  EXPECT_EQ(server.requests().at(0).Header("authorization"), "Bearer t0k3n");
}

TEST(RestTransportStream, AFinalLineWithoutNewlineIsDelivered) {
  TestServer server([](Peer& peer, const RecordedRequest&) {
    return StartChunked(peer) && Chunk(peer, "a\nb") && EndChunked(peer);
  });
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  const StreamRun run = RunStream(*transport, Get("/w"));
  ASSERT_TRUE(run.result.ok()) << run.result.error().message();
  EXPECT_EQ(run.lines, (std::vector<std::string>{"a", "b"}));
}

TEST(RestTransportStream, OtherStatusesReturnTheWholeBodyWithoutLines) {
  const std::string status = R"({"kind":"Status","code":410,"reason":"Expired"})"
                             "\n"
                             R"({"more":1})";
  TestServer server([&](Peer& peer, const RecordedRequest&) { return Reply(peer, 410, status); });
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  const StreamRun run = RunStream(*transport, Get("/w"));
  ASSERT_TRUE(run.result.ok()) << run.result.error().message();
  EXPECT_EQ(run.result->status, 410);
  EXPECT_EQ(run.result->body, status);
  EXPECT_TRUE(run.lines.empty());
}

TEST(RestTransportStream, ConnectionBrokenMidBodyIsAnError) {
  TestServer server([](Peer& peer, const RecordedRequest&) {
    StartChunked(peer);
    Chunk(peer, "one\n");
    peer.write("20\r\npartial");  // a chunk that never completes
    return false;
  });
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  const StreamRun run = RunStream(*transport, Get("/w"));
  ASSERT_FALSE(run.result.ok());
  EXPECT_EQ(run.result.error().message().rfind("transport: GET /w: ", 0), 0u) << run.result.error().message();
  EXPECT_EQ(run.lines, (std::vector<std::string>{"one"}));
}

TEST(RestTransportStream, IdleLongerThanTheTimeoutIsAnError) {
  TestServer* self = nullptr;
  TestServer server([&](Peer& peer, const RecordedRequest&) {
    StartChunked(peer);
    Chunk(peer, "one\n");
    std::this_thread::sleep_for(150ms);  // under the timeout: the stream goes on
    Chunk(peer, "two\n");
    self->Await("release");  // silent from here on
    return false;
  });
  self = &server;
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  const StreamRun run = RunStream(*transport, Get("/w", 400ms));
  server.Set("release");
  ASSERT_FALSE(run.result.ok());
  EXPECT_NE(run.result.error().message().find("no data for 400 ms"), std::string::npos)
      << run.result.error().message();
  EXPECT_EQ(run.lines, (std::vector<std::string>{"one", "two"}));
  EXPECT_GE(run.took, 500ms);  // 150 ms + 400 ms idle
  EXPECT_LT(run.took, 1500ms);
}

TEST(RestTransportStream, StopEndsABlockedReadPromptly) {
  TestServer* self = nullptr;
  TestServer server([&](Peer& peer, const RecordedRequest&) {
    StartChunked(peer);
    Chunk(peer, "one\n");
    self->Await("release");
    return false;
  });
  self = &server;
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  std::stop_source stop;
  std::promise<void> got_line;
  auto running = std::async(std::launch::async, [&] {
    return RunStream(*transport, Get("/w", 10s), stop.get_token(), [&](std::string_view) {
      got_line.set_value();
      return true;
    });
  });
  ASSERT_EQ(got_line.get_future().wait_for(5s), std::future_status::ready);
  std::this_thread::sleep_for(50ms);
  const auto stop_at = Clock::now();
  stop.request_stop();
  ASSERT_EQ(running.wait_for(2s), std::future_status::ready);
  const StreamRun run = running.get();
  EXPECT_LT(Since(stop_at), 1s);
  server.Set("release");
  ASSERT_TRUE(run.result.ok()) << run.result.error().message();
  EXPECT_EQ(run.result->status, 200);
  EXPECT_EQ(run.lines, (std::vector<std::string>{"one"}));
}

TEST(RestTransportStream, StopBeforeTheHeadersArriveEndsPromptly) {
  TestServer* self = nullptr;
  TestServer server([&](Peer&, const RecordedRequest&) {
    self->Await("release");
    return false;
  });
  self = &server;
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  std::stop_source stop;
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    stop.request_stop();
  });
  const StreamRun run = RunStream(*transport, Get("/w", 10s), stop.get_token());
  stopper.join();
  server.Set("release");
  ASSERT_TRUE(run.result.ok()) << run.result.error().message();
  EXPECT_EQ(run.result->status, 200);
  EXPECT_LT(run.took, 1200ms);
}

TEST(RestTransportStream, AlreadyStoppedReturnsAtOnce) {
  TestServer server(
      [](Peer& peer, const RecordedRequest&) { return StartChunked(peer) && Chunk(peer, "x\n"); });
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  std::stop_source stop;
  stop.request_stop();
  const StreamRun run = RunStream(*transport, Get("/w", 10s), stop.get_token());
  ASSERT_TRUE(run.result.ok());
  EXPECT_TRUE(run.lines.empty());
  EXPECT_LT(run.took, 500ms);
}

TEST(RestTransportStream, OnLineReturningFalseEndsTheStream) {
  TestServer* self = nullptr;
  TestServer server([&](Peer& peer, const RecordedRequest&) {
    StartChunked(peer);
    Chunk(peer, "one\ntwo\nthree\n");
    self->Await("release");
    return false;
  });
  self = &server;
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  const StreamRun run =
      RunStream(*transport, Get("/w", 10s), {}, [](std::string_view line) { return line != "two"; });
  server.Set("release");
  ASSERT_TRUE(run.result.ok()) << run.result.error().message();
  EXPECT_EQ(run.lines, (std::vector<std::string>{"one", "two"}));
  EXPECT_LT(run.took, 1s);
}

TEST(RestTransportStream, LineOverTheLimitIsAnError) {
  struct Case {
    const char* name;
    std::vector<std::string> chunks;
  };
  const std::vector<Case> cases = {
      {"unterminated, growing over several chunks", {std::string(600, 'a'), std::string(600, 'b')}},
      {"complete, in one chunk", {std::string(1500, 'c') + "\n"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestServer server([&](Peer& peer, const RecordedRequest&) {
      StartChunked(peer);
      Chunk(peer, "small\n");
      for (const std::string& chunk : c.chunks) Chunk(peer, chunk);
      EndChunked(peer);
      return false;
    });
    auto transport = MustMakeWithLimits(ConfigFor(server), kMaxResponseBytes, /*max_line_bytes=*/1024);
    ASSERT_NE(transport, nullptr);
    const StreamRun run = RunStream(*transport, Get("/w"));
    ASSERT_FALSE(run.result.ok());
    EXPECT_NE(run.result.error().message().find("over 1024 bytes"), std::string::npos)
        << run.result.error().message();
    EXPECT_EQ(run.lines, (std::vector<std::string>{"small"}));
  }
}

TEST(RestTransportStream, LineOverTheRealLimitIsAnError) {
  TestServer server([](Peer& peer, const RecordedRequest&) {
    StartChunked(peer);
    const std::string piece(1u << 20, 'z');
    for (std::size_t sent = 0; sent <= kMaxWatchLineBytes; sent += piece.size()) {
      if (!Chunk(peer, piece)) return false;
    }
    EndChunked(peer);
    return false;
  });
  auto transport = MustMake(ConfigFor(server));
  ASSERT_NE(transport, nullptr);
  const StreamRun run = RunStream(*transport, Get("/w"));
  ASSERT_FALSE(run.result.ok());
  EXPECT_NE(run.result.error().message().find("a watch line is over"), std::string::npos)
      << run.result.error().message();
}

// ---- configuration and the token ---------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "toposched-transport-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

void WriteFile(const std::filesystem::path& path, const std::string& contents) {
  const auto temporary = path.string() + ".tmp";
  std::ofstream(temporary, std::ios::binary | std::ios::trunc) << contents;
  std::filesystem::rename(temporary, path);  // as a secret volume updates it
}

TEST(RestTransportToken, TokenFileIsReReadAfterThePeriod) {
  TestServer server([](Peer& peer, const RecordedRequest&) { return Reply(peer, 200, "{}"); });
  TempDir dir;
  const auto token_file = dir.path() / "token";
  WriteFile(token_file, "first-token\n");
  ClientConfig config = ConfigFor(server);
  config.token = "inline-token-is-ignored";
  config.token_file = token_file.string();
  auto transport = MustMakeWithLimits(config, kMaxResponseBytes, kMaxWatchLineBytes, /*token_period=*/400ms);
  ASSERT_NE(transport, nullptr);
  ASSERT_TRUE(transport->Do(Get("/1")).ok());
  WriteFile(token_file, "second-token\n");
  ASSERT_TRUE(transport->Do(Get("/2")).ok());  // within the period: the cached token
  std::this_thread::sleep_for(450ms);
  ASSERT_TRUE(transport->Do(Get("/3")).ok());
  std::filesystem::remove(token_file);
  std::this_thread::sleep_for(450ms);
  ASSERT_TRUE(transport->Do(Get("/4")).ok());  // unreadable now: the last good token
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].Header("authorization"), "Bearer first-token");
  EXPECT_EQ(requests[1].Header("authorization"), "Bearer first-token");
  EXPECT_EQ(requests[2].Header("authorization"), "Bearer second-token");
  EXPECT_EQ(requests[3].Header("authorization"), "Bearer second-token");
}

TEST(RestTransportConfig, BadConfigurationsAreRefused) {
  struct Case {
    const char* name;
    std::function<void(ClientConfig&)> change;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"not a URL", [](ClientConfig& c) { c.server = "http://bad host"; }, "server URL"},
      {"unterminated IPv6", [](ClientConfig& c) { c.server = "http://[::1"; }, "malformed IPv6 address"},
      {"not IPv6", [](ClientConfig& c) { c.server = "http://[nope]:1"; }, "malformed IPv6 address"},
      {"bad port", [](ClientConfig& c) { c.server = "https://h:99999"; }, "bad port"},
      {"not http", [](ClientConfig& c) { c.server = "ftp://example.com"; }, "not http:// or https://"},
      {"no host", [](ClientConfig& c) { c.server = "/just/a/path"; }, "server URL"},
      {"CA not PEM", [](ClientConfig& c) { c.ca_pem = "garbage"; },
       "CA data is not a PEM certificate bundle"},
      {"client key alone", [](ClientConfig& c) { c.client_key_pem = "x"; },
       "both the certificate and its key"},
      {"client certificate not PEM",
       [](ClientConfig& c) {
         c.client_cert_pem = "nope";
         c.client_key_pem = "nope";
       },
       "client certificate is not a PEM certificate bundle"},
      {"token file missing", [](ClientConfig& c) { c.token_file = "/nonexistent/token"; },
       "token file /nonexistent/token: cannot open: No such file or directory"},
      {"token with a line break", [](ClientConfig& c) { c.token = "abc\r\nX-Injected: 1"; },
       "control characters"},
      {"user agent with a line break", [](ClientConfig& c) { c.user_agent = "a\nb"; }, "control characters"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ClientConfig config;
    config.server = "https://127.0.0.1:6443";
    c.change(config);
    auto transport = MakeRestTransport(config);
    ASSERT_FALSE(transport.ok());
    EXPECT_NE(transport.error().message().find(c.error), std::string::npos) << transport.error().message();
  }
}

// ---- TLS --------------------------------------------------------------------------------

struct Identity {
  X509* certificate = nullptr;
  EVP_PKEY* key = nullptr;
  std::string certificate_pem, key_pem;

  Identity() = default;
  Identity(const Identity&) = delete;
  Identity& operator=(const Identity&) = delete;
  Identity(Identity&& other) noexcept { *this = std::move(other); }
  Identity& operator=(Identity&& other) noexcept {
    std::swap(certificate, other.certificate);
    std::swap(key, other.key);
    certificate_pem.swap(other.certificate_pem);
    key_pem.swap(other.key_pem);
    return *this;
  }
  ~Identity() {
    X509_free(certificate);
    EVP_PKEY_free(key);
  }
};

std::string BioContents(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<std::size_t>(size));
}

void AddExtension(X509* certificate, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  ASSERT_NE(extension, nullptr) << value;
  X509_add_ext(certificate, extension, -1);
  X509_EXTENSION_free(extension);
}

// A P-256 certificate for `common_name`: a CA when `issuer` is null (self-signed), else a leaf
// signed by `issuer` with the given subjectAltName ("IP:127.0.0.1,DNS:localhost").
Identity MakeIdentity(const std::string& common_name, const Identity* issuer,
                      const std::string& alt_names = "", const char* usage = "serverAuth") {
  static std::atomic<long> serial{1};
  Identity identity;
  identity.key = EVP_EC_gen("P-256");
  identity.certificate = X509_new();
  X509* certificate = identity.certificate;
  X509_set_version(certificate, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(certificate), serial++);
  X509_gmtime_adj(X509_getm_notBefore(certificate), -3600);
  X509_gmtime_adj(X509_getm_notAfter(certificate), 24 * 3600);
  X509_set_pubkey(certificate, identity.key);
  X509_NAME* name = X509_get_subject_name(certificate);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0);
  X509* signer = issuer ? issuer->certificate : certificate;
  X509_set_issuer_name(certificate, X509_get_subject_name(signer));
  if (issuer == nullptr) {
    AddExtension(certificate, signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(certificate, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
    AddExtension(certificate, signer, NID_subject_key_identifier, "hash");
  } else {
    AddExtension(certificate, signer, NID_basic_constraints, "critical,CA:FALSE");
    AddExtension(certificate, signer, NID_key_usage, "critical,digitalSignature");
    AddExtension(certificate, signer, NID_ext_key_usage, usage);
    AddExtension(certificate, signer, NID_authority_key_identifier, "keyid");
    if (!alt_names.empty()) AddExtension(certificate, signer, NID_subject_alt_name, alt_names.c_str());
  }
  X509_sign(certificate, issuer ? issuer->key : identity.key, EVP_sha256());
  BIO* certificate_bio = BIO_new(BIO_s_mem());
  BIO* key_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(certificate_bio, certificate);
  PEM_write_bio_PrivateKey(key_bio, identity.key, nullptr, nullptr, 0, nullptr, nullptr);
  identity.certificate_pem = BioContents(certificate_bio);
  identity.key_pem = BioContents(key_bio);
  BIO_free(certificate_bio);
  BIO_free(key_bio);
  return identity;
}

class RestTransportTls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ca_ = new Identity(MakeIdentity("toposched test CA", nullptr));
    other_ca_ = new Identity(MakeIdentity("some other CA", nullptr));
    server_ = new Identity(MakeIdentity("apiserver", ca_, "IP:127.0.0.1,IP:::1,DNS:localhost"));
    named_server_ = new Identity(MakeIdentity("apiserver", ca_, "DNS:apiserver.test"));
    client_ca_ = new Identity(MakeIdentity("client CA", nullptr));
    client_ = new Identity(MakeIdentity("toposched-client", client_ca_, "", "clientAuth"));
  }
  static void TearDownTestSuite() {
    for (Identity** identity : {&ca_, &other_ca_, &server_, &named_server_, &client_ca_, &client_}) {
      delete *identity;
      *identity = nullptr;
    }
  }

  // The server's TLS context: `identity`'s certificate; with `client_ca`, a client
  // certificate signed by it is required.
  static std::shared_ptr<ssl::context> ServerTls(const Identity& identity,
                                                 const Identity* client_ca = nullptr) {
    auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
    context->use_certificate_chain(net::buffer(identity.certificate_pem));
    context->use_private_key(net::buffer(identity.key_pem), ssl::context::pem);
    if (client_ca != nullptr) {
      context->add_certificate_authority(net::buffer(client_ca->certificate_pem));
      context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    return context;
  }

  static TestServer::Handler Ok() {
    return [](Peer& peer, const RecordedRequest&) { return Reply(peer, 200, R"({"ok":true})"); };
  }

  static ClientConfig TlsConfig(const TestServer& server, const std::string& ca_pem) {
    ClientConfig config;
    config.server = server.url();
    config.token = "tls-token";
    config.ca_pem = ca_pem;
    return config;
  }

  static inline Identity* ca_ = nullptr;
  static inline Identity* other_ca_ = nullptr;
  static inline Identity* server_ = nullptr;
  static inline Identity* named_server_ = nullptr;
  static inline Identity* client_ca_ = nullptr;
  static inline Identity* client_ = nullptr;
};

TEST_F(RestTransportTls, VerifiesTheServerAgainstTheConfiguredCa) {
  TestServer server(Ok(), ServerTls(*server_));
  auto transport = MustMake(TlsConfig(server, ca_->certificate_pem));
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/version"));
  ASSERT_TRUE(response.ok()) << response.error().message();
  EXPECT_EQ(response->body, R"({"ok":true})");
  EXPECT_EQ(server.requests().at(0).Header("authorization"), "Bearer tls-token");
}

TEST_F(RestTransportTls, AcceptsACaBundle) {
  TestServer server(Ok(), ServerTls(*server_));
  auto transport = MustMake(TlsConfig(server, other_ca_->certificate_pem + ca_->certificate_pem));
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/version"));
  ASSERT_TRUE(response.ok()) << response.error().message();
}

TEST_F(RestTransportTls, RefusesAServerSignedByAnotherCa) {
  TestServer server(Ok(), ServerTls(*server_));
  auto transport = MustMake(TlsConfig(server, other_ca_->certificate_pem));
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/version"));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().message().rfind("transport: ", 0), 0u) << response.error().message();
  EXPECT_TRUE(server.requests().empty());
}

TEST_F(RestTransportTls, InsecureSkipsVerification) {
  TestServer server(Ok(), ServerTls(*server_));
  ClientConfig config = TlsConfig(server, other_ca_->certificate_pem);
  config.insecure_skip_tls_verify = true;
  auto transport = MustMake(config);
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/version"));
  ASSERT_TRUE(response.ok()) << response.error().message();
}

TEST_F(RestTransportTls, TlsServerNameIsTheNameVerified) {
  TestServer server(Ok(), ServerTls(*named_server_));  // a certificate for apiserver.test only
  {
    auto transport = MustMake(TlsConfig(server, ca_->certificate_pem));
    ASSERT_NE(transport, nullptr);
    EXPECT_FALSE(transport->Do(Get("/version")).ok());  // 127.0.0.1 is not in the certificate
  }
  ClientConfig config = TlsConfig(server, ca_->certificate_pem);
  config.tls_server_name = "apiserver.test";
  auto transport = MustMake(config);
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/version"));
  ASSERT_TRUE(response.ok()) << response.error().message();
}

TEST_F(RestTransportTls, ClientCertificateAuthentication) {
  TestServer server(Ok(), ServerTls(*server_, client_ca_));
  {
    auto transport = MustMake(TlsConfig(server, ca_->certificate_pem));  // no client certificate
    ASSERT_NE(transport, nullptr);
    EXPECT_FALSE(transport->Do(Get("/version")).ok());
  }
  ClientConfig config = TlsConfig(server, ca_->certificate_pem);
  config.token.clear();
  config.client_cert_pem = client_->certificate_pem;
  config.client_key_pem = client_->key_pem;
  auto transport = MustMake(config);
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/version"));
  ASSERT_TRUE(response.ok()) << response.error().message();
  EXPECT_EQ(server.last_client_common_name(), "toposched-client");
  EXPECT_EQ(server.requests().back().Header("authorization"), "<absent>");
}

TEST_F(RestTransportTls, VerifiesAnIpv6Server) {
  if (!Ipv6LoopbackAvailable()) GTEST_SKIP() << "no IPv6 loopback here";
  TestServer server(Ok(), ServerTls(*server_), /*ipv6=*/true);
  auto transport = MustMake(TlsConfig(server, ca_->certificate_pem));  // https://[::1]:PORT
  ASSERT_NE(transport, nullptr);
  auto response = transport->Do(Get("/version"));
  ASSERT_TRUE(response.ok()) << response.error().message();
}

TEST_F(RestTransportTls, ClientKeyMustMatchTheCertificate) {
  ClientConfig config;
  config.server = "https://127.0.0.1:6443";
  config.client_cert_pem = client_->certificate_pem;
  config.client_key_pem = server_->key_pem;
  auto transport = MakeRestTransport(config);
  ASSERT_FALSE(transport.ok());
  EXPECT_NE(transport.error().message().find("does not match"), std::string::npos)
      << transport.error().message();
}

TEST_F(RestTransportTls, StreamsOverTls) {
  TestServer* self = nullptr;
  std::atomic<bool> in_time{false};
  TestServer server(
      [&](Peer& peer, const RecordedRequest&) {
        StartChunked(peer);
        Chunk(peer, "first\n");
        in_time = self->Await("first delivered");
        Chunk(peer, "second\n");
        return EndChunked(peer);
      },
      ServerTls(*server_));
  self = &server;
  auto transport = MustMake(TlsConfig(server, ca_->certificate_pem));
  ASSERT_NE(transport, nullptr);
  const StreamRun run = RunStream(*transport, Get("/w"), {}, [&](std::string_view line) {
    if (line == "first") server.Set("first delivered");
    return true;
  });
  ASSERT_TRUE(run.result.ok()) << run.result.error().message();
  EXPECT_TRUE(in_time);
  EXPECT_EQ(run.lines, (std::vector<std::string>{"first", "second"}));
}

}  // namespace
}  // namespace toposched::kube
