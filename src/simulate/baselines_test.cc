// The baselines do what their names promise, on hand-built cases where the right answer can be
// read off the synthetic HGX H100: 2 sockets, 4 PCIe switches (each on its own root complex),
// switch s holding GPUs 2s, 2s+1 and NICs mlx5_2s, mlx5_2s+1; sockets hold switches 0-1 and 2-3.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "simulate_testing.h"
#include "toposched/framework/allocation.h"
#include "toposched/simulate/simulator.h"
#include "toposched/topology/synthetic.h"

namespace toposched::simulate {
namespace {

using testing::Preset;
using testing::Taken;
using testing::Whole;

PlacementRequest SharedSlice(std::int64_t memory_mib, std::int64_t cores) {
  PlacementRequest r;
  r.pod_name = "s";
  r.shared.count = 1;
  r.shared.memory_mib = memory_mib;
  r.shared.cores = cores;
  return r;
}

TEST(HgxLayout, MatchesWhatTheseTestsAssume) {
  const auto t = Preset("hgx-h100-8gpu");
  ASSERT_EQ(t->gpus.size(), 8u);
  ASSERT_EQ(t->RdmaNicCount(), 8);
  for (int g = 0; g < 8; ++g) {
    EXPECT_EQ(t->gpu_nic.at(g, g).cls, LinkClass::kPIX) << g;
    EXPECT_EQ(t->gpus[static_cast<std::size_t>(g)].package, g / 4) << g;
  }
  EXPECT_EQ(t->gpu_nic.at(0, 2).cls, LinkClass::kNODE);
  EXPECT_EQ(t->gpu_nic.at(0, 4).cls, LinkClass::kSYS);
}

// GPUs 0-2 and mlx5_0 taken: the lowest free GPUs are 3 (switch 1) and 4 (switch 2, the other
// socket), the lowest free NICs mlx5_1 (switch 0) and mlx5_2 (switch 1). GPU3 gets its own
// switch's mlx5_2 (PIX); GPU4 is left with mlx5_1 on the other socket (SYS). The engine, for
// comparison, finds GPUs 4+5 with mlx5_4+5, all PIX.
TEST(FirstFit, TakesTheLowestFreeDevicesEvenAcrossSwitches) {
  const auto t = Preset("hgx-h100-8gpu");
  const NodeAllocation a = Taken(*t, {0, 1, 2}, {0});
  const auto p = ChooseFirstFit(*t, a, Whole(2, 2));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->gpus, (std::vector<int>{3, 4}));
  EXPECT_EQ(p->nics, (std::vector<int>{1, 2}));
  ASSERT_EQ(p->pairs.size(), 2u);
  EXPECT_EQ(p->pairs[0], (GpuNicPair{3, 2, LinkClass::kPIX}));
  EXPECT_EQ(p->pairs[1], (GpuNicPair{4, 1, LinkClass::kSYS}));
  EXPECT_EQ(p->worst_class, LinkClass::kSYS);

  const PlacementOutcome engine = PlaceOnNode(*t, a, Whole(2, 2));
  ASSERT_TRUE(engine.ok());
  EXPECT_EQ(engine.placement->worst_class, LinkClass::kPIX);
}

TEST(FirstFit, RefusesWhatDoesNotFit) {
  const auto t = Preset("hgx-h100-8gpu");
  EXPECT_FALSE(ChooseFirstFit(*t, Taken(*t, {0, 1, 2, 3, 4, 5, 6}, {}), Whole(2, 0)).has_value());
  EXPECT_FALSE(ChooseFirstFit(*t, Taken(*t, {}, {0, 1, 2, 3, 4, 5, 6}), Whole(1, 2)).has_value());
  // A hard bound the first-fit devices break refuses the node (the policy tries the next one).
  PlacementRequest bounded = Whole(2, 2);
  bounded.max_gpu_nic_class = LinkClass::kPIX;
  EXPECT_FALSE(ChooseFirstFit(*t, Taken(*t, {0, 1, 2}, {0}), bounded).has_value());
  EXPECT_TRUE(ChooseFirstFit(*t, Taken(*t, {}, {}), bounded).has_value());
}

// Shared pods: the first GPU with room. GPU0 is held whole; GPU1 carries 75000 MiB of the H100's
// 81559, so an 8000 MiB slice does not fit there and lands on GPU2.
TEST(FirstFit, PutsASharedSliceOnTheFirstGpuWithRoom) {
  const auto t = Preset("hgx-h100-8gpu");
  NodeAllocation a = Taken(*t, {0}, {});
  a.gpu_shares.resize(t->gpus.size());
  a.gpu_shares[1] = GpuShareUsage{3, 75000, 3000};
  const auto p = ChooseFirstFit(*t, a, SharedSlice(8000, 2000));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->gpus, (std::vector<int>{2}));
  // 6000 MiB fits on GPU1 (75000 + 6000 <= 81559); 8000 cores (80%) do not (3000 + 8000 > 10000).
  EXPECT_EQ(ChooseFirstFit(*t, a, SharedSlice(6000, 2000))->gpus, (std::vector<int>{1}));
  EXPECT_EQ(ChooseFirstFit(*t, a, SharedSlice(6000, 8000))->gpus, (std::vector<int>{2}));
}

