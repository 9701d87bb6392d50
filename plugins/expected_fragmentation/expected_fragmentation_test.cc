#include "expected_fragmentation/expected_fragmentation.h"

#include <gtest/gtest.h>

#include <memory>

#include "testing/framework_testing.h"

namespace toposched::plugins::expected_fragmentation {
namespace {

using toposched::testing::CycleWith;
using toposched::testing::Fails;
using toposched::testing::Fits;
using toposched::testing::NodeBuilder;
using toposched::testing::PlacementOn;
using toposched::testing::RequestBuilder;

// A mix of 8-GPU pods and 1-GPU pods, half each.
std::shared_ptr<const packing::ShapeMix> EightAndOne() {
  return std::make_shared<const packing::ShapeMix>(packing::ShapeMix{
      {{packing::Shape{8, packing::kMilli, 0, {}}, 0.5}, {packing::Shape{1, packing::kMilli, 0, {}}, 0.5}}});
}

TEST(ExpectedFragmentationTest, BreakingAFreeNodeScoresBelowFillingAUsedOne) {
  const ExpectedFragmentation plugin;
  const framework::NodeInfo empty = NodeBuilder("empty", "hgx-h100-8gpu").Build();
  const framework::NodeInfo used = NodeBuilder("used", "hgx-h100-8gpu").ExclusiveGpus({0, 1, 2}).Build();

  auto score_on = [&](const framework::NodeInfo& node, int gpu) {
    framework::CycleState cycle =
        CycleWith(RequestBuilder().Gpus(1).Build(), Fits(PlacementOn(*node.topology, {gpu}, {})));
    cycle.SetShapeMix(EightAndOne());
    return plugin.Score(cycle, node);
  };
  // Empty node: before 0 (both shapes fit, nothing partial); after, the 8-GPU shape cannot run:
  // 7000 idle x 0.5 = 3500 stranded -> 100 * sigmoid(-3.5) = 3.
  const framework::ScoreResult on_empty = score_on(empty, 0);
  EXPECT_EQ(on_empty.score, 3);
  EXPECT_EQ(on_empty.explanation,
            "expected fragmentation 0 -> 3500 milli-GPU (+3500) -> 100 * sigmoid(-3500/1000) = 3");
  // Used node: 5 free GPUs were already stranded for the 8-GPU shape (2500), 4 after (2000).
  const framework::ScoreResult on_used = score_on(used, 3);
  EXPECT_EQ(on_used.score, 62);
  EXPECT_GT(on_used.score, on_empty.score);
}

TEST(ExpectedFragmentationTest, WithoutAMixPacksForTheRequestItself) {
  const ExpectedFragmentation plugin;
  const framework::NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").Shares(0, 1, 0, 6000).Build();
  // A 50 % share: on GPU 0 (40 % left) it cannot go; on GPU 1 it strands nothing new for its own
  // shape (the 400 on GPU 0 was stranded already): neutral 50.
  framework::CycleState cycle =
      CycleWith(RequestBuilder().Shared(1, 0, 5000).Build(), Fits(PlacementOn(*node.topology, {1}, {})));
  EXPECT_EQ(plugin.Score(cycle, node).score, 50);
}

TEST(ExpectedFragmentationTest, CpuExhaustionCounts) {
  const ExpectedFragmentation plugin;
  framework::NodeInfo node = NodeBuilder("n", "inference-4gpu").Build();
  node.cpu_milli_free = 8000;
  PlacementRequest cpu_only;
  cpu_only.cpu_milli = 6000;
  // Typical pods want 1 GPU and 4 cores: after a 6-core CPU-only pod, no GPU on the node is usable.
  framework::CycleState cycle = CycleWith(cpu_only, Fits(Placement{}));
  cycle.SetShapeMix(std::make_shared<const packing::ShapeMix>(
      packing::ShapeMix{{{packing::Shape{1, packing::kMilli, 4000, {}}, 1.0}}}));
  const auto d = FragmentationDelta(cycle, node);
  ASSERT_TRUE(d.has_value());
  EXPECT_DOUBLE_EQ(d->before, 0);
  EXPECT_DOUBLE_EQ(d->after, 4000);
  EXPECT_EQ(plugin.Score(cycle, node).score, 2);
}

TEST(ExpectedFragmentationTest, NoPlacementScoresZeroAndArgsAreChecked) {
  const ExpectedFragmentation plugin;
  const framework::NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").Build();
  framework::CycleState cycle =
      CycleWith(RequestBuilder().Gpus(9).Build(), Fails(FitFailure::kNotEnoughGpus, "9 > 8"));
  EXPECT_EQ(plugin.Score(cycle, node).score, framework::kMinScore);
  EXPECT_TRUE(New({}).ok());
  EXPECT_TRUE(New({{"scale", "500"}}).ok());
  EXPECT_FALSE(New({{"scale", "0"}}).ok());
  EXPECT_FALSE(New({{"scale", "x"}}).ok());
  EXPECT_FALSE(New({{"scales", "5"}}).ok());
}

}  // namespace
}  // namespace toposched::plugins::expected_fragmentation
