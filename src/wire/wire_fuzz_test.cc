// Deterministic mutation fuzzing of every reader entry point (tests/testing/fuzz_driver.h), run
// under ASan/UBSan by the sanitizer build. A target must not crash; when the reader accepts an
// input, every view it returned is read byte by byte, so a view into freed or reused memory
// trips ASan. AppendJsonString's output must parse as JSON whatever the input bytes.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "testing/fuzz_driver.h"
#include "toposched/wire/wire.h"

namespace toposched::extender {
namespace {

// About 0.5 s for all targets in a release build, 6 s under ASan/UBSan.
constexpr int kIterations = 20000;

// Reads every byte of a view: a dangling one is an ASan report, not a silent pass.
std::size_t Touch(std::string_view s) {
  std::size_t sum = 0;
  for (const char c : s) sum += static_cast<unsigned char>(c);
  return sum + s.size();
}

std::size_t Touch(const PodRef& p) {
  return Touch(p.raw) + Touch(p.uid) + Touch(p.pod_namespace) + Touch(p.name) + Touch(p.resource_version);
}

std::size_t Touch(const VolcanoTaskView& t) {
  std::size_t sum = Touch(t.raw) + Touch(t.uid) + Touch(t.name) + Touch(t.task_namespace) +
                    Touch(t.node_name) + Touch(t.job) + Touch(t.pod) + static_cast<std::size_t>(t.status);
  for (const ScalarResource& s : t.resreq.scalars)
    sum += Touch(s.name) + static_cast<std::size_t>(s.value != 0);
  return sum;
}

const std::string kPod =
    R"({"metadata":{"name":"trainer-0","namespace":"ml","uid":"u-1","resourceVersion":"7","annotations":)"
    R"({"a":"{\"k\":\"v\"}\n"}},"spec":{"containers":[{"name":"main","resources":{"limits":)"
    R"({"nvidia.com/gpu":"8"}}}],"priority":0},"status":{"phase":"Pending"}})";
const std::string kTask =
    R"({"UID":"t1","Job":"ml/pg","Name":"trainer-0","Namespace":"ml","Resreq":{"MilliCPU":4000,)"
    R"("Memory":34359738368,"ScalarResources":{"nvidia.com/gpu":2000,"pods":1},"MaxTaskNum":0},)"
    R"("NodeName":"gpu-a","Status":2,"Pod":)" +
    kPod + "}";
const std::string kNodeInfo =
    R"({"Name":"gpu-a","Node":{"metadata":{"name":"gpu-a","labels":{"x":"y"}}},"State":{"Phase":1,"Reason":""},)"
    R"("Idle":{"MilliCPU":220000,"Memory":1e12,"ScalarResources":{"nvidia.com/gpu":8000}},"Tasks":{}})";

TEST(WireFuzzTest, ExtenderArgs) {
  const std::vector<std::string> seeds = {
      R"({"Pod":)" + kPod + R"(,"Nodes":null,"NodeNames":["gpu-a","gpu-\u0062","gpu-c"]})",
      R"({"Pod":)" + kPod +
          R"(,"Nodes":{"metadata":{},"items":[{"metadata":{"name":"gpu-a"},"status":{}},)"
          R"({"metadata":{"name":"gpu-\"b\""}}]},"NodeNames":null})",
      R"({"Pod":{"metadata":{"uid":"x"}},"NodeNames":[],"Extra":[1,2.5,true,null,{"a":[]}]})",
  };
  WireReader reader;
  std::size_t accepted = 0, sink = 0;
  toposched::testing::RunFuzz(
      seeds,
      [&](std::string_view body) {
        Result<ExtenderArgsView> a = reader.ReadExtenderArgs(body);
        if (!a.ok()) return;
        ++accepted;
        sink += Touch(a->pod);
        for (const NodeRef& n : a->nodes) sink += Touch(n.name) + Touch(n.raw);
      },
      kIterations);
  RecordProperty("accepted", static_cast<int>(accepted));  // how many mutants still parsed
  EXPECT_GE(accepted, seeds.size());                       // at least the seeds themselves
  EXPECT_GT(sink, 0u);
}

