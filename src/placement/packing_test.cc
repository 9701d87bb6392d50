#include "toposched/placement/packing.h"

#include <gtest/gtest.h>

#include "toposched/topology/synthetic.h"

namespace toposched::packing {
namespace {

Shape Whole(int gpus, std::int64_t cpu = 0) {
  return Shape{gpus, kMilli, cpu, {}};
}
Shape Share(int milli, std::int64_t cpu = 0) {
  return Shape{1, milli, cpu, {}};
}
NodeState Node(std::vector<int> left, std::int64_t cpu = -1, std::string model = "T4") {
  return NodeState{std::move(left), cpu, std::move(model)};
}

TEST(PackingTest, TypicalShapesKeepTheMostFrequentUpToTheCoverage) {
  std::vector<Shape> pods;
  for (int i = 0; i < 6; ++i) pods.push_back(Share(500));
  for (int i = 0; i < 3; ++i) pods.push_back(Whole(8));
  pods.push_back(Whole(2));
  // 90 %: the 500-milli share (60 %) and the 8-GPU shape (30 %), renormalised.
  const ShapeMix mix = TypicalShapes(pods, 0.9);
  ASSERT_EQ(mix.shapes.size(), 2u);
  EXPECT_EQ(mix.shapes[0].shape, Share(500));
  EXPECT_DOUBLE_EQ(mix.shapes[0].weight, 6.0 / 9.0);
  EXPECT_EQ(mix.shapes[1].shape, Whole(8));
  EXPECT_DOUBLE_EQ(mix.shapes[1].weight, 3.0 / 9.0);
  EXPECT_EQ(TypicalShapes(pods, 1.0).shapes.size(), 3u);
  EXPECT_TRUE(TypicalShapes({}).shapes.empty());
}

TEST(PackingTest, TypicalShapesBreakCountTiesAsTheFgdSimulator) {
  // Two shapes of two pods each and one of one; 40 % coverage keeps one shape. The FGD
  // simulator sorts equal counts larger first by (CPU, milli, GPUs, model): equal CPU, so the
  // 500-milli share goes before the 300-milli one (a smaller-first order would keep the 300).
  const std::vector<Shape> pods = {Share(300, 1000), Share(500, 1000), Share(300, 1000), Share(500, 1000),
                                   Whole(1)};
  const ShapeMix mix = TypicalShapes(pods, 0.4);
  ASSERT_EQ(mix.shapes.size(), 1u);
  EXPECT_EQ(mix.shapes[0].shape, Share(500, 1000));
  // CPU first: 2 cores of 100 milli before 1 core of 900 milli.
  const ShapeMix by_cpu = TypicalShapes({Share(900, 1000), Share(100, 2000)}, 0.5);
  ASSERT_EQ(by_cpu.shapes.size(), 1u);
  EXPECT_EQ(by_cpu.shapes[0].shape, Share(100, 2000));
  // toposched's demand mix keeps the smaller shape among equal counts: the demand pass keeps the
  // whole GPU (1000 of 2200 milli at 40 %), the pods pass one of the two 2-pod shares: the one
  // of 300 CPU milli, where FGD's order keeps the one of 500.
  const std::vector<Shape> mixed = {Share(300, 500), Share(300, 300), Share(300, 500), Share(300, 300),
                                    Whole(1)};
  const ShapeMix demand = TypicalShapes(mixed, 0.4, Coverage::kPodsAndGpuDemand);
  ASSERT_EQ(demand.shapes.size(), 2u);
  EXPECT_EQ(demand.shapes[0].shape, Share(300, 300));
  EXPECT_EQ(demand.shapes[1].shape, Whole(1));
  EXPECT_EQ(TypicalShapes(mixed, 0.4).shapes.at(0).shape, Share(300, 500));
}

TEST(PackingTest, TypicalShapesByGpuDemandKeepTheRareLargeShape) {
  std::vector<Shape> pods;
  for (int i = 0; i < 80; ++i) pods.push_back(Whole(1));
  for (int i = 0; i < 16; ++i) pods.push_back(Share(500));
  for (int i = 0; i < 4; ++i) pods.push_back(Whole(8));
  // By pods (FGD): 1-GPU 80 % + shares 16 % reach 95 %; the 8-GPU shape (4 %) is dropped though
  // it asks for 32 of the 120 GPUs.
  const ShapeMix by_pods = TypicalShapes(pods, 0.95);
  ASSERT_EQ(by_pods.shapes.size(), 2u);
  // By demand too: 1-GPU (80 000 milli) and 8-GPU (32 000) reach 95 % of 120 000; the union
  // keeps all three, weights by pods, most frequent first.
  const ShapeMix both = TypicalShapes(pods, 0.95, Coverage::kPodsAndGpuDemand);
  ASSERT_EQ(both.shapes.size(), 3u);
  EXPECT_EQ(both.shapes[0].shape, Whole(1));
  EXPECT_DOUBLE_EQ(both.shapes[0].weight, 0.80);
  EXPECT_EQ(both.shapes[1].shape, Share(500));
  EXPECT_EQ(both.shapes[2].shape, Whole(8));
  EXPECT_DOUBLE_EQ(both.shapes[2].weight, 0.04);
  // Nothing but CPU pods: no demand, the popularity cut alone.
  EXPECT_EQ(TypicalShapes({Shape{}, Shape{}}, 0.95, Coverage::kPodsAndGpuDemand).shapes.size(), 1u);
}

TEST(PackingTest, FragmentationCountsWhatEachShapeCannotUse) {
  const ShapeMix mix{{{Share(500), 0.5}, {Whole(2), 0.5}}};
  // Share 500: fits, strands the 300 (and the 0): 150. Two whole GPUs: fit, strand 300: 150.
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000, 1000, 300, 0}), mix), 300);
  // One free GPU: the 2-GPU shape cannot run, so all 1300 idle is stranded for it.
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000, 300}), mix), 0.5 * 300 + 0.5 * 1300);
  // Nothing idle, nothing stranded.
  EXPECT_DOUBLE_EQ(Fragmentation(Node({0, 0}), mix), 0);
}

