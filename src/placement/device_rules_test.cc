// The device rules every caller shares: what a vGPU needs and records of a card, and why one
// more does or does not fit.

#include "toposched/placement/device_rules.h"

#include <gtest/gtest.h>

namespace toposched {
namespace {

TEST(DeviceRules, ShareMemoryNeedAndWhatAVgpuRecords) {
  Gpu known;
  known.memory_mib = 40000;
  Gpu unknown;
  SharedGpuRequest mib{.count = 1, .memory_mib = 8000};
  SharedGpuRequest percent{.count = 1, .memory_percent = 25};
  SharedGpuRequest compute{.count = 1, .cores = 3000};
  EXPECT_EQ(ShareMemoryNeed(known, mib), 8000);
  EXPECT_EQ(ShareMemoryNeed(known, percent), 10000);
  EXPECT_EQ(ShareMemoryNeed(known, compute), 0);
  EXPECT_EQ(ShareMemoryNeed(unknown, mib), std::nullopt);
  EXPECT_EQ(ShareMemoryNeed(unknown, percent), std::nullopt);
  EXPECT_EQ(ShareMemoryNeed(unknown, compute), 0);
  EXPECT_EQ(ShareMemoryMib(unknown, mib), 8000);  // what it asked, recorded
  EXPECT_EQ(ShareMemoryMib(unknown, percent), 0);
  EXPECT_EQ(ShareMemoryMib(known, percent), 10000);
  // A percentage of a card whose size it does not divide: rounded down, as HAMi's
  // Totalmem * MemPercentagereq / 100, so three 33 % shares fit a card with room to spare.
  Gpu h100;
  h100.memory_mib = 81559;
  SharedGpuRequest half{.count = 1, .memory_percent = 50};
  SharedGpuRequest third{.count = 1, .memory_percent = 33};
  EXPECT_EQ(ShareMemoryNeed(h100, half), 40779);
  EXPECT_EQ(ShareMemoryNeed(h100, third), 26914);
}

// HAMi's device score (gpu_policy.go ComputeScore): slots, compute and memory used once the
// vGPU is added, each a fraction, summed; here in millionths. A card of unknown size leaves the
// memory term out.
TEST(DeviceRules, ShareUsageScoreIsHamisDeviceScore) {
  NodeTopology t;
  t.gpus.resize(2);
  t.gpus[0].memory_mib = 81559;
  t.gpus[1].index = 1;
  NodeAllocation a;
  a.gpu_shares = {GpuShareUsage{1, 10000, 6000}, GpuShareUsage{2, 12000, 2000}};
  PlacementRequest r;
  r.shared.count = 1;
  r.shared.memory_mib = 1000;
  r.shared.cores = 1000;
  // (1 + 1) / 10 + (6000 + 1000) / 10000 + (10000 + 1000) / 81559
  EXPECT_EQ(ShareUsageScore(t, a, r, 10, 0), 200000 + 700000 + 134871);
  // (2 + 1) / 10 + (2000 + 1000) / 10000, memory unknown
  EXPECT_EQ(ShareUsageScore(t, a, r, 10, 1), 300000 + 300000);
  // Nothing on the card yet: the vGPU's own part.
  EXPECT_EQ(ShareUsageScore(t, NodeAllocation{}, r, 4, 0), 250000 + 100000 + 12261);
}

TEST(DeviceRules, OneMoreVgpuFitsOrSaysWhyNot) {
  NodeTopology t;
  t.gpus.resize(2);
  t.gpus[0].memory_mib = 16000;
  t.gpus[0].model = "Tesla T4";
  t.gpus[1].memory_mib = 16000;
  t.gpus[1].unusable = "unhealthy";
  PlacementRequest r;
  r.shared = {.count = 1, .memory_mib = 8000, .cores = 5000};
  NodeAllocation a;
  EXPECT_EQ(JudgeSharedGpu(t, a, r, 10, 0), ShareVerdict::kFits);
  EXPECT_EQ(JudgeSharedGpu(t, a, r, 10, 1), ShareVerdict::kUnusable);
  a.gpu_shares = {GpuShareUsage{.shares = 1, .memory_mib = 9000, .cores = 0}};
  EXPECT_EQ(JudgeSharedGpu(t, a, r, 10, 0), ShareVerdict::kMemory);
  EXPECT_EQ(JudgeSharedGpu(t, a, r, 1, 0), ShareVerdict::kShareLimit);
  a.gpu_shares = {GpuShareUsage{.shares = 1, .memory_mib = 1000, .cores = 6000}};
  EXPECT_EQ(JudgeSharedGpu(t, a, r, 10, 0), ShareVerdict::kCores);
  r.shared.use_types = {"a100"};
  EXPECT_EQ(JudgeSharedGpu(t, a, r, 10, 0), ShareVerdict::kFiltered);
  a.gpu_exclusive = {true};
  r.shared.use_types.clear();
  EXPECT_EQ(JudgeSharedGpu(t, a, r, 10, 0), ShareVerdict::kExclusive);
  r.vendor = GpuVendor::kAmd;
  EXPECT_EQ(JudgeSharedGpu(t, a, r, 10, 0), ShareVerdict::kWrongVendor);
  // Past the allocation's vectors: nothing allocated.
  EXPECT_FALSE(GpuExclusive(a, 5));
  EXPECT_TRUE(GpuFree(a, 5));
  EXPECT_FALSE(NicUsed(a, 0));
  EXPECT_FALSE(RdmaNicFree(t, a, 0));  // no such NIC
}

}  // namespace
}  // namespace toposched
