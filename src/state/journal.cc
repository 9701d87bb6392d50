#include "journal.h"

#include "../common/json_errors.h"
#include "../common/json_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

namespace toposched::state::internal {
namespace {

using json_errors::Expected;
using nlohmann::json;

constexpr std::string_view kCrcKey = ",\"crc\":\"";
constexpr std::size_t kCrcHexDigits = 8;
// `,"crc":"` + 8 hex digits + `"}`.
constexpr std::size_t kCrcSuffixBytes = kCrcKey.size() + kCrcHexDigits + 2;
// root object > "shares" array > share object.
constexpr int kMaxLineDepth = 3;

constexpr std::array<std::uint32_t, 256> MakeCrcTable() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<std::uint32_t, 256> kCrcTable = MakeCrcTable();

std::string Hex8(std::uint32_t v) {
  char buf[kCrcHexDigits + 1];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return std::string(buf, kCrcHexDigits);
}

std::string ErrnoText(int err) {
  return std::strerror(err);
}

std::optional<LinkClass> ParseWorstClass(std::string_view s) {
  if (s == ToString(LinkClass::kNV)) return LinkClass::kNV;
  return ParseLinkClass(s);
}

Status CheckKeys(const json& o, std::initializer_list<std::string_view> known, const std::string& path) {
  for (const auto& [key, value] : o.items()) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || key == k;
    if (!ok) return Error(path + "unknown key " + json_errors::Quote(key));
  }
  return Status::Ok();
}

// A required string member (common/json_read.h), bounded, and non-empty when asked.
Result<std::string> ReadString(const json& o, const char* key, bool required_non_empty) {
  std::string s;
  TOPOSCHED_RETURN_IF_ERROR(json_read::ReadString(o, key, "", json_read::Presence::kRequired, &s));
  if (s.size() > kMaxJournalStringBytes) {
    return Error(std::string(key) + ": longer than " + std::to_string(kMaxJournalStringBytes) + " bytes");
  }
  if (required_non_empty && s.empty()) return Error(std::string(key) + ": must not be empty");
  return s;
}

// A required integer member in [min, max]; `path` names the object holding it ("" or "shares[2]").
Result<std::int64_t> ReadInt(const json& o, const char* key, std::int64_t min, std::int64_t max,
                             const std::string& path) {
  std::int64_t v = 0;
  TOPOSCHED_RETURN_IF_ERROR(json_read::ReadInt(o, key, path, json_read::Presence::kRequired, min, max, &v));
  return v;
}

Result<std::vector<int>> ReadIndices(const json& o, const char* key) {
  if (!o.contains(key)) return Error(std::string(key) + ": required field is missing");
  const json& v = o.at(key);
  if (!v.is_array()) return Expected(key, "an array of device indices", v);
  if (v.size() > static_cast<std::size_t>(kMaxJournalDevices)) {
    return Error(std::string(key) + ": more than " + std::to_string(kMaxJournalDevices) + " devices");
  }
  std::vector<int> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    const std::string path = std::string(key) + "[" + std::to_string(i) + "]";
    if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<std::uint64_t>() >= kMaxJournalDevices) ||
        e.get<std::int64_t>() < 0 || e.get<std::int64_t>() >= kMaxJournalDevices) {
      return Expected(path, "a device index from 0 to " + std::to_string(kMaxJournalDevices - 1), e);
    }
    out.push_back(static_cast<int>(e.get<std::int64_t>()));
  }
  return out;
}