TEST(PackingTest, CpuModelAndCpuOnlyShapesStrandEverything) {
  const ShapeMix cpu_bound{{{Share(500, 4000), 1.0}}};
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000, 1000}, 8000), cpu_bound), 0);
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000, 1000}, 2000), cpu_bound), 2000);
  // Unknown CPU counts as enough.
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000, 1000}, -1), cpu_bound), 0);
  const ShapeMix cpu_only{{{Shape{0, 0, 1000, {}}, 1.0}}};
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000, 400}), cpu_only), 1400);
  Shape v100 = Whole(1);
  v100.models = {"v100m16", "V100M32"};
  const ShapeMix models{{{v100, 1.0}}};
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000}, -1, "T4"), models, ForeignModels::kCounted), 1000);
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000}, -1, "V100M16"), models), 0);
}

// FGD counts the idle GPU of a model a shape does not accept as fragmentation for it;
// toposched does not (ForeignModels): that GPU was never the shape's.
TEST(PackingTest, AModelAShapeDoesNotAcceptIsNotFragmentedForIt) {
  Shape v100 = Whole(1);
  v100.models = {"V100M32"};
  const ShapeMix mix{{{Whole(1), 0.5}, {v100, 0.5}}};
  const NodeState t4 = Node({1000, 1000}, -1, "T4");
  const NodeState v100_node = Node({1000, 1000}, -1, "V100M32");
  EXPECT_DOUBLE_EQ(Fragmentation(t4, mix), 0);
  EXPECT_DOUBLE_EQ(Fragmentation(t4, mix, ForeignModels::kCounted), 0.5 * 2000);
  const auto growth = [&](const NodeState& n, ForeignModels foreign) {
    return Fragmentation(After(n, Whole(1), {0}), mix, foreign) - Fragmentation(n, mix, foreign);
  };
  // FGD's count: one unpinned GPU on the T4 looks like it removes 500 of fragmentation, so its
  // measure pulls pods without a model constraint onto the models fewer shapes accept.
  EXPECT_DOUBLE_EQ(growth(t4, ForeignModels::kCounted), -500);
  EXPECT_DOUBLE_EQ(growth(v100_node, ForeignModels::kCounted), 0);
  // toposched's: neither strands anything for a shape that could use it; the model decides
  // nothing, the rest of the ranking does.
  EXPECT_DOUBLE_EQ(growth(t4, ForeignModels::kNotCounted), 0);
  EXPECT_DOUBLE_EQ(growth(v100_node, ForeignModels::kNotCounted), 0);
}

