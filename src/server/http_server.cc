// HttpServer on Boost.Asio + Boost.Beast.
//
// Threading: `threads` workers run one io_context. Everything that belongs to the server as a
// whole (the acceptor, the TLS reload timer, the shutdown grace timer) runs on one strand; each
// connection runs on a strand of its own, so a connection's socket, timer and parser are only
// ever touched by one thread at a time, and the handler runs inline in that strand, except for
// targets ServerOptions::offload selects: their handler runs on the offload thread pool (it may
// wait long on another server) and posts the reply back to the connection's strand.
//
// Timeouts: one steady_timer per connection holds the deadline of the current phase (idle wait,
// request read, response write, lingering close). A phase change re-arms it; a generation number
// makes a stale expiry harmless. Every socket operation is asynchronous and bounded by a
// deadline, so a stalled client costs a socket and a few kilobytes, never a worker.

#include "toposched/server/http_server.h"
#include "http_framing.h"
#include "toposched/common/json_string.h"
#include "toposched/metrics/logging.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <openssl/ssl.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

namespace toposched::server {

using metrics::Log;
using metrics::LogLevel;
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using std::chrono::milliseconds;

// The first read of a request; the parser reads the rest in larger pieces.
constexpr std::size_t kFirstReadBytes = 4096;
// A connection keeps at most this much read buffer between requests.
constexpr std::size_t kIdleBufferBytes = 16u << 10;
// After an error reply (or Connection: close) the server stops sending and reads what the client
// still sends for a while before closing: closing with unread bytes makes the kernel send a reset
// that can destroy the reply before the client reads it. Bounded in time and bytes.
constexpr milliseconds kMaxLinger{2'000};
// While shutting down, the client has been told Connection: close and normally closes at once;
// Wait() should not sit out a full linger for one that does not.
constexpr milliseconds kMaxLingerWhileStopping{250};
constexpr std::size_t kMaxLingerBytes = 1u << 20;
// When a read deadline has cancelled the socket, the time left for the 408 to go out.
constexpr milliseconds kCancelGrace{1'000};
// Pause before accepting again after an accept error (e.g. out of file descriptors).
constexpr milliseconds kAcceptRetryDelay{50};
constexpr std::string_view kContinueResponse = "HTTP/1.1 100 Continue\r\n\r\n";

std::string_view ToStd(beast::string_view text) {
  return {text.data(), text.size()};
}


HttpResponse ErrorResponse(int status, std::string_view message) {
  HttpResponse response;
  response.status = status;
  response.content_type = "application/json";
  response.body = "{\"Error\":";
  AppendJsonString(response.body, message);  // valid JSON whatever bytes `message` has
  response.body += '}';
  return response;
}

// RFC 9110 token characters, for the handler's extra header name.
bool IsToken(std::string_view text) {
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7f && std::string_view("\"(),/:;<=>?@[\\]{}").find(c) == std::string_view::npos;
  });
}

// A header value the handler supplies must not be able to inject headers.
bool IsSafeHeaderValue(std::string_view text) {
  return text.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

std::string DescribeEndpoint(const tcp::endpoint& endpoint) {
  const auto address = endpoint.address();
  std::string host = address.to_string();
  if (address.is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(endpoint.port());
}

void Bump(std::atomic<std::uint64_t>& counter) {
  counter.fetch_add(1, std::memory_order_relaxed);
}

struct AtomicCounters {
  std::atomic<std::uint64_t> connections_accepted{0};
  std::atomic<std::uint64_t> connections_rejected{0};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> bad_requests{0};
  std::atomic<std::uint64_t> body_too_large{0};
  std::atomic<std::uint64_t> timeouts{0};
  std::atomic<std::uint64_t> handler_exceptions{0};
  std::atomic<std::uint64_t> offloaded{0};
  std::atomic<std::uint64_t> offload_rejected{0};
  std::atomic<std::uint64_t> tls_reloads{0};
  std::atomic<std::uint64_t> tls_reload_failures{0};
  std::atomic<std::uint64_t> open_connections{0};
};

// ---- TLS files -----------------------------------------------------------------------------

// What identifies a version of a file: a rewrite changes mtime (and usually size), an atomic
// replace (rename, or the symlink swap of a Kubernetes secret volume) changes the inode.
struct FileStamp {
  bool exists = false;
  std::uint64_t device = 0, inode = 0;
  std::int64_t size = 0, mtime_sec = 0, mtime_nsec = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp StampFile(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return {};
  return FileStamp{true,
                   static_cast<std::uint64_t>(info.st_dev),
                   static_cast<std::uint64_t>(info.st_ino),
                   static_cast<std::int64_t>(info.st_size),
                   static_cast<std::int64_t>(info.st_mtim.tv_sec),
                   static_cast<std::int64_t>(info.st_mtim.tv_nsec)};
}

struct TlsStamp {
  FileStamp cert, key, client_ca;
  bool operator==(const TlsStamp&) const = default;
};

TlsStamp StampTlsFiles(const TlsFiles& files) {
  return {StampFile(files.cert_file), StampFile(files.key_file),
          files.client_ca_file.empty() ? FileStamp{} : StampFile(files.client_ca_file)};
}

Result<std::shared_ptr<ssl::context>> LoadTlsContext(const TlsFiles& files) {
  if (files.cert_file.empty() || files.key_file.empty()) {
    return Error("tls: both a certificate file and a key file are required");
  }
  std::shared_ptr<ssl::context> context;
  try {
    context = std::make_shared<ssl::context>(ssl::context::tls_server);
  } catch (const std::exception& e) {
    return Error(std::string("tls: cannot create a TLS context: ") + e.what());
  }
  SSL_CTX* native = context->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  long options = SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE;
#ifdef SSL_OP_NO_RENEGOTIATION
  options |= SSL_OP_NO_RENEGOTIATION;
#endif
  SSL_CTX_set_options(native, options);
  error_code ec;
  context->use_certificate_chain_file(files.cert_file, ec);
  if (ec) return Error("tls: cannot load certificate chain " + files.cert_file + ": " + ec.message());
  context->use_private_key_file(files.key_file, ssl::context::pem, ec);
  if (ec) return Error("tls: cannot load private key " + files.key_file + ": " + ec.message());
  if (SSL_CTX_check_private_key(native) != 1) {
    return Error("tls: private key " + files.key_file + " does not match certificate " + files.cert_file);
  }
  if (!files.client_ca_file.empty()) {
    context->load_verify_file(files.client_ca_file, ec);
    if (ec) return Error("tls: cannot load client CA " + files.client_ca_file + ": " + ec.message());
    // Ask for a certificate and verify one that comes; clients without one (probes) still
    // connect, unverified, and the handler refuses what needs a verified client.
    context->set_verify_mode(ssl::verify_peer, ec);
    if (ec) return Error("tls: cannot ask for client certificates: " + ec.message());
  }
  return context;
}

// ---- Server core and sessions --------------------------------------------------------------

class ServerCore;

// One accepted connection. Lives as long as an asynchronous operation holds it; registered with
// the core (weakly) so that Shutdown can reach it.
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  explicit SessionBase(ServerCore& core);
  virtual ~SessionBase();
  SessionBase(const SessionBase&) = delete;
  SessionBase& operator=(const SessionBase&) = delete;

  // Each posts onto the session's strand; callable from any thread.
  virtual void Launch() = 0;
  virtual void OnServerShutdown() = 0;  // closes the connection now unless a request is in flight
  virtual void ForceClose() = 0;

 protected:
  ServerCore& core_;
};

class ServerCore {
 public:
  ServerCore(ServerOptions options, Handler handler)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        strand_(asio::make_strand(io_context_)),
        acceptor_(strand_),
        accept_retry_timer_(strand_),
        tls_timer_(strand_),
        grace_timer_(strand_) {}
  ServerCore(const ServerCore&) = delete;
  ServerCore& operator=(const ServerCore&) = delete;

  ~ServerCore() {
    Shutdown(milliseconds{0});
    Wait();
    workers_done_.store(true);
  }

  Status Listen();
  Status StartWorkers();
  void Shutdown(milliseconds grace);
  void Wait();
  ServerCounters Counters() const;
  std::uint16_t port() const { return port_; }

  // Used by sessions.
  const ServerOptions& options() const { return options_; }
  const Handler& handler() const { return handler_; }
  AtomicCounters& counters() { return counters_; }
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  std::size_t BodyLimitFor(std::string_view target) const {
    if (!options_.body_limit) return options_.max_body_bytes;
    try {
      return options_.body_limit(target);
    } catch (const std::exception& e) {
      Log(LogLevel::kError, {"http", "", ""}, "body limit callback failed on " + std::string(target) + ": " + e.what());
    } catch (...) {
      Log(LogLevel::kError, {"http", "", ""}, "body limit callback failed on " + std::string(target));
    }
    return options_.max_body_bytes;
  }
  void Unregister(SessionBase* session);

  // Whether `target`'s handler runs on the offload threads (ServerOptions::offload).
  bool Offloads(std::string_view target) const {
    if (!offload_pool_ || !options_.offload) return false;
    try {
      return options_.offload(target);
    } catch (...) {
      return false;  // a failing callback: handle it on the worker, as without offloading
    }
  }
  // Admits one offloaded request: false when offload_threads run and as many more wait.
  bool AdmitOffload() {
    const std::size_t cap = 2 * static_cast<std::size_t>(options_.offload_threads);
    std::size_t n = offload_admitted_.load(std::memory_order_relaxed);
    while (n < cap) {
      if (offload_admitted_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
    }
    return false;
  }
  void EndOffload() { offload_admitted_.fetch_sub(1, std::memory_order_relaxed); }
  asio::thread_pool& offload_pool() { return *offload_pool_; }
  asio::io_context& io_context() { return io_context_; }

 private:
  void Accept();
  void OnAccept(const error_code& ec, tcp::socket socket);
  void ScheduleTlsPoll();
  void PollTlsFiles();
  std::shared_ptr<ssl::context> CurrentTlsContext() {
    std::lock_guard lock(tls_mutex_);
    return tls_context_;
  }
  void BeginShutdown(milliseconds grace);
  std::vector<std::shared_ptr<SessionBase>> LiveSessions();
  void RunWorker();

  const ServerOptions options_;
  const Handler handler_;
  AtomicCounters counters_;
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> workers_done_{false};  // after this, nothing may be posted to strand_
  std::uint16_t port_ = 0;

  std::mutex sessions_mutex_;
  std::unordered_map<SessionBase*, std::weak_ptr<SessionBase>> sessions_;

  std::mutex tls_mutex_;
  std::shared_ptr<ssl::context> tls_context_;  // for new connections; swapped on reload
  TlsStamp tls_stamp_;                         // of the files last tried; strand only

  std::mutex wait_mutex_;
  std::atomic<std::size_t> offload_admitted_{0};  // running or waiting on the offload threads

  // Declared after everything sessions touch: destroying the io_context destroys any session
  // still held by a pending operation, and its destructor unregisters from the core.
  asio::io_context io_context_;
  asio::strand<asio::io_context::executor_type> strand_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_timer_;
  asio::steady_timer tls_timer_;
  asio::steady_timer grace_timer_;
  std::vector<std::thread> workers_;
  // After the io_context: joined in Wait(), so no offloaded handler outlives the core.
  std::unique_ptr<asio::thread_pool> offload_pool_;
};

SessionBase::SessionBase(ServerCore& core) : core_(core) {
  core_.counters().open_connections.fetch_add(1, std::memory_order_relaxed);
}

SessionBase::~SessionBase() {
  core_.Unregister(this);
}

template <class Stream>
class Session final : public SessionBase {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, tcp::socket>;

  Session(ServerCore& core, tcp::socket socket, std::string remote, std::shared_ptr<ssl::context> tls)
      : SessionBase(core),
        tls_context_(std::move(tls)),
        stream_(MakeStream(std::move(socket), tls_context_.get())),
        timer_(stream_.get_executor()),
        remote_(std::move(remote)) {}

  void Launch() override {
    asio::post(stream_.get_executor(), [self = Self()] { self->Start(); });
  }

  void OnServerShutdown() override {
    asio::post(stream_.get_executor(), [self = Self()] {
      // A request that has started arriving, is being handled or written is in flight: it
      // finishes (bounded by its own deadline and the grace period) and then the connection
      // closes. Everything else closes now.
      switch (self->phase_) {
        case Phase::kHandshake:
        case Phase::kIdle:
        case Phase::kLingering:
          self->Close();
          break;
        default:
          break;
      }
    });
  }

  void ForceClose() override {
    asio::post(stream_.get_executor(), [self = Self()] { self->Close(); });
  }

 private:
  enum class Phase { kHandshake, kIdle, kReading, kHandling, kWriting, kLingering, kClosed };

  static Stream MakeStream(tcp::socket socket, ssl::context* tls) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *tls);
    } else {
      (void)tls;
      return socket;
    }
  }

  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  tcp::socket& Socket() { return beast::get_lowest_layer(stream_); }

  // The client presented a certificate and it verified (the context asks only with a client CA).
  bool ClientVerified() {
    if constexpr (kTls) {
      SSL* ssl = stream_.native_handle();
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
      X509* peer = SSL_get0_peer_certificate(ssl);
#else
      X509* peer = SSL_get_peer_certificate(ssl);
      if (peer != nullptr) X509_free(peer);
#endif
      return peer != nullptr && SSL_get_verify_result(ssl) == X509_V_OK;
    } else {
      return false;
    }
  }

  void Start() {
    if (phase_ == Phase::kClosed) return;
    if constexpr (kTls) {
      phase_ = Phase::kHandshake;
      ArmDeadline(core_.options().read_timeout);
      stream_.async_handshake(ssl::stream_base::server, [self = Self()](const error_code& ec) {
        if (self->phase_ == Phase::kClosed) return;
        if (ec) return self->Close();
        self->WaitForRequest(self->core_.options().read_timeout);
      });
    } else {
      // A fresh connection gets read_timeout, not idle_timeout, to send its first request: a
      // client that connects and says nothing is treated like a slow one.
      WaitForRequest(core_.options().read_timeout);
    }
  }

  // Waits for the first byte of the next request, for at most `timeout`.
  void WaitForRequest(milliseconds timeout) {
    if (core_.stopping()) return Close();
    parser_.reset();
    response_ = {};
    if (buffer_.size() > 0) return ReadHeader();  // pipelined: the next request has started
    if (buffer_.capacity() > kIdleBufferBytes) buffer_.shrink_to_fit();
    phase_ = Phase::kIdle;
    ArmDeadline(timeout);
    stream_.async_read_some(buffer_.prepare(kFirstReadBytes),
                            [self = Self()](const error_code& ec, std::size_t bytes) {
                              if (self->phase_ == Phase::kClosed) return;
                              if (ec) return self->Close();  // EOF, reset or a TLS error
                              self->buffer_.commit(bytes);
                              self->ReadHeader();
                            });
  }

  // The request has started: its header and body must be in within read_timeout from now.
  void ReadHeader() {
    phase_ = Phase::kReading;
    timed_out_ = false;
    ArmDeadline(core_.options().read_timeout);
    parser_.emplace();
    internal::ConfigureRequestParser(*parser_, core_.options().max_header_bytes);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = Self()](const error_code& ec, std::size_t) { self->OnHeader(ec); });
  }

  void OnHeader(const error_code& ec) {
    if (phase_ == Phase::kClosed) return;
    if (ec) return OnReadError(ec);
    const auto& request = parser_->get();
    const std::size_t limit = core_.BodyLimitFor(ToStd(request.target()));
    if (!internal::ApplyBodyLimit(*parser_, limit)) return RejectBody(limit);
    if (parser_->is_done()) return HandleRequest();
    if (request.version() == 11 && beast::iequals(request[http::field::expect], "100-continue")) {
      asio::async_write(stream_, asio::buffer(kContinueResponse.data(), kContinueResponse.size()),
                        [self = Self()](const error_code& write_ec, std::size_t) {
                          if (self->phase_ == Phase::kClosed) return;
                          if (write_ec) return self->OnReadError(write_ec);
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_, [self = Self()](const error_code& ec, std::size_t) {
      if (self->phase_ == Phase::kClosed) return;
      if (ec) return self->OnReadError(ec);
      self->HandleRequest();
    });
  }

  void OnReadError(const error_code& ec) {
    switch (internal::ClassifyReadError(ec, timed_out_)) {
      case internal::ReadFailure::kTimeout:
        return SendErrorAndClose(408, "request not received within the read timeout");
      case internal::ReadFailure::kBodyTooLarge:
        return RejectBody(core_.BodyLimitFor(
            parser_ && parser_->is_header_done() ? ToStd(parser_->get().target()) : std::string_view()));
      case internal::ReadFailure::kHeaderTooLarge:
        Bump(core_.counters().bad_requests);
        return SendErrorAndClose(
            431, "request header exceeds " + std::to_string(core_.options().max_header_bytes) + " bytes");
      case internal::ReadFailure::kClosed:
        // The client went away (before or in the middle of a request), or a transport error.
        return Close();
      case internal::ReadFailure::kMalformed:
        break;
    }
    Bump(core_.counters().bad_requests);
    SendErrorAndClose(400, "malformed HTTP request: " + ec.message());
  }

  void RejectBody(std::size_t limit) {
    Bump(core_.counters().body_too_large);
    SendErrorAndClose(413, "request body exceeds " + std::to_string(limit) + " bytes");
  }

  using Request = http::request<http::string_body>;

  void HandleRequest() {
    DisarmDeadline();
    phase_ = Phase::kHandling;
    Bump(core_.counters().requests);
    // Owned apart from the parser: an offloaded handler reads it on another thread.
    auto request = std::make_shared<const Request>(parser_->release());
    parser_.reset();
    const bool verified = ClientVerified();
    if (!core_.Offloads(ToStd(request->target()))) return Reply(*request, RunHandler(*request, verified));
    if (!core_.AdmitOffload()) {
      Bump(core_.counters().offload_rejected);
      HttpResponse busy = ErrorResponse(
          429, "too many requests of this kind in flight (" + std::to_string(2 * core_.options().offload_threads) +
                   "): retry");
      busy.extra_header_name = "Retry-After";
      busy.extra_header_value = "1";
      return Reply(*request, std::move(busy));
    }
    Bump(core_.counters().offloaded);
    // The work guard keeps the workers running until the reply is posted back (a graceful
    // shutdown writes it); the connection's strand then writes it unless it was closed meanwhile.
    asio::post(core_.offload_pool(), [self = Self(), request, verified, executor = stream_.get_executor(),
                                      guard = asio::make_work_guard(core_.io_context())]() mutable {
      HttpResponse response = self->RunHandler(*request, verified);
      self->core_.EndOffload();
      asio::post(executor, [self, request, response = std::move(response)]() mutable {
        if (self->phase_ == Phase::kClosed) return;
        self->Reply(*request, std::move(response));
      });
      guard.reset();
    });
  }

  // Runs the handler; an exception becomes a 500. Any thread: touches no session state but
  // the constant remote_.
  HttpResponse RunHandler(const Request& request, bool verified) {
    const HttpRequest view{ToStd(request.method_string()), ToStd(request.target()),
                           ToStd(request[http::field::content_type]), request.body(), remote_, verified};
    HttpResponse response;
    try {
      core_.handler()(view, response);
    } catch (const std::exception& e) {
      Bump(core_.counters().handler_exceptions);
      Log(LogLevel::kError, {"http", "", ""}, "handler failed on " + std::string(view.method) + " " + std::string(view.target) + ": " + e.what());
      response = ErrorResponse(500, e.what());
    } catch (...) {
      Bump(core_.counters().handler_exceptions);
      Log(LogLevel::kError, {"http", "", ""}, "handler failed on " + std::string(view.method) + " " + std::string(view.target) + ": unknown exception");
      response = ErrorResponse(500, "unknown exception");
    }
    return response;
  }

  void Reply(const Request& request, HttpResponse response) {
    // While shutting down the reply says Connection: close, so the client does not reuse it.
    const bool keep_alive = request.keep_alive() && !core_.stopping();
    const bool head = request.method() == http::verb::head;
    BuildResponse(std::move(response), request.version(), keep_alive, head);
    Write(keep_alive);
  }

  void BuildResponse(HttpResponse response, unsigned version, bool keep_alive, bool head) {
    if (response.status < 200 || response.status > 599) {
      response = ErrorResponse(500, "handler returned HTTP status " + std::to_string(response.status));
    }
    response_ = {};
    response_.version(version);
    response_.result(static_cast<unsigned>(response.status));
    if (!response.content_type.empty() && IsSafeHeaderValue(response.content_type)) {
      response_.set(http::field::content_type, response.content_type);
    }
    if (IsToken(response.extra_header_name) && IsSafeHeaderValue(response.extra_header_value)) {
      response_.set(response.extra_header_name, response.extra_header_value);
    }
    response_.keep_alive(keep_alive);
    if (response.status == 204 || response.status == 304) return;  // no body, no Content-Length
    response_.content_length(response.body.size());
    if (!head) response_.body() = std::move(response.body);
  }

  void Write(bool keep_alive) {
    phase_ = Phase::kWriting;
    ArmDeadline(core_.options().write_timeout);
    http::async_write(stream_, response_, [self = Self(), keep_alive](const error_code& ec, std::size_t) {
      if (self->phase_ == Phase::kClosed) return;
      if (ec) return self->Close();
      self->response_ = {};
      if (!keep_alive || self->core_.stopping()) return self->LingeringClose();
      self->WaitForRequest(self->core_.options().idle_timeout);
    });
  }

  void SendErrorAndClose(int status, const std::string& message) {
    const unsigned version = parser_ && parser_->is_header_done() ? parser_->get().version() : 11;
    parser_.reset();
    BuildResponse(ErrorResponse(status, message), version, /*keep_alive=*/false, /*head=*/false);
    Write(/*keep_alive=*/false);
  }

  // Half-closes and discards what the client still sends, until it closes, the bytes or the
  // time run out, so that the reply is not lost to a reset (see kMaxLinger).
  void LingeringClose() {
    phase_ = Phase::kLingering;
    error_code ec;
    Socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return Close();
    lingered_bytes_ = 0;
    ArmDeadline(
        std::min(core_.options().read_timeout, core_.stopping() ? kMaxLingerWhileStopping : kMaxLinger));
    Drain();
  }

  void Drain() {
    Socket().async_read_some(buffer_.prepare(kFirstReadBytes),
                             [self = Self()](const error_code& ec, std::size_t bytes) {
                               if (self->phase_ == Phase::kClosed) return;
                               self->lingered_bytes_ += bytes;
                               if (ec || self->lingered_bytes_ > kMaxLingerBytes) return self->Close();
                               self->Drain();
                             });
  }

  void ArmDeadline(milliseconds timeout) {
    const std::uint64_t generation = ++deadline_generation_;
    timer_.expires_after(timeout);
    timer_.async_wait([self = Self(), generation](const error_code& ec) {
      if (ec || generation != self->deadline_generation_ || self->phase_ == Phase::kClosed) return;
      self->OnDeadline();
    });
  }

  void DisarmDeadline() {
    ++deadline_generation_;
    timer_.cancel();
  }

  void OnDeadline() {
    switch (phase_) {
      case Phase::kReading: {
        if (timed_out_) return Close();  // the cancel did not stop the read in time: give up
        // Cancel the read and answer 408 from its completion (OnReadError). The cancel can miss
        // a read that the parser starts right after it; the short deadline catches that case.
        Bump(core_.counters().timeouts);
        timed_out_ = true;
        error_code ec;
        Socket().cancel(ec);
        ArmDeadline(std::min(core_.options().write_timeout, kCancelGrace));
        return;
      }
      case Phase::kHandshake:
      case Phase::kIdle:
      case Phase::kWriting:
        Bump(core_.counters().timeouts);
        return Close();
      case Phase::kLingering:
        return Close();
      case Phase::kHandling:
      case Phase::kClosed:
        return;
    }
  }

  void Close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    DisarmDeadline();
    error_code ec;
    Socket().close(ec);
  }

  std::shared_ptr<ssl::context> tls_context_;  // outlives stream_, which uses it
  Stream stream_;
  asio::steady_timer timer_;
  const std::string remote_;
  beast::flat_buffer buffer_;
  std::optional<internal::RequestParser> parser_;
  http::response<http::string_body> response_;
  Phase phase_ = Phase::kIdle;
  std::uint64_t deadline_generation_ = 0;
  bool timed_out_ = false;  // the read deadline fired during this request
  std::size_t lingered_bytes_ = 0;
};

