#pragma once
// What KvTransferCost's two test files share: the label keys, a pool pod and member, a view of
// one node per distance, and a Score call on a view.

#include <memory>
#include <string>
#include <utility>

#include "kv_transfer_cost/kv_transfer_cost.h"
#include "testing/framework_testing.h"
#include "toposched/framework/cluster_view.h"

namespace toposched::plugins::kv_transfer_cost {

using framework::CycleState;
using framework::PoolMember;
using framework::StaticClusterView;
using toposched::testing::CycleWith;
using toposched::testing::Fits;
using toposched::testing::NodeBuilder;
using toposched::testing::PlacementOn;
using toposched::testing::PresetTopology;
using toposched::testing::RequestBuilder;

inline constexpr const char* kClique = "nvidia.com/gpu.clique";
inline constexpr const char* kLeaf = "toposched.io/leaf";
inline constexpr const char* kSpine = "toposched.io/spine";
inline constexpr const char* kZone = "topology.kubernetes.io/zone";

inline PlacementRequest PoolPod(PodRole role, int gpus = 2, int nics = 2, std::string pool = "chat") {
  PlacementRequest r = RequestBuilder().Gpus(gpus).Nics(nics).Build();
  r.role = role;
  r.pool = std::move(pool);
  return r;
}

inline PoolMember Member(std::string uid, std::string node, PodRole role, int gpus = 2, int nics = 2,
                         bool kv_ipc = false) {
  return PoolMember{std::move(uid), std::move(node), role, gpus, nics, LinkClass::kPIX, kv_ipc};
}

// One node per distance from "here": the same NVLink clique, leaf, spine, zone, or none.
inline std::shared_ptr<StaticClusterView> Fabric() {
  auto view = std::make_shared<StaticClusterView>();
  view->SetNode("here", {{kClique, "c1"}, {kLeaf, "l1"}, {kSpine, "s1"}, {kZone, "z1"}}, 8, 8);
  view->SetNode("nvmate", {{kClique, "c1"}, {kLeaf, "l2"}, {kSpine, "s2"}, {kZone, "z1"}}, 8, 8);
  view->SetNode("leafmate", {{kClique, "c2"}, {kLeaf, "l1"}, {kSpine, "s1"}, {kZone, "z1"}}, 8, 8);
  view->SetNode("spinemate", {{kClique, "c3"}, {kLeaf, "l3"}, {kSpine, "s1"}, {kZone, "z1"}}, 8, 8);
  view->SetNode("zonemate", {{kClique, "c4"}, {kLeaf, "l4"}, {kSpine, "s2"}, {kZone, "z1"}}, 8, 8);
  view->SetNode("far", {{kClique, "c5"}, {kLeaf, "l5"}, {kSpine, "s3"}, {kZone, "z2"}}, 8, 8);
  return view;
}

inline PlacementOutcome OutcomeWith(LinkClass worst) {
  Placement p = PlacementOn(*PresetTopology("hgx-h100-8gpu"), {0, 1}, {0, 1});
  p.worst_class = worst;
  return Fits(std::move(p));
}

inline framework::ScoreResult ScoreOn(const KvTransferCost& plugin, PlacementRequest request,
                                      std::shared_ptr<const framework::ClusterView> view,
                                      const std::string& node, LinkClass own_class = LinkClass::kPIX) {
  CycleState state = CycleWith(std::move(request), OutcomeWith(own_class));
  state.SetCluster(std::move(view));
  return plugin.Score(state, NodeBuilder(node, "hgx-h100-8gpu").Build());
}

}  // namespace toposched::plugins::kv_transfer_cost
