#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "state_testing.h"
#include "toposched/state/cluster_state.h"

namespace toposched::state {
namespace {

using testing::Allocation;
using testing::FakePersistence;
using testing::IndexViolation;
using testing::PresetNode;
using testing::PresetTopology;
using testing::RecordViolation;
using testing::Share;
using testing::Take;
using testing::Whole;

constexpr std::string_view kHgx = "hgx-h100-8gpu";         // 8 GPUs (81559 MiB), 8 RDMA NICs + 1 Ethernet
constexpr std::string_view kInference = "inference-4gpu";  // 4 L40S (46068 MiB), 2 Ethernet NICs

NodeSpec Node(const std::string& name, std::string_view preset = kHgx) {
  return PresetNode(name, std::string(preset));
}

TEST(ClusterStoreTest, UpsertedNodesAreSortedAndFoundByName) {
  ClusterStore store(nullptr);
  for (const char* name : {"gpu-c", "gpu-a", "gpu-b"}) ASSERT_TRUE(store.UpsertNode(Node(name)).ok());
  const auto snapshot = store.snapshot();
  ASSERT_EQ(snapshot->size(), 3u);
  EXPECT_EQ(snapshot->nodes()[0]->name, "gpu-a");
  EXPECT_EQ(snapshot->nodes()[1]->name, "gpu-b");
  EXPECT_EQ(snapshot->nodes()[2]->name, "gpu-c");
  EXPECT_EQ(snapshot->version(), 3u);  // one publish per upsert
  const NodeRecord* b = snapshot->Find("gpu-b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->name, "gpu-b");
  EXPECT_EQ(b->topology, PresetTopology(std::string(kHgx)));
  EXPECT_NE(b->topology_fingerprint, 0u);
  EXPECT_EQ(b->topology_generation, 1);
  EXPECT_EQ(b->allocation_version, 0u);
  EXPECT_EQ(snapshot->Find("gpu-d"), nullptr);
  EXPECT_EQ(Snapshot().Find("gpu-a"), nullptr);  // an empty snapshot has no index
}

// A hint is only a guess: the right one answers, a wrong or out-of-range one falls back to the
// lookup, an unknown name is npos whatever the hint.
TEST(ClusterStoreTest, IndexOfWithAHintAnswersLikeTheLookup) {
  ClusterStore store(nullptr);
  for (const char* name : {"gpu-c", "gpu-a", "gpu-b"}) ASSERT_TRUE(store.UpsertNode(Node(name)).ok());
  const auto snapshot = store.snapshot();
  for (std::size_t hint : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{3}, Snapshot::npos}) {
    EXPECT_EQ(snapshot->IndexOf("gpu-a", hint), 0u) << hint;
    EXPECT_EQ(snapshot->IndexOf("gpu-b", hint), 1u) << hint;
    EXPECT_EQ(snapshot->IndexOf("gpu-c", hint), 2u) << hint;
    EXPECT_EQ(snapshot->IndexOf("gpu-", hint), Snapshot::npos) << hint;
    EXPECT_EQ(snapshot->IndexOf("gpu-d", hint), Snapshot::npos) << hint;
  }
  EXPECT_EQ(Snapshot().IndexOf("gpu-a", 0), Snapshot::npos);
}

// Names of every length up to 40 bytes (the index reads them as 8-byte words, the last one
// overlapping), many of them equal but for one byte at the start, in the middle or at the end:
// each is found at its own place, by one lookup, the batched one and a hint, and a name one byte
// off is not found.
TEST(ClusterStoreTest, NamesOfEveryLengthAreToldApart) {
  ClusterStore store(nullptr);
  std::vector<std::string> names;
  for (std::size_t n = 1; n <= 40; ++n) {
    std::string base(n, 'n');
    for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
      std::string v = base;
      v[at] = 'a';
      names.push_back(v);
    }
    names.push_back(base);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<NodeSpec> specs;
  for (const std::string& name : names) specs.push_back(Node(name));
  ASSERT_TRUE(store.UpsertNodes(std::move(specs)).ok());
  const auto snapshot = store.snapshot();
  std::vector<std::string_view> views(names.begin(), names.end());
  std::vector<std::size_t> at;
  snapshot->IndexOf(views, at);
  for (std::size_t k = 0; k < names.size(); ++k) {
    const std::size_t i = snapshot->IndexOf(names[k]);
    ASSERT_NE(i, Snapshot::npos) << names[k];
    EXPECT_EQ(snapshot->nodes()[i]->name, names[k]);
    EXPECT_EQ(at[k], i) << names[k];
    EXPECT_EQ(snapshot->IndexOf(names[k], i), i) << names[k];
    EXPECT_EQ(snapshot->IndexOf(names[k], (i + 1) % names.size()), i) << names[k];
    std::string off = names[k];
    off.back() = 'z';
    EXPECT_EQ(snapshot->IndexOf(off), Snapshot::npos) << off;
    EXPECT_EQ(snapshot->IndexOf(off, i), Snapshot::npos) << off;
    EXPECT_EQ(snapshot->IndexOf(names[k] + "z"), Snapshot::npos) << names[k];
  }
}

// The batched lookup (the filter's, with its slots fetched ahead) answers as one lookup per
// name does: known names, unknown ones, prefixes, repeats, more names than it reads ahead, the
// empty list and a snapshot without an index.
TEST(ClusterStoreTest, IndexOfManyNamesAnswersLikeOneLookupEach) {
  ClusterStore store(nullptr);
  std::vector<NodeSpec> specs;
  for (int i = 0; i < 40; ++i) specs.push_back(Node("gpu-node-with-a-long-name-" + std::to_string(i)));
  ASSERT_TRUE(store.UpsertNodes(std::move(specs)).ok());
  const auto snapshot = store.snapshot();
  std::vector<std::string> names;
  for (int i = 45; i >= 0; --i) names.push_back("gpu-node-with-a-long-name-" + std::to_string(i));
  names.push_back("gpu-node-with-a-long-name-");
  names.push_back("");
  names.push_back("gpu-node-with-a-long-name-7");
  std::vector<std::string_view> views(names.begin(), names.end());
  std::vector<std::size_t> at{123};
  snapshot->IndexOf(views, at);
  ASSERT_EQ(at.size(), names.size());
  std::size_t known = 0;
  for (std::size_t k = 0; k < names.size(); ++k) {
    EXPECT_EQ(at[k], snapshot->IndexOf(names[k])) << names[k];
    if (at[k] != Snapshot::npos) {
      ++known;
      EXPECT_EQ(snapshot->nodes()[at[k]]->name, names[k]);
    }
  }
  EXPECT_EQ(known, 41u);  // 40 nodes, one of them twice
  snapshot->IndexOf({}, at);
  EXPECT_TRUE(at.empty());
  Snapshot().IndexOf(views, at);
  EXPECT_EQ(at, std::vector<std::size_t>(names.size(), Snapshot::npos));
}

TEST(ClusterStoreTest, ReplacingANodeKeepsTheIndexAndTheOrder) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  ASSERT_TRUE(store.UpsertNode(Node("gpu-b")).ok());
  ASSERT_TRUE(store.UpsertNode(PresetNode("gpu-a", std::string(kHgx), {{"zone", "z1"}}, false)).ok());
  const auto snapshot = store.snapshot();
  ASSERT_EQ(snapshot->size(), 2u);
  EXPECT_EQ(snapshot->nodes()[0]->name, "gpu-a");
  EXPECT_FALSE(snapshot->Find("gpu-a")->schedulable);
  EXPECT_EQ(snapshot->Find("gpu-a")->labels.at("zone"), "z1");
  EXPECT_EQ(snapshot->Find("gpu-b")->name, "gpu-b");
}

// The hardware census (packing::RareShape counts hosts with it): every node's GPUs and RDMA
// NICs whatever is in use, rebuilt when a node comes, goes or changes hardware, shared
// otherwise; each brief carries its node's hardware.
TEST(ClusterStoreTest, TheHardwareCensusCountsNodesByWhatTheyHave) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  ASSERT_TRUE(store.UpsertNode(Node("gpu-b")).ok());
  ASSERT_TRUE(store.UpsertNode(Node("inf-c", kInference)).ok());
  packing::NodeHardware hgx, inference;
  hgx.gpus[VendorIndex(GpuVendor::kNvidia)] = 8;
  hgx.rdma_nics = 8;
  inference.gpus[VendorIndex(GpuVendor::kNvidia)] = 4;
  const auto before = store.snapshot();
  EXPECT_EQ(before->census(), (packing::HardwareCensus{{inference, 1}, {hgx, 2}}));
  EXPECT_EQ(before->briefs()[0].hardware, hgx);
  EXPECT_EQ(before->briefs()[2].hardware, inference);
  // A bind changes what is free, not what the node has: the census is the same object.
  ASSERT_TRUE(store.Bind("gpu-a", "u1", Take(Whole({0, 1}))).ok());
  const auto bound = store.snapshot();
  EXPECT_EQ(&bound->census(), &before->census());
  EXPECT_EQ(bound->Find("gpu-a")->hardware, hgx);
  // A new topology for a node, in either publish path, and a node gone: counted again.
  ASSERT_TRUE(store.UpsertNode(Node("gpu-b", kInference)).ok());
  EXPECT_EQ(store.snapshot()->census(), (packing::HardwareCensus{{inference, 2}, {hgx, 1}}));
  std::vector<NodeSpec> specs = {Node("inf-c")};
  ASSERT_TRUE(store.UpsertNodes(std::move(specs)).ok());
  EXPECT_EQ(store.snapshot()->census(), (packing::HardwareCensus{{inference, 1}, {hgx, 2}}));
  // A cordoned node is not counted, and counts again once uncordoned (its hardware the same),
  // in either publish path.
  NodeSpec cordoned = Node("gpu-b", kInference);
  cordoned.schedulable = false;
  ASSERT_TRUE(store.UpsertNode(cordoned).ok());
  EXPECT_EQ(store.snapshot()->census(), (packing::HardwareCensus{{hgx, 2}}));
  ASSERT_TRUE(store.UpsertNode(Node("gpu-b", kInference)).ok());
  EXPECT_EQ(store.snapshot()->census(), (packing::HardwareCensus{{inference, 1}, {hgx, 2}}));
  std::vector<NodeSpec> batch = {cordoned};
  ASSERT_TRUE(store.UpsertNodes(std::move(batch)).ok());
  EXPECT_EQ(store.snapshot()->census(), (packing::HardwareCensus{{hgx, 2}}));
  batch = {Node("gpu-b", kInference)};
  ASSERT_TRUE(store.UpsertNodes(std::move(batch)).ok());
  EXPECT_EQ(store.snapshot()->census(), (packing::HardwareCensus{{inference, 1}, {hgx, 2}}));
  store.RemoveNode("gpu-a");
  EXPECT_EQ(store.snapshot()->census(), (packing::HardwareCensus{{inference, 1}, {hgx, 1}}));
}

