#include "toposched/framework/config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/fake_plugins.h"

namespace toposched::framework {
namespace {

using toposched::testing::FakeFactory;
using toposched::testing::FakeFilter;
using toposched::testing::FakeScore;

// Fit (filter), Align (score, default weight 5), Numa (score, default weight 2), and Tunable,
// which accepts one arg, mode = fast | slow.
Registry TestRegistry() {
  Registry r;
  EXPECT_TRUE(r.Register("Fit", FakeFactory<FakeFilter>(std::string("Fit"), PluginStatus::Success())).ok());
  EXPECT_TRUE(r.Register("Align", FakeFactory<FakeScore>(std::string("Align"), 100), 5).ok());
  EXPECT_TRUE(r.Register("Numa", FakeFactory<FakeScore>(std::string("Numa"), 50), 2).ok());
  EXPECT_TRUE(r.Register("Tunable", [](const PluginArgs& args) -> Result<std::unique_ptr<Plugin>> {
                 for (const auto& [k, v] : args) {
                   if (k != "mode") return Error("unknown arg \"" + k + "\" (known: mode)");
                   if (v != "fast" && v != "slow") return Error("mode: \"" + v + "\" is not fast or slow");
                 }
                 return std::unique_ptr<Plugin>(std::make_unique<FakeScore>("Tunable", 10));
               }).ok());
  return r;
}

TEST(ConfigTest, EmptyDocumentIsTheDefault) {
  const Registry registry = TestRegistry();
  for (const char* yaml : {"", "# nothing but a comment\n", "---\n"}) {
    SCOPED_TRACE(yaml);
    Result<SchedulerConfig> c = LoadSchedulerConfigYaml(yaml, registry);
    ASSERT_TRUE(c.ok()) << c.error().message();
    // Every plugin in registration order with its registered default weight.
    const std::vector<PluginConfig> want = {
        {"Fit", 1, {}}, {"Align", 5, {}}, {"Numa", 2, {}}, {"Tunable", 1, {}}};
    EXPECT_EQ(c->plugins, want);
    EXPECT_EQ(c->engine.default_gpu_policy, PackPolicy::kSpread);
    EXPECT_EQ(c->engine.max_shares_per_gpu, 10);
    EXPECT_EQ(c->request.rdma_resources, std::vector<std::string>{"rdma/"});
    EXPECT_EQ(c->request.pool_label, "toposched.io/pool");
  }
}

TEST(ConfigTest, FullConfig) {
  const char* yaml = R"(
plugins:
  - name: Fit
  - {name: Numa, weight: 0}
  - name: Tunable
    weight: 7
    args: {mode: slow}
engine: {defaultGpuPolicy: binpack, maxSharesPerGpu: 4}
request:
  rdmaResources: ["rdma/", "nvidia.com/hostdev"]
  poolLabel: example.com/pool
)";
  Result<SchedulerConfig> c = LoadSchedulerConfigYaml(yaml, TestRegistry());
  ASSERT_TRUE(c.ok()) << c.error().message();
  // The list replaces the defaults: Align is off; Numa keeps weight 0; config order is kept.
  const std::vector<PluginConfig> want = {
      {"Fit", 1, {}}, {"Numa", 0, {}}, {"Tunable", 7, {{"mode", "slow"}}}};
  EXPECT_EQ(c->plugins, want);
  EXPECT_EQ(c->engine.default_gpu_policy, PackPolicy::kBinpack);
  EXPECT_EQ(c->engine.max_shares_per_gpu, 4);
  EXPECT_EQ(c->request.rdma_resources, (std::vector<std::string>{"rdma/", "nvidia.com/hostdev"}));
  EXPECT_EQ(c->request.pool_label, "example.com/pool");
}

TEST(ConfigTest, OmittedWeightIsThePluginDefault) {
  Result<SchedulerConfig> c =
      LoadSchedulerConfigYaml("plugins: [{name: Align}, {name: Fit}]", TestRegistry());
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->plugins[0].weight, 5);
  EXPECT_EQ(c->plugins[1].weight, 1);
}

