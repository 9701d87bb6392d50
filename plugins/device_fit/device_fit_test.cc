#include "device_fit/device_fit.h"

#include <gtest/gtest.h>

#include <type_traits>

#include "registry.h"
#include "testing/framework_testing.h"
#include "toposched/framework/framework.h"

namespace toposched::plugins::device_fit {
namespace {

using framework::Code;
using framework::CycleState;
using framework::NodeInfo;
using toposched::testing::CycleWith;
using toposched::testing::Fails;
using toposched::testing::Fits;
using toposched::testing::NodeBuilder;
using toposched::testing::PlacementOn;
using toposched::testing::PresetTopology;
using toposched::testing::RequestBuilder;

static_assert(std::is_base_of_v<framework::FilterPlugin, DeviceFit>);
static_assert(std::is_base_of_v<framework::ReservePlugin, DeviceFit>);
static_assert(!std::is_base_of_v<framework::ScorePlugin, DeviceFit>);

TEST(DeviceFitTest, FilterMapsTheEngineOutcome) {
  const auto& t = *PresetTopology("hgx-h100-8gpu");
  struct Case {
    std::string name;
    PlacementOutcome outcome;
    Code code;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"fits", Fits(PlacementOn(t, {0, 1}, {0, 1})), Code::kSuccess, ""},
      {"too large: never on this node", Fails(FitFailure::kRequestTooLarge, "9 GPUs asked, the node has 8"),
       Code::kUnschedulableAndUnresolvable, "9 GPUs asked, the node has 8"},
      {"not enough free GPUs", Fails(FitFailure::kNotEnoughGpus, "2 GPUs asked, 1 free"),
       Code::kUnschedulable, "2 GPUs asked, 1 free"},
      {"not enough free NICs", Fails(FitFailure::kNotEnoughNics, "2 NICs asked, 0 free"),
       Code::kUnschedulable, "2 NICs asked, 0 free"},
      {"alignment", Fails(FitFailure::kAlignmentUnsatisfiable, "best class now NODE, PIX required"),
       Code::kUnschedulable, "best class now NODE, PIX required"},
      {"share capacity", Fails(FitFailure::kNotEnoughShareCapacity, "no GPU with 20000 MiB free"),
       Code::kUnschedulable, "no GPU with 20000 MiB free"},
      {"no detail: the failure's name", Fails(FitFailure::kNotEnoughGpus, ""), Code::kUnschedulable,
       std::string(ToString(FitFailure::kNotEnoughGpus))},
  };
  const DeviceFit plugin;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CycleState state = CycleWith(RequestBuilder().Gpus(2).Nics(2).Build(), c.outcome);
    const framework::PluginStatus s = plugin.Filter(state, NodeBuilder("n", "hgx-h100-8gpu").Build());
    EXPECT_EQ(s.code(), c.code);
    EXPECT_EQ(s.reason(), c.reason);
    if (!s.ok()) {
      EXPECT_EQ(s.plugin(), kName);
    }
  }
}

TEST(DeviceFitTest, NodesWithoutTopologyOrCordonedAreUnresolvable) {
  const DeviceFit plugin;
  CycleState state = CycleWith(RequestBuilder().Gpus(1).Build(), Fits(Placement{}));
  const auto bare = plugin.Filter(state, NodeBuilder("bare", "hgx-h100-8gpu").NoTopology().Build());
  EXPECT_EQ(bare.code(), Code::kUnschedulableAndUnresolvable);
  EXPECT_EQ(bare.reason(), kReasonNoTopology);
  const auto cordoned = plugin.Filter(state, NodeBuilder("c", "hgx-h100-8gpu").Cordoned().Build());
  EXPECT_EQ(cordoned.code(), Code::kUnschedulableAndUnresolvable);
  EXPECT_EQ(cordoned.reason(), kReasonCordoned);
  framework::NodeInfo held = NodeBuilder("h", "hgx-h100-8gpu").Build();
  held.held = true;  // a pod's allocation could not be read back
  const auto h = plugin.Filter(state, held);
  EXPECT_EQ(h.code(), Code::kUnschedulableAndUnresolvable);
  EXPECT_EQ(h.reason(), kReasonHeld);
  EXPECT_FALSE(plugin.Reserve(state, held).ok());
  EXPECT_EQ(state.placer_calls(), 0u) << "none reaches the engine";
}

TEST(DeviceFitTest, ReserveClaimsThePlacementAndUnreserveRevertsExactly) {
  const auto& t = *PresetTopology("hgx-h100-8gpu");
  const DeviceFit plugin;
  CycleState state = CycleWith(RequestBuilder().Gpus(2).Nics(1).Build(), Fits(PlacementOn(t, {2, 3}, {2})));
  NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").ExclusiveGpus({7}).Build();
  const NodeAllocation before = node.allocated;

  ASSERT_TRUE(plugin.Reserve(state, node).ok());
  EXPECT_EQ(node.allocated.gpu_exclusive,
            (std::vector<bool>{false, false, true, true, false, false, false, true}));
  ASSERT_GE(node.allocated.nic_used.size(), 3u);
  EXPECT_TRUE(node.allocated.nic_used[2]);
  EXPECT_TRUE(node.allocated.gpu_shares.empty()) << "a whole request adds no shares";

  ASSERT_TRUE(plugin.Reserve(state, node).ok()) << "a second Reserve in the cycle is a no-op";
  plugin.Unreserve(state, node);
  EXPECT_EQ(node.allocated, before);
  plugin.Unreserve(state, node);  // idempotent
  EXPECT_EQ(node.allocated, before);
}

