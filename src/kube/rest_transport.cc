// The cpprestsdk transport. This is the only file that includes cpprestsdk's headers.
//
// How it uses cpprestsdk 2.10.18 (asio client), checked against its source and by the tests:
//  - client.request() completes when the status line and headers have arrived; the body keeps
//    arriving in the background into a producer_consumer_buffer, chunk by chunk (a chunked
//    body is handed over as each chunk arrives; a Content-Length or close-delimited body in
//    pieces of http_client_config::chunksize(), 64 KiB). getn(n) on that buffer waits for all
//    n bytes, so reads are bumpc() (completes as soon as one byte is there) followed by
//    getn(in_avail()) (completes at once): every chunk is seen when it lands.
//  - Every wait is ours: each pplx task gets a continuation that wakes the calling thread,
//    which waits on a condition variable until the task is done, the deadline passes or
//    `stop` is requested. On a deadline or a stop the request's cancellation_token_source is
//    cancelled, which makes cpprestsdk close the socket at once. cpprestsdk's own timer
//    (http_client_config::timeout, restarted on every read) is one value per client, so it is
//    only a far backstop here: Request::timeout is per request, and for Do it bounds the whole
//    exchange rather than the gap between reads.
//  - Every task is observed (a task whose exception nobody looks at raises SIGTRAP in pplx).

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

#include <cpprest/http_client.h>
#include <cpprest/uri_builder.h>

#include "rest_transport_internal.h"
#include "toposched/common/file.h"
#include "toposched/kube/transport.h"

namespace toposched::kube {

namespace {

using Clock = std::chrono::steady_clock;
using ByteBuffer = concurrency::streams::streambuf<std::uint8_t>;
using ByteTraits = ByteBuffer::traits;

constexpr std::chrono::hours kBackstopTimeout{24};  // cpprestsdk's own timer; see above
constexpr std::size_t kMaxTokenBytes = 64u << 10;
constexpr std::size_t kReadPieceBytes = 1u << 20;  // how much one read takes from the buffer

struct Limits {
  std::chrono::milliseconds token_reread_period{60'000};
  std::size_t max_response_bytes = kMaxResponseBytes;
  std::size_t max_line_bytes = kMaxWatchLineBytes;
};

// ---- TLS material, parsed once ----------------------------------------------------------

struct X509Free {
  void operator()(X509* certificate) const { X509_free(certificate); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using BioPtr = std::unique_ptr<BIO, BioFree>;

std::string OpenSslError() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "no details";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(std::min<std::size_t>(pem.size(), INT32_MAX))));
}

// Every certificate in a PEM bundle; an error when there is none or one is damaged.
Result<std::vector<X509Ptr>> ParseCertificates(const std::string& pem, const std::string& what) {
  ERR_clear_error();
  BioPtr bio = MemoryBio(pem);
  if (!bio) return Error(what + ": " + OpenSslError());
  std::vector<X509Ptr> certificates;
  while (X509* certificate = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certificates.emplace_back(certificate);
  }
  const unsigned long last = ERR_peek_last_error();
  if (certificates.empty() ||
      !(ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE)) {
    return Error(what + " is not a PEM certificate bundle (" + OpenSslError() + ")");
  }
  ERR_clear_error();
  return certificates;
}

Result<PkeyPtr> ParsePrivateKey(const std::string& pem) {
  ERR_clear_error();
  BioPtr bio = MemoryBio(pem);
  if (!bio) return Error("client key: " + OpenSslError());
  // No passphrase prompt: an encrypted key fails here instead of asking the terminal.
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr));
  if (!key) return Error("client key is not an unencrypted PEM private key (" + OpenSslError() + ")");
  return key;
}

struct TlsMaterial {
  std::vector<X509Ptr> authorities;   // empty: the system's roots
  std::vector<X509Ptr> client_chain;  // leaf first; empty: no client certificate
  PkeyPtr client_key;
};

