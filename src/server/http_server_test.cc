// HttpServer against real sockets: a server on an ephemeral port and a small blocking client
// (POSIX sockets, OpenSSL for TLS) that parses responses itself, so framing errors show up.

#include "toposched/server/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace toposched::server {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A write to a connection the server has closed must fail, not kill the test.
const bool kSigpipeIgnored = [] {
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}();

milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

bool Eventually(const std::function<bool()>& condition, milliseconds timeout = 5s) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

struct Response {
  std::string version;
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  std::string Header(const std::string& name) const {
    const auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// One client connection, plain or TLS. Every wait is bounded, so a server bug fails a test
// instead of hanging it.
class Client {
 public:
  // receive_buffer > 0 shrinks the socket's receive buffer (a client that reads slowly).
  explicit Client(std::uint16_t port, SSL_CTX* tls = nullptr, int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return;
    if (receive_buffer > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      Disconnect();
      return;
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const timeval backstop{10, 0};  // a blocking call never hangs the test for long
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &backstop, sizeof backstop);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &backstop, sizeof backstop);
    if (tls != nullptr) {
      ssl_ = SSL_new(tls);
      SSL_set_fd(ssl_, fd_);
      if (SSL_connect(ssl_) != 1) {
        ERR_clear_error();
        Disconnect();
        return;
      }
    }
  }
  ~Client() { Disconnect(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return fd_ >= 0; }
  const std::string& received() const { return pending_; }

  std::uint16_t local_port() const {
    sockaddr_in address{};
    socklen_t size = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size);
    return ntohs(address.sin_port);
  }

  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      long sent = 0;
      if (ssl_ != nullptr) {
        sent = SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size()));
        if (sent <= 0) {
          ERR_clear_error();
          return false;
        }
      } else {
        sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent <= 0) return false;
      }
      bytes.remove_prefix(static_cast<std::size_t>(sent));
    }
    return true;
  }

  // One complete response (Content-Length framing), or nullopt on close or timeout.
  std::optional<Response> ReadResponse(milliseconds timeout = 5s) {
    const auto deadline = Clock::now() + timeout;
    std::size_t header_end = 0;
    while ((header_end = pending_.find("\r\n\r\n")) == std::string::npos) {
      if (ReadMore(deadline) != ReadResult::kData) return std::nullopt;
    }
    Response response;
    std::string head = pending_.substr(0, header_end);
    pending_.erase(0, header_end + 4);
    std::size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    const std::size_t space = status_line.find(' ');
    if (space == std::string::npos) return std::nullopt;
    response.version = status_line.substr(0, space);
    response.status = std::atoi(status_line.c_str() + space + 1);
    while (line_end != std::string::npos) {
      const std::size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line =
          head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const std::size_t colon = line.find(':');
      if (colon == std::string::npos) return std::nullopt;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      response.headers[name] = value;
    }
    const std::size_t length = std::strtoul(response.Header("content-length").c_str(), nullptr, 10);
    while (pending_.size() < length) {
      if (ReadMore(deadline) != ReadResult::kData) return std::nullopt;
    }
    response.body = pending_.substr(0, length);
    pending_.erase(0, length);
    return response;
  }

  std::optional<Response> RoundTrip(std::string_view request) {
    if (!Send(request)) return std::nullopt;
    return ReadResponse();
  }

  // Whether the server closed the connection (EOF or reset) within `timeout`. Bytes that arrive
  // first are kept in received().
  bool WaitForClose(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      switch (ReadMore(deadline)) {
        case ReadResult::kData:
          continue;
        case ReadResult::kClosed:
          return true;
        case ReadResult::kTimeout:
          return false;
      }
    }
  }

  // Polls for up to `timeout`: kData if something arrived, kClosed, or kTimeout.
  enum class ReadResult { kData, kClosed, kTimeout };
  ReadResult ReadMore(Clock::time_point deadline) {
    char buffer[16384];
    for (;;) {
      if (ssl_ == nullptr || SSL_pending(ssl_) == 0) {
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) return ReadResult::kTimeout;
        pollfd descriptor{fd_, POLLIN, 0};
        const int ready = ::poll(&descriptor, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) return ReadResult::kTimeout;
        if (ready < 0) return ReadResult::kClosed;
      }
      if (ssl_ != nullptr) {
        const int n = SSL_read(ssl_, buffer, sizeof buffer);
        if (n > 0) {
          pending_.append(buffer, static_cast<std::size_t>(n));
          return ReadResult::kData;
        }
        if (SSL_get_error(ssl_, n) == SSL_ERROR_WANT_READ) continue;
        ERR_clear_error();
        return ReadResult::kClosed;  // close_notify, EOF or reset
      }
      const long n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n > 0) {
        pending_.append(buffer, static_cast<std::size_t>(n));
        return ReadResult::kData;
      }
      if (n < 0 && errno == EINTR) continue;
      return ReadResult::kClosed;  // EOF or reset
    }
  }

  std::string PeerCommonName() const {
    if (ssl_ == nullptr) return {};
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    X509* peer = SSL_get1_peer_certificate(ssl_);
#else
    X509* peer = SSL_get_peer_certificate(ssl_);
#endif
    if (peer == nullptr) return {};
    char name[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, name, sizeof name);
    X509_free(peer);
    return name;
  }

 private:
  void Disconnect() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    ssl_ = nullptr;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
  SSL* ssl_ = nullptr;
  std::string pending_;
};

