// The store's pool index and the store-backed ClusterView pool-aware plugins read.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "journal.h"
#include "state_testing.h"
#include "toposched/state/cluster_state.h"

namespace toposched::state {
namespace {

using testing::PresetNode;
using testing::Whole;

// A decision that takes `delta` for a pod of `pool` with `role`.
ClusterStore::Decide TakeFor(framework::AllocationDelta delta, PodRole role, std::string pool,
                             LinkClass worst = LinkClass::kPIX) {
  return [=](const NodeRecord&) -> Result<PodAllocation> {
    PodAllocation a;
    a.pod_namespace = "default";
    a.pod_name = "pod";
    a.delta = delta;
    a.worst_class = worst;
    a.role = role;
    a.pool = pool;
    return a;
  };
}

// A journal line as the reader sees it: without its newline.
std::string Line(const Result<std::string>& encoded) {
  std::string line = *encoded;
  if (!line.empty() && line.back() == '\n') line.pop_back();
  return line;
}

std::set<std::string> Uids(const std::vector<PodAllocation>& pods) {
  std::set<std::string> out;
  for (const PodAllocation& a : pods) out.insert(a.uid);
  return out;
}

TEST(PoolIndexTest, BindReleaseAndNodeRemovalKeepThePoolIndexExact) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(PresetNode("a", "hgx-h100-8gpu")).ok());
  ASSERT_TRUE(store.UpsertNode(PresetNode("b", "hgx-h100-8gpu")).ok());
  ASSERT_TRUE(store.Bind("a", "p1", TakeFor(Whole({0, 1}, {0, 1}), PodRole::kPrefill, "chat")).ok());
  ASSERT_TRUE(store.Bind("a", "d1", TakeFor(Whole({2}, {2}), PodRole::kDecode, "chat")).ok());
  ASSERT_TRUE(store.Bind("b", "d2", TakeFor(Whole({0}, {0}), PodRole::kDecode, "chat")).ok());
  ASSERT_TRUE(store.Bind("b", "x1", TakeFor(Whole({1}), PodRole::kDecode, "code")).ok());
  ASSERT_TRUE(store.Bind("b", "plain", TakeFor(Whole({2}), PodRole::kNone, "")).ok());

  EXPECT_EQ(Uids(store.PoolPods("chat")), (std::set<std::string>{"p1", "d1", "d2"}));
  EXPECT_EQ(Uids(store.PoolPods("code")), (std::set<std::string>{"x1"}));
  EXPECT_TRUE(store.PoolPods("").empty());
  EXPECT_TRUE(store.PoolPods("nope").empty());

  ASSERT_TRUE(store.Release("d1").ok());
  EXPECT_EQ(Uids(store.PoolPods("chat")), (std::set<std::string>{"p1", "d2"}));
  store.RemoveNode("b");
  EXPECT_EQ(Uids(store.PoolPods("chat")), (std::set<std::string>{"p1"}));
  EXPECT_TRUE(store.PoolPods("code").empty());
  ASSERT_TRUE(store.Release("p1").ok());
  EXPECT_TRUE(store.PoolPods("chat").empty());
}

// VersionedPoolMembers: one list per version of the pool, shared by its readers and sorted by
// UID (the extender's pool index diffs two versions by UID); a bind or release of the pool's
// pods makes a new one with a new version, another pool's pods do not.
TEST(PoolIndexTest, EachVersionOfAPoolHasOneSharedMemberListByUid) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(PresetNode("a", "hgx-h100-8gpu")).ok());
  ASSERT_TRUE(store.Bind("a", "p2", TakeFor(Whole({0}, {0}), PodRole::kPrefill, "chat")).ok());
  ASSERT_TRUE(store.Bind("a", "d1", TakeFor(Whole({1}, {1}), PodRole::kDecode, "chat")).ok());
  const auto [v1, first] = store.VersionedPoolMembers("chat");
  const auto [v1_again, first_again] = store.VersionedPoolMembers("chat");
  EXPECT_EQ(v1, v1_again);
  EXPECT_EQ(first, first_again);  // the same list, not a copy
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].uid, "d1");
  EXPECT_EQ((*first)[1].uid, "p2");

  ASSERT_TRUE(store.Bind("a", "x1", TakeFor(Whole({2}), PodRole::kDecode, "code")).ok());
  EXPECT_EQ(store.VersionedPoolMembers("chat").second, first);

  ASSERT_TRUE(store.Bind("a", "a0", TakeFor(Whole({3}, {3}), PodRole::kDecode, "chat")).ok());
  const auto [v2, second] = store.VersionedPoolMembers("chat");
  EXPECT_NE(v2, v1);
  ASSERT_EQ(second->size(), 3u);
  EXPECT_EQ((*second)[0].uid, "a0");
  EXPECT_EQ(first->size(), 2u);  // the first version's readers keep what they read

  ASSERT_TRUE(store.Release("p2").ok());
  const auto [v3, third] = store.VersionedPoolMembers("chat");
  EXPECT_NE(v3, v2);
  ASSERT_EQ(third->size(), 2u);
  EXPECT_EQ((*third)[1].uid, "d1");
  store.RemoveNode("a");
  EXPECT_TRUE(store.VersionedPoolMembers("chat").second->empty());
}

