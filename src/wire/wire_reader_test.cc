// WireReader against bodies shaped as Go's encoding/json marshals the upstream types: PascalCase
// wrapper keys in struct field order, null for nil pointers/slices/maps, camelCase inside v1.Pod
// and v1.Node, no whitespace; Volcano's lowerCamel wrapper keys around PascalCase TaskInfo and
// NodeInfo, floats written as Go writes them (4000, 34359738368).

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/wire/wire.h"

namespace toposched::extender {
namespace {

// A pending v1.Pod as the API server sends it (TypeMeta empty, so no kind/apiVersion). The
// annotation holds escaped JSON, as kubectl apply leaves it.
constexpr std::string_view kPod =
    R"({"metadata":{"name":"trainer-0","namespace":"ml","uid":"7c0d3e4a-1b2c-4d5e-8f90-a1b2c3d4e5f6",)"
    R"("resourceVersion":"4711","creationTimestamp":"2026-12-02T10:00:00Z","labels":{"app":"trainer"},)"
    R"("annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"apiVersion\":\"v1\",)"
    R"(\"kind\":\"Pod\",\"metadata\":{\"name\":\"trainer-0\"}}\n"}},"spec":{"containers":[{"name":"main",)"
    R"("image":"nvcr.io/nvidia/pytorch:24.05-py3","resources":{"limits":{"nvidia.com/gpu":"8"},)"
    R"("requests":{"cpu":"4","memory":"32Gi","nvidia.com/gpu":"8"}},"terminationMessagePath":)"
    R"("/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],)"
    R"("restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst",)"
    R"("securityContext":{},"schedulerName":"default-scheduler","tolerations":[{"key":)"
    R"("node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],)"
    R"("priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},)"
    R"("status":{"phase":"Pending","qosClass":"Burstable"}})";

// A v1.Node with the fields a real one carries.
std::string Node(std::string_view name) {
  const std::string n(name);
  return R"({"metadata":{"name":")" + n + R"(","uid":"node-uid-)" + n +
         R"(","resourceVersion":"99","creationTimestamp":"2026-11-01T00:00:00Z","labels":)"
         R"({"kubernetes.io/hostname":")" +
         n +
         R"(","nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"},)"
         R"("annotations":{"node.alpha.kubernetes.io/ttl":"0"}},"spec":{"podCIDR":"10.0.1.0/24",)"
         R"("taints":[{"key":"nvidia.com/gpu","effect":"NoSchedule"}]},"status":{"capacity":{"cpu":"224",)"
         R"("memory":"2113404184Ki","nvidia.com/gpu":"8","pods":"110"},"allocatable":{"cpu":"220",)"
         R"("memory":"2100000000Ki","nvidia.com/gpu":"8","pods":"110"},"conditions":[{"type":"Ready",)"
         R"("status":"True","lastHeartbeatTime":"2026-12-02T10:00:00Z","lastTransitionTime":)"
         R"("2026-11-01T00:00:00Z","reason":"KubeletReady","message":"kubelet is posting ready status"}],)"
         R"("addresses":[{"type":"InternalIP","address":"10.0.1.5"},{"type":"Hostname","address":")" +
         n +
         R"("}],"daemonEndpoints":{"kubeletEndpoint":{"Port":10250}},"nodeInfo":{"machineID":"abc",)"
         R"("kubeletVersion":"v1.31.0","architecture":"amd64"},"images":[{"names":)"
         R"(["nvcr.io/nvidia/pytorch:24.05-py3"],"sizeBytes":21474836480}]}})";
}

std::string NamesArgs(const std::vector<std::string>& names) {
  std::string body = R"({"Pod":)" + std::string(kPod) + R"(,"Nodes":null,"NodeNames":[)";
  for (std::size_t i = 0; i < names.size(); ++i) body += (i ? ",\"" : "\"") + names[i] + "\"";
  return body + "]}";
}

std::string NodesArgs(const std::vector<std::string>& names) {
  std::string body = R"({"Pod":)" + std::string(kPod) + R"(,"Nodes":{"metadata":{},"items":[)";
  for (std::size_t i = 0; i < names.size(); ++i) body += (i ? "," : "") + Node(names[i]);
  return body + R"(]},"NodeNames":null})";
}

// Volcano api.TaskInfo in Go's field order (job_info.go), Resreq in milli-units.
std::string Task(std::string_view uid, std::string_view node_name = "", std::string_view pod = kPod) {
  const std::string u(uid), nn(node_name);
  return R"({"UID":")" + u +
         R"(","Job":"ml/pg-trainer","Name":"trainer-0","Namespace":"ml",)"
         R"("TaskRole":"worker","Resreq":{"MilliCPU":4000,"Memory":34359738368,"ScalarResources":)"
         R"({"nvidia.com/gpu":2000,"pods":1},"MaxTaskNum":0},"InitResreq":{"MilliCPU":4000,)"
         R"("Memory":34359738368,"ScalarResources":{"nvidia.com/gpu":2000,"pods":1},"MaxTaskNum":0},)"
         R"("NodeName":")" +
         nn + R"(","EvictionOccurred":false,"JobAllocatedHyperNode":"","Status":)" +
         (nn.empty() ? "1" : "2") +
         R"(,"LastTransaction":null,"Priority":0,"VolumeReady":false,"Preemptable":false,)"
         R"("BestEffort":false,"HasRestartableInitContainer":false,"SchGated":false,"RevocableZone":"",)"
         R"("NumaInfo":null,"Pod":)" +
         std::string(pod) + R"(,"PodAnnotations":null,"CustomBindErrHandlerSucceeded":false})";
}

