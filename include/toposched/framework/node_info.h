#pragma once
// NodeInfo: what the framework knows of one node when it filters, scores or reserves for a pod.

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "toposched/placement/placement.h"
#include "toposched/topology/node_topology.h"

namespace toposched::framework {

struct NodeInfo {
  std::string name;  // the Kubernetes node name; CycleState caches per name
  // Shared and immutable: many NodeInfos of one hardware type may point at one topology. Null
  // when the node has published no NodeTopology (DeviceFit then rejects it as unresolvable).
  std::shared_ptr<const NodeTopology> topology;
  // topology->Fingerprint() when the caller keeps it (the extender's cluster state computes it
  // once per topology): the hash is most of a memo lookup's cost, so it is not paid per lookup
  // (docs/benchmarks.md, "Placement engine and scoring"). Empty = computed.
  std::string topology_fingerprint;
  // Devices already taken; Reserve plugins change it, Unreserve restores it.
  NodeAllocation allocated;
  // The node's labels, where the caller keeps them there (the simulator; the extender leaves
  // them empty). The extender shares one filter/score result among nodes of one class, whose key
  // holds no labels (extender::StoreOptionsFor): a plugin's verdict must not depend on them.
  // (The pool plugins read positions through the ClusterView, and the extender keys pool pods by
  // position itself.)
  std::map<std::string, std::string> labels;
  bool schedulable = true;  // false when cordoned (spec.unschedulable)
  // True while a pod on the node holds an allocation that could not be read back
  // (state::NodeRecord::held_pods): no new device placements until that is resolved.
  bool held = false;
  // CPU (milli-cores) not yet requested by the node's pods, where the caller knows it (the trace
  // replay; the extender where it binds the score, Evaluator::CpuBound); -1: unknown, and the
  // packing measure counts CPU as enough. kube-scheduler checks CPU itself (NodeResourcesFit);
  // this only sharpens the packing score.
  std::int64_t cpu_milli_free = -1;
  // Nonzero where the caller knows that nodes of one key are interchangeable for placement (the
  // extender's node classes: equal hardware and equal free devices): CycleState::Outcome then
  // computes the engine's outcome once for all nodes of the key (as long as their allocations
  // are equal) instead of once per node name. 0: per node name.
  std::uint64_t outcome_key = 0;
};

}  // namespace toposched::framework