TEST(ConfigTest, RejectsBadConfigWithThePath) {
  struct Case {
    std::string name;
    std::string yaml;
    std::string error;  // a substring of the message
  };
  const std::vector<Case> cases = {
      {"unknown top-level key", "plugin: []",
       "plugin (line 1): unknown key (known: plugins, engine, request, network, capacity)"},
      {"duplicate top-level key", "engine: {}\nengine: {}", "engine (line 2): duplicate key"},
      {"document is a list", "- name: Fit", "document (line 1): expected a map"},
      {"document is a scalar", "hello", "expected a map"},
      {"malformed yaml", "plugins: [{name: Fit}", "malformed YAML"},
      {"bad indentation", "engine:\n  maxSharesPerGpu: 1\n bad: 2", "malformed YAML"},
      {"plugins not a list", "plugins: {name: Fit}", "plugins (line 1): expected a list"},
      {"plugins empty", "plugins: []", "an empty list enables nothing"},
      {"plugins null", "plugins:", "plugins (line 1): expected a list"},
      {"entry is a scalar", "plugins: [Fit]",
       "plugins[0] (line 1): expected a map with keys name, weight, args"},
      {"unknown key in entry", "plugins:\n- name: Fit\n- {name: Align, wieght: 3}",
       "plugins[1].wieght (line 3): unknown key (known: name, weight, args)"},
      {"missing name", "plugins: [{weight: 3}]", "plugins[0] (line 1): missing key \"name\""},
      {"empty name", "plugins: [{name: ''}]", "plugins[0].name (line 1): must not be empty"},
      {"unknown plugin", "plugins: [{name: Fit}, {name: Nope}]",
       "plugins[1].name (line 1): unknown plugin \"Nope\" (known: Fit, Align, Numa, Tunable)"},
      {"plugin names are case-sensitive", "plugins: [{name: fit}]", "unknown plugin \"fit\""},
      {"duplicate plugin", "plugins:\n- name: Fit\n- name: Align\n- name: Fit",
       "plugins[2].name (line 4): Fit is listed twice (first at plugins[0])"},
      {"weight too large", "plugins: [{name: Align, weight: 101}]",
       "plugins[0].weight (line 1): 101 is out of range 0..100"},
      {"weight negative", "plugins: [{name: Align, weight: -1}]", "-1 is out of range 0..100"},
      {"weight not a number", "plugins: [{name: Align, weight: high}]",
       "plugins[0].weight (line 1): expected an integer in 0..100, got \"high\""},
      {"weight fractional", "plugins: [{name: Align, weight: 1.5}]", "got \"1.5\""},
      {"weight a list", "plugins: [{name: Align, weight: [1]}]", "expected an integer in 0..100"},
      {"args unknown to the plugin", "plugins: [{name: Tunable, args: {speed: fast}}]",
       "plugins[0].args: Tunable: unknown arg \"speed\" (known: mode)"},
      {"args bad value", "plugins: [{name: Tunable, args: {mode: warp}}]",
       "mode: \"warp\" is not fast or slow"},
      {"args on a plugin without args", "plugins: [{name: Align, args: {x: y}}]",
       "plugins[0].args: Align: unknown arg"},
      {"args not a map", "plugins: [{name: Tunable, args: [mode]}]",
       "plugins[0].args (line 1): expected a map"},
      {"args nested value", "plugins: [{name: Tunable, args: {mode: {a: b}}}]",
       "plugins[0].args.mode (line 1): expected a string value"},
      {"unknown engine key", "engine: {defaultGpuPolcy: spread}",
       "engine.defaultGpuPolcy (line 1): unknown key (known: defaultGpuPolicy, maxSharesPerGpu)"},
      {"engine not a map", "engine: spread", "engine (line 1): expected a map"},
      {"bad gpu policy", "engine: {defaultGpuPolicy: pack}",
       "engine.defaultGpuPolicy (line 1): \"pack\" is not a policy"},
      {"default is no policy", "engine: {defaultGpuPolicy: default}", "is not a policy (binpack, spread)"},
      {"shares zero", "engine: {maxSharesPerGpu: 0}",
       "engine.maxSharesPerGpu (line 1): 0 is out of range 1..100"},
      {"shares too many", "engine: {maxSharesPerGpu: 101}", "101 is out of range 1..100"},
      {"unknown request key", "request: {poolLabels: x}", "request.poolLabels (line 1): unknown key"},
      {"rdma resources not a list", "request: {rdmaResources: rdma/}",
       "request.rdmaResources (line 1): expected a list"},
      {"rdma resource without a domain", "request: {rdmaResources: [rdma/, hca]}",
       "request.rdmaResources[1] (line 1): \"hca\" is not an extended resource name"},
      {"empty pool label", "request: {poolLabel: ''}", "request.poolLabel (line 1): must not be empty"},
      {"pool label with space", "request: {poolLabel: 'my pool'}", "a label key has no whitespace"},
  };
  const Registry registry = TestRegistry();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<SchedulerConfig> config = LoadSchedulerConfigYaml(c.yaml, registry);
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.error().message().find(c.error), std::string::npos) << config.error().message();
  }
}