TEST(RootComplex, GroupsDevicesByTheTopOfTheirPcieChain) {
  const auto hgx = Preset("hgx-h100-8gpu");
  // Each switch sits on its own host bridge: GPUs 2s, 2s+1 and NICs 2s, 2s+1 share a root.
  for (int s = 0; s < 4; ++s) {
    const Gpu& a = hgx->gpus[static_cast<std::size_t>(2 * s)];
    const Gpu& b = hgx->gpus[static_cast<std::size_t>(2 * s + 1)];
    const Nic& n = hgx->nics[static_cast<std::size_t>(2 * s)];
    EXPECT_EQ(RootComplexOf(*hgx, a.parent, a.numa), RootComplexOf(*hgx, b.parent, b.numa));
    EXPECT_EQ(RootComplexOf(*hgx, a.parent, a.numa), RootComplexOf(*hgx, n.parent, n.numa));
    EXPECT_GE(RootComplexOf(*hgx, a.parent, a.numa), 0);
  }
  EXPECT_NE(RootComplexOf(*hgx, hgx->gpus[0].parent, 0), RootComplexOf(*hgx, hgx->gpus[2].parent, 0));
  // A flattened VM has no PCIe tree: one group per NUMA node, never colliding with a tree index.
  const auto vm = Preset("cloud-vm-8gpu");
  EXPECT_EQ(RootComplexOf(*vm, -1, 0), -2);
  EXPECT_EQ(RootComplexOf(*vm, -1, 1), -3);
  EXPECT_EQ(RootComplexOf(*vm, -1, -1), -1);
}

// Same half-used node as first-fit's case. 2 GPUs + 2 NICs fit under switch 2 or 3 (2 free
// pairs each): the fuller-or-equal, lowest one, switch 2. 1 GPU + 1 NIC fits under switch 1
// (GPU3, mlx5_2/3: 1 pair), the fullest that fits.
TEST(RootComplex, KeepsGpusAndNicsUnderOneRoot) {
  const auto t = Preset("hgx-h100-8gpu");
  const NodeAllocation a = Taken(*t, {0, 1, 2}, {0});
  const auto two = ChooseRootComplex(*t, a, Whole(2, 2));
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->gpus, (std::vector<int>{4, 5}));
  EXPECT_EQ(two->nics, (std::vector<int>{4, 5}));
  EXPECT_EQ(two->worst_class, LinkClass::kPIX);
  const auto one = ChooseRootComplex(*t, a, Whole(1, 1));
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->gpus, (std::vector<int>{3}));
  EXPECT_EQ(one->nics, (std::vector<int>{2}));
  EXPECT_EQ(one->worst_class, LinkClass::kPIX);
}

