// KvTransferCost through the views the extender gives: the scale from positions and ranked
// runs equals the pass over every node, nodes whose domains hold the same share one mean, and a
// pool's sites are kept while the view's token holds.

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

// A view that gives the nodes of equal domains one after another and honours the skip, as the
// extender's store-backed view does (ClusterView::ForEachNodeByPosition); it counts the nodes
// it gave.
class ByPositionView : public framework::ClusterView {
 public:
  explicit ByPositionView(std::shared_ptr<const StaticClusterView> view) : view_(std::move(view)) {}
  const pd::NetworkConfig& network() const override { return view_->network(); }
  pd::Location Locate(std::string_view node) const override { return view_->Locate(node); }
  std::span<const PoolMember> PoolMembers(std::string_view pool) const override {
    return view_->PoolMembers(pool);
  }
  void ForEachNode(const std::function<void(const framework::NodeSummary&)>& fn) const override {
    view_->ForEachNode(fn);
  }
  bool WithNode(std::string_view node,
                const std::function<void(const framework::NodeSummary&)>& fn) const override {
    return view_->WithNode(node, fn);
  }
  void ForEachNodeByPosition(const std::function<bool(const framework::NodeSummary&)>& fn) const override {
    std::vector<framework::NodeSummary> nodes;
    view_->ForEachNode([&](const framework::NodeSummary& n) { nodes.push_back(n); });
    std::stable_sort(nodes.begin(), nodes.end(),
                     [](const auto& a, const auto& b) { return a.location->domains < b.location->domains; });
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
  std::span<const PoolMember> PoolMembers(std::string_view pool) const override {
    return view_->PoolMembers(pool);
  }
  void ForEachNode(const std::function<void(const framework::NodeSummary&)>& fn) const override {
    view_->ForEachNode([&](const framework::NodeSummary& n) { fn(Hashed(n)); });
  }
  bool WithNode(std::string_view node,
                const std::function<void(const framework::NodeSummary&)>& fn) const override {
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
  explicit RankedView(std::shared_ptr<const StaticClusterView> flat)
      : HashedView(flat), flat_(std::move(flat)) {
    std::map<std::vector<std::string>, std::vector<std::string>> by_domains;
    flat_->ForEachNode(
        [&](const framework::NodeSummary& n) { by_domains[n.location->domains].emplace_back(n.name); });
    for (auto& [domains, names] : by_domains) runs_.push_back(std::move(names));
  }
  framework::PoolToken PoolVersion(std::string_view) const override { return token; }
  std::size_t PositionRunCount() const override { return runs_.size(); }
  void ForEachNodeInRun(std::size_t run,
                        const std::function<bool(const framework::NodeSummary&)>& fn) const override {
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
  for (const char* uid : {"p1", "p2", "p3"})
    remote->AddMember("chat", Member(uid, "a-n0", PodRole::kPrefill));
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
  ExpectEveryNodeScoresAsOnFlat(plugin, PoolPod(PodRole::kDecode), spans,
                                std::make_shared<HashedView>(spans));
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
  EXPECT_EQ(anchors(prefill),
            "prefill of pool chat: no decode instances yet, anchored on 2 prefill instances");
  // The pod itself in the pool (RequestBuilder's uid), with p3, under the same token: the sites
  // are built for the cycle, without it, not taken from what was kept.
  flat->AddMember("chat", Member("uid-1", "far", PodRole::kPrefill));
  flat->AddMember("chat", Member("p3", "far", PodRole::kPrefill));
  EXPECT_EQ(anchors(prefill),
            "prefill of pool chat: no decode instances yet, anchored on 3 prefill instances");

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
  for (const auto& [gpus, nics] :
       std::vector<std::pair<int, int>>{{2, 2}, {1, 2}, {4, 4}, {1, 1}, {4, 4}, {8, 0}}) {
    for (const char* node : {"here", "nvmate", "leafmate", "far"}) {
      SCOPED_TRACE(std::to_string(gpus) + " GPUs, " + std::to_string(nics) + " NICs on " + node);
      const PlacementRequest pod = PoolPod(PodRole::kDecode, gpus, nics);
      EXPECT_EQ(ScoreOn(plugin, pod, moved, node).explanation,
                ScoreOn(KvTransferCost{Args{}}, pod, flat, node).explanation);
    }
  }
}

}  // namespace
}  // namespace toposched::plugins::kv_transfer_cost
