#include "kv_transfer_cost/kv_transfer_cost.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <string_view>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "testing/framework_testing.h"
#include "toposched/framework/cluster_view.h"

namespace toposched::plugins::kv_transfer_cost {
namespace {

using framework::CycleState;
using framework::PoolMember;
using framework::StaticClusterView;
using toposched::testing::CycleWith;
using toposched::testing::Fails;
using toposched::testing::Fits;
using toposched::testing::NodeBuilder;
using toposched::testing::PlacementOn;
using toposched::testing::PresetTopology;
using toposched::testing::RequestBuilder;

constexpr const char* kClique = "nvidia.com/gpu.clique";
constexpr const char* kLeaf = "toposched.io/leaf";
constexpr const char* kSpine = "toposched.io/spine";
constexpr const char* kZone = "topology.kubernetes.io/zone";

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

PlacementRequest PoolPod(PodRole role, int gpus = 2, int nics = 2, std::string pool = "chat") {
  PlacementRequest r = RequestBuilder().Gpus(gpus).Nics(nics).Build();
  r.role = role;
  r.pool = std::move(pool);
  return r;
}

PoolMember Member(std::string uid, std::string node, PodRole role, int gpus = 2, int nics = 2,
                  bool kv_ipc = false) {
  return PoolMember{std::move(uid), std::move(node), role, gpus, nics, LinkClass::kPIX, kv_ipc};
}

// One node per distance from "here": the same NVLink clique, leaf, spine, zone, or none.
std::shared_ptr<StaticClusterView> Fabric() {
  auto view = std::make_shared<StaticClusterView>();
  view->SetNode("here", {{kClique, "c1"}, {kLeaf, "l1"}, {kSpine, "s1"}, {kZone, "z1"}}, 8, 8);
  view->SetNode("nvmate", {{kClique, "c1"}, {kLeaf, "l2"}, {kSpine, "s2"}, {kZone, "z1"}}, 8, 8);
  view->SetNode("leafmate", {{kClique, "c2"}, {kLeaf, "l1"}, {kSpine, "s1"}, {kZone, "z1"}}, 8, 8);
  view->SetNode("spinemate", {{kClique, "c3"}, {kLeaf, "l3"}, {kSpine, "s1"}, {kZone, "z1"}}, 8, 8);
  view->SetNode("zonemate", {{kClique, "c4"}, {kLeaf, "l4"}, {kSpine, "s2"}, {kZone, "z1"}}, 8, 8);
  view->SetNode("far", {{kClique, "c5"}, {kLeaf, "l5"}, {kSpine, "s3"}, {kZone, "z2"}}, 8, 8);
  return view;
}

PlacementOutcome OutcomeWith(LinkClass worst) {
  Placement p = PlacementOn(*PresetTopology("hgx-h100-8gpu"), {0, 1}, {0, 1});
  p.worst_class = worst;
  return Fits(std::move(p));
}

framework::ScoreResult ScoreOn(const KvTransferCost& plugin, PlacementRequest request,
                               std::shared_ptr<const framework::ClusterView> view, const std::string& node,
                               LinkClass own_class = LinkClass::kPIX) {
  CycleState state = CycleWith(std::move(request), OutcomeWith(own_class));
  state.SetCluster(std::move(view));
  return plugin.Score(state, NodeBuilder(node, "hgx-h100-8gpu").Build());
}

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
  EXPECT_EQ(r.explanation,
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
    CycleState state = CycleWith(PoolPod(PodRole::kPrefill, shape.gpus, shape.nics), OutcomeWith(LinkClass::kPIX));
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
      "a1: expected KV transfer 13.7 ms for 2048 tok x 320 KiB (1 spine); cheapest available 7.0 ms, scale to "
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

// A view that gives the nodes of equal domains one after another and honours the skip, as the
// extender's store-backed view does (ClusterView::ForEachNodeByPosition); it counts the nodes
// it gave.
class ByPositionView : public framework::ClusterView {
 public:
  explicit ByPositionView(std::shared_ptr<const StaticClusterView> view) : view_(std::move(view)) {}
  const pd::NetworkConfig& network() const override { return view_->network(); }
  pd::Location Locate(std::string_view node) const override { return view_->Locate(node); }
  std::span<const PoolMember> PoolMembers(std::string_view pool) const override { return view_->PoolMembers(pool); }
  void ForEachNode(const std::function<void(const framework::NodeSummary&)>& fn) const override {
    view_->ForEachNode(fn);
  }
  bool WithNode(std::string_view node, const std::function<void(const framework::NodeSummary&)>& fn) const override {
    return view_->WithNode(node, fn);
  }
  void ForEachNodeByPosition(const std::function<bool(const framework::NodeSummary&)>& fn) const override {
    std::vector<framework::NodeSummary> nodes;
    view_->ForEachNode([&](const framework::NodeSummary& n) { nodes.push_back(n); });
    std::stable_sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) {
      return a.location->domains < b.location->domains;
    });
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      ++given;
      if (fn(nodes[i])) continue;
      while (i + 1 < nodes.size() && nodes[i + 1].location->domains == nodes[i].location->domains) ++i;
    }
  }
  mutable int given = 0;

