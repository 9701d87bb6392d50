// The hwloc XML import guard: ParseHwlocXml refuses the files known to crash Debian's hwloc 2.9
// by shape, then has a worker process run the import (ImportHwlocXml, in hwloc_discovery.cc), so
// that a crash inside hwloc costs that process and an error, never the caller. No hwloc here: the
// worker speaks length-framed bytes over a socket pair and sends the NodeTopology back as JSON.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "hwloc_import.h"
#include "toposched/agent/discovery.h"
#include "toposched/topology/json_codec.h"

namespace toposched {
namespace {

using agent_internal::ImportHwlocXml;

// Inputs that crash hwloc 2.9's XML import (Debian bookworm's libhwloc) instead of failing it,
// found by fuzz/hwloc_xml_fuzz.cc and fixed upstream after that release; refused here first:
//   - a <topology ...> tag without its closing '>' (the nolibxml importer dereferences
//     strchr(buffer, '>') + 1; open-mpi/hwloc#787);
//   - an <object> with a cpuset or nodeset but no complete_cpuset or complete_nodeset (the
//     sibling reorder compares the missing bitmap; open-mpi/hwloc#783). hwloc's exporters, v1 and
//     v2, write each pair together;
//   - a bitmap attribute (cpuset, nodeset and their complete_/allowed_/online_ forms) that
//     starts with ',' and goes on (",0x1": hwloc_bitmap_sscanf's assert aborts the process;
//     hwloc never writes a leading comma).
Status CheckKnownHwlocImportCrashes(std::string_view xml) {
  if (const std::size_t top = xml.find("<topology");
      top != std::string_view::npos && xml.find('>', top) == std::string_view::npos) {
    return Error("hwloc XML: the <topology> tag is not closed (truncated file?)");
  }
  for (std::size_t at = xml.find("<object"); at != std::string_view::npos; at = xml.find("<object", at + 1)) {
    bool cpuset = false, complete_cpuset = false, nodeset = false, complete_nodeset = false;
    std::size_t i = at + 7;
    // The attributes as hwloc's own (nolibxml) importer reads them, in order: blanks, a name of
    // [a-z_], '=', '"', the value, '"'; it stops at the first attribute not of that form and
    // ignores the rest ('complete_cpuset=5"0x1"' leaves the object without its complete_cpuset).
    while (true) {
      while (i < xml.size() && (xml[i] == ' ' || xml[i] == '\t' || xml[i] == '\n')) ++i;
      const std::size_t begin = i;
      while (i < xml.size() && ((xml[i] >= 'a' && xml[i] <= 'z') || xml[i] == '_')) ++i;
      if (i == begin || i + 1 >= xml.size() || xml[i] != '=' || xml[i + 1] != '"') break;
      const std::string_view name = xml.substr(begin, i - begin);
      const std::size_t close = xml.find('"', i + 2);
      if (close == std::string_view::npos) {
        return Error("hwloc XML: an <object> attribute value is not closed (truncated file?)");
      }
      const std::string_view value = xml.substr(i + 2, close - i - 2);
      if ((name.ends_with("cpuset") || name.ends_with("nodeset")) && value.size() > 1 &&
          value.front() == ',') {
        return Error("hwloc XML: the " + std::string(name) + " \"" + std::string(value.substr(0, 40)) +
                     "\" starts with a comma (not an hwloc bitmap; this hwloc aborts on it)");
      }
      cpuset |= name == "cpuset";
      complete_cpuset |= name == "complete_cpuset";
      nodeset |= name == "nodeset";
      complete_nodeset |= name == "complete_nodeset";
      i = close + 1;
    }
    if (xml.find('>', i) == std::string_view::npos) {
      return Error("hwloc XML: an <object> tag is not closed (truncated file?)");
    }
    if ((cpuset && !complete_cpuset) || (nodeset && !complete_nodeset)) {
      return Error(std::string("hwloc XML: an <object> has a ") +
                   (cpuset && !complete_cpuset ? "cpuset" : "nodeset") + " but no " +
                   (cpuset && !complete_cpuset ? "complete_cpuset" : "complete_nodeset") +
                   " (hwloc's exporters write both; this hwloc crashes on such an object)");
    }
  }
  return Status::Ok();
}

}  // namespace

// hwloc's XML importer crashes on some malformed files (Debian's hwloc 2.9: open-mpi/hwloc #783
// and #787, which CheckKnownHwlocImportCrashes refuses by shape, and others the fuzz target keeps
// finding that lstopo crashes on too). A file must cost an error, never the caller: the import
// runs in a worker process, forked on first use and kept for the next imports (a fork per file
// is dear: the kernel copies the process's page tables each time; docs/benchmarks.md,
// "Fuzzing"). The parent sends the file's length (8 bytes) and bytes over a socket pair; the
// worker answers with a length and "1", the host name, a newline, the NodeTopology's JSON, or
// "0" and the error. A worker killed by a signal is a malformed file: the error names the signal
// and the next import forks a fresh worker. A worker retires after kImportsPerWorker files, so
// whatever an accepted but odd file left in hwloc's state does not outlive many more. The parent
// decodes the JSON with the same codec every reader of the object uses.
constexpr std::chrono::seconds kHwlocImportTimeout{60};  // a 64 MiB export imports in about a second
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
// The fuzz target forks its worker before libFuzzer starts its threads (LLVMFuzzerInitialize)
// and keeps it: a fork of a process with threads can leave the child blocked on a lock another
// thread held (clang 14's ASan allocator has no fork handlers), which the campaigns met as
// 60 s stalls.
constexpr int kImportsPerWorker = 1 << 30;
#else
constexpr int kImportsPerWorker = 1000;
#endif

#if defined(__SANITIZE_ADDRESS__)
#define TOPOSCHED_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TOPOSCHED_ASAN 1
#endif
#endif
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
extern "C" void __sanitizer_set_death_callback(void (*callback)(void));
#endif

namespace {

// Whole-buffer I/O on a stream socket; false on EOF or error. send() with MSG_NOSIGNAL: a worker
// that died must not raise SIGPIPE in the caller.
bool SendAll(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Reads exactly `size` bytes; false on EOF or error, and, with a deadline, when it passes first
// (then *too_slow is set).
bool ReadAll(int fd, char* data, std::size_t size,
             std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt,
             bool* too_slow = nullptr) {
  while (size > 0) {
    if (deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      const int ready = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        if (too_slow != nullptr) *too_slow = true;
        return false;
      }
    }
    const ssize_t n = read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool SendFrame(int fd, std::string_view payload) {
  const std::uint64_t size = payload.size();
  return SendAll(fd, reinterpret_cast<const char*>(&size), sizeof size) &&
         SendAll(fd, payload.data(), payload.size());
}

#ifndef TOPOSCHED_ASAN
// What the worker may map beyond what the process had when it forked (RLIMIT_AS): a 64 MiB
// export imports in a few hundred MiB, and hwloc 2.9 asks for gigabytes on some malformed files
// (the fuzz target found reallocs of about 7 GB), which must cost an error, not the node's memory.
// Not under AddressSanitizer, whose shadow mappings an address-space limit would break.
constexpr std::uint64_t kWorkerAddressSpaceHeadroom = std::uint64_t{2} << 30;

// Caps the worker's address space at what it has now (VmSize, /proc/self/statm) plus the
// headroom; a malloc past it fails, and hwloc then returns an error or the worker dies of it.
void LimitAddressSpace() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return;
  unsigned long long pages = 0;
  const bool read = std::fscanf(f, "%llu", &pages) == 1;
  std::fclose(f);
  const long page = sysconf(_SC_PAGESIZE);
  if (!read || page <= 0) return;
  const std::uint64_t limit = pages * static_cast<std::uint64_t>(page) + kWorkerAddressSpaceHeadroom;
  const rlimit r{limit, limit};
  setrlimit(RLIMIT_AS, &r);
}
#endif

// The worker's loop: one framed request, one framed answer, until the parent closes its end.
[[noreturn]] void ServeImports(int fd) {
  // A crash here is the file's, reported by the parent: no handler of the caller's (a
  // sanitizer's, a fuzzer's) runs in the worker.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, SIG_DFL);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  // libFuzzer's death callback would save, as the finding of a sanitizer report in here, the
  // unit this copy of the fuzzer process holds: the one current at the fork, not the file that
  // killed the worker. Without it the worker just exits (status 1); the parent, which holds the
  // right unit, stops the run (ImportWorker::Import).
  __sanitizer_set_death_callback(nullptr);
#endif
#ifndef TOPOSCHED_ASAN
  LimitAddressSpace();
#endif
  for (;;) {
    std::uint64_t size = 0;
    if (!ReadAll(fd, reinterpret_cast<char*>(&size), sizeof size) || size > kMaxTopologyFileBytes) _exit(0);
    std::string content(size, '\0');
    if (!ReadAll(fd, content.data(), content.size())) _exit(0);
    std::string out;
    if (Result<NodeTopology> t = ImportHwlocXml(content); t.ok()) {
      NodeTopology named = std::move(t).value();
      const std::string host = named.node_name;
      if (named.node_name.empty())
        named.node_name = "node";  // the codec needs a name; the host's is sent apart
      out = "1" + host + "\n" + EncodeTopologyJson(named);
    } else {
      out = "0" + t.error().message();
    }
    if (!SendFrame(fd, out)) _exit(3);
  }
}

class ImportWorker {
 public:
  // The worker's answer to `content`, or why there is none.
  Result<std::string> Import(std::string_view content) {
    std::lock_guard lock(mu_);
    if (pid_ < 0) {
      TOPOSCHED_RETURN_IF_ERROR(Start());
    }
    const auto deadline = std::chrono::steady_clock::now() + kHwlocImportTimeout;
    std::string answer;
    bool too_slow = false, too_large = false;
    bool ok = SendFrame(fd_, content);
    std::uint64_t size = 0;
    if (ok) ok = ReadAll(fd_, reinterpret_cast<char*>(&size), sizeof size, deadline, &too_slow);
    if (ok && size > 4 * kMaxTopologyFileBytes) ok = false, too_large = true;
    if (ok) {
      answer.resize(size);
      ok = ReadAll(fd_, answer.data(), answer.size(), deadline, &too_slow);
    }
    if (ok) {
      if (++served_ >= kImportsPerWorker) Stop(/*kill_it=*/false);
      return answer;
    }
    const int status = Stop(/*kill_it=*/true);
    if (too_large) return Error("the hwloc import of this XML produced more than 256 MiB (not a topology)");
    if (too_slow) {
      return Error("hwloc did not finish importing this XML in " +
                   std::to_string(kHwlocImportTimeout.count()) +
                   " s (stopped): the file is malformed or far too large");
    }
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    // A sanitizer report in the worker (printed above: a bad access or an allocation past
    // ASan's limits inside hwloc) is a finding of this input: stop so that libFuzzer saves it.
    if (WIFEXITED(status) && WEXITSTATUS(status) == 1) {
      std::fprintf(stderr, "hwloc import worker: died of a sanitizer report (above) on this input\n");
      std::abort();
    }
#endif
    if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL) {
      return Error("hwloc crashed importing this XML (signal " + std::to_string(WTERMSIG(status)) + ", " +
                   strsignal(WTERMSIG(status)) +
                   "): the file is malformed; lstopo --if xml --input FILE shows "
                   "hwloc's own handling of it");
    }
    return Error("the hwloc import of this XML failed (exit status " +
                 std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
  }

 private:
  Status Start() {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      return Error(std::string("cannot create a socket pair for the hwloc import: ") + std::strerror(errno));
    }
    const pid_t pid = fork();
    if (pid < 0) {
      const int err = errno;
      close(fds[0]);
      close(fds[1]);
      return Error(std::string("cannot fork the hwloc import: ") + std::strerror(err));
    }
    if (pid == 0) {
      close(fds[0]);
      ServeImports(fds[1]);
    }
    close(fds[1]);
    pid_ = pid;
    fd_ = fds[0];
    served_ = 0;
    return Status::Ok();
  }

  // Closes the worker's socket (a live worker then exits), kills it when asked, reaps it and
  // returns its wait status.
  int Stop(bool kill_it) {
    close(fd_);
    fd_ = -1;
    if (kill_it) kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

  std::mutex mu_;
  pid_t pid_ = -1;
  int fd_ = -1;
  int served_ = 0;
};

}  // namespace

Result<NodeTopology> ParseHwlocXml(std::string_view content) {
  if (content.size() > kMaxTopologyFileBytes) return Error("hwloc XML larger than 64 MiB");
  TOPOSCHED_RETURN_IF_ERROR(CheckKnownHwlocImportCrashes(content));
  static ImportWorker* const worker = new ImportWorker();  // never destroyed: the worker exits on EOF
  Result<std::string> answer = worker->Import(content);
  if (!answer.ok()) return answer.error();
  const std::string& in = answer.value();
  if (in.empty()) return Error("the hwloc import of this XML returned no result");
  if (in[0] == '0') return Error(in.substr(1));
  const std::size_t newline = in.find('\n');
  if (in[0] != '1' || newline == std::string::npos)
    return Error("the hwloc import of this XML returned no result");
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(NodeTopology decoded,
                                 DecodeTopologyJson(std::string_view(in).substr(newline + 1)),
                                 "the hwloc import's result");
  decoded.node_name = in.substr(1, newline - 1);
  return decoded;
}

}  // namespace toposched
