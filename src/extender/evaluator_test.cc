// The evaluator's caching rule without HTTP: one verdict per node class and pod, kept across
// calls for the same pod; a new resourceVersion starts afresh; a pod naming GPU UUIDs is decided
// node by node; a pool pod's scores follow the pool from one call to the next.

#include "evaluator.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "adapters.h"
#include "explain.h"
#include "node_verdicts.h"
#include "plugins/registry.h"
#include "rare_class_rule.h"
#include "testing/k8s_payloads.h"
#include "toposched/framework/allocation.h"
#include "toposched/metrics/logging.h"
#include "toposched/topology/synthetic.h"

namespace toposched::extender {
namespace {

using testing::MakePod;
using testing::PodSpec;

std::shared_ptr<const NodeTopology> Preset(const std::string& name) {
  Result<NodeTopology> t = GenerateSynthetic(SyntheticPreset(name).value());
  EXPECT_TRUE(t.ok()) << name;
  return std::make_shared<const NodeTopology>(std::move(t).value());
}

class EvaluatorTest : public ::testing::Test {
 protected:
  EvaluatorTest()
      : registry_(plugins::BuiltinRegistry()),
        framework_(framework::Framework::Create(plugins::DefaultSchedulerConfig(), registry_).value()),
        store_(nullptr, StoreOptionsFor(framework_.config())),
        evaluator_(framework_, store_, metrics_, ExtenderOptions{}, nullptr, nullptr) {
    metrics::ConfigureLogging(metrics::LogFormat::kText, metrics::LogLevel::kError);
  }

  void AddNode(const std::string& name, std::shared_ptr<const NodeTopology> topology,
               std::map<std::string, std::string> labels = {}) {
    ASSERT_TRUE(store_.UpsertNode({name, std::move(topology), std::move(labels), true}).ok());
  }

  // The pod's entry as a verb's decoder hands it over (the Pod's JSON inside the request).
  std::shared_ptr<PodEntry> Entry(const PodSpec& spec) {
    raw_.push_back(MakePod(spec).dump());
    PodRef ref;
    ref.uid = spec.uid;
    ref.name = spec.name;
    ref.pod_namespace = spec.ns;
    ref.resource_version = spec.resource_version;
    ref.raw = raw_.back();
    Result<std::shared_ptr<PodEntry>> entry = evaluator_.EntryFor(ref);
    EXPECT_TRUE(entry.ok()) << entry.error().message();
    return entry.ok() ? *entry : nullptr;
  }

  // Every node's verdict in one call, by name.
  std::map<std::string, const ClassVerdict*> Verdicts(PodEntry& entry, Want want,
                                                      std::size_t* evaluated = nullptr) {
    NodeVerdicts verdicts(evaluator_, entry, store_.snapshot(), want);
    std::map<std::string, const ClassVerdict*> out;
    for (const auto& record : verdicts.snapshot().nodes()) {
      out[record->name] = verdicts.At(verdicts.snapshot().IndexOf(record->name));
    }
    if (evaluated != nullptr) *evaluated = verdicts.evaluated();
    return out;
  }

  // Records `spec` on `node` as bound, as the binder would (decided by the framework).
  void Bind(const PodSpec& spec, const std::string& node) {
    std::shared_ptr<PodEntry> entry = Entry(spec);
    ASSERT_NE(entry, nullptr);
    Result<state::BindResult> bound =
        store_.Bind(node, entry->uid, [&](const state::NodeRecord& record) -> Result<state::PodAllocation> {
          framework::CycleState cycle = framework_.NewCycle(entry->request);
          const framework::NodeInfo info = NodeInfoOf(record);
          if (!framework_.RunFilter(cycle, info).ok()) return Error("unfit");
          state::PodAllocation a;
          a.uid = entry->uid;
          a.pod_namespace = entry->pod_namespace;
          a.pod_name = entry->pod_name;
          a.node = record.name;
          a.topology_generation = record.topology_generation;
          a.role = entry->request.role;
          a.pool = entry->request.pool;
          const Placement placement = *cycle.Outcome(info).placement;
          a.delta = framework::DeltaOf(*record.topology, entry->request, placement);
          a.worst_class = placement.worst_class;
          return a;
        });
    ASSERT_TRUE(bound.ok()) << bound.error().message();
  }

