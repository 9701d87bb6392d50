// The `toposched` binary end to end: every shared topology file through `topo` (text and
// JSON), `agent --once`, and the error paths a user hits first.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/run_cli.h"
#include "testing/shared_topologies.h"
#include "toposched/agent/discovery.h"
#include "toposched/topology/json_codec.h"
#include "toposched/topology/matrix_text.h"

namespace toposched {
namespace {

namespace fs = std::filesystem;

using testing::CliRun;

std::string Quote(const std::string& s) {
  return testing::ShellQuote(s);
}

CliRun Toposched(const std::string& args) {
  return testing::RunToposched(args);
}

// `topo --input F` prints exactly the matrix (or the no-GPU line) that the library computes
// for F, and `--format json` round-trips to the same topology.
TEST(CliTest, TopoOnEverySharedFile) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  int files = 0;
  for (const auto& entry : fs::directory_iterator(testing::SharedTopologiesDir())) {
    if (entry.path().extension() != ".xml") continue;
    ++files;
    const std::string path = entry.path().string();
    SCOPED_TRACE(path);
    auto expected = LoadTopologyFile(path);
    ASSERT_TRUE(expected.ok()) << expected.error().message();
    const CliRun text = Toposched("topo --input " + Quote(path));
    ASSERT_EQ(text.exit_code, 0) << text.err;
    if (expected->gpus.empty()) {
      EXPECT_EQ(text.out, NoGpuStatement(*expected) + "\n");
    } else {
      EXPECT_EQ(text.out, RenderTopologyMatrix(*expected));
      EXPECT_NE(text.out.find("GPU" + std::to_string(expected->gpus.size() - 1) + "\t"), std::string::npos);
    }
    const CliRun json = Toposched("topo --format json --input " + Quote(path));
    ASSERT_EQ(json.exit_code, 0) << json.err;
    auto decoded = DecodeTopologyJson(json.out);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message();
    EXPECT_EQ(decoded->Fingerprint(), expected->Fingerprint());
    EXPECT_EQ(decoded->gpu_gpu, expected->gpu_gpu);
    EXPECT_EQ(decoded->gpu_nic, expected->gpu_nic);
  }
  EXPECT_EQ(files, 40);
}

TEST(CliTest, TopoOnThisMachineAndSynthetic) {
  const CliRun live = Toposched("topo");
  ASSERT_EQ(live.exit_code, 0) << live.err;
  EXPECT_FALSE(live.out.empty());
  const CliRun synthetic = Toposched("topo --synthetic hgx-h100-8gpu");
  ASSERT_EQ(synthetic.exit_code, 0) << synthetic.err;
  EXPECT_NE(synthetic.out.find("GPU7\tNV18\t"), std::string::npos);
  const CliRun list = Toposched("topo --list-synthetic");
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.out.find("cloud-vm-8gpu"), std::string::npos);
}

TEST(CliTest, BundledExampleMatchesItsDocumentedMatrix) {
  const std::string example = std::string(TOPOSCHED_SOURCE_DIR) + "/examples/hgx-h100-8gpu.nccl.xml";
  const CliRun run = Toposched("topo --input " + Quote(example));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // GPU0 shares its PCIe switch with mlx5_0 and mlx5_1 (PIX), reaches the socket's other NICs
  // through the CPU (NODE) and the other socket's across UPI (SYS); NVSwitch gives NV18.
  EXPECT_NE(
      run.out.find(
          "GPU0\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tPIX\tPIX\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t"),
      std::string::npos)
      << run.out;
}

