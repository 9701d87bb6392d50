// `toposched simulate` end to end: the table, --json, --svg, workload files, the progress lines
// on a non-terminal stderr, and the exit codes of the mistakes a user makes first.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "testing/run_cli.h"
#include "testing/shared_topologies.h"

namespace toposched {
namespace {

namespace fs = std::filesystem;

using testing::CliRun;

std::string Quote(const std::string& s) {
  return testing::ShellQuote(s);
}

fs::path TempPath(const std::string& name) {
  return fs::temp_directory_path() / ("toposched-simcli-" + std::to_string(::getpid()) + "-" + name);
}

CliRun Simulate(const std::string& args) {
  return testing::RunToposched("simulate " + args);
}

TEST(SimulateCli, HelpNamesTheFlags) {
  const CliRun run = Simulate("--help");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* flag : {"--topologies", "--workload", "--seed", "--nodes", "--pods", "--policies",
                           "--config", "--json", "--svg"}) {
    EXPECT_NE(run.out.find(flag), std::string::npos) << flag;
  }
}

TEST(SimulateCli, PrintsTheTableAndWritesTheSvg) {
  const fs::path svg = TempPath("out.svg");
  const CliRun run = Simulate("--nodes 12 --pods 120 --seed 4 --svg " + Quote(svg.string()));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("cluster:  12 nodes"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("pods placed"), std::string::npos);
  EXPECT_NE(run.out.find("root-complex"), std::string::npos);
  EXPECT_EQ(run.err, "") << "120 pods on a pipe: no progress lines";
  const std::string picture = testing::ReadFile(svg);
  EXPECT_EQ(picture.rfind("<svg ", 0), 0u);
  EXPECT_NE(picture.find("</svg>"), std::string::npos);
  fs::remove(svg);
}

TEST(SimulateCli, JsonIsMachineReadableAndPoliciesSelectable) {
  const CliRun run = Simulate("--nodes 12 --pods 100 --json --policies first-fit,toposched");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  ASSERT_EQ(json["policies"].size(), 2u);
  EXPECT_EQ(json["policies"][0]["policy"], "first-fit");
  EXPECT_EQ(json["policies"][1]["policy"], "toposched");
  EXPECT_EQ(json["workload"]["pods"], 100);
  EXPECT_EQ(json["cluster"]["nodes"], 12);
}

TEST(SimulateCli, LongRunsReportProgressOnAPipe) {
  const CliRun run = Simulate("--nodes 12 --pods 600 --policies first-fit");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("simulate: first-fit 600/600 pods"), std::string::npos) << run.err;
  EXPECT_EQ(Simulate("--nodes 12 --pods 600 --policies first-fit --no-progress").err, "");
}

TEST(SimulateCli, ReadsAWorkloadFile) {
  const fs::path file = TempPath("workload.json");
  std::ofstream(file) << R"({"pods": [
    {"name": "a", "arrival": 0, "duration": 10, "pod": {"metadata": {"name": "a"}, "spec": {"containers": [
      {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2", "rdma/ib": "2"}}}]}}},
    {"name": "b", "arrival": 1, "pod": {"metadata": {"name": "b"}, "spec": {"containers": [
      {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}}}]}}}]})";
  const CliRun run = Simulate("--nodes 5 --json --workload " + Quote(file.string()));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  for (const auto& p : json["policies"]) EXPECT_EQ(p["placed"], 2) << p["policy"];

  std::ofstream(file) << R"({"pods": [{"name": "bad", "pod": {"spec": {"containers": [
      {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "-1"}}}]}}}]})";
  const CliRun bad = Simulate("--workload " + Quote(file.string()));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("pods[0] (\"bad\")"), std::string::npos) << bad.err;
  fs::remove(file);
}

TEST(SimulateCli, ReadsATopologyDirectory) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  const CliRun run = Simulate("--nodes 0 --pods 150 --json --policies toposched,first-fit --topologies " +
                              Quote(testing::SharedTopologiesDir().string()));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("without GPUs skipped"), std::string::npos) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  EXPECT_GT(json["cluster"]["nodes"].get<int>(), 10);
}

TEST(SimulateCli, MistakesExitWithTheRightCode) {
  struct Case {
    const char* args;
    int code;
    const char* message;
  };
  const Case cases[] = {
      {"--nodes abc", 2, "--nodes: 'abc' is not an integer"},
      {"--frobnicate", 2, "unknown flag '--frobnicate'"},
      {"--svg", 2, "--svg needs a value"},
      {"--nodes 4 --shapes pcie-4gpu=2", 2, "give one"},
      {"--shapes pcie-4gpu", 2, "expected PRESET=COUNT"},
      {"--nodes 0", 2, "no nodes"},
      {"--nodes 4 --pods 10 --policies toposched,best-fit", 2, "unknown policy 'best-fit'"},
      {"--shapes dgx-z=1", 2, "dgx-z"},
      {"--workload /nonexistent/w.json", 1, "/nonexistent/w.json"},
      {"--topologies /nonexistent-dir", 1, "not a directory"},
      {"--config /nonexistent/c.yaml", 1, "/nonexistent/c.yaml"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const CliRun run = Simulate(c.args);
    EXPECT_EQ(run.exit_code, c.code) << run.err;
    EXPECT_NE(run.err.find(c.message), std::string::npos) << run.err;
  }
}

}  // namespace
}  // namespace toposched