  framework::Registry registry_;
  framework::Framework framework_;
  state::ClusterStore store_;
  metrics::Registry metrics_;
  Evaluator evaluator_;
  std::vector<std::string> raw_;  // the request bodies the entries' views were read from
};

const PodSpec kTwoGpus{.name = "two", .uid = "uid-two", .gpus = 2, .rdma = 2};

// A pod of Prefill/Decode pool "chat" (2 GPUs + 2 RDMA NICs), UID "uid-" + name.
PodSpec PoolPod(const std::string& name, const char* role) {
  return PodSpec{.name = name,
                 .uid = "uid-" + name,
                 .gpus = 2,
                 .rdma = 2,
                 .labels = {{"llm-d.ai/role", role}, {"toposched.io/pool", "chat"}}};
}

// The rule without HTTP, on one thread: which nodes it keeps for the rare shape, and the pool's
// nodes as of each version of the pool (the set is kept per thread while the version holds).
TEST_F(EvaluatorTest, ARareNodeClassIsKeptExceptWhereThePodsPoolRunsAsOfItsVersion) {
  SyntheticSpec four_nics = SyntheticPreset("hgx-h100-8gpu").value();
  four_nics.nics_per_switch = 1;
  AddNode("rare", Preset("hgx-h100-8gpu"));
  AddNode("common", std::make_shared<const NodeTopology>(GenerateSynthetic(four_nics).value()));
  const PodSpec training{.name = "train", .uid = "uid-train", .gpus = 8, .rdma = 8};
  ASSERT_NE(Entry(training), nullptr);  // seen: the window's mix holds the 8-GPU, 8-NIC shape
  std::shared_ptr<PodEntry> decode = Entry(PoolPod("decode-0", "decode"));
  ASSERT_NE(decode, nullptr);
  const auto hardware = [&](const std::string& node) { return store_.snapshot()->Find(node)->hardware; };
  auto rule = [&] {
    return RareClassFor(framework_, decode->request, evaluator_.ShapeMixFor(decode->uid).get(),
                        *store_.snapshot(), &store_);
  };
  {
    const framework::RareClass r = rule();
    ASSERT_TRUE(r.active());
    EXPECT_EQ(r.rare()->gpus, 8);
    EXPECT_EQ(r.rare()->nics, 8);
    EXPECT_TRUE(r.Reserved(hardware("rare"), "rare"));
    EXPECT_FALSE(r.Reserved(hardware("common"), "common"));
  }
  Bind(PoolPod("prefill-0", "prefill"), "common");
  EXPECT_TRUE(rule().Reserved(hardware("rare"), "rare")) << "the pool runs on common only";
  Bind(PoolPod("prefill-1", "prefill"), "rare");
  EXPECT_FALSE(rule().Reserved(hardware("rare"), "rare")) << "the pool's new version runs on rare too";
  // The training pod and a pod without NICs are kept from nothing.
  std::shared_ptr<PodEntry> whole = Entry(training);
  EXPECT_FALSE(
      RareClassFor(framework_, whole->request, whole->mix.get(), *store_.snapshot(), &store_).active());
  const PodSpec gpus_only{.name = "g", .uid = "uid-g", .gpus = 1};
  std::shared_ptr<PodEntry> plain = Entry(gpus_only);
  EXPECT_FALSE(
      RareClassFor(framework_, plain->request, plain->mix.get(), *store_.snapshot(), &store_).active());
}

TEST_F(EvaluatorTest, NodesOfOneClassShareOneVerdictKeptAcrossCallsForThePod) {
  const auto hgx = Preset("hgx-h100-8gpu");
  AddNode("a", hgx);
  AddNode("b", hgx);
  AddNode("c", hgx);
  AddNode("pcie", Preset("pcie-4gpu"));
  std::shared_ptr<PodEntry> entry = Entry(kTwoGpus);
  std::size_t evaluated = 0;
  const auto first = Verdicts(*entry, Want::kScores, &evaluated);
  EXPECT_EQ(evaluated, 2u);
  EXPECT_EQ(entry->verdict_count(), 2u);
  EXPECT_EQ(first.at("a"), first.at("b"));
  EXPECT_EQ(first.at("a"), first.at("c"));
  EXPECT_NE(first.at("a"), first.at("pcie"));
  EXPECT_TRUE(first.at("a")->passes());

  // The same pod (same UID and resourceVersion) in the next call: the cached verdicts.
  std::shared_ptr<PodEntry> again = Entry(kTwoGpus);
  EXPECT_EQ(again, entry);
  const auto second = Verdicts(*again, Want::kFilter);
  EXPECT_EQ(second.at("a"), first.at("a"));
  EXPECT_EQ(second.at("pcie"), first.at("pcie"));
  EXPECT_EQ(entry->verdict_count(), 2u);
}

// Pods that ask the same (a Deployment's, one after another) share their verdicts: the second
// pod's call evaluates no class the first one did. A pod that asks otherwise has its own, and so
// has a pod of the same request once the window's typical pods changed (the packing scores read
// them).
TEST_F(EvaluatorTest, PodsThatAskTheSameShareTheirVerdicts) {
  const auto hgx = Preset("hgx-h100-8gpu");
  AddNode("a", hgx);
  AddNode("pcie", Preset("pcie-4gpu"));
  std::shared_ptr<PodEntry> first = Entry(kTwoGpus);
  const auto mine = Verdicts(*first, Want::kScores);

  PodSpec twin = kTwoGpus;
  twin.name = "twin";
  twin.uid = "uid-twin";
  std::shared_ptr<PodEntry> second = Entry(twin);
  ASSERT_NE(second, first);
  EXPECT_EQ(second->verdict_count(), 2u) << "the first pod's verdicts, before any call of its own";
  const auto theirs = Verdicts(*second, Want::kFilter);
  EXPECT_EQ(theirs.at("a"), mine.at("a"));
  EXPECT_EQ(theirs.at("pcie"), mine.at("pcie"));

  PodSpec other = kTwoGpus;
  other.name = "other";
  other.uid = "uid-other";
  other.gpus = 4;
  std::shared_ptr<PodEntry> third = Entry(other);
  EXPECT_EQ(third->verdict_count(), 0u);
  EXPECT_NE(Verdicts(*third, Want::kFilter).at("a"), mine.at("a"));

  // The 4-GPU pod changed the typical pods: a pod of the first request now starts afresh.
  ASSERT_NE(third->mix, first->mix);
  PodSpec late = kTwoGpus;
  late.name = "late";
  late.uid = "uid-late";
  std::shared_ptr<PodEntry> fourth = Entry(late);
  ASSERT_NE(fourth->mix, first->mix);
  EXPECT_EQ(fourth->verdict_count(), 0u);
  EXPECT_NE(Verdicts(*fourth, Want::kFilter).at("a"), mine.at("a"));
}

// A restarted extender or a new leader packs for the pods the cluster runs from its first pod:
// once the store is synced, the window of typical pods starts from the bound pods' shapes (a
// held pod's are not known). Before the sync it knows only the pods it is asked about.
TEST_F(EvaluatorTest, TheTypicalPodsStartFromThePodsTheStoreHoldsOnceSynced) {
  AddNode("a", Preset("hgx-h100-8gpu"));
  AddNode("b", Preset("hgx-h100-8gpu"));
  const auto bind = [&](const std::string& node, const std::string& uid, framework::AllocationDelta delta) {
    const auto bound =
        store_.Bind(node, uid, [&](const state::NodeRecord& record) -> Result<state::PodAllocation> {
          state::PodAllocation a;
          a.uid = uid;
          a.node = record.name;
          a.topology_generation = record.topology_generation;
          a.delta = std::move(delta);
          return a;
        });
    ASSERT_TRUE(bound.ok()) << bound.error().message();
  };
  bind("a", "whole", framework::AllocationDelta{{0, 1, 2, 3, 4, 5, 6, 7}, {}, {0, 1, 2, 3, 4, 5, 6, 7}});
  store_.SetPodCpu("whole", "a", 96'000);  // the source's count of the pod's CPU
  bind("b", "share", framework::AllocationDelta{{}, {{0, GpuShareUsage{1, 10000, 2500}}}, {}});
  state::PodAllocation held;
  held.uid = "held";
  held.node = "b";
  held.hold = "its record could not be read";
  held.delta.exclusive_gpus = {7};
  ASSERT_TRUE(store_.Hold(held).ok());

  const packing::Shape whole{8, packing::kMilli, 96'000, {}, 8};
  const packing::Shape quarter{1, 250, 0, {}, 0};
  const packing::Shape two{2, packing::kMilli, 4000, {}, 2};  // the pods asked about carry their CPU
  const auto shapes = [](const PodEntry& e) {
    std::set<packing::Shape> out;
    for (const auto& w : e.mix->shapes) out.insert(w.shape);
    return out;
  };
  std::shared_ptr<PodEntry> before = Entry(kTwoGpus);
  ASSERT_NE(before->mix, nullptr);
  EXPECT_EQ(shapes(*before), (std::set<packing::Shape>{two})) << "not synced: only the pods asked about";

  store_.SetSynced(true);
  PodSpec next = kTwoGpus;
  next.name = "next";
  next.uid = "uid-next";
  std::shared_ptr<PodEntry> after = Entry(next);
  EXPECT_EQ(shapes(*after), (std::set<packing::Shape>{whole, quarter, two}));
  EXPECT_EQ(after->mix->shapes.size(), 3u) << "the held pod's shape is not known";
}

// FGD's measure counts a node's GPUs as stranded where its CPU is spent. A node whose free CPU
// binds the pod's packing score (below the typical pod's 4 cores plus the pod's 4) is scored with
// its own CPU; the others share their class's verdict, as nodes whose CPU is unknown do. The
// filter's pass or fail reads no CPU.
TEST_F(EvaluatorTest, ANodeWhoseCpuBindsIsScoredWithItsOwnCpu) {
  const auto hgx = Preset("hgx-h100-8gpu");
  const auto add = [&](const std::string& name, std::int64_t cpu) {
    state::NodeSpec spec{name, hgx, {}, true};
    spec.cpu_allocatable_milli = cpu;
    ASSERT_TRUE(store_.UpsertNode(std::move(spec)).ok());
  };
  add("roomy-a", 64'000);
  add("roomy-b", 64'000);
  add("unknown", -1);
  add("tight", 6'000);  // after the pod, 2 cores: the next 4-core pod cannot use its 6 GPUs
  std::shared_ptr<PodEntry> entry = Entry(kTwoGpus);
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(Evaluator::CpuBound(entry->request, entry->mix.get()), 8'000);

  std::size_t evaluated = 0;
  auto scores = Verdicts(*entry, Want::kScores, &evaluated);
  EXPECT_EQ(evaluated, 2u) << "the class, and the node whose CPU binds";
  EXPECT_EQ(scores.at("roomy-a"), scores.at("roomy-b"));
  EXPECT_EQ(scores.at("roomy-a"), scores.at("unknown"));
  ASSERT_NE(scores.at("tight"), scores.at("roomy-a"));
  ASSERT_TRUE(scores.at("tight")->passes());
  EXPECT_LT(scores.at("tight")->score100, scores.at("roomy-a")->score100) << "its GPUs would be stranded";

  auto filtered = Verdicts(*entry, Want::kFilter, &evaluated);
  EXPECT_EQ(evaluated, 1u) << "pass or fail reads no CPU";
  EXPECT_TRUE(filtered.at("tight")->passes());

  // Other pods take 58 cores on roomy-a: it now scores as the tight node does, roomy-b as before.
  store_.SetPodCpu("uid-web", "roomy-a", 58'000);
  scores = Verdicts(*entry, Want::kScores, &evaluated);
  EXPECT_EQ(scores.at("roomy-a")->score100, scores.at("tight")->score100);
  EXPECT_LT(scores.at("roomy-a")->score100, scores.at("roomy-b")->score100);
  // They finish: roomy-a is back in its class.
  store_.SetPodCpu("uid-web", "", 0);
  scores = Verdicts(*entry, Want::kScores);
  EXPECT_EQ(scores.at("roomy-a"), scores.at("roomy-b"));
}

// Nodes whose CPU binds share a verdict when the same typical shapes fit in their CPU before and
// after the pod (Evaluator::CpuClass): what ExpectedFragmentation reads of CPU. Exact: each
// shared verdict equals the node's own evaluation.
TEST_F(EvaluatorTest, NodesWhoseCpuBindsAlikeShareOneVerdict) {
  const auto hgx = Preset("hgx-h100-8gpu");
  const auto add = [&](const std::string& name, std::int64_t cpu) {
    state::NodeSpec spec{name, hgx, {}, true};
    spec.cpu_allocatable_milli = cpu;
    ASSERT_TRUE(store_.UpsertNode(std::move(spec)).ok());
  };
  // The typical pods ask 4 cores (kTwoGpus), so CPU binds below 8 cores; 4-7.999 cores fit the
  // shape before the pod and none after, below 4 none either way.
  for (int i = 0; i < 8; ++i) add("before-" + std::to_string(i), 4'000 + 500 * i);
  for (int i = 0; i < 4; ++i) add("none-" + std::to_string(i), 500 + 1'000 * i);
  std::shared_ptr<PodEntry> entry = Entry(kTwoGpus);
  ASSERT_NE(entry, nullptr);
  const std::vector<std::int64_t> thresholds = Evaluator::CpuThresholds(entry->request, entry->mix.get());
  EXPECT_EQ(thresholds, (std::vector<std::int64_t>{4'000}));
  EXPECT_EQ(Evaluator::CpuClass(thresholds, 4'000, 4'000), Evaluator::CpuClass(thresholds, 4'000, 7'999));
  EXPECT_NE(Evaluator::CpuClass(thresholds, 4'000, 3'999), Evaluator::CpuClass(thresholds, 4'000, 4'000));
  EXPECT_NE(Evaluator::CpuClass(thresholds, 4'000, 8'000), Evaluator::CpuClass(thresholds, 4'000, 7'999));

  std::size_t evaluated = 0;
  const auto scores = Verdicts(*entry, Want::kScores, &evaluated);
  EXPECT_EQ(evaluated, 2u) << "one verdict per CPU class, not per node";
  const auto snap = store_.snapshot();
  for (const auto& [name, v] : scores) {
    const state::NodeRecord* record = snap->Find(name);
    PodEntry alone;  // a table of its own: nothing shared with the call above
    alone.request = entry->request;
    alone.interested = true;
    alone.mix = entry->mix;
    alone.packs_by_mix = entry->packs_by_mix;
    alone.cpu_thresholds = entry->cpu_thresholds;
    std::optional<framework::CycleState> cycle;
    EXPECT_EQ(v->score100, evaluator_
                               .Evaluate(alone, cycle,
                                         {.record = *record,
                                          .snap = snap,
                                          .want = Want::kScores,
                                          .cpu_free = record->cpu_free_milli()})
                               ->score100)
        << name;
  }
  EXPECT_LT(scores.at("before-0")->score100, scores.at("none-0")->score100)
      << "the pod spends the CPU the typical pods need only where they still fit";
}

// Pods that ask no device share one verdict table whatever CPU they ask (their verdicts read it
// only through CpuClass): a cluster's many CPU-only requests take one of the shared slots, not
// one each from the GPU pods'. GPU pods that ask different CPU keep tables of their own.
TEST_F(EvaluatorTest, PodsWithoutDevicesShareOneTableWhateverTheirCpu) {
  AddNode("a", Preset("hgx-h100-8gpu"));
  const std::shared_ptr<PodEntry> small = Entry(PodSpec{.name = "small", .uid = "uid-small", .cpu = "1"});
  const std::shared_ptr<PodEntry> big = Entry(PodSpec{.name = "big", .uid = "uid-big", .cpu = "80"});
  ASSERT_TRUE(small->packs_cpu && big->packs_cpu);
  EXPECT_EQ(small->verdicts(), big->verdicts());
  const std::shared_ptr<PodEntry> gpu1 = Entry(PodSpec{.name = "g1", .uid = "uid-g1", .gpus = 1, .cpu = "1"});
  const std::shared_ptr<PodEntry> gpu80 =
      Entry(PodSpec{.name = "g80", .uid = "uid-g80", .gpus = 1, .cpu = "80"});
  EXPECT_NE(gpu1->verdicts(), gpu80->verdicts());
  EXPECT_NE(gpu1->verdicts(), small->verdicts());
}

TEST_F(EvaluatorTest, ANodeThatChangesLeavesItsClassAndIsEvaluatedAnew) {
  const auto hgx = Preset("hgx-h100-8gpu");
  AddNode("a", hgx);
  AddNode("b", hgx);
  std::shared_ptr<PodEntry> entry = Entry(kTwoGpus);
  const auto before = Verdicts(*entry, Want::kScores);
  Bind(PodSpec{.name = "other", .uid = "uid-other", .gpus = 6, .rdma = 0}, "b");
  std::size_t evaluated = 0;
  const auto after = Verdicts(*entry, Want::kScores, &evaluated);
  EXPECT_EQ(evaluated, 2u);
  EXPECT_EQ(after.at("a"), before.at("a"));  // unchanged node: the cached verdict
  EXPECT_NE(after.at("b"), after.at("a"));
  EXPECT_EQ(entry->verdict_count(), 2u);
  // Two GPUs are left on b: it still fits, and a whole node scores differently from a full one.
  EXPECT_TRUE(after.at("b")->passes());
  Bind(PodSpec{.name = "third", .uid = "uid-third", .gpus = 1, .rdma = 0}, "b");
  EXPECT_FALSE(Verdicts(*entry, Want::kFilter).at("b")->passes());
}

TEST_F(EvaluatorTest, ANewResourceVersionOfThePodIsParsedAfresh) {
  AddNode("a", Preset("hgx-h100-8gpu"));
  std::shared_ptr<PodEntry> v1 = Entry(kTwoGpus);
  Verdicts(*v1, Want::kFilter);
  PodSpec changed = kTwoGpus;
  changed.resource_version = "2";
  changed.gpus = 8;
  changed.rdma = 8;
  std::shared_ptr<PodEntry> v2 = Entry(changed);
  ASSERT_NE(v2, v1);
  EXPECT_EQ(v2->request.gpus, 8);
  EXPECT_EQ(v2->verdict_count(), 0u);
  EXPECT_EQ(evaluator_.Find(kTwoGpus.uid), v2);
  EXPECT_EQ(evaluator_.cached_pods(), 1u);
}

TEST_F(EvaluatorTest, APodNamingGpuUuidsIsDecidedNodeByNode) {
  const auto with_uuids = [](const std::string& prefix) {
    auto t = std::make_shared<NodeTopology>(*Preset("inference-4gpu"));
    for (std::size_t g = 0; g < t->gpus.size(); ++g) t->gpus[g].uuid = prefix + "-" + std::to_string(g);
    return std::shared_ptr<const NodeTopology>(std::move(t));
  };
  AddNode("a", with_uuids("GPU-aaaa"));
  AddNode("b", with_uuids("GPU-bbbb"));
  std::shared_ptr<PodEntry> plain = Entry(PodSpec{.name = "plain", .uid = "uid-plain", .gpus = 1});
  std::size_t evaluated = 0;
  Verdicts(*plain, Want::kFilter, &evaluated);
  EXPECT_EQ(evaluated, 1u);  // one class: UUIDs are not part of it

  std::shared_ptr<PodEntry> named = Entry(PodSpec{.name = "named",
                                                  .uid = "uid-named",
                                                  .gpus = 1,
                                                  .annotations = {{"nvidia.com/use-gpuuuid", "GPU-bbbb-2"}},
                                                  .extra_limits = {{"nvidia.com/gpumem", "4000"}}});
  const auto v = Verdicts(*named, Want::kFilter, &evaluated);
  EXPECT_EQ(evaluated, 2u);
  EXPECT_FALSE(v.at("a")->passes());
  EXPECT_TRUE(v.at("b")->passes());
}

// Packing by the mix (plugins/README.md): the extender's typical pods are the last pods it was
// asked about, and a new leader's window of a few NIC-less pods must not let the next NIC-less
// pod take a GPU+NIC node (e2e TestKubeScheduler once left a Prefill pod unplaceable so). With
// such a window the verbs' scores keep Fragmentation, RdmaAffinity and SharedGpu counted (the
// framework's weights with the rule off); once the window holds kMinPodsToPackByMix pods its mix
// is the workload and the three stand down, as in the simulator (the weights with it on).
TEST_F(EvaluatorTest, TheBlindHeuristicsStayCountedUntilTheWindowIsTheWorkload) {
  AddNode("rdma", Preset("hgx-h100-8gpu"));
  AddNode("plain", Preset("inference-4gpu"));
  int seen = 0;
  const auto observe = [&](std::size_t until) {
    while (static_cast<std::size_t>(seen) < until) {  // the window's mix is recomputed every 50 new pods
      const std::string n = std::to_string(seen++);
      ASSERT_NE(Entry(PodSpec{.name = "w" + n, .uid = "uid-w" + n, .gpus = 1}), nullptr);
    }
  };
  const auto check = [&](const std::string& name, bool packs) {
    SCOPED_TRACE(name);
    const std::shared_ptr<PodEntry> entry = Entry(PodSpec{.name = name, .uid = "uid-" + name, .gpus = 1});
    ASSERT_NE(entry, nullptr);
    ASSERT_NE(entry->mix, nullptr);
    ASSERT_FALSE(entry->mix->shapes.empty());
    for (const packing::WeightedShape& w : entry->mix->shapes) EXPECT_EQ(w.shape.nics, 0);
    EXPECT_EQ(entry->packs_by_mix, packs);
    const auto verdicts = Verdicts(*entry, Want::kScores);
    for (const std::string node : {"rdma", "plain"}) {
      SCOPED_TRACE(node);
      const state::NodeRecord& record = *store_.snapshot()->Find(node);
      const auto weights = [&](bool rule) {
        framework::CycleState cycle = framework_.NewCycle(entry->request);
        cycle.SetShapeMix(entry->mix);
        cycle.set_packs_for_shape_mix(rule);
        const framework::NodeInfo info = NodeInfoOf(record);
        EXPECT_TRUE(framework_.RunFilter(cycle, info).ok());
        return framework_.RunScore(cycle, info).weights;
      };
      ASSERT_TRUE(verdicts.at(node)->passes());
      EXPECT_EQ(verdicts.at(node)->score_weights, weights(packs));
      // The rule stands the three down (weights 2 + 3 + 1).
      EXPECT_EQ(weights(true), weights(false) - 6);
    }
  };
  observe(Evaluator::kMinPodsToPackByMix - 2);  // with "few", one short of the rule
  check("few", false);
  observe(Evaluator::kMinPodsToPackByMix);
  check("many", true);
}

// `capacity.minTypicalPods` sets how many device pods the window must hold before its mix is
// the workload (50 by default): a small cluster can pack by its few pods' mix.
TEST(EvaluatorConfigTest, MinTypicalPodsSetsWhenTheWindowIsTheWorkload) {
  metrics::ConfigureLogging(metrics::LogFormat::kText, metrics::LogLevel::kError);
  const framework::Registry registry = plugins::BuiltinRegistry();
  framework::SchedulerConfig config = plugins::DefaultSchedulerConfig();
  config.capacity.min_typical_pods = 3;
  const framework::Framework fw = framework::Framework::Create(config, registry).value();
  state::ClusterStore store(nullptr, StoreOptionsFor(fw.config()));
  metrics::Registry metrics;
  Evaluator evaluator(fw, store, metrics, ExtenderOptions{}, nullptr, nullptr);
  ASSERT_TRUE(store.UpsertNode({"n", Preset("hgx-h100-8gpu"), {}, true}).ok());
  EXPECT_EQ(evaluator.min_pods_to_pack_by_mix(), 3u);
  std::vector<std::string> raw;
  const auto entry = [&](const std::string& name, int gpus) {
    const std::string uid = "uid-" + name;  // PodRef holds views: the strings outlive the call
    raw.push_back(MakePod(PodSpec{.name = name, .uid = uid, .gpus = gpus}).dump());
    PodRef ref;
    ref.uid = uid;
    ref.name = name;
    ref.pod_namespace = "default";
    ref.raw = raw.back();
    Result<std::shared_ptr<PodEntry>> e = evaluator.EntryFor(ref);
    EXPECT_TRUE(e.ok()) << e.error().message();
    return e.ok() ? *e : nullptr;
  };
  EXPECT_FALSE(entry("a", 1)->packs_by_mix);
  EXPECT_FALSE(entry("cpu", 0)->packs_by_mix);  // a pod asking no device does not count
  EXPECT_FALSE(entry("b", 2)->packs_by_mix);
  EXPECT_TRUE(entry("c", 1)->packs_by_mix);  // the third pod asking a device
  EXPECT_TRUE(evaluator.PacksByMixFor(""));
}

// The binder re-decides a vGPU's card for the typical pods the verbs scored it for: where
// capacity packing owns the decision (no NIC in the typical pods, no GPU policy named), the card
// that strands least (CycleState::share_packing), not HAMi's spread.
TEST_F(EvaluatorTest, TheBinderChoosesAVgpusCardForTheTypicalPodsAsTheVerbsDid) {
  AddNode("box", Preset("hgx-h100-8gpu"));
  const auto share = [](const std::string& name, int percent) {
    const std::string p = std::to_string(percent);
    return PodSpec{.name = name,
                   .uid = "uid-" + name,
                   .gpus = 1,
                   .extra_limits = {{"nvidia.com/gpucores", p}, {"nvidia.com/gpumem-percentage", p}}};
  };
  const auto card_of = [&](const std::string& uid) {
    const std::optional<state::PodAllocation> a = store_.FindPod(uid);
    return a && a->delta.shares.size() == 1 ? a->delta.shares[0].first : -1;
  };
  Bind(share("a", 45), "box");  // an empty node: GPU0
  Bind(share("b", 20), "box");  // switch group S0 is broken: spread takes its emptier card, GPU1
  ASSERT_EQ(card_of("uid-a"), 0);
  ASSERT_EQ(card_of("uid-b"), 1);
  // The workload: half cards. A half on GPU0 strands its last 5 %, on GPU1 its last 30 %; on a
  // free card nothing.
  for (std::size_t k = 0; k < Evaluator::kMinPodsToPackByMix; ++k) {
    ASSERT_NE(Entry(share("w" + std::to_string(k), 50)), nullptr);
  }
  const std::shared_ptr<PodEntry> c = Entry(share("c", 50));
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->packs_by_mix);
  Binder binder(evaluator_, metrics_);
  EXPECT_EQ(binder.Bind(BindingArgs{"c", "default", "uid-c", "box"}), "");
  EXPECT_EQ(card_of("uid-c"), 2);
}

// One node of the best: among the highest scores the node first in the stable order keeps its
// score and the others drop a step; the rest, and a best of 1, are left as they are.
TEST(PreferOneOfTheBestTest, KeepsTheFirstOfTheStableOrderAndStepsTheOthersBack) {
  using Scores = std::vector<std::pair<std::string, int>>;
  const auto prefer = [](Scores scores) {
    framework::PreferOneOfTheBest(
        std::span<std::pair<std::string, int>>(scores),
        [&](std::size_t k) { return NodeOrderKey(scores[k].first); },
        [](std::pair<std::string, int>& s) -> int& { return s.second; });
    return std::map<std::string, int>(scores.begin(), scores.end());
  };
  std::string first = "a";
  for (const char* n : {"b", "d"}) {
    if (NodeOrderKey(n) < NodeOrderKey(first)) first = n;
  }
  std::map<std::string, int> got = prefer({{"a", 10}, {"b", 10}, {"c", 9}, {"d", 10}, {"e", 0}});
  for (const char* n : {"a", "b", "d"}) EXPECT_EQ(got[n], n == first ? 10 : 9) << n;
  EXPECT_EQ(got["c"], 9);
  EXPECT_EQ(got["e"], 0);
  EXPECT_EQ(prefer({{"d", 10}, {"e", 0}, {"c", 9}, {"b", 10}, {"a", 10}}), got)
      << "the list's order does not matter";
  EXPECT_EQ(prefer({{"a", 7}, {"b", 3}}), (std::map<std::string, int>{{"a", 7}, {"b", 3}}))
      << "a single best";
  EXPECT_EQ(prefer({{"a", 1}, {"b", 1}}), (std::map<std::string, int>{{"a", 1}, {"b", 1}}))
      << "nothing below 1";
  EXPECT_EQ(prefer({}), (std::map<std::string, int>{}));
  EXPECT_NE(NodeOrderKey("node-1"), NodeOrderKey("node-2"));
  EXPECT_EQ(NodeOrderKey(""), 14695981039346656037ull) << "FNV-1a: the same in every replica and release";
}

// A pod that asks CPU alone joins the typical pods when prioritize-cpu scores it among nodes with
// GPUs (its CPU is then part of their workload), not when only nodes toposched knows no GPUs on
// were left to it; either way the window rule counts only the pods asking a device.
TEST_F(EvaluatorTest, PodsAskingCpuAloneJoinTheTypicalPodsWhereTheyCouldTakeAGpuNodesCpu) {
  AddNode("gpu", Preset("hgx-h100-8gpu"));
  Binder binder(evaluator_, metrics_);
  KubeVerbs verbs(evaluator_, binder);
  const auto prioritize_cpu = [&](const PodSpec& pod, const std::vector<std::string>& nodes) {
    server::HttpResponse resp;
    verbs.FilterOrPrioritize(testing::ExtenderArgs(MakePod(pod), nodes), resp, Want::kScores, true);
    EXPECT_EQ(resp.status, 200) << resp.body;
    return nlohmann::json::parse(resp.body);
  };
  const auto shapes = [&] {
    std::set<packing::Shape> out;
    for (const auto& w : evaluator_.ShapeMixFor("")->shapes) out.insert(w.shape);
    return out;
  };
  ASSERT_NE(Entry(kTwoGpus), nullptr);
  const packing::Shape two{2, packing::kMilli, 4000, {}, 2};
  EXPECT_EQ(shapes(), (std::set<packing::Shape>{two}));

  const nlohmann::json elsewhere =
      prioritize_cpu({.name = "web", .uid = "uid-web", .cpu = "8"}, {"cpu-node"});
  ASSERT_EQ(elsewhere.size(), 1u);
  EXPECT_EQ(elsewhere[0]["Score"], 10) << "toposched knows no GPUs there to strand";
  EXPECT_EQ(shapes(), (std::set<packing::Shape>{two})) << "only a CPU node was left to it";

  prioritize_cpu({.name = "etl", .uid = "uid-etl", .cpu = "16"}, {"cpu-node", "gpu"});
  const packing::Shape etl{0, 0, 16000, {}, 0};
  EXPECT_EQ(shapes(), (std::set<packing::Shape>{two, etl}));
  prioritize_cpu({.name = "etl", .uid = "uid-etl", .cpu = "16"}, {"gpu"});  // asked again: counted once
  EXPECT_FALSE(evaluator_.PacksByMixFor(""));
  // The mix's weights: one pod of each.
  for (const auto& w : evaluator_.ShapeMixFor("")->shapes) EXPECT_DOUBLE_EQ(w.weight, 0.5);

  // The window rule counts only pods asking a device: one short of it, however many CPU-only
  // pods the window holds, the blind heuristics stay counted; the next GPU pod ends that.
  for (std::size_t k = 1; k + 1 < Evaluator::kMinPodsToPackByMix; ++k) {
    ASSERT_NE(Entry({.name = "g" + std::to_string(k), .uid = "uid-g" + std::to_string(k), .gpus = 1}),
              nullptr);
  }
  for (int k = 0; k < 100; ++k) {
    const std::shared_ptr<PodEntry> cpu =
        Entry({.name = "c" + std::to_string(k), .uid = "uid-c" + std::to_string(k), .cpu = "2"});
    ASSERT_NE(cpu, nullptr);
    evaluator_.ObserveCpuPod(*cpu);
  }
  EXPECT_FALSE(evaluator_.PacksByMixFor("")) << "49 pods asking a device, 101 asking CPU alone";
  ASSERT_NE(Entry({.name = "last", .uid = "uid-last", .gpus = 1}), nullptr);
  EXPECT_TRUE(evaluator_.PacksByMixFor(""));
}

TEST_F(EvaluatorTest, APoolPodsScoresFollowThePoolFromOneCallToTheNext) {
  const auto hgx = Preset("hgx-h100-8gpu");
  for (int i = 0; i < 8; ++i) {
    AddNode("n" + std::to_string(i), hgx,
            {{"toposched.io/leaf", "l" + std::to_string(i / 4)}, {"toposched.io/spine", "s0"}});
  }
  Bind(PoolPod("prefill-0", "prefill"), "n0");
  std::shared_ptr<PodEntry> decode = Entry(PoolPod("decode-0", "decode"));
  std::size_t evaluated = 0;
  const auto before = Verdicts(*decode, Want::kScores, &evaluated);
  // n0 (holds the prefill) is its own key; leaf l0's other nodes share one, leaf l1's another.
  EXPECT_EQ(evaluated, 3u);
  const int near = before.at("n1")->score100, far = before.at("n5")->score100;
  EXPECT_GT(near, far) << "the leaf holding the prefill instance is the cheaper KV path";
  // The filter decision stays one per class: n0 (two GPUs taken) and the whole nodes.
  Verdicts(*decode, Want::kFilter, &evaluated);
  EXPECT_EQ(evaluated, 2u);

  // A prefill instance in leaf l1 too: the next call sees it, although nothing about the nodes'
  // classes changed.
  Bind(PoolPod("prefill-1", "prefill"), "n4");
  const auto after = Verdicts(*decode, Want::kScores);
  EXPECT_EQ(after.at("n1")->score100, after.at("n5")->score100);
  EXPECT_GT(after.at("n5")->score100, far);
}

// A pool pod's verdicts are shared by position (a run of nodes of equal domains keys once per
// call), and equal the verdict each node gets on its own, whatever order the names come in:
// leaves of nodes with and without pool pods, two leaves holding alike, and a leaf label under
// two spines (its nodes are keyed alone).
TEST_F(EvaluatorTest, APoolPodsVerdictsEqualTheNodeByNodeVerdictsInAnyOrder) {
  const auto hgx = Preset("hgx-h100-8gpu");
  for (int i = 0; i < 16; ++i) {
    const std::string leaf = i < 12 ? "l" + std::to_string(i / 4) : "lx";  // lx: nodes 12-15
    const std::string spine = i < 8 ? "s0" : (i < 14 ? "s1" : "s2");       // lx spans s1 and s2
    AddNode("n" + std::to_string(i), hgx, {{"toposched.io/leaf", leaf}, {"toposched.io/spine", spine}});
  }
  Bind(PoolPod("prefill-0", "prefill"), "n0");   // leaf l0
  Bind(PoolPod("prefill-1", "prefill"), "n8");   // leaf l2: alike l0, another spine
  Bind(PoolPod("prefill-2", "prefill"), "n13");  // leaf lx, spine s1
  std::shared_ptr<PodEntry> decode = Entry(PoolPod("decode-0", "decode"));
  const auto snap = store_.snapshot();
  std::map<std::string, int> alone;
  std::optional<framework::CycleState> cycle;
  for (const auto& record : snap->nodes()) {
    alone[record->name] =
        evaluator_.Evaluate(*decode, cycle, {.record = *record, .snap = snap, .want = Want::kScores})
            ->score100;
  }
  for (const bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse order" : "snapshot order");
    NodeVerdicts verdicts(evaluator_, *decode, snap, Want::kScores);
    std::vector<std::size_t> order(snap->size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = reverse ? order.size() - 1 - i : i;
    for (std::size_t i : order) {
      const std::string& name = snap->nodes()[i]->name;
      EXPECT_EQ(verdicts.At(i)->score100, alone.at(name)) << name;
    }
    // Fewer keys than nodes: the leaves without pool pods share one key per position.
    EXPECT_LT(verdicts.evaluated(), snap->size());
  }
  EXPECT_GT(alone.at("n1"), alone.at("n5")) << "the leaf holding a prefill instance is the cheaper KV path";
}

// The pool's index (Evaluator::PoolIndexFor) is reused only while neither the pool nor the
// nodes' positions change, and never for a pod of the pool itself: after each change, and for a
// pool pod scored again once bound, every node's keyed verdict is still its own.
TEST_F(EvaluatorTest, APoolsIndexFollowsThePoolThePositionsAndThePodItself) {
  const auto hgx = Preset("hgx-h100-8gpu");
  const auto leaf_of = [](int i) -> std::map<std::string, std::string> {
    return {{"toposched.io/leaf", "l" + std::to_string(i / 4)}, {"toposched.io/spine", "s0"}};
  };
  for (int i = 0; i < 12; ++i) AddNode("n" + std::to_string(i), hgx, leaf_of(i));
  const auto expect_own_verdicts = [&](PodEntry& pod, const std::string& step) {
    SCOPED_TRACE(step);
    const auto snap = store_.snapshot();
    std::optional<framework::CycleState> cycle;
    NodeVerdicts verdicts(evaluator_, pod, snap, Want::kScores);
    for (std::size_t i = 0; i < snap->size(); ++i) {
      const state::NodeRecord& record = *snap->nodes()[i];
      const Evaluator::NodeQuery query{.record = record, .snap = snap, .want = Want::kScores};
      EXPECT_EQ(verdicts.At(i)->score100, evaluator_.Evaluate(pod, cycle, query)->score100) << record.name;
    }
  };
  Bind(PoolPod("prefill-0", "prefill"), "n0");
  std::shared_ptr<PodEntry> decode = Entry(PoolPod("decode-0", "decode"));
  expect_own_verdicts(*decode, "first call");
  expect_own_verdicts(*decode, "the index reused");
  Bind(PoolPod("prefill-1", "prefill"), "n5");
  expect_own_verdicts(*decode, "a pod joined the pool");
  // n5 moves from leaf l1 to leaf l2: its prefill instance with it.
  AddNode("n5", hgx, leaf_of(9));
  expect_own_verdicts(*decode, "a node moved");
  // The pod itself bound on n9, a decode of the same shape on n10 (leaf l2): scored again,
  // decode-0 must not count itself, or n9 would look like n10 (one decode instance on it).
  Bind(PoolPod("decode-0", "decode"), "n9");
  Bind(PoolPod("decode-1", "decode"), "n10");
  expect_own_verdicts(*decode, "the pod itself in the pool");
}

// When only the pool changed (its pods bind and leave one by one, as in a rollout), the next
// index is the last one patched (PoolIndex::patched): a pod that left is subtracted from its
// node and domains. Leaf l1 holds two prefill instances like leaf l2; once one leaves l1, l1's
// nodes must no longer share l2's nodes' verdicts (they would if it were not subtracted).
TEST_F(EvaluatorTest, APoolsIndexIsPatchedWithThePodsThatCameAndLeft) {
  const auto hgx = Preset("hgx-h100-8gpu");
  for (int i = 0; i < 12; ++i) {
    AddNode("n" + std::to_string(i), hgx,
            {{"toposched.io/leaf", "l" + std::to_string(i / 4)}, {"toposched.io/spine", "s0"}});
  }
  const auto expect_own_verdicts = [&](PodEntry& pod, bool patched, const std::string& step) {
    SCOPED_TRACE(step);
    const auto snap = store_.snapshot();
    std::optional<framework::CycleState> cycle;
    NodeVerdicts verdicts(evaluator_, pod, snap, Want::kScores);
    const auto index = evaluator_.PoolIndexFor("chat", *snap, framework_.config().network.tiers.size());
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(index->patched, patched);
    EXPECT_EQ(static_cast<std::size_t>(index->count), store_.PoolMembers("chat").size());
    for (std::size_t i = 0; i < snap->size(); ++i) {
      const state::NodeRecord& record = *snap->nodes()[i];
      const Evaluator::NodeQuery query{.record = record, .snap = snap, .want = Want::kScores};
      EXPECT_EQ(verdicts.At(i)->score100, evaluator_.Evaluate(pod, cycle, query)->score100) << record.name;
    }
  };
  Bind(PoolPod("prefill-1", "prefill"), "n5");
  Bind(PoolPod("prefill-2", "prefill"), "n6");
  Bind(PoolPod("prefill-3", "prefill"), "n9");
  Bind(PoolPod("prefill-4", "prefill"), "n10");
  std::shared_ptr<PodEntry> decode = Entry(PoolPod("decode-0", "decode"));
  expect_own_verdicts(*decode, false, "built");
  ASSERT_TRUE(store_.Release("uid-prefill-1", false).ok());
  expect_own_verdicts(*decode, true, "a pod left");
  Bind(PoolPod("prefill-5", "prefill"), "n1");
  expect_own_verdicts(*decode, true, "a pod came");
  // One pod moves between two calls: the same UID on another node.
  ASSERT_TRUE(store_.Release("uid-prefill-3", false).ok());
  Bind(PoolPod("prefill-3", "prefill"), "n2");
  expect_own_verdicts(*decode, true, "a pod moved");
  // An index a call still holds keeps its tables when the next version is patched (the tables
  // move into the next version only when nobody else holds the last one).
  {
    const auto snap = store_.snapshot();
    const std::size_t tiers = framework_.config().network.tiers.size();
    const auto held = evaluator_.PoolIndexFor("chat", *snap, tiers);
    ASSERT_NE(held, nullptr);
    const std::uint64_t n2 = framework::PositionHash("n2");
    ASSERT_NE(held->node.Find(n2), nullptr);
    const auto content = held->node.Find(n2)->second;
    const std::size_t domain_tiers = held->domain.size();
    ASSERT_TRUE(store_.Release("uid-prefill-3", false).ok());
    const auto next = evaluator_.PoolIndexFor("chat", *store_.snapshot(), tiers);
    ASSERT_NE(next, nullptr);
    EXPECT_TRUE(next->patched);
    ASSERT_NE(held->node.Find(n2), nullptr) << "the held index lost its tables";
    EXPECT_EQ(held->node.Find(n2)->second, content);
    EXPECT_EQ(held->domain.size(), domain_tiers);
    const auto* left = next->node.Find(n2);
    EXPECT_TRUE(left == nullptr || left->second != content)
        << "the next version subtracted the pod that left";
    Bind(PoolPod("prefill-3", "prefill"), "n2");
  }
  expect_own_verdicts(*decode, true, "a pod left and came back while an index was held");
  // Most of the pool changed: built afresh.
  for (const char* uid : {"uid-prefill-2", "uid-prefill-4", "uid-prefill-5"}) {
    ASSERT_TRUE(store_.Release(uid, false).ok());
  }
  expect_own_verdicts(*decode, false, "most of the pool left");
}

}  // namespace
}  // namespace toposched::extender
