// toposched.io/allocation (objects.h): the allocation annotation's encoder and decoder, and the
// devices an allocation or HAMi record names.

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

#include "objects_internal.h"
#include "toposched/common/text.h"
#include "toposched/kube/time.h"
#include "toposched/placement/placement.h"
#include "toposched/topology/gpu_memory.h"
#include "toposched/topology/json_codec.h"

namespace toposched::kube {

using namespace objects_internal;  // NOLINT(google-build-using-namespace): this library's own helpers

// ---- toposched.io/allocation ----

AllocationAnnotations EncodeAllocation(const state::PodAllocation& allocation, const NodeTopology& topology,
                                       std::string_view policy) {
  const std::vector<ChosenGpu> gpus = ChosenGpus(allocation.delta, topology);
  const std::vector<int> nics = ChosenNics(allocation.delta, topology);
  AllocationAnnotations out;

  ordered_json doc;
  doc["version"] = 1;
  doc["node"] = allocation.node.empty() ? topology.node_name : allocation.node;
  doc["policy"] = policy;
  doc["topologyFingerprint"] = topology.Fingerprint();
  ordered_json gpus_json = ordered_json::array();
  std::set<int> numa_nodes;
  for (const ChosenGpu& c : gpus) {
    const Gpu& g = topology.gpus[static_cast<std::size_t>(c.index)];
    ordered_json e;
    e["index"] = c.index;
    e["pciBusId"] = g.pci_bus_id;
    if (!g.uuid.empty()) e["uuid"] = g.uuid;
    e["numa"] = g.numa >= 0 ? ordered_json(g.numa) : ordered_json(nullptr);
    if (c.share) {
      e["memoryMiB"] = c.share->memory_mib;
      e["coresPercent"] = CoresPercent(c.share->cores);
      if (c.share->shares != 1) e["shares"] = c.share->shares;
    }
    if (g.numa >= 0) numa_nodes.insert(g.numa);
    gpus_json.push_back(std::move(e));
  }
  doc["gpus"] = std::move(gpus_json);
  ordered_json nics_json = ordered_json::array();
  for (int n : nics) {
    const Nic& nic = topology.nics[static_cast<std::size_t>(n)];
    ordered_json e;
    e["name"] = nic.name;
    if (!nic.pci_bus_id.empty()) e["pciBusId"] = nic.pci_bus_id;
    e["numa"] = nic.numa >= 0 ? ordered_json(nic.numa) : ordered_json(nullptr);
    if (nic.numa >= 0) numa_nodes.insert(nic.numa);
    nics_json.push_back(std::move(e));
  }
  doc["nics"] = std::move(nics_json);
  doc["numaNodes"] = numa_nodes;

  // Each GPU with its best chosen NIC by class (ties: the NIC serving the fewest GPUs so far,
  // then delta order, so two GPUs under one switch with two NICs get one each) and the worst of
  // those pairs; the worst link between chosen GPUs. Keys are left out where they do not apply.
  ordered_json links = ordered_json::object();
  std::optional<Link> worst_gpu_nic, worst_gpu_gpu;
  ordered_json pairs = ordered_json::array();
  if (!nics.empty()) {
    std::vector<int> served(nics.size(), 0);
    int worst_rank = -1;
    for (const ChosenGpu& c : gpus) {
      const Gpu& g = topology.gpus[static_cast<std::size_t>(c.index)];
      std::size_t best = 0;
      int best_rank = INT_MAX;
      Link best_link;
      for (std::size_t k = 0; k < nics.size(); ++k) {
        const int n = nics[k];
        const Link l = GpuNicLink(topology, c.index, n);
        const int rank = LinkRank(l.cls, g.package, topology.nics[static_cast<std::size_t>(n)].package);
        if (rank < best_rank || (rank == best_rank && served[k] < served[best])) {
          best_rank = rank;
          best = k;
          best_link = l;
        }
      }
      ++served[best];
      const int best_nic = nics[best];
      pairs.push_back({{"gpu", c.index},
                       {"nic", topology.nics[static_cast<std::size_t>(best_nic)].DisplayName()},
                       {"class", best_link.Token()}});
      if (!worst_gpu_nic || WorseLink(best_link, best_rank, *worst_gpu_nic, worst_rank)) {
        worst_gpu_nic = best_link;
        worst_rank = best_rank;
      }
    }
  }
  int worst_gpu_rank = -1;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    for (std::size_t j = i + 1; j < gpus.size(); ++j) {
      const Gpu& a = topology.gpus[static_cast<std::size_t>(gpus[i].index)];
      const Gpu& b = topology.gpus[static_cast<std::size_t>(gpus[j].index)];
      const Link l = GpuGpuLink(topology, gpus[i].index, gpus[j].index);
      const int rank = LinkRank(l.cls, a.package, b.package);
      if (!worst_gpu_gpu || WorseLink(l, rank, *worst_gpu_gpu, worst_gpu_rank)) {
        worst_gpu_gpu = l;
        worst_gpu_rank = rank;
      }
    }
  }
  if (worst_gpu_nic) links["worstGpuNic"] = worst_gpu_nic->Token();
  if (worst_gpu_gpu) links["worstGpuGpu"] = worst_gpu_gpu->Token();
  if (!pairs.empty()) links["gpuNic"] = std::move(pairs);
  doc["links"] = std::move(links);
  if (!allocation.container_devices.empty()) doc["containers"] = allocation.container_devices;
  out.allocation = doc.dump(-1, ' ', false, ordered_json::error_handler_t::replace);