TEST(WireFuzzTest, BindingArgs) {
  const std::vector<std::string> seeds = {
      R"({"PodName":"trainer-0","PodNamespace":"ml","PodUID":"u-1","Node":"gpu-a"})",
      R"({"PodName":"p\u0031","PodNamespace":"ml","PodUID":"u","Node":"n","More":{"x":[]}})",
  };
  WireReader reader;
  std::size_t accepted = 0, sink = 0;
  toposched::testing::RunFuzz(
      seeds,
      [&](std::string_view body) {
        Result<BindingArgs> b = reader.ReadBindingArgs(body);
        if (!b.ok()) return;
        ++accepted;
        sink += Touch(b->pod_name) + Touch(b->pod_namespace) + Touch(b->pod_uid) + Touch(b->node);
      },
      kIterations);
  RecordProperty("accepted", static_cast<int>(accepted));  // how many mutants still parsed
  EXPECT_GE(accepted, seeds.size());
  EXPECT_GT(sink, 0u);
}

TEST(WireFuzzTest, PreemptionArgs) {
  const std::vector<std::string> seeds = {
      R"({"Pod":)" + kPod +
          R"(,"NodeNameToVictims":null,"NodeNameToMetaVictims":{"gpu-a":{"Pods":[{"UID":"v1"},)"
          R"({"UID":"v2"}],"NumPDBViolations":1},"gpu-\u0062":{"Pods":[{"UID":"v3"}]}}})",
      R"({"Pod":)" + kPod + R"(,"NodeNameToVictims":{"gpu-a":{"Pods":[)" + kPod +
          R"(],"NumPDBViolations":0}},"NodeNameToMetaVictims":null})",
  };
  WireReader reader;
  std::size_t accepted = 0, sink = 0;
  toposched::testing::RunFuzz(
      seeds,
      [&](std::string_view body) {
        Result<PreemptionArgsView> p = reader.ReadPreemptionArgs(body);
        if (!p.ok()) return;
        ++accepted;
        sink += Touch(p->pod);
        for (const NodeVictimsView& n : p->nodes) {
          sink += Touch(n.node) + static_cast<std::size_t>(n.num_pdb_violations);
          for (std::string_view uid : n.uids) sink += Touch(uid);
        }
      },
      kIterations);
  RecordProperty("accepted", static_cast<int>(accepted));  // how many mutants still parsed
  EXPECT_GE(accepted, seeds.size());
  EXPECT_GT(sink, 0u);
}

TEST(WireFuzzTest, VolcanoPredicate) {
  const std::vector<std::string> seeds = {
      R"({"task":)" + kTask + R"(,"node":)" + kNodeInfo + "}",
      R"({"task":{"UID":"t","Resreq":null,"Pod":null},"node":{"Name":"n\u0031"}})",
  };
  WireReader reader;
  std::size_t accepted = 0, sink = 0;
  toposched::testing::RunFuzz(
      seeds,
      [&](std::string_view body) {
        Result<VolcanoPredicateArgs> p = reader.ReadVolcanoPredicate(body);
        if (!p.ok()) return;
        ++accepted;
        sink += Touch(p->task) + Touch(p->node_name);
      },
      kIterations);
  RecordProperty("accepted", static_cast<int>(accepted));  // how many mutants still parsed
  EXPECT_GE(accepted, seeds.size());
  EXPECT_GT(sink, 0u);
}

TEST(WireFuzzTest, VolcanoPrioritize) {
  const std::vector<std::string> seeds = {
      R"({"task":)" + kTask + R"(,"nodes":[)" + kNodeInfo + R"(,{"Name":"gpu-b"}]})",
      R"({"task":{"UID":"t"},"nodes":null})",
  };
  WireReader reader;
  std::size_t accepted = 0, sink = 0;
  toposched::testing::RunFuzz(
      seeds,
      [&](std::string_view body) {
        Result<VolcanoPrioritizeArgs> p = reader.ReadVolcanoPrioritize(body);
        if (!p.ok()) return;
        ++accepted;
        sink += Touch(p->task);
        for (std::string_view n : p->node_names) sink += Touch(n);
      },
      kIterations);
  RecordProperty("accepted", static_cast<int>(accepted));  // how many mutants still parsed
  EXPECT_GE(accepted, seeds.size());
  EXPECT_GT(sink, 0u);
}

