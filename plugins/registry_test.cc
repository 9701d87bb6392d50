#include "registry.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "device_fit/device_fit.h"
#include "fragmentation/fragmentation.h"
#include "gpu_nic_alignment/gpu_nic_alignment.h"
#include "kv_transfer_cost/kv_transfer_cost.h"
#include "numa_alignment/numa_alignment.h"
#include "nvlink_affinity/nvlink_affinity.h"
#include "pd_ratio/pd_ratio.h"
#include "rdma_affinity/rdma_affinity.h"
#include "shared_gpu/shared_gpu.h"
#include "testing/framework_testing.h"
#include "toposched/framework/framework.h"
#include "toposched/framework/ranking.h"

namespace toposched::plugins {
namespace {

using framework::Framework;
using toposched::testing::NodeBuilder;
using toposched::testing::RequestBuilder;

// Which extension points each plugin implements, checked at compile time.
static_assert(std::is_base_of_v<framework::ScorePlugin, gpu_nic_alignment::GpuNicAlignment>);
static_assert(std::is_base_of_v<framework::ScorePlugin, nvlink_affinity::NvlinkAffinity>);
static_assert(std::is_base_of_v<framework::ScorePlugin, numa_alignment::NumaAlignment>);
static_assert(std::is_base_of_v<framework::ScorePlugin, fragmentation::Fragmentation>);
static_assert(std::is_base_of_v<framework::ScorePlugin, shared_gpu::SharedGpu>);
static_assert(std::is_base_of_v<framework::ScorePlugin, rdma_affinity::RdmaAffinity>);
static_assert(std::is_base_of_v<framework::ScorePlugin, kv_transfer_cost::KvTransferCost>);
static_assert(std::is_base_of_v<framework::ScorePlugin, pd_ratio::PdRatio>);
static_assert(!std::is_base_of_v<framework::FilterPlugin, gpu_nic_alignment::GpuNicAlignment>);

TEST(BuiltinRegistryTest, TheOneList) {
  const framework::Registry r = BuiltinRegistry();
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"DeviceFit", "GpuNicAlignment", "NvlinkAffinity",
                                                 "NumaAlignment", "Fragmentation", "ExpectedFragmentation",
                                                 "SharedGpu", "RdmaAffinity", "KvTransferCost", "PdRatio"}));
  for (const std::string& name : r.Names()) {
    SCOPED_TRACE(name);
    Result<std::unique_ptr<framework::Plugin>> p = r.Create(name, {});
    ASSERT_TRUE(p.ok()) << p.error().message();
    EXPECT_EQ((*p)->Name(), name);
  }
}

TEST(BuiltinRegistryTest, RegisteringTwiceFails) {
  framework::Registry r = BuiltinRegistry();
  const Status s = RegisterBuiltinPlugins(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("DeviceFit is registered twice"), std::string::npos);
}

TEST(BuiltinRegistryTest, DefaultConfig) {
  const framework::SchedulerConfig c = DefaultSchedulerConfig();
  const std::vector<framework::PluginConfig> want = {
      {"DeviceFit", 1, {}},     {"GpuNicAlignment", 5, {}}, {"NvlinkAffinity", 3, {}},
      {"NumaAlignment", 2, {}}, {"Fragmentation", 2, {}},   {"ExpectedFragmentation", 15, {}},
      {"SharedGpu", 1, {}},     {"RdmaAffinity", 3, {}},    {"KvTransferCost", 20, {}},
      {"PdRatio", 2, {}}};
  EXPECT_EQ(c.plugins, want);
  Result<Framework> f = Framework::Create(c, BuiltinRegistry());
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_EQ(f->FilterPluginNames(), (std::vector<std::string_view>{"DeviceFit"}));
  EXPECT_EQ(f->ReservePluginNames(), (std::vector<std::string_view>{"DeviceFit"}));
  EXPECT_EQ(f->ScorePluginNames().size(), 9u);
}

