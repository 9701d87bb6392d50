#include "toposched/framework/framework.h"
#include "toposched/framework/ranking.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "testing/fake_plugins.h"
#include "testing/framework_testing.h"

namespace toposched::framework {
namespace {

using toposched::testing::FakeFactory;
using toposched::testing::FakeFilter;
using toposched::testing::FakeReserve;
using toposched::testing::FakeScore;
using toposched::testing::NodeBuilder;
using toposched::testing::RequestBuilder;

TEST(ToExtenderScoreTest, RoundsHalfUpToTenths) {
  struct Case {
    int in, want;
  };
  const std::vector<Case> cases = {
      {0, 0},  {4, 0},   {5, 1},    {14, 1}, {15, 2},   {50, 5},
      {94, 9}, {95, 10}, {100, 10}, {-5, 0}, {150, 10},  // off the scale: clamped first
  };
  for (const Case& c : cases) EXPECT_EQ(ToExtenderScore(c.in), c.want) << c.in;
}

// A registry of fakes: "Ok" and "Skip" filters that let pods through, "No" and "Never" that
// reject, score plugins S100, S60, S50, S51 and S150 (a buggy one), reserve plugins R1..R3 and
// RFail logging into `log`.
struct Fixture {
  std::shared_ptr<std::vector<std::string>> log = std::make_shared<std::vector<std::string>>();
  Registry registry;

  Fixture() {
    auto add = [&](const std::string& name, PluginFactory f) {
      EXPECT_TRUE(registry.Register(name, std::move(f)).ok());
    };
    add("Ok", FakeFactory<FakeFilter>(std::string("Ok"), PluginStatus::Success()));
    add("Skip", FakeFactory<FakeFilter>(std::string("Skip"), PluginStatus::Skip("Skip")));
    add("No",
        FakeFactory<FakeFilter>(std::string("No"), PluginStatus::Unschedulable("", "2 GPUs asked, 1 free")));
    add("Never",
        FakeFactory<FakeFilter>(std::string("Never"), PluginStatus::Unresolvable("Never", "4 GPUs in all")));
    for (int s : {100, 60, 50, 51, 150}) {
      const std::string name = "S" + std::to_string(s);
      add(name, FakeFactory<FakeScore>(name, s));
    }
    add("N100", FakeFactory<FakeScore>(std::string("N100"), 100, false));  // does not apply: not counted
    // Scores that read the cluster view (ScorePlugin::ReadsCluster); C0N does not apply.
    add("C70", FakeFactory<FakeScore>(std::string("C70"), 70, true, true));
    add("C33", FakeFactory<FakeScore>(std::string("C33"), 33, true, true));
    add("C0N", FakeFactory<FakeScore>(std::string("C0N"), 0, false, true));
    for (const char* name : {"R1", "R2", "R3"})
      add(name, FakeFactory<FakeReserve>(std::string(name), PluginStatus::Success(), log));
    add("RFail", FakeFactory<FakeReserve>(std::string("RFail"),
                                          PluginStatus::Unschedulable("", "GPU2 was taken"), log));
  }

  // A framework with the given plugins (weight per plugin, default 1); always adds a filter and
  // a reserve plugin unless the list has one, so Create accepts it.
  Framework Make(std::vector<PluginConfig> plugins) {
    SchedulerConfig config;
    config.plugins = std::move(plugins);
    Result<Framework> f = Framework::Create(config, registry);
    EXPECT_TRUE(f.ok()) << f.error().message();
    return std::move(f).value();
  }
  // A framework with these Score plugins behind the "Ok" filter and the "R1" reserve plugin.
  Framework MakeScoring(const std::vector<PluginConfig>& scorers) {
    std::vector<PluginConfig> plugins = {{"Ok", 1, {}}, {"R1", 1, {}}};
    plugins.insert(plugins.end(), scorers.begin(), scorers.end());
    return Make(std::move(plugins));
  }
};

TEST(FrameworkTest, CreateSortsPluginsByExtensionPoint) {
  Fixture fx;
  const Framework f = fx.Make({{"Ok", 1, {}}, {"S100", 5, {}}, {"R1", 1, {}}, {"No", 1, {}}, {"S60", 3, {}}});
  EXPECT_EQ(f.FilterPluginNames(), (std::vector<std::string_view>{"Ok", "No"}));
  EXPECT_EQ(f.ScorePluginNames(), (std::vector<std::string_view>{"S100", "S60"}));
  EXPECT_EQ(f.ReservePluginNames(), (std::vector<std::string_view>{"R1"}));
}

TEST(FrameworkTest, CreateRejectsBadConfigs) {
  struct Case {
    std::string name;
    std::vector<PluginConfig> plugins;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"no filter", {{"R1", 1, {}}, {"S100", 1, {}}}, "no Filter plugin enabled"},
      {"no reserve", {{"Ok", 1, {}}, {"S100", 1, {}}}, "no Reserve plugin enabled"},
      {"unknown", {{"Ok", 1, {}}, {"R1", 1, {}}, {"Gone", 1, {}}}, "plugins[2]: unknown plugin \"Gone\""},
      {"duplicate", {{"Ok", 1, {}}, {"R1", 1, {}}, {"Ok", 1, {}}}, "plugins[2]: Ok is listed twice"},
      {"weight",
       {{"Ok", 1, {}}, {"R1", 1, {}}, {"S60", 101, {}}},
       "plugins[2].weight: 101 is out of range 0..100"},
      {"args", {{"Ok", 1, {{"x", "y"}}}, {"R1", 1, {}}}, "plugins[0]: Ok: unknown arg \"x\""},
  };
  Fixture fx;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SchedulerConfig config;
    config.plugins = c.plugins;
    Result<Framework> f = Framework::Create(config, fx.registry);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.error().message().find(c.error), std::string::npos) << f.error().message();
  }
}

