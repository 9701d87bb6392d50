// `toposched advise` end to end: the example with no flags, --json, --svg, the short-vs-long
// prompt direction through the binary, and the exit codes of bad flags.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "testing/run_cli.h"

namespace toposched {
namespace {

namespace fs = std::filesystem;
using testing::CliRun;

CliRun Advise(const std::string& args) {
  return testing::RunToposched("advise " + args);
}

TEST(AdviseCli, NoFlagsRunsTheExample) {
  const CliRun run = Advise("");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* part :
       {"llama-3-70b", "co-located", "disaggregated over leaf", "verdict:", "uncertain:"}) {
    EXPECT_NE(run.out.find(part), std::string::npos) << part << "\n" << run.out;
  }
}

TEST(AdviseCli, JsonParsesAndSvgIsWritten) {
  const fs::path svg =
      fs::temp_directory_path() / ("toposched-advise-" + std::to_string(::getpid()) + ".svg");
  const CliRun run = Advise("--json --svg " + testing::ShellQuote(svg.string()));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["kvBytesPerToken"], 327680);
  EXPECT_GE(json["options"].size(), 2u);
  EXPECT_TRUE(json["verdict"].is_string());
  const std::string picture = testing::ReadFile(svg);
  EXPECT_EQ(picture.rfind("<svg ", 0), 0u);
  EXPECT_NE(picture.find("</svg>"), std::string::npos);
  EXPECT_NE(picture.find("<title>leaf</title>"), std::string::npos);
  fs::remove(svg);
}

TEST(AdviseCli, ShortLowCoLocatesLongHighDisaggregates) {
  const CliRun short_low = Advise(
      "--gpus 16 --prompt lognormal:256,0.5 --output lognormal:256,0.5 --rate 1 --ttft-p99-ms 1000 "
      "--tpot-p99-ms 50 --json");
  ASSERT_EQ(short_low.exit_code, 0) << short_low.err;
  EXPECT_EQ(nlohmann::json::parse(short_low.out)["verdict"].get<std::string>().rfind("co-locate", 0), 0u);
  const CliRun long_high = Advise(
      "--gpus 32 --prompt lognormal:8192,0.3 --output lognormal:256,0.5 --rate 6 --ttft-p99-ms 3000 "
      "--tpot-p99-ms 50 --json");
  ASSERT_EQ(long_high.exit_code, 0) << long_high.err;
  EXPECT_EQ(nlohmann::json::parse(long_high.out)["verdict"].get<std::string>().rfind("disaggregate over", 0),
            0u);
}

TEST(AdviseCli, BadFlagsSayWhat) {
  struct Case {
    std::string args;
    int code;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"--bogus", 2, "unknown flag '--bogus'"},
           {"--model nope", 2, "llama-3-70b"},
           {"--gpu b9000", 2, "h100-sxm"},
           {"--prompt fixed:0", 2, "--prompt"},
           {"--rate abc", 2, "--rate"},
           {"--gpus 0", 2, "--gpus"},
           {"--gpus", 2, "--gpus needs a value"},
           {"--layers 10", 2, "custom model needs"},
           {"--gpus 4", 1, "does not fit in 4 GPUs"},
           {"--config /nonexistent/x.yaml", 1, "cannot open"},
           {"--topology-dir /nonexistent", 1, "/nonexistent"},
       }) {
    SCOPED_TRACE(c.args);
    const CliRun run = Advise(c.args);
    EXPECT_EQ(run.exit_code, c.code) << run.err;
    EXPECT_NE(run.err.find(c.error), std::string::npos) << run.err;
    EXPECT_EQ(run.out, "");
  }
  const CliRun help = Advise("--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--model", "--gpus-per-instance", "--prompt", "--rate", "--config",
                           "--topology-dir", "--json", "--svg"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace toposched