std::string Request(std::string_view method, std::string_view target, std::string_view body = "",
                    std::string_view extra_headers = "", std::string_view version = "HTTP/1.1") {
  std::string request = std::string(method) + " " + std::string(target) + " " + std::string(version) +
                        "\r\nHost: test\r\n" + std::string(extra_headers);
  if (!body.empty() || method == "POST") request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return request + "\r\n" + std::string(body);
}

ServerOptions TestOptions() {
  ServerOptions options;
  options.address = "127.0.0.1";
  options.port = 0;
  options.threads = 2;
  options.read_timeout = 5s;
  options.idle_timeout = 5s;
  options.write_timeout = 5s;
  return options;
}

// Replies "<method> <target> <content type> <body>" as text/plain.
void Echo(const HttpRequest& request, HttpResponse& response) {
  response.content_type = "text/plain";
  response.body = std::string(request.method) + " " + std::string(request.target) + " " +
                  std::string(request.content_type) + " " + std::string(request.body);
}

std::unique_ptr<HttpServer> StartServer(ServerOptions options, Handler handler = Echo) {
  auto server = HttpServer::Start(std::move(options), std::move(handler));
  if (!server.ok()) {
    ADD_FAILURE() << "Start failed: " << server.error().message();
    return nullptr;
  }
  return std::move(server).value();
}

// ---- Requests and responses ----------------------------------------------------------------

TEST(HttpServerTest, PostAndGetReachTheHandlerAndTheResponseComesBack) {
  struct Seen {
    std::string method, target, content_type, body, remote;
  };
  std::mutex mutex;
  std::vector<Seen> seen;
  auto server = StartServer(TestOptions(), [&](const HttpRequest& request, HttpResponse& response) {
    {
      std::lock_guard lock(mutex);
      seen.push_back({std::string(request.method), std::string(request.target),
                      std::string(request.content_type), std::string(request.body),
                      std::string(request.remote)});
    }
    if (request.method == "POST") {
      response.status = 201;
      response.content_type = "application/x-test";
      response.body = "created:" + std::string(request.body);
      response.extra_header_name = "X-Toposched";
      response.extra_header_value = "yes";
    } else {
      response.body = R"({"path":")" + std::string(request.target) + "\"}";
    }
  });
  ASSERT_NE(server, nullptr);
  ASSERT_NE(server->port(), 0);

  Client client(server->port());
  ASSERT_TRUE(client.connected());
  const auto post = client.RoundTrip(
      Request("POST", "/scheduler/filter?x=1", R"({"a":1})", "Content-Type: application/json\r\n"));
  ASSERT_TRUE(post.has_value());
  EXPECT_EQ(post->version, "HTTP/1.1");
  EXPECT_EQ(post->status, 201);
  EXPECT_EQ(post->Header("content-type"), "application/x-test");
  EXPECT_EQ(post->Header("x-toposched"), "yes");
  EXPECT_EQ(post->Header("content-length"), "15");
  EXPECT_EQ(post->body, R"(created:{"a":1})");

  const auto get = client.RoundTrip(Request("GET", "/healthz"));
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->Header("content-type"), "application/json");  // HttpResponse's default
  EXPECT_EQ(get->body, R"({"path":"/healthz"})");

  std::lock_guard lock(mutex);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].target, "/scheduler/filter?x=1");
  EXPECT_EQ(seen[0].content_type, "application/json");
  EXPECT_EQ(seen[0].body, R"({"a":1})");
  EXPECT_EQ(seen[0].remote, "127.0.0.1:" + std::to_string(client.local_port()));
  EXPECT_EQ(seen[1].method, "GET");
  EXPECT_EQ(seen[1].target, "/healthz");
  EXPECT_EQ(seen[1].content_type, "");
  EXPECT_EQ(seen[1].body, "");
}

TEST(HttpServerTest, HeadGetsTheLengthWithoutTheBody) {
  auto server = StartServer(TestOptions(),
                            [](const HttpRequest&, HttpResponse& response) { response.body = "0123456789"; });
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  ASSERT_TRUE(client.Send(Request("HEAD", "/")));
  const auto deadline = Clock::now() + 5s;
  while (client.received().find("\r\n\r\n") == std::string::npos) {
    ASSERT_EQ(client.ReadMore(deadline), Client::ReadResult::kData);
  }
  // Nothing follows the header.
  EXPECT_EQ(client.ReadMore(Clock::now() + 200ms), Client::ReadResult::kTimeout);
  const std::string& head = client.received();
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 10\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");
}

TEST(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  std::mutex mutex;
  std::vector<std::string> remotes;
  auto server = StartServer(TestOptions(), [&](const HttpRequest& request, HttpResponse& response) {
    std::lock_guard lock(mutex);
    remotes.emplace_back(request.remote);
    response.body = std::string(request.body);
  });
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  for (int i = 0; i < 5; ++i) {
    const auto response = client.RoundTrip(Request("POST", "/", "request " + std::to_string(i)));
    ASSERT_TRUE(response.has_value()) << i;
    EXPECT_EQ(response->body, "request " + std::to_string(i));
    EXPECT_NE(response->Header("connection"), "close");
  }
  // Two requests in one write (pipelined) are answered in order.
  ASSERT_TRUE(client.Send(Request("POST", "/", "first") + Request("POST", "/", "second")));
  const auto first = client.ReadResponse();
  const auto second = client.ReadResponse();
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_EQ(first->body, "first");
  EXPECT_EQ(second->body, "second");

  const auto counters = server->counters();
  EXPECT_EQ(counters.connections_accepted, 1u);
  EXPECT_EQ(counters.requests, 7u);
  std::lock_guard lock(mutex);
  for (const auto& remote : remotes) EXPECT_EQ(remote, remotes.front());
}