// Volcano api.NodeInfo (node_info.go), the parts a real one always has.
std::string VolcanoNode(std::string_view name) {
  const std::string n(name);
  return R"({"Name":")" + n + R"(","Node":)" + Node(name) +
         R"(,"State":{"Phase":1,"Reason":""},"Releasing":{"MilliCPU":0,"Memory":0,"ScalarResources":null,)"
         R"("MaxTaskNum":0},"Idle":{"MilliCPU":220000,"Memory":1000000000000,"ScalarResources":)"
         R"({"nvidia.com/gpu":8000,"pods":110000},"MaxTaskNum":110},"Used":{"MilliCPU":0,"Memory":0,)"
         R"("ScalarResources":null,"MaxTaskNum":0},"Tasks":{},"NumaInfo":null,"Others":null,"Generation":3})";
}

// ---- ExtenderArgs ----

TEST(ReadExtenderArgsTest, NodeNamesMode) {
  WireReader reader;
  const std::string body = NamesArgs({"gpu-a", "gpu-b", "gpu-c"});
  Result<ExtenderArgsView> a = reader.ReadExtenderArgs(body);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->pod.raw, kPod);
  EXPECT_EQ(a->pod.uid, "7c0d3e4a-1b2c-4d5e-8f90-a1b2c3d4e5f6");
  EXPECT_EQ(a->pod.pod_namespace, "ml");
  EXPECT_EQ(a->pod.name, "trainer-0");
  EXPECT_EQ(a->pod.resource_version, "4711");
  EXPECT_TRUE(a->node_names_given);
  EXPECT_FALSE(a->nodes_given);
  ASSERT_EQ(a->nodes.size(), 3u);
  EXPECT_EQ(a->nodes[0].name, "gpu-a");
  EXPECT_EQ(a->nodes[2].name, "gpu-c");
  EXPECT_TRUE(a->nodes[1].raw.empty());  // names mode carries no node objects
}

TEST(ReadExtenderArgsTest, NodesMode) {
  WireReader reader;
  const std::string body = NodesArgs({"gpu-a", "gpu-b"});
  Result<ExtenderArgsView> a = reader.ReadExtenderArgs(body);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_FALSE(a->node_names_given);
  EXPECT_TRUE(a->nodes_given);
  ASSERT_EQ(a->nodes.size(), 2u);
  EXPECT_EQ(a->nodes[0].name, "gpu-a");
  EXPECT_EQ(a->nodes[1].name, "gpu-b");
  // The raw text is echoed back in the reply: it must be the item exactly as sent.
  EXPECT_EQ(a->nodes[0].raw, Node("gpu-a"));
  EXPECT_EQ(a->nodes[1].raw, Node("gpu-b"));
  EXPECT_EQ(a->pod.raw, kPod);
}

TEST(ReadExtenderArgsTest, RawTextExcludesSurroundingWhitespace) {
  // Pretty-printed bodies (a hand-written test client): the raw text starts at '{' and ends at
  // '}', whatever whitespace surrounds it.
  const std::string pod = "{ \"metadata\" : { \"uid\" : \"u1\" } }";
  const std::string node = "{\n  \"metadata\": {\"name\": \"n1\"}\n}";
  const std::string body =
      "{\n  \"Pod\" :  " + pod + " \n ,\n \"Nodes\": {\"items\": [ " + node + " \t\r\n ]}\n}\n";
  WireReader reader;
  Result<ExtenderArgsView> a = reader.ReadExtenderArgs(body);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->pod.raw, pod);
  EXPECT_EQ(a->pod.uid, "u1");
  ASSERT_EQ(a->nodes.size(), 1u);
  EXPECT_EQ(a->nodes[0].raw, node);
}

TEST(ReadExtenderArgsTest, CandidateListShapes) {
  const std::string pod = R"({"Pod":{"metadata":{"uid":"u"}})";
  struct Case {
    const char* name;
    std::string body;
    bool names_given, nodes_given;
    std::size_t count;
  };
  const std::vector<Case> cases = {
      {"both null", pod + R"(,"Nodes":null,"NodeNames":null})", false, false, 0},
      {"both absent", pod + "}", false, false, 0},
      {"empty names", pod + R"(,"Nodes":null,"NodeNames":[]})", true, false, 0},
      {"empty items", pod + R"(,"Nodes":{"metadata":{},"items":[]},"NodeNames":null})", false, true, 0},
      {"null items", pod + R"(,"Nodes":{"metadata":{},"items":null}})", false, true, 0},
      {"list without items", pod + R"(,"Nodes":{}})", false, true, 0},
      // Both given (never sent): the names win, whichever comes first.
      {"both, names last", pod + R"(,"Nodes":{"items":[{"metadata":{"name":"x"}}]},"NodeNames":["a","b"]})",
       true, true, 2},
      {"both, names first", pod + R"(,"NodeNames":["a","b"],"Nodes":{"items":[{"metadata":{"name":"x"}}]}})",
       true, true, 2},
  };
  WireReader reader;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<ExtenderArgsView> a = reader.ReadExtenderArgs(c.body);
    ASSERT_TRUE(a.ok()) << a.error().message();
    EXPECT_EQ(a->node_names_given, c.names_given);
    EXPECT_EQ(a->nodes_given, c.nodes_given);
    EXPECT_EQ(a->nodes.size(), c.count);
    if (c.count == 2) {
      EXPECT_EQ(a->nodes[1].name, "b");
    }
  }
}

TEST(ReadExtenderArgsTest, UnknownFieldsAreIgnoredAtEveryLevel) {
  // Every kind of value under an unknown key, at the top, in the Pod, in its metadata, in the
  // NodeList, in an item and in the item's metadata.
  const std::string junk = R"({"a":[1,-2.5e3,true,false,null,"s\u00e9\n",{"b":{}}],"c":[]})";
  const std::string body =
      R"({"Future":)" + junk + R"(,"Pod":{"kind":"Pod","x":)" + junk + R"(,"metadata":{"y":)" + junk +
      R"(,"uid":"u1","z":7}},"Nodes":{"kind":"NodeList","w":)" + junk + R"(,"items":[{"v":)" + junk +
      R"(,"metadata":{"name":"n1","t":)" + junk + R"(}}]},"Later":[[[]]],"Last":"x"})";
  WireReader reader;
  Result<ExtenderArgsView> a = reader.ReadExtenderArgs(body);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->pod.uid, "u1");
  ASSERT_EQ(a->nodes.size(), 1u);
  EXPECT_EQ(a->nodes[0].name, "n1");
}