TEST(FrameworkTest, TheCapacityPluginRanksAtWeightZeroAndWhenNotListed) {
  Fixture fx;
  // Listed at weight 0: scored for the rank, out of the total, not a part unless explaining.
  SchedulerConfig config;
  config.plugins = {{"Ok", 1, {}}, {"R1", 1, {}}, {"S60", 0, {}}, {"S100", 1, {}}};
  config.capacity.plugin = "S60";
  Result<Framework> f = Framework::Create(config, fx.registry);
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_EQ(f->CapacityBandWidth(), kDefaultCapacityBand);  // the band defaults to 5
  EXPECT_EQ(f->CapacityPluginName(), "S60");
  CycleState quiet = f->NewCycle(RequestBuilder().Gpus(1).Build());
  quiet.set_explain(false);
  const NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").Build();
  NodeScore s = f->RunScore(quiet, node);
  EXPECT_EQ(s.capacity, 60);
  EXPECT_EQ(s.total, 100);
  EXPECT_EQ(s.parts.size(), 1u);
  // Not listed at all: built from the registry, ranks, adds nothing to the total.
  config.plugins = {{"Ok", 1, {}}, {"R1", 1, {}}, {"S100", 1, {}}};
  config.capacity.plugin = "S51";
  f = Framework::Create(config, fx.registry);
  ASSERT_TRUE(f.ok()) << f.error().message();
  CycleState explained = f->NewCycle(RequestBuilder().Gpus(1).Build());
  s = f->RunScore(explained, node);
  EXPECT_EQ(s.capacity, 51);
  EXPECT_EQ(s.total, 100);
  EXPECT_NE(ExplainScore(s).find("capacity 51 (ranks first): S51 says 51"), std::string::npos)
      << ExplainScore(s);
  // Off: no capacity score.
  config.capacity.plugin.clear();
  f = Framework::Create(config, fx.registry);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->CapacityBandWidth(), -1);
  CycleState off = f->NewCycle(RequestBuilder().Gpus(1).Build());
  EXPECT_EQ(f->RunScore(off, node).capacity, -1);
  // A named plugin the registry lacks, or one without Score, is an error; the default is off.
  config.capacity.plugin = "Gone";
  EXPECT_FALSE(Framework::Create(config, fx.registry).ok());
  config.capacity.plugin = "Ok";
  EXPECT_FALSE(Framework::Create(config, fx.registry).ok());
  config.capacity = CapacityConfig{};
  f = Framework::Create(config, fx.registry);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->CapacityBandWidth(), -1);
}