Result<std::shared_ptr<const TlsMaterial>> LoadTlsMaterial(const ClientConfig& config) {
  auto material = std::make_shared<TlsMaterial>();
  if (!config.ca_pem.empty() && !config.insecure_skip_tls_verify) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto authorities, ParseCertificates(config.ca_pem, "CA data"));
    material->authorities = std::move(authorities);
  }
  if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
    return Error("a client certificate needs both the certificate and its key");
  }
  if (!config.client_cert_pem.empty()) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto chain, ParseCertificates(config.client_cert_pem, "client certificate"));
    TOPOSCHED_ASSIGN_OR_RETURN(auto key, ParsePrivateKey(config.client_key_pem));
    if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
      ERR_clear_error();
      return Error("the client key does not match the client certificate");
    }
    material->client_chain = std::move(chain);
    material->client_key = std::move(key);
  }
  return std::shared_ptr<const TlsMaterial>(std::move(material));
}

// Runs for every new TLS connection, on whichever thread opens it. Only takes references to
// the shared, immutable material.
void ConfigureTls(const TlsMaterial& material, boost::asio::ssl::context& context) {
  SSL_CTX* native = context.native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  if (!material.authorities.empty()) {
    // Only the configured CAs, as client-go does: replace the default store cpprestsdk loaded.
    X509_STORE* store = X509_STORE_new();
    for (const X509Ptr& authority : material.authorities) X509_STORE_add_cert(store, authority.get());
    SSL_CTX_set_cert_store(native, store);
  }
  if (material.client_key) {
    SSL_CTX_use_certificate(native, material.client_chain.front().get());
    for (std::size_t i = 1; i < material.client_chain.size(); ++i) {
      SSL_CTX_add1_chain_cert(native, material.client_chain[i].get());
    }
    SSL_CTX_use_PrivateKey(native, material.client_key.get());
  }
  ERR_clear_error();
}

// ---- waiting on pplx tasks --------------------------------------------------------------

// Shared with a continuation that may run after the caller has returned.
struct Signal {
  std::mutex mutex;
  std::condition_variable changed;
  bool done = false;
  bool stopped = false;
};

enum class Wait { kDone, kTimedOut, kStopped };

// A wait on a pplx task that the caller may give up (a stop, a deadline). Its continuation runs
// on pplx's thread pool whenever the task completes, possibly after the caller has returned.
// A caller that gives up makes the task complete by other means (Abandon, a cancellation) and
// then Drains: waits, bounded, until the continuation has run, so that nothing of this wait
// outlives the call. Undrained, a continuation still queued when the process exits is what
// LeakSanitizer reported under load (184 bytes: the continuation and its Signal).
template <typename T>
class Awaiting {
 public:
  explicit Awaiting(const pplx::task<T>& task) : signal_(std::make_shared<Signal>()) {
    task.then([signal = signal_](pplx::task<T> finished) {
      try {
        finished.wait();  // observes an exception; the caller sees it again through get()
      } catch (...) {
      }
      {
        std::lock_guard lock(signal->mutex);
        signal->done = true;
      }
      signal->changed.notify_all();
    });
  }

  Wait Until(Clock::time_point deadline, const std::stop_token& stop) {
    std::stop_callback on_stop(stop, [this] {
      {
        std::lock_guard lock(signal_->mutex);
        signal_->stopped = true;
      }
      signal_->changed.notify_all();
    });
    std::unique_lock lock(signal_->mutex);
    signal_->changed.wait_until(lock, deadline, [&] { return signal_->done || signal_->stopped; });
    if (signal_->stopped) return Wait::kStopped;
    return signal_->done ? Wait::kDone : Wait::kTimedOut;
  }

  // Returns once the continuation has run, or after `bound`.
  void Drain(std::chrono::milliseconds bound) {
    std::unique_lock lock(signal_->mutex);
    signal_->changed.wait_for(lock, bound, [&] { return signal_->done; });
  }

 private:
  std::shared_ptr<Signal> signal_;
};

// How long a caller that gave up waits for the task it completed to run its continuation: it
// takes microseconds, unless the machine is starved.
constexpr std::chrono::milliseconds kDrainBound{2000};

Clock::time_point DeadlineAfter(std::chrono::milliseconds timeout) {
  const auto now = Clock::now();
  if (timeout <= std::chrono::milliseconds::zero()) return now;
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now)) {
    return Clock::time_point::max();
  }
  return now + timeout;
}