TEST(PackingTest, BestShareGpuMinimisesFragmentationNotLeftover) {
  // Best fit would take GPU 1 (600 -> 100, a stranded 100); FGD keeps both GPUs usable.
  const ShapeMix mix{{{Share(500), 1.0}}};
  EXPECT_EQ(BestShareGpu(Node({1000, 600}), Share(500), mix), 0);
  // A mix of 100-milli shares: either leaves everything usable; the tighter GPU wins the tie.
  const ShapeMix small{{{Share(100), 1.0}}};
  EXPECT_EQ(BestShareGpu(Node({1000, 600}), Share(500), small), 1);
  EXPECT_EQ(BestShareGpu(Node({400, 300}), Share(500), mix), -1);
}

TEST(PackingTest, RemnantCountsAndTheSumOfSquaresChange) {
  RemnantCounts gaps;
  // Free, whole-held and full GPUs are not gaps; 190 twice, 530 once.
  gaps.Add(Node({kMilli, 0, 190, 190, 530}));
  gaps.Add(-5);
  gaps.Add(kMilli + 1);
  EXPECT_EQ(gaps.Count(190), 2);
  EXPECT_EQ(gaps.Count(530), 1);
  EXPECT_EQ(gaps.Count(0), 0);
  EXPECT_EQ(gaps.Count(kMilli), 0);
  // 160 on a 190: gap 190 goes 2 -> 1 (1 - 4), gap 30 goes 0 -> 1 (+1).
  EXPECT_EQ(gaps.SumOfSquaresDelta(190, 160), -2);
  // 190 on a 190 fills it: only the gap it leaves counts.
  EXPECT_EQ(gaps.SumOfSquaresDelta(190, 190), -3);
  // 340 on the 530 makes a third 190: 1 - 2 for 530, 1 + 4 for 190.
  EXPECT_EQ(gaps.SumOfSquaresDelta(530, 340), 4);
  // 810 on a free GPU opens gap 190: only the gap it joins counts.
  EXPECT_EQ(gaps.SumOfSquaresDelta(kMilli, 810), 5);
  EXPECT_EQ(gaps.SumOfSquaresDelta(kMilli, 400), 1);
  // The tie rank keeps only what evens the gaps out.
  EXPECT_EQ(gaps.TieRank(190, 160), -2);
  EXPECT_EQ(gaps.TieRank(530, 340), 0);
  EXPECT_EQ(gaps.TieRank(kMilli, 810), 0);
}

TEST(PackingTest, AfterTakesGpusAndCpu) {
  const NodeState after = After(Node({1000, 700, 1000}, 5000), Share(300, 1000), {1});
  EXPECT_EQ(after.milli_left, (std::vector<int>{1000, 400, 1000}));
  EXPECT_EQ(after.cpu_left, 4000);
  EXPECT_EQ(After(Node({1000, 1000}), Whole(2), {0, 1}).milli_left, (std::vector<int>{0, 0}));
}

TEST(PackingTest, ShapeOfRequests) {
  PlacementRequest whole;
  whole.gpus = 4;
  EXPECT_EQ(ShapeOf(whole, 2000), Whole(4, 2000));
  PlacementRequest share;
  share.shared.count = 1;
  share.shared.cores = 4600;  // 46 % of the SMs
  share.shared.use_types = {"A100"};
  const Shape s = ShapeOf(share);
  EXPECT_EQ(s.gpus, 1);
  EXPECT_EQ(s.milli, 460);
  EXPECT_EQ(s.models, std::vector<std::string>{"A100"});
  share.shared.cores = 0;
  share.shared.memory_percent = 25;
  EXPECT_EQ(ShapeOf(share).milli, 250);
  share.shared.memory_percent = 0;
  share.shared.memory_mib = 8000;  // no compute limit: may use the whole card's compute
  EXPECT_EQ(ShapeOf(share).milli, kMilli);
  EXPECT_EQ(ShapeOf(PlacementRequest{}).gpus, 0);
}

