// KvTransferCost's cost model and score: the worked example's arithmetic, the path kinds, the
// anchors (counterparts, same role, gang), the spread, the neutral cases and the args.

#include "kv_transfer_cost/kv_transfer_cost.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv_transfer_cost/kv_transfer_cost_testing.h"
#include "testing/framework_testing.h"
#include "toposched/framework/cluster_view.h"

namespace toposched::plugins::kv_transfer_cost {
namespace {

using toposched::testing::Fails;

// The numbers below use the default network costs (src/pd/network.cc) and the default bytes:
// 2048 tokens x 327680 B = 671088640 B. With lanes L (min NICs, or min GPUs for NVLink kinds)
// and alignment a, time = (latency + 300 us overhead) + bytes / (GB/s * a * L * 1e9). For the
// 2 GPU + 2 NIC shape:
//   nvlink-domain 400*2 = 800 GB/s, 5 us:      0.8389 + 0.305 ms =   1.1439 ms  (best)
//   same-node-rdma 50*2 = 100 GB/s, 3 us:      6.7109 + 0.303 ms =   7.0139 ms
//   leaf           50*2 = 100 GB/s, 5 us:      6.7109 + 0.305 ms =   7.0159 ms
//   spine          25*2 =  50 GB/s, 8 us:     13.4218 + 0.308 ms =  13.7298 ms
//   beyond, SYS ends 5*0.4*2 = 4 GB/s, 1 ms: 167.7722 + 1.3 ms   = 169.0722 ms  (worst)
//   zone           12.5*2 = 25 GB/s, 100 us:  26.8435 + 0.4 ms   =  27.2435 ms
//   beyond, aligned 5*2 = 10 GB/s, 1 ms:      67.1089 + 1.3 ms   =  68.4089 ms
// The scale is per cycle (AvailableBounds): from the cheapest mean over the nodes that could
// host the pod to the costliest, at least twice the cheapest:
//   score = 100 * ln(worst / cost) / ln(worst / best).

TEST(KvTransferCostTest, LogScore) {
  struct Case {
    std::string name;
    double cost, best, worst;
    int score;
  };
  const std::vector<Case> cases = {
      {"at best", 1, 1, 100, 100},
      {"at worst", 100, 1, 100, 0},
      {"geometric middle", 10, 1, 100, 50},              // ln 10 / ln 100 = .5
      {"a quarter of the way", 3.16227766, 1, 100, 75},  // ln(100/sqrt 10) / ln 100 = .75
      {"below best", 0.5, 1, 100, 100},
      {"above worst", 1000, 1, 100, 0},
      {"no range", 5, 2, 2, 100},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(LogScore(c.cost, c.best, c.worst), c.score);
  }
}

// The brief's example with the default costs: a decode pod of pool chat, 4 prefill instances
// (2 a leaf away, 2 a spine away), 2 of the pool's 5 decode instances already on this node.
TEST(KvTransferCostTest, WorkedExample) {
  auto view = Fabric();
  view->AddMember("chat", Member("p1", "leafmate", PodRole::kPrefill));
  view->AddMember("chat", Member("p2", "leafmate", PodRole::kPrefill));
  view->AddMember("chat", Member("p3", "spinemate", PodRole::kPrefill));
  view->AddMember("chat", Member("p4", "spinemate", PodRole::kPrefill));
  view->AddMember("chat", Member("d1", "here", PodRole::kDecode));
  view->AddMember("chat", Member("d2", "here", PodRole::kDecode));
  view->AddMember("chat", Member("d3", "far", PodRole::kDecode));
  view->AddMember("chat", Member("d4", "far", PodRole::kDecode));
  view->AddMember("chat", Member("d5", "zonemate", PodRole::kDecode));
  view->AddMember("other", Member("x1", "far", PodRole::kPrefill));  // another pool: ignored
  const KvTransferCost plugin{Args{}};
  // here: mean = (7.0159 + 7.0159 + 13.7298 + 13.7298) / 4 = 10.37285 ms. The scale, over the
  // six nodes: leafmate and spinemate (2 same-node + 2 spine) 10.37185 ms is the cheapest, far
  // (beyond) 68.4089 ms the costliest; nvmate and zonemate 27.2435 ms.
  // 100 * ln(68.4089 / 10.37285) / ln(68.4089 / 10.37185) = 100 * 1.88632 / 1.88642 = 99.99 -> 100;
  // spread round(5 * 2/5) = 2 -> 98.
  const framework::ScoreResult r = ScoreOn(plugin, PoolPod(PodRole::kDecode), view, "here");
  EXPECT_EQ(r.score, 98);
  EXPECT_EQ(
      r.explanation,
      "decode of pool chat: 4 prefill instances, expected KV transfer 10.4 ms for 2048 tok x 320 KiB "
      "(2 leaf, 2 spine); cheapest available 10.4 ms, scale to 68.4 ms -> 100; spread -2 (2 of 5 decode "
      "on this node) -> 98");
  // nvmate: 100 * ln(68.4089 / 27.2435) / 1.88642 = 48.82 -> 49 (no decode there: no spread).
  EXPECT_EQ(ScoreOn(plugin, PoolPod(PodRole::kDecode), view, "nvmate").score, 49);
  EXPECT_EQ(ScoreOn(plugin, PoolPod(PodRole::kDecode), view, "far").score, 0);
}

// The documented claim: under the default costs, the spread term (at most spreadPoints = 5)
// never outweighs a step between two path kinds whose costs differ. One counterpart on "here";
// each node of the fabric is one path kind away from it, all scored in one cycle (one scale).
// same-node-rdma and leaf are the one pair that costs the same (both one 50 GB/s NIC hop; 3 vs
// 5 us of latency), so spread may order those two -- which is the point: over RDMA loopback,
// sharing a node buys nothing a shared leaf does not. Checked over instance shapes from 1 GPU
// to 8 GPUs, with and without NICs.
TEST(KvTransferCostTest, PathKindGapsExceedSpreadUnderDefaults) {
  const Args defaults;
  const KvTransferCost plugin{defaults};
  struct Shape {
    int gpus, nics;
  };
  const std::map<pd::PathKind, std::string> counterpart_on = {
      {pd::PathKind::kSameNodeRdma, "here"}, {pd::PathKind::kNvlinkDomain, "nvmate"},
      {pd::PathKind::kLeaf, "leafmate"},     {pd::PathKind::kSpine, "spinemate"},
      {pd::PathKind::kZone, "zonemate"},     {pd::PathKind::kBeyond, "far"}};
  int smallest_gap = 100;
  for (const Shape& shape : std::vector<Shape>{{1, 1}, {2, 2}, {4, 4}, {8, 8}, {8, 4}, {8, 0}, {1, 0}}) {
    SCOPED_TRACE("gpus " + std::to_string(shape.gpus) + " nics " + std::to_string(shape.nics));
    std::map<pd::PathKind, int> score;
    auto view = Fabric();
    view->AddMember("chat", Member("d1", "here", PodRole::kDecode, shape.gpus, shape.nics));
    CycleState state =
        CycleWith(PoolPod(PodRole::kPrefill, shape.gpus, shape.nics), OutcomeWith(LinkClass::kPIX));
    state.SetCluster(view);
    for (const auto& [kind, node] : counterpart_on) {
      const framework::ScoreResult r = plugin.Score(state, NodeBuilder(node, "hgx-h100-8gpu").Build());
      EXPECT_NE(r.explanation.find("(1 " + std::string(pd::ToString(kind)) + ")"), std::string::npos)
          << r.explanation;
      score[kind] = r.score;
    }
    // Cheapest first, as the default costs order them.
    const std::vector<std::pair<pd::PathKind, pd::PathKind>> steps = {
        {pd::PathKind::kNvlinkDomain, pd::PathKind::kSameNodeRdma},
        {pd::PathKind::kLeaf, pd::PathKind::kSpine},
        {pd::PathKind::kSpine, pd::PathKind::kZone},
        {pd::PathKind::kZone, pd::PathKind::kBeyond}};
    for (const auto& [better, worse] : steps) {
      const int gap = score[better] - score[worse];
      EXPECT_GT(gap, defaults.spread_points) << pd::ToString(better) << " " << score[better] << " vs "
                                             << pd::ToString(worse) << " " << score[worse];
      smallest_gap = std::min(smallest_gap, gap);
    }
    EXPECT_LE(std::abs(score[pd::PathKind::kSameNodeRdma] - score[pd::PathKind::kLeaf]), 1);
    EXPECT_EQ(score[pd::PathKind::kNvlinkDomain], 100);
  }
  // Measured: the smallest step is 12 over these shapes (the scale runs from nvlink-domain to beyond).
  EXPECT_GE(smallest_gap, 12);
}

// The pod's own end is the engine's placement on the node: a worse GPU->NIC class slows RDMA.
TEST(KvTransferCostTest, OwnAlignmentFromThePlacement) {
  struct Case {
    std::string name;
    LinkClass own;
    int score;
  };
  const std::vector<Case> cases = {
      // The scale (own end aligned): leafmate's same node 7.0139 ms to far's 68.4089 ms,
      // ln(68.4089 / 7.0139) = 2.27762.
      {"PIX", LinkClass::kPIX, 100},  // leaf 100 GB/s: 7.0159 ms -> 2.27733 / 2.27762 = 99.99 -> 100
      {"PHB", LinkClass::kPHB, 80},   // x0.63: 10.9572 ms -> 1.83150 / 2.27762 = 80.41 -> 80
      {"SYS", LinkClass::kSYS, 61},   // x0.4: 17.0822 ms -> 1.38747 / 2.27762 = 60.92 -> 61
  };
  auto view = Fabric();
  view->AddMember("chat", Member("d1", "leafmate", PodRole::kDecode));
  const KvTransferCost plugin{Args{}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(ScoreOn(plugin, PoolPod(PodRole::kPrefill), view, "here", c.own).score, c.score);
  }
  // Without a placement on the node the pod's end counts as PIX.
  CycleState state = CycleWith(PoolPod(PodRole::kPrefill), Fails(FitFailure::kNotEnoughGpus, ""));
  state.SetCluster(view);
  EXPECT_EQ(plugin.Score(state, NodeBuilder("here", "hgx-h100-8gpu").Build()).score, 100);
}

// Same-node IPC needs both the network config and the pod's toposched.io/kv-ipc.
TEST(KvTransferCostTest, SameNodeIpc) {
  pd::NetworkConfig ipc;
  ipc.same_node_ipc = true;
  auto view = std::make_shared<StaticClusterView>(ipc);
  view->SetNode("here", {{kLeaf, "l1"}}, 8, 8);
  view->SetNode("leafmate", {{kLeaf, "l1"}}, 8, 8);
  view->AddMember("chat", Member("d1", "here", PodRole::kDecode, 2, 2, /*kv_ipc=*/true));
  const KvTransferCost plugin{Args{}};
  PlacementRequest with_ipc = PoolPod(PodRole::kPrefill);
  with_ipc.kv_ipc = true;
  // IPC 150*2 = 300 GB/s, 10 us: 2.2370 + 0.31 = 2.5470 ms, the cheapest; leafmate 7.0159 ms the
  // costliest (more than twice): here 100, leafmate 0.
  const framework::ScoreResult r = ScoreOn(plugin, with_ipc, view, "here");
  EXPECT_EQ(r.score, 100);
  EXPECT_NE(r.explanation.find("(1 same-node-ipc)"), std::string::npos) << r.explanation;
  EXPECT_EQ(ScoreOn(plugin, with_ipc, view, "leafmate").score, 0);
  // Without the pod's consent: RDMA loopback 7.0139 ms, as good as the leaf (scale to 14.0278 ms:
  // leafmate 100 * ln(14.0278 / 7.0159) / ln 2 = 99.92 -> 100).
  const framework::ScoreResult rdma = ScoreOn(plugin, PoolPod(PodRole::kPrefill), view, "here");
  EXPECT_EQ(rdma.score, 100);
  EXPECT_NE(rdma.explanation.find("(1 same-node-rdma)"), std::string::npos) << rdma.explanation;
  EXPECT_EQ(ScoreOn(plugin, PoolPod(PodRole::kPrefill), view, "leafmate").score, 100);
  // Without the member's consent: RDMA loopback too, whatever the pod says (so both nodes 100,
  // as in the case above).
  auto no_consent = std::make_shared<StaticClusterView>(ipc);
  no_consent->SetNode("here", {{kLeaf, "l1"}}, 8, 8);
  no_consent->SetNode("leafmate", {{kLeaf, "l1"}}, 8, 8);
  no_consent->AddMember("chat", Member("d1", "here", PodRole::kDecode));
  const framework::ScoreResult one_sided = ScoreOn(plugin, with_ipc, no_consent, "here");
  EXPECT_EQ(one_sided.score, 100);
  EXPECT_NE(one_sided.explanation.find("(1 same-node-rdma)"), std::string::npos) << one_sided.explanation;
  EXPECT_EQ(ScoreOn(plugin, with_ipc, no_consent, "leafmate").score, 100);
}

// Members with role both serve either side.
TEST(KvTransferCostTest, BothMembersAreCounterparts) {
  auto view = Fabric();
  view->AddMember("chat", Member("p1", "leafmate", PodRole::kPrefill));
  view->AddMember("chat", Member("b1", "leafmate", PodRole::kBoth));
  view->AddMember("chat", Member("n1", "far", PodRole::kNone));  // neither
  const framework::ScoreResult r = ScoreOn(KvTransferCost{Args{}}, PoolPod(PodRole::kDecode), view, "here");
  EXPECT_EQ(r.score, 100);  // leaf 7.0159 ms against leafmate's 7.0139: 99.99
  EXPECT_NE(r.explanation.find("1 prefill + 1 both instances, expected KV transfer 7.0 ms"),
            std::string::npos)
      << r.explanation;
}

// No counterparts yet: the same-role members anchor, and spread moves the pod off their node
// within their leaf (same-node-rdma and leaf cost alike, so the spread decides).
TEST(KvTransferCostTest, SameRoleMembersAnchorUntilCounterpartsCome) {
  auto view = Fabric();
  view->AddMember("chat", Member("p1", "leafmate", PodRole::kPrefill));
  view->AddMember("chat", Member("p2", "leafmate", PodRole::kPrefill));
  const KvTransferCost plugin{Args{}};
  const framework::ScoreResult here = ScoreOn(plugin, PoolPod(PodRole::kPrefill), view, "here");
  const framework::ScoreResult on_them = ScoreOn(plugin, PoolPod(PodRole::kPrefill), view, "leafmate");
  const framework::ScoreResult far = ScoreOn(plugin, PoolPod(PodRole::kPrefill), view, "far");
  EXPECT_EQ(here.score, 100);    // leaf 7.0159 ms, the scale 7.0139 (same node) to 68.4089 (far)
  EXPECT_EQ(on_them.score, 95);  // same-node-rdma 100, spread round(5 * 2/2) = 5
  EXPECT_EQ(far.score, 0);
  EXPECT_EQ(
      here.explanation,
      "prefill of pool chat: no decode instances yet, anchored on 2 prefill instances, expected KV transfer "
      "7.0 ms for 2048 tok x 320 KiB (2 leaf); cheapest available 7.0 ms, scale to 68.4 ms -> 100");
  EXPECT_NE(on_them.explanation.find("-> 100; spread -5 (2 of 2 prefill on this node) -> 95"),
            std::string::npos)
      << on_them.explanation;
}

// The failure domain for the spread can be a tier.
TEST(KvTransferCostTest, SpreadOverATier) {
  Result<Args> args = ParseArgs({{"spreadTier", kLeaf}, {"spreadPoints", "10"}});
  ASSERT_TRUE(args.ok()) << args.error().message();
  auto view = Fabric();
  view->AddMember("chat", Member("p1", "far", PodRole::kPrefill));
  view->AddMember("chat", Member("d1", "leafmate", PodRole::kDecode));
  view->AddMember("chat", Member("d2", "leafmate", PodRole::kDecode));
  view->AddMember("chat", Member("d3", "here", PodRole::kDecode));
  view->AddMember("chat", Member("d4", "spinemate", PodRole::kDecode));
  const framework::ScoreResult r = ScoreOn(KvTransferCost{*args}, PoolPod(PodRole::kDecode), view, "here");
  // l1 holds 3 of the 4 decode instances: round(10 * 3/4) = 8 (7.5 rounds up).
  EXPECT_NE(r.explanation.find("; spread -8 (3 of 4 decode in toposched.io/leaf=l1) -> "), std::string::npos)
      << r.explanation;
}

// A pool without members gathers in the leaf with the most free GPUs on schedulable nodes.
TEST(KvTransferCostTest, GangAnchor) {
  auto view = std::make_shared<StaticClusterView>();
  view->SetNode("a1", {{kLeaf, "la"}, {kSpine, "s1"}}, 8, 8);
  view->SetNode("a2", {{kLeaf, "la"}, {kSpine, "s1"}}, 8, 8);  // la: 16 free
  view->SetNode("b1", {{kLeaf, "lb"}, {kSpine, "s1"}}, 8, 8);
  view->SetNode("b2", {{kLeaf, "lb"}, {kSpine, "s1"}}, 4, 4);                          // lb: 12 free
  view->SetNode("c1", {{kLeaf, "lc"}, {kSpine, "s1"}}, 64, 8, /*schedulable=*/false);  // cordoned
  const KvTransferCost plugin{Args{}};
  const framework::ScoreResult inside = ScoreOn(plugin, PoolPod(PodRole::kDecode), view, "a2");
  EXPECT_EQ(inside.score, 100);
  EXPECT_EQ(
      inside.explanation,
      "decode of pool chat: no instances yet; gang anchor toposched.io/leaf=la (16 free GPUs): this node is "
      "inside it -> 100");
  // b1 reaches a1 through the spine: 13.7298 ms. The scale: a1 itself 7.0139 ms (same node) to
  // b1/b2 13.7298 ms, stretched to twice the cheapest, 14.0278 ms:
  // 100 * ln(14.0278 / 13.7298) / ln 2 = 3.10 -> 3.
  const framework::ScoreResult outside = ScoreOn(plugin, PoolPod(PodRole::kDecode), view, "b1");
  EXPECT_EQ(outside.score, 3);
  EXPECT_EQ(
      outside.explanation,
      "decode of pool chat: no instances yet; gang anchor toposched.io/leaf=la (16 free GPUs), via its node "
      "a1: expected KV transfer 13.7 ms for 2048 tok x 320 KiB (1 spine); cheapest available 7.0 ms, scale "
      "to "
      "14.0 ms -> 3");
}

// Equal leaves: the pool's name breaks the tie, so pools spread over leaves, while every pod of
// one pool picks the same leaf.
// A pod's GPUs are all of its vendor: the gang anchor counts, and the scale takes, only GPUs the
// pod could use. Leaf "amd" has the most free GPUs, none of them NVIDIA: an NVIDIA pool anchors
// on leaf "nv" (a mixed node counts its NVIDIA GPUs), an AMD pool on leaf "amd".
TEST(KvTransferCostTest, GangAnchorCountsTheGpusOfThePodsVendor) {
  auto view = std::make_shared<StaticClusterView>();
  const auto gpus = [](int nvidia, int amd) { return StaticClusterView::VendorCounts{nvidia, amd}; };
  view->SetNode("amd-1", {{kLeaf, "amd"}, {kSpine, "s1"}}, gpus(0, 16), 8);
  view->SetNode("amd-2", {{kLeaf, "amd"}, {kSpine, "s1"}}, gpus(0, 8), 8);
  view->SetNode("nv-1", {{kLeaf, "nv"}, {kSpine, "s1"}}, gpus(8, 0), 8);
  view->SetNode("mixed", {{kLeaf, "nv"}, {kSpine, "s1"}}, gpus(2, 2), 4);
  const KvTransferCost plugin{Args{}};
  const framework::ScoreResult nvidia = ScoreOn(plugin, PoolPod(PodRole::kDecode), view, "nv-1");
  EXPECT_EQ(nvidia.score, 100);
  EXPECT_NE(nvidia.explanation.find("gang anchor toposched.io/leaf=nv (10 free GPUs)"), std::string::npos)
      << nvidia.explanation;
  PlacementRequest amd_pod = PoolPod(PodRole::kDecode);
  amd_pod.vendor = GpuVendor::kAmd;
  const framework::ScoreResult amd = ScoreOn(plugin, amd_pod, view, "amd-2");
  EXPECT_EQ(amd.score, 100);
  EXPECT_NE(amd.explanation.find("gang anchor toposched.io/leaf=amd (24 free GPUs)"), std::string::npos)
      << amd.explanation;
}

TEST(KvTransferCostTest, GangAnchorTieBreakByPool) {
  auto view = std::make_shared<StaticClusterView>();
  view->SetNode("a1", {{kLeaf, "la"}}, 8, 8);
  view->SetNode("b1", {{kLeaf, "lb"}}, 8, 8);
  const KvTransferCost plugin{Args{}};
  std::set<std::string> chosen;
  for (int i = 0; i < 16; ++i) {
    const std::string pool = "pool-" + std::to_string(i);
    SCOPED_TRACE(pool);
    const bool a_inside = ScoreOn(plugin, PoolPod(PodRole::kPrefill, 2, 2, pool), view, "a1").score == 100;
    const bool b_inside = ScoreOn(plugin, PoolPod(PodRole::kPrefill, 2, 2, pool), view, "b1").score == 100;
    EXPECT_NE(a_inside, b_inside);
    EXPECT_EQ(a_inside, StableHash(pool, "la") < StableHash(pool, "lb"));
    // A decode pod of the same pool agrees.
    EXPECT_EQ(ScoreOn(plugin, PoolPod(PodRole::kDecode, 2, 2, pool), view, "a1").score == 100, a_inside);
    chosen.insert(a_inside ? "la" : "lb");
  }
  EXPECT_EQ(chosen.size(), 2u) << "sixteen pools all chose one leaf";
}

TEST(KvTransferCostTest, Neutral) {
  auto view = Fabric();
  auto cordoned = std::make_shared<StaticClusterView>();
  cordoned->SetNode("here", {{kLeaf, "l1"}}, 8, 8, /*schedulable=*/false);
  struct Case {
    std::string name;
    PlacementRequest request;
    framework::PluginArgs args;
    std::shared_ptr<StaticClusterView> view;
    std::string explanation;
  };
  const std::vector<Case> cases = {
      {"no role", PoolPod(PodRole::kNone), {}, view, "no Prefill/Decode role: neutral -> 100"},
      {"role both",
       PoolPod(PodRole::kBoth),
       {},
       view,
       "role both (prefill and decode in one instance) sends no KV cache: neutral -> 100"},
      {"no pool",
       PoolPod(PodRole::kPrefill, 2, 2, ""),
       {},
       view,
       "prefill pod without a pool: neutral -> 100"},
      {"no view",
       PoolPod(PodRole::kPrefill),
       {},
       nullptr,
       "prefill of pool chat: no cluster view in this cycle: neutral -> 100"},
      {"no GPU",
       PoolPod(PodRole::kPrefill, 0, 0),
       {},
       view,
       "prefill of pool chat: asks no GPU, so holds no KV cache: neutral -> 100"},
      {"misspelt anchorTier",
       PoolPod(PodRole::kPrefill),
       {{"anchorTier", "leaf"}},
       view,
       "prefill of pool chat: anchorTier: tier leaf is not a configured network tier (nvidia.com/gpu.clique, "
       "toposched.io/leaf, toposched.io/spine, topology.kubernetes.io/zone): neutral -> 100"},
      {"misspelt spreadTier",
       PoolPod(PodRole::kPrefill),
       {{"spreadTier", "rack"}},
       view,
       "prefill of pool chat: spreadTier: tier rack is not a configured network tier (nvidia.com/gpu.clique, "
       "toposched.io/leaf, toposched.io/spine, topology.kubernetes.io/zone): neutral -> 100"},
      {"nowhere to anchor",
       PoolPod(PodRole::kPrefill),
       {},
       cordoned,
       "prefill of pool chat: no instances yet and no schedulable node to anchor on: neutral -> 100"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<Args> args = ParseArgs(c.args);
    ASSERT_TRUE(args.ok()) << args.error().message();
    const framework::ScoreResult r = ScoreOn(KvTransferCost{*args}, c.request, c.view, "here");
    EXPECT_EQ(r.score, 100);
    EXPECT_EQ(r.explanation, c.explanation);
  }
}

// The pool's data is gathered by the first node's Score and read from the CycleState after.
TEST(KvTransferCostTest, PoolDataOncePerCycle) {
  auto view = Fabric();
  view->AddMember("chat", Member("d1", "leafmate", PodRole::kDecode));
  CycleState state = CycleWith(PoolPod(PodRole::kPrefill), OutcomeWith(LinkClass::kPIX));
  state.SetCluster(view);
  const KvTransferCost plugin{Args{}};
  EXPECT_EQ(state.Read(kCycleKey), nullptr);
  const framework::ScoreResult first = plugin.Score(state, NodeBuilder("here", "hgx-h100-8gpu").Build());
  EXPECT_NE(state.Read(kCycleKey), nullptr);
  EXPECT_NE(first.explanation.find("1 decode instance,"), std::string::npos) << first.explanation;
  // Members that appear mid-cycle are not seen until the next cycle.
  view->AddMember("chat", Member("d2", "far", PodRole::kDecode));
  const framework::ScoreResult second =
      plugin.Score(state, NodeBuilder("spinemate", "hgx-h100-8gpu").Build());
  EXPECT_NE(second.explanation.find("1 decode instance,"), std::string::npos) << second.explanation;
}

// The extender's cycles want numbers only (CycleState::explain false): the score is the same,
// whatever the anchor and the spread, and no explanation is built.
TEST(KvTransferCostTest, WithoutExplanationsTheScoresAreTheSame) {
  Result<Args> args = ParseArgs({{"spreadTier", kLeaf}, {"spreadPoints", "10"}});
  ASSERT_TRUE(args.ok()) << args.error().message();
  const KvTransferCost plugin{*args};
  auto counterparts = Fabric();
  counterparts->AddMember("chat", Member("p1", "far", PodRole::kPrefill));
  counterparts->AddMember("chat", Member("p2", "leafmate", PodRole::kPrefill, 2, 2, /*kv_ipc=*/true));
  counterparts->AddMember("chat", Member("d1", "here", PodRole::kDecode));
  auto same_role = Fabric();
  same_role->AddMember("chat", Member("d1", "spinemate", PodRole::kDecode));
  const std::vector<std::pair<std::string, std::shared_ptr<StaticClusterView>>> views = {
      {"counterparts", counterparts}, {"same role", same_role}, {"gang anchor", Fabric()}};
  for (const auto& [name, view] : views) {
    for (const char* node : {"here", "nvmate", "leafmate", "spinemate", "zonemate", "far"}) {
      for (LinkClass own : {LinkClass::kPIX, LinkClass::kSYS}) {
        SCOPED_TRACE(name + " on " + node);
        const framework::ScoreResult explained = ScoreOn(plugin, PoolPod(PodRole::kDecode), view, node, own);
        CycleState state = CycleWith(PoolPod(PodRole::kDecode), OutcomeWith(own));
        state.SetCluster(view);
        state.set_explain(false);
        const framework::ScoreResult bare = plugin.Score(state, NodeBuilder(node, "hgx-h100-8gpu").Build());
        EXPECT_EQ(bare.score, explained.score);
        EXPECT_EQ(bare.counted, explained.counted);
        EXPECT_TRUE(bare.explanation.empty()) << bare.explanation;
        EXPECT_FALSE(explained.explanation.empty());
      }
    }
  }
}
// The pod itself, already in the view (re-scored after its Reserve), is not its own anchor.
TEST(KvTransferCostTest, SkipsThePodItself) {
  auto view = Fabric();
  view->AddMember("chat", Member("uid-1", "here", PodRole::kPrefill));  // RequestBuilder's uid
  view->AddMember("chat", Member("p2", "far", PodRole::kPrefill));
  const framework::ScoreResult r = ScoreOn(KvTransferCost{Args{}}, PoolPod(PodRole::kPrefill), view, "here");
  EXPECT_NE(r.explanation.find("anchored on 1 prefill instance,"), std::string::npos) << r.explanation;
  EXPECT_EQ(r.explanation.find("spread"), std::string::npos) << r.explanation;
}

// The pod's own KV size and prompt length win over the args.
TEST(KvTransferCostTest, RequestBytesWin) {
  auto view = Fabric();
  view->AddMember("chat", Member("d1", "leafmate", PodRole::kDecode));
  PlacementRequest pod = PoolPod(PodRole::kPrefill);
  pod.kv_bytes_per_token = 131072;  // llama-3-8b bf16: 128 KiB
  pod.prompt_tokens = 8192;
  const framework::ScoreResult r = ScoreOn(KvTransferCost{Args{}}, pod, view, "here");
  // 8192 * 131072 = 1 GiB: leaf 10.7374 + 0.305 = 11.0 ms.
  EXPECT_NE(r.explanation.find("expected KV transfer 11.0 ms for 8192 tok x 128 KiB (1 leaf)"),
            std::string::npos)
      << r.explanation;
}

TEST(KvTransferCostTest, Args) {
  struct Case {
    std::string name;
    framework::PluginArgs args;
    std::string error;  // empty: ok
  };
  const std::vector<Case> cases = {
      {"none", {}, ""},
      {"all",
       {{"kvBytesPerToken", "131072"},
        {"promptTokens", "4096"},
        {"anchorTier", kSpine},
        {"spreadTier", kLeaf},
        {"spreadPoints", "0"}},
       ""},
      {"unknown",
       {{"spread", "3"}},
       "unknown args: spread (known: kvBytesPerToken, promptTokens, anchorTier, spreadTier, spreadPoints)"},
      {"zero bytes",
       {{"kvBytesPerToken", "0"}},
       "arg kvBytesPerToken: \"0\" is not an integer 1 to 1073741824"},
      {"junk tokens", {{"promptTokens", "2k"}}, "arg promptTokens: \"2k\" is not an integer 1 to 10000000"},
      {"spread too big", {{"spreadPoints", "51"}}, "arg spreadPoints: \"51\" is not an integer 0 to 50"},
      {"empty spread tier", {{"spreadTier", ""}}, "arg spreadTier: empty; use node or a network tier label"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<std::unique_ptr<framework::Plugin>> p = New(c.args);
    if (c.error.empty()) {
      ASSERT_TRUE(p.ok()) << p.error().message();
      EXPECT_EQ((*p)->Name(), kName);
    } else {
      ASSERT_FALSE(p.ok());
      EXPECT_EQ(p.error().message(), c.error);
    }
  }
  Result<Args> a =
      ParseArgs({{"kvBytesPerToken", "131072"}, {"promptTokens", "4096"}, {"spreadPoints", "7"}});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kv_bytes_per_token, 131072);
  EXPECT_EQ(a->prompt_tokens, 4096);
  EXPECT_EQ(a->spread_points, 7);
  EXPECT_EQ(a->spread_tier, "node");
  EXPECT_EQ(a->anchor_tier, "");
}

}  // namespace
}  // namespace toposched::plugins::kv_transfer_cost
