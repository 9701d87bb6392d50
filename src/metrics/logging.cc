#include "toposched/metrics/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <memory>

#include "toposched/common/json_string.h"

namespace toposched::metrics {
namespace {

// The format Log() writes; set once by ConfigureLogging, read on every line.
std::atomic<LogFormat> g_format{LogFormat::kText};

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::off;
}

std::string_view LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "off";
}

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// The text with every ill-formed UTF-8 sequence replaced by U+FFFD, one per maximal subpart
// (Unicode's recommended practice, as in the W3C encoding standard): overlong forms, surrogates,
// code points above U+10FFFF, stray continuation bytes and truncated sequences are all ill-formed.
std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      out += static_cast<char>(lead);
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char second_lo = 0x80, second_hi = 0xBF;  // the allowed range of the second byte
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) second_lo = 0xA0;  // no overlong forms
      if (lead == 0xED) second_hi = 0x9F;  // no surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) second_lo = 0x90;  // no overlong forms
      if (lead == 0xF4) second_hi = 0x8F;  // nothing above U+10FFFF
    }
    std::size_t valid = length == 0 ? 0 : 1;  // bytes of this sequence that are well-formed so far
    while (valid > 0 && valid < length && i + valid < text.size()) {
      const auto byte = static_cast<unsigned char>(text[i + valid]);
      const unsigned char lo = valid == 1 ? second_lo : 0x80;
      const unsigned char hi = valid == 1 ? second_hi : 0xBF;
      if (byte < lo || byte > hi) break;
      ++valid;
    }
    if (valid == length && length > 0) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += kReplacementCharacter;
      i += valid == 0 ? 1 : valid;
    }
  }
  return out;
}

bool IsControl(unsigned char c) {
  return c < 0x20 || c == 0x7F;
}

void AppendHexEscape(std::string& out, const char* prefix, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%s%02x", prefix, static_cast<unsigned>(c));
  out += buf;
}

// A logfmt value (already valid UTF-8) double-quoted, with quotes, backslashes, \n, \t and \r
// escaped and other control characters (DEL too) as \xXX, so that a line never carries a raw
// control byte. JSON lines use common/json_string.h's AppendJsonString.
void AppendQuoted(std::string& out, std::string_view value) {
  out += '"';
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (IsControl(u)) {
          AppendHexEscape(out, "\\x", u);
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// A logfmt value: bare when it is plain, double-quoted with escapes when it holds a space, '=',
// '"' or a control character, "-" when empty. `always_quote` is for the message.
void AppendTextValue(std::string& out, std::string_view raw, bool always_quote) {
  if (raw.empty() && !always_quote) {
    out += '-';
    return;
  }
  const std::string value = SanitizeUtf8(raw);
  bool quote = always_quote;
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (c == ' ' || c == '=' || c == '"' || IsControl(u)) quote = true;
  }
  if (!quote) {
    out += value;
    return;
  }
  AppendQuoted(out, value);
}

// UTC, RFC 3339 with milliseconds: 2026-12-02T14:30:01.123Z.
std::string NowRfc3339() {
  const auto now = std::chrono::system_clock::now();
  const std::int64_t ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::int64_t seconds = ms / 1000;
  std::int64_t millis = ms % 1000;
  if (millis < 0) {  // before 1970: floor, not truncate
    millis += 1000;
    seconds -= 1;
  }
  const auto t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(millis));
  return buf;
}

}  // namespace

Result<LogFormat> ParseLogFormat(std::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return Error("log format \"" + std::string(text) + "\": expected text or json");
}

Result<LogLevel> ParseLogLevel(std::string_view text) {
  for (LogLevel level : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn,
                         LogLevel::kError, LogLevel::kOff}) {
    if (text == LevelName(level)) return level;
  }
  return Error("log level \"" + std::string(text) + "\": expected trace, debug, info, warn, error or off");
}

void ConfigureLogging(LogFormat format, LogLevel level) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("toposched", std::move(sink));
  logger->set_pattern("%v");  // FormatLogLine does all of the formatting
  logger->set_level(ToSpdlog(level));
  logger->flush_on(spdlog::level::trace);
  g_format.store(format, std::memory_order_relaxed);
  spdlog::set_default_logger(std::move(logger));
}

bool LogEnabled(LogLevel level) {
  if (level == LogLevel::kOff) return false;  // "off" is a threshold, not a level to write at
  return spdlog::default_logger_raw()->should_log(ToSpdlog(level));
}

void Log(LogLevel level, const LogFields& fields, std::string_view message) {
  if (!LogEnabled(level)) return;
  const std::string line =
      FormatLogLine(g_format.load(std::memory_order_relaxed), NowRfc3339(), level, fields, message);
  spdlog::default_logger_raw()->log(ToSpdlog(level), spdlog::string_view_t(line.data(), line.size()));
}

std::string FormatLogLine(LogFormat format, std::string_view timestamp, LogLevel level,
                          const LogFields& fields, std::string_view message) {
  std::string out;
  out.reserve(64 + fields.verb.size() + fields.pod.size() + fields.node.size() + message.size());
  if (format == LogFormat::kJson) {
    auto field = [&out](std::string_view key, std::string_view value, bool dash_if_empty) {
      out += out.empty() ? "{\"" : ",\"";
      out += key;
      out += "\":";
      // One U+FFFD per maximal ill-formed subpart (SanitizeUtf8), then the common writer.
      toposched::AppendJsonString(
          out, SanitizeUtf8(value.empty() && dash_if_empty ? std::string_view("-") : value));
    };
    field("ts", timestamp, false);
    field("level", LevelName(level), false);
    field("verb", fields.verb, true);
    field("pod", fields.pod, true);
    field("node", fields.node, true);
    field("msg", message, false);
    out += '}';
    return out;
  }
  AppendTextValue(out, timestamp, false);
  out += ' ';
  out += LevelName(level);
  out += " verb=";
  AppendTextValue(out, fields.verb, false);
  out += " pod=";
  AppendTextValue(out, fields.pod, false);
  out += " node=";
  AppendTextValue(out, fields.node, false);
  out += " msg=";
  AppendTextValue(out, message, true);
  return out;
}

}  // namespace toposched::metrics
