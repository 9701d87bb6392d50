// `toposched place`: one node, one pod: which GPUs and NICs it gets, how the pairs connect, the
// node's score and why. Runs the same filter -> score path as the extender.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "commands.h"
#include "flags.h"
#include "place_inputs.h"
#include "plugins/registry.h"
#include "toposched/common/file.h"
#include "toposched/framework/config.h"
#include "toposched/framework/framework.h"
#include "toposched/placement/request.h"
#include "toposched/topology/json_codec.h"

namespace toposched::cmd {

namespace {

constexpr std::size_t kMaxSmallFileBytes = 4u << 20;

// The file's content, or an error that starts with its path.
Result<std::string> ReadSmallFile(const std::string& path, std::size_t limit = kMaxSmallFileBytes) {
  auto content = ReadFileBounded(path, limit);
  if (!content.ok()) return content.error().WithContext(path);
  return content;
}

std::string Name(const NodeTopology& t, int nic) {
  return t.nics[static_cast<std::size_t>(nic)].DisplayName();
}

nlohmann::json PlacementJson(const NodeTopology& t, const Placement& p, const framework::NodeScore& score,
                             const std::string& explanation) {
  using nlohmann::json;
  json gpus = json::array();
  for (int g : p.gpus) {
    gpus.push_back({{"index", g}, {"pciBusId", t.gpus[static_cast<std::size_t>(g)].pci_bus_id}});
  }
  json nics = json::array();
  for (int n : p.nics) {
    nics.push_back({{"name", Name(t, n)}, {"pciBusId", t.nics[static_cast<std::size_t>(n)].pci_bus_id}});
  }
  json pairs = json::array();
  for (const GpuNicPair& pair : p.pairs) {
    pairs.push_back(
        {{"gpu", pair.gpu}, {"nic", Name(t, pair.nic)}, {"class", std::string(ToString(pair.cls))}});
  }
  json parts = json::array();
  for (const framework::ScorePart& part : score.parts) {
    parts.push_back({{"plugin", part.plugin},
                     {"weight", part.weight},
                     {"score", part.score},
                     {"explanation", part.explanation}});
  }
  return {{"gpus", gpus},
          {"nics", nics},
          {"pairs", pairs},
          {"worstClass", p.pairs.empty() ? nullptr : json(std::string(ToString(p.worst_class)))},
          {"classSum", p.class_sum},
          {"bestPossibleWorstRank", p.best_possible_worst},
          {"score", score.total},
          {"scoreParts", parts},
          {"explanation", {{"node", explanation}, {"devices", p.reasons}}}};
}

void PrintText(const NodeTopology& t, const Placement& p, const framework::NodeScore& score) {
  std::printf("node %s: score %d/100\n", t.node_name.c_str(), score.total);
  std::printf("GPUs:");
  for (int g : p.gpus) std::printf(" GPU%d (%s)", g, t.gpus[static_cast<std::size_t>(g)].pci_bus_id.c_str());
  std::printf("\nNICs:");
  if (p.nics.empty()) std::printf(" none");
  for (int n : p.nics) std::printf(" %s", Name(t, n).c_str());
  std::printf("\n");
  if (!p.pairs.empty()) {
    std::printf("pairs:\n");
    for (const GpuNicPair& pair : p.pairs) {
      std::printf("  GPU%d -> %s  %s\n", pair.gpu, Name(t, pair.nic).c_str(),
                  std::string(ToString(pair.cls)).c_str());
    }
    std::printf("worst class: %s, class sum: %d\n", std::string(ToString(p.worst_class)).c_str(),
                p.class_sum);
  }
  // One column per figure, headed by what it counts; the plugin column as wide as its longest name.
  int name_width = static_cast<int>(std::string_view("plugin").size());
  for (const framework::ScorePart& part : score.parts) {
    name_width = std::max(name_width, static_cast<int>(part.plugin.size()));
  }
  std::printf("score (each plugin's 0-100, weighted into the node's score):\n");
  std::printf("  %-*s  weight  score  why\n", name_width, "plugin");
  for (const framework::ScorePart& part : score.parts) {
    std::printf("  %-*s  %6d  %5d  %s\n", name_width, part.plugin.c_str(), part.weight, part.score,
                part.explanation.c_str());
  }
  std::printf("devices:\n");
  for (const std::string& reason : p.reasons) std::printf("  %s\n", reason.c_str());
}

}  // namespace

int RunPlace(const std::vector<std::string>& args) {
  std::string topology_path, request_path, allocated_path, config_path, node_name, format = "text";
  bool json = false;
  FlagSet flags(
      "place",
      "toposched place --topology FILE --request POD [--allocated FILE] [--node NAME]\n"
      "                       [--config CONFIG.yaml] [--format text|json]",
      "Chooses the GPUs and RDMA NICs a pod gets on one node and explains the choice: the GPU->NIC\n"
      "pairs with their link classes, the worst class, the sum of class ranks, the node score\n"
      "(0-100) and how each plugin made it up. Exits 1 with the reason when nothing fits.\n"
      "Files are JSON or YAML as kubectl prints them, so a live node can be asked directly:\n"
      "  kubectl get ntopo NODE -o yaml > ntopo.yaml\n"
      "  kubectl get node NODE -o yaml > alloc.yaml; echo --- >> alloc.yaml\n"
      "  kubectl get pods -A --field-selector spec.nodeName=NODE -o yaml >> alloc.yaml\n"
      "  toposched place --topology ntopo.yaml --allocated alloc.yaml --request pod.yaml");
  flags.Group("inputs");
  flags.Text("--topology", topology_path, "FILE",
             "the node: hwloc XML, NCCL XML, NodeTopology JSON, or `kubectl get ntopo\n"
             "-o yaml|json` output (one object or a List)");
  flags.Text("--node", node_name, "NAME", "the NodeTopology to use when --topology holds several");
  flags.Text("--request", request_path, "POD", "a Kubernetes Pod object (JSON or YAML)");
  flags.Text("--allocated", allocated_path, "FILE",
             "what is already taken on the node. Either the node's pods (and Node)\n"
             "as kubectl prints them: each active pod's toposched.io/allocation or\n"
             "HAMi device list counts, pods without one on the last free devices;\n"
             "or {\"exclusiveGpus\": [0, \"0000:4e:00.0\"], \"usedNics\": [\"mlx5_0\"],\n"
             "\"sharedGpus\": [{\"gpu\": 3, \"shares\": 1, \"memoryMiB\": 8000,\n"
             "\"coresPercent\": 30}]}");
  flags.Text("--config", config_path, "FILE", "scheduler configuration YAML (docs/configuration.md)");
  flags.Group("output");
  flags.Choice("--format", format, {"text", "json"}, "output format");
  flags.Switch("--json", json, "the same as --format json");
  if (const auto exit_code = flags.Parse(args)) return *exit_code;
  if (json) format = "json";
  if (topology_path.empty() || request_path.empty()) {
    return flags.UsageError("--topology and --request are required");
  }
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "toposched place: %s\n", message.c_str());
    return 1;
  };

  const framework::Registry registry = plugins::BuiltinRegistry();
  framework::SchedulerConfig config = plugins::DefaultSchedulerConfig();
  if (!config_path.empty()) {
    auto yaml = ReadSmallFile(config_path);
    if (!yaml.ok()) return fail(yaml.error().message());
    auto loaded = framework::LoadSchedulerConfigYaml(*yaml, registry);
    if (!loaded.ok()) return fail(config_path + ": " + loaded.error().message());
    config = std::move(*loaded);
  }
  auto topology_text = ReadSmallFile(topology_path, kMaxTopologyJsonBytes);
  if (!topology_text.ok()) return fail(topology_text.error().message());
  auto topology = ReadPlaceTopology(topology_path, *topology_text, node_name);
  if (!topology.ok()) return fail(topology.error().message());
  auto pod_text = ReadSmallFile(request_path);
  if (!pod_text.ok()) return fail(pod_text.error().message());
  auto pod = ReadPodJson(*pod_text);
  if (!pod.ok()) return fail(request_path + ": " + pod.error().message());
  auto request = ParsePodRequest(*pod, config.request);
  if (!request.ok()) return fail(request_path + ": " + request.error().message());
  if (request->gpus == 0 && request->rdma_nics == 0 && !request->IsShared()) {
    return fail(request_path + ": the pod requests no GPUs, shared GPUs or RDMA NICs; nothing to place");
  }

  NodeAllocation allocated;
  if (!allocated_path.empty()) {
    auto text = ReadSmallFile(allocated_path, kMaxTopologyJsonBytes);
    if (!text.ok()) return fail(text.error().message());
    auto read = ReadPlaceAllocations(*text, *topology, config.request);
    if (!read.ok()) return fail(allocated_path + ": " + read.error().message());
    for (const std::string& note : read->notes) std::fprintf(stderr, "toposched place: %s\n", note.c_str());
    allocated = std::move(read->allocated);
  }
  framework::NodeInfo node;
  node.name = topology->node_name;
  node.topology = std::make_shared<const NodeTopology>(std::move(*topology));
  node.allocated = std::move(allocated);
  const NodeTopology& t = *node.topology;

  auto fw = framework::Framework::Create(config, registry);
  if (!fw.ok()) return fail("configuration: " + fw.error().message());
  framework::CycleState cycle = fw->NewCycle(*request);
  const framework::FilterResult filter = fw->RunFilter(cycle, node);
  if (!filter.ok()) {
    const std::string line = framework::ExplainNode(node.name, filter, nullptr);
    if (format == "json") {
      std::printf("%s\n",
                  nlohmann::json({{"fits", false}, {"explanation", {{"node", line}}}}).dump(2).c_str());
    }
    return fail("nothing fits: " + line);
  }
  const framework::NodeScore score = fw->RunScore(cycle, node);
  const PlacementOutcome& outcome = cycle.Outcome(node);
  if (!outcome.ok()) return fail("nothing fits: " + outcome.detail);  // a filter config without DeviceFit
  const std::string explanation = framework::ExplainNode(node.name, filter, &score);
  if (format == "json") {
    nlohmann::json out = PlacementJson(t, *outcome.placement, score, explanation);
    out["fits"] = true;
    out["node"] = node.name;
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    PrintText(t, *outcome.placement, score);
  }
  return 0;
}

}  // namespace toposched::cmd