TEST(ReadExtenderArgsTest, MissingOptionalFieldsReadAsEmpty) {
  struct Case {
    const char* name;
    std::string pod;
  };
  const std::vector<Case> cases = {
      {"no metadata", R"({"spec":{}})"},
      {"null metadata", R"({"metadata":null})"},
      {"empty metadata", R"({"metadata":{}})"},
      {"null fields", R"({"metadata":{"uid":null,"name":null,"namespace":null,"resourceVersion":null}})"},
      {"empty pod", "{}"},
  };
  WireReader reader;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<ExtenderArgsView> a = reader.ReadExtenderArgs(R"({"Pod":)" + c.pod + R"(,"NodeNames":["n"]})");
    ASSERT_TRUE(a.ok()) << a.error().message();
    EXPECT_EQ(a->pod.raw, c.pod);
    EXPECT_TRUE(a->pod.uid.empty());
    EXPECT_TRUE(a->pod.name.empty());
    EXPECT_TRUE(a->pod.pod_namespace.empty());
    EXPECT_TRUE(a->pod.resource_version.empty());
  }
}

struct ErrorCase {
  const char* name;
  std::string body;
  std::string message;  // the exact message
};

TEST(ReadExtenderArgsTest, WrongTypesNameTheirPath) {
  const std::string pod = R"({"Pod":{"metadata":{"uid":"u"}})";
  const std::vector<ErrorCase> cases = {
      {"name is a number", pod + R"(,"NodeNames":["a","b","c",42]})",
       "ExtenderArgs.NodeNames[3]: expected a string, got 42"},
      {"name is null", pod + R"(,"NodeNames":["a",null]})",
       "ExtenderArgs.NodeNames[1]: expected a string, got null"},
      {"name is an object", pod + R"(,"NodeNames":[{}]})",
       "ExtenderArgs.NodeNames[0]: expected a string, got an object"},
      {"names is an object", pod + R"(,"NodeNames":{"a":1}})",
       "ExtenderArgs.NodeNames: expected an array, got an object"},
      {"names is a string", pod + R"(,"NodeNames":"a,b"})",
       R"(ExtenderArgs.NodeNames: expected an array, got "a,b")"},
      {"pod is a string", R"({"Pod":"trainer-0"})",
       R"(ExtenderArgs.Pod: expected an object, got "trainer-0")"},
      {"pod missing", R"({"NodeNames":["a"]})", "ExtenderArgs.Pod: missing"},
      {"pod null", R"({"Pod":null,"NodeNames":["a"]})", "ExtenderArgs.Pod: missing"},
      {"metadata is an array", R"({"Pod":{"metadata":[]}})",
       "ExtenderArgs.Pod.metadata: expected an object, got an array"},
      {"uid is a number", R"({"Pod":{"metadata":{"uid":12}}})",
       "ExtenderArgs.Pod.metadata.uid: expected a string, got 12"},
      {"name is true", R"({"Pod":{"metadata":{"name":true}}})",
       "ExtenderArgs.Pod.metadata.name: expected a string, got true"},
      {"nodes is an array", pod + R"(,"Nodes":[]})", "ExtenderArgs.Nodes: expected an object, got an array"},
      {"items is an object", pod + R"(,"Nodes":{"items":{}}})",
       "ExtenderArgs.Nodes.items: expected an array, got an object"},
      {"item is a string", pod + R"(,"Nodes":{"items":[{"metadata":{"name":"a"}},"b"]}})",
       R"(ExtenderArgs.Nodes.items[1]: expected an object, got "b")"},
      {"item name is a number", pod + R"(,"Nodes":{"items":[{"metadata":{"name":5}}]}})",
       "ExtenderArgs.Nodes.items[0].metadata.name: expected a string, got 5"},
      {"item without name", pod + R"(,"Nodes":{"items":[{"metadata":{"name":"a"}},{"metadata":{}}]}})",
       "ExtenderArgs.Nodes.items[1].metadata.name: missing"},
      {"long value is cut", pod + R"(,"NodeNames":")" + std::string(100, 'x') + "\"}",
       R"(ExtenderArgs.NodeNames: expected an array, got ")" + std::string(59, 'x') + "..."},
  };
  WireReader reader;
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    Result<ExtenderArgsView> a = reader.ReadExtenderArgs(c.body);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.error().message(), c.message);
  }
}

TEST(ReadExtenderArgsTest, EscapedStringsAreUnescaped) {
  // Go escapes <, > and & (HTML-safe) and non-ASCII may arrive as \u escapes from other clients.
  const std::string body =
      R"({"Pod":{"metadata":{"uid":"u\u002d1","name":"a\u003cb\u003e","namespace":"caf\u00e9"}},)"
      R"("NodeNames":["\u0041bc","node-\"q\"","back\\slash","tab\tx","\ud83d\ude00","plain"]})";
  WireReader reader;
  Result<ExtenderArgsView> a = reader.ReadExtenderArgs(body);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->pod.uid, "u-1");
  EXPECT_EQ(a->pod.name, "a<b>");
  EXPECT_EQ(a->pod.pod_namespace, "caf\xc3\xa9");
  ASSERT_EQ(a->nodes.size(), 6u);
  EXPECT_EQ(a->nodes[0].name, "Abc");
  EXPECT_EQ(a->nodes[1].name, "node-\"q\"");
  EXPECT_EQ(a->nodes[2].name, "back\\slash");
  EXPECT_EQ(a->nodes[3].name, "tab\tx");
  EXPECT_EQ(a->nodes[4].name, "\xf0\x9f\x98\x80");  // U+1F600 from its surrogate pair
  EXPECT_EQ(a->nodes[5].name, "plain");
}