using PlainSession = Session<tcp::socket>;
using TlsSession = Session<beast::ssl_stream<tcp::socket>>;

// ---- ServerCore ----------------------------------------------------------------------------

Status ServerCore::Listen() {
  if (options_.tls_enabled) {
    tls_stamp_ = StampTlsFiles(options_.tls);
    TOPOSCHED_ASSIGN_OR_RETURN(tls_context_, LoadTlsContext(options_.tls));
  }
  error_code ec;
  const auto address = asio::ip::make_address(options_.address, ec);
  if (ec) return Error("listen address \"" + options_.address + "\" is not an IP address");
  const tcp::endpoint endpoint(address, options_.port);
  const std::string where = DescribeEndpoint(endpoint);
  acceptor_.open(endpoint.protocol(), ec);
  if (ec) return Error("cannot open a socket for " + where + ": " + ec.message());
  acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (ec) return Error("cannot set SO_REUSEADDR on " + where + ": " + ec.message());
  acceptor_.bind(endpoint, ec);
  if (ec) return Error("cannot listen on " + where + ": " + ec.message());
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Error("cannot listen on " + where + ": " + ec.message());
  port_ = acceptor_.local_endpoint(ec).port();
  if (ec) return Error("cannot read the bound port of " + where + ": " + ec.message());
  asio::post(strand_, [this] {
    Accept();
    if (options_.tls_enabled) ScheduleTlsPoll();
  });
  return Status::Ok();
}