TEST(HttpServerTest, ConnectionCloseAndHttp10DecideWhetherTheConnectionStays) {
  auto server = StartServer(TestOptions());
  ASSERT_NE(server, nullptr);
  {  // HTTP/1.0 without keep-alive: one response, then the server closes.
    Client client(server->port());
    const auto response = client.RoundTrip("GET /one HTTP/1.0\r\n\r\n");
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->version, "HTTP/1.0");
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "GET /one  ");
    EXPECT_TRUE(client.WaitForClose(5s));
  }
  {  // HTTP/1.0 with keep-alive stays open.
    Client client(server->port());
    const auto first = client.RoundTrip("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->Header("connection"), "keep-alive");
    const auto second = client.RoundTrip("GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    ASSERT_TRUE(second.has_value());
    EXPECT_EQ(second->body, "GET /b  ");
  }
  {  // HTTP/1.1 with Connection: close.
    Client client(server->port());
    const auto response = client.RoundTrip(Request("GET", "/", "", "Connection: close\r\n"));
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->Header("connection"), "close");
    EXPECT_TRUE(client.WaitForClose(5s));
  }
}

// ---- Limits and malformed input ------------------------------------------------------------

TEST(HttpServerTest, BodyOverItsTargetsLimitGets413AndTheConnectionCloses) {
  auto options = TestOptions();
  options.body_limit = [](std::string_view target) -> std::size_t {
    return target.starts_with("/big") ? 64 * 1024 : 1024;
  };
  auto server = StartServer(options, [](const HttpRequest& request, HttpResponse& response) {
    response.body = std::to_string(request.body.size());
  });
  ASSERT_NE(server, nullptr);
  const std::string body_1k(1024, 'a');
  const std::string body_2k(2048, 'b');
  {  // At the limit: accepted.
    Client client(server->port());
    const auto response = client.RoundTrip(Request("POST", "/", body_1k));
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "1024");
  }
  {  // Over the limit by Content-Length: 413 and close.
    Client client(server->port());
    const auto response = client.RoundTrip(Request("POST", "/", body_2k));
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 413);
    EXPECT_NE(response->body.find("\"Error\""), std::string::npos);
    EXPECT_EQ(response->Header("connection"), "close");
    EXPECT_TRUE(client.WaitForClose(5s));
  }
  {  // Rejected on the header alone: the body is never sent, and the 413 does not wait for it.
    Client client(server->port());
    const auto start = Clock::now();
    const auto response = client.RoundTrip("POST / HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n");
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 413);
    EXPECT_LT(Since(start), 2s);
  }
  {  // A chunked body over the limit.
    Client client(server->port());
    const auto response = client.RoundTrip("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" +
                                           body_2k + "\r\n0\r\n\r\n");
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 413);
  }
  {  // The bigger limit of /big, on a new connection: the server still serves.
    Client client(server->port());
    const auto response = client.RoundTrip(Request("POST", "/big/upload", body_2k));
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "2048");
  }
  EXPECT_EQ(server->counters().body_too_large, 3u);
  EXPECT_EQ(server->counters().requests, 2u);
}

TEST(HttpServerTest, DefaultBodyLimitAppliesWithoutAPerTargetLimit) {
  auto options = TestOptions();
  options.max_body_bytes = 100;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  const auto response = client.RoundTrip(Request("POST", "/", std::string(101, 'x')));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 413);
}

TEST(HttpServerTest, ExpectContinueGets100BeforeTheBody) {
  auto server = StartServer(TestOptions());
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  ASSERT_TRUE(client.Send("POST /c HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  const auto interim = client.ReadResponse(2s);
  ASSERT_TRUE(interim.has_value());
  EXPECT_EQ(interim->status, 100);
  const auto response = client.RoundTrip("hello");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "POST /c  hello");
}

TEST(HttpServerTest, MalformedRequestsGet400AndTheServerKeepsServing) {
  std::atomic<int> handled{0};
  auto server = StartServer(TestOptions(), [&](const HttpRequest& request, HttpResponse& response) {
    ++handled;
    Echo(request, response);
  });
  ASSERT_NE(server, nullptr);
  const struct {
    const char* name;
    std::string bytes;
  } cases[] = {
      {"binary method", std::string("\x01\x02\x03\x04 / HTTP/1.1\r\nHost: x\r\n\r\n")},
      {"bad version", "GET / HTTP/9.Z\r\nHost: x\r\n\r\n"},
      {"header line without colon", "GET / HTTP/1.1\r\nNoColonHere\r\n\r\n"},
      {"bad content length", "POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n"},
      {"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
  };
  for (const auto& c : cases) {
    Client client(server->port());
    const auto response = client.RoundTrip(c.bytes);
    ASSERT_TRUE(response.has_value()) << c.name;
    EXPECT_EQ(response->status, 400) << c.name;
    EXPECT_NE(response->body.find("malformed HTTP request"), std::string::npos) << c.name;
    EXPECT_TRUE(client.WaitForClose(5s)) << c.name;
  }
  Client client(server->port());
  const auto response = client.RoundTrip(Request("GET", "/after"));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(handled.load(), 1);
  EXPECT_EQ(server->counters().bad_requests, 5u);
}

TEST(HttpServerTest, HeaderOverTheLimitGets431AndClose) {
  auto options = TestOptions();
  options.max_header_bytes = 1024;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  {  // Under the limit.
    Client client(server->port());
    const auto response =
        client.RoundTrip(Request("GET", "/", "", "X-Pad: " + std::string(500, 'p') + "\r\n"));
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 200);
  }
  Client client(server->port());
  const auto response =
      client.RoundTrip(Request("GET", "/", "", "X-Pad: " + std::string(4000, 'p') + "\r\n"));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 431);
  EXPECT_TRUE(client.WaitForClose(5s));
}

