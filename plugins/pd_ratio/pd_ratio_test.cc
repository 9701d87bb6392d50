#include "pd_ratio/pd_ratio.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "testing/framework_testing.h"
#include "toposched/framework/cluster_view.h"

namespace toposched::plugins::pd_ratio {
namespace {

using framework::CycleState;
using framework::PoolMember;
using framework::StaticClusterView;
using toposched::testing::CycleWith;
using toposched::testing::Fits;
using toposched::testing::NodeBuilder;
using toposched::testing::PlacementOn;
using toposched::testing::PresetTopology;
using toposched::testing::RequestBuilder;

constexpr const char* kLeaf = "toposched.io/leaf";
constexpr const char* kSpine = "toposched.io/spine";

PlacementRequest PoolPod(PodRole role, std::string pool = "chat", int p = 1, int d = 3) {
  PlacementRequest r = RequestBuilder().Gpus(2).Nics(2).Build();
  r.role = role;
  r.pool = std::move(pool);
  r.pd_ratio_prefill = p;
  r.pd_ratio_decode = d;
  return r;
}

PoolMember Member(std::string uid, std::string node, PodRole role) {
  return PoolMember{std::move(uid), std::move(node), role, 2, 2, LinkClass::kPIX};
}

// Two leaves under one spine, and a node without tier labels:
//   leaf-a: a1 (1 prefill, 1 decode), a2 (1 decode)     leaf-b: b1 (empty)      bare: no labels
std::shared_ptr<StaticClusterView> TwoLeaves() {
  auto view = std::make_shared<StaticClusterView>();
  view->SetNode("a1", {{kLeaf, "leaf-a"}, {kSpine, "s1"}}, 4);
  view->SetNode("a2", {{kLeaf, "leaf-a"}, {kSpine, "s1"}}, 4);
  view->SetNode("b1", {{kLeaf, "leaf-b"}, {kSpine, "s1"}}, 8);
  view->SetNode("bare", {}, 8);
  view->AddMember("chat", Member("p1", "a1", PodRole::kPrefill));
  view->AddMember("chat", Member("d1", "a1", PodRole::kDecode));
  view->AddMember("chat", Member("d2", "a2", PodRole::kDecode));
  view->AddMember("other", Member("x1", "b1", PodRole::kPrefill));
  return view;
}

framework::ScoreResult ScoreOn(const PdRatio& plugin, PlacementRequest request,
                               std::shared_ptr<const framework::ClusterView> view, const std::string& node) {
  const auto& t = *PresetTopology("hgx-h100-8gpu");
  CycleState state = CycleWith(std::move(request), Fits(PlacementOn(t, {0, 1}, {0, 1})));
  state.SetCluster(std::move(view));
  return plugin.Score(state, NodeBuilder(node, "hgx-h100-8gpu").Build());
}

TEST(PdRatioTest, Formula) {
  struct Case {
    std::string name;
    int p, d, prefill_halves, decode_halves;  // counts after adding the pod, in halves
    int score;
  };
  const std::vector<Case> cases = {
      // 1:3, s = .25. 1P 2D + decode = 1P 3D: share .25, error 0 -> 100.
      {"1:3, 1P 2D + decode", 1, 3, 2, 6, 100},
      // Empty + decode: share 0, error .25 of max .75 -> 100 * (1 - 1/3) = 66.7 -> 67.
      {"1:3, empty + decode", 1, 3, 0, 2, 67},
      // Empty + prefill: share 1, error .75 of .75 -> 0.
      {"1:3, empty + prefill", 1, 3, 2, 0, 0},
      // 1P 3D + prefill = 2P 3D: share .4, error .15 / .75 = .2 -> 80.
      {"1:3, 1P 3D + prefill", 1, 3, 4, 6, 80},
      // 1P 3D + both = 1.5P 3.5D: share .3, error .05 / .75 = .0667 -> 93.3 -> 93.
      {"1:3, 1P 3D + both", 1, 3, 3, 7, 93},
      // 1:1, s = .5. Empty + prefill: share 1, error .5 of .5 -> 0.
      {"1:1, empty + prefill", 1, 1, 2, 0, 0},
      // 1:1, 1P + decode: share .5 -> 100.
      {"1:1, 1P + decode", 1, 1, 2, 2, 100},
      // 2:1, s = .667. 1D + prefill = 1P 1D: share .5, error .1667 / .6667 = .25 -> 75.
      {"2:1, 1D + prefill", 2, 1, 2, 2, 75},
      // 3:1, s = .75. Empty + both = .5P .5D: share .5, error .25 / .75 -> 66.7 -> 67.
      {"3:1, empty + both", 3, 1, 1, 1, 67},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(RatioScore(c.p, c.d, c.prefill_halves, c.decode_halves), c.score);
  }
}

TEST(PdRatioTest, ScoresTheNodesDomain) {
  struct Case {
    std::string name;
    PlacementRequest request;
    std::string node;
    int score;
    std::string explanation;
  };
  const std::string target = "target 1:3 (prefill share 0.25, from the pod)";
  const std::vector<Case> cases = {
      // leaf-a holds 1P 2D (a1 and a2 together); adding a decode gives 1:3 exactly.
      {"decode into leaf-a", PoolPod(PodRole::kDecode), "a2", 100,
       "decode of pool chat, " + target +
           " in toposched.io/leaf=leaf-a: 1 prefill, 2 decode; with this decode "
           "1 prefill, 3 decode -> share 0.25, error 0.00 of at most 0.75 -> 100"},
      // leaf-b holds only another pool's prefill: empty for chat. share 0, error .25/.75 -> 67.
      {"decode into empty leaf-b", PoolPod(PodRole::kDecode), "b1", 67,
       "decode of pool chat, " + target +
           " in toposched.io/leaf=leaf-b: 0 prefill, 0 decode; with this decode "
           "0 prefill, 1 decode -> share 0.00, error 0.25 of at most 0.75 -> 67"},
      // leaf-a + prefill = 2P 2D: share .5, error .25/.75 -> 67.
      {"prefill into leaf-a", PoolPod(PodRole::kPrefill), "a1", 67,
       "prefill of pool chat, " + target +
           " in toposched.io/leaf=leaf-a: 1 prefill, 2 decode; with this prefill "
           "2 prefill, 2 decode -> share 0.50, error 0.25 of at most 0.75 -> 67"},
      // A role-both pod adds half to each: 1.5P 2.5D, share .375, error .125/.75 -> 83.3 -> 83.
      {"both into leaf-a", PoolPod(PodRole::kBoth), "a1", 83,
       "both of pool chat, " + target +
           " in toposched.io/leaf=leaf-a: 1 prefill, 2 decode; with this both "
           "1.5 prefill, 2.5 decode -> share 0.38, error 0.12 of at most 0.75 -> 83"},
      // No leaf label: the node is its own domain, empty.
      {"decode onto an unlabelled node", PoolPod(PodRole::kDecode), "bare", 67,
       "decode of pool chat, " + target +
           " in node bare (no toposched.io/leaf label: its own domain): 0 prefill, "
           "0 decode; with this decode 0 prefill, 1 decode -> share 0.00, error 0.25 of at most 0.75 -> 67"},
  };
  const PdRatio plugin{Args{}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const framework::ScoreResult r = ScoreOn(plugin, c.request, TwoLeaves(), c.node);
    EXPECT_EQ(r.score, c.score);
    EXPECT_EQ(r.explanation, c.explanation);
  }
}

// Members of an unlabelled node count for that node only; role-both members count half each side.
TEST(PdRatioTest, UnlabelledNodeAndBothMembers) {
  auto view = TwoLeaves();
  view->AddMember("chat", Member("d3", "bare", PodRole::kDecode));
  view->AddMember("chat", Member("b1", "bare", PodRole::kBoth));
  view->AddMember("chat", Member("n1", "bare", PodRole::kNone));  // counts nothing
  const PdRatio plugin{Args{}};
  // bare: 0.5P 1.5D + prefill = 1.5P 1.5D: share .5, error .25/.75 -> 67.
  const framework::ScoreResult r = ScoreOn(plugin, PoolPod(PodRole::kPrefill), view, "bare");
  EXPECT_EQ(r.score, 67);
  EXPECT_NE(r.explanation.find("0.5 prefill, 1.5 decode; with this prefill 1.5 prefill, 1.5 decode"),
            std::string::npos)
      << r.explanation;
}

// The ratio tier is an arg: by spine, leaf-a and leaf-b are one domain (1P 2D; bare is alone).
TEST(PdRatioTest, RatioTierArg) {
  Result<Args> args = ParseArgs({{"ratioTier", kSpine}});
  ASSERT_TRUE(args.ok()) << args.error().message();
  const PdRatio plugin{*args};
  const framework::ScoreResult r = ScoreOn(plugin, PoolPod(PodRole::kDecode), TwoLeaves(), "b1");
  EXPECT_EQ(r.score, 100) << r.explanation;
  EXPECT_NE(r.explanation.find("in toposched.io/spine=s1: 1 prefill, 2 decode"), std::string::npos)
      << r.explanation;
}

// The pod's annotation wins over defaultRatio; defaultRatio applies when the pod has none.
TEST(PdRatioTest, TargetSource) {
  Result<Args> args = ParseArgs({{"defaultRatio", "1:1"}});
  ASSERT_TRUE(args.ok()) << args.error().message();
  const PdRatio plugin{*args};
  // Pod says 1:3: leaf-a 1P 2D + decode -> 100.
  EXPECT_EQ(ScoreOn(plugin, PoolPod(PodRole::kDecode), TwoLeaves(), "a1").score, 100);
  // No annotation: 1:1, share .25, error .25/.5 -> 50.
  const framework::ScoreResult r =
      ScoreOn(plugin, PoolPod(PodRole::kDecode, "chat", 0, 0), TwoLeaves(), "a1");
  EXPECT_EQ(r.score, 50);
  EXPECT_NE(r.explanation.find("target 1:1 (prefill share 0.50, defaultRatio)"), std::string::npos)
      << r.explanation;
}

TEST(PdRatioTest, NeutralCases) {
  auto network_without_tiers = std::make_shared<StaticClusterView>([] {
    pd::NetworkConfig n;
    n.tiers.clear();
    return n;
  }());
  struct Case {
    std::string name;
    PlacementRequest request;
    framework::PluginArgs args;
    bool with_view;
    std::string explanation;
  };
  const std::vector<Case> cases = {
      {"no role", PoolPod(PodRole::kNone), {}, true, "no Prefill/Decode role: neutral -> 100"},
      {"no pool", PoolPod(PodRole::kDecode, ""), {}, true, "decode pod without a pool: neutral -> 100"},
      {"no target",
       PoolPod(PodRole::kDecode, "chat", 0, 0),
       {},
       true,
       "decode of pool chat: no target ratio (no toposched.io/pd-ratio annotation, no defaultRatio): neutral "
       "-> 100"},
      {"no cluster view",
       PoolPod(PodRole::kDecode),
       {},
       false,
       "decode of pool chat, target 1:3 (prefill share 0.25, from the pod): no cluster view in this cycle: "
       "neutral -> 100"},
      {"misspelt ratioTier",
       PoolPod(PodRole::kDecode),
       {{"ratioTier", "toposched.io/lef"}},
       true,
       "decode of pool chat, target 1:3 (prefill share 0.25, from the pod): ratioTier: tier toposched.io/lef "
       "is "
       "not a configured network tier (nvidia.com/gpu.clique, toposched.io/leaf, toposched.io/spine, "
       "topology.kubernetes.io/zone): neutral -> 100"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<Args> args = ParseArgs(c.args);
    ASSERT_TRUE(args.ok()) << args.error().message();
    const PdRatio plugin{*args};
    const framework::ScoreResult r = ScoreOn(plugin, c.request, c.with_view ? TwoLeaves() : nullptr, "a1");
    EXPECT_EQ(r.score, 100);
    EXPECT_EQ(r.explanation, c.explanation);
  }
  // No tiers configured: each node is its own domain (not neutral).
  network_without_tiers->SetNode("n", {}, 8);
  network_without_tiers->AddMember("chat", Member("p1", "n", PodRole::kPrefill));
  const framework::ScoreResult r =
      ScoreOn(PdRatio{Args{}}, PoolPod(PodRole::kDecode), network_without_tiers, "n");
  // 1P + decode: share .5, error .25/.75 -> 67.
  EXPECT_EQ(r.score, 67);
  EXPECT_NE(r.explanation.find("node n (no network tiers: its own domain): 1 prefill, 0 decode"),
            std::string::npos)
      << r.explanation;
}

// The pool's counts are gathered once per cycle and kept in the CycleState.
// The extender's cycles want numbers only (CycleState::explain false): same score, no text.
TEST(PdRatioTest, WithoutExplanationsTheScoresAreTheSame) {
  const PdRatio plugin{Args{}};
  const auto& t = *PresetTopology("hgx-h100-8gpu");
  for (PodRole role : {PodRole::kPrefill, PodRole::kDecode, PodRole::kBoth}) {
    for (const char* node : {"a1", "a2", "b1", "bare"}) {
      SCOPED_TRACE(std::string(ToString(role)) + " on " + node);
      const framework::ScoreResult explained = ScoreOn(plugin, PoolPod(role), TwoLeaves(), node);
      CycleState state = CycleWith(PoolPod(role), Fits(PlacementOn(t, {0, 1}, {0, 1})));
      state.SetCluster(TwoLeaves());
      state.set_explain(false);
      const framework::ScoreResult bare = plugin.Score(state, NodeBuilder(node, "hgx-h100-8gpu").Build());
      EXPECT_EQ(bare.score, explained.score);
      EXPECT_TRUE(bare.explanation.empty()) << bare.explanation;
      EXPECT_FALSE(explained.explanation.empty());
    }
  }
}

TEST(PdRatioTest, CountsOncePerCycle) {
  auto view = TwoLeaves();
  const auto& t = *PresetTopology("hgx-h100-8gpu");
  CycleState state = CycleWith(PoolPod(PodRole::kDecode), Fits(PlacementOn(t, {0, 1}, {0, 1})));
  state.SetCluster(view);
  const PdRatio plugin{Args{}};
  EXPECT_EQ(plugin.Score(state, NodeBuilder("a1", "hgx-h100-8gpu").Build()).score, 100);
  EXPECT_NE(state.Read(kCycleKey), nullptr);
  // A member added after the first node was scored is not seen in this cycle.
  view->AddMember("chat", Member("d9", "a2", PodRole::kDecode));
  EXPECT_EQ(plugin.Score(state, NodeBuilder("a2", "hgx-h100-8gpu").Build()).score, 100);
}

// The pod itself, already in the view (re-scored after a bind), is not counted twice.
TEST(PdRatioTest, SkipsThePodItself) {
  auto view = TwoLeaves();
  view->AddMember("chat", Member("uid-1", "a2", PodRole::kDecode));  // RequestBuilder's uid
  EXPECT_EQ(ScoreOn(PdRatio{Args{}}, PoolPod(PodRole::kDecode), view, "a2").score, 100);
}

TEST(PdRatioTest, Args) {
  struct Case {
    std::string name;
    framework::PluginArgs args;
    std::string error;  // empty: ok
  };
  const std::vector<Case> cases = {
      {"none", {}, ""},
      {"both", {{"ratioTier", kLeaf}, {"defaultRatio", "1:3"}}, ""},
      {"empty ratio", {{"defaultRatio", ""}}, ""},
      {"unknown", {{"ratio", "1:3"}}, "unknown args: ratio (known: ratioTier, defaultRatio)"},
      {"no colon", {{"defaultRatio", "13"}}, "arg defaultRatio: \"13\" is not a Prefill:Decode ratio"},
      {"zero", {{"defaultRatio", "0:3"}}, "arg defaultRatio: \"0:3\" is not"},
      {"too big", {{"defaultRatio", "1:101"}}, "arg defaultRatio: \"1:101\" is not"},
      {"junk", {{"defaultRatio", "1:3x"}}, "arg defaultRatio: \"1:3x\" is not"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<std::unique_ptr<framework::Plugin>> p = New(c.args);
    if (c.error.empty()) {
      ASSERT_TRUE(p.ok()) << p.error().message();
      EXPECT_EQ((*p)->Name(), kName);
    } else {
      ASSERT_FALSE(p.ok());
      EXPECT_NE(p.error().message().find(c.error), std::string::npos) << p.error().message();
    }
  }
  Result<Args> a = ParseArgs({{"defaultRatio", "2:5"}});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->default_prefill, 2);
  EXPECT_EQ(a->default_decode, 5);
}

}  // namespace
}  // namespace toposched::plugins::pd_ratio
