// The server's TLS files: loading the certificate chain, key and optional client CA into an SSL
// context with the server's protocol floor and options, and stamping the files (device, inode,
// size, mtime) so that ServerCore's reload timer can tell when a secret volume has been rewritten
// or swapped and a new context is due.

#include "server_core.h"

#include <sys/stat.h>

#include <exception>
#include <memory>
#include <string>

#include <openssl/ssl.h>
#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

namespace toposched::server::internal {
namespace {

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

}  // namespace

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

}  // namespace toposched::server::internal