// ---- Timeouts ------------------------------------------------------------------------------

TEST(HttpServerTest, HalfSentRequestGets408AfterReadTimeoutWhileOthersAreServed) {
  auto options = TestOptions();
  options.read_timeout = 300ms;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);

  Client slow_header(server->port());
  Client slow_body(server->port());
  const auto start = Clock::now();
  ASSERT_TRUE(slow_header.Send("POST / HTTP/1.1\r\nHost: x\r\n"));
  ASSERT_TRUE(slow_body.Send("POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n0123456789"));

  // Meanwhile another client is served at once.
  Client other(server->port());
  const auto served = other.RoundTrip(Request("GET", "/meanwhile"));
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(served->status, 200);
  EXPECT_LT(Since(start), 250ms);

  for (Client* client : {&slow_header, &slow_body}) {
    const auto response = client->ReadResponse(5s);
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 408);
    EXPECT_TRUE(client->WaitForClose(5s));
  }
  EXPECT_GE(Since(start), 250ms);
  EXPECT_LT(Since(start), 5s);
  EXPECT_EQ(server->counters().timeouts, 2u);
}

// The deadline runs from the first byte, so a client that keeps trickling bytes is still cut off.
TEST(HttpServerTest, TricklingClientIsCutOffByReadTimeout) {
  auto options = TestOptions();
  options.read_timeout = 300ms;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\nX-Slow: "));
  const auto start = Clock::now();
  while (Since(start) < 3s && client.received().empty()) {
    if (!client.Send("a")) break;  // the server may already have closed its side
    if (client.ReadMore(Clock::now() + 50ms) == Client::ReadResult::kClosed) break;
  }
  const auto elapsed = Since(start);
  EXPECT_GE(elapsed, 250ms);
  EXPECT_LT(elapsed, 2s);
  EXPECT_EQ(client.received().rfind("HTTP/1.1 408", 0), 0u) << client.received();
}

TEST(HttpServerTest, ConnectionThatSendsNothingIsClosedAfterReadTimeout) {
  auto options = TestOptions();
  options.read_timeout = 300ms;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  const auto start = Clock::now();
  EXPECT_TRUE(client.WaitForClose(5s));
  EXPECT_GE(Since(start), 250ms);
  EXPECT_EQ(client.received(), "");  // no request, no 408
}

TEST(HttpServerTest, IdleKeepAliveConnectionIsClosedAfterIdleTimeout) {
  auto options = TestOptions();
  options.idle_timeout = 400ms;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  // The idle timeout runs between requests, not over the connection's life: 5 x 100 ms > 400 ms.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client.RoundTrip(Request("GET", "/")).has_value()) << i;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(client.RoundTrip(Request("GET", "/")).has_value());
  const auto start = Clock::now();
  EXPECT_TRUE(client.WaitForClose(5s));
  EXPECT_GE(Since(start), 350ms);
  EXPECT_EQ(client.received(), "");
  EXPECT_EQ(server->counters().timeouts, 1u);
}

// ---- Connections and handler failures ------------------------------------------------------

TEST(HttpServerTest, ConnectionsOverMaxConnectionsAreClosedAtOnce) {
  auto options = TestOptions();
  options.max_connections = 2;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto first = std::make_unique<Client>(server->port());
  Client second(server->port());
  ASSERT_TRUE(first->RoundTrip(Request("GET", "/")).has_value());
  ASSERT_TRUE(second.RoundTrip(Request("GET", "/")).has_value());

  Client third(server->port());
  ASSERT_TRUE(third.connected());  // the kernel completes the handshake; the server then closes it
  EXPECT_TRUE(third.WaitForClose(2s));
  EXPECT_EQ(third.received(), "");
  EXPECT_EQ(server->counters().connections_rejected, 1u);
  EXPECT_EQ(server->counters().open_connections, 2u);

  first.reset();
  ASSERT_TRUE(Eventually([&] { return server->counters().open_connections == 1; }));
  Client fourth(server->port());
  const auto response = fourth.RoundTrip(Request("GET", "/"));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(server->counters().connections_accepted, 3u);
}

TEST(HttpServerTest, HandlerExceptionBecomes500AndTheConnectionKeepsServing) {
  auto server = StartServer(TestOptions(), [](const HttpRequest& request, HttpResponse& response) {
    response.body = "partial";
    if (request.target == "/throw") throw std::runtime_error("boom \"quoted\"\n");
    if (request.target == "/throw-int") throw 42;
    if (request.target == "/throw-bytes") throw std::runtime_error("bad \xff byte");
    response.body = "fine";
  });
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  const auto thrown = client.RoundTrip(Request("GET", "/throw"));
  ASSERT_TRUE(thrown.has_value());
  EXPECT_EQ(thrown->status, 500);
  EXPECT_EQ(thrown->Header("content-type"), "application/json");
  EXPECT_EQ(thrown->body, R"({"Error":"boom \"quoted\"\n"})");
  // Invalid UTF-8 in a message must not make the reply invalid JSON.
  const auto bytes = client.RoundTrip(Request("GET", "/throw-bytes"));
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(bytes->body, R"({"Error":"bad \ufffd byte"})");
  const auto thrown_int = client.RoundTrip(Request("GET", "/throw-int"));
  ASSERT_TRUE(thrown_int.has_value());
  EXPECT_EQ(thrown_int->status, 500);
  EXPECT_EQ(thrown_int->body, R"({"Error":"unknown exception"})");
  const auto fine = client.RoundTrip(Request("GET", "/"));
  ASSERT_TRUE(fine.has_value());
  EXPECT_EQ(fine->status, 200);
  EXPECT_EQ(fine->body, "fine");
  EXPECT_EQ(server->counters().handler_exceptions, 3u);
}