TEST(ConfigTest, CapacitySection) {
  const Registry registry = TestRegistry();
  Result<SchedulerConfig> c = LoadSchedulerConfigYaml("engine: {}", registry);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->capacity, CapacityConfig{}) << "absent: off";
  EXPECT_TRUE(c->capacity.plugin.empty());
  c = LoadSchedulerConfigYaml("capacity: {plugin: Numa, band: 12}", registry);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->capacity.plugin, "Numa");
  EXPECT_EQ(c->capacity.band, 12);
  c = LoadSchedulerConfigYaml("capacity: {plugin: none}", registry);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_TRUE(c->capacity.plugin.empty());
  EXPECT_TRUE(c->capacity.rare_class_last) << "a rare node class last is on by default";
  c = LoadSchedulerConfigYaml("capacity: {rareClassLast: false}", registry);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_FALSE(c->capacity.rare_class_last);
  EXPECT_TRUE(c->capacity.plugin.empty()) << "independent of capacity first";
  EXPECT_EQ(c->capacity.min_typical_pods, 50) << "a fortieth of the extender's window by default";
  EXPECT_TRUE(c->capacity.even_remnants) << "evening out the remnants is on by default";
  c = LoadSchedulerConfigYaml("capacity: {evenRemnants: false}", registry);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_FALSE(c->capacity.even_remnants);
  c = LoadSchedulerConfigYaml("capacity: {minTypicalPods: 20}", registry);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->capacity.min_typical_pods, 20);
  struct Case {
    const char* yaml;
    const char* error;
  };
  for (const Case& bad :
       {Case{"capacity: {plugin: Gone}", "capacity.plugin"},
        Case{"capacity: {plugin: Fit}", "Fit has no Score"}, Case{"capacity: {band: 101}", "capacity.band"},
        Case{"capacity: {band: -1}", "capacity.band"}, Case{"capacity: {width: 3}", "unknown key"},
        Case{"capacity: {rareClassLast: sometimes}", "capacity.rareClassLast"},
        Case{"capacity: {evenRemnants: 2}", "capacity.evenRemnants"},
        Case{"capacity: {minTypicalPods: 0}", "capacity.minTypicalPods"},
        Case{"capacity: {minTypicalPods: 2001}", "capacity.minTypicalPods"},
        Case{"capacity: {minTypicalPods: many}", "capacity.minTypicalPods"}}) {
    SCOPED_TRACE(bad.yaml);
    c = LoadSchedulerConfigYaml(bad.yaml, registry);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().message().find(bad.error), std::string::npos) << c.error().message();
  }
}

TEST(ConfigTest, RejectsOversizedInput) {
  const std::string yaml = "# " + std::string(kMaxConfigYamlBytes, 'x');
  Result<SchedulerConfig> c = LoadSchedulerConfigYaml(yaml, TestRegistry());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("over the limit"), std::string::npos);
}

