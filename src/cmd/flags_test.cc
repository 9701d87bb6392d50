// FlagSet and the value syntaxes every subcommand shares (flags.h).

#include "flags.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace toposched::cmd {
namespace {

using std::chrono::milliseconds;

TEST(ParseDuration, AcceptsGoStyleIntegerDurations) {
  struct Case {
    const char* text;
    long long ms;  // -1: an error
  };
  for (const Case& c : std::vector<Case>{
           {"0", 0},
           {"500ms", 500},
           {"30s", 30'000},
           {"5m", 300'000},
           {"1h", 3'600'000},
           {"1m30s", 90'000},         // 60 000 + 30 000
           {"1h2m3s4ms", 3'723'004},  // 3 600 000 + 120 000 + 3 000 + 4
           {"0s", 0},
           {"30", -1},  // a number without a unit is refused, never guessed as seconds
           {"", -1},
           {"-5s", -1},
           {"1.5s", -1},
           {"5d", -1},
           {"s", -1},
           {"400d", -1},
           {"9000000h", -1},  // past a year
       }) {
    SCOPED_TRACE(c.text);
    const auto d = ParseDuration(c.text);
    if (c.ms < 0) {
      EXPECT_FALSE(d.ok());
    } else {
      ASSERT_TRUE(d.ok()) << d.error().message();
      EXPECT_EQ(d->count(), c.ms);
    }
  }
}

TEST(FormatDuration, LargestExactUnitAndRoundTrips) {
  EXPECT_EQ(FormatDuration(milliseconds(0)), "0");
  EXPECT_EQ(FormatDuration(milliseconds(500)), "500ms");
  EXPECT_EQ(FormatDuration(milliseconds(90'000)), "90s");
  EXPECT_EQ(FormatDuration(milliseconds(900'000)), "15m");
  EXPECT_EQ(FormatDuration(milliseconds(7'200'000)), "2h");
  for (long long ms : {1LL, 1500LL, 61'000LL, 3'600'000LL}) {
    EXPECT_EQ(ParseDuration(FormatDuration(milliseconds(ms)))->count(), ms);
  }
}

TEST(ParseQuantity, KubernetesBinaryAndDecimalSuffixes) {
  struct Case {
    const char* text;
    long long value;  // -1: an error
  };
  for (const Case& c : std::vector<Case>{
           {"16777216", 16777216},
           {"512Ki", 512 * 1024},
           {"16Mi", 16 * 1024 * 1024},
           {"1Gi", 1LL << 30},
           {"64k", 64'000},
           {"16M", 16'000'000},
           {"1G", 1'000'000'000},
           {"0", 0},
           {"16 Mi", -1},
           {"16MB", -1},
           {"1.5Gi", -1},
           {"-1", -1},
           {"Mi", -1},
           {"9999999999Ti", -1},  // overflows int64
       }) {
    SCOPED_TRACE(c.text);
    const auto q = ParseQuantity(c.text);
    if (c.value < 0) {
      EXPECT_FALSE(q.ok());
    } else {
      ASSERT_TRUE(q.ok()) << q.error().message();
      EXPECT_EQ(*q, c.value);
    }
  }
}

// A FlagSet with one flag of each kind, parsed from a command line.
struct Parsed {
  std::optional<int> exit_code;
  std::string err, out;
  std::string text = "t";
  std::string choice = "text";
  bool on = false, yes = true;
  long long n = 3;
  double x = 0.5;
  milliseconds d{15'000};
  std::int64_t q = 1024;
};

Parsed ParseWith(const std::vector<std::string>& args) {
  Parsed p;
  FlagSet flags("demo", "toposched demo [flags]", "A demo.");
  flags.Text("--text", p.text, "STR", "a string");
  flags.Choice("--choice", p.choice, {"text", "json"}, "a choice");
  flags.Switch("--on", p.on, "a switch");
  flags.Bool("--yes", p.yes, "a boolean");
  flags.Group("numbers");
  flags.Integer("--n", p.n, 1, 10, "N", "an integer");
  flags.Number("--x", p.x, 0, 1, "F", "a number");
  flags.Duration("--d", p.d, milliseconds(1), milliseconds(3'600'000), "a duration");
  flags.Quantity("--q", p.q, 1024, 1LL << 30, "a quantity");
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  p.exit_code = flags.Parse(args);
  p.err = ::testing::internal::GetCapturedStderr();
  p.out = ::testing::internal::GetCapturedStdout();
  return p;
}

TEST(FlagSet, BothValueFormsAndTheLastOccurrenceWins) {
  const Parsed p = ParseWith({"--text", "a", "--text=b", "--choice=json", "--on", "--yes", "false", "--n=7",
                              "--x", "0.25", "--d=1m30s", "--q", "16Mi"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.err;
  EXPECT_EQ(p.text, "b");
  EXPECT_EQ(p.choice, "json");
  EXPECT_TRUE(p.on);
  EXPECT_FALSE(p.yes);
  EXPECT_EQ(p.n, 7);
  EXPECT_EQ(p.x, 0.25);
  EXPECT_EQ(p.d, milliseconds(90'000));
  EXPECT_EQ(p.q, 16 << 20);
}

TEST(FlagSet, UsageErrorsExitTwoAndNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--frobnicate"}, "toposched demo: unknown flag '--frobnicate' (see --help)"},
           {{"--frobnicate", "value"}, "unknown flag '--frobnicate'"},
           {{"stray"}, "unexpected argument 'stray'"},
           {{"--text"}, "--text needs a value"},
           {{"--text="}, "--text needs a value"},
           {{"--choice", "yaml"}, "--choice must be text or json, not 'yaml'"},
           {{"--yes", "maybe"}, "--yes must be true or false, not 'maybe'"},
           {{"--n", "abc"}, "--n: 'abc' is not an integer in 1..10"},
           {{"--n", "11"}, "--n: '11' is not an integer in 1..10"},
           {{"--n", "5x"}, "--n: '5x' is not an integer in 1..10"},
           {{"--x", "2"}, "--x: '2' is not a number in 0..1"},
           {{"--x", "nan"}, "--x: 'nan' is not a number"},
           {{"--d", "30"}, "--d: '30' is not a duration like 500ms, 30s, 5m, 1h or 1m30s"},
           {{"--d", "0"}, "--d: '0' is not in 1ms..1h"},
           {{"--q", "1Ti"}, "--q: '1Ti' is not in 1024..1073741824"},
           {{"--q", "lots"}, "--q: 'lots' is not a quantity"},
       }) {
    SCOPED_TRACE(c.message);
    const Parsed p = ParseWith(c.args);
    ASSERT_TRUE(p.exit_code.has_value());
    EXPECT_EQ(*p.exit_code, 2);
    EXPECT_NE(p.err.find(c.message), std::string::npos) << p.err;
    EXPECT_EQ(p.out, "");
  }
}

TEST(FlagSet, HelpIsGeneratedWithValueNamesDefaultsAndGroups) {
  const Parsed p = ParseWith({"--help"});
  ASSERT_TRUE(p.exit_code.has_value());
  EXPECT_EQ(*p.exit_code, 0);
  EXPECT_EQ(p.err, "");
  EXPECT_EQ(p.out.rfind("usage: toposched demo [flags]\n\nA demo.\n", 0), 0u) << p.out;
  for (const char* line : {"--text STR", "a string (default t)", "--choice text|json", "(default text)",
                           "--yes true|false", "numbers:", "--n N", "(default 3)", "--d DUR", "(default 15s)",
                           "--q QUANTITY", "(default 1024)", "-h,--help"}) {
    EXPECT_NE(p.out.find(line), std::string::npos) << line << "\n" << p.out;
  }
  // Each flag is listed once.
  EXPECT_EQ(p.out.find("--text"), p.out.rfind("--text"));
  EXPECT_EQ(ParseWith({"-h"}).exit_code, 0);
}

}  // namespace
}  // namespace toposched::cmd