  // visible GPUs: UUIDs are stable across reboots and driver renumbering; indices otherwise.
  const bool all_uuids = std::all_of(gpus.begin(), gpus.end(), [&](const ChosenGpu& c) {
    return !topology.gpus[static_cast<std::size_t>(c.index)].uuid.empty();
  });
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    if (i > 0) out.visible_gpus += ',';
    const Gpu& g = topology.gpus[static_cast<std::size_t>(gpus[i].index)];
    out.visible_gpus += all_uuids ? g.uuid : std::to_string(gpus[i].index);
  }

  // NCCL_IB_HCA matches device names; a NIC the source knows only by bus address has none to give.
  std::string hcas;
  for (int n : nics) {
    const Nic& nic = topology.nics[static_cast<std::size_t>(n)];
    if (nic.name.empty()) continue;
    if (!hcas.empty()) hcas += ',';
    hcas += nic.name;
  }
  if (!hcas.empty()) out.nccl_ib_hca = "=" + hcas;

  // HAMi's per-container segments. container_devices says how many GPUs each container takes,
  // in delta order: init containers (the first init_containers entries) run alone before the
  // app containers, so each takes its devices from the start of the set; app containers take
  // consecutive ones. When the app containers account for fewer GPUs than chosen, the last
  // container takes the rest (the split is the kube source's, the devices the store's: never
  // drop a device).
  // Without GPUs there is nothing for HAMi's device plugin to hand out (a NIC-only pod).
  if (gpus.empty()) return out;
  const auto all_of_vendor = [&](GpuVendor vendor) {
    return std::all_of(gpus.begin(), gpus.end(), [&](const ChosenGpu& c) {
      return topology.gpus[static_cast<std::size_t>(c.index)].vendor == vendor;
    });
  };
  std::vector<HamiDevice> devices;
  if (all_of_vendor(GpuVendor::kNvidia)) {
    // HAMi names NVIDIA devices by UUID only: without one for every GPU there is nothing HAMi's
    // device plugin could use, so the annotation stays empty (such a node is not a HAMi node).
    if (!all_uuids) return out;
    for (const ChosenGpu& c : gpus) {
      const Gpu& g = topology.gpus[static_cast<std::size_t>(c.index)];
      HamiDevice d;
      d.uuid = g.uuid;
      d.type = std::string(kHamiNvidiaType);
      if (c.share) {
        d.used_mem_mib = c.share->memory_mib;
        d.used_cores = CoresPercent(c.share->cores);
      } else {
        d.used_mem_mib = static_cast<std::int64_t>(g.memory_mib);
        d.used_cores = 100;
      }
      devices.push_back(std::move(d));
    }
  } else if (all_of_vendor(GpuVendor::kAmd)) {
    // What HAMi's AMD scheduler writes (Project-HAMi/HAMi pkg/device/amd/device.go @070101260b7a,
    // Fit and PatchAnnotations): the registered id and type; a whole card asks no memory and
    // 100 % of the cores, which Fit turns into the card's devmem and devcore. A card HAMi's AMD
    // device plugin did not register is one it cannot hand out: no record then.
    for (const ChosenGpu& c : gpus) {
      const std::optional<HamiAmdCard>& card = topology.gpus[static_cast<std::size_t>(c.index)].hami_amd;
      if (!card) return out;
      HamiDevice d;
      d.uuid = card->id;
      d.type = card->type;
      if (c.share) {
        const std::optional<int> units = AmdComputeUnits(c.share->cores, *card);
        if (!units) return out;
        d.used_mem_mib = c.share->memory_mib;
        d.used_cores = *units;
      } else {
        d.used_mem_mib = card->memory_mib;
        d.used_cores = card->compute_units;
      }
      devices.push_back(std::move(d));
    }
    out.hami_vendor = GpuVendor::kAmd;
  } else {
    return out;  // a mix of vendors: no one HAMi device plugin serves it
  }
  HamiPodDevices pod;
  if (allocation.container_devices.empty()) {
    pod.push_back(devices);
  } else {
    std::size_t next = 0;
    for (std::size_t i = 0; i < allocation.container_devices.size(); ++i) {
      const int count = allocation.container_devices[i];
      const bool init = static_cast<int>(i) < allocation.init_containers;
      std::vector<HamiDevice> container;
      for (int k = 0; k < count; ++k) {
        const std::size_t at = init ? static_cast<std::size_t>(k) : next++;
        if (at < devices.size()) container.push_back(devices[at]);
      }
      pod.push_back(std::move(container));
    }
    while (next < devices.size()) pod.back().push_back(devices[next++]);
  }
  out.hami_devices = EncodeHamiDevices(pod);
  return out;
}

