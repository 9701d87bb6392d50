// Nodes and NodeTopology objects into the store: a node's NodeSpec derived from its Node, its
// topology and HAMi's registrations (card memory from GPU Feature Discovery's label), relists
// batched into one snapshot, the stale-topology policy, and node positions from HyperNodes.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_util.h"
#include "kube_source_impl.h"
#include "toposched/kube/objects.h"
#include "toposched/metrics/logging.h"
#include "toposched/topology/gpu_memory.h"

namespace toposched::kube {

namespace {

using detail::kVerb;
using metrics::LogLevel;

}  // namespace

// Rebuilds `name`'s NodeSpec from what the informers know and upserts it (or removes the
// node), unless nothing it depends on changed. mu held.
void KubeSource::Impl::RefreshNode(const std::string& name) {
  const auto node_it = nodes.find(name);
  {
    std::lock_guard lock(hami_mu);
    if (node_it == nodes.end() || node_it->second.hami_register.empty()) {
      hami_nodes.erase(name);
    } else {
      hami_nodes.insert(name);
    }
    if (node_it == nodes.end() || node_it->second.hami_amd_register.empty()) {
      hami_amd_nodes.erase(name);
    } else {
      hami_amd_nodes.insert(name);
    }
  }
  if (node_it == nodes.end()) {
    applied_inputs.erase(name);
    if (store.snapshot()->Find(name) != nullptr) {
      store.RemoveNode(name);
      metrics::Log(LogLevel::kInfo, {kVerb, "", name}, "node removed from the state");
      NodeSetChanged();
    }
    return;
  }
  const NodeView& node = node_it->second;
  const auto topo_it = topologies.find(name);
  const bool withdrawn = stale.contains(name) && options.stale_policy == StaleTopologyPolicy::kClosed;
  NodeInputs inputs{node.labels,
                    node.unschedulable,
                    node.hami_register,
                    node.hami_amd_register,
                    topo_it == topologies.end() ? std::string() : topo_it->second.resource_version,
                    withdrawn,
                    node.allocatable_cpu_milli};
  const auto applied = applied_inputs.find(name);
  if (applied != applied_inputs.end() && applied->second == inputs) return;
  const bool moved = applied == applied_inputs.end() || applied->second.labels != inputs.labels;

  state::NodeSpec spec;
  spec.name = name;
  spec.labels = node.labels;
  spec.schedulable = !node.unschedulable;
  spec.cpu_allocatable_milli = node.allocatable_cpu_milli;
  if (topo_it != topologies.end() && topo_it->second.topology && !withdrawn) {
    spec.topology = topo_it->second.topology;
    if (!node.hami_register.empty()) {
      Result<std::vector<HamiRegisteredGpu>> registered = ParseHamiRegister(node.hami_register);
      if (registered.ok()) {
        auto copy = std::make_shared<NodeTopology>(*spec.topology);
        ApplyHamiRegister(*registered, *copy);
        spec.topology = std::move(copy);
      } else {
        metrics::Log(LogLevel::kWarn, {kVerb, "", name},
                     std::string(kHamiNodeRegister) + " ignored: " + registered.error().message());
      }
    }
    // HAMi's AMD device plugin hands out only the cards it registered, by the registered id:
    // AMD GPUs it does not name are unusable, and so are all when the registration cannot be
    // read (fail closed: a bind could write no record its device plugin accepts).
    if (!node.hami_amd_register.empty()) {
      auto copy = std::make_shared<NodeTopology>(*spec.topology);
      Result<std::vector<HamiRegisteredGpu>> registered = ParseHamiAmdRegister(node.hami_amd_register);
      if (registered.ok()) {
        ApplyHamiAmdRegister(*registered, *copy);
      } else {
        metrics::Log(LogLevel::kWarn, {kVerb, "", name},
                     "AMD GPUs held out of placement: " + registered.error().message());
        MarkAmdGpusUnregistered(
            *copy, "HAMi's AMD registration cannot be read (" + registered.error().message() + ")");
      }
      spec.topology = std::move(copy);
    }
    // NCCL files and hwloc exports without NVML carry no card memory; GPU Feature Discovery's
    // node label does (MiB, for every NVIDIA card of the node), so shared requests can be
    // placed there. Applied after HAMi's registration, whose per-card figure wins.
    if (const auto gfd = node.labels.find("nvidia.com/gpu.memory"); gfd != node.labels.end()) {
      const std::string& text = gfd->second;
      std::uint64_t mib = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mib);
      const bool parsed =
          ec == std::errc() && end == text.data() + text.size() && mib > 0 && mib < (1u << 24);
      const bool known =
          std::all_of(spec.topology->gpus.begin(), spec.topology->gpus.end(), [](const Gpu& g) {
            return g.vendor != GpuVendor::kNvidia || (g.memory_mib > 0 && !IsMemoryEstimate(g));
          });
      if (parsed && !known) {
        auto copy = std::make_shared<NodeTopology>(*spec.topology);
        for (Gpu& g : copy->gpus) {
          if (g.vendor == GpuVendor::kNvidia && (g.memory_mib == 0 || IsMemoryEstimate(g)))
            g.memory_mib = mib;
        }
        spec.topology = std::move(copy);
      }
    }
    MarkUnenforcedShares(node, spec.topology);
  }
  applied_inputs[name] = std::move(inputs);
  if (batch != nullptr) {  // a relist: one snapshot for all nodes (FlushBatch)
    batch->push_back(std::move(spec));
    batch_moved = batch_moved || moved;
    return;
  }
  if (Status s = store.UpsertNode(std::move(spec)); !s.ok()) {
    metrics::Log(LogLevel::kWarn, {kVerb, "", name}, s.error().message());
  }
  if (moved) NodeSetChanged();
  RetryPending(name);
}