TEST(FrameworkTest, FilterStopsAtTheFirstFailureAndNamesIt) {
  Fixture fx;
  struct Case {
    std::string name;
    std::vector<PluginConfig> filters;
    Code code;
    std::string plugin;
  };
  const std::vector<Case> cases = {
      {"all pass", {{"Ok", 1, {}}, {"Skip", 1, {}}}, Code::kSuccess, ""},
      // No leaves its plugin name empty: the framework fills it in.
      {"first failure wins", {{"Ok", 1, {}}, {"No", 1, {}}, {"Never", 1, {}}}, Code::kUnschedulable, "No"},
      {"order matters", {{"Never", 1, {}}, {"No", 1, {}}}, Code::kUnschedulableAndUnresolvable, "Never"},
      {"skip is not a failure",
       {{"Skip", 1, {}}, {"Never", 1, {}}},
       Code::kUnschedulableAndUnresolvable,
       "Never"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<PluginConfig> plugins = c.filters;
    plugins.push_back({"R1", 1, {}});
    const Framework f = fx.Make(plugins);
    CycleState state = f.NewCycle(RequestBuilder().Gpus(1).Build());
    const FilterResult r = f.RunFilter(state, NodeBuilder("n", "hgx-h100-8gpu").Build());
    EXPECT_EQ(r.code(), c.code);
    EXPECT_EQ(r.plugin(), c.plugin);
    EXPECT_EQ(r.ok(), c.code == Code::kSuccess);
  }
}

TEST(FrameworkTest, ScoreIsTheRoundedWeightedAverage) {
  Fixture fx;
  struct Case {
    std::string name;
    std::vector<PluginConfig> scorers;
    int total;
  };
  const std::vector<Case> cases = {
      {"weighted", {{"S100", 5, {}}, {"S60", 3, {}}}, 85},                 // (5*100 + 3*60) / 8 = 680/8 = 85
      {"rounds up from .67", {{"S50", 1, {}}, {"S51", 2, {}}}, 51},        // (50 + 102) / 3 = 50.67
      {"rounds half up", {{"S50", 1, {}}, {"S51", 1, {}}}, 51},            // 101 / 2 = 50.5
      {"rounds down below half", {{"S50", 2, {}}, {"S51", 1, {}}}, 50},    // 151 / 3 = 50.33
      {"weight zero is left out", {{"S100", 0, {}}, {"S60", 1, {}}}, 60},  // 60 / 1
      {"all weights zero", {{"S100", 0, {}}}, 0},
      {"no scorers", {}, 0},
      {"off-scale score is clamped", {{"S150", 1, {}}, {"S50", 1, {}}}, 75},              // (100 + 50) / 2
      {"a part that does not apply is left out", {{"N100", 5, {}}, {"S60", 1, {}}}, 60},  // 60 / 1
      {"only parts that do not apply", {{"N100", 5, {}}}, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Framework f = fx.MakeScoring(c.scorers);
    CycleState state = f.NewCycle(RequestBuilder().Gpus(1).Build());
    const NodeScore s = f.RunScore(state, NodeBuilder("n", "hgx-h100-8gpu").Build());
    EXPECT_EQ(s.total, c.total);
    ASSERT_EQ(s.parts.size(), c.scorers.size()) << "every scorer reports, weight 0 included";
    for (std::size_t i = 0; i < s.parts.size(); ++i) {
      EXPECT_EQ(s.parts[i].plugin, c.scorers[i].name);
      EXPECT_EQ(s.parts[i].weight, c.scorers[i].weight);
      EXPECT_GE(s.parts[i].score, 0);
      EXPECT_LE(s.parts[i].score, 100);
    }
  }
}

// The extender scores a pool pod in two parts (the node-only part once per node class, the
// cluster part per node); their sums must give the total one kAll call gives.
TEST(FrameworkTest, ScoreSetsSplitThePluginsAndTheirSumsAddUpToTheWhole) {
  Fixture fx;
  struct Case {
    std::string name;
    std::vector<PluginConfig> scorers;
    std::vector<std::string> node_only, cluster_only;  // the parts each set reports, in config order
    int total;
  };
  const std::vector<Case> cases = {
      // (5*100 + 3*60 + 10*70) / 18 = 1380/18 = 76.67
      {"mixed", {{"S100", 5, {}}, {"C70", 10, {}}, {"S60", 3, {}}}, {"S100", "S60"}, {"C70"}, 77},
      // (1*50 + 2*33) / 3 = 116/3 = 38.67; the part that does not apply counts in neither
      {"not applying", {{"S50", 1, {}}, {"C0N", 7, {}}, {"C33", 2, {}}}, {"S50"}, {"C0N", "C33"}, 39},
      {"only the node", {{"S51", 1, {}}}, {"S51"}, {}, 51},
      {"only the cluster", {{"C70", 2, {}}, {"C33", 1, {}}}, {}, {"C70", "C33"}, 58},  // 173/3 = 57.67
      {"weight zero", {{"S100", 0, {}}, {"C33", 0, {}}}, {"S100"}, {"C33"}, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Framework f = fx.MakeScoring(c.scorers);
    CycleState state = f.NewCycle(RequestBuilder().Gpus(1).Build());
    const NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").Build();
    const NodeScore all = f.RunScore(state, node);
    const NodeScore node_only = f.RunScore(state, node, ScoreSet::kNodeOnly);
    const NodeScore cluster = f.RunScore(state, node, ScoreSet::kClusterOnly);
    EXPECT_EQ(all.total, c.total);
    EXPECT_EQ(WeightedTotal(node_only.weighted + cluster.weighted, node_only.weights + cluster.weights),
              c.total);
    const auto names = [](const NodeScore& s) {
      std::vector<std::string> out;
      for (const ScorePart& p : s.parts) out.push_back(p.plugin);
      return out;
    };
    EXPECT_EQ(names(node_only), c.node_only);
    EXPECT_EQ(names(cluster), c.cluster_only);
    EXPECT_EQ(all.parts.size(), c.scorers.size());
  }
}

TEST(FrameworkTest, APartThatDoesNotApplyIsExplainedButNotCounted) {
  Fixture fx;
  const Framework f = fx.Make({{"Ok", 1, {}}, {"R1", 1, {}}, {"S60", 3, {}}, {"N100", 5, {}}});
  CycleState state = f.NewCycle(PlacementRequest{});
  const NodeScore s = f.RunScore(state, NodeBuilder("n", "hgx-h100-8gpu").Build());
  ASSERT_EQ(s.parts.size(), 2u);
  EXPECT_TRUE(s.parts[0].counted);
  EXPECT_FALSE(s.parts[1].counted);
  EXPECT_EQ(s.total, 60);
  EXPECT_EQ(ExplainScore(s),
            "total 60 = (3*60) / 3; S60 60 x3: S60 says 60; N100 100 x5 (not counted): N100 says 100");
}

TEST(FrameworkTest, ClampedScoreSaysSo) {
  Fixture fx;
  const Framework f = fx.Make({{"Ok", 1, {}}, {"R1", 1, {}}, {"S150", 1, {}}});
  CycleState state = f.NewCycle(PlacementRequest{});
  const NodeScore s = f.RunScore(state, NodeBuilder("n", "hgx-h100-8gpu").Build());
  ASSERT_EQ(s.parts.size(), 1u);
  EXPECT_EQ(s.parts[0].score, 100);
  EXPECT_NE(s.parts[0].explanation.find("clamped from 150"), std::string::npos);
}

TEST(FrameworkTest, ReserveFailureUnreservesTheEarlierOnesInReverse) {
  Fixture fx;
  const Framework f = fx.Make({{"Ok", 1, {}}, {"R1", 1, {}}, {"R2", 1, {}}, {"RFail", 1, {}}, {"R3", 1, {}}});
  CycleState state = f.NewCycle(RequestBuilder().Gpus(1).Build());
  NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").Build();
  const PluginStatus s = f.RunReserve(state, node);
  EXPECT_EQ(s.code(), Code::kUnschedulable);
  EXPECT_EQ(s.plugin(), "RFail");
  EXPECT_EQ(s.reason(), "GPU2 was taken");
  // R3 never runs; RFail (which failed and left nothing) is not unreserved; R2 then R1 are.
  EXPECT_EQ(*fx.log, (std::vector<std::string>{"reserve R1", "reserve R2", "reserve RFail", "unreserve R2",
                                               "unreserve R1"}));
  EXPECT_TRUE(node.labels.empty()) << "the node is as it was";
}

TEST(FrameworkTest, Explanations) {
  NodeScore score;
  score.total = 85;
  score.parts = {{"A", 5, 100, "all PIX"}, {"B", 3, 60, "split"}, {"C", 0, 10, "ignored"}};
  EXPECT_EQ(ExplainScore(score),
            "total 85 = (5*100 + 3*60) / 8; A 100 x5: all PIX; B 60 x3: split; C 10 x0: ignored");
  EXPECT_EQ(ExplainNode("n1", PluginStatus::Unschedulable("DeviceFit", "1 GPU free"), nullptr),
            "n1: filtered out by DeviceFit (Unschedulable): 1 GPU free");
  EXPECT_EQ(ExplainNode("n1", PluginStatus::Success(), &score).rfind("n1: fits; total 85 = (5*100", 0), 0u);
  EXPECT_EQ(PluginStatus::Unresolvable("DeviceFit", "too small").ToString(),
            "UnschedulableAndUnresolvable (DeviceFit): too small");
}

// With the real engine: filter and score of one node share one engine run.
TEST(FrameworkTest, CycleRunsTheEngineOncePerNode) {
  Fixture fx;
  const Framework f = fx.Make({{"Ok", 1, {}}, {"R1", 1, {}}});
  CycleState state = f.NewCycle(RequestBuilder().Gpus(2).Nics(2).Build());
  const NodeInfo node = NodeBuilder("n", "hgx-h100-8gpu").Build();
  const PlacementOutcome& first = state.Outcome(node);
  ASSERT_TRUE(first.ok()) << first.detail;
  EXPECT_EQ(first.placement->gpus.size(), 2u);
  state.Outcome(node);
  EXPECT_EQ(state.placer_calls(), 1u);
}

}  // namespace
}  // namespace toposched::framework