TEST(ClusterStoreTest, UpsertNodesPublishesOneSnapshot) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-b")).ok());
  ASSERT_TRUE(store.Bind("gpu-b", "u1", Take(Whole({0}))).ok());
  const auto before = store.snapshot();
  std::vector<NodeSpec> specs = {Node("gpu-c"), PresetNode("gpu-b", std::string(kHgx), {{"v", "1"}}),
                                 Node("gpu-a"), PresetNode("gpu-b", std::string(kInference), {{"v", "2"}}),
                                 NodeSpec{}};
  const Status s = store.UpsertNodes(specs);
  ASSERT_FALSE(s.ok());  // the nameless spec
  EXPECT_EQ(s.error().message(), "node name is empty");
  const auto after = store.snapshot();
  EXPECT_EQ(after->version(), before->version() + 1);
  ASSERT_EQ(after->size(), 3u);
  EXPECT_EQ(after->nodes()[0]->name, "gpu-a");
  EXPECT_EQ(after->nodes()[2]->name, "gpu-c");
  const NodeRecord* b = after->Find("gpu-b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->labels.at("v"), "2");  // the last spec of a name wins
  EXPECT_EQ(b->topology, PresetTopology(std::string(kInference)));
  EXPECT_EQ(b->topology_generation, 2);
  EXPECT_EQ(b->pods, std::vector<std::string>{"u1"});  // allocations kept
  EXPECT_TRUE(GpuExclusive(b->allocated, 0));
  EXPECT_EQ(after->Find("gpu-a")->topology_generation, 1);
  EXPECT_EQ(after->Find("gpu-a")->topology_fingerprint, after->Find("gpu-c")->topology_fingerprint);
  // Replacing only (no new names) keeps the name index.
  ASSERT_TRUE(store.UpsertNodes({Node("gpu-a"), Node("gpu-c")}).ok());
  EXPECT_EQ(store.snapshot()->Find("gpu-c")->name, "gpu-c");
  EXPECT_EQ(store.snapshot()->Find("gpu-b"), store.snapshot()->nodes()[1].get());
  EXPECT_TRUE(store.UpsertNodes({}).ok());
}

TEST(ClusterStoreTest, GenerationBumpsOnlyWhenTheFingerprintChanges) {
  const auto hgx = PresetTopology(std::string(kHgx));
  auto hgx_copy = std::make_shared<const NodeTopology>(*hgx);  // equal content, another object
  auto renamed = std::make_shared<NodeTopology>(*hgx);
  renamed->node_name = "elsewhere";  // not part of the fingerprint
  const auto inference = PresetTopology(std::string(kInference));
  struct Step {
    const char* name;
    std::shared_ptr<const NodeTopology> topology;
    std::map<std::string, std::string> labels;
    std::int64_t want_generation;
  };
  const Step steps[] = {
      {"first insert", hgx, {}, 1},
      {"same object", hgx, {}, 1},
      {"equal copy", hgx_copy, {}, 1},
      {"other node_name only", renamed, {}, 1},
      {"labels only", hgx, {{"a", "b"}}, 1},
      {"other hardware", inference, {}, 2},
      {"topology withdrawn", nullptr, {}, 3},
      {"withdrawn again", nullptr, {}, 3},
      {"back", hgx, {}, 4},
  };
  ClusterStore store(nullptr);
  for (const Step& step : steps) {
    SCOPED_TRACE(step.name);
    NodeSpec spec;
    spec.name = "gpu-a";
    spec.topology = step.topology;
    spec.labels = step.labels;
    ASSERT_TRUE(store.UpsertNode(spec).ok());
    const NodeRecord* r = store.snapshot()->Find("gpu-a");
    EXPECT_EQ(r->topology_generation, step.want_generation);
    EXPECT_EQ(r->topology_fingerprint == 0, step.topology == nullptr);
    EXPECT_EQ(r->topology, step.topology);
  }
}

TEST(ClusterStoreTest, ClassKeysGroupIdenticalNodesAndSplitOnAnyDifference) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(PresetNode("a", std::string(kHgx), {{"pool", "p1"}})).ok());
  ASSERT_TRUE(store.UpsertNode(PresetNode("b", std::string(kHgx), {{"pool", "p1"}})).ok());
  ASSERT_TRUE(store.UpsertNode(PresetNode("c", std::string(kHgx), {{"pool", "p2"}})).ok());
  ASSERT_TRUE(store.UpsertNode(PresetNode("d", std::string(kHgx), {{"pool", "p1"}}, false)).ok());
  ASSERT_TRUE(store.UpsertNode(PresetNode("e", std::string(kInference), {{"pool", "p1"}})).ok());
  auto key = [&](const char* n) { return store.snapshot()->Find(n)->class_key; };
  EXPECT_EQ(key("a"), key("b"));
  EXPECT_NE(key("a"), key("c"));  // labels
  EXPECT_NE(key("a"), key("d"));  // schedulability
  EXPECT_NE(key("a"), key("e"));  // hardware
  // Label keys and values are length-prefixed: {"ab": "c"} is not {"a": "bc"}.
  ASSERT_TRUE(store.UpsertNode(PresetNode("f", std::string(kHgx), {{"ab", "c"}})).ok());
  ASSERT_TRUE(store.UpsertNode(PresetNode("g", std::string(kHgx), {{"a", "bc"}})).ok());
  EXPECT_NE(key("f"), key("g"));

  ASSERT_TRUE(store.Bind("a", "u1", Take(Whole({0}))).ok());
  EXPECT_NE(key("a"), key("b"));  // allocation
  ASSERT_TRUE(store.Bind("b", "u2", Take(Whole({1}))).ok());
  EXPECT_NE(key("a"), key("b"));  // a different GPU is a different state
  ASSERT_TRUE(store.Release("u2").ok());
  ASSERT_TRUE(store.Bind("b", "u3", Take(Whole({0}))).ok());
  EXPECT_EQ(key("a"), key("b"));  // the same GPU taken: the same state again
  ASSERT_TRUE(store.Release("u1").ok());
  ASSERT_TRUE(store.Release("u3").ok());
  EXPECT_EQ(key("a"), key("b"));
  // Released back to empty vectors: the same key as never allocated (and as all-false vectors).
  NodeRecord padded = *store.snapshot()->Find("a");
  EXPECT_EQ(padded.allocated, NodeAllocation{});
  padded.allocated.gpu_exclusive.assign(8, false);
  padded.allocated.nic_used.assign(9, false);
  padded.allocated.gpu_shares.assign(8, GpuShareUsage{});
  EXPECT_EQ(ComputeClassKey(padded), key("a"));
  // Each record carries the key of its content.
  for (const auto& r : store.snapshot()->nodes()) EXPECT_EQ(r->class_key, ComputeClassKey(*r)) << r->name;
}

