// Node, Pod and NodeTopology objects (objects.h): what the informers keep of them, and the
// NodeTopology object the agent publishes.

#include "toposched/kube/objects.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstddef>
#include <exception>
#include <limits>
#include <set>
#include <utility>
#include <variant>

#include "objects_internal.h"
#include "toposched/common/quantity.h"
#include "toposched/common/text.h"
#include "toposched/kube/time.h"
#include "toposched/placement/placement.h"
#include "toposched/placement/pod_cpu.h"
#include "toposched/topology/gpu_memory.h"
#include "toposched/topology/json_codec.h"

namespace toposched::kube {

using namespace objects_internal;  // NOLINT(google-build-using-namespace): this library's own helpers

// ---- objects ----

namespace {

// status.allocatable.cpu in milli-cores, -1 when absent or not a quantity. Not an error: only
// the packing score reads it, and a Node whose CPU cannot be read must still carry its labels,
// schedulability and devices (the score then treats its CPU as unknown). A number is read as
// its JSON text, as apimachinery's Quantity accepts one unquoted.
std::int64_t AllocatableCpuMilli(const json& node) {
  const auto status = node.find("status");
  if (status == node.end() || !status->is_object()) return -1;
  const auto allocatable = status->find("allocatable");
  if (allocatable == status->end() || !allocatable->is_object()) return -1;
  const auto cpu = allocatable->find("cpu");
  if (cpu == allocatable->end()) return -1;
  std::string text;
  if (cpu->is_string()) {
    text = cpu->get_ref<const std::string&>();
  } else if (cpu->is_number_integer()) {
    text = cpu->dump();
  } else {
    return -1;
  }
  const std::variant<std::int64_t, std::string> milli = ParseMilliQuantity(text);
  return std::holds_alternative<std::int64_t>(milli) ? std::get<std::int64_t>(milli) : -1;
}

Status ReadNodeImpl(const json& node, NodeView* v) {
  if (!node.is_object()) return Expected("top level", "an object", node);
  TOPOSCHED_ASSIGN_OR_RETURN(const json* meta, ReadObject(node, "metadata", "", Presence::kRequired));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*meta, "name", "metadata", Presence::kRequired, &v->name));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*meta, "uid", "metadata", Presence::kRequired, &v->uid));
  if (v->name.empty()) return Error("metadata.name: must not be empty");
  if (v->uid.empty()) return Error("metadata.uid: must not be empty");
  TOPOSCHED_RETURN_IF_ERROR(
      ReadString(*meta, "resourceVersion", "metadata", Presence::kOptional, &v->resource_version));
  TOPOSCHED_RETURN_IF_ERROR(ReadStringMap(
      *meta, "labels", "metadata", [](const std::string&) { return true; }, &v->labels));
  std::map<std::string, std::string> annotations;
  TOPOSCHED_RETURN_IF_ERROR(ReadStringMap(
      *meta, "annotations", "metadata",
      [](const std::string& k) { return k == kHamiNodeRegister || k == kHamiAmdNodeRegister; },
      &annotations));
  if (const auto it = annotations.find(std::string(kHamiNodeRegister)); it != annotations.end()) {
    v->hami_register = it->second;
  }
  if (const auto it = annotations.find(std::string(kHamiAmdNodeRegister)); it != annotations.end()) {
    v->hami_amd_register = it->second;
  }
  TOPOSCHED_ASSIGN_OR_RETURN(const json* spec, ReadObject(node, "spec", "", Presence::kOptional));
  if (spec != nullptr) TOPOSCHED_RETURN_IF_ERROR(ReadBool(*spec, "unschedulable", "spec", &v->unschedulable));
  v->allocatable_cpu_milli = AllocatableCpuMilli(node);
  return Status::Ok();
}

bool KeptPodAnnotation(const std::string& key) {
  return key.starts_with("toposched.io/") || key.starts_with("hami.io/") || key == kVolcanoVgpuIds ||
         key == kVolcanoVgpuNode;
}