// No root holds 4 GPUs: GPUs come root by root (most free pairs first), NICs from those roots.
// With GPUs 0 and 3 taken, switches 2 and 3 have 2 free pairs, switches 0 and 1 one each: the
// GPUs are 4-7 and the NICs mlx5_4-7, every pair PIX (first-fit takes GPUs 1, 2, 4, 5).
TEST(RootComplex, SpansTheFewestRootsWhenNoneHoldsEverything) {
  const auto t = Preset("hgx-h100-8gpu");
  const NodeAllocation a = Taken(*t, {0, 3}, {});
  const auto p = ChooseRootComplex(*t, a, Whole(4, 4));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->gpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(p->nics, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(p->worst_class, LinkClass::kPIX);
  EXPECT_EQ(ChooseFirstFit(*t, a, Whole(4, 4))->gpus, (std::vector<int>{1, 2, 4, 5}));
}

// gpu-only: the GPUs the engine picks for the request without NICs; the NICs the lowest free.
TEST(GpuOnly, RanksGpusAndTakesTheFirstFreeNics) {
  const auto t = Preset("hgx-h100-8gpu");
  const NodeAllocation a = Taken(*t, {0, 1, 2}, {0});
  PlacementMemo memo;
  const auto p = ChooseGpuOnly(*t, a, Whole(2, 2), memo);
  ASSERT_TRUE(p.has_value());
  const PlacementOutcome gpus_only = PlaceOnNode(*t, a, Whole(2, 0));
  ASSERT_TRUE(gpus_only.ok());
  EXPECT_EQ(p->gpus, gpus_only.placement->gpus);
  EXPECT_EQ(p->nics, (std::vector<int>{1, 2}));
  // Not enough free NICs: refused before the GPUs are ranked.
  EXPECT_FALSE(ChooseGpuOnly(*t, Taken(*t, {}, {0, 1, 2, 3, 4, 5, 6, 7}), Whole(1, 1), memo).has_value());
}

// NCCL-style pairing: each GPU takes the best NIC with spare capacity, ceil(g/n) GPUs per NIC.
TEST(PairNearest, BestRankedNicWithSpareCapacity) {
  const auto t = Preset("hgx-h100-8gpu");
  // 4 GPUs on two NICs: two per NIC, each with its switch's NIC.
  EXPECT_EQ(PairNearest(*t, {0, 1, 2, 3}, {0, 2}), (std::vector<GpuNicPair>{{0, 0, LinkClass::kPIX},
                                                                            {1, 0, LinkClass::kPIX},
                                                                            {2, 2, LinkClass::kPIX},
                                                                            {3, 2, LinkClass::kPIX}}));
  // One GPU per NIC: GPU1 would like mlx5_0 too, but GPU0 holds it.
  EXPECT_EQ(PairNearest(*t, {0, 1}, {0, 4}),
            (std::vector<GpuNicPair>{{0, 0, LinkClass::kPIX}, {1, 4, LinkClass::kSYS}}));
  EXPECT_TRUE(PairNearest(*t, {0, 1}, {}).empty());
  EXPECT_EQ(WorstPairRank(*t, PairNearest(*t, {0, 1}, {0, 4})), 6);  // SYS across packages
}

// The policy around a baseline: the first node in cluster order where its choice succeeds,
// claimed in that node's allocation.
TEST(BaselinePolicy, TakesTheFirstNodeThatFitsAndClaimsIt) {
  const auto t = Preset("hgx-h100-8gpu");
  std::vector<VirtualNode> nodes(2);
  nodes[0].name = "full";
  nodes[0].topology = t;
  nodes[0].allocated = Taken(*t, {0, 1, 2, 3, 4, 5, 6, 7}, {});
  nodes[1].name = "empty";
  nodes[1].topology = t;
  for (const std::string name : {"first-fit", "gpu-only", "root-complex"}) {
    SCOPED_TRACE(name);
    std::vector<VirtualNode> copy = nodes;
    auto policy = MakePolicy(name);
    ASSERT_TRUE(policy.ok()) << policy.error().message();
    EXPECT_EQ((*policy)->Name(), name);
    auto d = (*policy)->Schedule(Whole(2, 2), copy, nullptr);
    ASSERT_TRUE(d.ok()) << d.error().message();
    ASSERT_TRUE(d->has_value());
    EXPECT_EQ((*d)->node, 1);
    for (int g : (*d)->placement.gpus) EXPECT_TRUE(GpuExclusive(copy[1].allocated, g));
    for (int n : (*d)->placement.nics) EXPECT_TRUE(NicUsed(copy[1].allocated, n));
    // Nothing fits 9 GPUs: pending, nothing claimed.
    const NodeAllocation before = copy[1].allocated;
    auto none = (*policy)->Schedule(Whole(9, 0), copy, nullptr);
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->has_value());
    EXPECT_EQ(copy[1].allocated, before);
  }
}

TEST(MakePolicy, NamesEveryPolicyAndRejectsOthers) {
  for (const std::string& name : PolicyNames()) {
    auto p = MakePolicy(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.error().message();
    EXPECT_EQ((*p)->Name(), name);
  }
  auto bad = MakePolicy("best-fit");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("unknown policy \"best-fit\""), std::string::npos);
  EXPECT_NE(bad.error().message().find("root-complex"), std::string::npos);
}

}  // namespace
}  // namespace toposched::simulate