Status ServerCore::StartWorkers() {
  try {
    if (options_.offload_threads > 0) offload_pool_ = std::make_unique<asio::thread_pool>(options_.offload_threads);
    workers_.reserve(static_cast<std::size_t>(options_.threads));
    for (int i = 0; i < options_.threads; ++i) workers_.emplace_back([this] { RunWorker(); });
  } catch (const std::system_error& e) {
    return Error(std::string("cannot start the worker threads: ") + e.what());
  }
  return Status::Ok();
}

void ServerCore::RunWorker() {
  for (;;) {
    try {
      io_context_.run();
      return;
    } catch (const std::exception& e) {
      // Nothing here throws by design; if something does, keep the worker alive.
      Log(LogLevel::kError, {"http", "", ""}, std::string("worker caught an exception: ") + e.what());
    }
  }
}

void ServerCore::Accept() {
  acceptor_.async_accept(asio::make_strand(io_context_), [this](const error_code& ec, tcp::socket socket) {
    OnAccept(ec, std::move(socket));
  });
}

void ServerCore::OnAccept(const error_code& ec, tcp::socket socket) {
  if (stopping()) return;  // the acceptor is closed; `socket` closes on return
  if (ec) {
    // Typically EMFILE: retry later instead of spinning.
    Log(LogLevel::kWarn, {"http", "", ""}, "accept failed: " + ec.message());
    accept_retry_timer_.expires_after(kAcceptRetryDelay);
    accept_retry_timer_.async_wait([this](const error_code& wait_ec) {
      if (!wait_ec && !stopping()) Accept();
    });
    return;
  }
  // Only this strand adds connections, so the check cannot race with another admission.
  if (counters_.open_connections.load(std::memory_order_relaxed) >= options_.max_connections) {
    Bump(counters_.connections_rejected);
    error_code close_ec;
    socket.close(close_ec);
    return Accept();
  }
  error_code option_ec;
  socket.set_option(tcp::no_delay(true), option_ec);
  const auto remote_endpoint = socket.remote_endpoint(option_ec);
  std::string remote = option_ec ? std::string("unknown") : DescribeEndpoint(remote_endpoint);
  Bump(counters_.connections_accepted);
  std::shared_ptr<SessionBase> session;
  if (options_.tls_enabled) {
    session = std::make_shared<TlsSession>(*this, std::move(socket), std::move(remote), CurrentTlsContext());
  } else {
    session = std::make_shared<PlainSession>(*this, std::move(socket), std::move(remote), nullptr);
  }
  {
    std::lock_guard lock(sessions_mutex_);
    sessions_.emplace(session.get(), session);
  }
  session->Launch();
  Accept();
}

