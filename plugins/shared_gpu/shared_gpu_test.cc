#include "shared_gpu/shared_gpu.h"

#include <gtest/gtest.h>

#include "testing/framework_testing.h"

namespace toposched::plugins::shared_gpu {
namespace {

using framework::CycleState;
using toposched::testing::CycleWith;
using toposched::testing::Fails;
using toposched::testing::Fits;
using toposched::testing::NodeBuilder;
using toposched::testing::PlacementOn;
using toposched::testing::PresetTopology;
using toposched::testing::RequestBuilder;

std::unique_ptr<framework::Plugin> Make(const framework::PluginArgs& args) {
  Result<std::unique_ptr<framework::Plugin>> p = New(args);
  EXPECT_TRUE(p.ok()) << p.error().message();
  return std::move(p).value();
}

TEST(SharedGpuTest, UsageOfANode) {
  const auto& t = *PresetTopology("hgx-h100-8gpu");  // 8 x 81559 MiB
  EXPECT_EQ(UsageOf(t, NodeAllocation{}).usage, 0.0);
  // One whole GPU: 1/8 of the GPUs, the memory and the compute.
  const NodeUsage whole = UsageOf(t, NodeBuilder("n", "hgx-h100-8gpu").ExclusiveGpus({3}).Build().allocated);
  EXPECT_EQ(whole.gpus_in_use, 1);
  EXPECT_DOUBLE_EQ(whole.usage, 0.125);
  // A vGPU holding 81559 MiB and 50 % on GPU0: (1/8 + 1/8 + 0.5/8) / 3 = 0.3125 / 3.
  const NodeUsage shared =
      UsageOf(t, NodeBuilder("n", "hgx-h100-8gpu").Shares(0, 1, 81559, 5000).Build().allocated);
  EXPECT_DOUBLE_EQ(shared.usage, 0.3125 / 3);
}

TEST(SharedGpuTest, BinpackPrefersFullerNodesSpreadEmptierOnes) {
  struct Case {
    std::string name;
    PlacementRequest request;
    framework::PluginArgs args;
    framework::NodeInfo node;
    int gpu;  // where the fake engine puts the vGPU
    int score;
    std::string explanation;
  };
  // vGPU: 8000 MiB, 25 % compute. hgx: 8 GPUs of 81559 MiB = 652472 MiB, 80000 compute units.
  const PlacementRequest vgpu = RequestBuilder().Shared(1, 8000, 2500).Build();
  const PlacementRequest vgpu_spread =
      RequestBuilder().Shared(1, 8000, 2500).NodePolicy(PackPolicy::kSpread).Build();
  const framework::NodeInfo empty = NodeBuilder("empty", "hgx-h100-8gpu").Build();
  const framework::NodeInfo half = NodeBuilder("half", "hgx-h100-8gpu").ExclusiveGpus({0, 1, 2, 3}).Build();
  const framework::NodeInfo sharing =
      NodeBuilder("sharing", "hgx-h100-8gpu").Shares(0, 1, 8000, 2500).Build();
  const std::vector<Case> cases = {
      // (1/8 + 8000/652472 + 2500/80000) / 3 = (0.125 + 0.01226 + 0.03125) / 3 = 0.05617
      {"empty node, binpack",
       vgpu,
       {},
       empty,
       0,
       6,
       "binpack (default): after placement 1/8 GPUs in use, memory 1%, compute 3% -> usage 5.6% -> 6"},
      {"empty node, spread by the pod",
       vgpu_spread,
       {},
       empty,
       0,
       94,
       "spread: after placement 1/8 GPUs in use, memory 1%, compute 3% -> usage 5.6% -> 94"},
      {"empty node, spread by config",
       vgpu,
       {{"defaultNodePolicy", "spread"}},
       empty,
       0,
       94,
       "spread (default): after placement 1/8 GPUs in use, memory 1%, compute 3% -> usage 5.6% -> 94"},
      // (5/8 + 334236/652472 + 42500/80000) / 3 = (0.625 + 0.51226 + 0.53125) / 3 = 0.55617
      {"half-full node, binpack",
       vgpu,
       {},
       half,
       4,
       56,
       "binpack (default): after placement 5/8 GPUs in use, memory 51%, compute 53% -> usage 55.6% -> 56"},
      {"half-full node, spread",
       vgpu_spread,
       {},
       half,
       4,
       44,
       "spread: after placement 5/8 GPUs in use, memory 51%, compute 53% -> usage 55.6% -> 44"},
      // A second vGPU on GPU0: (1/8 + 16000/652472 + 5000/80000) / 3 = 0.07067
      {"vGPU beside a vGPU",
       vgpu,
       {},
       sharing,
       0,
       7,
       "binpack (default): after placement 1/8 GPUs in use, memory 2%, compute 6% -> usage 7.1% -> 7"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto plugin = Make(c.args);
    const auto& scorer = dynamic_cast<const framework::ScorePlugin&>(*plugin);
    CycleState state = CycleWith(c.request, Fits(PlacementOn(*c.node.topology, {c.gpu}, {})));
    const framework::ScoreResult r = scorer.Score(state, c.node);
    EXPECT_EQ(r.score, c.score);
    EXPECT_EQ(r.explanation, c.explanation);
  }
}

TEST(SharedGpuTest, NeutralForWholeGpusZeroWithoutPlacement) {
  const SharedGpu plugin(PackPolicy::kBinpack);
  const framework::NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").Build();
  CycleState whole =
      CycleWith(RequestBuilder().Gpus(2).Build(), Fits(PlacementOn(*node.topology, {0, 1}, {})));
  EXPECT_EQ(plugin.Score(whole, node).score, 100);
  EXPECT_EQ(plugin.Score(whole, node).explanation, "whole-GPU request: neutral -> 100");
  CycleState none =
      CycleWith(RequestBuilder().Shared(1, 8000, 0).Build(), Fails(FitFailure::kNotEnoughShareCapacity, ""));
  EXPECT_EQ(plugin.Score(none, node).score, 0);
}

TEST(SharedGpuTest, FactoryValidatesArgs) {
  struct Case {
    framework::PluginArgs args;
    std::string error;  // empty: accepted
  };
  const std::vector<Case> cases = {
      {{}, ""},
      {{{"defaultNodePolicy", "binpack"}}, ""},
      {{{"defaultNodePolicy", "spread"}}, ""},
      {{{"defaultNodePolicy", "Binpack"}},
       "defaultNodePolicy: \"Binpack\" is not a policy (binpack, spread)"},
      {{{"nodePolicy", "spread"}}, "unknown arg \"nodePolicy\" (known: defaultNodePolicy)"},
  };
  for (const Case& c : cases) {
    Result<std::unique_ptr<framework::Plugin>> p = New(c.args);
    if (c.error.empty()) {
      EXPECT_TRUE(p.ok()) << p.error().message();
    } else {
      ASSERT_FALSE(p.ok());
      EXPECT_EQ(p.error().message(), c.error);
    }
  }
}

// With the engine: binpack ranks a node already carrying vGPUs above an empty one.
TEST(SharedGpuWithEngineTest, BinpackRanksTheSharingNodeFirst) {
  const SharedGpu plugin(PackPolicy::kBinpack);
  PlacementMemo memo;
  CycleState state(RequestBuilder().Shared(1, 8000, 2500).Build(),
                   [&memo](const NodeTopology& t, std::string_view, const NodeAllocation& a,
                           const PlacementRequest& r, SharePacking) { return memo.Place(t, a, r); });
  const framework::NodeInfo empty = NodeBuilder("empty", "hgx-h100-8gpu").Build();
  const framework::NodeInfo sharing =
      NodeBuilder("sharing", "hgx-h100-8gpu").Shares(0, 3, 40000, 6000).Build();
  const int empty_score = plugin.Score(state, empty).score;
  const int sharing_score = plugin.Score(state, sharing).score;
  EXPECT_GT(sharing_score, empty_score) << plugin.Score(state, sharing).explanation;
}

}  // namespace
}  // namespace toposched::plugins::shared_gpu