TEST(CliTest, AgentOnceWritesDecodableJsonAtomically) {
  const fs::path out =
      fs::temp_directory_path() / ("toposched-agent-" + std::to_string(::getpid()) + ".json");
  const CliRun run = Toposched("agent --once --synthetic cloud-vm-8gpu --node-name gpu-node-7 --output " +
                               Quote(out.string()));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(run.out.empty()) << "JSON goes to the file, logs to stderr";
  EXPECT_NE(run.err.find("node=gpu-node-7"), std::string::npos) << run.err;
  auto decoded = DecodeTopologyJson(testing::ReadFile(out));
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  EXPECT_EQ(decoded->node_name, "gpu-node-7");
  EXPECT_EQ(decoded->gpus.size(), 8u);
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
  fs::remove(out);

  const CliRun to_stdout = Toposched("agent --once --synthetic pcie-4gpu");
  ASSERT_EQ(to_stdout.exit_code, 0) << to_stdout.err;
  EXPECT_TRUE(DecodeTopologyJson(to_stdout.out).ok());
  const CliRun live = Toposched("agent --once");
  ASSERT_EQ(live.exit_code, 0) << live.err;
  auto live_topology = DecodeTopologyJson(live.out);
  ASSERT_TRUE(live_topology.ok()) << live_topology.error().message();
  EXPECT_EQ(live_topology->source, TopologySource::kHwloc);
}

struct ErrorCase {
  const char* name;
  std::string args;
  int exit_code;
  const char* stderr_contains;
};

TEST(CliTest, ErrorsAreClearAndNonZero) {
  const fs::path dir = fs::temp_directory_path() / ("toposched-cli-bad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return Quote((dir / name).string());
  };
  const std::vector<ErrorCase> cases = {
      {"empty file", "topo --input " + write("empty.xml", ""), 1, "empty.xml: the file is empty"},
      {"garbage", "topo --input " + write("garbage.bin", std::string("\x01\x02\x03\xff\xfe", 5)), 1,
       "binary data"},
      {"truncated", "topo --input " + write("cut.xml", "<topology version=\"2.0\"><object type=\"Machine\""),
       1, "cut.xml (hwloc XML): hwloc XML: an <object> tag is not closed (truncated file?)"},
      {"wrong root", "topo --input " + write("root.xml", "<svg></svg>"), 1, "unknown XML root element <svg>"},
      {"matrix file", "topo --input " + write("m.txt", "\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tPIX\t0-3\n"),
       1, "nvidia-smi topo -m"},
      {"missing file", "topo --input /nonexistent/topo.xml", 1, "/nonexistent/topo.xml: cannot open"},
      {"bad format flag", "topo --format yaml", 2, "--format must be text or json"},
      {"unknown flag", "topo --frobnicate", 2, "unknown flag '--frobnicate'"},
      {"missing value", "topo --input", 2, "--input needs a value"},
      {"both sources", "topo --input x --synthetic hgx-h100-8gpu", 2, "mutually exclusive"},
      {"unknown preset", "topo --synthetic nope", 2, "unknown synthetic preset"},
      {"agent without a node name", "agent --synthetic pcie-4gpu", 1, "NODE_NAME"},
      {"unknown command", "frobnicate", 2, "unknown command"},
      {"agent bad output dir", "agent --once --synthetic pcie-4gpu --output /nonexistent/dir/x.json", 1,
       "the directory /nonexistent/dir does not exist"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    const CliRun run = Toposched(c.args);
    EXPECT_EQ(run.exit_code, c.exit_code) << run.err;
    EXPECT_NE(run.err.find(c.stderr_contains), std::string::npos) << run.err;
  }
  fs::remove_all(dir);
}

TEST(CliTest, CpuOnlyMachineFileIsOneLineAndExitZero) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  const CliRun run = Toposched(
      "topo --input " + Quote(testing::SharedTopology("local__ci-sandbox_cpu-only.hwloc2.xml").string()));
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out.rfind("No GPUs found (hwloc-xml local__ci-sandbox_cpu-only.hwloc2.xml", 0), 0u)
      << run.out;
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1);
}

}  // namespace
}  // namespace toposched