Result<JournalEntry> DecodePayload(const json& doc) {
  if (!doc.is_object()) return Error("expected a JSON object");
  JournalEntry entry;
  std::string op;
  TOPOSCHED_ASSIGN_OR_RETURN(op, ReadString(doc, "op", true));
  PodAllocation& a = entry.allocation;
  if (op == "release") {
    entry.op = JournalOp::kRelease;
    if (Status s = CheckKeys(doc, {"op", "uid", "namespace", "name", "node", "crc"}, ""); !s.ok()) {
      return s.error();
    }
  } else if (op == "bind") {
    entry.op = JournalOp::kBind;
    if (Status s = CheckKeys(doc,
                             {"op", "uid", "namespace", "name", "node", "generation", "worstClass", "gpus",
                              "shares", "nics", "role", "pool", "kvIpc", "crc"},
                             "");
        !s.ok()) {
      return s.error();
    }
  } else {
    return Expected("op", "\"bind\" or \"release\"", doc.at("op"));
  }
  TOPOSCHED_ASSIGN_OR_RETURN(a.uid, ReadString(doc, "uid", true));
  TOPOSCHED_ASSIGN_OR_RETURN(a.pod_namespace, ReadString(doc, "namespace", false));
  TOPOSCHED_ASSIGN_OR_RETURN(a.pod_name, ReadString(doc, "name", false));
  TOPOSCHED_ASSIGN_OR_RETURN(a.node, ReadString(doc, "node", true));
  if (entry.op == JournalOp::kRelease) return entry;

  TOPOSCHED_ASSIGN_OR_RETURN(a.topology_generation,
                             ReadInt(doc, "generation", 0, std::numeric_limits<std::int64_t>::max(), ""));
  std::string worst;
  TOPOSCHED_ASSIGN_OR_RETURN(worst, ReadString(doc, "worstClass", true));
  const std::optional<LinkClass> cls = ParseWorstClass(worst);
  if (!cls)
    return Expected("worstClass", "a link class (X, NV, PIX, PXB, PHB, NODE, SYS)", doc.at("worstClass"));
  a.worst_class = *cls;
  // role and pool: optional (journals written before Prefill/Decode pools lack them).
  std::string role;
  if (doc.contains("role")) {
    TOPOSCHED_ASSIGN_OR_RETURN(role, ReadString(doc, "role", true));
  }
  if (!role.empty()) {
    const std::optional<PodRole> r = ParseLlmdRole(role);
    if (!r) return Expected("role", "\"prefill\", \"decode\" or \"both\"", doc.at("role"));
    a.role = *r;
  }
  if (doc.contains("pool")) {
    TOPOSCHED_ASSIGN_OR_RETURN(a.pool, ReadString(doc, "pool", true));
  }
  if (doc.contains("kvIpc")) {  // optional, written only when true
    if (!doc.at("kvIpc").is_boolean()) return Expected("kvIpc", "a boolean", doc.at("kvIpc"));
    a.kv_ipc = doc.at("kvIpc").get<bool>();
  }
  TOPOSCHED_ASSIGN_OR_RETURN(a.delta.exclusive_gpus, ReadIndices(doc, "gpus"));
  TOPOSCHED_ASSIGN_OR_RETURN(a.delta.nics, ReadIndices(doc, "nics"));

  if (!doc.contains("shares")) return Error("shares: required");
  const json& shares = doc.at("shares");
  if (!shares.is_array()) return Expected("shares", "an array", shares);
  if (shares.size() > static_cast<std::size_t>(kMaxJournalDevices)) {
    return Error("shares: more than " + std::to_string(kMaxJournalDevices) + " entries");
  }
  for (std::size_t i = 0; i < shares.size(); ++i) {
    const std::string path = "shares[" + std::to_string(i) + "]";
    const json& e = shares[i];
    if (!e.is_object()) return Expected("shares[" + std::to_string(i) + "]", "an object", e);
    TOPOSCHED_RETURN_IF_ERROR(CheckKeys(e, {"gpu", "shares", "memoryMiB", "cores"}, path + "."));
    std::int64_t gpu = 0;
    GpuShareUsage add;
    TOPOSCHED_ASSIGN_OR_RETURN(gpu, ReadInt(e, "gpu", 0, kMaxJournalDevices - 1, path));
    std::int64_t count = 0;
    TOPOSCHED_ASSIGN_OR_RETURN(count, ReadInt(e, "shares", 1, kMaxSharesPerEntry, path));
    add.shares = static_cast<int>(count);
    TOPOSCHED_ASSIGN_OR_RETURN(add.memory_mib, ReadInt(e, "memoryMiB", 0, kMaxShareMemoryMib, path));
    TOPOSCHED_ASSIGN_OR_RETURN(add.cores, ReadInt(e, "cores", 0, kFullGpuCores, path));
    a.delta.shares.emplace_back(static_cast<int>(gpu), add);
  }
  return entry;
}