// A share only where something enforces it: HAMi's device plugin of the card's vendor (its
// registration on the node), or another plugin the operator vouches for with the node label
// toposched.io/shares-enforced=true. Elsewhere the stock device plugin would hand a shared pod
// the whole card while toposched counted a slice of it, so such cards take whole-card requests
// only.
void KubeSource::Impl::MarkUnenforcedShares(const NodeView& node,
                                            std::shared_ptr<const NodeTopology>& topology) {
  if (const auto it = node.labels.find(std::string(kSharesEnforcedLabel));
      it != node.labels.end() && it->second == "true") {
    return;
  }
  auto unenforced = [&](const Gpu& g) {
    return g.vendor == GpuVendor::kAmd ? node.hami_amd_register.empty() : node.hami_register.empty();
  };
  if (std::none_of(topology->gpus.begin(), topology->gpus.end(), unenforced)) return;
  auto copy = std::make_shared<NodeTopology>(*topology);
  for (Gpu& g : copy->gpus) {
    if (unenforced(g)) {
      g.shares_unenforced =
          "no HAMi registration (" +
          std::string(g.vendor == GpuVendor::kAmd ? kHamiAmdNodeRegister : kHamiNodeRegister) + ") and no " +
          std::string(kSharesEnforcedLabel) + "=true label";
    }
  }
  topology = std::move(copy);
}

// A node came, went or changed labels: HyperNodes that select nodes by label or by name
// pattern may now hold other nodes. mu held.
void KubeSource::Impl::NodeSetChanged() {
  if (!options.network.hyper_nodes) return;
  std::lock_guard lock(hypernode_mu);
  if (hypernodes_listed) ResolveHyperNodes();
}

void KubeSource::Impl::FlushBatch(std::vector<state::NodeSpec>& specs) {
  batch = nullptr;
  std::vector<std::string> names;
  for (const state::NodeSpec& spec : specs) names.push_back(spec.name);
  if (Status s = store.UpsertNodes(std::move(specs)); !s.ok()) {
    metrics::Log(LogLevel::kWarn, {kVerb, "", ""}, s.error().message());
  }
  if (std::exchange(batch_moved, false)) NodeSetChanged();
  for (const std::string& name : names) RetryPending(name);
}

void KubeSource::Impl::ApplyNode(const json& object) {
  Result<NodeView> node = ReadNode(object);
  if (!node.ok()) {
    metrics::Log(LogLevel::kWarn, {kVerb, "", ""}, "Node ignored: " + node.error().message());
    return;
  }
  const std::string name = node->name;
  nodes[name] = std::move(node).value();
  RefreshNode(name);
}

