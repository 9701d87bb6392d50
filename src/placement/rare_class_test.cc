#include "toposched/placement/rare_class.h"

#include <gtest/gtest.h>

#include "toposched/topology/synthetic.h"

namespace toposched::packing {
namespace {

Shape WithNics(int gpus, int nics) {
  Shape s;
  s.gpus = gpus;
  s.milli = kMilli;
  s.nics = nics;
  return s;
}

NodeHardware Nvidia(int gpus, int nics) {
  NodeHardware h;
  h.gpus[VendorIndex(GpuVendor::kNvidia)] = gpus;
  h.rdma_nics = nics;
  return h;
}

// A serving mix: decode (1 GPU, 1 NIC), prefill (4, 4), training (8, 8), a NIC-less share.
ShapeMix ServingMix() {
  Shape share;
  share.gpus = 1;
  share.milli = 300;
  return ShapeMix{{{WithNics(1, 1), 0.5}, {WithNics(4, 4), 0.2}, {share, 0.25}, {WithNics(8, 8), 0.05}}};
}

TEST(RareClassTest, TheShapeFewestNodesCanHostIsRareForPodsMoreNodesCanHost) {
  // 2 nodes of 8 GPUs and 8 NICs, 6 of 8 GPUs and 4 NICs, 4 without NICs.
  std::vector<NodeHardware> nodes(2, Nvidia(8, 8));
  nodes.insert(nodes.end(), 6, Nvidia(8, 4));
  nodes.insert(nodes.end(), 4, Nvidia(4, 0));
  const HardwareCensus census = CensusOf(nodes);
  ASSERT_EQ(census.size(), 3u);
  // Decode: 8 hosts; training: 2. Training is rare for decode and for prefill (8 hosts).
  EXPECT_EQ(RareShape(ServingMix(), WithNics(1, 1), GpuVendor::kNvidia, census), WithNics(8, 8));
  EXPECT_EQ(RareShape(ServingMix(), WithNics(4, 4), GpuVendor::kNvidia, census), WithNics(8, 8));
  // Not for the rare shape itself, nor for a pod as rare (8 GPUs, 5 NICs: the same 2 hosts).
  EXPECT_EQ(RareShape(ServingMix(), WithNics(8, 8), GpuVendor::kNvidia, census), std::nullopt);
  EXPECT_EQ(RareShape(ServingMix(), WithNics(8, 5), GpuVendor::kNvidia, census), std::nullopt);
  // Nor for pods that ask no RDMA NIC (shares, plain GPUs): their nodes are the NIC-less ones.
  EXPECT_EQ(RareShape(ServingMix(), WithNics(1, 0), GpuVendor::kNvidia, census), std::nullopt);
  // Nor for another vendor's pods: no node has AMD GPUs.
  EXPECT_EQ(RareShape(ServingMix(), WithNics(1, 1), GpuVendor::kAmd, census), std::nullopt);
  // Which nodes the rule keeps: those whose hardware can host training when empty.
  EXPECT_TRUE(HostsWhenEmpty(Nvidia(8, 8), GpuVendor::kNvidia, WithNics(8, 8)));
  EXPECT_FALSE(HostsWhenEmpty(Nvidia(8, 4), GpuVendor::kNvidia, WithNics(8, 8)));
  EXPECT_FALSE(HostsWhenEmpty(Nvidia(8, 8), GpuVendor::kAmd, WithNics(8, 8)));
}

TEST(RareClassTest, NoRuleWhereEveryNicSitsOnTheLargestBoards) {
  // The embedded `simulate` default's shape: every RDMA NIC is on an 8-GPU, 8-NIC node, so the
  // nodes that can host decode are exactly those that can host training: nothing is rarer.
  std::vector<NodeHardware> nodes(10, Nvidia(8, 8));
  nodes.insert(nodes.end(), 5, Nvidia(2, 0));
  EXPECT_EQ(RareShape(ServingMix(), WithNics(1, 1), GpuVendor::kNvidia, CensusOf(nodes)), std::nullopt);
  // A shape no node can host is not the rare one (it would keep nothing).
  ShapeMix mix = ServingMix();
  mix.shapes.push_back({WithNics(16, 16), 0.01});
  EXPECT_EQ(RareShape(mix, WithNics(1, 1), GpuVendor::kNvidia, CensusOf(nodes)), std::nullopt);
  EXPECT_EQ(RareShape(ShapeMix{}, WithNics(1, 1), GpuVendor::kNvidia, CensusOf(nodes)), std::nullopt);
}

TEST(RareClassTest, EqualHostsGoToTheLargerShape) {
  std::vector<NodeHardware> nodes(3, Nvidia(8, 8));
  nodes.insert(nodes.end(), 9, Nvidia(4, 2));
  // (8, 8) and (8, 6) both fit the same 3 nodes: the larger is the rare shape.
  ShapeMix mix{{{WithNics(1, 1), 0.8}, {WithNics(8, 6), 0.1}, {WithNics(8, 8), 0.1}}};
  EXPECT_EQ(RareShape(mix, WithNics(1, 1), GpuVendor::kNvidia, CensusOf(nodes)), WithNics(8, 8));
}

TEST(RareClassTest, HardwareCountsEveryGpuAndRdmaNicWhateverIsInUse) {
  auto spec = SyntheticPreset("hgx-h100-8gpu");
  ASSERT_TRUE(spec.ok());
  auto made = GenerateSynthetic(*spec);
  ASSERT_TRUE(made.ok());
  const NodeTopology& t = *made;
  const NodeHardware h = HardwareOf(t);
  EXPECT_EQ(h.gpus[VendorIndex(GpuVendor::kNvidia)], static_cast<int>(t.gpus.size()));
  EXPECT_EQ(h.gpus[VendorIndex(GpuVendor::kAmd)], 0);
  EXPECT_EQ(h.rdma_nics, t.RdmaNicCount());
  EXPECT_GT(h.rdma_nics, 0);
}

}  // namespace
}  // namespace toposched::packing