// The example of docs/configuration.md loads, and means what the page says.
TEST(BuiltinRegistryTest, DocumentedExampleLoads) {
  std::ifstream in(std::string(TOPOSCHED_SOURCE_DIR) + "/docs/configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  // The first ```yaml block is the full example.
  const std::size_t begin = doc.find("```yaml\n");
  ASSERT_NE(begin, std::string::npos);
  const std::size_t end = doc.find("```", begin + 8);
  const std::string yaml = doc.substr(begin + 8, end - begin - 8);
  Result<framework::SchedulerConfig> c = framework::LoadSchedulerConfigYaml(yaml, BuiltinRegistry());
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_TRUE(Framework::Create(*c, BuiltinRegistry()).ok());
  // Every built-in plugin, and a network section.
  EXPECT_EQ(c->plugins.size(), BuiltinRegistry().Names().size());
  EXPECT_EQ(c->network.tiers.size(), 4u);
  EXPECT_EQ(c->network.Cost(pd::PathKind::kSpine).bandwidth_gbps, 25);
  EXPECT_EQ(c->capacity.plugin, "ExpectedFragmentation");
  EXPECT_EQ(c->capacity.band, 5);
}

// Every config under examples/config loads and builds a framework.
TEST(BuiltinRegistryTest, ExampleConfigsLoad) {
  int seen = 0;
  for (const auto& file :
       std::filesystem::directory_iterator(std::string(TOPOSCHED_SOURCE_DIR) + "/examples/config")) {
    if (file.path().extension() != ".yaml") continue;
    SCOPED_TRACE(file.path().string());
    std::ifstream in(file.path());
    std::stringstream text;
    text << in.rdbuf();
    Result<framework::SchedulerConfig> c = framework::LoadSchedulerConfigYaml(text.str(), BuiltinRegistry());
    ASSERT_TRUE(c.ok()) << c.error().message();
    EXPECT_TRUE(Framework::Create(*c, BuiltinRegistry()).ok());
    ++seen;
  }
  EXPECT_GE(seen, 2);
}

// A tier named in a plugin's args must be a configured network tier: the config does not load
// (serve and simulate stop with the message) instead of the plugin scoring every pod neutrally.
TEST(BuiltinRegistryTest, PluginTierArgsMustBeConfiguredTiers) {
  struct Case {
    std::string name;
    std::string yaml;
    std::string error;  // empty: loads
  };
  const std::vector<Case> cases = {
      {"default tiers",
       "plugins: [{name: DeviceFit}, {name: KvTransferCost, args: {anchorTier: toposched.io/spine}}]", ""},
      {"typo in anchorTier",
       "plugins: [{name: DeviceFit}, {name: KvTransferCost, args: {anchorTier: toposched.io/spin}}]",
       "plugins[1].args: anchorTier: tier toposched.io/spin is not a configured network tier "
       "(nvidia.com/gpu.clique, toposched.io/leaf, toposched.io/spine, topology.kubernetes.io/zone)"},
      {"spreadTier node", "plugins: [{name: DeviceFit}, {name: KvTransferCost, args: {spreadTier: node}}]",
       ""},
      {"spreadTier not configured",
       "plugins: [{name: DeviceFit}, {name: KvTransferCost, args: {spreadTier: rack}}]\n"
       "network: {tiers: [{label: rack-label, path: leaf}]}",
       "plugins[1].args: spreadTier: tier rack is not a configured network tier (rack-label) (or \"node\")"},
      {"ratioTier from the config's own tiers",
       "plugins: [{name: DeviceFit}, {name: PdRatio, args: {ratioTier: rack-label}}]\n"
       "network: {tiers: [{label: rack-label, path: leaf}]}",
       ""},
      {"ratioTier not configured", "plugins: [{name: DeviceFit}, {name: PdRatio, args: {ratioTier: rack}}]",
       "plugins[1].args: ratioTier: tier rack is not a configured network tier"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<framework::SchedulerConfig> config = framework::LoadSchedulerConfigYaml(c.yaml, BuiltinRegistry());
    if (c.error.empty()) {
      ASSERT_TRUE(config.ok()) << config.error().message();
      EXPECT_TRUE(Framework::Create(*config, BuiltinRegistry()).ok());
    } else {
      ASSERT_FALSE(config.ok());
      EXPECT_NE(config.error().message().find(c.error), std::string::npos) << config.error().message();
    }
  }
  // A config built in code is checked when the framework is built.
  framework::SchedulerConfig config = DefaultSchedulerConfig();
  for (framework::PluginConfig& p : config.plugins) {
    if (p.name == pd_ratio::kName) p.args = {{"ratioTier", "rack"}};
  }
  Result<Framework> f = Framework::Create(config, BuiltinRegistry());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message().find(".args: ratioTier: tier rack is not a configured network tier"),
            std::string::npos)
      << f.error().message();
}

TEST(BuiltinRegistryTest, BriefExampleLoads) {
  const char* yaml = R"(
plugins: [{name: DeviceFit}, {name: GpuNicAlignment, weight: 5}, {name: Fragmentation}]
engine: {defaultGpuPolicy: spread, maxSharesPerGpu: 10}
request: {rdmaResources: ["rdma/"], poolLabel: toposched.io/pool}
)";
  Result<framework::SchedulerConfig> c = framework::LoadSchedulerConfigYaml(yaml, BuiltinRegistry());
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->plugins[2].weight, fragmentation::kDefaultWeight);
}