TEST(WireFuzzTest, VolcanoEvent) {
  const std::vector<std::string> seeds = {R"({"task":)" + kTask + "}",
                                          R"({"task":{"UID":"t","NodeName":"n"}})"};
  WireReader reader;
  std::size_t accepted = 0, sink = 0;
  toposched::testing::RunFuzz(
      seeds,
      [&](std::string_view body) {
        Result<VolcanoEventArgs> e = reader.ReadVolcanoEvent(body);
        if (!e.ok()) return;
        ++accepted;
        sink += Touch(e->task);
      },
      kIterations);
  RecordProperty("accepted", static_cast<int>(accepted));  // how many mutants still parsed
  EXPECT_GE(accepted, seeds.size());
  EXPECT_GT(sink, 0u);
}

TEST(WireFuzzTest, VolcanoEvict) {
  const std::string victim =
      R"({"UID":"lo","Name":"low","Namespace":"batch","NodeName":"gpu-a","Status":32,)"
      R"("Resreq":{"ScalarResources":{"nvidia.com/gpu":1000}},"Pod":{"metadata":{"uid":"lo"}}})";
  const std::vector<std::string> seeds = {
      R"({"evictor":)" + kTask + R"(,"evictees":[)" + victim + "," + victim + "]}",
      R"({"evictor":{"UID":"hi"},"evictees":null})",
  };
  WireReader reader;
  std::size_t accepted = 0, sink = 0;
  toposched::testing::RunFuzz(
      seeds,
      [&](std::string_view body) {
        Result<VolcanoEvictArgs> e = reader.ReadVolcanoEvict(body);
        if (!e.ok()) return;
        ++accepted;
        sink += Touch(e->evictor);
        for (const VolcanoTaskView& t : e->evictees) sink += Touch(t);
      },
      kIterations);
  RecordProperty("accepted", static_cast<int>(accepted));  // how many mutants still parsed
  EXPECT_GE(accepted, seeds.size());
  EXPECT_GT(sink, 0u);
}

TEST(WireFuzzTest, VolcanoSession) {
  const std::vector<std::string> seeds = {
      R"({"Jobs":{"ml/pg":{"UID":"ml/pg","Tasks":{"t1":)" + kTask + R"(}}},"Nodes":{"gpu-a":)" + kNodeInfo +
          R"(},"Queues":{"default":{"Name":"default","Weight":1}},"NamespaceInfo":{},"NodeList":null})",
      R"({"Jobs":null,"Nodes":null,"Queues":null})",
  };
  WireReader reader;
  std::size_t accepted = 0, counted = 0;
  toposched::testing::RunFuzz(
      seeds,
      [&](std::string_view body) {
        Result<VolcanoSessionArgs> s = reader.ReadVolcanoSession(body);
        if (!s.ok()) return;
        ++accepted;
        counted += s->jobs + s->nodes + s->queues;
      },
      kIterations);
  RecordProperty("accepted", static_cast<int>(accepted));  // how many mutants still parsed
  EXPECT_GE(accepted, seeds.size());
  EXPECT_GT(counted, 0u);
}

TEST(WireFuzzTest, AppendJsonStringAlwaysWritesJson) {
  // Random bytes, biased towards the interesting ones (controls, quotes, UTF-8 lead and
  // continuation bytes), plus mutations of valid UTF-8.
  std::mt19937_64 rng(0x57121);
  const std::string interesting = std::string("\"\\\n\r\t\b\f\x00\x01\x1f\x7f", 12) +
                                  "\x80\xbf\xc0\xc1\xc2\xdf\xe0\xed\xef\xf0\xf4\xf5\xff" +
                                  "a\xc3\xa9\xe2\x82\xac";
  for (int i = 0; i < kIterations; ++i) {
    std::string in(rng() % 24, '\0');
    for (char& c : in) {
      c = rng() % 2 == 0 ? interesting[rng() % interesting.size()] : static_cast<char>(rng() % 256);
    }
    std::string out;
    AppendJsonString(out, in);
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = nlohmann::json::parse(out)) << out;
    ASSERT_TRUE(parsed.is_string());
  }
  // And through the reader: whatever AppendJsonString writes, a NodeNames entry reads back.
  WireReader reader;
  for (int i = 0; i < 2000; ++i) {
    std::string in(rng() % 16, '\0');
    for (char& c : in) c = interesting[rng() % interesting.size()];
    std::string body = R"({"Pod":{},"NodeNames":[)";
    AppendJsonString(body, in);
    body += "]}";
    Result<ExtenderArgsView> a = reader.ReadExtenderArgs(body);
    ASSERT_TRUE(a.ok()) << a.error().message();
    ASSERT_EQ(a->nodes.size(), 1u);
  }
}

}  // namespace
}  // namespace toposched::extender