// What an exception from cpprestsdk says. Its what() only: the error code it carries is often
// remapped or in the wrong category (a refused connection reads "No route to host", a failed
// name lookup "Operation not permitted"), so it would mislead more than help.
std::string CurrentExceptionText() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

// Every caller gives the body up when a read is stopped or times out. Closing the buffer's
// write side (with an exception, as cpprestsdk's client does when it fails a response)
// completes the read still pending in it now, so its continuation (Awaiting) is scheduled and
// can be drained. Left pending, that read and its continuation were only released when the
// client's socket handler next ran. The client's later writes into the closed buffer fail,
// which it already expects: the request is cancelled next.
void Abandon(ByteBuffer& body) noexcept {
  try {
    body.close(std::ios_base::out, std::make_exception_ptr(std::runtime_error("response abandoned"))).wait();
  } catch (...) {
  }
}

enum class Read { kData, kEnd, kTimedOut, kStopped, kFailed };

struct ReadOutcome {
  Read kind;
  std::string error;  // kFailed
};

// Appends to `out` what has arrived of the body: at least one byte, at most `max_bytes`.
ReadOutcome ReadSome(ByteBuffer& body, Clock::time_point deadline, const std::stop_token& stop,
                     std::string& out, std::size_t max_bytes) {
  try {
    pplx::task<ByteTraits::int_type> first = body.bumpc();
    Awaiting<ByteTraits::int_type> awaiting(first);
    switch (awaiting.Until(deadline, stop)) {
      case Wait::kTimedOut:
        Abandon(body);
        awaiting.Drain(kDrainBound);
        return {Read::kTimedOut, {}};
      case Wait::kStopped:
        Abandon(body);
        awaiting.Drain(kDrainBound);
        return {Read::kStopped, {}};
      case Wait::kDone:
        break;
    }
    const ByteTraits::int_type byte = first.get();
    if (byte == ByteTraits::eof()) return {Read::kEnd, {}};
    out.push_back(static_cast<char>(static_cast<unsigned char>(byte)));
    const std::size_t more = std::min(body.in_avail(), max_bytes > 0 ? max_bytes - 1 : 0);
    if (more > 0) {
      const std::size_t old_size = out.size();
      out.resize(old_size + more);
      // At most in_avail() bytes: the producer_consumer_buffer completes this inline, so get()
      // does not wait (and `out` is written before this function returns).
      const std::size_t got = body.getn(reinterpret_cast<std::uint8_t*>(out.data() + old_size), more).get();
      out.resize(old_size + std::min(got, more));
    }
    return {Read::kData, {}};
  } catch (...) {
    return {Read::kFailed, CurrentExceptionText()};
  }
}

// Retry-After in its delay-seconds form (RFC 9110 10.2.3: 1*DIGIT); an HTTP date or anything
// else is ignored, as client-go's retryAfterSeconds does. At most a day.
std::optional<std::chrono::seconds> RetryAfter(const web::http::http_headers& headers) {
  const auto it = headers.find("Retry-After");
  if (it == headers.end()) return std::nullopt;
  std::string_view text = it->second;
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (text.empty() || !std::all_of(text.begin(), text.end(), digit)) return std::nullopt;
  if (text.size() > 6) return std::chrono::hours(24);  // over 999,999 s: past the cap anyway
  std::int64_t seconds = 0;
  for (char c : text) seconds = seconds * 10 + (c - '0');
  return std::chrono::seconds(std::min<std::int64_t>(seconds, 24 * 3600));
}

// ---- the bearer token -------------------------------------------------------------------

// A header value must not carry CR, LF or other control characters (they would end the header
// and let the rest be read as more headers).
bool IsHeaderSafe(std::string_view value) {
  return std::none_of(value.begin(), value.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return (byte < 0x20 && byte != '\t') || byte == 0x7f;
  });
}

Result<std::string> ReadToken(const std::string& path) {
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::string token, ReadFileBounded(path, kMaxTokenBytes),
                                 "token file " + path);
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!token.empty() && space(static_cast<unsigned char>(token.back()))) token.pop_back();
  token.erase(token.begin(), std::find_if_not(token.begin(), token.end(), space));
  if (token.empty()) return Error("token file " + path + " is empty");
  if (!IsHeaderSafe(token)) return Error("token file " + path + " holds control characters");
  return token;
}

