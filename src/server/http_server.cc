// HttpServer on Boost.Asio + Boost.Beast.
//
// Threading: `threads` workers run one io_context. Everything that belongs to the server as a
// whole (the acceptor, the TLS reload timer, the shutdown grace timer) runs on one strand; each
// connection runs on a strand of its own, so a connection's socket, timer and parser are only
// ever touched by one thread at a time, and the handler runs inline in that strand, except for
// targets ServerOptions::offload selects: their handler runs on the offload thread pool (it may
// wait long on another server) and posts the reply back to the connection's strand.
//
// This file holds ServerCore (listening, accepting, workers, TLS reload, shutdown) and the public
// HttpServer; a connection's life is in http_session.cc, the TLS files in tls_files.cc, and the
// declarations they share in server_core.h.

#include "toposched/server/http_server.h"
#include "server_core.h"

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

namespace toposched::server {
namespace internal {
namespace {

// Pause before accepting again after an accept error (e.g. out of file descriptors).
constexpr milliseconds kAcceptRetryDelay{50};

std::string DescribeEndpoint(const tcp::endpoint& endpoint) {
  const auto address = endpoint.address();
  std::string host = address.to_string();
  if (address.is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(endpoint.port());
}

}  // namespace

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
    if (options_.offload_threads > 0)
      offload_pool_ = std::make_unique<asio::thread_pool>(options_.offload_threads);
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
    session = MakeTlsSession(*this, std::move(socket), std::move(remote), CurrentTlsContext());
  } else {
    session = MakePlainSession(*this, std::move(socket), std::move(remote));
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
    Log(LogLevel::kWarn, {"http", "", ""},
        "TLS reload failed, keeping the previous certificate: " + context.error().message());
    return;
  }
  {
    std::lock_guard lock(tls_mutex_);
    tls_context_ = std::move(context).value();
  }
  Bump(counters_.tls_reloads);
  Log(LogLevel::kInfo, {"http", "", ""},
      "TLS certificate reloaded from " + options_.tls.cert_file + " and " + options_.tls.key_file);
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

namespace {

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
}  // namespace internal

struct HttpServer::Impl final : internal::ServerCore {
  using ServerCore::ServerCore;
};

Result<std::unique_ptr<HttpServer>> HttpServer::Start(ServerOptions options, Handler handler) {
  if (!handler) return Error("http server: no handler");
  if (auto status = internal::ValidateOptions(options); !status.ok())
    return status.error().WithContext("http server");
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
