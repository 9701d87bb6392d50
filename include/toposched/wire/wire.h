#pragma once
// The extender's wire codecs: readers for the request bodies kube-scheduler and Volcano send,
// writers for the replies. Readers use simdjson (On-Demand) and return views into their own
// padded copy of the body; writers append JSON straight into a string, without a DOM.
// Field names and shapes: ../shared/reference/protocols.md (kube-scheduler extender/v1 types,
// Volcano pkg/scheduler/plugins/extender/argument.go).
//
// Reader rules, for every entry point:
// - unknown keys are ignored at every level (the upstream structs grow between releases);
// - a missing or null optional field reads as empty/zero; a field of the wrong JSON type is an
//   error naming its path and the value ("ExtenderArgs.NodeNames[3]: expected a string, got 42");
// - bodies that are not JSON, not an object at the top, or have trailing content are errors;
// - keys are matched exactly as upstream spells them (kube-scheduler: PascalCase; Volcano:
//   lowerCamel wrapper keys, PascalCase inner objects). Go's decoder would also accept other
//   cases; nobody sends them, and exact matching keeps the hot path cheap.
// Every view returned is valid until the next Read* call on the same reader. A reader is not
// thread-safe: keep one per worker thread.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/json_string.h"
#include "toposched/common/status.h"

namespace toposched::extender {

// A v1.Pod inside a request. `raw` is the object's JSON text exactly as sent (for
// ParsePodRequest); the identity fields are read from metadata (unescaped).
struct PodRef {
  std::string_view raw;  // empty when the Pod was null or absent
  std::string_view uid, pod_namespace, name, resource_version;
};

// One candidate node: from NodeNames (name only), or from Nodes.items[] (name =
// metadata.name, raw = the item's JSON text, echoed back in the Nodes-mode reply).
struct NodeRef {
  std::string_view name;
  std::string_view raw;
};

// ExtenderArgs (filter and prioritize).
struct ExtenderArgsView {
  PodRef pod;
  bool node_names_given = false;  // "NodeNames" non-null (nodeCacheCapable: true)
  bool nodes_given = false;       // "Nodes" non-null (nodeCacheCapable: false)
  std::vector<NodeRef> nodes;     // from NodeNames when given, else from Nodes.items
};

// ExtenderBindingArgs.
struct BindingArgs {
  std::string_view pod_name, pod_namespace, pod_uid, node;
};

// ExtenderPreemptionArgs: per candidate node, the victims' UIDs, from NodeNameToMetaVictims
// (MetaPod.UID) or, in Nodes mode, NodeNameToVictims (Pods[].metadata.uid).
struct NodeVictimsView {
  std::string_view node;
  std::vector<std::string_view> uids;
  std::int64_t num_pdb_violations = 0;
};
struct PreemptionArgsView {
  PodRef pod;
  std::vector<NodeVictimsView> nodes;  // in body order
};

// Volcano api.Resource: MilliCPU (milli-cores), Memory (bytes), ScalarResources (extended
// resources in milli-units: 1 GPU = 1000; "pods" is a plain count).
struct ScalarResource {
  std::string_view name;
  double value = 0;
};
struct VolcanoResource {
  double milli_cpu = 0;
  double memory = 0;
  std::vector<ScalarResource> scalars;
};

// Volcano api.TaskInfo (the fields placement needs; the rest is skipped).
struct VolcanoTaskView {
  std::string_view raw;  // the TaskInfo JSON text, to echo back as a victim
  std::string_view uid, name, task_namespace, node_name, job;
  int status = 0;  // TaskStatus bit flag (Pending 1, Allocated 2, ..., Bound 16, Running 32)
  VolcanoResource resreq;
  PodRef pod;  // the embedded v1.Pod ("Pod"); raw empty when null
};

struct VolcanoPredicateArgs {  // {"task": TaskInfo, "node": NodeInfo}
  VolcanoTaskView task;
  std::string_view node_name;  // NodeInfo.Name
};
struct VolcanoPrioritizeArgs {  // {"task": TaskInfo, "nodes": [NodeInfo]}
  VolcanoTaskView task;
  std::vector<std::string_view> node_names;
};
struct VolcanoEventArgs {  // allocateFunc / deallocateFunc: {"task": TaskInfo}
  VolcanoTaskView task;
};
struct VolcanoEvictArgs {  // preemptable / reclaimable: {"evictor": TaskInfo, "evictees": [TaskInfo]}
  VolcanoTaskView evictor;
  std::vector<VolcanoTaskView> evictees;
};
// onSessionOpen: {"Jobs":{...}, "Nodes":{name: NodeInfo}, ...}: only counted, for logs.
struct VolcanoSessionArgs {
  std::size_t jobs = 0, nodes = 0, queues = 0;
};

class WireReader {
 public:
  WireReader();
  ~WireReader();
  WireReader(const WireReader&) = delete;
  WireReader& operator=(const WireReader&) = delete;

