// Fuzzes ParsePodRequest, the extender's one nlohmann entry point on the hot path (the Pod of
// every filter, preempt and Volcano task), with the deterministic mutator of
// tests/testing/fuzz_driver.h; scripts/test.sh runs it again under ASan/UBSan.

#include <gtest/gtest.h>

#include <string>
#include <vector>

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

}  // namespace
}  // namespace toposched
