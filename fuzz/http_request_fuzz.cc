// The extender's HTTP/1.1 framing: the bytes a client sends on one connection, split into reads
// of a size the input chooses, parsed as the server's sessions parse them (Beast's
// request_parser, configured, limited and classified by src/server/http_framing.h, the functions
// http_session.cc calls), request after request while the connection stays open, as pipelining
// allows. The body limit is the extender's per-target rule at a smaller scale. Invariants: a
// request that reads has a body within its target's limit; an error maps to one reply or a close.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "fuzz_check.h"
#include "http_framing.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace internal = toposched::server::internal;

constexpr std::size_t kMaxHeaderBytes = 4096;
constexpr std::size_t kMaxRequestsPerInput = 16;

// The extender's rule (ExtenderService::BodyLimit), scaled down: a large limit for Volcano's
// session snapshot, a small one for everything else.
std::size_t BodyLimitFor(std::string_view target) {
  return target.starts_with("/volcano/onSessionOpen") ? 8192 : 1024;
}

// A SyncReadStream over the input that hands out at most `chunk` bytes per read, then EOF, like
// a client whose bytes arrive in pieces and who then closes.
class ByteStream {
 public:
  using executor_type = asio::any_io_executor;
  ByteStream(std::string_view bytes, std::size_t chunk) : bytes_(bytes), chunk_(chunk) {}

  template <class MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers, boost::system::error_code& ec) {
    if (bytes_.empty()) {
      ec = asio::error::eof;
      return 0;
    }
    ec = {};
    const std::size_t n =
        asio::buffer_copy(buffers, asio::buffer(bytes_.data(), std::min(chunk_, bytes_.size())));
    bytes_.remove_prefix(n);
    return n;
  }
  template <class MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers) {
    boost::system::error_code ec;
    const std::size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  std::string_view bytes_;
  std::size_t chunk_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte picks the read size (1..256 bytes, or the session's 4096-byte first read).
  const std::size_t chunk = data[0] == 0xff ? 4096 : std::size_t{data[0]} + 1;
  ByteStream stream(toposched::fuzz::AsText(data + 1, size - 1), chunk);
  beast::flat_buffer buffer;
  for (std::size_t n = 0; n < kMaxRequestsPerInput; ++n) {
    internal::RequestParser parser;
    internal::ConfigureRequestParser(parser, kMaxHeaderBytes);
    boost::system::error_code ec;
    http::read_header(stream, buffer, parser, ec);
    if (ec) {
      (void)internal::ClassifyReadError(ec, /*timed_out=*/false);
      return 0;
    }
    const auto& request = parser.get();
    const std::string_view target(request.target().data(), request.target().size());
    const std::size_t limit = BodyLimitFor(target);
    if (!internal::ApplyBodyLimit(parser, limit)) return 0;  // 413, connection closed
    if (!parser.is_done()) {
      http::read(stream, buffer, parser, ec);
      if (ec) {
        const internal::ReadFailure failure = internal::ClassifyReadError(ec, /*timed_out=*/false);
        FUZZ_CHECK(failure != internal::ReadFailure::kTimeout);
        return 0;
      }
    }
    FUZZ_CHECK(parser.is_done());
    FUZZ_CHECK(request.body().size() <= limit);
    toposched::fuzz::Touch(target);
    toposched::fuzz::Touch(std::string_view(request.method_string().data(), request.method_string().size()));
    const auto content_type = request[http::field::content_type];
    toposched::fuzz::Touch(std::string_view(content_type.data(), content_type.size()));
    toposched::fuzz::Touch(request.body());
    if (!parser.keep_alive()) return 0;  // the reply says Connection: close
  }
  return 0;
}