// The inline token, or the token file's contents re-read at most once per period (bound
// service-account tokens are rotated on disk; a failed re-read keeps the last good token).
class BearerToken {
 public:
  BearerToken(std::string token, std::string file, std::chrono::milliseconds period)
      : token_(std::move(token)), file_(std::move(file)), period_(period) {}

  Status Load() {
    if (file_.empty()) return Status::Ok();
    TOPOSCHED_ASSIGN_OR_RETURN(auto token, ReadToken(file_));
    token_ = std::move(token);
    read_at_ = Clock::now();
    return Status::Ok();
  }

  std::string Get() {
    std::lock_guard lock(mutex_);
    if (!file_.empty() && Clock::now() - read_at_ >= period_) {
      if (auto token = ReadToken(file_); token.ok()) token_ = std::move(*token);
      read_at_ = Clock::now();
    }
    return token_;
  }

 private:
  std::mutex mutex_;
  std::string token_;
  const std::string file_;
  const std::chrono::milliseconds period_;
  Clock::time_point read_at_{};
};

// ---- the transport ----------------------------------------------------------------------

std::string Describe(const Request& request) {
  return request.method + " " + request.path.substr(0, 200);
}

Error TransportError(const Request& request, const std::string& what) {
  return Error("transport: " + Describe(request) + ": " + what);
}

class RestTransport final : public Transport {
 public:
  RestTransport(const web::http::client::http_client& client, const ClientConfig& config,
                std::string host_header,
                Limits limits)
      : client_(client),  // a handle: copies share one client
        token_(config.token, config.token_file, limits.token_reread_period),
        user_agent_(config.user_agent),
        host_header_(std::move(host_header)),
        limits_(limits) {}

  Status LoadToken() { return token_.Load(); }

  Result<Response> Do(const Request& request) override {
    const Clock::time_point deadline = DeadlineAfter(request.timeout);
    pplx::cancellation_token_source cancel;
    TOPOSCHED_ASSIGN_OR_RETURN(auto response, Start(request, cancel, deadline, {}));
    if (!response) return TransportError(request, "stopped");  // unreachable: no stop token
    Response out{response->status_code(), {}};
    if (out.status == 429 || out.status >= 500) out.retry_after = RetryAfter(response->headers());
    ByteBuffer body = response->body().streambuf();
    TOPOSCHED_RETURN_IF_ERROR(ReadBody(
        request, body, cancel, [&] { return deadline; }, {}, out.body));
    return out;
  }

  Result<Response> Stream(const Request& request, const std::function<bool(std::string_view line)>& on_line,
                          std::stop_token stop) override {
    pplx::cancellation_token_source cancel;
    // Abandons the connection on every early way out, an exception from on_line included.
    struct CancelUnlessFinished {
      pplx::cancellation_token_source& cancel;
      bool finished = false;
      ~CancelUnlessFinished() {
        if (!finished) cancel.cancel();
      }
    } guard{cancel};
    const Response stopped{200, {}};

    TOPOSCHED_ASSIGN_OR_RETURN(auto response, Start(request, cancel, DeadlineAfter(request.timeout), stop));
    if (!response) return stopped;
    ByteBuffer body = response->body().streambuf();
    const auto idle_deadline = [&] { return DeadlineAfter(request.timeout); };
    if (response->status_code() != 200) {
      Response out{response->status_code(), {}};
      TOPOSCHED_RETURN_IF_ERROR(ReadBody(request, body, cancel, idle_deadline, stop, out.body));
      if (stop.stop_requested()) return stopped;
      guard.finished = true;
      return out;
    }

    std::string pending;      // bytes after the last complete line
    std::size_t scanned = 0;  // pending[0, scanned) holds no '\n'
    const auto deliver = [&](std::string_view line) {
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      return line.empty() || on_line(line);
    };
    while (true) {
      const ReadOutcome read = ReadSome(body, idle_deadline(), stop, pending, kReadPieceBytes);
      switch (read.kind) {
        case Read::kStopped:
          return stopped;
        case Read::kTimedOut:
          return TransportError(request, "no data for " + std::to_string(request.timeout.count()) + " ms");
        case Read::kFailed:
          return TransportError(request, read.error);
        case Read::kEnd:
          guard.finished = true;
          if (!stop.stop_requested() && !pending.empty()) deliver(pending);
          return stopped;
        case Read::kData:
          break;
      }
      std::size_t line_start = 0;
      for (std::size_t newline; (newline = pending.find('\n', scanned)) != std::string::npos;) {
        if (newline - line_start > limits_.max_line_bytes) return LineTooLong(request);
        if (stop.stop_requested()) return stopped;
        if (!deliver(std::string_view(pending).substr(line_start, newline - line_start))) return stopped;
        line_start = scanned = newline + 1;
      }
      pending.erase(0, line_start);
      scanned = pending.size();
      if (pending.size() > limits_.max_line_bytes) return LineTooLong(request);
    }
  }

