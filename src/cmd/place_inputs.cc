#include "place_inputs.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <regex>

#include "../common/json_errors.h"
#include "toposched/agent/discovery.h"
#include "toposched/common/pod_label.h"
#include "toposched/framework/allocation.h"
#include "toposched/kube/objects.h"
#include "toposched/placement/allocation_json.h"

namespace toposched::cmd {

namespace {

using nlohmann::json;

constexpr int kMaxYamlDepth = 256;
// A node's pods as kubectl prints them run to some hundred thousand values; 16 MiB of "[],"
// would otherwise become millions of nested values.
constexpr std::size_t kMaxJsonValues = 4'000'000;

// YAML 1.2 core schema for a plain scalar: null, bool, int, float, else a string. Quoted
// scalars are strings ("8" stays "8": kubectl quotes what would otherwise read as a number).
json PlainScalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  static const std::regex kInt("[-+]?[0-9]+");
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (std::regex_match(s, kInt) || std::regex_match(s, kFloat)) {
    json number = json::parse(s[0] == '+' ? s.substr(1) : s, nullptr, /*allow_exceptions=*/false);
    if (!number.is_discarded()) return number;
  }
  return s;
}

Result<json> YamlToJson(const YAML::Node& node, int depth) {
  if (depth > kMaxYamlDepth) return Error("nested deeper than " + std::to_string(kMaxYamlDepth) + " levels");
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar: {
      const std::string& tag = node.Tag();
      if (tag == "!" || tag == "tag:yaml.org,2002:str") return json(node.Scalar());
      return PlainScalar(node.Scalar());
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const YAML::Node& item : node) {
        auto v = YamlToJson(item, depth + 1);
        if (!v.ok()) return v;
        out.push_back(std::move(v).value());
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& entry : node) {
        if (!entry.first.IsScalar())
          return Error("line " + std::to_string(entry.first.Mark().line + 1) +
                       ": a mapping key that is not a scalar");
        auto v = YamlToJson(entry.second, depth + 1);
        if (!v.ok()) return v;
        out[entry.first.Scalar()] = std::move(v).value();
      }
      return out;
    }
  }
  return json(nullptr);
}

bool LooksLikeJson(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && (text[first] == '{' || text[first] == '[');
}

std::string KindOf(const json& object) {
  const auto kind = object.find("kind");
  return kind != object.end() && kind->is_string() ? kind->get<std::string>() : "";
}

std::string NameOf(const json& object) {
  const auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return "";
  const auto name = meta->find("name");
  return name != meta->end() && name->is_string() ? name->get<std::string>() : "";
}

// Flattens Lists (kind List / FooList with items, or a bare array) into `out`.
Status Flatten(json value, std::vector<json>& out) {
  if (value.is_null()) return Status::Ok();  // an empty YAML document
  if (value.is_array()) {
    for (json& item : value) {
      TOPOSCHED_RETURN_IF_ERROR(Flatten(std::move(item), out));
    }
    return Status::Ok();
  }
  if (!value.is_object())
    return Error("expected an object, a List or an array, got " + std::string(value.type_name()));
  const std::string kind = KindOf(value);
  if (kind.ends_with("List") && value.contains("items")) {
    json& items = value["items"];
    if (items.is_null()) return Status::Ok();  // kubectl prints "items: []", an empty list may be null
    if (!items.is_array()) return Error(kind + ".items: expected an array");
    for (json& item : items) out.push_back(std::move(item));
    return Status::Ok();
  }
  out.push_back(std::move(value));
  return Status::Ok();
}

std::string Names(const std::vector<const json*>& objects) {
  std::string out;
  for (std::size_t i = 0; i < objects.size() && i < 8; ++i) out += (i ? ", " : "") + NameOf(*objects[i]);
  if (objects.size() > 8) out += ", ...";
  return out;
}

// Another scheduler's pod: its devices are unknown, so it is counted on the last free GPUs of its
// vendor and the last free RDMA NICs (PCI order), as the extender counts it (docs/operations.md).
Status CountForeignPod(const PlacementRequest& request, const NodeTopology& topology,
                       NodeAllocation& allocated) {
  framework::AllocationDelta delta;
  for (int g = static_cast<int>(topology.gpus.size()) - 1;
       g >= 0 && static_cast<int>(delta.exclusive_gpus.size()) < request.gpus; --g) {
    const Gpu& gpu = topology.gpus[static_cast<std::size_t>(g)];
    if (gpu.vendor == request.vendor && GpuFree(allocated, g)) delta.exclusive_gpus.push_back(g);
  }
  for (int n = static_cast<int>(topology.nics.size()) - 1;
       n >= 0 && static_cast<int>(delta.nics.size()) < request.rdma_nics; --n) {
    if (topology.nics[static_cast<std::size_t>(n)].rdma && !NicUsed(allocated, n)) delta.nics.push_back(n);
  }
  if (static_cast<int>(delta.exclusive_gpus.size()) < request.gpus ||
      static_cast<int>(delta.nics.size()) < request.rdma_nics) {
    return Error("asks " + std::to_string(request.gpus) + " GPUs and " + std::to_string(request.rdma_nics) +
                 " RDMA NICs, more than the other pods leave free");
  }
  return framework::ApplyDelta(topology, delta, allocated);
}

}  // namespace

