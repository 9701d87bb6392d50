#include "toposched/framework/allocation.h"

#include <gtest/gtest.h>

#include "testing/framework_testing.h"

namespace toposched::framework {
namespace {

using toposched::testing::PresetTopology;

TEST(ShareMemoryMibTest, AbsoluteOrPercentRoundedDownAsHami) {
  Gpu gpu;
  gpu.memory_mib = 81559;
  SharedGpuRequest s;
  s.memory_mib = 10000;
  EXPECT_EQ(ShareMemoryMib(gpu, s), 10000);
  s.memory_mib = 0;
  s.memory_percent = 25;
  EXPECT_EQ(ShareMemoryMib(gpu, s), 20389);  // 81559 * 25 / 100 = 20389.75, rounded down as HAMi's fit
  gpu.memory_mib = 0;
  EXPECT_EQ(ShareMemoryMib(gpu, s), 0);
}

TEST(AllocationDeltaTest, WholeRequestTakesGpusAndNics) {
  const auto t = PresetTopology("hgx-h100-8gpu");
  PlacementRequest r;
  r.gpus = 2;
  r.rdma_nics = 1;
  Placement p;
  p.gpus = {2, 3};
  p.nics = {1};
  const AllocationDelta d = DeltaOf(*t, r, p);
  EXPECT_EQ(d.exclusive_gpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(d.nics, (std::vector<int>{1}));
  EXPECT_TRUE(d.shares.empty());
}

TEST(AllocationDeltaTest, ApplyThenRevertGivesBackAnEqualAllocation) {
  const auto t = PresetTopology("hgx-h100-8gpu");
  const AllocationDelta d{{2, 3}, {}, {1}};
  // From "nothing allocated" (empty vectors) and from sized vectors alike.
  NodeAllocation sized;
  sized.gpu_exclusive.assign(8, false);
  sized.gpu_exclusive[7] = true;
  for (const NodeAllocation& start : {NodeAllocation{}, sized}) {
    NodeAllocation a = start;
    const AllocationShape before = ShapeOf(a);
    ASSERT_TRUE(ApplyDelta(*t, d, a).ok());
    EXPECT_TRUE(GpuExclusive(a, 2));
    EXPECT_TRUE(GpuExclusive(a, 3));
    EXPECT_TRUE(NicUsed(a, 1));
    EXPECT_FALSE(NicUsed(a, 0));
    RevertDelta(d, before, a);
    EXPECT_EQ(a, start);
  }
}

TEST(AllocationDeltaTest, ApplyIsAllOrNothing) {
  const auto t = PresetTopology("hgx-h100-8gpu");
  struct Case {
    std::string name;
    AllocationDelta delta;
    std::string error;
  };
  NodeAllocation taken;
  taken.gpu_exclusive = {false, false, false, true};  // GPU3 whole
  taken.nic_used = {false, true};                     // NIC1 used
  taken.gpu_shares = {{}, {}, {}, {}, {1, 1000, 0}};  // GPU4 carries a vGPU
  const std::vector<Case> cases = {
      {"gpu held whole", {{2, 3}, {}, {}}, "GPU3 is not free"},
      {"gpu carries a vgpu", {{4}, {}, {}}, "GPU4 is not free"},
      {"share on a whole gpu", {{}, {{3, {1, 10, 0}}}, {}}, "GPU3 is held whole"},
      {"nic used", {{0}, {}, {0, 1}}, "mlx5_1 is in use"},
      {"gpu out of range", {{8}, {}, {}}, "GPU index 8 out of range"},
      {"nic out of range", {{}, {}, {-1}}, "NIC index -1 out of range"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    NodeAllocation a = taken;
    const Status s = ApplyDelta(*t, c.delta, a);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message().find(c.error), std::string::npos) << s.error().message();
    EXPECT_EQ(a, taken) << "a failed apply changes nothing";
  }
}

TEST(AllocationDeltaTest, SharesAccumulateAndRevertOneAtATime) {
  const auto t = PresetTopology("hgx-h100-8gpu");
  PlacementRequest r;
  r.shared.count = 1;
  r.shared.memory_mib = 10000;
  r.shared.cores = 3000;
  Placement p;
  p.gpus = {5};
  const AllocationDelta d = DeltaOf(*t, r, p);
  ASSERT_EQ(d.shares.size(), 1u);
  EXPECT_EQ(d.shares[0].first, 5);
  EXPECT_EQ(d.shares[0].second, (GpuShareUsage{1, 10000, 3000}));

  NodeAllocation a;
  const AllocationShape empty = ShapeOf(a);
  ASSERT_TRUE(ApplyDelta(*t, d, a).ok());
  const AllocationShape one = ShapeOf(a);
  ASSERT_TRUE(ApplyDelta(*t, d, a).ok());
  EXPECT_EQ(GpuShares(a, 5), (GpuShareUsage{2, 20000, 6000}));  // two vGPUs of 10000 MiB, 30 % each
  EXPECT_FALSE(GpuFree(a, 5));
  RevertDelta(d, one, a);
  EXPECT_EQ(GpuShares(a, 5), (GpuShareUsage{1, 10000, 3000})) << "the other vGPU stays";
  RevertDelta(d, empty, a);
  EXPECT_EQ(a, NodeAllocation{});
}

TEST(AllocationDeltaTest, RevertKeepsWhatWasReservedInBetween) {
  const auto t = PresetTopology("hgx-h100-8gpu");
  const AllocationDelta first{{0}, {}, {}}, second{{6}, {}, {}};
  NodeAllocation a;
  const AllocationShape before_first = ShapeOf(a);
  ASSERT_TRUE(ApplyDelta(*t, first, a).ok());
  ASSERT_TRUE(ApplyDelta(*t, second, a).ok());
  RevertDelta(first, before_first, a);
  EXPECT_FALSE(GpuExclusive(a, 0));
  EXPECT_TRUE(GpuExclusive(a, 6)) << "not shrunk away: GPU6 was reserved after the first delta";
}

}  // namespace
}  // namespace toposched::framework
