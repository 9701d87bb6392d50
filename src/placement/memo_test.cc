// PlacementMemo: one engine run per (hardware type, free state, request shape, options).

#include <gtest/gtest.h>

#include <string>

#include "toposched/placement/packing.h"
#include "toposched/placement/placement.h"
#include "toposched/topology/synthetic.h"

namespace toposched {
namespace {

NodeTopology Preset(const std::string& name, const std::string& node_name = "") {
  auto spec = SyntheticPreset(name);
  EXPECT_TRUE(spec.ok()) << name;
  auto t = GenerateSynthetic(*spec);
  EXPECT_TRUE(t.ok());
  if (!t.ok()) return {};
  if (!node_name.empty()) t->node_name = node_name;
  return *t;
}

PlacementRequest Whole(int gpus, int nics) {
  PlacementRequest r;
  r.gpus = gpus;
  r.rdma_nics = nics;
  return r;
}

void ExpectSame(const PlacementOutcome& a, const PlacementOutcome& b) {
  EXPECT_EQ(a.ok(), b.ok());
  EXPECT_EQ(a.failure, b.failure);
  EXPECT_EQ(a.detail, b.detail);
  EXPECT_EQ(a.placement, b.placement);
}

TEST(PlacementMemoTest, ACallerSuppliedFingerprintIsTheSameKeyAsTheComputedOne) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  const NodeTopology pcie = Preset("pcie-4gpu");
  PlacementMemo memo;
  const PlacementOutcome computed = memo.Place(hgx, {}, Whole(2, 2));
  const PlacementOutcome supplied = memo.Place(hgx, {}, Whole(2, 2), {}, hgx.Fingerprint());
  EXPECT_EQ(memo.hits(), 1u);  // same key either way
  ExpectSame(computed, supplied);
  // Another machine's fingerprint is another key (the caller's value is what the key uses).
  memo.Place(pcie, {}, Whole(2, 2), {}, pcie.Fingerprint());
  EXPECT_EQ(memo.misses(), 2u);
}

TEST(PlacementMemoTest, SecondIdenticalCallHitsWithTheSameOutcome) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  PlacementMemo memo;
  const PlacementOutcome first = memo.Place(hgx, {}, Whole(2, 2));
  EXPECT_EQ(memo.misses(), 1u);
  EXPECT_EQ(memo.hits(), 0u);
  const PlacementOutcome second = memo.Place(hgx, {}, Whole(2, 2));
  EXPECT_EQ(memo.misses(), 1u);
  EXPECT_EQ(memo.hits(), 1u);
  EXPECT_EQ(memo.size(), 1u);
  ASSERT_TRUE(second.ok());
  ExpectSame(first, second);
  ExpectSame(second, PlaceOnNode(hgx, {}, Whole(2, 2)));
}

// Every real node's GPU UUIDs are its own; the fingerprint leaves them out, so nodes of one type
// share entries, except for a request that names UUIDs, whose key carries the node's.
TEST(PlacementMemoTest, UuidsAreKeyedOnlyForRequestsThatNameThem) {
  NodeTopology a = Preset("inference-4gpu", "node-a");
  NodeTopology b = Preset("inference-4gpu", "node-b");
  for (std::size_t g = 0; g < a.gpus.size(); ++g) {
    a.gpus[g].uuid = "GPU-a" + std::to_string(g);
    b.gpus[g].uuid = "GPU-b" + std::to_string(g);
  }
  EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
  PlacementMemo memo;
  PlacementRequest shared;
  shared.shared.count = 1;
  shared.shared.memory_mib = 4000;
  memo.Place(a, {}, shared);
  memo.Place(b, {}, shared);
  EXPECT_EQ(memo.hits(), 1u);
  PlacementRequest named = shared;
  named.shared.use_uuids = {"GPU-b3"};
  const PlacementOutcome on_a = memo.Place(a, {}, named);
  const PlacementOutcome on_b = memo.Place(b, {}, named);
  EXPECT_EQ(memo.hits(), 1u) << "a request naming UUIDs shares nothing between the two";
  EXPECT_FALSE(on_a.ok());
  ASSERT_TRUE(on_b.ok());
  EXPECT_EQ(on_b.placement->gpus, std::vector<int>{3});
  ExpectSame(on_a, PlaceOnNode(a, {}, named));
  ExpectSame(on_b, PlaceOnNode(b, {}, named));
}

TEST(PlacementMemoTest, NodesOfOneHardwareTypeShareEntries) {
  // Node names differ, the hardware does not: the fingerprint leaves the name out.
  const NodeTopology a = Preset("hgx-h100-8gpu", "node-a");
  const NodeTopology b = Preset("hgx-h100-8gpu", "node-b");
  PlacementMemo memo;
  PlacementRequest pod_a = Whole(4, 4), pod_b = Whole(4, 4);
  pod_a.pod_name = "a";
  pod_b.pod_name = "b";  // same shape, another pod
  memo.Place(a, {}, pod_a);
  ExpectSame(memo.Place(b, {}, pod_b), PlaceOnNode(b, {}, pod_b));
  EXPECT_EQ(memo.hits(), 1u);
  EXPECT_EQ(memo.misses(), 1u);
}

