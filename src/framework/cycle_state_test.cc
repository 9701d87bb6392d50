#include "toposched/framework/cycle_state.h"

#include <gtest/gtest.h>

#include "testing/framework_testing.h"

namespace toposched::framework {
namespace {

using toposched::testing::FakePlacer;
using toposched::testing::Fits;
using toposched::testing::NodeBuilder;
using toposched::testing::RequestBuilder;

TEST(CycleStateTest, OneEngineCallPerNodeState) {
  FakePlacer placer{Fits(Placement{})};
  CycleState state(RequestBuilder().Gpus(1).Build(), placer.AsPlacer());
  NodeInfo a = NodeBuilder("a", "hgx-h100-8gpu").Build();
  const NodeInfo b = NodeBuilder("b", "hgx-h100-8gpu").Build();

  EXPECT_TRUE(state.Outcome(a).ok());
  EXPECT_TRUE(state.Outcome(a).ok());
  EXPECT_EQ(*placer.calls, 1) << "a second look at node a reads the cache";
  state.Outcome(b);
  EXPECT_EQ(*placer.calls, 2) << "another node name is another computation";

  a.allocated.gpu_exclusive = {true};
  state.Outcome(a);
  EXPECT_EQ(*placer.calls, 3) << "the allocation changed: the cached placement may use taken devices";
  state.Outcome(a);
  EXPECT_EQ(*placer.calls, 3);

  a.topology = toposched::testing::PresetTopology("hgx-a100-8gpu");
  state.Outcome(a);
  EXPECT_EQ(*placer.calls, 4) << "another topology object (a refreshed NodeTopology)";
  EXPECT_EQ(state.placer_calls(), 4u);
}

// Nodes of one outcome key (the extender's node classes) share one engine result while their
// allocations are equal; a node whose allocation differs, or a node without a key, is computed
// on its own, and a shared result is never replaced under a reference given out.
TEST(CycleStateTest, NodesOfOneOutcomeKeyShareOneEngineCall) {
  FakePlacer placer{Fits(Placement{})};
  CycleState state(RequestBuilder().Gpus(1).Build(), placer.AsPlacer());
  NodeInfo a = NodeBuilder("a", "hgx-h100-8gpu").Build();
  NodeInfo b = NodeBuilder("b", "hgx-h100-8gpu").Build();
  NodeInfo c = NodeBuilder("c", "hgx-h100-8gpu").Build();
  a.outcome_key = b.outcome_key = c.outcome_key = 42;

  state.Outcome(a);
  const PlacementOutcome* shared = &state.Outcome(b);
  EXPECT_EQ(*placer.calls, 1) << "b is of a's key, with a's allocation";

  c.allocated.gpu_exclusive = {true};
  state.Outcome(c);
  EXPECT_EQ(*placer.calls, 2) << "c's allocation differs: its own computation";
  EXPECT_EQ(&state.Outcome(b), shared) << "the key's first result stays";

  NodeInfo d = NodeBuilder("d", "hgx-h100-8gpu").Build();
  state.Outcome(d);
  EXPECT_EQ(*placer.calls, 3) << "no key: per node name";
  NodeInfo e = NodeBuilder("e", "hgx-h100-8gpu").Build();
  e.outcome_key = 7;
  state.Outcome(e);
  EXPECT_EQ(*placer.calls, 4) << "another key";
}

TEST(CycleStateTest, NodeWithoutTopologyHasNoPlacementAndNeverReachesTheEngine) {
  FakePlacer placer{Fits(Placement{})};
  CycleState state(RequestBuilder().Gpus(1).Build(), placer.AsPlacer());
  const PlacementOutcome& o = state.Outcome(NodeBuilder("bare", "hgx-h100-8gpu").NoTopology().Build());
  EXPECT_FALSE(o.ok());
  EXPECT_NE(o.detail.find("NodeTopology"), std::string::npos);
  EXPECT_EQ(*placer.calls, 0);
}

TEST(CycleStateTest, RequestIsKept) {
  CycleState state(RequestBuilder().Gpus(3).Nics(2).Build(), FakePlacer{}.AsPlacer());
  EXPECT_EQ(state.request().gpus, 3);
  EXPECT_EQ(state.request().rdma_nics, 2);
}

// The engine chooses a single vGPU's card for the typical pods only where capacity packing owns
// the decision (docs/placement.md, "Which card a vGPU takes"), and passes the mix to the placer.
TEST(CycleStateTest, SharePackingOnlyWhereCapacityPackingOwnsTheDecision) {
  auto share = [](int count) {
    PlacementRequest r;
    r.shared.count = count;
    r.shared.cores = 5000;
    return r;
  };
  packing::ShapeMix no_nics;
  no_nics.shapes.push_back({packing::Shape{.gpus = 1, .milli = 500}, 1.0});
  packing::ShapeMix with_nics = no_nics;
  with_nics.shapes.push_back({packing::Shape{.gpus = 8, .milli = 1000, .nics = 8}, 0.1});
  auto mix = std::make_shared<const packing::ShapeMix>(no_nics);

  SharePacking seen;
  CycleState state(share(1), [&seen](const NodeTopology&, std::string_view, const NodeAllocation&,
                                     const PlacementRequest&, SharePacking p) {
    seen = p;
    return Fits(Placement{});
  });
  state.SetShapeMix(mix);
  EXPECT_EQ(state.share_packing().mix, nullptr) << "the cycle does not pack for the typical pods";
  state.set_packs_for_shape_mix(true);
  ASSERT_EQ(state.share_packing().mix, mix.get());
  EXPECT_EQ(state.share_packing().key, packing::MixKey(no_nics));
  state.Outcome(NodeBuilder("a", "hgx-h100-8gpu").Build());
  EXPECT_EQ(seen.mix, mix.get()) << "the placer is given it";

  auto packing_of = [&](PlacementRequest r, const packing::ShapeMix& m) {
    CycleState c(std::move(r), FakePlacer{}.AsPlacer());
    c.SetShapeMix(std::make_shared<const packing::ShapeMix>(m));
    c.set_packs_for_shape_mix(true);
    return c.share_packing().mix != nullptr;
  };
  EXPECT_TRUE(packing_of(share(1), no_nics));
  EXPECT_FALSE(packing_of(share(1), with_nics)) << "typical pods ask NICs: HAMi's policy decides";
  EXPECT_FALSE(packing_of(share(2), no_nics)) << "two vGPUs";
  PlacementRequest named = share(1);
  named.shared.gpu_policy = PackPolicy::kBinpack;
  EXPECT_FALSE(packing_of(named, no_nics)) << "the pod names its policy";
  PlacementRequest nics = share(1);
  nics.rdma_nics = 1;
  EXPECT_FALSE(packing_of(nics, no_nics)) << "the pod asks a NIC";
  EXPECT_FALSE(packing_of(RequestBuilder().Gpus(1).Build(), no_nics)) << "whole GPUs";
  EXPECT_FALSE(packing_of(share(1), packing::ShapeMix{})) << "no typical pods";
}

struct Note : StateData {
  explicit Note(int v) : value(v) {}
  int value;
};
struct OtherNote : StateData {};

TEST(CycleStateTest, ScratchData) {
  CycleState state(PlacementRequest{}, FakePlacer{}.AsPlacer());
  EXPECT_EQ(state.Read("P/key"), nullptr);
  state.Write("P/key", std::make_unique<Note>(7));
  ASSERT_NE(state.ReadAs<Note>("P/key"), nullptr);
  EXPECT_EQ(state.ReadAs<Note>("P/key")->value, 7);
  EXPECT_EQ(state.ReadAs<OtherNote>("P/key"), nullptr) << "typed read of another type";
  state.Write("P/key", std::make_unique<Note>(8));
  EXPECT_EQ(state.ReadAs<Note>("P/key")->value, 8) << "Write replaces";
  state.Erase("P/key");
  EXPECT_EQ(state.Read("P/key"), nullptr);
  state.Erase("P/key");  // erasing what is absent is fine
}

}  // namespace
}  // namespace toposched::framework
