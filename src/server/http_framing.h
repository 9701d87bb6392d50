#pragma once
// The server's HTTP/1.1 framing rules, shared by the connection code in http_session.cc and the
// fuzz target fuzz/http_request_fuzz.cc (internal header; Beast stays out of the public one).
// The session reads asynchronously and the fuzz target synchronously from a byte string, but
// both configure the parser, check the body limit and classify read errors through these
// functions, so the target exercises the decisions a real connection makes.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

#include <boost/asio/error.hpp>
#include <boost/beast/http.hpp>

namespace toposched::server::internal {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// A fresh parser for the next request on a connection. No body limit while the header is read
// (Beast checks Content-Length against it while parsing the header, before the target is
// known); ApplyBodyLimit sets the target's limit once the header is in.
inline void ConfigureRequestParser(RequestParser& parser, std::size_t max_header_bytes) {
  parser.header_limit(static_cast<std::uint32_t>(
      std::min<std::size_t>(max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
}

// After the header: false when the declared Content-Length is over `limit` (answer 413 without
// reading the body); otherwise sets `limit` on the parser, which enforces it on chunked bodies.
inline bool ApplyBodyLimit(RequestParser& parser, std::size_t limit) {
  const auto length = parser.content_length();
  if (length && *length > limit) return false;
  parser.body_limit(limit);
  return true;
}

// What a failed header or body read becomes.
enum class ReadFailure {
  kTimeout,         // 408: the read deadline cancelled the read
  kBodyTooLarge,    // 413
  kHeaderTooLarge,  // 431
  kMalformed,       // 400: the parser rejected the bytes
  kClosed,          // the client went away or a transport error: close without a reply
};

inline ReadFailure ClassifyReadError(const boost::system::error_code& ec, bool timed_out) {
  namespace http = boost::beast::http;
  if (ec == boost::asio::error::operation_aborted && timed_out) return ReadFailure::kTimeout;
  if (ec == http::error::body_limit || ec == http::error::buffer_overflow) return ReadFailure::kBodyTooLarge;
  if (ec == http::error::header_limit) return ReadFailure::kHeaderTooLarge;
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec.category() != http::make_error_code(http::error::bad_method).category()) {
    return ReadFailure::kClosed;
  }
  return ReadFailure::kMalformed;
}

}  // namespace toposched::server::internal