 private:
  Error LineTooLong(const Request& request) const {
    return TransportError(request,
                          "a watch line is over " + std::to_string(limits_.max_line_bytes) + " bytes");
  }

  // Sends the request and waits for the status line and headers. nullopt: `stop` came first.
  Result<std::optional<web::http::http_response>> Start(const Request& request,
                                                        pplx::cancellation_token_source& cancel,
                                                        Clock::time_point deadline,
                                                        const std::stop_token& stop) {
    try {
      web::http::http_request message(request.method);
      message.set_request_uri(web::uri(request.path));
      auto& headers = message.headers();
      if (const std::string token = token_.Get(); !token.empty())
        headers.add("Authorization", "Bearer " + token);
      headers.add("User-Agent", user_agent_);
      headers.add("Accept", "application/json");
      if (!host_header_.empty()) headers.add("Host", host_header_);  // see ServerAddress
      if (!request.body.empty() || !request.content_type.empty()) {
        message.set_body(request.body,
                         request.content_type.empty() ? "application/json" : request.content_type);
      }
      pplx::task<web::http::http_response> sent = client_.request(message, cancel.get_token());
      Awaiting<web::http::http_response> awaiting(sent);
      switch (awaiting.Until(deadline, stop)) {
        case Wait::kStopped:
          cancel.cancel();
          awaiting.Drain(kDrainBound);
          return std::optional<web::http::http_response>();
        case Wait::kTimedOut:
          cancel.cancel();
          awaiting.Drain(kDrainBound);
          return TransportError(request,
                                "no response within " + std::to_string(request.timeout.count()) + " ms");
        case Wait::kDone:
          break;
      }
      return std::optional<web::http::http_response>(sent.get());
    } catch (...) {
      cancel.cancel();
      return TransportError(request, CurrentExceptionText());
    }
  }

  // Reads the rest of the body into `out`, up to max_response_bytes. Returns Ok with what was
  // read so far when `stop` is requested.
  template <typename DeadlineFn>
  Status ReadBody(const Request& request, ByteBuffer& body, pplx::cancellation_token_source& cancel,
                  const DeadlineFn& deadline, const std::stop_token& stop, std::string& out) {
    while (true) {
      const std::size_t room = limits_.max_response_bytes - std::min(out.size(), limits_.max_response_bytes);
      const ReadOutcome read = ReadSome(body, deadline(), stop, out, std::min(room + 1, kReadPieceBytes));
      switch (read.kind) {
        case Read::kEnd:
          return Status::Ok();
        case Read::kData:
          if (out.size() > limits_.max_response_bytes) {
            cancel.cancel();
            return TransportError(request, "the response body is over " +
                                               std::to_string(limits_.max_response_bytes) + " bytes");
          }
          continue;
        case Read::kStopped:
          cancel.cancel();
          return Status::Ok();
        case Read::kTimedOut:
          cancel.cancel();
          return TransportError(request,
                                "timed out after " + std::to_string(request.timeout.count()) + " ms");
        case Read::kFailed:
          cancel.cancel();
          return TransportError(request, read.error);
      }
    }
  }

  web::http::client::http_client client_;
  BearerToken token_;
  const std::string user_agent_;
  const std::string host_header_;
  const Limits limits_;
};

