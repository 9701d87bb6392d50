// Dynamic Resource Allocation (KubeSourceOptions::dra): the ResourceSlices, ResourceClaims,
// ResourceClaimTemplates and DeviceClasses of resource.k8s.io/v1, read by informers like the
// others. Every allocated claim's devices are counted as taken in the store (one foreign
// allocation per claim, uid kClaimUidPrefix + the claim's UID), mapped onto the node's
// NodeTopology by PCI address (kube/dra.h MapDraDevices); a device that cannot be mapped is
// reported (log, toposched_dra_unmapped_devices, /nodes), never guessed. DraDevicesFor tells the
// extender what a pod's claims ask, so that prioritize ranks the nodes for it.

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kube_source_impl.h"
#include "toposched/common/pod_label.h"
#include "toposched/metrics/logging.h"

namespace toposched::kube {

using detail::kClaimUidPrefix;
using detail::kVerb;
using metrics::LogLevel;

namespace {

std::string Key(std::string_view ns, std::string_view name) {
  return std::string(ns) + "/" + std::string(name);
}

std::string DeviceKey(std::string_view driver, std::string_view pool, std::string_view device) {
  std::string k(driver);
  k += '\n';
  k += pool;
  k += '\n';
  k += device;
  return k;
}

}  // namespace

// ---- slices ----

void KubeSource::Impl::IndexSlice(const std::string& name, const DraSlice* slice) {
  if (auto old = dra_slices.find(name); old != dra_slices.end()) {
    for (const DraDevice& d : old->second.devices) {
      dra_devices.erase(DeviceKey(old->second.driver, old->second.pool, d.name));
    }
    dra_slices.erase(old);
  }
  if (slice == nullptr) return;
  auto [it, inserted] = dra_slices.emplace(name, *slice);
  for (std::size_t i = 0; i < it->second.devices.size(); ++i) {
    dra_devices[DeviceKey(it->second.driver, it->second.pool, it->second.devices[i].name)] = {name, i};
  }
}

void KubeSource::Impl::ApplySlice(const json& object) {
  Result<DraSlice> slice = ReadResourceSlice(object);
  const std::string name = NameOf(object);
  if (!slice.ok()) {
    metrics::Log(LogLevel::kWarn, {kVerb, "", ""},
                 "ResourceSlice " + name + " not read: " + slice.error().message());
    return;
  }
  {
    std::lock_guard lock(dra_mu);
    IndexSlice(name, &*slice);
  }
  CountPendingClaims();
}

void KubeSource::Impl::RemoveSlice(const json& object) {
  {
    std::lock_guard lock(dra_mu);
    IndexSlice(NameOf(object), nullptr);
  }
  // The claims whose devices it listed keep them: a driver republishes its slices (a restart, a
  // new pool generation) while the devices stay allocated. What is counted stays counted.
}

void KubeSource::Impl::ReplaceSlices(std::vector<json>&& objects) {
  {
    std::lock_guard lock(dra_mu);
    dra_slices.clear();
    dra_devices.clear();
    for (const json& o : objects) {
      Result<DraSlice> slice = ReadResourceSlice(o);
      if (!slice.ok()) {
        metrics::Log(LogLevel::kWarn, {kVerb, "", ""},
                     "ResourceSlice " + NameOf(o) + " not read: " + slice.error().message());
        continue;
      }
      IndexSlice(NameOf(o), &*slice);
    }
    slices_listed = true;
  }
  CountPendingClaims();
}

// ---- claims ----

void KubeSource::Impl::ApplyClaim(const json& object) {
  std::lock_guard lock(mu);
  Result<DraClaim> claim = ReadResourceClaim(object);
  if (!claim.ok()) {
    // Fail closed: a claim we cannot read keeps whatever it was counted with.
    metrics::Log(LogLevel::kWarn, {kVerb, "", ""},
                 "ResourceClaim " + Key(StringAt(object, "/metadata/namespace"), NameOf(object)) +
                     " not read, its devices stay as counted: " + claim.error().message());
    return;
  }
  std::lock_guard dra_lock(dra_mu);
  CountClaim(*claim);
  dra_claims[Key(claim->namespace_, claim->name)] = std::move(*claim);
}

void KubeSource::Impl::RemoveClaim(const json& object) {
  std::lock_guard lock(mu);
  std::lock_guard dra_lock(dra_mu);
  const std::string key = Key(StringAt(object, "/metadata/namespace"), NameOf(object));
  if (auto it = dra_claims.find(key); it != dra_claims.end()) {
    UncountClaim(it->second.uid, "ResourceClaim deleted");
    dra_claims.erase(it);
  }
}

void KubeSource::Impl::ReplaceClaims(std::vector<json>&& objects) {
  std::lock_guard lock(mu);
  std::lock_guard dra_lock(dra_mu);
  std::map<std::string, DraClaim, std::less<>> now;
  for (const json& o : objects) {
    Result<DraClaim> claim = ReadResourceClaim(o);
    const std::string key = Key(StringAt(o, "/metadata/namespace"), NameOf(o));
    if (!claim.ok()) {
      metrics::Log(
          LogLevel::kWarn, {kVerb, "", ""},
          "ResourceClaim " + key + " not read, its devices stay as counted: " + claim.error().message());
      if (auto old = dra_claims.find(key); old != dra_claims.end()) now.emplace(key, old->second);
      continue;
    }
    CountClaim(*claim);
    now.emplace(key, std::move(*claim));
  }
  for (const auto& [key, claim] : dra_claims) {
    if (!now.contains(key)) UncountClaim(claim.uid, "ResourceClaim deleted");
  }
  dra_claims = std::move(now);
  claims_listed = true;
}

void KubeSource::Impl::UncountClaim(const std::string& uid, std::string_view why) {
  const std::string store_uid = std::string(kClaimUidPrefix) + uid;
  dra_pending.erase(uid);
  std::erase_if(dra_unmapped, [&uid](const auto& entry) { return entry.second == uid; });
  Result<std::optional<state::PodAllocation>> released = store.Release(store_uid, /*persist=*/false);
  if (released.ok() && released->has_value()) {
    const state::PodAllocation& a = **released;
    metrics::Log(LogLevel::kInfo, {kVerb, PodLabel(a.pod_namespace, a.pod_name), a.node},
                 "claim's devices released (" + std::string(why) + ")");
  }
  RefreshDraGauges();
}

// mu and dra_mu held. Counts the claim's allocated devices on its node, replacing what was
// counted for it before; a claim without an allocation counts nothing.
void KubeSource::Impl::CountClaim(const DraClaim& claim) {
  const std::string store_uid = std::string(kClaimUidPrefix) + claim.uid;
  if (!claim.allocated || claim.results.empty()) {
    UncountClaim(claim.uid, "claim deallocated");
    return;
  }
  // The node: the allocation's node selector, else the slice of its first device.
  std::string node = claim.allocated_node;
  state::PodAllocation allocation;
  allocation.uid = store_uid;
  allocation.pod_namespace = claim.namespace_;
  allocation.pod_name = "resourceclaim/" + claim.name;
  allocation.foreign = true;
  std::set<int> gpus, nics;
  std::vector<std::string> unmapped;
  bool missing_slice = false;
  std::shared_ptr<const state::Snapshot> snapshot = store.snapshot();
  for (const DraAllocationResult& r : claim.results) {
    const auto at = dra_devices.find(DeviceKey(r.driver, r.pool, r.device));
    if (at == dra_devices.end()) {
      missing_slice = true;
      continue;
    }
    const DraSlice& slice = dra_slices.at(at->second.first);
    const std::string& device_node =
        !slice.node_name.empty() ? slice.node_name : slice.devices[at->second.second].node_name;
    if (node.empty()) node = device_node;
    if (device_node.empty() || device_node != node) {
      unmapped.push_back(r.driver + "/" + r.pool + "/" + r.device + " (not a device of node " + node + ")");
      continue;
    }
    const state::NodeRecord* record = snapshot->Find(node);
    if (record == nullptr || record->topology == nullptr) {
      missing_slice = true;  // the node's topology comes later: counted then
      continue;
    }
    const DraDeviceMapping m =
        MapDraDevice(slice, slice.devices[at->second.second], *record->topology, options.dra_drivers);
    if (!m.mapped()) {
      unmapped.push_back(r.driver + "/" + r.pool + "/" + r.device + ": " + m.reason);
      continue;
    }
    (m.kind == DraDeviceKind::kGpu ? gpus : nics).insert(m.index);
  }
  const std::string label = PodLabel(claim.namespace_, "resourceclaim/" + claim.name);
  for (const std::string& u : unmapped) {
    const std::string key = node + "\n" + u;
    if (dra_unmapped.emplace(key, claim.uid).second) {
      metrics::Log(LogLevel::kWarn, {kVerb, label, node},
                   "allocated DRA device not counted: " + u +
                       "; toposched cannot tell which of the node's "
                       "devices it is");
    }
  }
  if (missing_slice) {
    dra_pending[claim.uid] = Key(claim.namespace_, claim.name);
  } else {
    dra_pending.erase(claim.uid);
  }
  allocation.node = node;
  allocation.delta.exclusive_gpus.assign(gpus.begin(), gpus.end());
  allocation.delta.nics.assign(nics.begin(), nics.end());
  if (const std::optional<state::PodAllocation> existing = store.FindPod(store_uid)) {
    if (existing->node == node && existing->delta == allocation.delta && existing->hold.empty()) {
      RefreshDraGauges();
      return;
    }
    (void)store.Release(store_uid, /*persist=*/false);
  }
  if (node.empty() || (allocation.delta.exclusive_gpus.empty() && allocation.delta.nics.empty())) {
    RefreshDraGauges();
    return;
  }
  if (const state::NodeRecord* record = snapshot->Find(node); record != nullptr) {
    allocation.topology_generation = record->topology_generation;
  }
  Status s = store.Restore(allocation);
  if (!s.ok()) s = RestoreAroundStandIns(allocation);
  if (!s.ok()) {
    // A device the claim holds is also counted for a pod: two owners of one device. Fail
    // closed: the node takes no new device placements until one of them is gone.
    restore_errors.With({}).Inc();
    allocation.hold = "ResourceClaim " + Key(claim.namespace_, claim.name) +
                      " holds devices toposched counts for another pod: " + s.error().message();
    metrics::Log(LogLevel::kWarn, {kVerb, label, node},
                 allocation.hold + "; node " + node + " takes no new device placements until one is gone");
    (void)store.Hold(std::move(allocation));
  }
  RefreshDraGauges();
}

void KubeSource::Impl::CountPendingClaims() {
  std::lock_guard lock(mu);
  std::lock_guard dra_lock(dra_mu);
  const std::map<std::string, std::string> pending_now = dra_pending;
  for (const auto& [uid, key] : pending_now) {
    if (auto it = dra_claims.find(key); it != dra_claims.end()) CountClaim(it->second);
  }
}

void KubeSource::Impl::RefreshDraGauges() {
  std::map<std::string, int> unmapped_by_node;
  for (const auto& [key, uid] : dra_unmapped) ++unmapped_by_node[key.substr(0, key.find('\n'))];
  dra_unmapped_gauge.With({}).Set(static_cast<double>(dra_unmapped.size()));
  dra_pending_gauge.With({}).Set(static_cast<double>(dra_pending.size()));
  std::lock_guard lock(dra_copy_mu);
  dra_unmapped_copy = std::move(unmapped_by_node);
}

// ---- templates and classes ----

void KubeSource::Impl::ApplyTemplate(const json& object) {
  Result<DraClaimTemplate> t = ReadResourceClaimTemplate(object);
  std::lock_guard lock(dra_mu);
  const std::string key = Key(StringAt(object, "/metadata/namespace"), NameOf(object));
  if (!t.ok()) {
    metrics::Log(LogLevel::kWarn, {kVerb, "", ""},
                 "ResourceClaimTemplate " + key + " not read: " + t.error().message());
    dra_templates.erase(key);
    return;
  }
  dra_templates[key] = std::move(*t);
}

void KubeSource::Impl::ApplyDeviceClass(const json& object) {
  Result<DeviceClassInfo> c = ReadDeviceClass(object);
  std::lock_guard lock(dra_mu);
  if (!c.ok()) {
    metrics::Log(LogLevel::kWarn, {kVerb, "", ""},
                 "DeviceClass " + NameOf(object) + " not read: " + c.error().message());
    dra_classes.erase(NameOf(object));
    return;
  }
  dra_classes[c->name] = std::move(*c);
}

// ---- what a pod's claims ask ----

extender::DraDevices KubeSource::Impl::DraDevicesFor(const PlacementRequest& request) const {
  extender::DraDevices out;
  if (!options.dra) {
    out.why = "DRA is off (serve --dra)";
    return out;
  }
  std::lock_guard lock(dra_mu);
  for (const PlacementRequest::ClaimRef& ref : request.resource_claims) {
    const DraClaimSpec* spec = nullptr;
    if (!ref.claim_name.empty()) {
      const auto it = dra_claims.find(Key(request.pod_namespace, ref.claim_name));
      if (it == dra_claims.end()) {
        out.why = "ResourceClaim " + ref.claim_name + " not found";
        return out;
      }
      // A claim already allocated (shared by several pods) asks nothing new: its node is fixed
      // by DRA's filter.
      if (it->second.allocated) continue;
      spec = &it->second.spec;
    } else {
      const auto it = dra_templates.find(Key(request.pod_namespace, ref.template_name));
      if (it == dra_templates.end()) {
        out.why = "ResourceClaimTemplate " + ref.template_name + " not found";
        return out;
      }
      spec = &it->second.spec;
    }
    const DraDemand demand = DemandOf(*spec, dra_classes, options.dra_drivers);
    if (!demand.evaluable) {
      out.why = "claim " + ref.name + ": " + demand.reason;
      return out;
    }
    out.gpus += demand.total.gpus;
    out.nics += demand.total.nics;
    out.same_pcie_root = out.same_pcie_root || demand.same_pcie_root;
  }
  out.known = out.gpus + out.nics > 0;
  if (!out.known) out.why = "the pod's claims ask no GPU or RDMA NIC of a known driver";
  return out;
}

std::map<std::string, int> KubeSource::Impl::UnmappedDraDevices() const {
  std::lock_guard lock(dra_copy_mu);
  return dra_unmapped_copy;
}

}  // namespace toposched::kube