TEST(ReadExtenderArgsTest, FiveThousandNames) {
  std::vector<std::string> names;
  for (int i = 0; i < 5000; ++i) names.push_back("gpu-node-" + std::to_string(100000 + i));
  const std::string body = NamesArgs(names);
  WireReader reader;
  // Twice, then a smaller and a larger list: the reader reuses its buffers and its size hint.
  for (std::size_t n : {5000u, 5000u, 10u, 5000u}) {
    const std::vector<std::string> subset(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string b = n == 5000 ? body : NamesArgs(subset);
    Result<ExtenderArgsView> a = reader.ReadExtenderArgs(b);
    ASSERT_TRUE(a.ok()) << a.error().message();
    ASSERT_EQ(a->nodes.size(), n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(a->nodes[i].name, names[i]) << i;
    EXPECT_EQ(a->pod.uid, "7c0d3e4a-1b2c-4d5e-8f90-a1b2c3d4e5f6");
  }
}

// ---- malformed bodies, for every entry point ----

TEST(WireReaderTest, MalformedBodiesAreErrors) {
  const std::string pod = R"({"Pod":{"metadata":{"uid":"u"}})";
  const std::vector<std::string> bodies = {
      "",
      "   ",
      "not json",
      "{",
      R"({"Pod":})",
      R"({"Pod" {}})",
      R"({"Pod":{"metadata":{"uid":"u"}},})",
      R"({"Pod":{"metadata":{"uid":"u"}}, "NodeNames":["a" "b"]})",
      R"({"Pod":{"metadata":{"uid":"u"}}, "NodeNames":["a",]})",
      R"({"Pod":{"metadata":{"uid":"u\x"}}})",
      R"({"Pod":{"metadata":{"uid":"u\ud800"}}})",     // a lone surrogate in a field we read
      "{\"Pod\":{\"metadata\":{\"uid\":\"u\xff\"}}}",  // invalid UTF-8
      "{\"Pod\":{\"metadata\":{\"uid\":\"a\x01\"}}}",  // unescaped control character
      // Bad JSON inside fields we skip is still bad JSON.
      pod + R"(,"X":[tru]})",
      pod + R"(,"X":[1 2]})",
      pod + R"(,"X":01})",
      pod + R"(,"X":-})",
      pod + R"(,"X":1.})",
      pod + R"(,"X":"\q"})",
      pod + R"(,"X":{"k" 1}})",
      pod + R"(,"X":{"k":1,}})",
      pod + R"(,"X":nul})",
      pod + R"(,"X":[}})",
      R"({"Pod":{"spec":{"a":[1,2,{"b":"c"]}},"metadata":{"uid":"u"}}})",
  };
  WireReader reader;
  for (const std::string& b : bodies) {
    SCOPED_TRACE(b);
    Result<ExtenderArgsView> a = reader.ReadExtenderArgs(b);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.error().message().rfind("ExtenderArgs", 0), 0u) << a.error().message();
  }
  Result<ExtenderArgsView> empty = reader.ReadExtenderArgs("");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().message().rfind("ExtenderArgs: body is not JSON (", 0), 0u)
      << empty.error().message();
}

TEST(WireReaderTest, TrailingContentIsAnError) {
  const std::string body = R"({"Pod":{"metadata":{"uid":"u"}},"NodeNames":["a"]})";
  WireReader reader;
  for (const std::string_view tail : {" x", "}", "{}", " ,", "[]", " 1", "\"s\""}) {
    SCOPED_TRACE(tail);
    EXPECT_FALSE(reader.ReadExtenderArgs(body + std::string(tail)).ok());
    EXPECT_FALSE(reader
                     .ReadBindingArgs(R"({"PodName":"p","PodNamespace":"n","PodUID":"u","Node":"x"})" +
                                      std::string(tail))
                     .ok());
  }
  // Whitespace after the object is fine.
  EXPECT_TRUE(reader.ReadExtenderArgs(body + " \n\t\r").ok());
}

TEST(WireReaderTest, TopLevelMustBeAnObject) {
  const std::vector<ErrorCase> cases = {
      {"array", "[]", "ExtenderArgs: expected an object at the top level, got an array"},
      {"array of names", R"(["a","b"])", "ExtenderArgs: expected an object at the top level, got an array"},
      {"string", R"("Pod")", R"(ExtenderArgs: expected an object at the top level, got "Pod")"},
      {"number", "42", "ExtenderArgs: expected an object at the top level, got 42"},
      {"null", "null", "ExtenderArgs: expected an object at the top level, got null"},
      {"true", " true ", "ExtenderArgs: expected an object at the top level, got true"},
  };
  WireReader reader;
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    Result<ExtenderArgsView> a = reader.ReadExtenderArgs(c.body);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.error().message(), c.message);
  }
  Result<VolcanoSessionArgs> s = reader.ReadVolcanoSession("[]");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), "onSessionOpen: expected an object at the top level, got an array");
}

TEST(WireReaderTest, DeepNestingIsAnErrorNotACrash) {
  const std::string pod = R"({"Pod":{"metadata":{"uid":"u"}})";
  const std::vector<std::string> bodies = {
      pod + R"(,"X":)" + std::string(10000, '[') + "}",                            // unbalanced
      pod + R"(,"X":)" + std::string(10000, '[') + std::string(10000, ']') + "}",  // balanced
      [] {
        std::string deep;
        for (int i = 0; i < 10000; ++i) deep += R"({"a":)";
        deep += "1";
        for (int i = 0; i < 10000; ++i) deep += "}";
        return R"({"Pod":{"spec":)" + deep + "}}";
      }(),
  };
  WireReader reader;
  for (const std::string& b : bodies) {
    Result<ExtenderArgsView> a = reader.ReadExtenderArgs(b);
    ASSERT_FALSE(a.ok());
  }
  // The balanced case is valid JSON refused for its depth alone, with a clear message.
  Result<ExtenderArgsView> a = reader.ReadExtenderArgs(bodies[1]);
  EXPECT_NE(a.error().message().find("nested deeper than"), std::string::npos) << a.error().message();
  EXPECT_EQ(a.error().message().rfind("ExtenderArgs.X", 0), 0u) << a.error().message();
  // Realistic depth passes (Volcano's session snapshot nests ~25 levels).
  std::string ok = R"({"Jobs":{"j":)";
  for (int i = 0; i < 40; ++i) ok += "[";
  for (int i = 0; i < 40; ++i) ok += "]";
  EXPECT_TRUE(reader.ReadVolcanoSession(ok + "}}").ok());
  Result<VolcanoSessionArgs> s =
      reader.ReadVolcanoSession(R"({"Jobs":{"j":)" + std::string(5000, '[') + std::string(5000, ']') + "}}");
  EXPECT_FALSE(s.ok());
}

