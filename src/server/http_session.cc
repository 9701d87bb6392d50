// One accepted connection: the Session template (plain TCP or TLS stream) that reads a request
// under the header and body limits, runs the handler inline or on the offload pool, writes the
// reply, and keeps the phase deadline (idle, read, write, lingering close). Its framing decisions
// come from http_framing.h, shared with the fuzz target; ServerCore (http_server.cc) accepts the
// socket and hands it here through MakePlainSession / MakeTlsSession.
//
// Timeouts: one steady_timer per connection holds the deadline of the current phase (idle wait,
// request read, response write, lingering close). A phase change re-arms it; a generation number
// makes a stale expiry harmless. Every socket operation is asynchronous and bounded by a
// deadline, so a stalled client costs a socket and a few kilobytes, never a worker.

#include "http_framing.h"
#include "server_core.h"
#include "toposched/common/json_string.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

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

namespace toposched::server::internal {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

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

}  // namespace

SessionBase::SessionBase(ServerCore& core) : core_(core) {
  core_.counters().open_connections.fetch_add(1, std::memory_order_relaxed);
}

SessionBase::~SessionBase() {
  core_.Unregister(this);
}

namespace {

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
      HttpResponse busy =
          ErrorResponse(429, "too many requests of this kind in flight (" +
                                 std::to_string(2 * core_.options().offload_threads) + "): retry");
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
    const HttpRequest view{ToStd(request.method_string()),
                           ToStd(request.target()),
                           ToStd(request[http::field::content_type]),
                           request.body(),
                           remote_,
                           verified};
    HttpResponse response;
    try {
      core_.handler()(view, response);
    } catch (const std::exception& e) {
      Bump(core_.counters().handler_exceptions);
      Log(LogLevel::kError, {"http", "", ""},
          "handler failed on " + std::string(view.method) + " " + std::string(view.target) + ": " + e.what());
      response = ErrorResponse(500, e.what());
    } catch (...) {
      Bump(core_.counters().handler_exceptions);
      Log(LogLevel::kError, {"http", "", ""},
          "handler failed on " + std::string(view.method) + " " + std::string(view.target) +
              ": unknown exception");
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

}  // namespace

std::shared_ptr<SessionBase> MakePlainSession(ServerCore& core, tcp::socket socket, std::string remote) {
  return std::make_shared<PlainSession>(core, std::move(socket), std::move(remote), nullptr);
}

std::shared_ptr<SessionBase> MakeTlsSession(ServerCore& core, tcp::socket socket, std::string remote,
                                            std::shared_ptr<ssl::context> tls) {
  return std::make_shared<TlsSession>(core, std::move(socket), std::move(remote), std::move(tls));
}

}  // namespace toposched::server::internal