// End to end with the engine: the default framework on a small heterogeneous cluster.
TEST(BuiltinFrameworkTest, PrefersTheAlignedNodeAndReservesIt) {
  Result<Framework> f = Framework::Create(DefaultSchedulerConfig(), BuiltinRegistry());
  ASSERT_TRUE(f.ok()) << f.error().message();
  std::vector<framework::NodeInfo> nodes = {
      NodeBuilder("hgx", "hgx-h100-8gpu").Build(), NodeBuilder("vm", "cloud-vm-8gpu").Build(),
      NodeBuilder("inference", "inference-4gpu").Build(),  // no RDMA NICs
  };
  framework::CycleState state = f->NewCycle(RequestBuilder().Gpus(2).Nics(2).Build());
  std::vector<int> totals;
  for (const framework::NodeInfo& n : nodes) {
    const framework::FilterResult fr = f->RunFilter(state, n);
    if (!fr.ok()) {
      totals.push_back(-1);
      continue;
    }
    const framework::NodeScore s = f->RunScore(state, n);
    EXPECT_EQ(s.parts.size(), 9u);  // the weight-0 part too: the cycle explains
    totals.push_back(s.total);
  }
  EXPECT_EQ(state.placer_calls(), 3u) << "one engine run per node across filter and eight scores";
  EXPECT_EQ(totals[2], -1) << "no RDMA NICs: filtered out";
  EXPECT_GT(totals[0], totals[1]) << "PIX beats NODE";
  // hgx: GpuNicAlignment 100 x5, NvlinkAffinity 100 x3, NumaAlignment 100 x2, Fragmentation 75 x2,
  // ExpectedFragmentation 50 x15 (no typical shapes: the pod's own, and a 2-GPU pod strands
  // nothing for another 2-GPU pod on the 8-GPU node), SharedGpu 100 x1, RdmaAffinity 100 x3 (the
  // pod asks NICs: neutral); KvTransferCost and PdRatio do not apply (no pool), not counted:
  // (500 + 300 + 200 + 150 + 750 + 100 + 300) / 31 = 2300 / 31 = 74.19 -> 74.
  EXPECT_EQ(totals[0], 74);
  framework::CapacityBand band(f->CapacityBandWidth());
  for (const int t : {totals[0], totals[1]}) band.Offer(framework::NodeScore{.total = t});
  EXPECT_EQ(band.ExtenderScore(framework::NodeScore{.total = totals[0]}), 10) << "the best node of the call";

  const framework::FilterResult unresolvable = f->RunFilter(state, nodes[2]);
  EXPECT_EQ(unresolvable.code(), framework::Code::kUnschedulableAndUnresolvable);
  EXPECT_EQ(unresolvable.plugin(), "DeviceFit");

  ASSERT_TRUE(f->RunReserve(state, nodes[0]).ok());
  EXPECT_TRUE(nodes[0].allocated.gpu_exclusive[0]);
  EXPECT_TRUE(nodes[0].allocated.gpu_exclusive[1]);
}

