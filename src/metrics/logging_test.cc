#include "toposched/metrics/logging.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace toposched::metrics {
namespace {

constexpr std::string_view kTs = "2026-12-02T14:30:01.123Z";

TEST(FormatLogLine, Text) {
  struct Case {
    const char* name;
    LogLevel level;
    LogFields fields;
    std::string message;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"the header example",
       LogLevel::kInfo,
       {"filter", "ns/name", ""},
       "2 of 5 nodes fit",
       "2026-12-02T14:30:01.123Z info verb=filter pod=ns/name node=- msg=\"2 of 5 nodes fit\""},
      {"every field empty",
       LogLevel::kWarn,
       {"", "", ""},
       "",
       "2026-12-02T14:30:01.123Z warn verb=- pod=- node=- msg=\"\""},
      {"space quotes",
       LogLevel::kError,
       {"bind", "ns/a b", "node-1"},
       "x",
       "2026-12-02T14:30:01.123Z error verb=bind pod=\"ns/a b\" node=node-1 msg=\"x\""},
      {"equals sign quotes",
       LogLevel::kDebug,
       {"volcano/predicate", "ns/p", "k=v"},
       "x",
       "2026-12-02T14:30:01.123Z debug verb=volcano/predicate pod=ns/p node=\"k=v\" msg=\"x\""},
      {"double quote quotes and is escaped",
       LogLevel::kTrace,
       {"say \"hi\"", "p", "n"},
       "x",
       "2026-12-02T14:30:01.123Z trace verb=\"say \\\"hi\\\"\" pod=p node=n msg=\"x\""},
      {"a lone backslash does not quote",
       LogLevel::kInfo,
       {"v", "C:\\pod", "n"},
       "x",
       "2026-12-02T14:30:01.123Z info verb=v pod=C:\\pod node=n msg=\"x\""},
      {"control characters quote and escape",
       LogLevel::kInfo,
       {"v", "a\tb",
        "c\x01"
        "d"},
       "x",
       "2026-12-02T14:30:01.123Z info verb=v pod=\"a\\tb\" node=\"c\\x01d\" msg=\"x\""},
      {"message escapes",
       LogLevel::kInfo,
       {"v", "p", "n"},
       "line 1\nline \"2\" \\ \r\x7f",
       "2026-12-02T14:30:01.123Z info verb=v pod=p node=n msg=\"line 1\\nline \\\"2\\\" \\\\ \\r\\x7f\""},
      {"utf-8 passes, invalid bytes are replaced",
       LogLevel::kInfo,
       {"v", "nœud", "n\xff"},
       "\xc3",
       "2026-12-02T14:30:01.123Z info verb=v pod=nœud node=n\xEF\xBF\xBD msg=\"\xEF\xBF\xBD\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(FormatLogLine(LogFormat::kText, kTs, c.level, c.fields, c.message), c.expected);
  }
}

TEST(FormatLogLine, Json) {
  struct Case {
    const char* name;
    LogFields fields;
    std::string message;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"the header example",
       {"filter", "ns/name", ""},
       "2 of 5 nodes fit",
       R"({"ts":"2026-12-02T14:30:01.123Z","level":"info","verb":"filter","pod":"ns/name","node":"-",)"
       R"("msg":"2 of 5 nodes fit"})"},
      {"empty message stays empty",
       {"", "", ""},
       "",
       R"({"ts":"2026-12-02T14:30:01.123Z","level":"info","verb":"-","pod":"-","node":"-","msg":""})"},
      {"quotes, backslashes, control characters",
       {"v", "a\"b", "c\\d"},
       "1\n2\t3\x01\x1f\r",
       R"({"ts":"2026-12-02T14:30:01.123Z","level":"info","verb":"v","pod":"a\"b","node":"c\\d",)"
       R"("msg":"1\n2\t3\u0001\u001f\r"})"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(FormatLogLine(LogFormat::kJson, kTs, LogLevel::kInfo, c.fields, c.message), c.expected);
  }
}

// Parses one JSON line and checks it has exactly the six string fields.
nlohmann::json ParseLine(const std::string& line) {
  nlohmann::json parsed = nlohmann::json::parse(line);  // throws on invalid JSON or UTF-8
  EXPECT_TRUE(parsed.is_object());
  EXPECT_EQ(parsed.size(), 6u);
  for (const char* key : {"ts", "level", "verb", "pod", "node", "msg"}) {
    EXPECT_TRUE(parsed.contains(key) && parsed[key].is_string()) << key;
  }
  return parsed;
}

TEST(FormatLogLine, InvalidUtf8BecomesReplacementCharacters) {
  const std::string fffd = "\xEF\xBF\xBD";
  struct Case {
    const char* name;
    std::string message;
    std::string decoded;
  };
  // One U+FFFD per maximal ill-formed subpart (Unicode's recommended practice).
  const std::vector<Case> cases = {
      {"valid 2, 3 and 4 byte sequences pass", "é € 😀", "é € 😀"},
      {"stray 0xff",
       "a\xff"
       "b",
       "a" + fffd + "b"},
      {"stray continuation byte", "\x80", fffd},
      {"truncated 2-byte sequence at the end", "a\xc3", "a" + fffd},
      {"truncated 3-byte sequence then ascii", "\xe2\x82z", fffd + "z"},
      {"truncated 4-byte sequence", "\xf0\x9f\x98", fffd},
      {"overlong slash", "\xc0\xaf", fffd + fffd},
      {"overlong 3-byte", "\xe0\x80\xaf", fffd + fffd + fffd},
      {"surrogate", "\xed\xa0\x80", fffd + fffd + fffd},
      {"above U+10FFFF", "\xf4\x90\x80\x80", fffd + fffd + fffd + fffd},
      {"0xf5 lead", "\xf5\x80", fffd + fffd},
      {"NUL byte kept, escaped", std::string("a\0b", 3), std::string("a\0b", 3)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string line =
        FormatLogLine(LogFormat::kJson, kTs, LogLevel::kInfo, {"v", c.message, ""}, c.message);
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = ParseLine(line)) << line;
    EXPECT_EQ(parsed["msg"].get<std::string>(), c.decoded);
    EXPECT_EQ(parsed["pod"].get<std::string>(), c.decoded);
  }
}