TEST(ConfigTest, DefaultSchedulerConfigFollowsTheRegistry) {
  const SchedulerConfig c = DefaultSchedulerConfig(TestRegistry());
  ASSERT_EQ(c.plugins.size(), 4u);
  EXPECT_EQ(c.plugins[1], (PluginConfig{"Align", 5, {}}));
  EXPECT_EQ(c.plugins[2], (PluginConfig{"Numa", 2, {}}));
}

TEST(RegistryTest, RejectsDuplicatesAndBadEntries) {
  Registry r = TestRegistry();
  const Status dup = r.Register("Fit", FakeFactory<FakeFilter>(std::string("Fit"), PluginStatus::Success()));
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().message().find("Fit is registered twice"), std::string::npos);
  EXPECT_FALSE(r.Register("", FakeFactory<FakeScore>(std::string("x"), 1)).ok());
  EXPECT_FALSE(r.Register("NoFactory", nullptr).ok());
  EXPECT_FALSE(r.Register("Heavy", FakeFactory<FakeScore>(std::string("Heavy"), 1), 101).ok());
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"Fit", "Align", "Numa", "Tunable"}))
      << "failed registrations add nothing";
}

TEST(RegistryTest, CreateChecksTheName) {
  Registry r;
  ASSERT_TRUE(r.Register("Right", FakeFactory<FakeScore>(std::string("Wrong"), 1)).ok());
  Result<std::unique_ptr<Plugin>> p = r.Create("Right", {});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message().find("factory built a plugin named \"Wrong\""), std::string::npos);
  Result<std::unique_ptr<Plugin>> missing = r.Create("Absent", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("unknown plugin \"Absent\" (known: Right)"), std::string::npos);
}

// ------------------------------------------------------------------------------------------
// network: (schema in toposched/pd/network.h)

TEST(ConfigTest, NetworkDefaultsWhenAbsent) {
  Result<SchedulerConfig> c = LoadSchedulerConfigYaml("engine: {}", TestRegistry());
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->network, pd::NetworkConfig{});
  Result<SchedulerConfig> empty = LoadSchedulerConfigYaml("network: {}", TestRegistry());
  ASSERT_TRUE(empty.ok()) << empty.error().message();
  EXPECT_EQ(empty->network, pd::NetworkConfig{});
}

TEST(ConfigTest, NetworkFullSection) {
  const char* yaml = R"(
network:
  tiers:
    - {label: example.com/rack, path: leaf}
    - {label: example.com/pod, path: spine}
  hyperNodes: true
  sameNodeIpc: true
  paths:
    leaf: {bandwidthGBps: 40}
    beyond: {bandwidthGBps: 2.5, latencyUs: 2000}
    same-node-ipc: {latencyUs: 0}
  alignment: {PHB: 0.5, SYS: 0.25}
  transferOverheadUs: 150
)";
  Result<SchedulerConfig> c = LoadSchedulerConfigYaml(yaml, TestRegistry());
  ASSERT_TRUE(c.ok()) << c.error().message();
  pd::NetworkConfig want;
  want.tiers = {{"example.com/rack", pd::PathKind::kLeaf}, {"example.com/pod", pd::PathKind::kSpine}};
  want.hyper_nodes = true;
  want.same_node_ipc = true;
  // Each key overrides one field: leaf keeps its 5 us, same-node-ipc its 150 GB/s.
  want.paths[static_cast<std::size_t>(pd::PathKind::kLeaf)] = {40, 5};
  want.paths[static_cast<std::size_t>(pd::PathKind::kBeyond)] = {2.5, 2000};
  want.paths[static_cast<std::size_t>(pd::PathKind::kSameNodeIpc)] = {150, 0};
  want.alignment.phb = 0.5;
  want.alignment.sys = 0.25;
  want.transfer_overhead_us = 150;
  EXPECT_EQ(c->network, want);
}

TEST(ConfigTest, NetworkEmptyTierListIsAllowed) {
  // No tiers: every pair of distinct nodes is "beyond".
  Result<SchedulerConfig> c = LoadSchedulerConfigYaml("network: {tiers: []}", TestRegistry());
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_TRUE(c->network.tiers.empty());
}

