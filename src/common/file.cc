#include "toposched/common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

namespace toposched {

namespace {

std::string ErrnoText(int err) {
  return std::strerror(err);
}

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  ~FdCloser() { ::close(fd_); }

 private:
  int fd_;
};

// The limit, exactly, in the largest unit that divides it.
std::string FormatByteSize(std::size_t bytes) {
  constexpr std::size_t kKiB = 1024;
  constexpr std::size_t kMiB = kKiB * kKiB;
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  if (bytes >= kKiB && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + " KiB";
  return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
}

}  // namespace

Result<std::string> ReadFileBounded(const std::string& path, std::size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused as not regular).
  // It has no effect on reading a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Error("cannot open: " + ErrnoText(errno));
  const FdCloser closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error("cannot stat: " + ErrnoText(errno));
  if (S_ISDIR(st.st_mode)) return Error("is a directory");
  if (!S_ISREG(st.st_mode)) return Error("not a regular file");
  const auto too_large = [&] { return Error("larger than " + FormatByteSize(max_bytes)); };
  const auto size = static_cast<std::uint64_t>(std::max<off_t>(st.st_size, 0));
  if (size > max_bytes) return too_large();

  // The size is a hint, not a bound: the file may grow while it is read, and some regular files
  // (/proc) report 0. Reading one byte past the limit is how a larger file is seen.
  const std::size_t cap = max_bytes < std::numeric_limits<std::size_t>::max() ? max_bytes + 1 : max_bytes;
  std::string text(std::min<std::uint64_t>(size + 1, cap), '\0');
  std::size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if (got == cap) break;
      text.resize(std::min(cap, std::max(got * 2, got + 4096)));
    }
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error("cannot read: " + ErrnoText(errno));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > max_bytes) return too_large();
  text.resize(got);
  return text;
}

}  // namespace toposched