namespace toposched {
namespace {

std::string Example(const std::string& name) {
  return Quote(std::string(TOPOSCHED_SOURCE_DIR) + "/examples/" + name);
}

// `place` on the bundled HGX file with half of it taken: the 4-GPU prefill pod gets the two free
// GPUs of switch 0000:37 and one free GPU on each of two other switches, each with the NIC beside
// it (PIX), so the worst class is PIX and the rank sum 4 x 1.
TEST(CliTest, PlaceJsonOnTheBundledExample) {
  const CliRun run = Toposched("place --topology " + Example("hgx-h100-8gpu.nccl.xml") + " --request " +
                               Example("pods/prefill-4gpu-rdma.json") + " --allocated " +
                               Example("allocated-half.json") + " --format json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* field : {"\"gpus\"", "\"nics\"", "\"pairs\"", "\"worstClass\": \"PIX\"", "\"classSum\": 4",
                            "\"score\"", "\"explanation\""}) {
    EXPECT_NE(run.out.find(field), std::string::npos) << field << " in " << run.out;
  }
  // GPUs 0, 1 and 4 and NICs mlx5_0, mlx5_1, mlx5_4 are taken: none of them may be handed out.
  EXPECT_EQ(run.out.find("\"mlx5_0\""), std::string::npos);
  EXPECT_EQ(run.out.find("\"index\": 0,"), std::string::npos);
}

TEST(CliTest, PlaceTextAndFailures) {
  const CliRun text = Toposched("place --topology " + Example("hgx-h100-8gpu.nccl.xml") + " --request " +
                                Example("pods/training-8gpu.json"));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("worst class: PIX, class sum: 8"), std::string::npos) << text.out;
  // The 8-GPU pod cannot fit next to three GPUs already taken.
  const CliRun full =
      Toposched("place --topology " + Example("hgx-h100-8gpu.nccl.xml") + " --request " +
                Example("pods/training-8gpu.json") + " --allocated " + Example("allocated-half.json"));
  EXPECT_EQ(full.exit_code, 1);
  EXPECT_NE(full.err.find("nothing fits"), std::string::npos) << full.err;
  EXPECT_NE(full.err.find("DeviceFit"), std::string::npos) << full.err;
  // The shared small model fits on a synthetic node whose GPU memory is known.
  const fs::path topo =
      fs::temp_directory_path() / ("toposched-place-" + std::to_string(::getpid()) + ".json");
  ASSERT_EQ(Toposched("agent --once --synthetic inference-4gpu --output " + Quote(topo.string())).exit_code,
            0);
  const CliRun shared = Toposched("place --topology " + Quote(topo.string()) + " --request " +
                                  Example("pods/small-model-shared.json"));
  EXPECT_EQ(shared.exit_code, 0) << shared.err;
  EXPECT_NE(shared.out.find("GPUs: GPU"), std::string::npos) << shared.out;
  fs::remove(topo);
  // Usage errors exit 2, bad inputs 1 with the file named.
  EXPECT_EQ(Toposched("place --request x.json").exit_code, 2);
  const CliRun bad_request = Toposched("place --topology " + Example("hgx-h100-8gpu.nccl.xml") +
                                       " --request " + Example("hgx-h100-8gpu.nccl.xml"));
  EXPECT_EQ(bad_request.exit_code, 1);
  EXPECT_NE(bad_request.err.find("hgx-h100-8gpu.nccl.xml"), std::string::npos) << bad_request.err;
}

