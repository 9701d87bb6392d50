#include "toposched/kube/agent.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "json_util.h"
#include "toposched/kube/objects.h"
#include "toposched/kube/time.h"
#include "toposched/metrics/logging.h"

namespace toposched::kube {

namespace {

using metrics::LogLevel;
using nlohmann::json;

constexpr std::string_view kVerb = "agent";

// The status fields that say when and how often, not what: equal topologies differ only there.
json Content(json status) {
  if (status.is_object()) {
    status.erase("heartbeatTime");
    status.erase("generation");
  }
  return status;
}

std::int64_t GenerationOf(const json& object) {
  const json* g = nullptr;
  if (object.contains("status") && object["status"].is_object() && object["status"].contains("generation")) {
    g = &object["status"]["generation"];
  }
  return g != nullptr && g->is_number_integer() ? g->get<std::int64_t>() : 0;
}

}  // namespace

std::string_view ToString(PublishOutcome outcome) {
  switch (outcome) {
    case PublishOutcome::kCreated:
      return "created";
    case PublishOutcome::kUpdated:
      return "updated";
    case PublishOutcome::kHeartbeat:
      return "heartbeat";
    case PublishOutcome::kUnchanged:
      return "unchanged";
  }
  return "unknown";
}

AgentPublisher::AgentPublisher(Api& api, AgentOptions options, Discover discover)
    : api_(api), options_(std::move(options)), discover_(std::move(discover)) {
  if (!options_.now) options_.now = [] { return std::chrono::system_clock::now(); };
  if (!options_.sleep) {
    options_.sleep = [](std::chrono::milliseconds d, std::stop_token stop) {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      cv.wait_for(lock, stop, d, [] { return false; });
    };
  }
}

Result<PublishOutcome> AgentPublisher::PublishOnce() {
  const std::string& name = options_.node_name;
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(NodeTopology topology, discover_(), "discovery");

  Result<json> node = api_.Get(NodePath(name));
  if (!node.ok()) {
    if (IsNotFound(node.error())) {
      return Error("node " + name +
                   " does not exist: the agent needs the Kubernetes node name (--node-name or "
                   "the NODE_NAME environment variable from the downward API's spec.nodeName)");
    }
    return node.error();
  }
  const std::string node_uid = StringAt(*node, "/metadata/uid");
  const auto now = options_.now();

  // Node labels first: they are what users select on, and cost one patch only when they change.
  if (options_.label_node) {
    json labels_patch = json::object();
    const json current = ObjectAt(*node, "/metadata/labels");
    for (const auto& [key, value] : AgentNodeLabels(topology)) {
      if (!current.contains(key) || current[key] != value) labels_patch[key] = value;
    }
    if (!labels_patch.empty()) {
      TOPOSCHED_ASSIGN_OR_RETURN_CTX(
          std::ignore,
          api_.Patch(NodePath(name), PatchType::kMerge, json{{"metadata", {{"labels", labels_patch}}}}),
          "labelling node " + name);
    }
  }

  const std::string path = NodeTopologyPath(name);
  Result<json> existing = api_.Get(path);
  if (!existing.ok() && !IsNotFound(existing.error())) return existing.error();

  if (!existing.ok()) {
    json object = NodeTopologyObject(topology, name, node_uid, 1, now);
    json status = object["status"];
    object.erase("status");  // a status subresource: create ignores it, /status writes it
    Result<json> created = api_.Create(std::string(kNodeTopologyCollection), object);
    if (!created.ok() && !IsConflict(created.error())) return created.error().WithContext("creating " + path);
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::ignore,
                                   api_.Patch(path + "/status", PatchType::kMerge, json{{"status", status}}),
                                   "writing " + path + "/status");
    return created.ok() ? PublishOutcome::kCreated : PublishOutcome::kUpdated;
  }

  const std::int64_t generation = GenerationOf(*existing);
  json wanted = NodeTopologyObject(topology, name, node_uid, generation, now);
  const json old_status = ObjectAt(*existing, "/status");

  // The object's labels (topology class) follow the topology.
  const json wanted_labels = ObjectAt(wanted, "/metadata/labels");
  if (ObjectAt(*existing, "/metadata/labels") != wanted_labels && !wanted_labels.empty()) {
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(
        std::ignore, api_.Patch(path, PatchType::kMerge, json{{"metadata", {{"labels", wanted_labels}}}}),
        "labelling " + path);
  }

  if (Content(old_status) == Content(wanted["status"])) {
    std::optional<std::chrono::system_clock::time_point> beat;
    if (old_status.contains("heartbeatTime") && old_status["heartbeatTime"].is_string()) {
      if (auto t = ParseTime(old_status["heartbeatTime"].get<std::string>()); t.ok()) beat = *t;
    }
    if (beat && now - *beat < options_.heartbeat && now >= *beat) return PublishOutcome::kUnchanged;
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::ignore,
                                   api_.Patch(path + "/status", PatchType::kMerge,
                                              json{{"status", {{"heartbeatTime", FormatTime(now)}}}}),
                                   "heartbeat on " + path + "/status");
    return PublishOutcome::kHeartbeat;
  }

  // Changed: the whole status, generation + 1; keys the new status lacks are deleted (null).
  json status = NodeTopologyObject(topology, name, node_uid, generation + 1, now)["status"];
  for (const auto& [key, value] : old_status.items()) {
    if (!status.contains(key)) status[key] = nullptr;
  }
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::ignore,
                                 api_.Patch(path + "/status", PatchType::kMerge, json{{"status", status}}),
                                 "writing " + path + "/status");
  return PublishOutcome::kUpdated;
}

void AgentPublisher::Run(std::stop_token stop) {
  Backoff backoff(std::chrono::milliseconds(1000), options_.interval);
  while (!stop.stop_requested()) {
    Result<PublishOutcome> r = PublishOnce();
    std::chrono::milliseconds wait = options_.interval;
    if (r.ok()) {
      backoff.Reset();
      const LogLevel level = *r == PublishOutcome::kCreated || *r == PublishOutcome::kUpdated
                                 ? LogLevel::kInfo
                                 : LogLevel::kDebug;
      if (metrics::LogEnabled(level)) {
        metrics::Log(level, {kVerb, "", options_.node_name}, "NodeTopology " + std::string(ToString(*r)));
      }
    } else {
      wait = std::max(std::chrono::milliseconds(100), backoff.Next());
      metrics::Log(LogLevel::kWarn, {kVerb, "", options_.node_name},
                   "publishing failed (retrying): " + r.error().message());
    }
    options_.sleep(wait, stop);
  }
}

}  // namespace toposched::kube