TEST(WireReaderTest, ReaderIsReusableAfterErrorsAndLargeBodies) {
  WireReader reader;
  EXPECT_FALSE(reader.ReadExtenderArgs("{").ok());
  // A session snapshot larger than the capacity the reader keeps (4 MiB), then small bodies.
  std::string big = R"({"Jobs":{)";
  for (int i = 0; i < 100000; ++i)
    big += (i ? ",\"" : "\"") + std::to_string(i) + R"(":{"Name":"job-with-a-longer-name","Tasks":{}})";
  big += R"(},"Nodes":null,"Queues":{"default":{}}})";
  ASSERT_GT(big.size(), std::size_t{4} << 20);
  Result<VolcanoSessionArgs> s = reader.ReadVolcanoSession(big);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->jobs, 100000u);
  Result<ExtenderArgsView> a = reader.ReadExtenderArgs(NamesArgs({"a", "b"}));
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->nodes[1].name, "b");
  EXPECT_EQ(a->pod.raw, kPod);
}

TEST(WireReaderTest, AViewFromThePreviousCallCanBeTheNextBody) {
  // The outer Pod's raw text is itself a valid ExtenderArgs body; reading it moves it within the
  // reader's own buffer (ASan checks the copy for overlap and the buffer for reuse after free).
  WireReader reader;
  Result<ExtenderArgsView> outer =
      reader.ReadExtenderArgs(R"({"Pod":{"Pod":{"metadata":{"uid":"inner"}},"metadata":{"uid":"outer"}}})");
  ASSERT_TRUE(outer.ok()) << outer.error().message();
  EXPECT_EQ(outer->pod.uid, "outer");
  Result<ExtenderArgsView> inner = reader.ReadExtenderArgs(outer->pod.raw);
  ASSERT_TRUE(inner.ok()) << inner.error().message();
  EXPECT_EQ(inner->pod.uid, "inner");
  EXPECT_EQ(inner->pod.raw, R"({"metadata":{"uid":"inner"}})");
}

// ---- ExtenderBindingArgs ----

TEST(ReadBindingArgsTest, AllFourFields) {
  WireReader reader;
  Result<BindingArgs> b = reader.ReadBindingArgs(
      R"({"PodName":"trainer-0","PodNamespace":"ml","PodUID":"7c0d3e4a-1b2c","Node":"gpu-a"})");
  ASSERT_TRUE(b.ok()) << b.error().message();
  EXPECT_EQ(b->pod_name, "trainer-0");
  EXPECT_EQ(b->pod_namespace, "ml");
  EXPECT_EQ(b->pod_uid, "7c0d3e4a-1b2c");
  EXPECT_EQ(b->node, "gpu-a");
}

TEST(ReadBindingArgsTest, EveryFieldIsRequired) {
  const std::vector<ErrorCase> cases = {
      {"no name", R"({"PodNamespace":"ml","PodUID":"u","Node":"n"})", "ExtenderBindingArgs.PodName: missing"},
      {"null namespace", R"({"PodName":"p","PodNamespace":null,"PodUID":"u","Node":"n"})",
       "ExtenderBindingArgs.PodNamespace: missing"},
      {"empty uid", R"({"PodName":"p","PodNamespace":"ml","PodUID":"","Node":"n"})",
       "ExtenderBindingArgs.PodUID: missing"},
      {"no node", R"({"PodName":"p","PodNamespace":"ml","PodUID":"u"})", "ExtenderBindingArgs.Node: missing"},
      {"node is a number", R"({"PodName":"p","PodNamespace":"ml","PodUID":"u","Node":3})",
       "ExtenderBindingArgs.Node: expected a string, got 3"},
      {"empty object", "{}", "ExtenderBindingArgs.PodName: missing"},
  };
  WireReader reader;
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    Result<BindingArgs> b = reader.ReadBindingArgs(c.body);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.error().message(), c.message);
  }
}

// ---- ExtenderPreemptionArgs ----

TEST(ReadPreemptionArgsTest, MetaVictims) {
  // nodeCacheCapable: UIDs only; NodeNameToVictims is null.
  const std::string body =
      R"({"Pod":)" + std::string(kPod) +
      R"(,"NodeNameToVictims":null,"NodeNameToMetaVictims":{"gpu-b":{"Pods":[{"UID":"v1"},)"
      R"({"UID":"v2"}],"NumPDBViolations":1},"gpu-a":{"Pods":[{"UID":"v3"}],"NumPDBViolations":0}}})";
  WireReader reader;
  Result<PreemptionArgsView> p = reader.ReadPreemptionArgs(body);
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->pod.uid, "7c0d3e4a-1b2c-4d5e-8f90-a1b2c3d4e5f6");
  ASSERT_EQ(p->nodes.size(), 2u);  // body order
  EXPECT_EQ(p->nodes[0].node, "gpu-b");
  EXPECT_EQ(p->nodes[0].uids, (std::vector<std::string_view>{"v1", "v2"}));
  EXPECT_EQ(p->nodes[0].num_pdb_violations, 1);
  EXPECT_EQ(p->nodes[1].node, "gpu-a");
  EXPECT_EQ(p->nodes[1].uids, (std::vector<std::string_view>{"v3"}));
}