// Each record carries its position under the configured tier labels and its free devices,
// kept up to date on every change, so that a pool pod's pass over every node reads no label.
TEST(ClusterStoreTest, RecordsCarryTheirPositionAndFreeDevices) {
  ClusterStore store(nullptr, StoreOptions{.tier_labels = {"leaf", "spine"}});
  ASSERT_TRUE(store.UpsertNode(PresetNode("a", std::string(kHgx), {{"leaf", "l1"}, {"spine", "s1"}})).ok());
  ASSERT_TRUE(store.UpsertNode(PresetNode("b", std::string(kInference), {{"spine", "s1"}})).ok());
  auto record = [&](const char* n) { return store.snapshot()->Find(n); };
  EXPECT_EQ(store.snapshot()->tier_labels(), (std::vector<std::string>{"leaf", "spine"}));
  EXPECT_EQ(record("a")->position, (pd::Location{"a", {"l1", "s1"}}));
  EXPECT_EQ(record("b")->position, (pd::Location{"b", {"", "s1"}}));  // a missing label: no domain
  EXPECT_EQ(record("a")->free_gpus, 8);
  EXPECT_EQ(record("a")->free_rdma_nics, 8);  // the Ethernet NIC is not RDMA
  EXPECT_EQ(record("b")->free_gpus, 4);
  EXPECT_EQ(record("b")->free_rdma_nics, 0);
  // A bind (whole GPUs and NICs, a share) and a release move the counts; a share takes its GPU.
  ASSERT_TRUE(store.Bind("a", "u1", Take(Whole({0, 1}, {0}))).ok());
  ASSERT_TRUE(store.Bind("a", "u2", Take(Share(2, 1024))).ok());
  EXPECT_EQ(record("a")->free_gpus, 5);
  EXPECT_EQ(record("a")->free_rdma_nics, 7);
  ASSERT_TRUE(store.Release("u1").ok());
  EXPECT_EQ(record("a")->free_gpus, 7);
  EXPECT_EQ(record("a")->free_rdma_nics, 8);
  // Relabelled: the position follows.
  ASSERT_TRUE(store.UpsertNode(PresetNode("a", std::string(kHgx), {{"leaf", "l2"}, {"spine", "s1"}})).ok());
  EXPECT_EQ(record("a")->position, (pd::Location{"a", {"l2", "s1"}}));
  EXPECT_EQ(record("a")->free_gpus, 7);  // allocations kept
  // Views read the positions only under the same tiers, in the same order.
  pd::NetworkConfig network;
  network.tiers = {pd::Tier{"leaf", pd::PathKind::kLeaf}, pd::Tier{"spine", pd::PathKind::kSpine}};
  EXPECT_TRUE(PositionsResolvedFor(*store.snapshot(), network));
  std::swap(network.tiers[0], network.tiers[1]);
  EXPECT_FALSE(PositionsResolvedFor(*store.snapshot(), network));
  EXPECT_FALSE(PositionsResolvedFor(*ClusterStore(nullptr).snapshot(), network));
}

TEST(ClusterStoreTest, ClassLabelsLeaveOtherLabelsOutOfTheClassKey) {
  // Only the class labels count (given unsorted, with a repeat); `serve` gives none.
  ClusterStore store(nullptr,
                     StoreOptions{.class_labels = std::vector<std::string>{"leaf", "clique", "leaf"}});
  const auto node = [&](const char* name, std::map<std::string, std::string> labels) {
    labels.emplace("kubernetes.io/hostname", name);  // unique per node, as in every real cluster
    ASSERT_TRUE(store.UpsertNode(PresetNode(name, std::string(kHgx), std::move(labels))).ok());
  };
  node("a", {{"leaf", "l1"}, {"clique", "c1"}, {"instance-id", "i-1"}});
  node("b", {{"leaf", "l1"}, {"clique", "c1"}, {"instance-id", "i-2"}});
  node("c", {{"leaf", "l2"}, {"clique", "c1"}});
  node("d", {{"leaf", "l1"}});
  node("e", {{"leaf", "l1"}, {"clique", ""}});
  auto key = [&](const char* n) { return store.snapshot()->Find(n)->class_key; };
  EXPECT_EQ(key("a"), key("b"));  // hostname and other labels left out
  EXPECT_NE(key("a"), key("c"));  // a class label's value
  EXPECT_NE(key("a"), key("d"));  // a class label missing
  EXPECT_NE(key("d"), key("e"));  // missing is not empty
  // Allocation and the rest still split classes; each record carries its key.
  ASSERT_TRUE(store.Bind("a", "u1", Take(Whole({0}))).ok());
  EXPECT_NE(key("a"), key("b"));
  const std::vector<std::string> sorted = {"clique", "leaf"};
  for (const auto& r : store.snapshot()->nodes())
    EXPECT_EQ(r->class_key, ComputeClassKey(*r, &sorted)) << r->name;
  // Without class labels every label counts, the hostname included.
  ClusterStore all(nullptr);
  ASSERT_TRUE(all.UpsertNode(PresetNode("a", std::string(kHgx), {{"kubernetes.io/hostname", "a"}})).ok());
  ASSERT_TRUE(all.UpsertNode(PresetNode("b", std::string(kHgx), {{"kubernetes.io/hostname", "b"}})).ok());
  EXPECT_NE(all.snapshot()->Find("a")->class_key, all.snapshot()->Find("b")->class_key);
}

TEST(ClusterStoreTest, AnOldSnapshotKeepsItsContentAfterABind) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  const auto before = store.snapshot();
  const NodeRecord* old_record = before->Find("gpu-a");
  const NodeRecord old_copy = *old_record;
  ASSERT_TRUE(store.Bind("gpu-a", "u1", Take(Whole({0, 1}, {0}))).ok());
  EXPECT_EQ(before->version(), 1u);
  EXPECT_EQ(before->Find("gpu-a"), old_record);
  EXPECT_EQ(old_record->allocated, old_copy.allocated);
  EXPECT_TRUE(old_record->pods.empty());
  EXPECT_EQ(old_record->allocation_version, 0u);
  const auto after = store.snapshot();
  EXPECT_EQ(after->version(), 2u);
  EXPECT_NE(after->Find("gpu-a"), old_record);
  EXPECT_TRUE(GpuExclusive(after->Find("gpu-a")->allocated, 1));
}

TEST(ClusterStoreTest, BindPublishesPersistsAndIndexesThePod) {
  FakePersistence persistence;
  ClusterStore store(&persistence);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  ASSERT_TRUE(store.UpsertNode(Node("gpu-b")).ok());
  int decided = 0;
  auto decide = [&](const NodeRecord& r) -> Result<PodAllocation> {
    ++decided;
    EXPECT_EQ(r.name, "gpu-a");
    PodAllocation a;
    a.pod_namespace = "ml";
    a.pod_name = "trainer-0";
    a.delta = Whole({2, 3}, {1});
    a.worst_class = LinkClass::kPXB;
    a.topology_generation = 77;  // the store sets the real one
    return a;
  };
  const auto bound = store.Bind("gpu-a", "uid-1", decide);
  ASSERT_TRUE(bound.ok()) << bound.error().message();
  EXPECT_EQ(bound->kind, BindKind::kBound);
  EXPECT_EQ(bound->allocation.uid, "uid-1");
  EXPECT_EQ(bound->allocation.node, "gpu-a");
  EXPECT_EQ(bound->allocation.pod_name, "trainer-0");
  EXPECT_EQ(bound->allocation.topology_generation, 1);
  EXPECT_EQ(bound->allocation.worst_class, LinkClass::kPXB);
  EXPECT_EQ(decided, 1);

  const NodeRecord* r = store.snapshot()->Find("gpu-a");
  EXPECT_EQ(r->allocation_version, 1u);
  EXPECT_EQ(r->pods, std::vector<std::string>{"uid-1"});
  EXPECT_TRUE(GpuExclusive(r->allocated, 2));
  EXPECT_TRUE(GpuExclusive(r->allocated, 3));
  EXPECT_FALSE(GpuExclusive(r->allocated, 0));
  EXPECT_TRUE(NicUsed(r->allocated, 1));
  EXPECT_EQ(store.snapshot()->Find("gpu-b")->allocation_version, 0u);
  EXPECT_EQ(store.FindPod("uid-1"), bound->allocation);
  EXPECT_EQ(store.pod_count(), 1u);
  ASSERT_EQ(persistence.binds().size(), 1u);
  EXPECT_EQ(persistence.binds()[0], bound->allocation);

  // The next decision sees the first pod's devices.
  const auto second = store.Bind("gpu-a", "uid-2", [](const NodeRecord& rec) -> Result<PodAllocation> {
    if (!GpuExclusive(rec.allocated, 2)) return Error("decide saw a stale record");
    PodAllocation a;
    a.delta = Whole({4});
    return a;
  });
  ASSERT_TRUE(second.ok()) << second.error().message();
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->pods, (std::vector<std::string>{"uid-1", "uid-2"}));
}

