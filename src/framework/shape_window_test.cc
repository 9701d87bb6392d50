#include "toposched/framework/shape_window.h"

#include <gtest/gtest.h>

#include <string>

namespace toposched::framework {
namespace {

packing::Shape Gpus(int n) {
  return packing::Shape{n, packing::kMilli, 0, {}};
}

TEST(ShapeWindowTest, CountsEachPodOnceAndForgetsTheOldest) {
  ShapeWindow window(/*size=*/4, /*refresh=*/1);
  EXPECT_EQ(window.Mix(), nullptr);
  window.Observe("a", Gpus(1));
  window.Observe("a", Gpus(1));  // the same pod asked about again
  window.Observe("", Gpus(2));   // no UID: ignored
  EXPECT_EQ(window.pods(), 1u);
  ASSERT_NE(window.Mix(), nullptr);
  ASSERT_EQ(window.Mix()->shapes.size(), 1u);
  EXPECT_EQ(window.Mix()->shapes[0].shape, Gpus(1));
  for (const char* uid : {"b", "c", "d", "e"}) window.Observe(uid, Gpus(8));
  EXPECT_EQ(window.pods(), 4u);
  // "a" left: only 8-GPU pods remain.
  ASSERT_EQ(window.Mix()->shapes.size(), 1u);
  EXPECT_EQ(window.Mix()->shapes[0].shape, Gpus(8));
  window.Observe("a", Gpus(1));  // forgotten, so counted again
  EXPECT_EQ(window.Mix()->shapes.size(), 2u);
}

// Pods that ask CPU alone are typical pods too (FGD's include them), but the window's count of
// pods asking a device is what says the mix has seen the GPU workload; a CPU-only pod that
// leaves the window is counted out of neither.
TEST(ShapeWindowTest, CountsThePodsThatAskADeviceApart) {
  ShapeWindow window(/*size=*/3, /*refresh=*/1);
  const packing::Shape cpu_only{0, 0, 8000, {}};
  const packing::Shape nic_only{0, 0, 0, {}, 1};
  window.Observe("cpu", cpu_only);
  window.Observe("gpu", Gpus(1));
  EXPECT_EQ(window.pods(), 2u);
  EXPECT_EQ(window.device_pods(), 1u);
  ASSERT_EQ(window.Mix()->shapes.size(), 2u) << "the CPU-only shape is one of the typical pods";
  window.Observe("nic", nic_only);
  EXPECT_EQ(window.device_pods(), 2u);
  window.Observe("gpu2", Gpus(2));  // "cpu" leaves
  EXPECT_EQ(window.pods(), 3u);
  EXPECT_EQ(window.device_pods(), 3u);
  window.Observe("cpu2", cpu_only);  // "gpu" leaves
  EXPECT_EQ(window.device_pods(), 2u);
}

// A recomputed mix that equals the last one is the last one (what is keyed by the mix's
// identity, the extender's shared verdicts, stays valid); a changed one is a new object.
TEST(ShapeWindowTest, AnUnchangedMixStaysTheSameObject) {
  ShapeWindow window(/*size=*/10, /*refresh=*/1);
  window.Observe("a", Gpus(2));
  const std::shared_ptr<const packing::ShapeMix> first = window.Mix();
  window.Observe("b", Gpus(2));
  EXPECT_EQ(window.Mix(), first);
  window.Observe("c", Gpus(8));
  EXPECT_NE(window.Mix(), first);
  EXPECT_EQ(window.Mix()->shapes.size(), 2u);
}

// Many pods at once (a window seeded with a cluster's pods): each UID once, one mix at the end;
// more pods than the window holds give an even sample of them, not the last ones.
TEST(ShapeWindowTest, ObserveAllCountsEachPodOnce) {
  ShapeWindow window(/*size=*/3, /*refresh=*/100);
  window.Observe("a", Gpus(1));
  window.ObserveAll({{"a", Gpus(1)}, {"b", Gpus(8)}, {"b", Gpus(8)}});
  EXPECT_EQ(window.pods(), 2u);
  ASSERT_NE(window.Mix(), nullptr);
  EXPECT_EQ(window.Mix()->shapes.size(), 2u);
  // Six pods for three places: the first, third and fifth (all 4-GPU), the older pods leaving.
  window.ObserveAll(
      {{"p0", Gpus(4)}, {"p1", Gpus(8)}, {"p2", Gpus(4)}, {"p3", Gpus(8)}, {"p4", Gpus(4)}, {"p5", Gpus(8)}});
  EXPECT_EQ(window.pods(), 3u);
  ASSERT_EQ(window.Mix()->shapes.size(), 1u);
  EXPECT_EQ(window.Mix()->shapes[0].shape, Gpus(4));
  const std::shared_ptr<const packing::ShapeMix> mix = window.Mix();
  window.ObserveAll({{"p0", Gpus(4)}, {"", Gpus(2)}});
  EXPECT_EQ(window.Mix(), mix) << "nothing new";
}

TEST(ShapeWindowTest, KeepsARareShapeThatHoldsTheGpuDemand) {
  ShapeWindow window(/*size=*/100, /*refresh=*/10);
  for (int i = 0; i < 95; ++i) window.Observe("small-" + std::to_string(i), Gpus(1));
  for (int i = 0; i < 5; ++i) window.Observe("large-" + std::to_string(i), Gpus(8));
  const auto mix = window.Mix();
  ASSERT_NE(mix, nullptr);
  // 5 % of the pods, 30 % of the GPUs: FGD's popularity cut alone would drop it.
  ASSERT_EQ(mix->shapes.size(), 2u);
  EXPECT_EQ(mix->shapes[0].shape, Gpus(1));
  EXPECT_DOUBLE_EQ(mix->shapes[0].weight, 0.95);
  EXPECT_EQ(mix->shapes[1].shape, Gpus(8));
  EXPECT_DOUBLE_EQ(mix->shapes[1].weight, 0.05);
}

}  // namespace
}  // namespace toposched::framework