// `place` on what kubectl prints: NodeTopologies as a List in YAML (`kubectl get ntopo -o yaml`),
// a Pod in YAML, and the node's pods as the allocation. An agent's document is wrapped the way
// the API server returns it; the JSON goes into YAML documents behind a comment, which yaml-cpp
// reads as flow-style YAML (strings quoted, as kubectl quotes them).
TEST(CliTest, PlaceReadsKubectlYaml) {
  const fs::path dir = fs::temp_directory_path() / ("toposched-place-yaml-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const CliRun agent = Toposched("agent --once --synthetic hgx-h100-8gpu --node-name gpu-a1");
  ASSERT_EQ(agent.exit_code, 0) << agent.err;
  nlohmann::json a1 = nlohmann::json::parse(agent.out), a2 = a1;
  a2["metadata"]["name"] = "gpu-a2";
  const nlohmann::json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", {a1, a2}}};
  std::ofstream(dir / "ntopo.yaml") << "# kubectl get ntopo -o yaml\n" << list.dump() << "\n";
  std::ofstream(dir / "pod.yaml") << "apiVersion: v1\nkind: Pod\nmetadata:\n  name: train\n  namespace: ml\n"
                                     "spec:\n  containers:\n  - name: c\n    resources:\n      limits:\n"
                                     "        nvidia.com/gpu: 4\n";
  // Another scheduler's pod holds 4 GPUs of gpu-a1 (counted on the last four); one on gpu-a2
  // does not count here.
  std::ofstream(dir / "pods.yaml")
      << "apiVersion: v1\nkind: List\nitems:\n"
         "- apiVersion: v1\n  kind: Pod\n  metadata: {name: other, namespace: ml, uid: u1}\n"
         "  spec:\n    nodeName: gpu-a1\n    containers:\n    - name: c\n"
         "      resources: {limits: {nvidia.com/gpu: \"4\"}}\n"
         "  status: {phase: Running}\n"
         "- apiVersion: v1\n  kind: Pod\n  metadata: {name: elsewhere, namespace: ml, uid: u2}\n"
         "  spec:\n    nodeName: gpu-a2\n    containers:\n    - name: c\n"
         "      resources: {limits: {nvidia.com/gpu: \"4\"}}\n"
         "  status: {phase: Running}\n";
  const std::string topology = " --topology " + Quote((dir / "ntopo.yaml").string());
  const std::string request = " --request " + Quote((dir / "pod.yaml").string());

  const CliRun ambiguous = Toposched("place" + topology + request);
  EXPECT_EQ(ambiguous.exit_code, 1);
  EXPECT_NE(ambiguous.err.find("2 NodeTopologies (gpu-a1, gpu-a2): pick one with --node NAME"),
            std::string::npos)
      << ambiguous.err;

  const CliRun run = Toposched("place" + topology + " --node gpu-a1" + request + " --allocated " +
                               Quote((dir / "pods.yaml").string()) + " --format=json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(
      run.err.find("0 pods with allocation records on gpu-a1, 1 without (counted on the last free devices); "
                   "1 on other nodes skipped"),
      std::string::npos)
      << run.err;
  const auto out = nlohmann::json::parse(run.out);
  EXPECT_EQ(out["node"], "gpu-a1");
  ASSERT_EQ(out["gpus"].size(), 4u);
  for (const auto& gpu : out["gpus"]) EXPECT_LT(gpu["index"].get<int>(), 4) << "GPUs 4-7 are the other pod's";
  fs::remove_all(dir);
}

// Each subcommand's help is generated from its flags: every flag is listed once (the agent's
// used to list --node-name twice), with its value name, and -h works too.
TEST(CliTest, HelpListsEveryFlagOnce) {
  for (const char* command : {"topo", "agent", "place", "simulate", "serve", "advise"}) {
    SCOPED_TRACE(command);
    const CliRun help = Toposched(std::string(command) + " --help");
    ASSERT_EQ(help.exit_code, 0) << help.err;
    EXPECT_EQ(help.out.rfind(std::string("usage: toposched ") + command, 0), 0u) << help.out;
    std::vector<std::string> flags;
    std::istringstream lines(help.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("  --", 0) == 0) flags.push_back(line.substr(2, line.find_first_of(" \t", 2) - 2));
    }
    EXPECT_GE(flags.size(), 3u) << help.out;
    std::vector<std::string> sorted = flags;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << help.out;
    EXPECT_EQ(Toposched(std::string(command) + " -h").out, help.out);
  }
}

}  // namespace
}  // namespace toposched