TEST(PoolIndexTest, RestoredPodsJoinTheirPool) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(PresetNode("a", "hgx-h100-8gpu")).ok());
  PodAllocation a = testing::Allocation("r1", "a", Whole({3}, {3}));
  a.role = PodRole::kDecode;
  a.pool = "chat";
  ASSERT_TRUE(store.Restore(a).ok());
  const std::vector<PodAllocation> pods = store.PoolPods("chat");
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_EQ(pods[0].role, PodRole::kDecode);
}

TEST(StoreClusterViewTest, ListsThePoolLocatesByLabelsAndCountsFreeDevices) {
  ClusterStore store(nullptr);
  // hgx-h100-8gpu: 8 GPUs, 8 RDMA NICs (+1 Ethernet, which is not counted).
  ASSERT_TRUE(store.UpsertNode(PresetNode("a", "hgx-h100-8gpu", {{"toposched.io/leaf", "leaf-1"}})).ok());
  ASSERT_TRUE(store
                  .UpsertNode(PresetNode("b", "hgx-h100-8gpu",
                                         {{"toposched.io/leaf", "leaf-2"}, {"toposched.io/spine", "s1"}}))
                  .ok());
  ASSERT_TRUE(
      store.Bind("a", "p1", TakeFor(Whole({0, 1, 2, 3}, {0, 1}), PodRole::kPrefill, "chat", LinkClass::kNODE))
          .ok());
  ASSERT_TRUE(store.Bind("b", "x1", TakeFor(Whole({0}), PodRole::kDecode, "code")).ok());

  const pd::NetworkConfig network;
  const auto view = MakeClusterView(store, store.snapshot(), network, "chat");
  const auto members = view->PoolMembers("chat");
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].uid, "p1");
  EXPECT_EQ(members[0].node, "a");
  EXPECT_EQ(members[0].role, PodRole::kPrefill);
  EXPECT_EQ(members[0].gpus, 4);
  EXPECT_EQ(members[0].rdma_nics, 2);
  EXPECT_EQ(members[0].worst_class, LinkClass::kNODE);
  EXPECT_TRUE(view->PoolMembers("code").empty());  // the view is built for one pool

  // Default tiers: clique, leaf, spine, zone.
  const pd::Location b = view->Locate("b");
  EXPECT_EQ(b.node, "b");
  EXPECT_EQ(b.domains, (std::vector<std::string>{"", "leaf-2", "s1", ""}));
  const pd::Location unknown = view->Locate("zz");
  EXPECT_EQ(unknown.domains, (std::vector<std::string>{"", "", "", ""}));

  std::map<std::string, std::pair<int, int>> free;
  view->ForEachNode([&](const framework::NodeSummary& n) {
    ASSERT_NE(n.location, nullptr);
    EXPECT_EQ(n.location->node, n.name);
    free[std::string(n.name)] = {n.free_gpus, n.free_rdma_nics};
  });
  EXPECT_EQ(free.at("a"), std::make_pair(4, 6));
  EXPECT_EQ(free.at("b"), std::make_pair(7, 8));
}