TEST(ConfigTest, NetworkRejectsBadValuesWithThePath) {
  struct Case {
    std::string name;
    std::string yaml;
    std::string error;  // a substring of the message
  };
  const std::vector<Case> cases = {
      {"unknown network key", "network: {tier: []}",
       "network.tier (line 1): unknown key (known: tiers, hyperNodes, sameNodeIpc, paths, alignment, "
       "transferOverheadUs)"},
      {"network not a map", "network: leaf", "network (line 1): expected a map"},
      {"tiers not a list", "network: {tiers: {label: x, path: leaf}}",
       "network.tiers (line 1): expected a list of {label, path}"},
      {"tier missing path", "network: {tiers: [{label: x}]}",
       "network.tiers[0] (line 1): missing key \"path\""},
      {"tier missing label", "network: {tiers: [{path: leaf}]}",
       "network.tiers[0] (line 1): missing key \"label\""},
      {"tier unknown key", "network: {tiers: [{label: x, path: leaf, cost: 1}]}",
       "network.tiers[0].cost (line 1): unknown key (known: label, path)"},
      {"tier unknown path", "network: {tiers: [{label: x, path: rack}]}",
       "network.tiers[0].path (line 1): \"rack\" is not a tier path (nvlink-domain, leaf, spine, zone)"},
      {"tier same-node path", "network: {tiers: [{label: x, path: same-node-ipc}]}",
       "network.tiers[0].path: same-node-ipc is not a tier path"},
      {"tier label twice", "network: {tiers: [{label: x, path: leaf}, {label: x, path: spine}]}",
       "network.tiers[1].label: \"x\" is listed twice (first at network.tiers[0])"},
      {"tier empty label", "network: {tiers: [{label: '', path: leaf}]}",
       "network.tiers[0].label (line 1): must not be empty"},
      {"hyperNodes not a bool", "network: {hyperNodes: maybe}",
       "network.hyperNodes (line 1): expected true or false"},
      {"sameNodeIpc a list", "network: {sameNodeIpc: [true]}",
       "network.sameNodeIpc (line 1): expected true or false"},
      {"unknown path kind", "network: {paths: {rack: {bandwidthGBps: 1}}}",
       "network.paths.rack (line 1): unknown key (known: same-node-ipc, same-node-rdma, nvlink-domain, leaf, "
       "spine, zone, beyond)"},
      {"unknown cost key", "network: {paths: {leaf: {bandwidth: 1}}}",
       "network.paths.leaf.bandwidth (line 1): unknown key (known: bandwidthGBps, latencyUs)"},
      {"bandwidth negative", "network: {paths: {leaf: {bandwidthGBps: -1}}}",
       "network.paths.leaf.bandwidthGBps: -1 must be > 0"},
      {"bandwidth not a number", "network: {paths: {spine: {bandwidthGBps: fast}}}",
       "network.paths.spine.bandwidthGBps (line 1): expected a number, got \"fast\""},
      {"bandwidth infinite", "network: {paths: {spine: {bandwidthGBps: inf}}}",
       "expected a number, got \"inf\""},
      {"latency negative", "network: {paths: {zone: {latencyUs: -2}}}",
       "network.paths.zone.latencyUs: -2 must be >= 0"},
      {"alignment unknown class", "network: {alignment: {NV: 1}}",
       "network.alignment.NV (line 1): unknown key (known: PIX, PXB, PHB, NODE, SYS)"},
      {"alignment above one", "network: {alignment: {SYS: 1.2}}",
       "network.alignment.SYS: 1.2 must be in (0, 1]"},
      {"alignment zero", "network: {alignment: {NODE: 0}}", "network.alignment.NODE: 0 must be in (0, 1]"},
      {"overhead negative", "network: {transferOverheadUs: -1}",
       "network.transferOverheadUs: -1 must be >= 0"},
      {"overhead a map", "network: {transferOverheadUs: {us: 1}}",
       "network.transferOverheadUs (line 1): expected a number"},
  };
  const Registry registry = TestRegistry();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<SchedulerConfig> config = LoadSchedulerConfigYaml(c.yaml, registry);
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.error().message().find(c.error), std::string::npos) << config.error().message();
  }
}

}  // namespace
}  // namespace toposched::framework
