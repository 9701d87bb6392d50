#pragma once
// The extender's HTTP/1.1 server, on Boost.Asio + Boost.Beast. It knows nothing of scheduling:
// it reads bounded requests, hands each to one Handler on a worker thread and writes the reply.
//
// Contract:
// - HTTP/1.1 keep-alive (and HTTP/1.0 with or without keep-alive), TCP_NODELAY on every socket.
// - Limits: header bytes, body bytes (per target, from BodyLimit), open connections. A body over
//   its limit gets 413 and the connection is closed; a malformed request 400 and close; too many
//   connections: the new one is closed at once (and counted).
// - Timeouts: a request's header and body must arrive within `read_timeout` from its first byte
//   (slowloris clients get 408 and are closed); an idle keep-alive connection is closed after
//   `idle_timeout`; a reply that the client does not read within `write_timeout` closes it.
// - `threads` worker threads run the io_context; the handler runs on them (it may block briefly,
//   e.g. an fsync at bind). Requests whose target `offload` selects (those that wait on another
//   server, such as a bind waiting on the API server) run on `offload_threads` threads of their
//   own instead, so the workers keep reading and answering other requests meanwhile; at most
//   `offload_threads` such requests run at once and as many more wait for a thread, and one over
//   that is answered 429 with Retry-After: 1 at once (back-pressure, counted). No other threads
//   are created.
// - Shutdown(): stops accepting, lets in-flight requests finish and be written (up to `grace`),
//   then closes every connection. Idle keep-alive connections are closed at once.
// - TLS (optional): certificate chain and private key files (PEM). The files are re-read when
//   their modification time changes (checked every `tls_reload_interval`); a bad new pair is
//   logged and the old one kept. A server that cannot load them at start refuses to start.
// - The handler never sees a half-read request; exceptions thrown by it become a 500 with a
//   JSON body {"Error": "..."} and the server keeps serving.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "toposched/common/status.h"

namespace toposched::server {

struct HttpRequest {
  std::string_view method;        // "POST", "GET", ...
  std::string_view target;        // path and query as sent ("/scheduler/filter?x=1")
  std::string_view content_type;  // may be empty
  std::string_view body;          // valid until the handler returns
  std::string_view remote;        // "127.0.0.1:53122", for logs
  // TLS with TlsFiles::client_ca_file: the client presented a certificate that chains to that
  // CA (verified in the handshake). False on plain HTTP and for clients without a certificate.
  bool client_verified = false;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Extra header, e.g. "Allow: POST" with 405 (name, value); empty name = none.
  std::string extra_header_name, extra_header_value;
};

// Called once per request, concurrently from the worker threads.
using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
// The body limit for a request target (path with query); called after the header is read.
using BodyLimit = std::function<std::size_t(std::string_view target)>;

struct TlsFiles {
  std::string cert_file;  // PEM certificate chain
  std::string key_file;   // PEM private key
  // PEM CA bundle for client certificates (mutual TLS), optional. A client that presents a
  // certificate must chain to it (else the handshake fails); one that presents none still
  // connects (kubelet probes, Prometheus), with HttpRequest::client_verified false, and the
  // handler decides what it may do. Re-read with the others.
  std::string client_ca_file;
};

struct ServerOptions {
  std::string address = "0.0.0.0";
  std::uint16_t port = 8888;  // 0 = any free port (tests); port() tells which
  int threads = 2;
  std::size_t max_header_bytes = 64u << 10;
  std::size_t max_body_bytes = 16u << 20;  // default when body_limit is not set
  BodyLimit body_limit;                    // optional per-target limit
  std::size_t max_connections = 4096;
  std::chrono::milliseconds read_timeout{10'000};
  std::chrono::milliseconds idle_timeout{90'000};
  std::chrono::milliseconds write_timeout{10'000};
  // Targets (path with query) whose handler runs on the offload threads; unset or
  // offload_threads 0: every handler runs on the workers.
  std::function<bool(std::string_view target)> offload;
  int offload_threads = 0;
  bool tls_enabled = false;
  TlsFiles tls;
  std::chrono::milliseconds tls_reload_interval{10'000};
};

struct ServerCounters {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_rejected = 0;  // over max_connections
  std::uint64_t requests = 0;
  std::uint64_t bad_requests = 0;        // 400 malformed HTTP
  std::uint64_t body_too_large = 0;      // 413
  std::uint64_t timeouts = 0;            // 408 or idle/write timeouts that closed a connection
  std::uint64_t handler_exceptions = 0;  // 500
  std::uint64_t offloaded = 0;           // requests handled on the offload threads
  std::uint64_t offload_rejected = 0;    // 429: every offload thread busy and as many waiting
  std::uint64_t tls_reloads = 0;         // successful certificate reloads
  std::uint64_t tls_reload_failures = 0;
  std::uint64_t open_connections = 0;  // now
};

class HttpServer {
 public:
  // Binds and listens, then starts the worker threads. Errors: bad address, port in use,
  // unreadable or mismatched TLS files.
  static Result<std::unique_ptr<HttpServer>> Start(ServerOptions options, Handler handler);
  ~HttpServer();  // Shutdown(grace 0) + Wait() if still running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const;  // the bound port (useful with port 0)
  // Thread-safe, idempotent, returns at once; Wait() blocks until every worker has returned.
  void Shutdown(std::chrono::milliseconds grace);
  void Wait();
  ServerCounters counters() const;

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace toposched::server