TEST(ClusterStoreTest, ARetriedBindIsAlreadyBoundAndChangesNothing) {
  FakePersistence persistence;
  ClusterStore store(&persistence);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  const auto first = store.Bind("gpu-a", "uid-1", Take(Whole({0})));
  ASSERT_TRUE(first.ok());
  const std::uint64_t version = store.snapshot()->version();
  int decided = 0;
  const auto retry = store.Bind("gpu-a", "uid-1", [&](const NodeRecord&) -> Result<PodAllocation> {
    ++decided;
    return Error("must not be asked");
  });
  ASSERT_TRUE(retry.ok()) << retry.error().message();
  EXPECT_EQ(retry->kind, BindKind::kAlreadyBound);
  EXPECT_EQ(retry->allocation, first->allocation);
  EXPECT_EQ(decided, 0);
  EXPECT_EQ(store.snapshot()->version(), version);
  EXPECT_EQ(persistence.binds().size(), 1u);
}

TEST(ClusterStoreTest, BindingAPodBoundElsewhereIsAConflict) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  ASSERT_TRUE(store.UpsertNode(Node("gpu-b")).ok());
  ASSERT_TRUE(store.Bind("gpu-a", "uid-1", Take(Whole({0}))).ok());
  const auto other = store.Bind("gpu-b", "uid-1", Take(Whole({0})));
  ASSERT_FALSE(other.ok());
  EXPECT_TRUE(other.error().message().starts_with(kConflictTag)) << other.error().message();
  EXPECT_NE(other.error().message().find("gpu-a"), std::string::npos);
  EXPECT_EQ(store.snapshot()->Find("gpu-b")->allocation_version, 0u);
  EXPECT_EQ(store.FindPod("uid-1")->node, "gpu-a");
}

TEST(ClusterStoreTest, BindErrorsWithoutAChange) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  NodeSpec bare;
  bare.name = "bare";
  ASSERT_TRUE(store.UpsertNode(bare).ok());
  struct Case {
    const char* name;
    std::string node;
    std::string uid;
    ClusterStore::Decide decide;
    std::string want;  // the whole message, or a part of it
    bool exact;
  };
  const Case cases[] = {
      {"decide's error passes through as is", "gpu-a", "u1",
       [](const NodeRecord&) -> Result<PodAllocation> { return Error("node does not fit: 2 GPUs free"); },
       "node does not fit: 2 GPUs free", true},
      {"unknown node", "gpu-z", "u1", Take(Whole({0})), "unknown node gpu-z", true},
      {"empty UID", "gpu-a", "", Take(Whole({0})), "UID is empty", false},
      {"no decision function", "gpu-a", "u1", nullptr, "no decision", false},
      {"a decision for another pod", "gpu-a", "u1",
       [](const NodeRecord&) -> Result<PodAllocation> { return Allocation("u9", "gpu-a", Whole({0})); },
       "not pod u1", false},
      {"a decision for another node", "gpu-a", "u1",
       [](const NodeRecord&) -> Result<PodAllocation> { return Allocation("u1", "gpu-b", Whole({0})); },
       "on node gpu-b", false},
      {"devices on a node without topology", "bare", "u1", Take(Whole({0})), "has published no topology",
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::uint64_t version = store.snapshot()->version();
    const auto bound = store.Bind(c.node, c.uid, c.decide);
    ASSERT_FALSE(bound.ok());
    if (c.exact) {
      EXPECT_EQ(bound.error().message(), c.want);
    } else {
      EXPECT_NE(bound.error().message().find(c.want), std::string::npos) << bound.error().message();
    }
    EXPECT_EQ(store.snapshot()->version(), version);
    EXPECT_EQ(store.pod_count(), 0u);
  }
  // A pod with no devices binds even to a node without topology (nothing to check).
  EXPECT_TRUE(store.Bind("bare", "u1", Take({})).ok());
}

framework::AllocationDelta Shares(int gpu, int count, std::int64_t memory_mib, std::int64_t cores) {
  framework::AllocationDelta d;
  d.shares.emplace_back(gpu, GpuShareUsage{count, memory_mib, cores});
  return d;
}

TEST(ClusterStoreTest, CapacityViolationsAreRejectedWithNothingChanged) {
  struct Case {
    const char* name;
    std::string_view preset;
    std::vector<framework::AllocationDelta> before;  // bound first, each as its own pod
    framework::AllocationDelta offending;
    std::string want;
  };
  const Case cases[] = {
      {"exclusive GPU taken twice", kHgx, {Whole({0, 1})}, Whole({1, 2}), "GPU1 is not free"},
      {"NIC taken twice", kHgx, {Whole({0}, {3})}, Whole({1}, {3}), "NIC mlx5_3 is in use"},
      // max_shares_per_gpu is 3 in this test: 2 + 2 = 4 shares.
      {"shares over the count",
       kHgx,
       {Shares(4, 2, 1000, 0)},
       Shares(4, 2, 1000, 0),
       "GPU4 would carry 4 shares, over its limit of 3"},
      {"one pod's share count over the limit", kHgx, {}, Shares(4, 4, 1000, 0), "share count must be 1 to 3"},
      // 30000 + 20000 > 46068 MiB on an L40S.
      {"share memory over the card",
       kInference,
       {Share(0, 30000)},
       Share(0, 20000),
       "GPU0 shares would use 50000 MiB, over its 46068 MiB"},
      {"share cores over the GPU",
       kHgx,
       {Share(5, 1000, 6000)},
       Share(5, 1000, 5000),
       "GPU5 shares would use 11000 cores, over 10000"},
      {"shares on a whole GPU", kHgx, {Whole({6})}, Share(6, 1000), "GPU6 is held whole"},
      {"whole on a shared GPU", kHgx, {Share(6, 1000)}, Whole({6}), "GPU6 is not free"},
      {"GPU out of range", kHgx, {}, Whole({8}), "GPU index 8 out of range"},
      {"NIC out of range", kHgx, {}, Whole({0}, {9}), "NIC index 9 out of range"},
      {"negative GPU index", kHgx, {}, Whole({-1}), "GPU index -1 out of range"},
      {"a GPU twice in one pod", kHgx, {}, Whole({3, 3}), "names a GPU twice"},
      {"a GPU whole and shared in one pod",
       kHgx,
       {},
       [] {
         auto d = Whole({3});
         d.shares.emplace_back(3, GpuShareUsage{1, 10, 0});
         return d;
       }(),
       "names a GPU twice"},
      {"a NIC twice in one pod", kHgx, {}, Whole({0}, {2, 2}), "names a NIC twice"},
      {"negative shares", kHgx, {Share(2, 1000)}, Shares(2, -1, 0, 0), "share count must be 1 to 3"},
      {"negative memory", kHgx, {Share(2, 1000)}, Shares(2, 1, -1000, 0), "out of range"},
      {"negative cores", kHgx, {Share(2, 1000, 500)}, Shares(2, 1, 0, -500), "out of range"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FakePersistence persistence;
    ClusterStore store(&persistence, StoreOptions{.max_shares_per_gpu = 3});
    ASSERT_TRUE(store.UpsertNode(Node("gpu-a", c.preset)).ok());
    for (std::size_t i = 0; i < c.before.size(); ++i) {
      const auto b = store.Bind("gpu-a", "setup-" + std::to_string(i), Take(c.before[i]));
      ASSERT_TRUE(b.ok()) << b.error().message();
    }
    const auto before = store.snapshot();
    const auto bound = store.Bind("gpu-a", "offender", Take(c.offending));
    ASSERT_FALSE(bound.ok());
    EXPECT_NE(bound.error().message().find(c.want), std::string::npos) << bound.error().message();
    EXPECT_TRUE(bound.error().message().starts_with("node gpu-a: ")) << bound.error().message();
    EXPECT_EQ(store.snapshot(), before);                     // nothing published
    EXPECT_EQ(persistence.binds().size(), c.before.size());  // nothing persisted
    EXPECT_FALSE(store.FindPod("offender").has_value());
    EXPECT_EQ(RecordViolation(*store.snapshot()->Find("gpu-a"), 3), "");
    // The same checks guard Restore.
    const Status restored = store.Restore(Allocation("offender", "gpu-a", c.offending));
    ASSERT_FALSE(restored.ok());
    EXPECT_NE(restored.error().message().find(c.want), std::string::npos) << restored.error().message();
    EXPECT_EQ(store.snapshot(), before);
  }
}

TEST(ClusterStoreTest, SharesWithinCapacityStackOnOneGpu) {
  ClusterStore store(nullptr, StoreOptions{.max_shares_per_gpu = 3});
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a", kInference)).ok());
  // 3 x 15000 = 45000 <= 46068 MiB; 3 x 3000 = 9000 <= 10000 cores.
  for (const char* uid : {"s1", "s2", "s3"})
    ASSERT_TRUE(store.Bind("gpu-a", uid, Take(Share(1, 15000, 3000))).ok());
  EXPECT_EQ(GpuShares(store.snapshot()->Find("gpu-a")->allocated, 1), (GpuShareUsage{3, 45000, 9000}));
  ASSERT_TRUE(store.Release("s2").ok());
  EXPECT_EQ(GpuShares(store.snapshot()->Find("gpu-a")->allocated, 1), (GpuShareUsage{2, 30000, 6000}));
}

TEST(ClusterStoreTest, APersistenceFailureChangesNothing) {
  FakePersistence persistence;
  ClusterStore store(&persistence);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  persistence.FailWith("disk full");
  const auto before = store.snapshot();
  const auto bound = store.Bind("gpu-a", "uid-1", Take(Whole({0})));
  ASSERT_FALSE(bound.ok());
  EXPECT_NE(bound.error().message().find("disk full"), std::string::npos);
  EXPECT_EQ(store.snapshot(), before);
  EXPECT_FALSE(store.FindPod("uid-1").has_value());
  // The UID is not left claimed: once the disk recovers, the same pod binds.
  persistence.FailWith("");
  const auto retry = store.Bind("gpu-a", "uid-1", Take(Whole({0})));
  ASSERT_TRUE(retry.ok()) << retry.error().message();
  EXPECT_EQ(retry->kind, BindKind::kBound);
  // And a failed release keeps the pod bound.
  persistence.FailWith("disk full");
  const auto after_bind = store.snapshot();
  const auto released = store.Release("uid-1");
  ASSERT_FALSE(released.ok());
  EXPECT_NE(released.error().message().find("disk full"), std::string::npos);
  EXPECT_EQ(store.snapshot(), after_bind);
  EXPECT_TRUE(store.FindPod("uid-1").has_value());
}

TEST(ClusterStoreTest, ReleaseGivesTheDevicesBack) {
  FakePersistence persistence;
  ClusterStore store(&persistence);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  const auto one = store.Bind("gpu-a", "u1", Take(Whole({0, 1}, {0})));
  const auto two = store.Bind("gpu-a", "u2", Take(Share(2, 8000, 2500)));
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(two.ok());
  const auto released = store.Release("u1");
  ASSERT_TRUE(released.ok());
  ASSERT_TRUE(released->has_value());
  EXPECT_EQ(**released, one->allocation);
  ASSERT_EQ(persistence.releases().size(), 1u);
  EXPECT_EQ(persistence.releases()[0], one->allocation);
  const NodeRecord* r = store.snapshot()->Find("gpu-a");
  EXPECT_EQ(r->allocation_version, 3u);  // bind, bind, release
  EXPECT_EQ(r->pods, std::vector<std::string>{"u2"});
  EXPECT_FALSE(GpuExclusive(r->allocated, 0));
  EXPECT_FALSE(NicUsed(r->allocated, 0));
  EXPECT_EQ(GpuShares(r->allocated, 2), (GpuShareUsage{1, 8000, 2500}));
  EXPECT_FALSE(store.FindPod("u1").has_value());
  EXPECT_EQ(store.pod_count(), 1u);

  const auto unknown = store.Release("u1");
  ASSERT_TRUE(unknown.ok());
  EXPECT_FALSE(unknown->has_value());
  EXPECT_EQ(persistence.releases().size(), 1u);

  ASSERT_TRUE(store.Release("u2").ok());
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->allocated, NodeAllocation{});
  // Devices are free again for another pod.
  EXPECT_TRUE(store.Bind("gpu-a", "u3", Take(Whole({0, 1, 2}, {0}))).ok());
}