TEST(FormatLogLine, ArbitraryBytesAlwaysGiveOneValidLine) {
  std::mt19937 rng(20261202);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 24);
  std::vector<std::string> inputs;
  inputs.reserve(256 + 2000);
  for (int b = 0; b < 256; ++b) inputs.emplace_back(1, static_cast<char>(b));
  for (int i = 0; i < 2000; ++i) {
    std::string s(static_cast<std::size_t>(length(rng)), '\0');
    for (char& c : s) c = static_cast<char>(byte(rng));
    inputs.push_back(std::move(s));
  }
  for (const std::string& input : inputs) {
    const LogFields fields{input, input, input};
    const std::string json = FormatLogLine(LogFormat::kJson, kTs, LogLevel::kWarn, fields, input);
    ASSERT_NO_THROW(ParseLine(json)) << json;
    EXPECT_EQ(json.find('\n'), std::string::npos);
    const std::string text = FormatLogLine(LogFormat::kText, kTs, LogLevel::kWarn, fields, input);
    EXPECT_EQ(text.find('\n'), std::string::npos);
    EXPECT_EQ(text.find('\r'), std::string::npos);
    EXPECT_TRUE(text.ends_with('"')) << text;  // msg is always quoted, so the line ends with a quote
  }
}

TEST(ParseLogFormat, KnownAndUnknown) {
  ASSERT_TRUE(ParseLogFormat("text").ok());
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  ASSERT_TRUE(ParseLogFormat("json").ok());
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  struct Case {
    std::string input;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"xml", "log format \"xml\": expected text or json"},
           {"", "log format \"\": expected text or json"},
           {"JSON", "log format \"JSON\": expected text or json"},
       }) {
    SCOPED_TRACE(c.input);
    const Result<LogFormat> parsed = ParseLogFormat(c.input);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.error().message(), c.error);
  }
}

TEST(ParseLogLevel, KnownAndUnknown) {
  struct Known {
    std::string input;
    LogLevel level;
  };
  for (const Known& c : std::vector<Known>{{"trace", LogLevel::kTrace},
                                           {"debug", LogLevel::kDebug},
                                           {"info", LogLevel::kInfo},
                                           {"warn", LogLevel::kWarn},
                                           {"error", LogLevel::kError},
                                           {"off", LogLevel::kOff}}) {
    SCOPED_TRACE(c.input);
    const Result<LogLevel> parsed = ParseLogLevel(c.input);
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, c.level);
  }
  for (const std::string input : {"verbose", "warning", "INFO", ""}) {
    SCOPED_TRACE(input);
    const Result<LogLevel> parsed = ParseLogLevel(input);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.error().message(),
              "log level \"" + input + "\": expected trace, debug, info, warn, error or off");
  }
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Log, WritesJsonLinesToStderrAtOrAboveTheLevel) {
  ConfigureLogging(LogFormat::kJson, LogLevel::kInfo);
  EXPECT_FALSE(LogEnabled(LogLevel::kDebug));
  EXPECT_TRUE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  EXPECT_FALSE(LogEnabled(LogLevel::kOff));
  testing::internal::CaptureStderr();
  Log(LogLevel::kDebug, {"filter", "ns/p", "n1"}, "dropped");
  Log(LogLevel::kInfo, {"filter", "ns/p", ""}, "2 of 5 nodes fit");
  Log(LogLevel::kError, {"bind", "", "n1"}, "bind failed: \"conflict\"");
  const std::vector<std::string> lines = Lines(testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json first = ParseLine(lines[0]);
  EXPECT_EQ(first["level"], "info");
  EXPECT_EQ(first["verb"], "filter");
  EXPECT_EQ(first["node"], "-");
  EXPECT_EQ(first["msg"], "2 of 5 nodes fit");
  EXPECT_TRUE(std::regex_match(first["ts"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
      << first["ts"];
  const nlohmann::json second = ParseLine(lines[1]);
  EXPECT_EQ(second["level"], "error");
  EXPECT_EQ(second["pod"], "-");
  EXPECT_EQ(second["msg"], "bind failed: \"conflict\"");
}

TEST(Log, TextFormatAndOff) {
  ConfigureLogging(LogFormat::kText, LogLevel::kTrace);
  testing::internal::CaptureStderr();
  Log(LogLevel::kTrace, {"startup", "", ""}, "listening");
  const std::vector<std::string> lines = Lines(testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(std::regex_match(
      lines[0],
      std::regex(
          R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z trace verb=startup pod=- node=- msg="listening")")))
      << lines[0];

  ConfigureLogging(LogFormat::kText, LogLevel::kOff);
  EXPECT_FALSE(LogEnabled(LogLevel::kError));
  testing::internal::CaptureStderr();
  Log(LogLevel::kError, {"startup", "", ""}, "not written");
  Log(LogLevel::kOff, {"startup", "", ""}, "not written either");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace toposched::metrics