struct Address {
  web::uri base;
  std::string host_header;  // empty: cpprestsdk writes the URL's host and port
};

// The URL cpprestsdk connects to and the Host header to send, working around two things in
// its asio client: (1) for https it verifies the certificate against, and sends as SNI, the
// Host header when there is one, else the URL's host; so a tls-server-name becomes the Host
// header (the API server does not route on Host). (2) It hands an IPv6 literal host to the
// resolver with its brackets, which fails; so the URL gets the bare address and the Host
// header names it: bracketed with the port for http, bare for https (what the certificate's
// IP SAN is checked against; Go's server accepts that Host).
Result<Address> ServerAddress(const ClientConfig& config) {
  const auto bad = [&](const std::string& why) {
    return Error("server URL \"" + config.server + "\" " + why);
  };
  const web::uri server(config.server);
  if (server.scheme() != "http" && server.scheme() != "https") return bad("is not http:// or https://");
  const std::string& host = server.host();
  if (host.empty()) return bad("has no host");
  if (server.port() < 0 || server.port() > 65535) return bad("has a bad port");
  if (!server.query().empty() || !server.fragment().empty()) return bad("has a query or a fragment");
  Address address{server, config.tls_server_name};
  if (host.front() == '[' || host.find(':') != std::string::npos) {
    boost::system::error_code ec;
    const std::string literal = host.size() >= 2 && host.front() == '[' && host.back() == ']'
                                    ? host.substr(1, host.size() - 2)
                                    : std::string();
    boost::asio::ip::make_address_v6(literal, ec);
    if (literal.empty() || ec) return bad("has a malformed IPv6 address");
    address.base = web::uri_builder(server).set_host(literal).to_uri();
    if (address.host_header.empty()) {
      address.host_header = server.scheme() == "https"
                                ? literal
                                : host + (server.port() > 0 ? ":" + std::to_string(server.port()) : "");
    }
  }
  return address;
}

Result<std::unique_ptr<Transport>> Make(const ClientConfig& config, Limits limits) {
  // OpenSSL before cpprestsdk's thread pool (made with the first http_client): at exit, atexit
  // handlers run in reverse, so the pool's threads are joined while OpenSSL can still free their
  // per-thread state, rather than after OPENSSL_cleanup has forgotten it (a leak at exit).
  OPENSSL_init_ssl(0, nullptr);
  TOPOSCHED_ASSIGN_OR_RETURN(auto material, LoadTlsMaterial(config));
  try {
    TOPOSCHED_ASSIGN_OR_RETURN(auto address, ServerAddress(config));
    if (!IsHeaderSafe(config.token)) return Error("the token holds control characters");
    if (!IsHeaderSafe(config.user_agent) || !IsHeaderSafe(config.tls_server_name)) {
      return Error("the user agent or the TLS server name holds control characters");
    }
    web::http::client::http_client_config options;
    options.set_timeout(kBackstopTimeout);
    options.set_validate_certificates(!config.insecure_skip_tls_verify);
    options.set_max_redirects(0);  // a 3xx is the caller's to see, as the API server means it
    options.set_ssl_context_callback(
        [material](boost::asio::ssl::context& context) { ConfigureTls(*material, context); });
    auto transport = std::make_unique<RestTransport>(web::http::client::http_client(address.base, options),
                                                     config, address.host_header, limits);
    if (auto status = transport->LoadToken(); !status.ok()) return status.error();
    return std::unique_ptr<Transport>(std::move(transport));
  } catch (const std::exception& e) {
    return Error("server URL \"" + config.server + "\": " + e.what());
  }
}

}  // namespace

Result<std::unique_ptr<Transport>> MakeRestTransport(const ClientConfig& config) {
  return Make(config, Limits{});
}

namespace internal {
Result<std::unique_ptr<Transport>> MakeRestTransportForTesting(const ClientConfig& config,
                                                               std::chrono::milliseconds token_reread_period,
                                                               std::size_t max_response_bytes,
                                                               std::size_t max_line_bytes) {
  return Make(config, Limits{token_reread_period, max_response_bytes, max_line_bytes});
}
}  // namespace internal

}  // namespace toposched::kube