 private:
  std::shared_ptr<const StaticClusterView> view_;
};

// The scale (cheapest and costliest node that could host the pod) from one node per position
// and every site is the scale a pass over every node finds: sites in the middle of a leaf, full
// nodes first in a leaf, a full site, a leaf with nothing free.
// Every node of `flat` scores through `view` as through `flat` itself, `plugin` both ways.
void ExpectEveryNodeScoresAsOnFlat(const KvTransferCost& plugin, const PlacementRequest& pod,
                                   const std::shared_ptr<const StaticClusterView>& flat,
                                   const std::shared_ptr<const framework::ClusterView>& view) {
  std::vector<std::string> names;
  flat->ForEachNode([&](const framework::NodeSummary& n) { names.emplace_back(n.name); });
  for (const std::string& node : names) {
    SCOPED_TRACE(node);
    const framework::ScoreResult on_flat = ScoreOn(plugin, pod, flat, node);
    const framework::ScoreResult through_view = ScoreOn(plugin, pod, view, node);
    EXPECT_EQ(through_view.score, on_flat.score);
    EXPECT_EQ(through_view.explanation, on_flat.explanation);
  }
}

// Leaves l0..l3 of four nodes each (l<leaf>-n<i>), l0 and l1 under spine s0, the others under
// s1, with same-node CUDA IPC in the network; `free(leaf, i)`: the node's free GPUs and NICs.
std::shared_ptr<StaticClusterView> FourLeaves(const std::function<int(int, int)>& free) {
  pd::NetworkConfig ipc;
  ipc.same_node_ipc = true;
  auto flat = std::make_shared<StaticClusterView>(ipc);
  for (int leaf = 0; leaf < 4; ++leaf) {
    for (int i = 0; i < 4; ++i) {
      const std::string name = "l" + std::to_string(leaf) + "-n" + std::to_string(i);
      const int n = free(leaf, i);
      flat->SetNode(name, {{kLeaf, "l" + std::to_string(leaf)}, {kSpine, leaf < 2 ? "s0" : "s1"}}, n, n);
    }
  }
  return flat;
}