TEST(HttpServerTest, InvalidStatusOrHeaderFromTheHandlerCannotBreakTheResponse) {
  auto server = StartServer(TestOptions(), [](const HttpRequest& request, HttpResponse& response) {
    if (request.target == "/status") response.status = 42;
    if (request.target == "/inject") {
      response.extra_header_name = "X-A";
      response.extra_header_value = "1\r\nSet-Cookie: evil";
    }
    response.body = "ok";
  });
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  const auto bad_status = client.RoundTrip(Request("GET", "/status"));
  ASSERT_TRUE(bad_status.has_value());
  EXPECT_EQ(bad_status->status, 500);
  const auto inject = client.RoundTrip(Request("GET", "/inject"));
  ASSERT_TRUE(inject.has_value());
  EXPECT_EQ(inject->status, 200);
  EXPECT_EQ(inject->Header("set-cookie"), "");
  EXPECT_EQ(inject->Header("x-a"), "");
}

TEST(HttpServerTest, ReplyTheClientDoesNotReadIsDroppedAfterWriteTimeout) {
  auto options = TestOptions();
  options.write_timeout = 300ms;
  auto server = StartServer(options, [](const HttpRequest& request, HttpResponse& response) {
    if (request.target == "/huge") response.body.assign(32u << 20, 'h');  // more than socket buffers hold
  });
  ASSERT_NE(server, nullptr);
  Client stalled(server->port(), nullptr, /*receive_buffer=*/16 * 1024);
  ASSERT_TRUE(stalled.Send(Request("GET", "/huge")));  // and never read
  const auto start = Clock::now();
  EXPECT_TRUE(Eventually([&] { return server->counters().timeouts == 1; }));
  EXPECT_GE(Since(start), 250ms);
  EXPECT_TRUE(Eventually([&] { return server->counters().open_connections == 0; }));
  Client other(server->port());
  EXPECT_TRUE(other.RoundTrip(Request("GET", "/")).has_value());
}

// `threads` workers: two handlers run at the same time on two connections.
TEST(HttpServerTest, HandlersOfDifferentConnectionsRunConcurrently) {
  std::mutex mutex;
  std::condition_variable changed;
  int inside = 0;
  auto server = StartServer(TestOptions(), [&](const HttpRequest&, HttpResponse& response) {
    std::unique_lock lock(mutex);
    ++inside;
    changed.notify_all();
    const bool met = changed.wait_for(lock, 5s, [&] { return inside >= 2; });
    response.body = met ? "met" : "alone";
  });
  ASSERT_NE(server, nullptr);
  Client first(server->port());
  Client second(server->port());
  ASSERT_TRUE(first.Send(Request("GET", "/")));
  ASSERT_TRUE(second.Send(Request("GET", "/")));
  const auto first_response = first.ReadResponse(10s);
  const auto second_response = second.ReadResponse(10s);
  ASSERT_TRUE(first_response.has_value() && second_response.has_value());
  EXPECT_EQ(first_response->body, "met");
  EXPECT_EQ(second_response->body, "met");
}

TEST(HttpServerTest, ConcurrentKeepAliveClientsAreAllAnsweredCorrectly) {
  auto options = TestOptions();
  options.threads = 4;
  auto server = StartServer(options, [](const HttpRequest& request, HttpResponse& response) {
    response.body = "echo:" + std::string(request.body);
  });
  ASSERT_NE(server, nullptr);
  constexpr int kClients = 8;
  constexpr int kRequests = 200;
  std::atomic<int> correct{0};
  std::vector<std::thread> clients;
  const auto start = Clock::now();
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      Client client(server->port());
      for (int r = 0; r < kRequests; ++r) {
        const std::string body = "client" + std::to_string(c) + "-request" + std::to_string(r);
        const auto response = client.RoundTrip(Request("POST", "/", body));
        if (!response || response->status != 200 || response->body != "echo:" + body) return;
        ++correct;
      }
    });
  }
  for (auto& thread : clients) thread.join();
  EXPECT_EQ(correct.load(), kClients * kRequests);
  EXPECT_EQ(server->counters().connections_accepted, static_cast<std::uint64_t>(kClients));
  EXPECT_EQ(server->counters().requests, static_cast<std::uint64_t>(kClients * kRequests));
  EXPECT_LT(Since(start), 5s);
}

// ---- Offloaded handlers ----------------------------------------------------------------------

ServerOptions OffloadOptions(int threads, int offload_threads) {
  ServerOptions options = TestOptions();
  options.threads = threads;
  options.offload_threads = offload_threads;
  options.offload = [](std::string_view target) { return target.starts_with("/bind"); };
  return options;
}

// A handler that holds "/bind" requests until released, counting them; others answer at once.
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  int waiting = 0;
  bool open = false;
  void Handle(const HttpRequest& request, HttpResponse& response) {
    if (!request.target.starts_with("/bind")) {
      response.body = "quick";
      return;
    }
    std::unique_lock lock(mutex);
    ++waiting;
    changed.notify_all();
    changed.wait_for(lock, 10s, [&] { return open; });
    response.body = "bound:" + std::string(request.body);
  }
  bool WaitForWaiting(int n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 5s, [&] { return waiting >= n; });
  }
  void Open() {
    std::lock_guard lock(mutex);
    open = true;
    changed.notify_all();
  }
};