// A pod the source reports gone is released without asking persistence to undo anything,
// even when persistence is failing (there is nothing left to write).
TEST(ClusterStoreTest, ReleaseWithoutPersistingForPodsAlreadyGone) {
  FakePersistence persistence;
  ClusterStore store(&persistence);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  ASSERT_TRUE(store.Bind("gpu-a", "u1", Take(Whole({0}))).ok());
  persistence.FailWith("API server down");
  const auto released = store.Release("u1", /*persist=*/false);
  ASSERT_TRUE(released.ok()) << released.error().message();
  ASSERT_TRUE(released->has_value());
  EXPECT_TRUE(persistence.releases().empty());
  EXPECT_FALSE(store.FindPod("u1").has_value());
  EXPECT_FALSE(GpuExclusive(store.snapshot()->Find("gpu-a")->allocated, 0));
}

TEST(ClusterStoreTest, RestoreIsIdempotentAndChecked) {
  FakePersistence persistence;
  ClusterStore store(&persistence);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  ASSERT_TRUE(store.UpsertNode(Node("gpu-b")).ok());
  PodAllocation a = Allocation("u1", "gpu-a", Whole({0}, {0}));
  a.topology_generation = 5;  // kept as persisted
  ASSERT_TRUE(store.Restore(a).ok());
  EXPECT_EQ(store.FindPod("u1"), a);
  const auto after_first = store.snapshot();
  EXPECT_TRUE(GpuExclusive(after_first->Find("gpu-a")->allocated, 0));
  // Again: a no-op.
  const Status again = store.Restore(a);
  EXPECT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(store.snapshot(), after_first);
  // Restores never persist.
  EXPECT_TRUE(persistence.binds().empty());

  struct Case {
    const char* name;
    PodAllocation allocation;
    std::string want;
  };
  const Case cases[] = {
      {"same UID, other devices", Allocation("u1", "gpu-a", Whole({1})), "different allocation"},
      {"same UID, other node", Allocation("u1", "gpu-b", Whole({0})), std::string(kConflictTag)},
      {"unknown node", Allocation("u2", "gpu-z", Whole({0})), "unknown node gpu-z"},
      {"taken device", Allocation("u2", "gpu-a", Whole({0})), "GPU0 is not free"},
      {"empty UID", Allocation("", "gpu-a", Whole({1})), "UID is empty"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Status s = store.Restore(c.allocation);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message().find(c.want), std::string::npos) << s.error().message();
    EXPECT_EQ(store.snapshot(), after_first);
  }
  // A restored pod behaves like a bound one.
  const auto retry = store.Bind("gpu-a", "u1", Take(Whole({5})));
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->kind, BindKind::kAlreadyBound);
}

// Fail closed: a record the source could not read back holds the free devices it
// still names and keeps its node out of new placements until the pod is gone or readable.
// Fail closed across the Node's own updates: a label change, a cordon, a batch upsert (a
// relist) or a new NodeTopology object must not lift a hold that only the pod's end or a
// readable record may lift.
TEST(ClusterStoreTest, ANodeUpdateKeepsItsHold) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  PodAllocation held = Allocation("bad", "gpu-a", Whole({1}, {1}));
  held.hold = "toposched.io/allocation cannot be read back";
  ASSERT_TRUE(store.Hold(held).ok());
  ASSERT_TRUE(store.snapshot()->Find("gpu-a")->held());

  NodeSpec relabelled = Node("gpu-a");
  relabelled.labels["team"] = "llm";
  ASSERT_TRUE(store.UpsertNode(relabelled).ok());
  EXPECT_TRUE(store.snapshot()->Find("gpu-a")->held()) << "after a label change";
  NodeSpec cordoned = Node("gpu-a");
  cordoned.schedulable = false;
  ASSERT_TRUE(store.UpsertNodes({cordoned}).ok());
  EXPECT_TRUE(store.snapshot()->Find("gpu-a")->held()) << "after a cordon in a batch";
  NodeSpec retopo = Node("gpu-a");
  retopo.topology = std::make_shared<const NodeTopology>(*retopo.topology);  // another object, same hardware
  ASSERT_TRUE(store.UpsertNode(retopo).ok());
  const NodeRecord* a = store.snapshot()->Find("gpu-a");
  EXPECT_TRUE(a->held()) << "after a new NodeTopology object";
  EXPECT_EQ(a->held_pods, std::vector<std::string>{"bad"});
  EXPECT_EQ(a->free_gpus, 0);
  EXPECT_EQ(a->free_rdma_nics, 0);

  // The pod's end lifts it, as before.
  ASSERT_TRUE(store.Release("bad", /*persist=*/false).ok());
  EXPECT_FALSE(store.snapshot()->Find("gpu-a")->held());
}