// The kubelet's effective count of each extended resource (names with a '/'): max(sum over
// app containers, max over init containers), from limits (extended resources must have limits;
// requests equal them) else requests. A value that is not a plain integer is skipped: it is not
// a device count, and a pod is never refused for it here.
void ReadExtendedResources(const json& spec, std::map<std::string, std::int64_t>* out) {
  std::map<std::string, std::int64_t> app, init;
  auto read = [](const json& containers, bool is_init, std::map<std::string, std::int64_t>& into) {
    if (!containers.is_array()) return;
    for (const json& c : containers) {
      if (!c.is_object()) continue;
      const auto resources = c.find("resources");
      if (resources == c.end() || !resources->is_object()) continue;
      const json* amounts = nullptr;
      for (const char* key : {"limits", "requests"}) {
        const auto it = resources->find(key);
        if (it != resources->end() && it->is_object() && !it->empty()) {
          amounts = &*it;
          break;
        }
      }
      if (amounts == nullptr) continue;
      for (const auto& [name, value] : amounts->items()) {
        if (name.find('/') == std::string::npos || name.size() > 253) continue;
        std::int64_t n = -1;
        if (value.is_number_integer()) {
          n = value.get<std::int64_t>();
        } else if (value.is_string()) {
          n = ParseInt<std::int64_t>(value.get_ref<const std::string&>()).value_or(-1);
        }
        if (n <= 0 || n > (1 << 20)) continue;
        std::int64_t& slot = into[name];
        slot = is_init ? std::max(slot, n) : slot + n;
      }
    }
  };
  if (const auto it = spec.find("containers"); it != spec.end()) read(*it, false, app);
  if (const auto it = spec.find("initContainers"); it != spec.end()) read(*it, true, init);
  *out = std::move(app);
  for (const auto& [name, n] : init) (*out)[name] = std::max((*out)[name], n);
}

Status ReadPodImpl(const json& pod, PodView* v) {
  if (!pod.is_object()) return Expected("top level", "an object", pod);
  TOPOSCHED_ASSIGN_OR_RETURN(const json* meta, ReadObject(pod, "metadata", "", Presence::kRequired));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*meta, "name", "metadata", Presence::kRequired, &v->pod_name));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*meta, "uid", "metadata", Presence::kRequired, &v->uid));
  if (v->pod_name.empty()) return Error("metadata.name: must not be empty");
  if (v->uid.empty()) return Error("metadata.uid: must not be empty");
  TOPOSCHED_RETURN_IF_ERROR(
      ReadString(*meta, "namespace", "metadata", Presence::kOptional, &v->pod_namespace));
  TOPOSCHED_RETURN_IF_ERROR(
      ReadString(*meta, "resourceVersion", "metadata", Presence::kOptional, &v->resource_version));
  std::string deletion;
  TOPOSCHED_RETURN_IF_ERROR(
      ReadString(*meta, "deletionTimestamp", "metadata", Presence::kOptional, &deletion));
  v->deleting = !deletion.empty();
  TOPOSCHED_RETURN_IF_ERROR(
      ReadStringMap(*meta, "annotations", "metadata", KeptPodAnnotation, &v->annotations));
  TOPOSCHED_RETURN_IF_ERROR(ReadStringMap(
      *meta, "labels", "metadata", [](const std::string&) { return true; }, &v->labels));

  TOPOSCHED_ASSIGN_OR_RETURN(const json* spec, ReadObject(pod, "spec", "", Presence::kOptional));
  if (spec != nullptr) {
    TOPOSCHED_RETURN_IF_ERROR(ReadString(*spec, "nodeName", "spec", Presence::kOptional, &v->node_name));
    ReadExtendedResources(*spec, &v->extended_resources);
  }
  // The API server validates every quantity, so this fails only for a hand-made object; such a
  // pod still reads (its devices and phase matter more than the packing score's CPU) and counts
  // no CPU rather than none of itself.
  if (Result<std::int64_t> cpu = PodCpuRequestMilli(pod); cpu.ok()) v->cpu_request_milli = *cpu;

  TOPOSCHED_ASSIGN_OR_RETURN(const json* status, ReadObject(pod, "status", "", Presence::kOptional));
  if (status == nullptr) return Status::Ok();
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*status, "phase", "status", Presence::kOptional, &v->phase));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* conditions,
                             ReadArray(*status, "conditions", "status", Presence::kOptional));
  if (conditions == nullptr) return Status::Ok();
  for (std::size_t i = 0; i < conditions->size(); ++i) {
    const json& c = (*conditions)[i];
    const std::string p = Element("status.conditions", i);
    if (!c.is_object()) return Expected(p, "an object", c);
    std::string type, value, since;
    TOPOSCHED_RETURN_IF_ERROR(ReadString(c, "type", p, Presence::kOptional, &type));
    if (type != "Ready") continue;
    TOPOSCHED_RETURN_IF_ERROR(ReadString(c, "status", p, Presence::kOptional, &value));
    TOPOSCHED_RETURN_IF_ERROR(ReadString(c, "lastTransitionTime", p, Presence::kOptional, &since));
    v->ready = value == "True";
    v->ready_since.reset();
    if (v->ready && !since.empty()) {
      TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::chrono::system_clock::time_point t, ParseTime(since),
                                     Child(p, "lastTransitionTime"));
      v->ready_since = t;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<NodeView> ReadNode(const nlohmann::json& node) {
  try {
    NodeView v;
    if (Status s = ReadNodeImpl(node, &v); !s.ok()) return s.error().WithContext("node");
    return v;
  } catch (const std::exception& e) {
    return Error(std::string("node: ") + e.what());
  }
}

Result<PodView> ReadPod(const nlohmann::json& pod) {
  try {
    PodView v;
    if (Status s = ReadPodImpl(pod, &v); !s.ok()) return s.error().WithContext("pod");
    return v;
  } catch (const std::exception& e) {
    return Error(std::string("pod: ") + e.what());
  }
}

nlohmann::json NodeTopologyObject(const NodeTopology& topology, std::string_view node_name,
                                  std::string_view owner_uid, std::int64_t generation,
                                  std::chrono::system_clock::time_point heartbeat) {
  const std::string fingerprint = topology.Fingerprint();
  json metadata = {{"name", node_name},
                   {"labels", {{std::string(kTopologyClassLabel), fingerprint.substr(0, 12)}}}};
  if (!owner_uid.empty()) {
    metadata["ownerReferences"] =
        json::array({{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_name}, {"uid", owner_uid}}});
  }
  // The codec's encoding is the single definition of the status; parse it back rather than
  // re-encode here. It replaces invalid UTF-8, so the parse cannot fail on it.
  json status = json::parse(EncodeTopologyJson(topology, -1))["status"];
  status["summary"] = {{"gpus", topology.gpus.size()},
                       {"nics", topology.nics.size()},
                       {"rdmaNics", topology.RdmaNicCount()},
                       {"numaNodes", topology.numa_nodes.size()},
                       {"gpuModel", topology.gpus.empty() ? std::string() : topology.gpus.front().model}};
  status["generation"] = generation;
  status["heartbeatTime"] = FormatTime(heartbeat);
  return {{"apiVersion", kTopologyApiVersion},
          {"kind", kTopologyKind},
          {"metadata", std::move(metadata)},
          {"status", std::move(status)}};
}