TEST(HttpServerTest, OffloadedHandlersLeaveTheWorkersFreeForOtherRequests) {
  Gate gate;
  // One worker: without offloading, the first held bind would block every other request.
  auto server =
      StartServer(OffloadOptions(1, 4), [&](const HttpRequest& q, HttpResponse& r) { gate.Handle(q, r); });
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Client>> binds;
  for (int i = 0; i < 4; ++i) {
    binds.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(binds.back()->Send(Request("POST", "/bind", "pod-" + std::to_string(i))));
  }
  ASSERT_TRUE(gate.WaitForWaiting(4)) << "the four binds run at once, each on an offload thread";
  Client other(server->port());
  const auto quick = other.RoundTrip(Request("POST", "/filter", "x"));
  ASSERT_TRUE(quick.has_value()) << "a filter is answered while every bind waits";
  EXPECT_EQ(quick->body, "quick");
  gate.Open();
  for (int i = 0; i < 4; ++i) {
    const auto response = binds[static_cast<std::size_t>(i)]->ReadResponse(5s);
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "bound:pod-" + std::to_string(i));
    // The connection stays usable after an offloaded reply.
    const auto again = binds[static_cast<std::size_t>(i)]->RoundTrip(Request("GET", "/status"));
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->body, "quick");
  }
  EXPECT_EQ(server->counters().offloaded, 4u);
  EXPECT_EQ(server->counters().offload_rejected, 0u);
}

TEST(HttpServerTest, OffloadedRequestsOverTheBoundGet429AtOnceAndTheRestAreServed) {
  Gate gate;
  // Two offload threads: two binds run and two wait; the fifth is refused at once.
  auto server =
      StartServer(OffloadOptions(2, 2), [&](const HttpRequest& q, HttpResponse& r) { gate.Handle(q, r); });
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Client>> binds;
  for (int i = 0; i < 4; ++i) {
    binds.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(binds.back()->Send(Request("POST", "/bind", "pod-" + std::to_string(i))));
  }
  ASSERT_TRUE(gate.WaitForWaiting(2));
  // The other two are admitted (queued): wait until the server has counted all four.
  ASSERT_TRUE(Eventually([&] { return server->counters().offloaded == 4; }));
  Client over(server->port());
  const auto refused = over.RoundTrip(Request("POST", "/bind", "pod-4"));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 429);
  EXPECT_EQ(refused->Header("retry-after"), "1");
  EXPECT_NE(refused->body.find("too many requests"), std::string::npos) << refused->body;
  EXPECT_EQ(server->counters().offload_rejected, 1u);
  gate.Open();
  for (auto& client : binds) {
    const auto response = client->ReadResponse(5s);
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 200);
  }
  // Room again: the refused client's retry on the same connection goes through.
  const auto retried = over.RoundTrip(Request("POST", "/bind", "pod-4"));
  ASSERT_TRUE(retried.has_value());
  EXPECT_EQ(retried->body, "bound:pod-4");
}

TEST(HttpServerTest, ShutdownWritesTheReplyOfAnOffloadedRequestInFlight) {
  Gate gate;
  auto server =
      StartServer(OffloadOptions(1, 2), [&](const HttpRequest& q, HttpResponse& r) { gate.Handle(q, r); });
  ASSERT_NE(server, nullptr);
  Client bind(server->port());
  ASSERT_TRUE(bind.Send(Request("POST", "/bind", "late")));
  ASSERT_TRUE(gate.WaitForWaiting(1));
  server->Shutdown(5s);
  std::this_thread::sleep_for(100ms);  // the workers would have run out of work by now
  gate.Open();
  const auto response = bind.ReadResponse(5s);
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->body, "bound:late");
  EXPECT_EQ(response->Header("connection"), "close");
  server->Wait();
}

TEST(HttpServerTest, AnOffloadedHandlerThatThrowsBecomes500) {
  auto server = StartServer(OffloadOptions(1, 1), [](const HttpRequest&, HttpResponse&) {
    throw std::runtime_error("bind exploded");
  });
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  const auto response = client.RoundTrip(Request("POST", "/bind", "x"));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 500);
  EXPECT_NE(response->body.find("bind exploded"), std::string::npos);
  EXPECT_EQ(server->counters().handler_exceptions, 1u);
}

// ---- Shutdown ------------------------------------------------------------------------------

