#pragma once
// Request bodies shaped exactly as the schedulers marshal them (Go encoding/json of the upstream
// types): kube-scheduler extender/v1 (PascalCase wrapper keys, no json tags, nil = null) around
// API objects in camelCase; Volcano's extender plugin (lowerCamel wrapper keys around
// PascalCase TaskInfo/NodeInfo). See ../shared/reference/protocols.md.

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace toposched::testing {

struct PodSpec {
  std::string name = "pod";
  std::string ns = "default";
  std::string uid = "uid-1";
  std::string resource_version = "1";
  int gpus = 0;
  int rdma = 0;
  std::map<std::string, std::string> annotations = {};
  std::map<std::string, std::string> labels = {};
  std::map<std::string, std::string> extra_limits = {};  // e.g. nvidia.com/gpumem
  std::string cpu = "4";                                 // the CPU request; empty: none
};

// A v1.Pod as the API server sends it (typical fields a real pod carries, incl. status).
inline nlohmann::json MakePod(const PodSpec& p) {
  nlohmann::json limits = nlohmann::json::object();
  nlohmann::json requests = {{"memory", "32Gi"}};
  if (!p.cpu.empty()) requests["cpu"] = p.cpu;
  if (p.gpus > 0) limits["nvidia.com/gpu"] = std::to_string(p.gpus);
  if (p.rdma > 0) limits["rdma/ib"] = std::to_string(p.rdma);
  for (const auto& [k, v] : p.extra_limits) limits[k] = v;
  nlohmann::json meta = {{"name", p.name},
                         {"namespace", p.ns},
                         {"uid", p.uid},
                         {"resourceVersion", p.resource_version},
                         {"creationTimestamp", "2026-12-02T10:00:00Z"}};
  if (!p.annotations.empty()) meta["annotations"] = p.annotations;
  if (!p.labels.empty()) meta["labels"] = p.labels;
  return {{"metadata", meta},
          {"spec",
           {{"containers",
             {{{"name", "main"},
               {"image", "vllm/vllm-openai:v0.6.0"},
               {"resources", {{"limits", limits}, {"requests", requests}}},
               {"terminationMessagePolicy", "File"}}}},
            {"restartPolicy", "Always"},
            {"schedulerName", "default-scheduler"},
            {"priority", 0}}},
          {"status", {{"phase", "Pending"}, {"qosClass", "Burstable"}}}};
}

// A v1.Node, roughly as kube-scheduler sends it in Nodes mode.
inline nlohmann::json MakeNode(const std::string& name) {
  return {
      {"metadata",
       {{"name", name},
        {"uid", "node-uid-" + name},
        {"labels", {{"kubernetes.io/hostname", name}, {"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}}}}},
      {"spec", {{"podCIDR", "10.0.0.0/24"}}},
      {"status",
       {{"capacity", {{"nvidia.com/gpu", "8"}, {"cpu", "224"}}},
        {"allocatable", {{"nvidia.com/gpu", "8"}, {"cpu", "220"}}},
        {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};
}

// ExtenderArgs: nodeCacheCapable -> NodeNames, Nodes null; otherwise Nodes (a v1.NodeList), NodeNames null.
inline std::string ExtenderArgs(const nlohmann::json& pod, const std::vector<std::string>& nodes,
                                bool node_cache_capable = true) {
  nlohmann::json args = {{"Pod", pod}};
  if (node_cache_capable) {
    args["Nodes"] = nullptr;
    args["NodeNames"] = nodes;
  } else {
    nlohmann::json items = nlohmann::json::array();
    for (const std::string& n : nodes) items.push_back(MakeNode(n));
    args["Nodes"] = {{"metadata", nlohmann::json::object()}, {"items", items}};
    args["NodeNames"] = nullptr;
  }
  return args.dump();
}

inline std::string BindingArgs(const PodSpec& p, const std::string& node) {
  return nlohmann::json{{"PodName", p.name}, {"PodNamespace", p.ns}, {"PodUID", p.uid}, {"Node", node}}
      .dump();
}

// Volcano api.TaskInfo (PascalCase, no json tags), with Resreq in milli-units.
inline nlohmann::json MakeTask(const PodSpec& p, const std::string& node_name = "") {
  nlohmann::json scalars = nlohmann::json::object();
  if (p.gpus > 0) scalars["nvidia.com/gpu"] = p.gpus * 1000.0;
  if (p.rdma > 0) scalars["rdma/ib"] = p.rdma * 1000.0;
  scalars["pods"] = 1;
  return {
      {"UID", p.uid},
      {"Job", p.ns + "/pg-" + p.name},
      {"Name", p.name},
      {"Namespace", p.ns},
      {"TaskRole", "worker"},
      {"Resreq",
       {{"MilliCPU", 4000.0}, {"Memory", 34359738368.0}, {"ScalarResources", scalars}, {"MaxTaskNum", 0}}},
      {"InitResreq", {{"MilliCPU", 4000.0}, {"Memory", 34359738368.0}, {"ScalarResources", scalars}}},
      {"NodeName", node_name},
      {"EvictionOccurred", false},
      {"JobAllocatedHyperNode", ""},
      {"Status", 1},
      {"Priority", 0},
      {"VolumeReady", false},
      {"Preemptable", false},
      {"BestEffort", false},
      {"HasRestartableInitContainer", false},
      {"SchGated", false},
      {"RevocableZone", ""},
      {"NumaInfo", nullptr},
      {"Pod", MakePod(p)},
      {"PodAnnotations", nullptr},
      {"CustomBindErrHandlerSucceeded", false}};
}

// Volcano api.NodeInfo (the parts a real one always has).
inline nlohmann::json MakeVolcanoNode(const std::string& name) {
  return {{"Name", name},
          {"Node", MakeNode(name)},
          {"State", {{"Phase", 1}, {"Reason", ""}}},
          {"Idle",
           {{"MilliCPU", 220000.0}, {"Memory", 1.0e12}, {"ScalarResources", {{"nvidia.com/gpu", 8000.0}}}}},
          {"Used", {{"MilliCPU", 0.0}, {"Memory", 0.0}, {"ScalarResources", nullptr}}},
          {"Tasks", nlohmann::json::object()},
          {"Others", nullptr},
          {"Generation", 3}};
}

}  // namespace toposched::testing