// Free GPUs by vendor: a node whose first four GPUs are AMD has 4 NVIDIA and 4 AMD free, then
// 4 and 2 once a pod takes two of the AMD ones; the view gives the same counts from the
// snapshot's arrays and, placed by HyperNodes, from the record.
TEST(StoreClusterViewTest, CountsFreeGpusByVendor) {
  ClusterStore store(nullptr);
  NodeSpec mixed = PresetNode("m", "hgx-h100-8gpu", {{"toposched.io/leaf", "leaf-1"}});
  auto topology = std::make_shared<NodeTopology>(*mixed.topology);
  for (int g = 0; g < 4; ++g) topology->gpus[static_cast<std::size_t>(g)].vendor = GpuVendor::kAmd;
  mixed.topology = topology;
  ASSERT_TRUE(store.UpsertNode(std::move(mixed)).ok());
  ASSERT_TRUE(store.UpsertNode(PresetNode("n", "hgx-h100-8gpu", {{"toposched.io/leaf", "leaf-1"}})).ok());
  ASSERT_TRUE(store.Bind("m", "p1", TakeFor(Whole({0, 1}), PodRole::kPrefill, "chat")).ok());
  const pd::NetworkConfig network;
  const auto hyper = std::make_shared<const std::map<std::string, pd::Location>>();
  for (const auto& positions : {std::shared_ptr<const std::map<std::string, pd::Location>>(), hyper}) {
    SCOPED_TRACE(positions == nullptr ? "by the snapshot's arrays" : "by the records");
    const auto view = MakeClusterView(store, store.snapshot(), network, "chat", positions);
    std::map<std::string, std::array<int, kGpuVendors>> by_vendor;
    view->ForEachNode(
        [&](const framework::NodeSummary& n) { by_vendor[std::string(n.name)] = n.free_by_vendor; });
    EXPECT_EQ(by_vendor.at("m"), (std::array<int, kGpuVendors>{4, 2}));
    EXPECT_EQ(by_vendor.at("n"), (std::array<int, kGpuVendors>{8, 0}));
    EXPECT_TRUE(view->WithNode("m", [](const framework::NodeSummary& n) {
      EXPECT_EQ(n.FreeGpusFor(GpuVendor::kNvidia), 4);
      EXPECT_EQ(n.FreeGpusFor(GpuVendor::kAmd), 2);
      EXPECT_EQ(n.free_gpus, 6);
    }));
  }
}

TEST(StoreClusterViewTest, HyperNodePositionsWinOverLabels) {
  ClusterStore store(nullptr);
  ASSERT_TRUE(store.UpsertNode(PresetNode("a", "hgx-h100-8gpu", {{"toposched.io/leaf", "leaf-1"}})).ok());
  auto hyper = std::make_shared<std::map<std::string, pd::Location>>();
  (*hyper)["a"] = pd::Location{"a", {"", "s0-leaf-7", "s0", ""}};
  const pd::NetworkConfig network;
  const auto view = MakeClusterView(store, store.snapshot(), network, "chat", hyper);
  EXPECT_EQ(view->Locate("a").domains[1], "s0-leaf-7");
}

// With HyperNodes the store's runs (by labels) are not the view's positions: the view gives
// every node, skip or not, and a node by name where its HyperNode places it.
TEST(StoreClusterViewTest, WithHyperNodesEveryNodeIsGivenAndPlacedByItsHyperNode) {
  const pd::NetworkConfig network;
  StoreOptions options;
  for (const pd::Tier& tier : network.tiers) options.tier_labels.push_back(tier.label);
  ClusterStore store(nullptr, options);
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(store.UpsertNode(PresetNode(name, "hgx-h100-8gpu", {{"toposched.io/leaf", "l1"}})).ok());
  }
  auto hyper = std::make_shared<std::map<std::string, pd::Location>>();
  (*hyper)["a"] = pd::Location{"a", {"", "h-leaf-1", "s0", ""}};
  (*hyper)["b"] = pd::Location{"b", {"", "h-leaf-2", "s0", ""}};
  const auto view = MakeClusterView(store, store.snapshot(), network, "chat", hyper);
  std::vector<std::string> given;
  view->ForEachNodeByPosition([&](const framework::NodeSummary& n) {
    given.emplace_back(n.name);
    return false;  // one run by labels, three positions by HyperNodes: nothing may be skipped
  });
  EXPECT_EQ(given, (std::vector<std::string>{"a", "b", "c"}));
  std::string leaf;
  EXPECT_TRUE(view->WithNode("b", [&](const framework::NodeSummary& n) { leaf = n.location->domains[1]; }));
  EXPECT_EQ(leaf, "h-leaf-2");
  EXPECT_TRUE(view->WithNode("c", [&](const framework::NodeSummary& n) { leaf = n.location->domains[1]; }));
  EXPECT_EQ(leaf, "l1");
}