void ServerCore::Unregister(SessionBase* session) {
  bool last = false;
  {
    std::lock_guard lock(sessions_mutex_);
    sessions_.erase(session);
    last = sessions_.empty();
  }
  counters_.open_connections.fetch_sub(1, std::memory_order_relaxed);
  // The last connection gone while stopping: end the grace period early so the workers return.
  if (last && stopping() && !workers_done_.load()) asio::post(strand_, [this] { grace_timer_.cancel(); });
}

std::vector<std::shared_ptr<SessionBase>> ServerCore::LiveSessions() {
  std::vector<std::shared_ptr<SessionBase>> live;
  std::lock_guard lock(sessions_mutex_);
  live.reserve(sessions_.size());
  for (auto& [key, weak] : sessions_) {
    if (auto session = weak.lock()) live.push_back(std::move(session));
  }
  return live;
}

void ServerCore::ScheduleTlsPoll() {
  tls_timer_.expires_after(options_.tls_reload_interval);
  tls_timer_.async_wait([this](const error_code& ec) {
    if (ec || stopping()) return;
    PollTlsFiles();
    ScheduleTlsPoll();
  });
}

void ServerCore::PollTlsFiles() {
  // The stamp is taken before reading, so a change during the read is seen at the next poll.
  // A pair that fails is not retried until a file changes again (a certificate and key
  // replaced one after the other fail once, then load).
  const TlsStamp stamp = StampTlsFiles(options_.tls);
  if (stamp == tls_stamp_) return;
  tls_stamp_ = stamp;
  auto context = LoadTlsContext(options_.tls);
  if (!context.ok()) {
    Bump(counters_.tls_reload_failures);
    Log(LogLevel::kWarn, {"http", "", ""}, "TLS reload failed, keeping the previous certificate: " + context.error().message());
    return;
  }
  {
    std::lock_guard lock(tls_mutex_);
    tls_context_ = std::move(context).value();
  }
  Bump(counters_.tls_reloads);
  Log(LogLevel::kInfo, {"http", "", ""}, "TLS certificate reloaded from " + options_.tls.cert_file + " and " + options_.tls.key_file);
}