TEST(ReadPreemptionArgsTest, FullVictims) {
  // Not nodeCacheCapable: full v1.Pods, UIDs from metadata.uid.
  const std::string victim1 =
      R"({"metadata":{"name":"low-1","namespace":"batch","uid":"v1"},"spec":{"priority":-10}})";
  const std::string victim2 = R"({"metadata":{"name":"low-2","namespace":"batch","uid":"v2"},"spec":{}})";
  const std::string body = R"({"Pod":)" + std::string(kPod) + R"(,"NodeNameToVictims":{"gpu-a":{"Pods":[)" +
                           victim1 + "," + victim2 +
                           R"(],"NumPDBViolations":2}},"NodeNameToMetaVictims":null})";
  WireReader reader;
  Result<PreemptionArgsView> p = reader.ReadPreemptionArgs(body);
  ASSERT_TRUE(p.ok()) << p.error().message();
  ASSERT_EQ(p->nodes.size(), 1u);
  EXPECT_EQ(p->nodes[0].node, "gpu-a");
  EXPECT_EQ(p->nodes[0].uids, (std::vector<std::string_view>{"v1", "v2"}));
  EXPECT_EQ(p->nodes[0].num_pdb_violations, 2);
}

TEST(ReadPreemptionArgsTest, MetaWinsWhenBothAreGiven) {
  const std::string body =
      R"({"Pod":{"metadata":{"uid":"p"}},"NodeNameToMetaVictims":{"m":{"Pods":[{"UID":"x"}],"NumPDBViolations":0}},)"
      R"("NodeNameToVictims":{"f":{"Pods":[{"metadata":{"uid":"y"}}],"NumPDBViolations":0}}})";
  WireReader reader;
  Result<PreemptionArgsView> p = reader.ReadPreemptionArgs(body);
  ASSERT_TRUE(p.ok()) << p.error().message();
  ASSERT_EQ(p->nodes.size(), 1u);
  EXPECT_EQ(p->nodes[0].node, "m");
}

TEST(ReadPreemptionArgsTest, ShapesAndErrors) {
  WireReader reader;
  // No candidates at all; a node with no victims; a null victims entry.
  Result<PreemptionArgsView> none =
      reader.ReadPreemptionArgs(R"({"Pod":{},"NodeNameToVictims":null,"NodeNameToMetaVictims":null})");
  ASSERT_TRUE(none.ok()) << none.error().message();
  EXPECT_TRUE(none->nodes.empty());
  Result<PreemptionArgsView> empty = reader.ReadPreemptionArgs(
      R"({"Pod":{},"NodeNameToMetaVictims":{"a":{"Pods":[],"NumPDBViolations":0},"b":{"Pods":null},"c":null}})");
  ASSERT_TRUE(empty.ok()) << empty.error().message();
  ASSERT_EQ(empty->nodes.size(), 3u);
  EXPECT_TRUE(empty->nodes[0].uids.empty());
  EXPECT_TRUE(empty->nodes[2].uids.empty());
  // Escaped node names are unescaped.
  Result<PreemptionArgsView> escaped = reader.ReadPreemptionArgs(
      R"({"Pod":{},"NodeNameToMetaVictims":{"gpu\u002da":{"Pods":[{"UID":"v"}]}}})");
  ASSERT_TRUE(escaped.ok()) << escaped.error().message();
  EXPECT_EQ(escaped->nodes[0].node, "gpu-a");

  const std::vector<ErrorCase> cases = {
      {"no pod", R"({"NodeNameToMetaVictims":{}})", "ExtenderPreemptionArgs.Pod: missing"},
      {"meta victim without UID", R"({"Pod":{},"NodeNameToMetaVictims":{"a":{"Pods":[{"UID":"x"},{}]}}})",
       R"(ExtenderPreemptionArgs.NodeNameToMetaVictims["a"].Pods[1].UID: missing)"},
      {"victim without uid", R"({"Pod":{},"NodeNameToVictims":{"a":{"Pods":[{"metadata":{"name":"p"}}]}}})",
       R"(ExtenderPreemptionArgs.NodeNameToVictims["a"].Pods[0].metadata.uid: missing)"},
      {"victim is a string", R"({"Pod":{},"NodeNameToVictims":{"a":{"Pods":["p"]}}})",
       R"(ExtenderPreemptionArgs.NodeNameToVictims["a"].Pods[0]: expected an object, got "p")"},
      {"violations is a string", R"({"Pod":{},"NodeNameToMetaVictims":{"a":{"NumPDBViolations":"1"}}})",
       R"(ExtenderPreemptionArgs.NodeNameToMetaVictims["a"].NumPDBViolations: expected an integer, got "1")"},
      {"violations is fractional", R"({"Pod":{},"NodeNameToMetaVictims":{"a":{"NumPDBViolations":1.5}}})",
       R"(ExtenderPreemptionArgs.NodeNameToMetaVictims["a"].NumPDBViolations: expected a 64-bit integer, got 1.5)"},
      {"map is an array", R"({"Pod":{},"NodeNameToMetaVictims":[]})",
       "ExtenderPreemptionArgs.NodeNameToMetaVictims: expected an object, got an array"},
      {"empty node name", R"({"Pod":{},"NodeNameToMetaVictims":{"":{}}})",
       R"(ExtenderPreemptionArgs.NodeNameToMetaVictims[""]: empty node name)"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    Result<PreemptionArgsView> p = reader.ReadPreemptionArgs(c.body);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.error().message(), c.message);
  }
}

// ---- Volcano ----