TEST(ClusterStoreTest, AHeldPodKeepsItsDevicesAndItsNodeUntilItIsGoneOrReadable) {
  FakePersistence persistence;
  ClusterStore store(&persistence);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  ASSERT_TRUE(store.UpsertNode(Node("gpu-b")).ok());
  ASSERT_TRUE(store.Restore(Allocation("ok", "gpu-a", Whole({0}, {0}))).ok());
  const std::uint64_t open_key = store.snapshot()->Find("gpu-b")->class_key;

  PodAllocation held = Allocation("bad", "gpu-a", Whole({0, 1}, {0, 1}));  // GPU0, mlx5_0 are "ok"'s
  held.delta.shares.emplace_back(3, GpuShareUsage{1, 1000, 5000});         // a named share: held whole
  EXPECT_FALSE(store.Hold(held).ok()) << "a hold needs a reason";
  held.hold = "toposched.io/allocation cannot be read back: nics[1]: ...";
  ASSERT_TRUE(store.Hold(held).ok());
  const auto snapshot = store.snapshot();
  const NodeRecord* a = snapshot->Find("gpu-a");
  EXPECT_TRUE(a->held());
  EXPECT_EQ(a->held_pods, std::vector<std::string>{"bad"});
  EXPECT_EQ(a->free_gpus, 0) << "a held node offers nothing to pool views";
  EXPECT_EQ(a->free_rdma_nics, 0);
  // The free named devices are taken whole; GPU0 and mlx5_0 stay "ok"'s alone (no oversubscription).
  EXPECT_TRUE(GpuExclusive(a->allocated, 1));
  EXPECT_TRUE(GpuExclusive(a->allocated, 3));
  EXPECT_TRUE(NicUsed(a->allocated, 1));
  EXPECT_EQ(store.FindPod("bad")->delta, Whole({1, 3}, {1}));
  EXPECT_NE(a->class_key, store.snapshot()->Find("gpu-b")->class_key);
  EXPECT_FALSE(snapshot->Find("gpu-b")->held());
  EXPECT_EQ(snapshot->Find("gpu-b")->class_key, open_key);
  EXPECT_TRUE(persistence.binds().empty()) << "a hold writes nothing";

  // Holding again with the same record changes nothing; a bind for the held pod is refused.
  ASSERT_TRUE(store.Hold(held).ok());
  EXPECT_EQ(store.snapshot(), snapshot);
  const auto rebind = store.Bind("gpu-a", "bad", Take(Whole({5})));
  ASSERT_FALSE(rebind.ok());
  EXPECT_NE(rebind.error().message().find("cannot be read back"), std::string::npos);
  // A scheduler's release (persisted) cannot free it: only the pod's end can.
  EXPECT_FALSE(store.Release("bad").ok());
  EXPECT_TRUE(store.snapshot()->Find("gpu-a")->held());

  // The record became readable: Restore replaces the hold in one step (here: GPU 2 only).
  ASSERT_TRUE(store.Restore(Allocation("bad", "gpu-a", Whole({2}))).ok());
  EXPECT_FALSE(store.snapshot()->Find("gpu-a")->held());
  EXPECT_TRUE(store.FindPod("bad")->hold.empty());
  EXPECT_FALSE(GpuExclusive(store.snapshot()->Find("gpu-a")->allocated, 1));
  EXPECT_TRUE(GpuExclusive(store.snapshot()->Find("gpu-a")->allocated, 2));

  // A readable record that does not fit (GPU0 is "ok"'s) leaves an existing hold as it was.
  held.delta = Whole({4});
  ASSERT_TRUE(store.Hold(held).ok());
  const auto before_misfit = store.snapshot();
  EXPECT_FALSE(store.Restore(Allocation("bad", "gpu-a", Whole({0}))).ok());
  EXPECT_EQ(store.snapshot(), before_misfit);
  EXPECT_FALSE(store.FindPod("bad")->hold.empty());

  // The pod is gone (the source's report, not persisted): devices and node are free again.
  const auto released = store.Release("bad", /*persist=*/false);
  ASSERT_TRUE(released.ok());
  EXPECT_FALSE(store.snapshot()->Find("gpu-a")->held());
  EXPECT_FALSE(GpuExclusive(store.snapshot()->Find("gpu-a")->allocated, 4));
  EXPECT_TRUE(persistence.releases().empty());
  PodAllocation elsewhere = Allocation("x", "gpu-z", Whole({0}));
  elsewhere.hold = "unreadable";
  const Status unknown = store.Hold(elsewhere);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("unknown node gpu-z"), std::string::npos);
}

TEST(ClusterStoreTest, UpsertKeepsAllocationsAndReportsThoseThatNoLongerFit) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  ASSERT_TRUE(store.Bind("gpu-a", "u1", Take(Whole({6, 7}, {7}))).ok());
  ASSERT_TRUE(store.Bind("gpu-a", "u2", Take(Whole({0}))).ok());
  // Same hardware, new labels: allocations kept, no complaint.
  ASSERT_TRUE(store.UpsertNode(PresetNode("gpu-a", std::string(kHgx), {{"zone", "z"}})).ok());
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->pods, (std::vector<std::string>{"u1", "u2"}));
  // Smaller hardware (4 GPUs, 2 NICs): GPUs 6-7 and NIC 7 are gone.
  const Status shrunk = store.UpsertNode(Node("gpu-a", kInference));
  ASSERT_FALSE(shrunk.ok());
  EXPECT_NE(shrunk.error().message().find("GPU6 is allocated but gone"), std::string::npos)
      << shrunk.error().message();
  EXPECT_NE(shrunk.error().message().find("NIC7 is allocated but gone"), std::string::npos);
  const NodeRecord* r = store.snapshot()->Find("gpu-a");
  EXPECT_EQ(r->topology, PresetTopology(std::string(kInference)));  // updated anyway
  EXPECT_EQ(r->topology_generation, 2);
  EXPECT_TRUE(GpuExclusive(r->allocated, 7));  // kept
  EXPECT_EQ(store.pod_count(), 2u);
  // Releasing the misfit works; what remains fits.
  ASSERT_TRUE(store.Release("u1").ok());
  EXPECT_TRUE(store.UpsertNode(Node("gpu-a", kInference)).ok());
}

TEST(ClusterStoreTest, RemoveNodeDropsItsPods) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  ASSERT_TRUE(store.UpsertNode(Node("gpu-b")).ok());
  ASSERT_TRUE(store.Bind("gpu-a", "u1", Take(Whole({0}))).ok());
  ASSERT_TRUE(store.Bind("gpu-b", "u2", Take(Whole({0}))).ok());
  store.RemoveNode("gpu-a");
  store.RemoveNode("gpu-unknown");  // no-op
  EXPECT_EQ(store.snapshot()->size(), 1u);
  EXPECT_EQ(store.snapshot()->Find("gpu-a"), nullptr);
  EXPECT_EQ(store.snapshot()->Find("gpu-b")->name, "gpu-b");  // the index was rebuilt
  EXPECT_FALSE(store.FindPod("u1").has_value());
  EXPECT_TRUE(store.FindPod("u2").has_value());
  EXPECT_EQ(store.pod_count(), 1u);
  const auto bound = store.Bind("gpu-a", "u3", Take(Whole({0})));
  ASSERT_FALSE(bound.ok());
  EXPECT_EQ(bound.error().message(), "unknown node gpu-a");
  const auto released = store.Release("u1");
  ASSERT_TRUE(released.ok());
  EXPECT_FALSE(released->has_value());
  // Back again: a fresh node.
  ASSERT_TRUE(store.UpsertNode(Node("gpu-a")).ok());
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->allocated, NodeAllocation{});
  EXPECT_TRUE(store.Bind("gpu-a", "u1", Take(Whole({0}))).ok());
}

TEST(ClusterStoreTest, SyncedFlag) {
  ClusterStore store(nullptr);
  EXPECT_FALSE(store.synced());
  store.SetSynced(true);
  EXPECT_TRUE(store.synced());
}

// ---- CPU (SetPodCpu, NodeSpec::cpu_allocatable_milli) ----

NodeSpec CpuNode(const std::string& name, std::int64_t allocatable_milli) {
  NodeSpec spec = Node(name);
  spec.cpu_allocatable_milli = allocatable_milli;
  return spec;
}

std::int64_t Requested(const ClusterStore& store, std::string_view node) {
  const NodeRecord* r = store.snapshot()->Find(node);
  return r == nullptr ? -2 : r->cpu_requested_milli;
}