TEST(DeviceFitTest, UnreserveWithoutReserveDoesNothing) {
  const DeviceFit plugin;
  CycleState state = CycleWith(RequestBuilder().Gpus(1).Build(), Fits(Placement{}));
  NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").ExclusiveGpus({1}).Build();
  const NodeAllocation before = node.allocated;
  plugin.Unreserve(state, node);
  EXPECT_EQ(node.allocated, before);
}

TEST(DeviceFitTest, ReserveAddsShares) {
  const DeviceFit plugin;
  CycleState state = CycleWith(RequestBuilder().Shared(2, 10000, 2500).Build(),
                               Fits(PlacementOn(*PresetTopology("hgx-h100-8gpu"), {4, 5}, {})));
  NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").Shares(4, 1, 5000, 1000).Build();
  const NodeAllocation before = node.allocated;
  ASSERT_TRUE(plugin.Reserve(state, node).ok());
  // GPU4 had 1 vGPU (5000 MiB, 10 %); it now carries 2 (15000 MiB, 35 %). GPU5 carries 1.
  EXPECT_EQ(node.allocated.gpu_shares[4], (GpuShareUsage{2, 15000, 3500}));
  EXPECT_EQ(node.allocated.gpu_shares[5], (GpuShareUsage{1, 10000, 2500}));
  EXPECT_TRUE(node.allocated.gpu_exclusive.empty()) << "shared GPUs are not held whole";
  plugin.Unreserve(state, node);
  EXPECT_EQ(node.allocated, before);
}

TEST(DeviceFitTest, ReserveOfAnInfeasibleNodeFails) {
  const DeviceFit plugin;
  CycleState state = CycleWith(RequestBuilder().Gpus(2).Build(), Fails(FitFailure::kNotEnoughGpus, "1 free"));
  NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").Build();
  const auto s = plugin.Reserve(state, node);
  EXPECT_EQ(s.code(), Code::kUnschedulable);
  EXPECT_EQ(node.allocated, NodeAllocation{});
}

TEST(DeviceFitTest, PlacementOnTakenDevicesIsAnErrorAndChangesNothing) {
  const auto& t = *PresetTopology("hgx-h100-8gpu");
  const DeviceFit plugin;
  // A broken engine (here: a fake) that places onto GPU1, which the node holds already.
  CycleState state = CycleWith(RequestBuilder().Gpus(2).Build(), Fits(PlacementOn(t, {0, 1}, {})));
  NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").ExclusiveGpus({1}).Build();
  const NodeAllocation before = node.allocated;
  const auto s = plugin.Reserve(state, node);
  EXPECT_EQ(s.code(), Code::kError);
  EXPECT_NE(s.reason().find("GPU1 is not free"), std::string::npos) << s.reason();
  EXPECT_EQ(node.allocated, before);
  plugin.Unreserve(state, node);
  EXPECT_EQ(node.allocated, before) << "nothing was recorded, nothing is reverted";
}

TEST(DeviceFitTest, FactoryRejectsArgs) {
  EXPECT_TRUE(New({}).ok());
  Result<std::unique_ptr<framework::Plugin>> p = New({{"strict", "true"}});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message().find("takes no args (got: strict)"), std::string::npos);
}

// With the engine: an HGX node fills up pod by pod, and Reserve/Unreserve keep count.
TEST(DeviceFitWithEngineTest, FillsAnHgxNode) {
  Result<framework::Framework> f = framework::Framework::Create(
      framework::SchedulerConfig{{{std::string(kName), 1, {}}}, {}, {}, {}}, BuiltinRegistry());
  ASSERT_TRUE(f.ok()) << f.error().message();
  NodeInfo node = NodeBuilder("hgx", "hgx-h100-8gpu").Build();

  for (int pod = 0; pod < 2; ++pod) {
    SCOPED_TRACE(pod);
    CycleState state = f->NewCycle(RequestBuilder().Gpus(4).Nics(4).Build());
    ASSERT_TRUE(f->RunFilter(state, node).ok());
    ASSERT_TRUE(f->RunReserve(state, node).ok());
  }
  // 8 of 8 GPUs and 8 of 8 RDMA NICs are held.
  for (int g = 0; g < 8; ++g) EXPECT_TRUE(node.allocated.gpu_exclusive[static_cast<std::size_t>(g)]) << g;
  for (int n = 0; n < 8; ++n) EXPECT_TRUE(node.allocated.nic_used[static_cast<std::size_t>(n)]) << n;

  CycleState one_more = f->NewCycle(RequestBuilder().Gpus(1).Build());
  EXPECT_EQ(f->RunFilter(one_more, node).code(), Code::kUnschedulable) << "full now, free later";
  CycleState too_big = f->NewCycle(RequestBuilder().Gpus(9).Build());
  EXPECT_EQ(f->RunFilter(too_big, node).code(), Code::kUnschedulableAndUnresolvable) << "8 GPUs in all";

  // Filter on the free node, then another pod takes GPUs: Reserve sees the change and places anew.
  NodeInfo fresh = NodeBuilder("fresh", "hgx-h100-8gpu").Build();
  CycleState state = f->NewCycle(RequestBuilder().Gpus(2).Build());
  ASSERT_TRUE(f->RunFilter(state, fresh).ok());
  const std::vector<int> filtered = state.Outcome(fresh).placement->gpus;
  for (int g : filtered) {
    fresh.allocated.gpu_exclusive.resize(8);
    fresh.allocated.gpu_exclusive[static_cast<std::size_t>(g)] = true;
  }
  ASSERT_TRUE(f->RunReserve(state, fresh).ok()) << "re-placed on the GPUs still free";
  int held = 0;
  for (bool b : fresh.allocated.gpu_exclusive) held += b ? 1 : 0;
  EXPECT_EQ(held, 4);
}

}  // namespace
}  // namespace toposched::plugins::device_fit