void ServerCore::Shutdown(milliseconds grace) {
  if (shutdown_requested_.exchange(true)) return;
  stopping_.store(true, std::memory_order_release);
  asio::post(strand_, [this, grace] { BeginShutdown(grace); });
}

void ServerCore::BeginShutdown(milliseconds grace) {
  error_code ec;
  acceptor_.close(ec);
  accept_retry_timer_.cancel();
  tls_timer_.cancel();
  for (auto& session : LiveSessions()) session->OnServerShutdown();
  grace_timer_.expires_after(std::max(grace, milliseconds{0}));
  grace_timer_.async_wait([this](const error_code& wait_ec) {
    if (wait_ec) return;  // every connection closed before the grace period ended
    for (auto& session : LiveSessions()) session->ForceClose();
  });
  // A session that unregisters after this check posts the cancel itself (see Unregister).
  std::lock_guard lock(sessions_mutex_);
  if (sessions_.empty()) grace_timer_.cancel();
}

void ServerCore::Wait() {
  std::lock_guard lock(wait_mutex_);
  for (auto& worker : workers_) {
    // A worker cannot join itself (Wait from inside the handler); it returns when run() does.
    if (worker.joinable() && worker.get_id() != std::this_thread::get_id()) worker.join();
  }
  // Offloaded handlers still running finish (their replies are dropped with the io_context).
  if (offload_pool_ && !offload_pool_->get_executor().running_in_this_thread()) offload_pool_->join();
}