TEST(HttpServerTest, ShutdownFinishesInFlightRequestsAndClosesIdleConnectionsAtOnce) {
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto server = StartServer(TestOptions(), [&](const HttpRequest& request, HttpResponse& response) {
    if (request.target == "/slow") {
      entered.set_value();
      released.wait();
      std::this_thread::sleep_for(300ms);
      response.body = std::string(100'000, 's');
      return;
    }
    response.body = "quick";
  });
  ASSERT_NE(server, nullptr);
  const std::uint16_t port = server->port();

  Client idle(port);
  ASSERT_TRUE(idle.RoundTrip(Request("GET", "/")).has_value());
  Client busy(port);
  ASSERT_TRUE(busy.Send(Request("GET", "/slow")));
  ASSERT_EQ(entered.get_future().wait_for(5s), std::future_status::ready);

  const auto start = Clock::now();
  std::thread([&] { server->Shutdown(5s); }).join();  // as from a signal-handling thread
  EXPECT_LT(Since(start), 1s);                        // returns at once

  // While the slow handler still runs: the idle connection is closed and new ones refused.
  EXPECT_TRUE(idle.WaitForClose(2s));
  // Shutdown posts the listener's close to the server's strand and returns: refused soon, not
  // necessarily by the time it returned (this check flaked under ASan and load).
  EXPECT_TRUE(Eventually([&] { return !Client(port).connected(); }, 2s));

  release.set_value();
  const auto response = busy.ReadResponse(5s);
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body.size(), 100'000u);
  EXPECT_EQ(response->Header("connection"), "close");
  EXPECT_TRUE(busy.WaitForClose(2s));

  server->Wait();
  EXPECT_LT(Since(start), 2s);  // not the whole grace period: the last connection ended it
  EXPECT_EQ(server->counters().open_connections, 0u);
}

TEST(HttpServerTest, ShutdownGracePeriodEndsRequestsThatDoNotFinish) {
  auto options = TestOptions();
  options.read_timeout = 10s;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  Client stuck(server->port());
  ASSERT_TRUE(stuck.Send("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"));  // 7 bytes short
  std::this_thread::sleep_for(100ms);  // the server has the partial request
  const auto start = Clock::now();
  server->Shutdown(300ms);
  EXPECT_TRUE(stuck.WaitForClose(5s));
  EXPECT_GE(Since(start), 250ms);
  server->Wait();
  EXPECT_LT(Since(start), 3s);
}

TEST(HttpServerTest, ShutdownIsIdempotentAndTheDestructorClosesEverything) {
  auto server = StartServer(TestOptions());
  ASSERT_NE(server, nullptr);
  Client idle(server->port());
  ASSERT_TRUE(idle.RoundTrip(Request("GET", "/")).has_value());
  const auto start = Clock::now();
  server.reset();  // Shutdown(0) + Wait()
  EXPECT_LT(Since(start), 2s);
  EXPECT_TRUE(idle.WaitForClose(2s));

  auto again = StartServer(TestOptions());
  ASSERT_NE(again, nullptr);
  again->Shutdown(0ms);
  again->Shutdown(10s);  // ignored: the first call decides
  again->Wait();
  again->Wait();
}

// ---- Start errors --------------------------------------------------------------------------

TEST(HttpServerTest, StartFailsOnBadAddressPortInUseOrBadOptions) {
  auto first = StartServer(TestOptions());
  ASSERT_NE(first, nullptr);
  auto options = TestOptions();
  options.port = first->port();
  const auto in_use = HttpServer::Start(options, Echo);
  ASSERT_FALSE(in_use.ok());
  EXPECT_NE(in_use.error().message().find("cannot listen on 127.0.0.1:" + std::to_string(first->port())),
            std::string::npos)
      << in_use.error().message();

  options = TestOptions();
  options.address = "not-an-address";
  const auto bad_address = HttpServer::Start(options, Echo);
  ASSERT_FALSE(bad_address.ok());
  EXPECT_NE(bad_address.error().message().find("not-an-address"), std::string::npos);

  options = TestOptions();
  options.threads = 0;
  EXPECT_FALSE(HttpServer::Start(options, Echo).ok());
  EXPECT_FALSE(HttpServer::Start(TestOptions(), nullptr).ok());
}

// ---- TLS -----------------------------------------------------------------------------------

struct Pem {
  std::string certificate, key;
};

std::string BioContents(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<std::size_t>(size));
}

// A self-signed P-256 certificate with subject CN `common_name`.
Pem SelfSigned(const std::string& common_name) {
  static std::atomic<long> serial{1};
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* certificate = X509_new();
  X509_set_version(certificate, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(certificate), serial++);
  X509_gmtime_adj(X509_getm_notBefore(certificate), -3600);
  X509_gmtime_adj(X509_getm_notAfter(certificate), 24 * 3600);
  X509_set_pubkey(certificate, key);
  X509_NAME* name = X509_get_subject_name(certificate);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0);
  X509_set_issuer_name(certificate, name);
  X509_sign(certificate, key, EVP_sha256());
  BIO* certificate_bio = BIO_new(BIO_s_mem());
  BIO* key_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(certificate_bio, certificate);
  PEM_write_bio_PrivateKey(key_bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  Pem pem{BioContents(certificate_bio), BioContents(key_bio)};
  BIO_free(certificate_bio);
  BIO_free(key_bio);
  X509_free(certificate);
  EVP_PKEY_free(key);
  return pem;
}

// Writes to a temporary name and renames, as certificate managers and secret volumes do.
void ReplaceFile(const std::filesystem::path& path, const std::string& contents) {
  const auto temporary = path.string() + ".tmp";
  std::ofstream(temporary, std::ios::binary | std::ios::trunc) << contents;
  std::filesystem::rename(temporary, path);
}

class HttpServerTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "toposched-server-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    directory_ = pattern;
    files_.cert_file = (directory_ / "tls.crt").string();
    files_.key_file = (directory_ / "tls.key").string();
    client_context_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(client_context_, SSL_VERIFY_NONE, nullptr);
  }
  void TearDown() override {
    SSL_CTX_free(client_context_);
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }

  void Install(const Pem& pem) {
    ReplaceFile(files_.key_file, pem.key);
    ReplaceFile(files_.cert_file, pem.certificate);
  }

  ServerOptions TlsOptions() const {
    auto options = TestOptions();
    options.tls_enabled = true;
    options.tls = files_;
    options.tls_reload_interval = 50ms;
    return options;
  }

  // The subject CN a new connection sees; "" when the handshake fails.
  std::string ServedCommonName(std::uint16_t port) {
    Client client(port, client_context_);
    return client.PeerCommonName();
  }

  std::filesystem::path directory_;
  TlsFiles files_;
  SSL_CTX* client_context_ = nullptr;
};