TEST(KvTransferCostTest, TheScaleFromOneNodeAPositionEqualsThePassOverEveryNode) {
  // Leaf 1's first two nodes are full; leaf 3 has nothing free.
  auto flat = FourLeaves([](int leaf, int i) { return (leaf == 1 && i < 2) || leaf == 3 ? 0 : 8; });
  flat->SetNode("far", {{kLeaf, "l9"}, {kSpine, "s9"}, {kZone, "z9"}}, 8, 8);
  // Prefill on the last node of leaf 1, with same-node CUDA IPC (the cheapest place for a decode
  // pod that consents too, and a site the pass never reaches: leaf 1's run is skipped at its
  // first free node), on leaf 2, and on a full node of leaf 1.
  flat->AddMember("chat", Member("p1", "l1-n3", PodRole::kPrefill, 2, 2, /*kv_ipc=*/true));
  flat->AddMember("chat", Member("p2", "l2-n1", PodRole::kPrefill));
  flat->AddMember("chat", Member("p3", "l1-n0", PodRole::kPrefill));
  auto grouped = std::make_shared<ByPositionView>(flat);
  const KvTransferCost plugin{Args{}};
  PlacementRequest pod = PoolPod(PodRole::kDecode);
  pod.kv_ipc = true;
  ExpectEveryNodeScoresAsOnFlat(plugin, pod, flat, grouped);
  // The site is the cheapest: it sets the scale's best, so it scores 100 and its leaf mates less.
  EXPECT_EQ(ScoreOn(plugin, pod, grouped, "l1-n3").score, 100);
  EXPECT_LT(ScoreOn(plugin, pod, grouped, "l1-n2").score, 100);
  // Each pass gave, per leaf, the full nodes and the first that could host the pod (leaf 3: all
  // four), not the 17 nodes.
  grouped->given = 0;
  ScoreOn(plugin, pod, grouped, "far");
  EXPECT_EQ(grouped->given, 1 + 3 + 1 + 4 + 1);
}

// The view as the store gives it to the extender: summaries carry each domain's hash and the
// name's (NodeSummary::domain_hashes, name_hash), which the scale's means are then cached by.
class HashedView : public framework::ClusterView {
 public:
  explicit HashedView(std::shared_ptr<const StaticClusterView> view) : view_(std::move(view)) {
    view_->ForEachNode([&](const framework::NodeSummary& n) {
      std::vector<std::uint64_t>& h = hashes_[std::string(n.name)];
      for (const std::string& d : n.location->domains) h.push_back(framework::PositionHash(d));
    });
  }
  const pd::NetworkConfig& network() const override { return view_->network(); }
  pd::Location Locate(std::string_view node) const override { return view_->Locate(node); }
  std::span<const PoolMember> PoolMembers(std::string_view pool) const override { return view_->PoolMembers(pool); }
  void ForEachNode(const std::function<void(const framework::NodeSummary&)>& fn) const override {
    view_->ForEachNode([&](const framework::NodeSummary& n) { fn(Hashed(n)); });
  }
  bool WithNode(std::string_view node, const std::function<void(const framework::NodeSummary&)>& fn) const override {
    return view_->WithNode(node, [&](const framework::NodeSummary& n) { fn(Hashed(n)); });
  }

 private:
  framework::NodeSummary Hashed(framework::NodeSummary n) const {
    n.domain_hashes = hashes_.at(std::string(n.name)).data();
    n.name_hash = framework::PositionHash(n.name);
    return n;
  }
  std::shared_ptr<const StaticClusterView> view_;
  std::map<std::string, std::vector<std::uint64_t>> hashes_;
};

// HashedView with runs by index (ClusterView::ForEachNodeInRun) and a PoolToken, as the
// store-backed view gives them: the runs are fixed when it is made (the token's positions); each
// call reads the nodes' free devices from `flat` as they are then.
class RankedView : public HashedView {
 public:
  explicit RankedView(std::shared_ptr<const StaticClusterView> flat) : HashedView(flat), flat_(std::move(flat)) {
    std::map<std::vector<std::string>, std::vector<std::string>> by_domains;
    flat_->ForEachNode([&](const framework::NodeSummary& n) { by_domains[n.location->domains].emplace_back(n.name); });
    for (auto& [domains, names] : by_domains) runs_.push_back(std::move(names));
  }
  framework::PoolToken PoolVersion(std::string_view) const override { return token; }
  std::size_t PositionRunCount() const override { return runs_.size(); }
  void ForEachNodeInRun(std::size_t run, const std::function<bool(const framework::NodeSummary&)>& fn) const override {
    for (const std::string& name : runs_[run]) {
      bool go_on = true;
      WithNode(name, [&](const framework::NodeSummary& n) { go_on = fn(n); });
      if (!go_on) return;
    }
  }
  void ForEachNodeByPosition(const std::function<bool(const framework::NodeSummary&)>& fn) const override {
    for (std::size_t r = 0; r < runs_.size(); ++r) ForEachNodeInRun(r, fn);
  }
  framework::PoolToken token;