void ExpectTrainerTask(const VolcanoTaskView& t, std::string_view uid, std::string_view node_name) {
  EXPECT_EQ(t.uid, uid);
  EXPECT_EQ(t.name, "trainer-0");
  EXPECT_EQ(t.task_namespace, "ml");
  EXPECT_EQ(t.job, "ml/pg-trainer");
  EXPECT_EQ(t.node_name, node_name);
  EXPECT_EQ(t.status, node_name.empty() ? 1 : 2);  // Pending, Allocated
  EXPECT_EQ(t.resreq.milli_cpu, 4000);
  EXPECT_EQ(t.resreq.memory, 34359738368.0);
  ASSERT_EQ(t.resreq.scalars.size(), 2u);
  EXPECT_EQ(t.resreq.scalars[0].name, "nvidia.com/gpu");
  EXPECT_EQ(t.resreq.scalars[0].value, 2000);  // 2 GPUs in milli-units
  EXPECT_EQ(t.resreq.scalars[1].name, "pods");
  EXPECT_EQ(t.resreq.scalars[1].value, 1);
  EXPECT_EQ(t.pod.raw, kPod);
  EXPECT_EQ(t.pod.uid, "7c0d3e4a-1b2c-4d5e-8f90-a1b2c3d4e5f6");
  EXPECT_EQ(t.raw, Task(uid, node_name));
}

TEST(ReadVolcanoTest, Predicate) {
  WireReader reader;
  const std::string body = R"({"task":)" + Task("t1") + R"(,"node":)" + VolcanoNode("gpu-a") + "}";
  Result<VolcanoPredicateArgs> p = reader.ReadVolcanoPredicate(body);
  ASSERT_TRUE(p.ok()) << p.error().message();
  ExpectTrainerTask(p->task, "t1", "");
  EXPECT_EQ(p->node_name, "gpu-a");
}

TEST(ReadVolcanoTest, PredicateErrors) {
  const std::string task = Task("t1");
  const std::vector<ErrorCase> cases = {
      {"no task", R"({"node":{"Name":"a"}})", "predicate.task: missing"},
      {"null task", R"({"task":null,"node":{"Name":"a"}})", "predicate.task: missing"},
      {"no node", R"({"task":)" + task + "}", "predicate.node: missing"},
      {"null node", R"({"task":)" + task + R"(,"node":null})", "predicate.node: missing"},
      {"node without name", R"({"task":)" + task + R"(,"node":{"Name":""}})", "predicate.node.Name: missing"},
      {"task is an array", R"({"task":[],"node":{"Name":"a"}})",
       "predicate.task: expected an object, got an array"},
      {"status is a string", R"({"task":{"Status":"Pending"},"node":{"Name":"a"}})",
       R"(predicate.task.Status: expected an integer, got "Pending")"},
      {"status out of range", R"({"task":{"Status":4294967296},"node":{"Name":"a"}})",
       "predicate.task.Status: out of range"},
      {"cpu is a string", R"({"task":{"Resreq":{"MilliCPU":"4"}},"node":{"Name":"a"}})",
       R"(predicate.task.Resreq.MilliCPU: expected a number, got "4")"},
      {"cpu overflows", R"({"task":{"Resreq":{"MilliCPU":1e999}},"node":{"Name":"a"}})",
       "predicate.task.Resreq.MilliCPU: expected a finite number, got 1e999"},
      {"scalar is a string",
       R"({"task":{"Resreq":{"ScalarResources":{"nvidia.com/gpu":"2"}}},"node":{"Name":"a"}})",
       R"(predicate.task.Resreq.ScalarResources["nvidia.com/gpu"]: expected a number, got "2")"},
      {"pod is a string", R"({"task":{"Pod":"p"},"node":{"Name":"a"}})",
       R"(predicate.task.Pod: expected an object, got "p")"},
  };
  WireReader reader;
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    Result<VolcanoPredicateArgs> p = reader.ReadVolcanoPredicate(c.body);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.error().message(), c.message);
  }
}

TEST(ReadVolcanoTest, TaskWithNullsAndNoPod) {
  // A TaskInfo of a task whose pod was nil (never in practice) and null Resreq / ScalarResources.
  WireReader reader;
  Result<VolcanoEventArgs> e = reader.ReadVolcanoEvent(
      R"({"task":{"UID":"t","Resreq":{"MilliCPU":1000,"Memory":0,"ScalarResources":null},"Pod":null,"Status":null}})");
  ASSERT_TRUE(e.ok()) << e.error().message();
  EXPECT_EQ(e->task.uid, "t");
  EXPECT_EQ(e->task.resreq.milli_cpu, 1000);
  EXPECT_TRUE(e->task.resreq.scalars.empty());
  EXPECT_TRUE(e->task.pod.raw.empty());
  EXPECT_EQ(e->task.status, 0);
  Result<VolcanoEventArgs> null_resreq = reader.ReadVolcanoEvent(R"({"task":{"UID":"t","Resreq":null}})");
  ASSERT_TRUE(null_resreq.ok()) << null_resreq.error().message();
  EXPECT_EQ(null_resreq->task.resreq.milli_cpu, 0);
}