Result<std::vector<json>> ReadKubeObjects(std::string_view text) {
  std::vector<json> out;
  if (LooksLikeJson(text)) {
    // Checked before parsing: "[[[[..." must not recurse the parser into a crash.
    const json_errors::Shape shape = json_errors::ScanShape(text);
    if (shape.max_depth > kMaxYamlDepth)
      return Error("nested deeper than " + std::to_string(kMaxYamlDepth) + " levels");
    if (shape.values > kMaxJsonValues)
      return Error("more than " + std::to_string(kMaxJsonValues) + " values");
    json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) return Error("not valid JSON");
    TOPOSCHED_RETURN_IF_ERROR(Flatten(std::move(value), out));
    return out;
  }
  try {
    const std::vector<YAML::Node> documents = YAML::LoadAll(std::string(text));
    bool any = false;  // an empty List is fine (no pods on the node); an empty file is not
    for (const YAML::Node& doc : documents) {
      TOPOSCHED_ASSIGN_OR_RETURN(auto value, YamlToJson(doc, 0));
      any = any || !value.is_null();
      TOPOSCHED_RETURN_IF_ERROR(Flatten(std::move(value), out));
    }
    if (!any) return Error("no objects in it");
  } catch (const YAML::Exception& e) {
    return Error(std::string("not valid JSON or YAML: ") + e.what());
  }
  return out;
}

Result<NodeTopology> ReadPlaceTopology(const std::string& path, std::string_view content,
                                       const std::string& node) {
  const auto first = content.find_first_not_of(" \t\r\n");
  const bool xml = first != std::string_view::npos && content[first] == '<';
  auto objects = xml ? Result<std::vector<json>>(Error("")) : ReadKubeObjects(content);
  // XML, and a single NodeTopology JSON document without --node: the file reader, as before.
  if (xml || (LooksLikeJson(content) && objects.ok() && objects->size() == 1 && node.empty())) {
    return LoadTopologyFile(path);
  }
  if (!objects.ok()) return objects.error().WithContext(path);
  std::vector<const json*> topologies;
  std::vector<std::string> other_kinds;
  for (const json& object : *objects) {
    const std::string kind = KindOf(object);
    if (kind == "NodeTopology")
      topologies.push_back(&object);
    else if (std::find(other_kinds.begin(), other_kinds.end(), kind) == other_kinds.end())
      other_kinds.push_back(kind);
  }
  if (topologies.empty()) {
    std::string kinds;
    for (const std::string& k : other_kinds)
      kinds += (kinds.empty() ? "" : ", ") + (k.empty() ? "(no kind)" : k);
    return Error(path + ": no NodeTopology in it (found " + kinds + ")");
  }
  const json* chosen = nullptr;
  if (!node.empty()) {
    for (const json* t : topologies) {
      if (NameOf(*t) == node) chosen = t;
    }
    if (chosen == nullptr)
      return Error(path + ": no NodeTopology named " + node + " (it holds " + Names(topologies) + ")");
  } else if (topologies.size() > 1) {
    return Error(path + ": " + std::to_string(topologies.size()) + " NodeTopologies (" + Names(topologies) +
                 "): pick one with --node NAME");
  } else {
    chosen = topologies.front();
  }
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto view, kube::ReadNodeTopology(*chosen), path);
  if (view.topology == nullptr) {
    return Error(path + ": NodeTopology " + view.name +
                 " has no status yet (the agent has not published it)");
  }
  NodeTopology topology = *view.topology;
  topology.source_detail = NameOf(*chosen);
  return topology;
}

Result<std::string> ReadPodJson(std::string_view content) {
  if (LooksLikeJson(content)) return std::string(content);  // ParsePodRequest's own errors
  TOPOSCHED_ASSIGN_OR_RETURN(auto objects, ReadKubeObjects(content));
  if (objects.size() != 1) {
    return Error("holds " + std::to_string(objects.size()) + " objects; give one Pod");
  }
  return objects.front().dump();
}

