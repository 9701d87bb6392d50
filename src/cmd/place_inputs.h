#pragma once
// What `toposched place` reads, in the forms an operator has at hand:
//
//   --topology  hwloc/NCCL XML, NodeTopology JSON (`toposched topo --format json`), or the
//               NodeTopology objects `kubectl get ntopo [NODE] -o yaml|json` prints: one object
//               or a List (pick one with --node)
//   --request   a Pod, JSON or YAML (`kubectl get pod P -o yaml`, or the manifest)
//   --allocated the ALLOC.json form (allocation_json.h, also as YAML), or the node's pods as
//               `kubectl get pods -A --field-selector spec.nodeName=NODE -o yaml` prints them,
//               optionally with the Node (`kubectl get node NODE -o yaml`; a List may mix both)
//
// Pure functions over text (the caller reads the files), so tests need no files.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/placement/placement.h"
#include "toposched/placement/request.h"
#include "toposched/topology/node_topology.h"

namespace toposched::cmd {

// The objects in JSON or YAML text: one object, a List (kind "List" or "<Kind>List", with
// items) or a JSON array, or a YAML stream of documents ("---"), flattened into one vector.
// YAML scalars keep their YAML 1.2 core-schema types (plain 8 is a number, "8" a string).
Result<std::vector<nlohmann::json>> ReadKubeObjects(std::string_view text);

// The topology in `content` (read from `path`, named in errors). XML and a single NodeTopology
// JSON document go through LoadTopologyFile; kubectl's objects through the extender's own
// reader. `node` picks one of several NodeTopologies (required then); "" otherwise.
Result<NodeTopology> ReadPlaceTopology(const std::string& path, std::string_view content,
                                       const std::string& node);

// The Pod in `content` (JSON or YAML) as JSON text for ParsePodRequest.
Result<std::string> ReadPodJson(std::string_view content);

struct PlaceAllocations {
  NodeAllocation allocated;
  // What was read and what was left out (pods on other nodes, finished pods, ...), for stderr.
  std::vector<std::string> notes;
};

// The allocation in `content` on `topology`. Pods: each active pod on the topology's node
// counts with its toposched.io/allocation, else HAMi's hami.io/vgpu-devices-allocated and/or
// hami.io/amd-devices-allocated (as the extender restores them); a pod with none that asks for
// GPUs or RDMA NICs (another scheduler's) is counted on the last free GPUs and RDMA NICs, as the
// extender counts it. A Node of the same name with HAMi's registration annotations (NVIDIA's,
// AMD's) is applied first, as the extender applies them (so HAMi records match, and AMD GPUs
// that AMD's registration does not name are unusable). Errors: unreadable records or
// registrations, two pods on one device, a file of other kinds.
Result<PlaceAllocations> ReadPlaceAllocations(std::string_view content, NodeTopology& topology,
                                              const RequestConfig& request_config);

}  // namespace toposched::cmd