TEST(ReadVolcanoTest, Prioritize) {
  WireReader reader;
  const std::string body = R"({"task":)" + Task("t1") + R"(,"nodes":[)" + VolcanoNode("gpu-a") + "," +
                           VolcanoNode("gpu-b") + "," + VolcanoNode("gpu-c") + "]}";
  Result<VolcanoPrioritizeArgs> p = reader.ReadVolcanoPrioritize(body);
  ASSERT_TRUE(p.ok()) << p.error().message();
  ExpectTrainerTask(p->task, "t1", "");
  EXPECT_EQ(p->node_names, (std::vector<std::string_view>{"gpu-a", "gpu-b", "gpu-c"}));

  Result<VolcanoPrioritizeArgs> none = reader.ReadVolcanoPrioritize(R"({"task":{"UID":"t"},"nodes":null})");
  ASSERT_TRUE(none.ok()) << none.error().message();
  EXPECT_TRUE(none->node_names.empty());

  const std::vector<ErrorCase> cases = {
      {"no task", R"({"nodes":[]})", "prioritize.task: missing"},
      {"null node", R"({"task":{},"nodes":[{"Name":"a"},null]})", "prioritize.nodes[1]: missing"},
      {"node is a string", R"({"task":{},"nodes":["a"]})",
       R"(prioritize.nodes[0]: expected an object, got "a")"},
      {"unnamed node", R"({"task":{},"nodes":[{"Name":"a"},{"Idle":{}}]})",
       "prioritize.nodes[1].Name: missing"},
      {"nodes is an object", R"({"task":{},"nodes":{}})",
       "prioritize.nodes: expected an array, got an object"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    Result<VolcanoPrioritizeArgs> r = reader.ReadVolcanoPrioritize(c.body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message(), c.message);
  }
}

TEST(ReadVolcanoTest, AllocateAndDeallocateEvents) {
  WireReader reader;
  Result<VolcanoEventArgs> e = reader.ReadVolcanoEvent(R"({"task":)" + Task("t1", "gpu-a") + "}");
  ASSERT_TRUE(e.ok()) << e.error().message();
  ExpectTrainerTask(e->task, "t1", "gpu-a");
  Result<VolcanoEventArgs> missing = reader.ReadVolcanoEvent("{}");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message(), "event.task: missing");
}

TEST(ReadVolcanoTest, PreemptableAndReclaimable) {
  WireReader reader;
  const std::string body = R"({"evictor":)" + Task("hi", "") + R"(,"evictees":[)" + Task("lo-1", "gpu-a") +
                           "," + Task("lo-2", "gpu-b") + "]}";
  Result<VolcanoEvictArgs> e = reader.ReadVolcanoEvict(body);
  ASSERT_TRUE(e.ok()) << e.error().message();
  ExpectTrainerTask(e->evictor, "hi", "");
  ASSERT_EQ(e->evictees.size(), 2u);
  ExpectTrainerTask(e->evictees[0], "lo-1", "gpu-a");
  ExpectTrainerTask(e->evictees[1], "lo-2", "gpu-b");
  // The raw texts are echoed back as victims: exactly the TaskInfo objects sent.
  EXPECT_EQ(e->evictees[1].raw, Task("lo-2", "gpu-b"));

  Result<VolcanoEvictArgs> none = reader.ReadVolcanoEvict(R"({"evictor":{"UID":"hi"},"evictees":null})");
  ASSERT_TRUE(none.ok()) << none.error().message();
  EXPECT_TRUE(none->evictees.empty());

  const std::vector<ErrorCase> cases = {
      {"no evictor", R"({"evictees":[]})", "evict.evictor: missing"},
      {"null evictee", R"({"evictor":{},"evictees":[{},null]})",
       "evict.evictees[1]: expected an object, got null"},
      {"evictee uid is a number", R"({"evictor":{},"evictees":[{"UID":1}]})",
       "evict.evictees[0].UID: expected a string, got 1"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    Result<VolcanoEvictArgs> r = reader.ReadVolcanoEvict(c.body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message(), c.message);
  }
}

TEST(ReadVolcanoTest, SessionOpenCountsWithoutMaterialising) {
  // OnSessionOpenRequest has no json tags: Jobs, Nodes, Queues, NamespaceInfo, RevocableNodes,
  // NodeList (argument.go).
  const std::string job = R"({"UID":"ml/pg-trainer","Name":"pg-trainer","Namespace":"ml","Queue":"default",)"
                          R"("MinAvailable":2,"Tasks":{"t1":)" +
                          Task("t1") + R"(,"t2":)" + Task("t2") + R"(},"TaskStatusIndex":{"1":{"t1":)" +
                          Task("t1") +
                          R"(}},"PodGroup":{"metadata":)"
                          R"({"name":"pg-trainer"},"spec":{"minMember":2},"Version":"v1beta1"}})";
  const std::string body = R"({"Jobs":{"ml/pg-trainer":)" + job + R"(,"ml/other":)" + job +
                           R"(},"Nodes":{"gpu-a":)" + VolcanoNode("gpu-a") + R"(,"gpu-b":)" +
                           VolcanoNode("gpu-b") + R"(,"gpu-c":)" + VolcanoNode("gpu-c") +
                           R"(},"Queues":{"default":{"UID":"default","Name":"default",)"
                           R"("Weight":1,"Queue":{"metadata":{"name":"default"}}}},"NamespaceInfo":{"ml":)"
                           R"({"Name":"ml","QuotaStatus":null}},"RevocableNodes":{},"NodeList":null})";
  WireReader reader;
  Result<VolcanoSessionArgs> s = reader.ReadVolcanoSession(body);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->jobs, 2u);
  EXPECT_EQ(s->nodes, 3u);
  EXPECT_EQ(s->queues, 1u);

  Result<VolcanoSessionArgs> nulls = reader.ReadVolcanoSession(R"({"Jobs":null,"Nodes":null,"Queues":null})");
  ASSERT_TRUE(nulls.ok()) << nulls.error().message();
  EXPECT_EQ(nulls->jobs + nulls->nodes + nulls->queues, 0u);
  Result<VolcanoSessionArgs> empty = reader.ReadVolcanoSession("{}");  // onSessionClose's body
  ASSERT_TRUE(empty.ok()) << empty.error().message();

  Result<VolcanoSessionArgs> bad = reader.ReadVolcanoSession(R"({"Jobs":[]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "onSessionOpen.Jobs: expected an object, got an array");
  Result<VolcanoSessionArgs> bad_inside =
      reader.ReadVolcanoSession(R"({"Nodes":{"gpu-a":{"Name":"gpu-a",}}})");
  ASSERT_FALSE(bad_inside.ok());
  EXPECT_EQ(bad_inside.error().message().rfind("onSessionOpen.Nodes[\"gpu-a\"]", 0), 0u)
      << bad_inside.error().message();
}

}  // namespace
}  // namespace toposched::extender