 private:
  std::shared_ptr<const StaticClusterView> flat_;
  std::vector<std::vector<std::string>> runs_;
};

// With the pool's sites kept (a token), the scale comes from the positions ranked by mean once:
// each call looks for the cheapest and the dearest position that can host the pod. It is the
// scale of a pass over every node, call after call, as nodes fill and free: a full site, a run
// whose only free node is a site (its other nodes' mean must not count), a full leaf.
TEST(KvTransferCostTest, TheScaleFromRankedPositionsEqualsThePassOverEveryNode) {
  auto flat = FourLeaves([](int, int) { return 8; });
  const pd::NetworkConfig& ipc = flat->network();
  flat->SetNode("far", {{kLeaf, "l9"}, {kSpine, "s9"}, {kZone, "z9"}}, 8, 8);
  flat->SetNode("near", {{kLeaf, "l8"}, {kSpine, "s0"}}, 8, 8);
  flat->AddMember("chat", Member("p1", "l1-n3", PodRole::kPrefill, 2, 2, /*kv_ipc=*/true));
  flat->AddMember("chat", Member("p2", "l2-n1", PodRole::kPrefill));
  flat->AddMember("chat", Member("p3", "l1-n0", PodRole::kPrefill));
  flat->AddMember("chat", Member("p4", "l1-n0", PodRole::kPrefill));
  auto ranked = std::make_shared<RankedView>(flat);
  ranked->token = {1, std::make_shared<int>(0)};
  const KvTransferCost plugin{Args{}};
  PlacementRequest pod = PoolPod(PodRole::kDecode);
  pod.kv_ipc = true;
  const auto expect_the_pass = [&](const std::string& step) {
    SCOPED_TRACE(step);
    ExpectEveryNodeScoresAsOnFlat(plugin, pod, flat, ranked);
  };
  expect_the_pass("all free");
  flat->SetFree("l1-n3", 0, 0);  // the IPC site, the cheapest
  flat->SetFree("far", 0, 0);    // the dearest
  expect_the_pass("the cheapest site and the dearest node full");
  for (const char* node : {"l1-n1", "l1-n2", "l1-n3"}) flat->SetFree(node, 0, 0);
  flat->SetFree("near", 0, 0);
  expect_the_pass("leaf 1's only free node is a site");
  flat->ForEachNode([&](const framework::NodeSummary& n) { flat->SetFree(n.name, 0, 0); });
  flat->SetFree("l3-n2", 8, 8);
  expect_the_pass("one free node");

  // A remote leaf whose only free node is a site with a CUDA IPC instance: its mean (51.9 ms)
  // is the dearest that can host the pod; its full leaf mate's (the IPC instance a leaf
  // away) must not count.
  auto remote = std::make_shared<StaticClusterView>(ipc);
  remote->SetNode("a-n0", {{kLeaf, "la"}, {kSpine, "s0"}, {kZone, "z1"}}, 8, 8);
  remote->SetNode("a-n1", {{kLeaf, "la"}, {kSpine, "s0"}, {kZone, "z1"}}, 8, 8);
  remote->SetNode("r-site", {{kLeaf, "lr"}, {kSpine, "sr"}, {kZone, "z2"}}, 8, 8);
  remote->SetNode("r-other", {{kLeaf, "lr"}, {kSpine, "sr"}, {kZone, "z2"}}, 0, 0);
  for (const char* uid : {"p1", "p2", "p3"}) remote->AddMember("chat", Member(uid, "a-n0", PodRole::kPrefill));
  remote->AddMember("chat", Member("p4", "r-site", PodRole::kPrefill, 2, 2, /*kv_ipc=*/true));
  auto remote_ranked = std::make_shared<RankedView>(remote);
  remote_ranked->token = {1, std::make_shared<int>(1)};
  for (const char* node : {"a-n0", "a-n1", "r-site"}) {
    SCOPED_TRACE(node);
    const std::string why = ScoreOn(plugin, pod, remote_ranked, node).explanation;
    EXPECT_EQ(why, ScoreOn(KvTransferCost{Args{}}, pod, remote, node).explanation);
    EXPECT_NE(why.find("scale to 51.9 ms"), std::string::npos) << why;
  }
}