void KubeSource::Impl::ApplyTopology(const json& object) {
  Result<NodeTopologyView> topo = ReadNodeTopology(object);
  if (!topo.ok()) {
    // A bad object must not take the node's previous topology with it: keep what we had.
    metrics::Log(LogLevel::kWarn, {kVerb, "", StringAt(object, "/metadata/name")},
                 "NodeTopology ignored: " + topo.error().message());
    return;
  }
  const std::string name = topo->name;
  topologies[name] = std::move(topo).value();
  UpdateStale(name, SystemClock::now());
  RefreshNode(name);
}

// Re-evaluates whether `name`'s topology is stale. mu held. True when that changed.
bool KubeSource::Impl::UpdateStale(const std::string& name, SystemClock::time_point now) {
  if (!topologies.contains(name)) {  // deleted: nothing left to be stale
    const bool was = stale.erase(name) > 0;
    stale_gauge.With({}).Set(static_cast<double>(stale.size()));
    if (was) {
      std::lock_guard lock(stale_copy_mu);
      stale_copy = stale;
    }
    return was;
  }
  bool is_stale = false;
  if (options.stale_topology_age.count() > 0) {
    if (auto it = topologies.find(name); it != topologies.end() && it->second.topology) {
      // No heartbeat at all counts as stale: an agent that never said when it last looked.
      is_stale = !it->second.heartbeat || now - *it->second.heartbeat > options.stale_topology_age;
    }
  }
  const bool was = stale.contains(name);
  if (is_stale == was) return false;
  struct Publish {  // the copy /nodes and /explain read without taking mu
    Impl& d;
    ~Publish() {
      std::lock_guard lock(d.stale_copy_mu);
      d.stale_copy = d.stale;
    }
  } publish{*this};
  if (is_stale) {
    stale.insert(name);
    metrics::Log(LogLevel::kWarn, {kVerb, "", name},
                 std::string("NodeTopology heartbeat older than the stale age: ") +
                     (options.stale_policy == StaleTopologyPolicy::kClosed
                          ? "no new GPU pods on this node until its agent reports again"
                          : "still placing on its last topology (stale policy open)"));
  } else {
    stale.erase(name);
    metrics::Log(LogLevel::kInfo, {kVerb, "", name}, "NodeTopology fresh again");
  }
  stale_gauge.With({}).Set(static_cast<double>(stale.size()));
  return true;
}

void KubeSource::Impl::CheckStale() {
  std::lock_guard lock(mu);
  const auto now = SystemClock::now();
  std::vector<std::string> changed;
  for (const auto& [name, topo] : topologies) {
    if (UpdateStale(name, now)) changed.push_back(name);
  }
  for (const std::string& name : changed) RefreshNode(name);
}

// HyperNodes or nodes changed: resolve every node's position again (labelMatch members read
// the nodes' labels as the store has them now). A set that does not resolve (a cycle, a bad
// regex) is logged and the previous positions stay; positions that come out the same are not
// published again. hypernode_mu held.
void KubeSource::Impl::ResolveHyperNodes() {
  json list = json::array();
  for (const auto& [name, object] : hypernodes) list.push_back(object);
  pd::NodeLabels labels;
  const std::shared_ptr<const state::Snapshot> snapshot = store.snapshot();
  for (const auto& record : snapshot->nodes()) labels[record->name] = record->labels;
  std::vector<std::string> warnings;
  Result<std::map<std::string, pd::Location>> resolved =
      pd::ResolveHyperNodes(options.network, list.dump(), labels, &warnings);
  for (const std::string& w : warnings) metrics::Log(LogLevel::kWarn, {"informer/hypernodes", "", ""}, w);
  if (!resolved.ok()) {
    metrics::Log(LogLevel::kWarn, {"informer/hypernodes", "", ""},
                 "HyperNodes not applied, node positions unchanged: " + resolved.error().message());
    return;
  }
  const std::size_t placed = resolved->size();
  if (const auto current = store.node_locations(); current != nullptr && *current == *resolved) return;
  store.SetNodeLocations(
      std::make_shared<const std::map<std::string, pd::Location>>(std::move(resolved).value()));
  metrics::Log(LogLevel::kInfo, {"informer/hypernodes", "", ""},
               std::to_string(hypernodes.size()) + " HyperNodes place " + std::to_string(placed) + " nodes");
}

}  // namespace toposched::kube
