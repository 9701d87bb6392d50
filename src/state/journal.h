#pragma once
// The allocations journal of the file source (internal): its line format, its replay and its
// durable appends. One line per bind or release:
//
//   {"op":"bind","uid":"u1","namespace":"ns","name":"p","node":"gpu-a1","generation":1,
//    "worstClass":"PIX","gpus":[0,1],"shares":[{"gpu":2,"shares":1,"memoryMiB":8000,"cores":2500}],
//    "nics":[0],"crc":"1a2b3c4d"}
//   {"op":"release","uid":"u1","namespace":"ns","name":"p","node":"gpu-a1","crc":"..."}
//
// "crc" is the CRC-32 (IEEE) of the line's bytes without it: the text before `,"crc":"` followed
// by `}`. It is checked on the raw bytes, so it does not depend on how a JSON library would
// re-serialise the payload.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/state/cluster_state.h"

namespace toposched::state::internal {

inline constexpr std::string_view kJournalFileName = "allocations.journal";
inline constexpr std::string_view kJournalTempFileName = "allocations.journal.tmp";

// Bounds on what a journal line may carry; far above any real pod, low enough that sums of a
// node's shares cannot overflow.
inline constexpr std::size_t kMaxJournalStringBytes = 1024;
inline constexpr int kMaxJournalDevices = 4096;
inline constexpr std::int64_t kMaxShareMemoryMib = std::int64_t{1} << 40;
inline constexpr int kMaxSharesPerEntry = 1000;

std::uint32_t Crc32(std::string_view bytes);

enum class JournalOp : std::uint8_t { kBind, kRelease };

struct JournalEntry {
  JournalOp op = JournalOp::kBind;
  // For a release only uid, pod_namespace, pod_name and node are meaningful.
  PodAllocation allocation;
};

// The line for `op`, ending in '\n'. Errors when a string is not valid UTF-8 (JSON cannot carry
// it, and replay must read back exactly what was bound).
Result<std::string> EncodeJournalLine(JournalOp op, const PodAllocation& allocation);

// Decodes one line (without its '\n'). Strict: unknown keys, missing keys, wrong types and
// out-of-range values are errors naming the key. `verify_checksum` is false only in the fuzzer,
// to reach the decoder behind the checksum.
Result<JournalEntry> DecodeJournalLine(std::string_view line, bool verify_checksum = true);

struct JournalReplay {
  std::vector<PodAllocation> live;    // bound and not released, in order of their bind lines
  std::vector<std::string> warnings;  // dropped torn tail, inconsistent but harmless lines
};

// Replays the journal at `path` (missing file: nothing bound). A bad last line is a torn append
// and is dropped with a warning; a bad line followed by anything is an error naming path:line.
Result<JournalReplay> ReplayJournal(const std::string& path, std::size_t max_line_bytes);

// Replays lines already in memory (the fuzzer and ReplayJournal share it): `text` is the whole
// file's content.
Result<JournalReplay> ReplayJournalText(std::string_view text, const std::string& path,
                                        std::size_t max_line_bytes);

// Writes `contents` to dir/temp_name, fsyncs it, renames it over dir/final_name and fsyncs dir,
// so that after a crash the file is either the old one or the new one, whole.
Status ReplaceFileDurably(const std::string& dir, std::string_view temp_name, std::string_view final_name,
                          std::string_view contents);

// Appends lines to the journal, each with one write() and an fdatasync before Append returns.
// Appends are serialised. A failed append is cut back off the file; when even that fails the
// writer refuses every later append (the server must restart and replay).
class JournalWriter {
 public:
  static Result<std::unique_ptr<JournalWriter>> Open(const std::string& path);
  ~JournalWriter();
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;

  Status Append(std::string_view line);

 private:
  JournalWriter(std::string path, int fd, std::int64_t size);

  std::mutex mu_;
  std::string path_;
  int fd_ = -1;
  std::int64_t size_ = 0;  // bytes known durable
  std::string broken_;     // why appends are refused; empty while healthy
};

}  // namespace toposched::state::internal