TEST(PackingTest, StateOfReadsAllocations) {
  auto spec = SyntheticPreset("hgx-h100-8gpu");
  ASSERT_TRUE(spec.ok());
  auto t = GenerateSynthetic(*spec);
  ASSERT_TRUE(t.ok());
  NodeAllocation a;
  a.gpu_exclusive.assign(8, false);
  a.gpu_shares.assign(8, GpuShareUsage{});
  a.gpu_exclusive[0] = true;
  a.gpu_shares[1] = GpuShareUsage{2, 0, 5000};      // half the SMs
  a.gpu_shares[2] = GpuShareUsage{1, 40779, 2000};  // half the memory, 20 % of the SMs
  a.gpu_shares[3] = GpuShareUsage{1, 0, 0};         // no limits: the whole card
  const NodeState s = StateOf(*t, a, GpuVendor::kNvidia, 12000);
  ASSERT_EQ(s.milli_left.size(), 8u);
  EXPECT_EQ(s.milli_left[0], 0);
  EXPECT_EQ(s.milli_left[1], 500);
  EXPECT_EQ(s.milli_left[2], 500);
  EXPECT_EQ(s.milli_left[3], 0);
  EXPECT_EQ(s.milli_left[4], kMilli);
  EXPECT_EQ(s.cpu_left, 12000);
  EXPECT_TRUE(StateOf(*t, a, GpuVendor::kAmd).milli_left.empty());
  EXPECT_EQ(s.nics_left, 8);
  a.nic_used.assign(t->nics.size(), false);
  a.nic_used[0] = a.nic_used[5] = true;
  EXPECT_EQ(StateOf(*t, a, GpuVendor::kNvidia).nics_left, 6);
}

// The NIC extension: a shape that asks RDMA NICs cannot use a node with too few free, so a
// NIC-less pod on an RDMA node strands less than it does on a node NIC-asking pods cannot use,
// and a 1-GPU, 1-NIC pod on a whole 8-GPU, 8-NIC node strands the whole-node shape.
TEST(PackingTest, RdmaNicsCountInTheShapeAndTheNode) {
  PlacementRequest r;
  r.gpus = 2;
  r.rdma_nics = 2;
  EXPECT_EQ(ShapeOf(r).nics, 2);
  Shape decode = Whole(1);
  decode.nics = 1;
  Shape training = Whole(8);
  training.nics = 8;
  const ShapeMix mix{{{decode, 0.5}, {training, 0.5}}};
  NodeState rdma = Node(std::vector<int>(8, kMilli));
  rdma.nics_left = 8;
  const NodeState ethernet = Node(std::vector<int>(8, kMilli));  // no RDMA NIC
  EXPECT_TRUE(Fits(rdma, training));
  EXPECT_FALSE(Fits(ethernet, decode));
  EXPECT_DOUBLE_EQ(Fragmentation(rdma, mix), 0);
  EXPECT_DOUBLE_EQ(Fragmentation(ethernet, mix), 8000);  // neither shape can use any of it
  // A decode on the whole RDMA node: 7 GPUs, 7 NICs left, the training shape no longer fits.
  const NodeState after = After(rdma, decode, {0});
  EXPECT_EQ(after.nics_left, 7);
  EXPECT_DOUBLE_EQ(Fragmentation(after, mix), 0.5 * 7000);
  // NICs run out before GPUs: 8 GPUs idle, no NIC left, nothing NIC-asking fits.
  NodeState no_nics = rdma;
  no_nics.nics_left = 0;
  EXPECT_DOUBLE_EQ(Fragmentation(no_nics, mix), 8000);
}

}  // namespace
}  // namespace toposched::packing
