#pragma once
// Structured logs for the long-running commands (serve, agent): one line per event on stderr,
// with the verb, pod and node on every line ("-" when not applicable), as text key=value or as
// JSON lines. spdlog underneath; the level comes from a flag.
//
//   text: 2026-12-02T14:30:01.123Z info verb=filter pod=ns/name node=- msg="2 of 5 nodes fit"
//   json: {"ts":"2026-12-02T14:30:01.123Z","level":"info","verb":"filter","pod":"ns/name","node":"-","msg":"2
//   of 5 nodes fit"}

#include <string>
#include <string_view>

#include "toposched/common/status.h"

namespace toposched::metrics {

enum class LogFormat { kText, kJson };
Result<LogFormat> ParseLogFormat(std::string_view text);  // "text" | "json"

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };
Result<LogLevel> ParseLogLevel(std::string_view text);  // "trace" .. "error", "off"

// Replaces spdlog's default logger with a stderr logger writing this format at this level.
void ConfigureLogging(LogFormat format, LogLevel level);

struct LogFields {
  std::string_view verb;  // "filter", "bind", "volcano/predicate", "startup", ...
  std::string_view pod;   // "namespace/name" (or the UID when that is all there is)
  std::string_view node;
};

bool LogEnabled(LogLevel level);
// Formats and writes one line through spdlog's default logger (values are quoted/escaped so a
// line always parses: text values with spaces or quotes are quoted; JSON values escaped).
void Log(LogLevel level, const LogFields& fields, std::string_view message);

// The line Log() would write, without timestamp handling (for tests): text or JSON.
std::string FormatLogLine(LogFormat format, std::string_view timestamp, LogLevel level,
                          const LogFields& fields, std::string_view message);

}  // namespace toposched::metrics