namespace {

Status ReadNodeTopologyImpl(const json& object, NodeTopologyView* v) {
  if (!object.is_object()) return Expected("top level", "an object", object);
  std::string kind;
  TOPOSCHED_RETURN_IF_ERROR(ReadString(object, "kind", "", Presence::kOptional, &kind));
  if (!kind.empty() && kind != kTopologyKind) return Expected("kind", "\"NodeTopology\"", object["kind"]);
  TOPOSCHED_ASSIGN_OR_RETURN(const json* meta, ReadObject(object, "metadata", "", Presence::kRequired));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*meta, "name", "metadata", Presence::kRequired, &v->name));
  if (v->name.empty()) return Error("metadata.name: must not be empty");
  TOPOSCHED_RETURN_IF_ERROR(
      ReadString(*meta, "resourceVersion", "metadata", Presence::kOptional, &v->resource_version));
  TOPOSCHED_ASSIGN_OR_RETURN(const json* status, ReadObject(object, "status", "", Presence::kOptional));
  if (status == nullptr) return Status::Ok();  // created, status not written yet
  TOPOSCHED_RETURN_IF_ERROR(ReadInt<std::int64_t>(*status, "generation", "status", Presence::kOptional, 0,
                                                  std::numeric_limits<std::int64_t>::max(), &v->generation));
  std::string heartbeat;
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*status, "heartbeatTime", "status", Presence::kOptional, &heartbeat));
  if (!heartbeat.empty()) {
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::chrono::system_clock::time_point t, ParseTime(heartbeat),
                                   "status.heartbeatTime");
    v->heartbeat = t;
  }
  // The codec reads a whole document; summary, generation and heartbeatTime are unknown keys to it.
  const json doc = {{"apiVersion", kTopologyApiVersion},
                    {"kind", kTopologyKind},
                    {"metadata", {{"name", v->name}}},
                    {"status", *status}};
  TOPOSCHED_ASSIGN_OR_RETURN(NodeTopology topology,
                             DecodeTopologyJson(doc.dump(-1, ' ', false, json::error_handler_t::replace)));
  v->topology = std::make_shared<const NodeTopology>(std::move(topology));
  return Status::Ok();
}

}  // namespace

Result<NodeTopologyView> ReadNodeTopology(const nlohmann::json& object) {
  try {
    NodeTopologyView v;
    if (Status s = ReadNodeTopologyImpl(object, &v); !s.ok()) return s.error().WithContext("NodeTopology");
    return v;
  } catch (const std::exception& e) {
    return Error(std::string("NodeTopology: ") + e.what());
  }
}

std::map<std::string, std::string> AgentNodeLabels(const NodeTopology& topology) {
  return {{std::string(kGpuCountLabel), std::to_string(topology.gpus.size())},
          {std::string(kRdmaNicCountLabel), std::to_string(topology.RdmaNicCount())},
          {std::string(kTopologyClassLabel), topology.Fingerprint().substr(0, 12)}};
}

}  // namespace toposched::kube