// The view gives nodes of equal domains one after another and honours the skip (KvTransferCost's
// scale visits one node a position); the runs are the snapshot's, shared until a position moves.
// The view's PoolToken: the pool's version with the snapshot's shared position runs, equal for
// two views while neither changes (a bind elsewhere), new when the pool changes or a node moves;
// none without a version, for another pool, or where HyperNodes place the nodes.
TEST(StoreClusterViewTest, APoolsTokenIsItsVersionAndThePositionsRuns) {
  const pd::NetworkConfig network;
  StoreOptions options;
  for (const pd::Tier& tier : network.tiers) options.tier_labels.push_back(tier.label);
  ClusterStore store(nullptr, options);
  ASSERT_TRUE(store.UpsertNode(PresetNode("a", "hgx-h100-8gpu", {{"toposched.io/leaf", "l1"}})).ok());
  ASSERT_TRUE(store.UpsertNode(PresetNode("b", "hgx-h100-8gpu", {{"toposched.io/leaf", "l2"}})).ok());
  ASSERT_TRUE(store.Bind("a", "p1", TakeFor(Whole({0}, {0}), PodRole::kPrefill, "chat")).ok());
  const auto token = [&](std::string_view pool = "chat") {
    auto [version, members] = store.VersionedPoolMembers("chat");
    return MakeClusterView(store.snapshot(), network, "chat", members, nullptr, version)->PoolVersion(pool);
  };
  const framework::PoolToken first = token();
  EXPECT_NE(first.version, 0u);
  EXPECT_NE(first.positions, nullptr);
  ASSERT_TRUE(store.Bind("b", "x1", TakeFor(Whole({1}), PodRole::kDecode, "code")).ok());
  EXPECT_EQ(token(), first);
  ASSERT_TRUE(store.Bind("b", "d1", TakeFor(Whole({2}, {2}), PodRole::kDecode, "chat")).ok());
  const framework::PoolToken second = token();
  EXPECT_NE(second.version, first.version);
  EXPECT_EQ(second.positions, first.positions);
  ASSERT_TRUE(store.UpsertNode(PresetNode("b", "hgx-h100-8gpu", {{"toposched.io/leaf", "l1"}})).ok());
  EXPECT_NE(token().positions, first.positions);
  EXPECT_EQ(token("code"), framework::PoolToken{});
  EXPECT_EQ(MakeClusterView(store, store.snapshot(), network, "chat")->PoolVersion("chat"),
            framework::PoolToken{});
  auto hyper = std::make_shared<const std::map<std::string, pd::Location>>(
      std::map<std::string, pd::Location>{{"a", pd::Location{"a", {"", "h1", "", ""}}}});
  auto [version, members] = store.VersionedPoolMembers("chat");
  EXPECT_EQ(MakeClusterView(store.snapshot(), network, "chat", members, hyper, version)->PoolVersion("chat"),
            framework::PoolToken{});
}