namespace {

Status DecodeAllocationDoc(const json& doc, const NodeTopology& t, framework::AllocationDelta* delta) {
  if (!doc.is_object()) return Expected("top level", "a JSON object", doc);
  int version = 0;
  TOPOSCHED_RETURN_IF_ERROR(ReadInt(doc, "version", "", Presence::kRequired, INT_MIN, INT_MAX, &version));
  if (version != 1)
    return Error("version: unsupported version " + std::to_string(version) + " (this build reads 1)");
  std::string ignored;
  TOPOSCHED_RETURN_IF_ERROR(ReadString(doc, "node", "", Presence::kOptional, &ignored));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(doc, "policy", "", Presence::kOptional, &ignored));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(doc, "topologyFingerprint", "", Presence::kOptional, &ignored));

  std::vector<bool> gpu_taken(t.gpus.size(), false);
  TOPOSCHED_ASSIGN_OR_RETURN(const json* gpus, ReadArray(doc, "gpus", "", Presence::kOptional));
  if (gpus != nullptr) {
    for (std::size_t i = 0; i < gpus->size(); ++i) {
      const json& e = (*gpus)[i];
      const std::string p = Element("gpus", i);
      if (!e.is_object()) return Expected(p, "an object", e);
      std::string bus_id, uuid;
      int index = -1;
      TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "pciBusId", p, Presence::kOptional, &bus_id));
      TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "uuid", p, Presence::kOptional, &uuid));
      TOPOSCHED_RETURN_IF_ERROR(ReadInt(e, "index", p, Presence::kOptional, 0, INT_MAX, &index));
      const bool has_index = e.contains("index") && !e["index"].is_null();
      int found = -1;
      if (!bus_id.empty()) {
        const std::string normalized = NormalizePciBusId(bus_id);
        if (normalized.empty())
          return Expected(Child(p, "pciBusId"), "a PCI bus id like 0000:4e:00.0", e["pciBusId"]);
        for (std::size_t g = 0; g < t.gpus.size(); ++g) {
          if (t.gpus[g].pci_bus_id == normalized) {
            if (found >= 0)
              return Error(Child(p, "pciBusId") + ": several GPUs of the node are at " + Quote(normalized));
            found = static_cast<int>(g);
          }
        }
        if (found < 0) return Error(Child(p, "pciBusId") + ": node has no GPU at " + Quote(normalized));
        // A re-discovery renumbers GPUs when one falls off the bus: the index is then the stale
        // field, which only a matching UUID can show. Without one, the fields just disagree.
        const std::string& at_bus = t.gpus[static_cast<std::size_t>(found)].uuid;
        if (has_index && index != found && (uuid.empty() || uuid != at_bus)) {
          return Error(p + ": index " + std::to_string(index) + " but the GPU at " + Quote(normalized) +
                       " is GPU " + std::to_string(found) + " (the record names two different GPUs)");
        }
      } else if (has_index) {
        if (!ValidGpu(t, index)) {
          return Error(Child(p, "index") + ": node has no GPU " + std::to_string(index) + " (it has " +
                       std::to_string(t.gpus.size()) + ")");
        }
        found = index;
      } else {
        return Error(p + ": needs pciBusId or index");
      }
      const Gpu& gpu = t.gpus[static_cast<std::size_t>(found)];
      if (!uuid.empty() && !gpu.uuid.empty() && uuid != gpu.uuid) {
        return Error(Child(p, "uuid") + ": " + Quote(uuid) + " but the node's GPU " + std::to_string(found) +
                     " is " + Quote(gpu.uuid));
      }
      if (!uuid.empty() && gpu.uuid.empty()) {
        // The node no longer knows this UUID (or never trusted it): another GPU must not carry it.
        for (const Gpu& other : t.gpus) {
          if (other.uuid == uuid) {
            return Error(Child(p, "uuid") + ": " + Quote(uuid) + " is the node's GPU " +
                         std::to_string(other.index) + ", not GPU " + std::to_string(found));
          }
        }
      }
      if (gpu_taken[static_cast<std::size_t>(found)]) {
        return Error(p + ": GPU " + std::to_string(found) + " is listed twice");
      }
      gpu_taken[static_cast<std::size_t>(found)] = true;

      std::int64_t memory = 0;
      int cores_percent = 0, shares = 1;
      TOPOSCHED_RETURN_IF_ERROR(ReadInt<std::int64_t>(e, "memoryMiB", p, Presence::kOptional, 0,
                                                      std::numeric_limits<std::int64_t>::max() / 2, &memory));
      TOPOSCHED_RETURN_IF_ERROR(ReadInt(e, "coresPercent", p, Presence::kOptional, 0, 100, &cores_percent));
      TOPOSCHED_RETURN_IF_ERROR(ReadInt(e, "shares", p, Presence::kOptional, 1, 1 << 16, &shares));
      const bool shared = (e.contains("memoryMiB") && !e["memoryMiB"].is_null()) ||
                          (e.contains("coresPercent") && !e["coresPercent"].is_null());
      if (shared) {
        delta->shares.emplace_back(found, GpuShareUsage{shares, memory, std::int64_t{cores_percent} * 100});
      } else {
        delta->exclusive_gpus.push_back(found);
      }
    }
  }

  std::vector<bool> nic_taken(t.nics.size(), false);
  TOPOSCHED_ASSIGN_OR_RETURN(const json* nics, ReadArray(doc, "nics", "", Presence::kOptional));
  if (nics != nullptr) {
    for (std::size_t i = 0; i < nics->size(); ++i) {
      const json& e = (*nics)[i];
      const std::string p = Element("nics", i);
      if (!e.is_object()) return Expected(p, "an object", e);
      std::string name, bus_id;
      TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "name", p, Presence::kOptional, &name));
      TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "pciBusId", p, Presence::kOptional, &bus_id));
      std::string normalized;
      if (!bus_id.empty()) {
        normalized = NormalizePciBusId(bus_id);
        if (normalized.empty())
          return Expected(Child(p, "pciBusId"), "a PCI bus id like 0000:4e:00.0", e["pciBusId"]);
      }
      // The device name is what is unique on a node: the ports of a dual-port card (mlx5_0,
      // mlx5_1) share one bus id, and so do a VF's parent's functions in some exports.
      int found = -1;
      if (!name.empty()) {
        for (std::size_t n = 0; n < t.nics.size(); ++n) {
          if (t.nics[n].name == name) found = static_cast<int>(n);
        }
        if (found < 0) return Error(Child(p, "name") + ": node has no NIC " + Quote(name));
        const Nic& nic = t.nics[static_cast<std::size_t>(found)];
        if (!normalized.empty() && !nic.pci_bus_id.empty() && nic.pci_bus_id != normalized) {
          return Error(Child(p, "pciBusId") + ": " + Quote(normalized) + " but the node's NIC " +
                       Quote(name) + " is at " + Quote(nic.pci_bus_id) +
                       " (the record names two different NICs)");
        }
      } else if (!normalized.empty()) {
        std::string candidates;
        int matches = 0;
        for (std::size_t n = 0; n < t.nics.size(); ++n) {
          if (t.nics[n].pci_bus_id != normalized) continue;
          candidates += (matches++ > 0 ? ", " : "") + Quote(t.nics[n].DisplayName());
          found = static_cast<int>(n);
        }
        if (matches == 0) return Error(Child(p, "pciBusId") + ": node has no NIC at " + Quote(normalized));
        if (matches > 1) {
          return Error(Child(p, "pciBusId") + ": " + Quote(normalized) + " is shared by NICs " + candidates +
                       ": the record needs the NIC's name");
        }
      } else {
        return Error(p + ": needs name or pciBusId");
      }
      if (nic_taken[static_cast<std::size_t>(found)]) {
        return Error(p + ": NIC " + Quote(t.nics[static_cast<std::size_t>(found)].DisplayName()) +
                     " is listed twice");
      }
      nic_taken[static_cast<std::size_t>(found)] = true;
      delta->nics.push_back(found);
    }
  }

  // containers is informational here (the device plugin reads HAMi's annotation); checked for type.
  TOPOSCHED_ASSIGN_OR_RETURN(const json* containers, ReadArray(doc, "containers", "", Presence::kOptional));
  if (containers != nullptr) {
    for (std::size_t i = 0; i < containers->size(); ++i) {
      const json& c = (*containers)[i];
      if (!c.is_number_integer() || (!c.is_number_unsigned() && c.get<std::int64_t>() < 0)) {
        return Expected(Element("containers", i), "a device count", c);
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<framework::AllocationDelta> DecodeAllocation(std::string_view text, const NodeTopology& topology,
                                                    LinkClass* worst_gpu_nic) {
  try {
    TOPOSCHED_ASSIGN_OR_RETURN(json doc, ParseBoundedJson(text, kMaxAllocationDepth));
    framework::AllocationDelta delta;
    TOPOSCHED_RETURN_IF_ERROR(DecodeAllocationDoc(doc, topology, &delta));
    if (worst_gpu_nic != nullptr) {
      *worst_gpu_nic = LinkClass::kPIX;
      const json* links = doc.contains("links") ? &doc["links"] : nullptr;
      if (links != nullptr && links->is_object() && links->contains("worstGpuNic") &&
          (*links)["worstGpuNic"].is_string()) {
        if (const std::optional<Link> link = Link::ParseToken((*links)["worstGpuNic"].get<std::string>())) {
          *worst_gpu_nic = link->cls;
        }
      }
    }
    return delta;
  } catch (const std::exception& e) {
    return Error(std::string("cannot decode allocation: ") + e.what());
  }
}

framework::AllocationDelta DevicesNamedBy(std::string_view allocation_json, std::string_view hami_devices,
                                          const NodeTopology& t) {
  std::set<int> gpus, nics;
  auto string_at = [](const json& e, const char* key) {
    const auto it = e.find(key);
    return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto add_gpu_uuid = [&](const std::string& uuid) {
    if (uuid.empty()) return;
    for (const Gpu& g : t.gpus) {
      if (g.uuid == uuid || (g.hami_amd && g.hami_amd->id == uuid)) gpus.insert(g.index);
    }
  };
  if (!allocation_json.empty()) try {
      Result<json> doc = ParseBoundedJson(allocation_json, kMaxAllocationDepth);
      if (doc.ok() && doc->is_object()) {
        const auto g_it = doc->find("gpus");
        if (g_it != doc->end() && g_it->is_array()) {
          for (const json& e : *g_it) {
            if (!e.is_object()) continue;
            if (const auto i = e.find("index"); i != e.end() && i->is_number_integer()) {
              const std::int64_t index = i->get<std::int64_t>();
              if (index >= 0 && index < static_cast<std::int64_t>(t.gpus.size()))
                gpus.insert(static_cast<int>(index));
            }
            const std::string bus_id = NormalizePciBusId(string_at(e, "pciBusId"));
            for (std::size_t g = 0; g < t.gpus.size() && !bus_id.empty(); ++g) {
              if (t.gpus[g].pci_bus_id == bus_id) gpus.insert(static_cast<int>(g));
            }
            add_gpu_uuid(string_at(e, "uuid"));
          }
        }
        const auto n_it = doc->find("nics");
        if (n_it != doc->end() && n_it->is_array()) {
          for (const json& e : *n_it) {
            if (!e.is_object()) continue;
            const std::string name = string_at(e, "name");
            const std::string bus_id = NormalizePciBusId(string_at(e, "pciBusId"));
            for (std::size_t n = 0; n < t.nics.size(); ++n) {
              const Nic& nic = t.nics[n];
              if ((!name.empty() && nic.name == name) || (!bus_id.empty() && nic.pci_bus_id == bus_id)) {
                nics.insert(static_cast<int>(n));
              }
            }
          }
        }
      }
    } catch (const std::exception&) {
      // What was collected before the failure is still held; the caller holds the node anyway.
    }
  if (!hami_devices.empty()) {
    // Record by record, so that one bad record does not hide the UUIDs of the others.
    for (std::string_view container : Split(hami_devices.substr(0, kMaxAnnotationBytes), ';')) {
      for (std::string_view record : Split(container, ':')) {
        add_gpu_uuid(std::string(TrimSpace(Split(record, ',').front())));
      }
    }
  }
  framework::AllocationDelta delta;
  delta.exclusive_gpus.assign(gpus.begin(), gpus.end());
  delta.nics.assign(nics.begin(), nics.end());
  return delta;
}

}  // namespace toposched::kube