Result<JournalEntry> Decode(std::string_view line, bool verify_checksum) {
  if (line.empty()) return Error("empty line");
  if (verify_checksum) {
    if (line.size() < kCrcSuffixBytes ||
        line.substr(line.size() - kCrcSuffixBytes, kCrcKey.size()) != kCrcKey ||
        line.substr(line.size() - 2) != "\"}") {
      return Error("the line does not end with its \"crc\" field");
    }
    const std::string_view stated = line.substr(line.size() - kCrcHexDigits - 2, kCrcHexDigits);
    std::string payload(line.substr(0, line.size() - kCrcSuffixBytes));
    payload += '}';
    const std::string actual = Hex8(Crc32(payload));
    if (stated != actual) {
      return Error("checksum mismatch (crc " + json_errors::Quote(stated) + ", the line's bytes give \"" +
                   actual + "\")");
    }
  }
  // Checked before parsing, so that a hostile line of "[[[[..." costs nothing.
  if (json_errors::ScanShape(line).max_depth > kMaxLineDepth) {
    return Error("not a journal entry: nested deeper than " + std::to_string(kMaxLineDepth) + " levels");
  }
  const json doc = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Error("not valid JSON");
  return DecodePayload(doc);
}

// Applies decoded lines in order and decides what a bad line means: fatal when anything follows
// it, a dropped torn append when it is the last.
class Replayer {
 public:
  Replayer(std::string path, std::size_t max_line_bytes)
      : path_(std::move(path)), max_line_(max_line_bytes) {}

  // A complete line (its '\n' was read), without the '\n'.
  Status Line(std::string_view line) {
    ++line_no_;
    TOPOSCHED_RETURN_IF_ERROR(FailIfBadBefore());
    if (line.size() > max_line_) return Bad(LongLine());
    auto entry = DecodeJournalLine(line);
    if (!entry.ok()) return Bad(entry.error().message());
    Apply(std::move(entry).value());
    return Status::Ok();
  }

  // A complete line too long to keep.
  Status LongCompleteLine() {
    ++line_no_;
    TOPOSCHED_RETURN_IF_ERROR(FailIfBadBefore());
    return Bad(LongLine());
  }

  // End of file. `tail_bytes`: bytes after the last '\n' (an append cut short).
  Result<JournalReplay> End(std::size_t tail_bytes) {
    if (tail_bytes > 0) {
      ++line_no_;
      TOPOSCHED_RETURN_IF_ERROR(FailIfBadBefore());
      out_.warnings.push_back(
          Where(line_no_) + ": dropped a torn last line (" + std::to_string(tail_bytes) +
          " bytes without a newline: an append cut short by a crash; it was never acknowledged)");
    } else if (bad_) {
      out_.warnings.push_back(Where(bad_->first) + ": dropped a bad last line (" + bad_->second +
                              "): an append cut short by a crash; it was never acknowledged");
    }
    for (auto& [seq, allocation] : live_) out_.live.push_back(std::move(allocation));
    return std::move(out_);
  }

 private:
  std::string Where(std::size_t line) const { return path_ + ":" + std::to_string(line); }
  std::string LongLine() const { return "line longer than " + std::to_string(max_line_) + " bytes"; }

  Status Bad(std::string reason) {
    bad_.emplace(line_no_, std::move(reason));
    return Status::Ok();
  }

  Status FailIfBadBefore() const {
    if (!bad_) return Status::Ok();
    return Error(Where(bad_->first) + ": " + bad_->second +
                 "; the line is not the last one, so it is corruption rather than a torn append: refusing to "
                 "start rather than forget a bind (repair or remove the line by hand)");
  }