// With the hashes, nodes whose domains hold the same instances share one mean (a spread pool
// computes a few dozen, not one per leaf), but only where the tiers nest, and a site only with
// sites holding what it holds; every node scores as it does through the view without hashes.
TEST(KvTransferCostTest, NodesWhoseDomainsHoldTheSameShareAMeanOnlyWhereTheTiersNest) {
  // Leaf x spans two spines: its node x-n1 has a prefill instance in its leaf and another in its
  // spine, and must not take the mean of a-n1 or b-n1 (one instance in their leaf, the same one
  // in their spine: the same contents, a dearer mean). x-n1 is the cheapest node that could
  // host the pod (the sites are full), so a shared mean would move the scale and every score.
  auto flat = std::make_shared<StaticClusterView>();
  const auto add = [&](StaticClusterView& view, const std::string& name, const std::string& leaf,
                       const std::string& spine, int free) {
    view.SetNode(name, {{kLeaf, leaf}, {kSpine, spine}, {kZone, "z1"}}, free, free);
  };
  for (const std::string leaf : {"a", "b"}) {
    add(*flat, leaf + "-n0", leaf, "s-" + leaf, 0);  // the leaf's prefill instance
    add(*flat, leaf + "-n1", leaf, "s-" + leaf, 8);
  }
  add(*flat, "x-n0", "x", "s2", 0);  // leaf x's prefill instance, under spine s2
  add(*flat, "x-n1", "x", "s3", 8);  // the same leaf label under spine s3
  add(*flat, "z-n0", "z", "s3", 0);  // spine s3's own prefill instance
  add(*flat, "far", "f", "s8", 8);
  for (const char* node : {"a-n0", "b-n0", "x-n0", "z-n0"}) {
    flat->AddMember("chat", Member(std::string("p-") + node, node, PodRole::kPrefill));
  }
  const KvTransferCost plugin{Args{}};
  ExpectEveryNodeScoresAsOnFlat(plugin, PoolPod(PodRole::kDecode), flat, std::make_shared<HashedView>(flat));
  EXPECT_EQ(ScoreOn(plugin, PoolPod(PodRole::kDecode), flat, "x-n1").score, 100);
  EXPECT_LT(ScoreOn(plugin, PoolPod(PodRole::kDecode), flat, "a-n1").score, 100);

  // Leaf z spans two spines with a site under each, so its domain does not nest, even for z-n1,
  // whose spine (s6) is the one of the leaf's first site: z-n1 reaches z-n0 and z-n2 through the
  // leaf and w-n0 through its spine, t-n2 (a nested leaf of two sites, the same in its spine)
  // the two through the leaf and nothing through the spine. Both see two instances in the leaf
  // and two in the spine; t-n2 comes first, and z-n1, the cheaper, must not take its mean.
  auto spans = std::make_shared<StaticClusterView>();
  add(*spans, "t-n0", "t", "s-t", 0);
  add(*spans, "t-n1", "t", "s-t", 0);
  add(*spans, "t-n2", "t", "s-t", 8);
  add(*spans, "z-n0", "z", "s6", 0);
  add(*spans, "z-n1", "z", "s6", 8);
  add(*spans, "z-n2", "z", "s7", 0);
  add(*spans, "w-n0", "w", "s6", 0);
  add(*spans, "far", "f", "s8", 8);
  for (const char* node : {"t-n0", "t-n1", "z-n0", "z-n2", "w-n0"}) {
    spans->AddMember("chat", Member(std::string("p-") + node, node, PodRole::kPrefill));
  }
  ExpectEveryNodeScoresAsOnFlat(plugin, PoolPod(PodRole::kDecode), spans, std::make_shared<HashedView>(spans));
  EXPECT_EQ(ScoreOn(plugin, PoolPod(PodRole::kDecode), spans, "z-n1").score, 100);
  EXPECT_LT(ScoreOn(plugin, PoolPod(PodRole::kDecode), spans, "t-n2").score, 100);

  // Sites: u-n0 (two instances) and v-n0 (three) each stand in a leaf and a spine that hold
  // three; with same-node CUDA IPC v-n0 is the cheapest, and must not take u-n0's mean.
  pd::NetworkConfig ipc;
  ipc.same_node_ipc = true;
  auto sites = std::make_shared<StaticClusterView>(ipc);
  add(*sites, "u-n0", "u", "s-u", 8);
  add(*sites, "u-n1", "u", "s-u", 8);
  add(*sites, "v-n0", "v", "s-v", 8);
  add(*sites, "far", "f", "s8", 8);
  for (const auto& [uid, node] : std::vector<std::pair<std::string, std::string>>{
           {"u0", "u-n0"}, {"u1", "u-n0"}, {"u2", "u-n1"}, {"v0", "v-n0"}, {"v1", "v-n0"}, {"v2", "v-n0"}}) {
    sites->AddMember("chat", Member(uid, node, PodRole::kPrefill, 2, 2, /*kv_ipc=*/true));
  }
  PlacementRequest pod = PoolPod(PodRole::kDecode);
  pod.kv_ipc = true;
  ExpectEveryNodeScoresAsOnFlat(plugin, pod, sites, std::make_shared<HashedView>(sites));
  EXPECT_EQ(ScoreOn(plugin, pod, sites, "v-n0").score, 100);
  EXPECT_LT(ScoreOn(plugin, pod, sites, "u-n0").score, 100);
}