Result<PlaceAllocations> ReadPlaceAllocations(std::string_view content, NodeTopology& topology,
                                              const RequestConfig& request_config) {
  TOPOSCHED_ASSIGN_OR_RETURN(auto objects, ReadKubeObjects(content));
  PlaceAllocations out;
  // The ALLOC.json form: one object without a kind.
  if (objects.size() == 1 && KindOf(objects.front()).empty()) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto allocated, DecodeAllocationJson(objects.front().dump(), topology));
    out.allocated = std::move(allocated);
    return out;
  }
  // HAMi's registration on the Node first: GPU UUIDs that HAMi's device lists name.
  for (const json& object : objects) {
    const std::string kind = KindOf(object);
    if (kind == "Pod") continue;
    if (kind != "Node")
      return Error("a " + (kind.empty() ? std::string("object without a kind") : kind) +
                   "; expected Pods (and the Node), or the ALLOC.json form");
    TOPOSCHED_ASSIGN_OR_RETURN(auto node, kube::ReadNode(object));
    if (node.name != topology.node_name) continue;
    if (!node.hami_register.empty()) {
      TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto registered, kube::ParseHamiRegister(node.hami_register),
                                     "node " + node.name);
      kube::ApplyHamiRegister(registered, topology);
      out.notes.push_back("node " + node.name + ": GPU UUIDs from HAMi's registration");
    }
    if (!node.hami_amd_register.empty()) {
      TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto registered, kube::ParseHamiAmdRegister(node.hami_amd_register),
                                     "node " + node.name);
      const int matched = kube::ApplyHamiAmdRegister(registered, topology);
      out.notes.push_back("node " + node.name + ": " + std::to_string(matched) +
                          " AMD GPUs from HAMi's AMD registration (the others unusable)");
    }
  }
  int elsewhere = 0, finished = 0, counted = 0;
  std::vector<const json*> foreign;
  for (const json& object : objects) {
    if (KindOf(object) != "Pod") continue;
    TOPOSCHED_ASSIGN_OR_RETURN(auto pod, kube::ReadPod(object));
    std::string node = pod.node_name;
    if (node.empty()) {
      const auto hami_node = pod.annotations.find(std::string(kube::kHamiVgpuNode));
      if (hami_node != pod.annotations.end()) node = hami_node->second;
    }
    if (node != topology.node_name) {
      ++elsewhere;
      continue;
    }
    if (!pod.Active()) {
      ++finished;
      continue;
    }
    const auto ours = pod.annotations.find(std::string(kube::kAllocationAnnotation));
    // Ours, else HAMi's lists (NVIDIA's, AMD's or both), each read as its vendor's.
    std::vector<std::pair<std::string, Result<framework::AllocationDelta>>> records;
    if (ours != pod.annotations.end()) {
      records.emplace_back(std::string(kube::kAllocationAnnotation),
                           kube::DecodeAllocation(ours->second, topology));
    } else {
      for (const GpuVendor vendor : {GpuVendor::kNvidia, GpuVendor::kAmd}) {
        const std::string key(kube::HamiDeviceKeysFor(vendor).allocated);
        const auto hami = pod.annotations.find(key);
        if (hami == pod.annotations.end()) continue;
        auto devices = kube::DecodeHamiDevices(hami->second);
        records.emplace_back(key, devices.ok() ? kube::DeltaFromHami(*devices, topology, vendor)
                                               : Result<framework::AllocationDelta>(devices.error()));
      }
    }
    if (records.empty()) {
      foreign.push_back(&object);
      continue;
    }
    for (const auto& [annotation, delta] : records) {
      const std::string label = PodLabel(pod.pod_namespace, pod.pod_name);
      if (!delta.ok()) return delta.error().WithContext("pod " + label + " " + annotation);
      if (Status s = framework::ApplyDelta(topology, *delta, out.allocated); !s.ok()) {
        return s.error().WithContext("pod " + label + " (a device another pod holds)");
      }
    }
    ++counted;
  }
  // Other schedulers' pods after every record, on the devices the records leave free.
  int foreign_counted = 0;
  for (const json* object : foreign) {
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto request, ParsePodRequest(object->dump(), request_config),
                                   "pod " + NameOf(*object));
    if (request.gpus == 0 && request.rdma_nics == 0) continue;
    if (Status s = CountForeignPod(request, topology, out.allocated); !s.ok()) {
      return s.error().WithContext("pod " + NameOf(*object) + " (no allocation record)");
    }
    ++foreign_counted;
  }
  out.notes.push_back(std::to_string(counted) + " pods with allocation records on " + topology.node_name +
                      (foreign_counted > 0 ? ", " + std::to_string(foreign_counted) +
                                                 " without (counted on the last free devices)"
                                           : "") +
                      (elsewhere > 0 ? "; " + std::to_string(elsewhere) + " on other nodes skipped" : "") +
                      (finished > 0 ? "; " + std::to_string(finished) + " finished skipped" : ""));
  return out;
}

}  // namespace toposched::cmd