TEST_F(HttpServerTlsTest, ServesHttpsAndReloadsChangedCertificates) {
  Install(SelfSigned("toposched-a"));
  auto server = StartServer(TlsOptions());
  ASSERT_NE(server, nullptr);
  const std::uint16_t port = server->port();

  Client client(port, client_context_);
  ASSERT_TRUE(client.connected());
  EXPECT_EQ(client.PeerCommonName(), "toposched-a");
  const auto response = client.RoundTrip(Request("POST", "/tls", "secret"));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "POST /tls  secret");

  Install(SelfSigned("toposched-b"));
  EXPECT_TRUE(Eventually([&] { return ServedCommonName(port) == "toposched-b"; }));
  EXPECT_GE(server->counters().tls_reloads, 1u);
  // The connection opened before the reload keeps working.
  const auto still = client.RoundTrip(Request("GET", "/still"));
  ASSERT_TRUE(still.has_value());
  EXPECT_EQ(still->status, 200);

  // A broken replacement is refused; the server keeps the last good pair.
  const auto failures = server->counters().tls_reload_failures;
  const auto reloads = server->counters().tls_reloads;
  ReplaceFile(files_.cert_file, "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n");
  EXPECT_TRUE(Eventually([&] { return server->counters().tls_reload_failures > failures; }));
  EXPECT_EQ(server->counters().tls_reloads, reloads);
  Client after(port, client_context_);
  ASSERT_TRUE(after.connected());
  EXPECT_EQ(after.PeerCommonName(), "toposched-b");
  const auto served = after.RoundTrip(Request("GET", "/"));
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(served->status, 200);
}

TEST_F(HttpServerTlsTest, PlainHttpOnATlsPortIsClosed) {
  Install(SelfSigned("toposched-a"));
  auto server = StartServer(TlsOptions());
  ASSERT_NE(server, nullptr);
  Client plain(server->port());
  ASSERT_TRUE(plain.Send(Request("GET", "/")));
  EXPECT_TRUE(plain.WaitForClose(5s));
  EXPECT_EQ(plain.received().find("HTTP/1.1 200"), std::string::npos);
  EXPECT_EQ(ServedCommonName(server->port()), "toposched-a");  // and TLS still works
}

// Mutual TLS: with a client CA, a certificate that chains to it marks the
// request verified; none still connects (probes), unverified; one from elsewhere is refused.
TEST_F(HttpServerTlsTest, ClientCertificatesAreVerifiedAgainstTheClientCa) {
  Install(SelfSigned("toposched-a"));
  const Pem scheduler = SelfSigned("kube-scheduler");  // self-signed: its own CA
  const Pem stranger = SelfSigned("stranger");
  files_.client_ca_file = (directory_ / "client-ca.crt").string();
  ReplaceFile(files_.client_ca_file, scheduler.certificate);
  auto server = StartServer(TlsOptions(), [](const HttpRequest& request, HttpResponse& response) {
    response.body = request.client_verified ? "verified" : "anonymous";
  });
  ASSERT_NE(server, nullptr);
  auto context_with = [](const Pem& pem) {
    SSL_CTX* context = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nullptr);
    BIO* cert = BIO_new_mem_buf(pem.certificate.data(), static_cast<int>(pem.certificate.size()));
    BIO* key = BIO_new_mem_buf(pem.key.data(), static_cast<int>(pem.key.size()));
    X509* x509 = PEM_read_bio_X509(cert, nullptr, nullptr, nullptr);
    EVP_PKEY* pkey = PEM_read_bio_PrivateKey(key, nullptr, nullptr, nullptr);
    SSL_CTX_use_certificate(context, x509);
    SSL_CTX_use_PrivateKey(context, pkey);
    X509_free(x509);
    EVP_PKEY_free(pkey);
    BIO_free(cert);
    BIO_free(key);
    return context;
  };
  SSL_CTX* with_scheduler = context_with(scheduler);
  SSL_CTX* with_stranger = context_with(stranger);
  {
    Client client(server->port(), with_scheduler);
    ASSERT_TRUE(client.connected());
    const auto r = client.RoundTrip(Request("POST", "/scheduler/bind", "{}"));
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->body, "verified");
  }
  {
    Client client(server->port(), client_context_);  // no certificate: a kubelet probe
    ASSERT_TRUE(client.connected());
    const auto r = client.RoundTrip(Request("GET", "/healthz"));
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->body, "anonymous");
  }
  {
    // TLS 1.3 reports the refusal after the client's side of the handshake: no answer either way.
    Client client(server->port(), with_stranger);
    const auto r =
        client.connected() ? client.RoundTrip(Request("POST", "/scheduler/bind", "{}")) : std::nullopt;
    EXPECT_FALSE(r.has_value()) << r->body;
  }
  SSL_CTX_free(with_scheduler);
  SSL_CTX_free(with_stranger);
}

TEST_F(HttpServerTlsTest, StartFailsWhenTheFilesCannotBeLoaded) {
  {  // Missing files.
    const auto server = HttpServer::Start(TlsOptions(), Echo);
    ASSERT_FALSE(server.ok());
    EXPECT_NE(server.error().message().find(files_.cert_file), std::string::npos) << server.error().message();
  }
  {  // A key that is not the certificate's.
    const Pem a = SelfSigned("toposched-a");
    const Pem b = SelfSigned("toposched-b");
    ReplaceFile(files_.cert_file, a.certificate);
    ReplaceFile(files_.key_file, b.key);
    const auto server = HttpServer::Start(TlsOptions(), Echo);
    ASSERT_FALSE(server.ok());
    // OpenSSL notices the mismatch while loading the key ("key values mismatch"); either way the
    // message names the key file.
    EXPECT_NE(server.error().message().find(files_.key_file), std::string::npos) << server.error().message();
  }
}

}  // namespace
}  // namespace toposched::server