TEST(PlacementMemoTest, ShortAllocationVectorsMeanFree) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  NodeAllocation explicit_free;
  explicit_free.gpu_exclusive.assign(8, false);
  explicit_free.nic_used.assign(hgx.nics.size(), false);
  explicit_free.gpu_shares.assign(8, {});
  PlacementMemo memo;
  memo.Place(hgx, {}, Whole(1, 1));
  memo.Place(hgx, explicit_free, Whole(1, 1));
  EXPECT_EQ(memo.hits(), 1u);
}

TEST(PlacementMemoTest, EveryInputOfTheOutcomeMisses) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  const NodeTopology a100 = Preset("hgx-a100-8gpu");
  NodeAllocation gpu0;
  gpu0.gpu_exclusive = {true};
  NodeAllocation nic0;
  nic0.nic_used = {true};
  NodeAllocation vgpu0;
  vgpu0.gpu_shares = {GpuShareUsage{1, 1000, 0}};
  NodeAllocation vgpu0_more = vgpu0;
  vgpu0_more.gpu_shares[0].memory_mib = 2000;
  PlacementRequest shared;
  shared.shared.count = 1;
  shared.shared.memory_mib = 1000;
  PlacementMemo memo;
  memo.Place(hgx, {}, Whole(1, 1));
  memo.Place(a100, {}, Whole(1, 1));                                     // hardware
  memo.Place(hgx, gpu0, Whole(1, 1));                                    // a GPU held whole
  memo.Place(hgx, nic0, Whole(1, 1));                                    // a NIC used
  memo.Place(hgx, vgpu0, Whole(1, 1));                                   // a vGPU
  memo.Place(hgx, vgpu0_more, Whole(1, 1));                              // its memory
  memo.Place(hgx, {}, Whole(1, 2));                                      // the request shape
  memo.Place(hgx, {}, shared);                                           // shared
  memo.Place(hgx, {}, shared, EngineOptions{PackPolicy::kBinpack, 10});  // options
  memo.Place(hgx, {}, shared, EngineOptions{PackPolicy::kSpread, 3});
  EXPECT_EQ(memo.hits(), 0u);
  EXPECT_EQ(memo.misses(), 10u);
  EXPECT_EQ(memo.size(), 10u);
  // Each state on its own gives what the engine gives.
  ExpectSame(memo.Place(hgx, gpu0, Whole(1, 1)), PlaceOnNode(hgx, gpu0, Whole(1, 1)));
  ExpectSame(memo.Place(hgx, vgpu0_more, Whole(1, 1)), PlaceOnNode(hgx, vgpu0_more, Whole(1, 1)));
  EXPECT_EQ(memo.hits(), 2u);
}

// The typical pods a single vGPU's card is chosen for are part of the key, by content.
TEST(PlacementMemoTest, TheSharePackingMixIsPartOfTheKey) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  PlacementRequest shared;
  shared.shared.count = 1;
  shared.shared.cores = 5000;
  packing::ShapeMix half, tenth;
  half.shapes.push_back({packing::Shape{.gpus = 1, .milli = 500}, 1.0});
  tenth.shapes.push_back({packing::Shape{.gpus = 1, .milli = 100}, 1.0});
  const packing::ShapeMix half_again = half;
  ASSERT_NE(packing::MixKey(half), packing::MixKey(tenth));
  PlacementMemo memo;
  memo.Place(hgx, {}, shared);
  memo.Place(hgx, {}, shared, {}, {}, {&half, packing::MixKey(half)});
  memo.Place(hgx, {}, shared, {}, {}, {&tenth, packing::MixKey(tenth)});
  EXPECT_EQ(memo.misses(), 3u);
  memo.Place(hgx, {}, shared, {}, {}, {&half_again, packing::MixKey(half_again)});
  EXPECT_EQ(memo.hits(), 1u) << "an equal mix in another object";
}

TEST(PlacementMemoTest, FailuresAreMemoizedToo) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  PlacementMemo memo;
  const PlacementOutcome first = memo.Place(hgx, {}, Whole(9, 0));
  const PlacementOutcome second = memo.Place(hgx, {}, Whole(9, 0));
  EXPECT_FALSE(second.ok());
  EXPECT_EQ(second.failure, FitFailure::kRequestTooLarge);
  ExpectSame(first, second);
  EXPECT_EQ(memo.hits(), 1u);
}

TEST(PlacementMemoTest, ClearsWhenFull) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  PlacementMemo memo(2);
  memo.Place(hgx, {}, Whole(1, 0));
  memo.Place(hgx, {}, Whole(2, 0));
  EXPECT_EQ(memo.size(), 2u);
  memo.Place(hgx, {}, Whole(3, 0));  // full: cleared, then this one stored
  EXPECT_EQ(memo.size(), 1u);
  memo.Place(hgx, {}, Whole(3, 0));
  EXPECT_EQ(memo.hits(), 1u);
  memo.Place(hgx, {}, Whole(1, 0));  // was cleared: computed again
  EXPECT_EQ(memo.misses(), 4u);
  EXPECT_EQ(memo.size(), 2u);
}

TEST(PlacementMemoTest, ZeroCapacityStoresNothing) {
  const NodeTopology hgx = Preset("hgx-h100-8gpu");
  PlacementMemo memo(0);
  const PlacementOutcome first = memo.Place(hgx, {}, Whole(1, 1));
  memo.Place(hgx, {}, Whole(1, 1));
  EXPECT_EQ(memo.size(), 0u);
  EXPECT_EQ(memo.hits(), 0u);
  EXPECT_EQ(memo.misses(), 2u);
  EXPECT_TRUE(first.ok());
}

}  // namespace
}  // namespace toposched