TEST(StoreClusterViewTest, NodesComeByPositionAndRunsAreSharedUntilAPositionMoves) {
  const pd::NetworkConfig network;
  StoreOptions options;
  for (const pd::Tier& tier : network.tiers) options.tier_labels.push_back(tier.label);
  ClusterStore store(nullptr, options);
  const std::map<std::string, std::string> leaves = {{"a", "l1"}, {"b", "l2"}, {"c", "l1"},
                                                     {"d", "l2"}, {"e", ""},   {"f", "l1"}};
  for (const auto& [name, leaf] : leaves) {
    std::map<std::string, std::string> labels;
    if (!leaf.empty()) labels["toposched.io/leaf"] = leaf;
    ASSERT_TRUE(store.UpsertNode(PresetNode(name, "hgx-h100-8gpu", labels)).ok());
  }
  // Runs as the view gives them: each node once, a run's nodes in one leaf, no leaf in two runs.
  auto runs_of = [&](const framework::ClusterView& view) {
    std::vector<std::vector<std::string>> runs;
    std::vector<std::string> last;
    view.ForEachNodeByPosition([&](const framework::NodeSummary& n) {
      if (runs.empty() || n.location->domains != last) runs.emplace_back();
      last = n.location->domains;
      runs.back().emplace_back(n.name);
      return true;
    });
    std::sort(runs.begin(), runs.end());
    return runs;
  };
  const auto view = MakeClusterView(store, store.snapshot(), network, "chat");
  using Runs = std::vector<std::vector<std::string>>;
  EXPECT_EQ(runs_of(*view), (Runs{{"a", "c", "f"}, {"b", "d"}, {"e"}}));
  // The same runs by index (ClusterView::ForEachNodeInRun); false stops a run.
  Runs by_index(view->PositionRunCount());
  for (std::size_t r = 0; r < by_index.size(); ++r) {
    view->ForEachNodeInRun(r, [&](const framework::NodeSummary& n) {
      by_index[r].emplace_back(n.name);
      return true;
    });
  }
  std::sort(by_index.begin(), by_index.end());
  EXPECT_EQ(by_index, runs_of(*view));
  int given = 0;
  view->ForEachNodeInRun(0, [&](const framework::NodeSummary&) { return ++given < 1; });
  EXPECT_EQ(given, 1);
  // false skips the rest of the run: one node a position.
  std::vector<std::string> firsts;
  view->ForEachNodeByPosition([&](const framework::NodeSummary& n) {
    firsts.emplace_back(n.name);
    return false;
  });
  std::sort(firsts.begin(), firsts.end());
  EXPECT_EQ(firsts, (std::vector<std::string>{"a", "b", "e"}));

  // A bind moves nothing: the runs are shared. A node whose leaf changes: new runs.
  const Snapshot::PositionRuns* before = &store.snapshot()->position_runs();
  ASSERT_TRUE(store.Bind("a", "p1", TakeFor(Whole({0}, {0}), PodRole::kPrefill, "chat")).ok());
  EXPECT_EQ(&store.snapshot()->position_runs(), before);
  ASSERT_TRUE(store.UpsertNode(PresetNode("a", "hgx-h100-8gpu", {{"toposched.io/leaf", "l2"}})).ok());
  EXPECT_NE(&store.snapshot()->position_runs(), before);
  EXPECT_EQ(runs_of(*MakeClusterView(store, store.snapshot(), network, "chat")),
            (Runs{{"a", "b", "d"}, {"c", "f"}, {"e"}}));

  // One node by name, as the pass gives it.
  const auto now = MakeClusterView(store, store.snapshot(), network, "chat");
  int free_gpus = -1;
  EXPECT_TRUE(now->WithNode("a", [&](const framework::NodeSummary& n) {
    EXPECT_EQ(n.name, "a");
    EXPECT_EQ(n.location->domains[1], "l2");
    free_gpus = n.free_gpus;
  }));
  EXPECT_EQ(free_gpus, 7);
  EXPECT_FALSE(now->WithNode("zz", [](const framework::NodeSummary&) { ADD_FAILURE() << "called for zz"; }));
}

TEST(JournalPoolTest, RoleAndPoolRoundTripAndOldLinesStillRead) {
  PodAllocation a = testing::Allocation("u1", "a", Whole({1}, {1}));
  a.role = PodRole::kPrefill;
  a.pool = "chat";
  a.kv_ipc = true;
  auto line = internal::EncodeJournalLine(internal::JournalOp::kBind, a);
  ASSERT_TRUE(line.ok()) << line.error().message();
  EXPECT_NE(line->find(R"("role":"prefill","pool":"chat","kvIpc":true)"), std::string::npos) << *line;
  auto entry = internal::DecodeJournalLine(Line(line));
  ASSERT_TRUE(entry.ok()) << entry.error().message();
  EXPECT_EQ(entry->allocation.role, PodRole::kPrefill);
  EXPECT_EQ(entry->allocation.pool, "chat");
  EXPECT_TRUE(entry->allocation.kv_ipc);

  // A pod outside any pool writes none of the keys (journals of older versions look the same).
  a.role = PodRole::kNone;
  a.pool.clear();
  a.kv_ipc = false;
  line = internal::EncodeJournalLine(internal::JournalOp::kBind, a);
  ASSERT_TRUE(line.ok());
  EXPECT_EQ(line->find("role"), std::string::npos);
  EXPECT_EQ(line->find("kvIpc"), std::string::npos);
  entry = internal::DecodeJournalLine(Line(line));
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->allocation.role, PodRole::kNone);
  EXPECT_EQ(entry->allocation.pool, "");
  EXPECT_FALSE(entry->allocation.kv_ipc);
}

TEST(JournalPoolTest, ABadRoleIsRefusedByName) {
  PodAllocation a = testing::Allocation("u1", "a", Whole({1}));
  a.role = PodRole::kDecode;
  auto line = internal::EncodeJournalLine(internal::JournalOp::kBind, a);
  ASSERT_TRUE(line.ok());
  std::string bad = Line(line);
  bad.replace(bad.find("\"decode\""), 8, "\"Decode\"");
  const auto entry = internal::DecodeJournalLine(bad, /*verify_checksum=*/false);
  ASSERT_FALSE(entry.ok());
  EXPECT_NE(entry.error().message().find("role"), std::string::npos) << entry.error().message();
}

}  // namespace
}  // namespace toposched::state