  void Apply(JournalEntry entry) {
    PodAllocation& a = entry.allocation;
    auto it = seq_of_.find(a.uid);
    if (entry.op == JournalOp::kRelease) {
      if (it == seq_of_.end()) {
        out_.warnings.push_back(Where(line_no_) + ": release of pod " + json_errors::Quote(a.uid) +
                                ", which is not bound; ignored");
        return;
      }
      live_.erase(it->second);
      seq_of_.erase(it);
      return;
    }
    if (it != seq_of_.end()) {
      if (!(live_.at(it->second) == a)) {
        out_.warnings.push_back(Where(line_no_) + ": pod " + json_errors::Quote(a.uid) +
                                " bound again without a release; keeping its first bind");
      }
      return;
    }
    seq_of_.emplace(a.uid, next_seq_);
    live_.emplace(next_seq_++, std::move(a));
  }

  std::string path_;
  std::size_t max_line_;
  std::size_t line_no_ = 0;
  std::optional<std::pair<std::size_t, std::string>> bad_;  // line number and reason
  std::uint64_t next_seq_ = 0;
  std::map<std::uint64_t, PodAllocation> live_;  // by order of the bind line
  std::unordered_map<std::string, std::uint64_t> seq_of_;
  JournalReplay out_;
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error("cannot write " + path + ": " + ErrnoText(errno));
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return Status::Ok();
}

}  // namespace