ServerCounters ServerCore::Counters() const {
  const auto load = [](const std::atomic<std::uint64_t>& counter) {
    return counter.load(std::memory_order_relaxed);
  };
  ServerCounters out;
  out.connections_accepted = load(counters_.connections_accepted);
  out.connections_rejected = load(counters_.connections_rejected);
  out.requests = load(counters_.requests);
  out.bad_requests = load(counters_.bad_requests);
  out.body_too_large = load(counters_.body_too_large);
  out.timeouts = load(counters_.timeouts);
  out.handler_exceptions = load(counters_.handler_exceptions);
  out.offloaded = load(counters_.offloaded);
  out.offload_rejected = load(counters_.offload_rejected);
  out.tls_reloads = load(counters_.tls_reloads);
  out.tls_reload_failures = load(counters_.tls_reload_failures);
  out.open_connections = load(counters_.open_connections);
  return out;
}

Status ValidateOptions(const ServerOptions& options) {
  if (options.threads < 1) return Error("threads must be at least 1");
  if (options.offload_threads < 0 || options.offload_threads > 4096) {
    return Error("offload_threads must be between 0 and 4096");
  }
  if (options.max_connections < 1) return Error("max_connections must be at least 1");
  if (options.max_header_bytes < 1) return Error("max_header_bytes must be at least 1");
  if (options.read_timeout.count() <= 0 || options.idle_timeout.count() <= 0 ||
      options.write_timeout.count() <= 0) {
    return Error("read, idle and write timeouts must be positive");
  }
  if (options.tls_enabled && options.tls_reload_interval.count() <= 0) {
    return Error("tls_reload_interval must be positive");
  }
  return Status::Ok();
}

}  // namespace

struct HttpServer::Impl final : ServerCore {
  using ServerCore::ServerCore;
};

Result<std::unique_ptr<HttpServer>> HttpServer::Start(ServerOptions options, Handler handler) {
  if (!handler) return Error("http server: no handler");
  if (auto status = ValidateOptions(options); !status.ok()) return status.error().WithContext("http server");
  auto impl = std::make_unique<Impl>(std::move(options), std::move(handler));
  if (auto status = impl->Listen(); !status.ok()) return status.error().WithContext("http server");
  if (auto status = impl->StartWorkers(); !status.ok()) return status.error().WithContext("http server");
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() = default;  // ~ServerCore: Shutdown(0) + Wait()

std::uint16_t HttpServer::port() const {
  return impl_->port();
}
void HttpServer::Shutdown(std::chrono::milliseconds grace) {
  impl_->Shutdown(grace);
}
void HttpServer::Wait() {
  impl_->Wait();
}
ServerCounters HttpServer::counters() const {
  return impl_->Counters();
}

}  // namespace toposched::server
