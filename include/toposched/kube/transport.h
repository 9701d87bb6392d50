#pragma once
// The Kubernetes API transport: plain HTTP requests and watch streams to one API server, and
// where its address and credentials come from (in-cluster service account or a kubeconfig).
// The production implementation uses cpprestsdk (src/kube/rest_transport.cc, the only file that
// includes its headers); tests run it against the fake API server on port 0.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include "toposched/common/status.h"

namespace toposched::kube {

struct ClientConfig {
  std::string server;      // "https://10.96.0.1:443"; "http://127.0.0.1:PORT" for tests
  std::string token;       // bearer token, when given inline
  std::string token_file;  // bearer token file, re-read at most once a minute (bound service-
                           // account tokens rotate); takes precedence over `token` when set
  std::string ca_pem;      // PEM bundle that verifies the server; empty = the system's roots
  std::string client_cert_pem, client_key_pem;  // client-certificate authentication
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;             // SNI / name to verify when it differs from the URL's host
  std::string namespace_name = "default";  // the service account's or the context's namespace
  std::string user_agent = "toposched/0.1";
};

inline constexpr std::string_view kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

// In-cluster configuration: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (IPv6
// hosts bracketed), token file, ca.crt and namespace from `sa_dir`. `getenv` is for tests (null:
// std::getenv). Errors say which variable or file is missing.
Result<ClientConfig> InClusterConfig(const std::function<const char*(const char*)>& getenv = nullptr,
                                     const std::string& sa_dir = std::string(kServiceAccountDir));

// A kubeconfig file: `context` (empty: current-context), its cluster's server,
// certificate-authority / certificate-authority-data, insecure-skip-tls-verify, tls-server-name;
// its user's token / tokenFile, client-certificate(-data) / client-key(-data); its namespace.
// Relative file paths are relative to the kubeconfig's folder. Users with exec or
// auth-provider plugins are refused with an error that says so (no plugin runs here).
Result<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

struct Request {
  std::string method = "GET";  // GET, POST, PUT, PATCH, DELETE
  std::string path;            // path and query, already escaped: "/api/v1/pods?limit=500"
  std::string body;
  std::string content_type;  // set when there is a body; PATCH: the patch type
  // Do: the whole exchange. Stream: the longest wait for the next byte of the body (a watch
  // with bookmarks sees traffic at least every minute or so).
  std::chrono::milliseconds timeout{30'000};
};

struct Response {
  int status = 0;
  std::string body;
  // The Retry-After header of a 429 or 5xx reply, in its delay-seconds form (an HTTP date is
  // ignored, as client-go ignores it; capped at a day); nullopt otherwise.
  std::optional<std::chrono::seconds> retry_after = std::nullopt;
};

inline constexpr std::size_t kMaxResponseBytes = 256u << 20;  // a LIST page is far smaller
inline constexpr std::size_t kMaxWatchLineBytes = 16u << 20;  // one watch event

class Transport {
 public:
  virtual ~Transport() = default;

  // One request. A transport failure (connect, TLS, timeout, a body over kMaxResponseBytes) is
  // an error; any HTTP status, 4xx and 5xx included, is a Response.
  virtual Result<Response> Do(const Request& request) = 0;

  // A streaming GET (a watch). When the status is 200, calls `on_line` with each complete line
  // of the body (without its '\n'; empty lines skipped) as soon as it has arrived, and returns
  // {200, ""} when the server ends the body, when `on_line` returns false, or when `stop` is
  // requested (the connection is abandoned promptly). Errors: the connection breaks mid-body,
  // no byte arrives within request.timeout, a line over kMaxWatchLineBytes. Any other status
  // returns that Response with its whole body and never calls `on_line`.
  virtual Result<Response> Stream(const Request& request,
                                  const std::function<bool(std::string_view line)>& on_line,
                                  std::stop_token stop) = 0;
};

// The cpprestsdk transport for `config`. Errors: bad server URL, unreadable PEM data.
Result<std::unique_ptr<Transport>> MakeRestTransport(const ClientConfig& config);

}  // namespace toposched::kube