// A view that gives a PoolToken as the extender's does (the pool's version, the positions'
// identity), set by the test.
class TokenView : public HashedView {
 public:
  explicit TokenView(std::shared_ptr<const StaticClusterView> view) : HashedView(std::move(view)) {}
  framework::PoolToken PoolVersion(std::string_view) const override { return token; }
  framework::PoolToken token;
};

// The pool's sites are kept across cycles while the view's token for the pool is the same, and
// built again when its version or its positions change; a pod of the pool itself is never
// scored with kept sites (it must not count itself). The means kept by the thread are per pod
// shape: each shape scores as it does with a plugin that keeps nothing.
TEST(KvTransferCostTest, APoolsSitesAreKeptWhileTheViewsTokenHolds) {
  auto flat = Fabric();
  flat->AddMember("chat", Member("p1", "leafmate", PodRole::kPrefill));
  const auto positions = std::make_shared<int>(1);
  auto view = std::make_shared<TokenView>(flat);
  view->token = {7, positions};
  const KvTransferCost plugin{Args{}};
  const auto anchors = [&](const PlacementRequest& pod) {
    const std::string why = ScoreOn(plugin, pod, view, "here").explanation;
    return why.substr(0, why.find(", expected"));
  };
  EXPECT_EQ(anchors(PoolPod(PodRole::kDecode)), "decode of pool chat: 1 prefill instance");
  flat->AddMember("chat", Member("p2", "spinemate", PodRole::kPrefill));
  // The same token says the same pool: what was built for it stands.
  EXPECT_EQ(anchors(PoolPod(PodRole::kDecode)), "decode of pool chat: 1 prefill instance");
  view->token = {8, positions};
  EXPECT_EQ(anchors(PoolPod(PodRole::kDecode)), "decode of pool chat: 2 prefill instances");
  const PlacementRequest prefill = PoolPod(PodRole::kPrefill);
  EXPECT_EQ(anchors(prefill), "prefill of pool chat: no decode instances yet, anchored on 2 prefill instances");
  // The pod itself in the pool (RequestBuilder's uid), with p3, under the same token: the sites
  // are built for the cycle, without it, not taken from what was kept.
  flat->AddMember("chat", Member("uid-1", "far", PodRole::kPrefill));
  flat->AddMember("chat", Member("p3", "far", PodRole::kPrefill));
  EXPECT_EQ(anchors(prefill), "prefill of pool chat: no decode instances yet, anchored on 3 prefill instances");

  // New positions under the same version: leafmate moves to leaf l5, away from "here".
  flat->RemoveMember("uid-1");
  flat->AddMember("chat", Member("d1", "here", PodRole::kDecode));
  view->token = {9, positions};
  const int before = ScoreOn(plugin, PoolPod(PodRole::kDecode), view, "here").score;
  flat->SetNode("leafmate", {{kClique, "c2"}, {kLeaf, "l5"}, {kSpine, "s3"}, {kZone, "z2"}}, 8, 8);
  auto moved = std::make_shared<TokenView>(flat);  // its hashes follow the move
  moved->token = {9, std::make_shared<int>(2)};
  const int after = ScoreOn(plugin, PoolPod(PodRole::kDecode), moved, "here").score;
  EXPECT_LT(after, before);
  EXPECT_EQ(after, ScoreOn(KvTransferCost{Args{}}, PoolPod(PodRole::kDecode), flat, "here").score);

  // New versions under the same positions: the layout of the last sites is lent where the
  // instances stand on the same nodes (a pod left and came back, a node holds one more), not
  // where one moved to another node, even with as many nodes as before.
  const auto expect_fresh = [&](const std::string& step) {
    SCOPED_TRACE(step);
    for (const char* node : {"here", "nvmate", "leafmate", "spinemate", "zonemate", "far"}) {
      SCOPED_TRACE(node);
      EXPECT_EQ(ScoreOn(plugin, PoolPod(PodRole::kDecode), moved, node).explanation,
                ScoreOn(KvTransferCost{Args{}}, PoolPod(PodRole::kDecode), flat, node).explanation);
    }
  };
  flat->AddMember("chat", Member("p5", "far", PodRole::kPrefill));
  moved->token = {11, moved->token.positions};
  expect_fresh("one more on a site's node");
  flat->RemoveMember("p5");
  flat->RemoveMember("p3");
  flat->AddMember("chat", Member("p3", "zonemate", PodRole::kPrefill));
  moved->token = {12, moved->token.positions};
  expect_fresh("one moved to a node of its own");

  // Shapes one after another against kept sites, each as a plugin that keeps nothing scores it
  // (p4 shares an NVLink clique with "here", where the GPUs count as well as the NICs).
  flat->AddMember("chat", Member("p4", "nvmate", PodRole::kPrefill));
  moved->token = {10, moved->token.positions};
  for (const auto& [gpus, nics] : std::vector<std::pair<int, int>>{{2, 2}, {1, 2}, {4, 4}, {1, 1}, {4, 4}, {8, 0}}) {
    for (const char* node : {"here", "nvmate", "leafmate", "far"}) {
      SCOPED_TRACE(std::to_string(gpus) + " GPUs, " + std::to_string(nics) + " NICs on " + node);
      const PlacementRequest pod = PoolPod(PodRole::kDecode, gpus, nics);
      EXPECT_EQ(ScoreOn(plugin, pod, moved, node).explanation,
                ScoreOn(KvTransferCost{Args{}}, pod, flat, node).explanation);
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
