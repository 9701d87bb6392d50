// What `toposched place` reads: kubectl's JSON and YAML (one object, Lists, streams), NodeTopology
// objects as `kubectl get ntopo -o yaml` prints them, Pods in YAML, and the node's allocations
// from its pods' records (place_inputs.h).

#include "place_inputs.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "toposched/kube/objects.h"
#include "toposched/topology/synthetic.h"

namespace toposched::cmd {
namespace {

using nlohmann::json;

NodeTopology Synthetic(const std::string& preset, const std::string& name) {
  auto topology = GenerateSynthetic(*SyntheticPreset(preset));
  EXPECT_TRUE(topology.ok());
  topology->node_name = name;
  return *topology;
}

// The object the agent publishes, as the API server returns it.
json Published(const NodeTopology& t) {
  return kube::NodeTopologyObject(t, t.node_name, "uid-" + t.node_name, 3,
                                  std::chrono::system_clock::time_point(std::chrono::seconds(1'800'000'000)));
}

// JSON inside a YAML document: a leading comment keeps it off the JSON path, so yaml-cpp reads it
// (flow style, quoted strings) the way it reads kubectl's block style.
std::string AsYaml(const json& value) {
  return "# kubectl get ntopo -o yaml\n" + value.dump();
}

TEST(ReadKubeObjects, YamlScalarsKeepTheirTypes) {
  const auto objects = ReadKubeObjects(
      "kind: Pod\n"
      "metadata: {name: p}\n"
      "n: 8\n"
      "s: \"8\"\n"
      "b: true\n"
      "q: 'true'\n"
      "z: ~\n"
      "f: 1.5\n"
      "bus: 0000:18:00.0\n"
      "list: [1, two]\n");
  ASSERT_TRUE(objects.ok()) << objects.error().message();
  ASSERT_EQ(objects->size(), 1u);
  const json& o = objects->front();
  EXPECT_EQ(o["n"], 8);
  EXPECT_EQ(o["s"], "8");  // quoted: a string, as kubectl quotes it
  EXPECT_EQ(o["b"], true);
  EXPECT_EQ(o["q"], "true");
  EXPECT_TRUE(o["z"].is_null());
  EXPECT_EQ(o["f"], 1.5);
  EXPECT_EQ(o["bus"], "0000:18:00.0");
  EXPECT_EQ(o["list"], json::parse(R"([1, "two"])"));
}

TEST(ReadKubeObjects, ListsStreamsAndArraysFlatten) {
  struct Case {
    const char* name;
    std::string text;
    std::size_t objects;  // 0: an error
  };
  for (const Case& c : std::vector<Case>{
           {"List", "apiVersion: v1\nkind: List\nitems:\n- kind: Pod\n- kind: Pod\n", 2},
           {"typed list", R"({"kind": "NodeTopologyList", "items": [{"kind": "NodeTopology"}]})", 1},
           {"empty list", "kind: List\nitems: []\n", 0 + 0},
           {"stream", "kind: Pod\n---\nkind: Node\n---\n", 2},
           {"json array", R"([{"kind": "Pod"}, {"kind": "Pod"}, {"kind": "Pod"}])", 3},
       }) {
    SCOPED_TRACE(c.name);
    const auto objects = ReadKubeObjects(c.text);
    ASSERT_TRUE(objects.ok()) << objects.error().message();
    EXPECT_EQ(objects->size(), c.objects);
  }
  for (const char* bad : {"{not json", "a: [unclosed", "", "42", "- 1\n- 2\n"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(ReadKubeObjects(bad).ok());
  }
  // Deep nesting is refused before any parser recurses (it crashed nlohmann's at 100,000).
  const std::string deep_json = std::string(100'000, '[') + std::string(100'000, ']');
  const auto deep = ReadKubeObjects(deep_json);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.error().message().find("nested deeper than 256 levels"), std::string::npos);
  EXPECT_FALSE(ReadKubeObjects("# yaml\n" + std::string(10'000, '[') + std::string(10'000, ']')).ok());
  const std::string deep_yaml = [] {
    std::string out, indent;
    for (int i = 0; i < 300; ++i, indent += " ") out += indent + "k:\n";
    return out + indent + "v\n";
  }();
  EXPECT_FALSE(ReadKubeObjects(deep_yaml).ok());
}

TEST(ReadPlaceTopology, KubectlObjectsOneOrAList) {
  const NodeTopology a = Synthetic("hgx-h100-8gpu", "gpu-a"), b = Synthetic("pcie-4gpu", "gpu-b");
  const json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", {Published(a), Published(b)}}};

  const auto one = ReadPlaceTopology("a.yaml", AsYaml(Published(a)), "");
  ASSERT_TRUE(one.ok()) << one.error().message();
  EXPECT_EQ(one->node_name, "gpu-a");
  EXPECT_EQ(one->Fingerprint(), a.Fingerprint());

  const auto ambiguous = ReadPlaceTopology("all.yaml", AsYaml(list), "");
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_NE(ambiguous.error().message().find("2 NodeTopologies (gpu-a, gpu-b): pick one with --node"),
            std::string::npos)
      << ambiguous.error().message();

  for (const std::string& text : {AsYaml(list), list.dump()}) {
    const auto picked = ReadPlaceTopology("all", text, "gpu-b");
    ASSERT_TRUE(picked.ok()) << picked.error().message();
    EXPECT_EQ(picked->Fingerprint(), b.Fingerprint());
  }
  const auto missing = ReadPlaceTopology("all.yaml", AsYaml(list), "gpu-z");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("no NodeTopology named gpu-z"), std::string::npos);

  json created = Published(a);
  created.erase("status");
  const auto no_status = ReadPlaceTopology("c.yaml", AsYaml(created), "");
  ASSERT_FALSE(no_status.ok());
  EXPECT_NE(no_status.error().message().find("has no status yet"), std::string::npos);

  const auto pods = ReadPlaceTopology("p.yaml", "kind: Pod\nmetadata: {name: p}\n", "");
  ASSERT_FALSE(pods.ok());
  EXPECT_NE(pods.error().message().find("p.yaml: no NodeTopology in it (found Pod)"), std::string::npos)
      << pods.error().message();
}

TEST(ReadPodJson, YamlPodBecomesTheJsonParsePodRequestReads) {
  const auto pod = ReadPodJson(
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: train\n  namespace: ml\nspec:\n  containers:\n"
      "  - name: c\n    resources:\n      limits:\n        nvidia.com/gpu: 4\n        rdma/ib: \"2\"\n");
  ASSERT_TRUE(pod.ok()) << pod.error().message();
  const auto request = ParsePodRequest(*pod);
  ASSERT_TRUE(request.ok()) << request.error().message();
  EXPECT_EQ(request->gpus, 4);
  EXPECT_EQ(request->rdma_nics, 2);
  EXPECT_FALSE(ReadPodJson("kind: Pod\n---\nkind: Pod\n").ok());
}

// A pod as the API server returns it: bound to `node`, Running, with `annotations`.
json Pod(const std::string& name, const std::string& node, const json& annotations,
         const std::string& phase = "Running", int gpus = 0) {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", name}, {"namespace", "ml"}, {"uid", "uid-" + name}, {"annotations", annotations}}},
              {"spec", {{"nodeName", node}, {"containers", json::array({{{"name", "c"}}})}}},
              {"status", {{"phase", phase}}}};
  if (gpus > 0)
    pod["spec"]["containers"][0]["resources"] = {{"limits", {{"nvidia.com/gpu", std::to_string(gpus)}}}};
  return pod;
}

TEST(ReadPlaceAllocations, PodsRecordsOnThisNodeCountOthersDoNot) {
  NodeTopology t = Synthetic("hgx-h100-8gpu", "gpu-a");
  state::PodAllocation bound;
  bound.uid = "uid-bound";
  bound.node = "gpu-a";
  bound.delta.exclusive_gpus = {0, 1};
  bound.delta.nics = {0};
  const kube::AllocationAnnotations record = kube::EncodeAllocation(bound, t, "toposched");
  const json annotations = {{std::string(kube::kAllocationAnnotation), record.allocation}};
  const json list = {
      {"kind", "List"},
      {"items",
       {Pod("bound", "gpu-a", annotations),
        Pod("finished", "gpu-a", {{std::string(kube::kAllocationAnnotation), record.allocation}},
            "Succeeded"),
        Pod("elsewhere", "gpu-b", annotations),
        // Another scheduler's pod: 2 GPUs, no record: counted on the last two free GPUs (6, 7).
        Pod("foreign", "gpu-a", json::object(), "Running", 2)}}};
  const auto read = ReadPlaceAllocations(AsYaml(list), t, RequestConfig{});
  ASSERT_TRUE(read.ok()) << read.error().message();
  const std::vector<bool> expected_gpus = {true, true, false, false, false, false, true, true};
  EXPECT_EQ(read->allocated.gpu_exclusive, expected_gpus);
  ASSERT_FALSE(read->allocated.nic_used.empty());
  EXPECT_TRUE(read->allocated.nic_used[0]);
  ASSERT_EQ(read->notes.size(), 1u);
  EXPECT_EQ(read->notes[0],
            "1 pods with allocation records on gpu-a, 1 without (counted on the last free devices); "
            "1 on other nodes skipped; 1 finished skipped");

  // Two pods on one device: the records contradict each other; never a guess.
  const json twice = {{"kind", "List"},
                      {"items", {Pod("one", "gpu-a", annotations), Pod("two", "gpu-a", annotations)}}};
  const auto conflict = ReadPlaceAllocations(twice.dump(), t, RequestConfig{});
  ASSERT_FALSE(conflict.ok());
  EXPECT_NE(conflict.error().message().find("pod ml/two"), std::string::npos) << conflict.error().message();

  const auto broken = ReadPlaceAllocations(
      json(Pod("bad", "gpu-a", {{std::string(kube::kAllocationAnnotation), "{not json"}})).dump(), t,
      RequestConfig{});
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().message().find("pod ml/bad toposched.io/allocation"), std::string::npos)
      << broken.error().message();
}

// HAMi's AMD registration on the Node and AMD records on pods HAMi's own scheduler placed are
// read as the extender reads them (kube::ApplyHamiAmdRegister, kube::DeltaFromHami for AMD).
TEST(ReadPlaceAllocations, HamisAmdRegistrationAndRecords) {
  NodeTopology t = Synthetic("hgx-h100-8gpu", "amd-a");
  for (Gpu& g : t.gpus) g.vendor = GpuVendor::kAmd;
  json reg = json::array();
  for (const Gpu& g : t.gpus) {
    if (g.index == 7) continue;  // card 7 not registered: unusable
    reg.push_back({{"id", "amd-" + std::to_string(g.index)},
                   {"devmem", 196288},
                   {"devcore", 304},
                   {"health", true},
                   {"custominfo", {{"pciBDF", g.pci_bus_id}}}});
  }
  json node = {
      {"kind", "Node"},
      {"metadata",
       {{"name", "amd-a"}, {"uid", "n-1"}, {"annotations", {{"hami.io/node-amd-register", reg.dump()}}}}}};
  // A whole card and half of another (152 of 304 compute units).
  json pod = Pod("hami-amd", "amd-a",
                 {{"hami.io/amd-devices-allocated", "amd-0,AMD,196288,304:amd-1,AMD,1000,152:;"}});
  const auto read =
      ReadPlaceAllocations(json{{"kind", "List"}, {"items", {node, pod}}}.dump(), t, RequestConfig{});
  ASSERT_TRUE(read.ok()) << read.error().message();
  EXPECT_TRUE(read->allocated.gpu_exclusive[0]);
  EXPECT_FALSE(read->allocated.gpu_exclusive[1]);
  EXPECT_EQ(read->allocated.gpu_shares[1], (GpuShareUsage{1, 1000, 5000}));
  EXPECT_EQ(t.gpus[1].hami_amd->id, "amd-1");
  EXPECT_NE(t.gpus[7].unusable.find("not in HAMi's AMD registration"), std::string::npos)
      << t.gpus[7].unusable;
  EXPECT_EQ(read->notes[0], "node amd-a: 7 AMD GPUs from HAMi's AMD registration (the others unusable)");

  // An unreadable AMD registration is an error, not a guess.
  node["metadata"]["annotations"]["hami.io/node-amd-register"] = "GPU-a,10,1,1,T,0,true:";
  const auto bad = ReadPlaceAllocations(json{{"kind", "List"}, {"items", {node}}}.dump(), t, RequestConfig{});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("node amd-a: hami.io/node-amd-register"), std::string::npos)
      << bad.error().message();
}

TEST(ReadPlaceAllocations, TheAllocJsonFormInJsonOrYaml) {
  NodeTopology t = Synthetic("hgx-h100-8gpu", "gpu-a");
  for (const std::string text : {std::string(R"({"exclusiveGpus": [3], "usedNics": []})"),
                                 std::string("exclusiveGpus: [3]\nusedNics: []\n")}) {
    SCOPED_TRACE(text);
    const auto read = ReadPlaceAllocations(text, t, RequestConfig{});
    ASSERT_TRUE(read.ok()) << read.error().message();
    ASSERT_GT(read->allocated.gpu_exclusive.size(), 3u);
    EXPECT_TRUE(read->allocated.gpu_exclusive[3]);
    EXPECT_FALSE(read->allocated.gpu_exclusive[0]);
  }
  EXPECT_FALSE(ReadPlaceAllocations("exclusiveGPUs: [3]\n", t, RequestConfig{}).ok());  // misspelt key
  EXPECT_FALSE(ReadPlaceAllocations("kind: ConfigMap\nmetadata: {name: x}\n", t, RequestConfig{}).ok());
}

}  // namespace
}  // namespace toposched::cmd
