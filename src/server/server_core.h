#pragma once
// The server's private declarations, shared by its three translation units: http_server.cc
// (ServerCore: the listening socket, the workers, TLS reload and shutdown), http_session.cc (one
// connection's reads, handler call and writes) and tls_files.cc (loading the certificate files
// into an SSL context and telling when they change). Beast and Asio stay out of the public header;
// this one is internal to src/server.

#include "toposched/common/status.h"
#include "toposched/metrics/logging.h"
#include "toposched/server/http_server.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

namespace toposched::server::internal {

using metrics::Log;
using metrics::LogLevel;
namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using std::chrono::milliseconds;

inline void Bump(std::atomic<std::uint64_t>& counter) {
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

// ---- TLS files (tls_files.cc) --------------------------------------------------------------

// What identifies a version of a file: a rewrite changes mtime (and usually size), an atomic
// replace (rename, or the symlink swap of a Kubernetes secret volume) changes the inode.
struct FileStamp {
  bool exists = false;
  std::uint64_t device = 0, inode = 0;
  std::int64_t size = 0, mtime_sec = 0, mtime_nsec = 0;
  bool operator==(const FileStamp&) const = default;
};

struct TlsStamp {
  FileStamp cert, key, client_ca;
  bool operator==(const TlsStamp&) const = default;
};

TlsStamp StampTlsFiles(const TlsFiles& files);
Result<std::shared_ptr<ssl::context>> LoadTlsContext(const TlsFiles& files);

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
      Log(LogLevel::kError, {"http", "", ""},
          "body limit callback failed on " + std::string(target) + ": " + e.what());
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

// One connection's session (http_session.cc), not yet launched: the caller registers it first.
std::shared_ptr<SessionBase> MakePlainSession(ServerCore& core, tcp::socket socket, std::string remote);
std::shared_ptr<SessionBase> MakeTlsSession(ServerCore& core, tcp::socket socket, std::string remote,
                                            std::shared_ptr<ssl::context> tls);

}  // namespace toposched::server::internal