TEST(ClusterStoreCpuTest, RequestsAddUpPerNode) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNodes({CpuNode("gpu-a", 64'000), CpuNode("gpu-b", 64'000)}).ok());
  store.SetPodCpu("u1", "gpu-a", 1'500);
  store.SetPodCpu("u2", "gpu-a", 250);
  store.SetPodCpu("u3", "gpu-b", 4'000);
  EXPECT_EQ(Requested(store, "gpu-a"), 1'750);  // 1500 + 250
  EXPECT_EQ(Requested(store, "gpu-b"), 4'000);
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->cpu_free_milli(), 62'250);  // 64000 - 1750
  store.SetPodCpu("u2", "gpu-a", 750);          // the same pod, a new request (an in-place resize)
  EXPECT_EQ(Requested(store, "gpu-a"), 2'250);  // 1500 + 750
}

TEST(ClusterStoreCpuTest, APodMovingNodesLeavesTheOldAndJoinsTheNew) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNodes({CpuNode("gpu-a", 8'000), CpuNode("gpu-b", 8'000)}).ok());
  store.SetPodCpu("u1", "gpu-a", 3'000);
  store.SetPodCpu("u2", "gpu-a", 1'000);
  store.SetPodCpu("u1", "gpu-b", 3'000);
  EXPECT_EQ(Requested(store, "gpu-a"), 1'000);
  EXPECT_EQ(Requested(store, "gpu-b"), 3'000);
}

TEST(ClusterStoreCpuTest, AFinishedPodRequestsNothing) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(CpuNode("gpu-a", 8'000)).ok());
  store.SetPodCpu("u1", "gpu-a", 3'000);
  store.SetPodCpu("u2", "gpu-a", 1'000);
  store.SetPodCpu("u1", "", 3'000);  // no node: nothing, whatever the request says
  EXPECT_EQ(Requested(store, "gpu-a"), 1'000);
  store.SetPodCpu("u2", "gpu-a", 0);  // a request of 0 counts nothing either
  EXPECT_EQ(Requested(store, "gpu-a"), 0);
  store.SetPodCpu("u3", "gpu-a", -5);  // negative: nothing, not a credit
  EXPECT_EQ(Requested(store, "gpu-a"), 0);
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->cpu_free_milli(), 8'000);
}

TEST(ClusterStoreCpuTest, APodSeenBeforeItsNodeCountsWhenTheNodeComes) {
  ClusterStore store(nullptr);
  store.SetPodCpu("u1", "gpu-a", 2'000);
  store.SetPodCpu("u2", "gpu-a", 500);
  EXPECT_EQ(store.snapshot()->version(), 0u);  // no record to change: nothing published
  ASSERT_TRUE(store.UpsertNode(CpuNode("gpu-a", 16'000)).ok());
  EXPECT_EQ(Requested(store, "gpu-a"), 2'500);
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->cpu_free_milli(), 13'500);
}

// RemoveNode keeps the sum of the pods still bound to the name: the pod informer reports their
// end itself, and a node that comes back starts from what they ask.
TEST(ClusterStoreCpuTest, ANodeThatComesBackFindsItsPodsRequests) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(CpuNode("gpu-a", 16'000)).ok());
  store.SetPodCpu("u1", "gpu-a", 2'000);
  store.SetPodCpu("u2", "gpu-a", 1'000);
  store.RemoveNode("gpu-a");
  store.SetPodCpu("u2", "", 0);  // deleted while the node was away
  ASSERT_TRUE(store.UpsertNode(CpuNode("gpu-a", 16'000)).ok());
  EXPECT_EQ(Requested(store, "gpu-a"), 2'000);
}

TEST(ClusterStoreCpuTest, AllocatableComesFromUpsertNodeAndUpsertNodes) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(CpuNode("gpu-a", 64'000)).ok());
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->cpu_allocatable_milli, 64'000);
  ASSERT_TRUE(store.UpsertNodes({CpuNode("gpu-a", 63'500), CpuNode("gpu-b", 32'000), Node("gpu-c")}).ok());
  const auto snapshot = store.snapshot();
  EXPECT_EQ(snapshot->Find("gpu-a")->cpu_allocatable_milli, 63'500);
  EXPECT_EQ(snapshot->Find("gpu-b")->cpu_allocatable_milli, 32'000);
  EXPECT_EQ(snapshot->Find("gpu-c")->cpu_allocatable_milli, -1);  // a spec that does not say
}

// Nothing but the allocatable CPU changed (kubelet's reserved CPU reconfigured): the record
// and the snapshot follow, and the pods' requests stay.
TEST(ClusterStoreCpuTest, AChangeOfAllocatableAlonePublishes) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(CpuNode("gpu-a", 64'000)).ok());
  store.SetPodCpu("u1", "gpu-a", 4'000);
  const std::uint64_t before = store.snapshot()->version();
  ASSERT_TRUE(store.UpsertNode(CpuNode("gpu-a", 60'000)).ok());
  EXPECT_EQ(store.snapshot()->version(), before + 1);
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->cpu_allocatable_milli, 60'000);
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->cpu_free_milli(), 56'000);  // 60000 - 4000
}

TEST(ClusterStoreCpuTest, FreeCpuIsUnknownWithoutAllocatableAndNeverNegative) {
  NodeRecord r;
  EXPECT_EQ(r.cpu_free_milli(), -1);  // allocatable unknown
  r.cpu_requested_milli = 5'000;
  EXPECT_EQ(r.cpu_free_milli(), -1);  // still unknown, whatever is requested
  r.cpu_allocatable_milli = 4'000;
  EXPECT_EQ(r.cpu_free_milli(), 0);  // overcommitted (pods bound before a resize): floors at 0
  r.cpu_allocatable_milli = 8'000;
  EXPECT_EQ(r.cpu_free_milli(), 3'000);
}

TEST(ClusterStoreCpuTest, TheSnapshotsBriefsCarryFreeCpu) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNodes({CpuNode("gpu-a", 16'000), Node("gpu-b"), CpuNode("gpu-c", 8'000)}).ok());
  store.SetPodCpu("u1", "gpu-a", 6'000);
  store.SetPodCpu("u2", "gpu-c", 9'000);
  const auto snapshot = store.snapshot();
  ASSERT_EQ(snapshot->briefs().size(), 3u);
  EXPECT_EQ(snapshot->briefs()[0].cpu_free_milli, 10'000);  // 16000 - 6000
  EXPECT_EQ(snapshot->briefs()[1].cpu_free_milli, -1);      // no allocatable known
  EXPECT_EQ(snapshot->briefs()[2].cpu_free_milli, 0);       // 8000 - 9000, floored
  for (std::size_t i = 0; i < snapshot->size(); ++i) {
    EXPECT_EQ(snapshot->briefs()[i].cpu_free_milli, snapshot->nodes()[i]->cpu_free_milli()) << i;
  }
}

TEST(ClusterStoreCpuTest, AnUnchangedRequestPublishesNothing) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(CpuNode("gpu-a", 16'000)).ok());
  store.SetPodCpu("u1", "gpu-a", 1'000);
  const auto before = store.snapshot();
  store.SetPodCpu("u1", "gpu-a", 1'000);  // a pod update that did not touch its request
  store.SetPodCpu("u2", "", 0);           // a pending pod the store never counted
  store.SetPodCpu("u3", "gpu-a", 0);      // a pod asking no CPU
  store.SetPodCpus({});
  EXPECT_EQ(store.snapshot(), before);
  EXPECT_EQ(store.snapshot()->version(), before->version());
}

// A pod moving between two nodes and another's change, in one call: one snapshot.
TEST(ClusterStoreCpuTest, SetPodCpusPublishesOneSnapshotAndTheLastEntryOfAUidWins) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(
      store.UpsertNodes({CpuNode("gpu-a", 16'000), CpuNode("gpu-b", 16'000), CpuNode("gpu-c", 16'000)}).ok());
  const std::uint64_t before = store.snapshot()->version();
  const std::vector<ClusterStore::PodCpu> pods = {
      {"u1", "gpu-a", 1'000}, {"u2", "gpu-b", 2'000}, {"u1", "gpu-c", 3'000}, {"u3", "gpu-a", 500}};
  store.SetPodCpus(pods);
  EXPECT_EQ(store.snapshot()->version(), before + 1);
  EXPECT_EQ(Requested(store, "gpu-a"), 500);  // u1 moved on to gpu-c within the call
  EXPECT_EQ(Requested(store, "gpu-b"), 2'000);
  EXPECT_EQ(Requested(store, "gpu-c"), 3'000);
}

// Requests past kMaxPodCpuMilli count as that, so a node's sum stays exact below 2^23 such pods
// (the saturation past it is not exercised here: 2^23 pods take over a GiB).
TEST(ClusterStoreCpuTest, HugeRequestsAreClamped) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(CpuNode("gpu-a", 64'000)).ok());
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  store.SetPodCpu("u0", "gpu-a", kMax);
  store.SetPodCpu("u1", "gpu-a", kMax);
  EXPECT_EQ(Requested(store, "gpu-a"), 2 * ClusterStore::kMaxPodCpuMilli);
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->cpu_free_milli(), 0);
  store.SetPodCpu("u0", "", 0);
  EXPECT_EQ(Requested(store, "gpu-a"), ClusterStore::kMaxPodCpuMilli);
}

TEST(ClusterStoreCpuTest, CpuIsNotPartOfTheClassKey) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNodes({CpuNode("gpu-a", 64'000), CpuNode("gpu-b", 32'000), Node("gpu-c")}).ok());
  store.SetPodCpu("u1", "gpu-a", 12'000);
  const auto snapshot = store.snapshot();
  const std::uint64_t key = snapshot->Find("gpu-a")->class_key;
  EXPECT_EQ(snapshot->Find("gpu-b")->class_key, key);
  EXPECT_EQ(snapshot->Find("gpu-c")->class_key, key);
  EXPECT_EQ(snapshot->class_keys()[0], key);
}

// A bind or release rebuilds the record from the current one: the CPU fields stay.
TEST(ClusterStoreCpuTest, BindsAndReleasesKeepTheCpu) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(CpuNode("gpu-a", 64'000)).ok());
  store.SetPodCpu("u1", "gpu-a", 8'000);
  ASSERT_TRUE(store.Bind("gpu-a", "u1", Take(Whole({0}))).ok());
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->cpu_free_milli(), 56'000);
  ASSERT_TRUE(store.Release("u1").ok());
  EXPECT_EQ(store.snapshot()->Find("gpu-a")->cpu_free_milli(), 56'000);  // until the source says
}

// ---- concurrency ----

// Takes the first free devices the record shows (a well-behaved scheduler), or, when
// `reckless`, random devices regardless of what is taken (a stale cache): the store must turn
// those away whenever they collide.
ClusterStore::Decide FirstFree(int whole_gpus, int shares, bool reckless, std::uint64_t seed,
                               int max_shares) {
  return [=](const NodeRecord& r) -> Result<PodAllocation> {
    std::mt19937_64 rng(seed);
    const NodeTopology& t = *r.topology;
    const int gpus = static_cast<int>(t.gpus.size());
    const int rdma = t.RdmaNicCount();
    PodAllocation a;
    if (reckless) {
      for (int i = 0; i < whole_gpus; ++i) a.delta.exclusive_gpus.push_back(static_cast<int>(rng() % gpus));
      for (int i = 0; i < whole_gpus; ++i) a.delta.nics.push_back(static_cast<int>(rng() % rdma));
      for (int i = 0; i < shares; ++i) {
        a.delta.shares.emplace_back(static_cast<int>(rng() % gpus), GpuShareUsage{1, 30000, 4000});
      }
      return a;
    }
    for (int g = 0; g < gpus && static_cast<int>(a.delta.exclusive_gpus.size()) < whole_gpus; ++g) {
      if (GpuFree(r.allocated, g)) a.delta.exclusive_gpus.push_back(g);
    }
    for (int n = 0; n < rdma && static_cast<int>(a.delta.nics.size()) < whole_gpus; ++n) {
      if (!NicUsed(r.allocated, n)) a.delta.nics.push_back(n);
    }
    for (int g = 0; g < gpus && static_cast<int>(a.delta.shares.size()) < shares; ++g) {
      const GpuShareUsage u = GpuShares(r.allocated, g);
      if (!GpuExclusive(r.allocated, g) && u.shares < max_shares &&
          u.memory_mib + 30000 <= static_cast<std::int64_t>(t.gpus[static_cast<std::size_t>(g)].memory_mib) &&
          u.cores + 4000 <= kFullGpuCores) {
        a.delta.shares.emplace_back(g, GpuShareUsage{1, 30000, 4000});
      }
    }
    if (static_cast<int>(a.delta.exclusive_gpus.size()) < whole_gpus ||
        static_cast<int>(a.delta.nics.size()) < whole_gpus ||
        static_cast<int>(a.delta.shares.size()) < shares) {
      return Error("does not fit");
    }
    return a;
  };
}

// Pods moving between nodes on several threads while the nodes are upserted again and again
// (a relist): once all settle, each record's requested CPU is the sum of its pods' last requests,
// whatever the interleaving (a record is only written from a sum read under its node's lock).
TEST(ClusterStoreConcurrencyTest, CpuSumsSettleToThePodsLastRequests) {
  constexpr int kThreads = 4, kPodsPerThread = 16, kRounds = 300;
  const std::vector<std::string> nodes = {"gpu-a", "gpu-b", "gpu-c"};
  ClusterStore store(nullptr);
  std::atomic<bool> done{false};
  std::thread upserter([&] {
    while (!done.load()) {
      std::vector<NodeSpec> specs;
      for (const std::string& n : nodes) specs.push_back(CpuNode(n, 64'000));
      ASSERT_TRUE(store.UpsertNodes(std::move(specs)).ok());
      store.RemoveNode("gpu-c");  // and one node comes and goes
    }
  });
  std::vector<std::map<std::string, std::pair<std::string, std::int64_t>>> last(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
      for (int round = 0; round < kRounds; ++round) {
        const std::string uid = "t" + std::to_string(t) + "-" + std::to_string(rng() % kPodsPerThread);
        const std::size_t pick = rng() % (nodes.size() + 1);  // nodes.size(): finished
        const std::string node = pick < nodes.size() ? nodes[pick] : "";
        const std::int64_t milli = static_cast<std::int64_t>(rng() % 4000);
        store.SetPodCpu(uid, node, milli);
        last[static_cast<std::size_t>(t)][uid] = {node, node.empty() ? 0 : milli};
      }
    });
  }
  for (std::thread& th : threads) th.join();
  done.store(true);
  upserter.join();
  ASSERT_TRUE(store.UpsertNode(CpuNode("gpu-c", 64'000)).ok());
  std::map<std::string, std::int64_t> want;
  for (const auto& per_thread : last) {
    for (const auto& [uid, at] : per_thread) want[at.first] += at.second;
  }
  for (const std::string& n : nodes) EXPECT_EQ(Requested(store, n), want[n]) << n;
}

TEST(ClusterStoreConcurrencyTest, ParallelBindsAndReleasesNeverOversubscribe) {
  constexpr int kNodes = 4, kThreads = 16, kOpsPerThread = 2000, kUids = 256, kMaxShares = 4;
  FakePersistence persistence;
  ClusterStore store(&persistence, StoreOptions{.max_shares_per_gpu = kMaxShares});
  std::vector<std::string> nodes;
  for (int i = 0; i < kNodes; ++i) {
    nodes.push_back("gpu-" + std::to_string(i));
    ASSERT_TRUE(store.UpsertNode(Node(nodes.back())).ok());
  }
  const auto initial = store.snapshot();
  const std::vector<NodeRecord> initial_copy = [&] {
    std::vector<NodeRecord> v;
    for (const auto& r : initial->nodes()) v.push_back(*r);
    return v;
  }();

  std::atomic<bool> done{false};
  std::atomic<int> binds{0}, releases{0}, already{0}, conflicts{0}, rejected{0};
  std::mutex failures_mu;
  std::vector<std::string> failures;
  auto fail = [&](std::string what) {
    std::lock_guard lock(failures_mu);
    if (failures.size() < 10) failures.push_back(std::move(what));
  };

  // Checks every snapshot it can get while the writers run.
  std::thread reader([&] {
    std::uint64_t last_version = 0;
    int checked = 0;
    while (!done.load() || checked == 0) {
      const auto s = store.snapshot();
      if (s->version() < last_version) fail("snapshot version went backwards");
      last_version = s->version();
      if (s->size() != kNodes) fail("node count changed");
      for (const auto& r : s->nodes()) {
        if (const std::string v = RecordViolation(*r, kMaxShares); !v.empty()) fail(v);
      }
      ++checked;
      std::this_thread::yield();
    }
  });

  // Re-sends every node now and then, as a source does: binds must never be lost to it.
  const auto hgx = PresetTopology(std::string(kHgx));  // the preset cache is not thread-safe
  std::thread upserter([&] {
    for (int round = 0; !done.load(); ++round) {
      std::vector<NodeSpec> specs;
      for (const std::string& n : nodes) {
        specs.push_back(NodeSpec{n, hgx, {{"round", std::to_string(round % 2)}}, true});
      }
      if (const Status s = store.UpsertNodes(std::move(specs)); !s.ok())
        fail("upsert: " + s.error().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });

  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937_64 rng(1234 + static_cast<std::uint64_t>(t));
      for (int op = 0; op < kOpsPerThread; ++op) {
        // A shared pool of UIDs, so threads race to bind one pod to different nodes.
        const std::string uid = "pod-" + std::to_string(rng() % kUids);
        if (rng() % 10 >= 7) {
          const auto released = store.Release(uid);
          if (!released.ok()) fail("release: " + released.error().message());
          if (released.ok() && released->has_value()) ++releases;
          continue;
        }
        const std::string& node = nodes[rng() % kNodes];
        const bool shared = rng() % 3 == 0;
        const int whole = shared ? 0 : 1 + static_cast<int>(rng() % 4);
        const int shares = shared ? 1 + static_cast<int>(rng() % 2) : 0;
        const bool reckless = rng() % 10 == 0;
        const auto bound = store.Bind(node, uid, FirstFree(whole, shares, reckless, rng(), kMaxShares));
        if (bound.ok()) {
          if (bound->kind == BindKind::kBound) ++binds;
          if (bound->kind == BindKind::kAlreadyBound) ++already;
          if (bound->allocation.node != node || bound->allocation.uid != uid)
            fail("bind returned another pod");
        } else if (bound.error().message().starts_with(kConflictTag)) {
          ++conflicts;
        } else {
          ++rejected;
        }
      }
    });
  }
  for (std::thread& w : writers) w.join();
  done = true;
  reader.join();
  upserter.join();

  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(IndexViolation(store), "");
  for (const auto& r : store.snapshot()->nodes()) EXPECT_EQ(RecordViolation(*r, kMaxShares), "");
  EXPECT_EQ(store.pod_count(), static_cast<std::size_t>(binds - releases));
  EXPECT_EQ(persistence.binds().size(), static_cast<std::size_t>(binds.load()));
  EXPECT_EQ(persistence.releases().size(), static_cast<std::size_t>(releases.load()));
  // The mix exercised every path.
  EXPECT_GT(binds, 1000);
  EXPECT_GT(releases, 500);
  EXPECT_GT(already, 0);
  EXPECT_GT(conflicts, 0);
  EXPECT_GT(rejected, 0);
  // The first snapshot never changed under the writers.
  ASSERT_EQ(initial->size(), initial_copy.size());
  for (std::size_t i = 0; i < initial_copy.size(); ++i) {
    EXPECT_EQ(initial->nodes()[i]->allocated, initial_copy[i].allocated);
    EXPECT_EQ(initial->nodes()[i]->pods, initial_copy[i].pods);
  }
}

}  // namespace
}  // namespace toposched::state
