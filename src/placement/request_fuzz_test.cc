// Fuzzes ParsePodRequest, the extender's one nlohmann entry point on the hot path (the Pod of
// every filter, preempt and Volcano task), with the deterministic mutator of
// tests/testing/fuzz_driver.h; scripts/test.sh runs it again under ASan/UBSan.

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "request_keep.h"
#include "testing/fuzz_driver.h"
#include "testing/shared_topologies.h"
#include "toposched/placement/request.h"

namespace toposched {
namespace {

TEST(PodRequestFuzzTest, MutatedPodsNeverCrashAndAcceptedOnesAreSane) {
  const std::string dir = std::string(TOPOSCHED_SOURCE_DIR) + "/examples/pods/";
  std::vector<std::string> seeds;
  for (const char* f : {"prefill-4gpu-rdma.json", "training-8gpu.json", "small-model-shared.json"}) {
    seeds.push_back(testing::ReadFile(dir + f));
    ASSERT_FALSE(seeds.back().empty()) << f;
  }
  // A pod with init containers, sidecars, HAMi annotations and limits only.
  seeds.push_back(R"({"metadata":{"name":"p","namespace":"d","uid":"u","annotations":{
    "hami.io/gpu-scheduler-policy":"binpack","nvidia.com/use-gputype":"H100,A100","toposched.io/rdma-nics":"2"}},
    "spec":{"initContainers":[{"name":"i","resources":{"limits":{"nvidia.com/gpu":"1"}}},
      {"name":"s","restartPolicy":"Always","resources":{"requests":{"rdma/ib":"1"}}}],
    "containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"2","nvidia.com/gpumem":"20000",
      "nvidia.com/gpucores":"30"}}}]}})");
  int accepted = 0;
  testing::RunFuzz(
      seeds,
      [&](std::string_view input) {
        const Result<PlacementRequest> r = ParsePodRequest(input);
        if (!r.ok()) {
          EXPECT_FALSE(r.error().message().empty());
          return;
        }
        ++accepted;
        EXPECT_GE(r->gpus, 0);
        EXPECT_GE(r->rdma_nics, 0);
        EXPECT_GE(r->shared.count, 0);
        EXPECT_FALSE(r->gpus > 0 && r->IsShared());  // whole or shared, never both
        (void)r->ShapeKey();
      },
      20000);
  EXPECT_GT(accepted, 4);  // the seeds themselves parse
}

// The two readers of a Pod's kept fields (request_keep.h) agree wherever the simdjson one
// answers: on the example pods, on documents built to hit each kept field with each JSON type,
// duplicate keys, nulls and the numbers nlohmann types differently, and on mutations of all of
// them. It must answer on the well-formed ones (it is the common path).
TEST(PodRequestFuzzTest, TheSimdjsonReaderKeepsWhatTheFilterKeeps) {
  const std::string dir = std::string(TOPOSCHED_SOURCE_DIR) + "/examples/pods/";
  std::vector<std::string> seeds;
  for (const char* f : {"prefill-4gpu-rdma.json", "training-8gpu.json", "small-model-shared.json"}) {
    seeds.push_back(testing::ReadFile(dir + f));
  }
  const std::vector<std::string> answered = {
      seeds[0],
      seeds[1],
      seeds[2],
      R"({"kind":"Pod","metadata":{"name":"p","namespace":null,"uid":"u","labels":{"a":"1","a":"2","b":null},
        "annotations":null,"managedFields":[{"x":{"y":[1,2,{"z":3}]}}]},"status":{"phase":"Running"},
        "spec":{"nodeName":"n","containers":[{"name":"c","image":"i","resources":{"limits":{"nvidia.com/gpu":2,
        "rdma/ib":-1,"cpu":1.5,"memory":"1Gi","x":null,"big":18446744073709551615,"z":-0},"claims":[{"name":"q"}]}},
        {"name":null,"restartPolicy":"Always","resources":null}],"initContainers":null},"spec":{"containers":[]}})",
      R"({"metadata":{"name":"\u0070\u00e9","labels":{"k\"":"v\\n"}},"spec":{"containers":[{"resources":{"requests":{}}}]}})",
      R"({})",
      R"({"spec":{"overhead":{"cpu":"250m","memory":"120Mi","x":null},"containers":[]}})",
      R"({"spec":{"overhead":null}})",
      R"({"spec":{"resourceClaims":[{"name":"g","resourceClaimTemplateName":"t","x":[1]},{"name":"n",
        "resourceClaimName":"c","resourceClaimTemplateName":null}],"containers":[]}})",
      R"({"spec":{"resourceClaims":null}})",
  };
  const std::vector<std::string> declined = {
      R"([1,2])",
      R"("pod")",
      R"({"kind":{"a":1}})",
      R"({"metadata":{"name":5}})",
      R"({"metadata":{"labels":{"a":true}}})",
      R"({"metadata":[]})",
      R"({"spec":{"containers":{}}})",
      R"({"spec":{"containers":["c"]}})",
      R"({"spec":{"containers":[{"resources":{"limits":{"g":[1]}}}]}})",
      R"({"spec":{"containers":[{"resources":{"limits":{"g":1e400}}}]}})",
      R"({"spec":{"containers":[{"resources":{"limits":{"g":18446744073709551616}}}]}})",
      R"({"metadata":{"name":"p"}} trailing)",
      R"({"spec":{"overhead":{"cpu":[1]}}})",
      R"({"spec":{"resourceClaims":{}}})",
      R"({"spec":{"resourceClaims":[{"name":1}]}})",
  };
  int compared = 0;
  const auto agree = [&compared](std::string_view text) {
    const std::optional<nlohmann::json> fast = request_keep::BySimdjson(text);
    if (!fast) return;
    ++compared;
    nlohmann::json slow;
    try {
      slow = request_keep::ByFilter(text);
    } catch (const nlohmann::json::exception& e) {
      ADD_FAILURE() << "simdjson answered where the filter throws (" << e.what() << "): " << text;
      return;
    }
    EXPECT_EQ(*fast, slow) << text;
    EXPECT_EQ(fast->dump(), slow.dump()) << text;
  };
  for (const std::string& text : answered) {
    EXPECT_TRUE(request_keep::BySimdjson(text).has_value()) << text;
    agree(text);
  }
  for (const std::string& text : declined) {
    EXPECT_FALSE(request_keep::BySimdjson(text).has_value()) << text;
  }
  // A pod past the size the simdjson reader takes is read by the filter, to the same request.
  std::string large = seeds[0];
  const std::size_t brace = large.rfind('}');
  ASSERT_NE(brace, std::string::npos);
  large.insert(brace, R"(,"status":{"message":")" + std::string(request_keep::kMaxBytes, 'x') + R"("})");
  EXPECT_FALSE(request_keep::BySimdjson(large).has_value());
  const Result<PlacementRequest> from_large = ParsePodRequest(large);
  const Result<PlacementRequest> from_seed = ParsePodRequest(seeds[0]);
  ASSERT_TRUE(from_large.ok()) << from_large.error().message();
  ASSERT_TRUE(from_seed.ok()) << from_seed.error().message();
  EXPECT_EQ(from_large->ShapeKey(), from_seed->ShapeKey());
  EXPECT_EQ(from_large->pod_name, from_seed->pod_name);
  std::vector<std::string> all = answered;
  all.insert(all.end(), declined.begin(), declined.end());
  testing::RunFuzz(all, agree, 100000);
  EXPECT_GT(compared, 2000) << "enough mutations still read by both to compare";
}

}  // namespace
}  // namespace toposched