std::uint32_t Crc32(std::string_view bytes) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (const char ch : bytes) c = kCrcTable[(c ^ static_cast<unsigned char>(ch)) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

Result<std::string> EncodeJournalLine(JournalOp op, const PodAllocation& a) {
  using ordered_json = nlohmann::ordered_json;
  ordered_json j;
  j["op"] = op == JournalOp::kBind ? "bind" : "release";
  j["uid"] = a.uid;
  j["namespace"] = a.pod_namespace;
  j["name"] = a.pod_name;
  j["node"] = a.node;
  if (op == JournalOp::kBind) {
    j["generation"] = a.topology_generation;
    j["worstClass"] = std::string(ToString(a.worst_class));
    j["gpus"] = a.delta.exclusive_gpus;
    ordered_json shares = ordered_json::array();
    for (const auto& [gpu, add] : a.delta.shares) {
      ordered_json e;
      e["gpu"] = gpu;
      e["shares"] = add.shares;
      e["memoryMiB"] = add.memory_mib;
      e["cores"] = add.cores;
      shares.push_back(std::move(e));
    }
    j["shares"] = std::move(shares);
    j["nics"] = a.delta.nics;
    if (a.role != PodRole::kNone) j["role"] = std::string(ToString(a.role));
    if (!a.pool.empty()) j["pool"] = a.pool;
    if (a.kv_ipc) j["kvIpc"] = true;
  }
  std::string line;
  try {
    line = j.dump();
  } catch (const nlohmann::json::exception&) {
    return Error("pod " + json_errors::Quote(a.uid) + ": a name or UID is not valid UTF-8");
  }
  const std::string crc = Hex8(Crc32(line));
  line.pop_back();  // the closing '}'
  line.append(kCrcKey).append(crc).append("\"}\n");
  return line;
}

Result<JournalEntry> DecodeJournalLine(std::string_view line, bool verify_checksum) {
  try {
    return Decode(line, verify_checksum);
  } catch (const std::exception& e) {  // backstop: types are checked before every access
    return Error(std::string("cannot decode journal line: ") + e.what());
  }
}

Result<JournalReplay> ReplayJournalText(std::string_view text, const std::string& path,
                                        std::size_t max_line_bytes) {
  Replayer replayer(path, max_line_bytes);
  for (std::size_t newline = text.find('\n'); newline != std::string_view::npos; newline = text.find('\n')) {
    TOPOSCHED_RETURN_IF_ERROR(replayer.Line(text.substr(0, newline)));
    text.remove_prefix(newline + 1);
  }
  return replayer.End(text.size());
}

Result<JournalReplay> ReplayJournal(const std::string& path, std::size_t max_line_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    if (errno == ENOENT) return JournalReplay{};
    return Error("cannot open " + path + ": " + ErrnoText(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Error("cannot stat " + path + ": " + ErrnoText(errno));
  if (!S_ISREG(st.st_mode)) return Error(path + ": not a regular file");
  // Streamed in blocks so that a long journal costs one line of memory, not the whole file.
  Replayer replayer(path, max_line_bytes);
  std::string pending;
  bool overlong = false;  // `pending` outgrew the bound: skipping to the next '\n'
  std::size_t pending_bytes = 0;
  std::array<char, 1 << 16> block{};
  for (;;) {
    const ssize_t n = ::read(fd.get(), block.data(), block.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error("cannot read " + path + ": " + ErrnoText(errno));
    }
    if (n == 0) break;
    std::string_view data(block.data(), static_cast<std::size_t>(n));
    while (!data.empty()) {
      const std::size_t newline = data.find('\n');
      const std::string_view piece = data.substr(0, newline);
      pending_bytes += piece.size();
      if (!overlong) {
        if (pending.size() + piece.size() > max_line_bytes) {
          overlong = true;
          pending.clear();
        } else {
          pending.append(piece);
        }
      }
      if (newline == std::string_view::npos) break;
      TOPOSCHED_RETURN_IF_ERROR(overlong ? replayer.LongCompleteLine() : replayer.Line(pending));
      pending.clear();
      pending_bytes = 0;
      overlong = false;
      data.remove_prefix(newline + 1);
    }
  }
  return replayer.End(pending_bytes);
}

Status ReplaceFileDurably(const std::string& dir, std::string_view temp_name, std::string_view final_name,
                          std::string_view contents) {
  const std::string temp_path = dir + "/" + std::string(temp_name);
  const std::string final_path = dir + "/" + std::string(final_name);
  {
    Fd fd(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return Error("cannot create " + temp_path + ": " + ErrnoText(errno));
    TOPOSCHED_RETURN_IF_ERROR(WriteAll(fd.get(), contents, temp_path));
    if (::fsync(fd.get()) != 0) return Error("cannot fsync " + temp_path + ": " + ErrnoText(errno));
    if (::close(fd.release()) != 0) return Error("cannot close " + temp_path + ": " + ErrnoText(errno));
  }
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    return Error("cannot rename " + temp_path + " to " + final_path + ": " + ErrnoText(errno));
  }
  // The rename is durable only once the directory is.
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) return Error("cannot open " + dir + ": " + ErrnoText(errno));
  if (::fsync(dir_fd.get()) != 0) return Error("cannot fsync " + dir + ": " + ErrnoText(errno));
  return Status::Ok();
}

JournalWriter::JournalWriter(std::string path, int fd, std::int64_t size)
    : path_(std::move(path)), fd_(fd), size_(size) {}

JournalWriter::~JournalWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<JournalWriter>> JournalWriter::Open(const std::string& path) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
  if (fd.get() < 0) return Error("cannot open " + path + " for appending: " + ErrnoText(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Error("cannot stat " + path + ": " + ErrnoText(errno));
  return std::unique_ptr<JournalWriter>(
      new JournalWriter(path, fd.release(), static_cast<std::int64_t>(st.st_size)));
}

Status JournalWriter::Append(std::string_view line) {
  std::lock_guard lock(mu_);
  if (!broken_.empty()) {
    return Error("journal " + path_ + " refuses appends after a failed write (" + broken_ +
                 "); restart the server to replay it");
  }
  // One write() per line: a crash leaves at most the last line torn, which replay drops.
  ssize_t n = 0;
  do {
    n = ::write(fd_, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  std::string failure;
  if (n < 0) {
    failure = "write: " + ErrnoText(errno);
  } else if (static_cast<std::size_t>(n) != line.size()) {
    failure = "short write (" + std::to_string(n) + " of " + std::to_string(line.size()) + " bytes)";
  } else if (::fdatasync(fd_) != 0) {
    failure = "fdatasync: " + ErrnoText(errno);
  }
  if (failure.empty()) {
    size_ += n;
    return Status::Ok();
  }
  // Cut the unacknowledged line back off, or replay would bind a pod the store never did.
  if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0 || ::fdatasync(fd_) != 0) {
    broken_ = failure + ", then cannot cut the line back off: " + ErrnoText(errno);
  }
  return Error("cannot append to " + path_ + ": " + failure);
}

}  // namespace toposched::state::internal