  Result<ExtenderArgsView> ReadExtenderArgs(std::string_view body);
  Result<BindingArgs> ReadBindingArgs(std::string_view body);
  Result<PreemptionArgsView> ReadPreemptionArgs(std::string_view body);
  Result<VolcanoPredicateArgs> ReadVolcanoPredicate(std::string_view body);
  Result<VolcanoPrioritizeArgs> ReadVolcanoPrioritize(std::string_view body);
  Result<VolcanoEventArgs> ReadVolcanoEvent(std::string_view body);
  Result<VolcanoEvictArgs> ReadVolcanoEvict(std::string_view body);
  Result<VolcanoSessionArgs> ReadVolcanoSession(std::string_view body);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- writers (append to `out`) ----

struct NodeFailure {
  std::string_view node;
  std::string_view message;
};

// ExtenderFilterResult. Nodes mode (`nodes_mode`): "Nodes" = {"items": [raw of each passed]},
// "NodeNames": null; names mode: "Nodes": null, "NodeNames": [names]. FailedNodes and
// FailedAndUnresolvableNodes are objects (possibly empty), "Error" is always present ("" = none).
// With a non-empty `error`, Nodes and NodeNames are null and the maps empty.
void WriteFilterResult(std::string& out, bool nodes_mode, std::span<const NodeRef> passed,
                       std::span<const NodeFailure> failed, std::span<const NodeFailure> unresolvable,
                       std::string_view error);

struct HostScore {
  std::string_view host;
  std::int64_t score = 0;  // 0..10 (MaxExtenderPriority)
};
// HostPriorityList: a bare array [{"Host": ..., "Score": ...}].
void WriteHostPriorityList(std::string& out, std::span<const HostScore> scores);

// ExtenderBindingResult {"Error": ...}.
void WriteBindingResult(std::string& out, std::string_view error);

struct NodeVictimsOut {
  std::string_view node;
  std::span<const std::string_view> uids;
  std::int64_t num_pdb_violations = 0;
};
// ExtenderPreemptionResult {"NodeNameToMetaVictims": {node: {"Pods": [{"UID": ...}],
// "NumPDBViolations": n}}}.
void WritePreemptionResult(std::string& out, std::span<const NodeVictimsOut> nodes);

// Volcano predicate reply (v1.11+): {"status": message, "code": code}; "" = pass.
void WriteVolcanoPredicateResult(std::string& out, std::string_view message, int code);

struct VolcanoNodeScore {
  std::string_view node;
  double score = 0;
};
// {"nodeScore": {node: score}, "errorMessage": ...}; nodeScore is {} (never null) when empty.
void WriteVolcanoPrioritizeResult(std::string& out, std::span<const VolcanoNodeScore> scores,
                                  std::string_view error);
// allocateFunc / deallocateFunc reply {"errorMessage": ...}.
void WriteVolcanoEventResult(std::string& out, std::string_view error);
// preemptable / reclaimable reply {"status": vote, "victims": [raw TaskInfo ...]}.
void WriteVolcanoEvictResult(std::string& out, int vote, std::span<const std::string_view> raw_victims);

}  // namespace toposched::extender