// Packing by the mix: when ExpectedFragmentation is counted and the workload's typical pods ask no
// RDMA NIC, Fragmentation, RdmaAffinity and SharedGpu stand down (not counted) for a pod that asks
// none either; a typical pod asking NICs, a pod asking NICs, ExpectedFragmentation at weight 0 or
// no mix keep them counted.
TEST(BuiltinFrameworkTest, BlindPackingHeuristicsStandDownWhenTheMixAsksNoNics) {
  const framework::NodeInfo node = NodeBuilder("hgx", "hgx-h100-8gpu").Build();
  const PlacementRequest shared = RequestBuilder().Shared(1, 8000, 30).Build();
  const PlacementRequest whole = RequestBuilder().Gpus(1).Build();
  const PlacementRequest with_nics = RequestBuilder().Gpus(2).Nics(2).Build();
  auto mix_of = [](std::vector<PlacementRequest> pods) {
    auto mix = std::make_shared<packing::ShapeMix>();
    for (const PlacementRequest& r : pods) mix->shapes.push_back({packing::ShapeOf(r), 1.0 / pods.size()});
    return std::shared_ptr<const packing::ShapeMix>(std::move(mix));
  };
  auto counted = [&](const Framework& f, const PlacementRequest& r,
                     std::shared_ptr<const packing::ShapeMix> mix) {
    framework::CycleState state = f.NewCycle(r);
    state.SetShapeMix(std::move(mix));
    EXPECT_TRUE(f.RunFilter(state, node).ok());
    std::map<std::string, bool> out;
    for (const framework::ScorePart& p : f.RunScore(state, node).parts) out[p.plugin] = p.counted;
    return out;
  };
  Result<Framework> f = Framework::Create(DefaultSchedulerConfig(), BuiltinRegistry());
  ASSERT_TRUE(f.ok()) << f.error().message();
  const auto no_nic_mix = mix_of({shared, whole});
  for (const PlacementRequest& pod : {shared, whole}) {
    const auto c = counted(*f, pod, no_nic_mix);
    EXPECT_FALSE(c.at("RdmaAffinity"));
    EXPECT_FALSE(c.at("Fragmentation"));
    EXPECT_FALSE(c.at("SharedGpu"))
        << "also for a whole-GPU pod: a neutral part would only compress the others";
    EXPECT_TRUE(c.at("ExpectedFragmentation"));
    EXPECT_TRUE(c.at("GpuNicAlignment"));
  }
  for (const auto& c : {counted(*f, shared, mix_of({shared, with_nics})), counted(*f, shared, nullptr),
                        counted(*f, with_nics, no_nic_mix)}) {
    EXPECT_TRUE(c.at("RdmaAffinity"));
    EXPECT_TRUE(c.at("Fragmentation"));
    EXPECT_TRUE(c.at("SharedGpu"));
  }
  framework::SchedulerConfig off = DefaultSchedulerConfig();
  for (framework::PluginConfig& p : off.plugins) {
    if (p.name == "ExpectedFragmentation") p.weight = 0;
  }
  Result<Framework> without = Framework::Create(off, BuiltinRegistry());
  ASSERT_TRUE(without.ok()) << without.error().message();
  const auto c = counted(*without, shared, no_nic_mix);
  EXPECT_TRUE(c.at("RdmaAffinity")) << "nothing packs by the mix: the heuristics stay";
  EXPECT_TRUE(c.at("Fragmentation"));
  EXPECT_TRUE(c.at("SharedGpu"));
}

}  // namespace
}  // namespace toposched::plugins
