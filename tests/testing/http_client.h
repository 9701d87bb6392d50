#pragma once
// A small blocking HTTP/1.1 client over POSIX sockets for tests and the load benchmark: one
// keep-alive connection, Content-Length bodies only (what our server sends).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace toposched::testing {

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string body;
  std::string headers;  // raw header block, for tests that look at one
};

class HttpClient {
 public:
  explicit HttpClient(std::uint16_t port, std::string host = "127.0.0.1")
      : port_(port), host_(std::move(host)) {}
  ~HttpClient() { Close(); }
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    buffer_.clear();
  }

  // Sends one request (reconnecting if needed) and reads the reply; nullopt on a transport
  // failure (connection refused or closed without a reply).
  std::optional<HttpReply> Request(std::string_view method, std::string_view target,
                                   std::string_view body = {},
                                   std::string_view content_type = "application/json") {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (fd_ < 0 && !Connect()) return std::nullopt;
      std::string req;
      req.reserve(body.size() + 256);
      req.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: localhost\r\n");
      if (!content_type.empty()) req.append("Content-Type: ").append(content_type).append("\r\n");
      req.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n\r\n").append(body);
      if (!SendAll(req)) {
        Close();
        continue;  // a keep-alive connection the server closed: retry once on a new one
      }
      std::optional<HttpReply> reply = ReadReply();
      if (reply) return reply;
      Close();
      if (attempt == 0 && sent_on_reused_) continue;
      return std::nullopt;
    }
    return std::nullopt;
  }

  std::optional<HttpReply> Post(std::string_view target, std::string_view body) {
    return Request("POST", target, body);
  }
  std::optional<HttpReply> Get(std::string_view target) { return Request("GET", target, {}, {}); }

 private:
  bool Connect() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return false;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port_);
    ::inet_pton(AF_INET, host_.c_str(), &addr.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      Close();
      return false;
    }
    sent_on_reused_ = false;
    return true;
  }

  bool SendAll(std::string_view data) {
    const bool reused = requests_on_fd_ > 0;
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    sent_on_reused_ = reused;
    ++requests_on_fd_;
    return true;
  }

  bool Fill() {
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  std::optional<HttpReply> ReadReply() {
    std::size_t header_end;
    while ((header_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return std::nullopt;
    }
    HttpReply reply;
    reply.headers = buffer_.substr(0, header_end);
    if (reply.headers.size() < 12 || !reply.headers.starts_with("HTTP/1.")) return std::nullopt;
    reply.status = std::atoi(reply.headers.c_str() + 9);
    std::size_t length = 0;
    bool close_after = false;
    std::size_t pos = reply.headers.find("\r\n");
    while (pos != std::string::npos && pos < reply.headers.size()) {
      const std::size_t next = reply.headers.find("\r\n", pos + 2);
      std::string line =
          reply.headers.substr(pos + 2, (next == std::string::npos ? reply.headers.size() : next) - pos - 2);
      std::string lower = line;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower.starts_with("content-length:")) length = std::strtoull(line.c_str() + 15, nullptr, 10);
      if (lower.starts_with("content-type:")) {
        reply.content_type = line.substr(13);
        while (!reply.content_type.empty() && reply.content_type.front() == ' ')
          reply.content_type.erase(0, 1);
      }
      if (lower.starts_with("connection:") && lower.find("close") != std::string::npos) close_after = true;
      pos = next;
    }
    const std::size_t body_start = header_end + 4;
    while (buffer_.size() < body_start + length) {
      if (!Fill()) return std::nullopt;
    }
    reply.body = buffer_.substr(body_start, length);
    buffer_.erase(0, body_start + length);
    if (close_after) Close();
    return reply;
  }

  std::uint16_t port_;
  std::string host_;
  int fd_ = -1;
  std::string buffer_;
  int requests_on_fd_ = 0;
  bool sent_on_reused_ = false;
};

}  // namespace toposched::testing
