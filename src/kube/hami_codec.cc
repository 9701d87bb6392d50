// HAMi's annotations (objects.h): device lists, the NVIDIA and AMD registrations, the node lock.

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

// ---- HAMi device lists ----

std::string EncodeHamiDevices(const HamiPodDevices& devices) {
  std::string out;
  for (const std::vector<HamiDevice>& container : devices) {
    for (const HamiDevice& d : container) {
      out += d.uuid;
      out += ',';
      out += d.type;
      out += ',';
      out += std::to_string(d.used_mem_mib);
      out += ',';
      out += std::to_string(d.used_cores);
      out += ':';
    }
    out += ';';
  }
  return out;
}

Result<HamiPodDevices> DecodeHamiDevices(std::string_view text) {
  if (text.size() > kMaxAnnotationBytes) {
    return Error("HAMi device list is " + std::to_string(text.size()) + " bytes, over the limit of " +
                 std::to_string(kMaxAnnotationBytes));
  }
  HamiPodDevices pod;
  if (text.empty()) return pod;
  std::vector<std::string_view> segments = Split(text, ';');
  // Every segment ends in ';', so the piece after the last one is empty; an unterminated last
  // segment (a hand-written value) is taken as a container too.
  if (segments.back().empty()) segments.pop_back();
  for (std::size_t c = 0; c < segments.size(); ++c) {
    std::vector<HamiDevice> container;
    const std::vector<std::string_view> records = Split(segments[c], ':');
    for (std::size_t r = 0; r < records.size(); ++r) {
      const std::string_view record = TrimSpace(records[r]);
      if (record.empty()) continue;  // the piece after a record's terminating ':'
      const std::string where = "container " + std::to_string(c) + " device " + std::to_string(r);
      const std::vector<std::string_view> fields = Split(record, ',');
      // HAMi reads the first four fields and ignores any after them.
      if (fields.size() < 4) {
        return Error(where + ": expected UUID,Type,usedMemMiB,usedCores, got " + Quote(record));
      }
      HamiDevice d;
      d.uuid = std::string(TrimSpace(fields[0]));
      d.type = std::string(TrimSpace(fields[1]));
      if (d.uuid.empty()) return Error(where + ": empty UUID in " + Quote(record));
      const std::optional<std::int64_t> mem = ParseInt<std::int64_t>(TrimSpace(fields[2]));
      // HAMi keeps usedmem as an int32: it never writes more.
      if (!mem || *mem < 0 || *mem > INT32_MAX) {
        return Error(where + ": usedMemMiB is not an integer from 0 to 2147483647 in " + Quote(record));
      }
      const std::optional<int> cores = ParseInt<int>(TrimSpace(fields[3]));
      if (!cores || *cores < 0)
        return Error(where + ": usedCores is not a non-negative integer in " + Quote(record));
      d.used_mem_mib = *mem;
      d.used_cores = *cores;
      container.push_back(std::move(d));
    }
    pod.push_back(std::move(container));
  }
  return pod;
}

HamiDeviceKeys HamiDeviceKeysFor(GpuVendor vendor) {
  return vendor == GpuVendor::kAmd ? HamiDeviceKeys{kHamiAmdDevicesToAllocate, kHamiAmdDevicesAllocated}
                                   : HamiDeviceKeys{kHamiDevicesToAllocate, kHamiDevicesAllocated};
}

std::optional<int> AmdComputeUnits(std::int64_t cores, const HamiAmdCard& card) {
  if (card.compute_units <= 0) return std::nullopt;
  const std::int64_t total = card.compute_units;
  // HAMi's request is a whole percent, 1-100, 100 when not asked (GenerateResourceRequests).
  const std::int64_t percent = cores <= 0 ? 100 : std::min<std::int64_t>(CoresPercent(cores), 100);
  std::int64_t units = std::max<std::int64_t>(total * percent / 100, 1);
  if (card.cu_per_wgp > 1) {
    const std::int64_t wgp = card.cu_per_wgp;
    units = std::min((units + wgp - 1) / wgp * wgp, total);
  }
  return static_cast<int>(std::min(units, total));
}

Result<framework::AllocationDelta> DeltaFromHami(const HamiPodDevices& devices, const NodeTopology& topology,
                                                 GpuVendor vendor) {
  // One pod may hold several vGPUs of one card (one per container): they add up.
  struct Use {
    int gpu = 0;
    int count = 0;
    std::int64_t memory_mib = 0;
    std::int64_t cores = 0;  // NVIDIA: percent; AMD: compute units
  };
  const bool amd = vendor == GpuVendor::kAmd;
  std::vector<Use> uses;
  for (std::size_t c = 0; c < devices.size(); ++c) {
    for (std::size_t d = 0; d < devices[c].size(); ++d) {
      const HamiDevice& dev = devices[c][d];
      const std::string where = "container " + std::to_string(c) + " device " + std::to_string(d);
      // DecodeHamiDevices' bounds; they also keep the sums below far from overflowing.
      if (dev.used_mem_mib < 0 || dev.used_mem_mib > INT32_MAX || dev.used_cores < 0) {
        return Error(where + ": usedMemMiB or usedCores out of range");
      }
      int found = -1;
      for (std::size_t g = 0; g < topology.gpus.size() && !dev.uuid.empty(); ++g) {
        const Gpu& gpu = topology.gpus[g];
        if (gpu.uuid == dev.uuid || (amd && gpu.hami_amd && gpu.hami_amd->id == dev.uuid)) {
          found = static_cast<int>(g);
        }
      }
      if (found < 0) {
        return Error(where + ": node " + Quote(topology.node_name) + " has no GPU with UUID " +
                     Quote(dev.uuid));
      }
      const GpuVendor at = topology.gpus[static_cast<std::size_t>(found)].vendor;
      if (at != vendor) {
        return Error(where + ": " + Quote(dev.uuid) + " is the node's GPU " + std::to_string(found) +
                     ", an " + Upper(ToString(at)) + " GPU, in HAMi's " + Upper(ToString(vendor)) +
                     " record");
      }
      auto it = std::find_if(uses.begin(), uses.end(), [&](const Use& u) { return u.gpu == found; });
      if (it == uses.end()) it = uses.insert(uses.end(), Use{found, 0, 0, 0});
      ++it->count;
      it->memory_mib += dev.used_mem_mib;
      it->cores += dev.used_cores;
    }
  }
  framework::AllocationDelta delta;
  for (const Use& u : uses) {
    const Gpu& gpu = topology.gpus[static_cast<std::size_t>(u.gpu)];
    std::uint64_t card_memory = gpu.memory_mib;
    std::int64_t cores = u.cores * 100;  // hundredths of a percent
    bool all_cores = u.cores == 100;
    if (amd) {
      const int total = gpu.hami_amd ? gpu.hami_amd->compute_units : 0;
      if (gpu.hami_amd && gpu.hami_amd->memory_mib > 0) {
        card_memory = static_cast<std::uint64_t>(gpu.hami_amd->memory_mib);
      }
      // Compute units as the percent of the card's they are, rounded up: never less than held.
      if (total > 0) {
        cores = std::min<std::int64_t>((u.cores * kFullGpuCores + total - 1) / total, kFullGpuCores);
      } else {
        cores = u.cores > 0 ? kFullGpuCores : 0;
      }
      all_cores = total > 0 && u.cores >= total;
    }
    const bool whole_memory = card_memory == 0 || static_cast<std::uint64_t>(u.memory_mib) >= card_memory;
    if (u.count == 1 && all_cores && whole_memory) {
      delta.exclusive_gpus.push_back(u.gpu);
    } else {
      delta.shares.emplace_back(u.gpu, GpuShareUsage{u.count, u.memory_mib, cores});
    }
  }
  return delta;
}

// ---- hami.io/node-nvidia-register ----

namespace {

// HAMi's records separate fields with ',', devices with ':' and containers with ';': a name
// holding one would corrupt the record it is written into.
bool HasRecordSeparator(std::string_view s) {
  return s.find_first_of(",:;") != std::string_view::npos;
}

// AMD's custominfo: the card's PCI address, and cuPerWGP read as HAMi's cuPerWGP reads it (a
// JSON number that is a whole number from 2 to 2^31-1, else 1).
Status ReadAmdCustomInfo(const json& e, const std::string& p, HamiRegisteredGpu* g) {
  TOPOSCHED_ASSIGN_OR_RETURN(const json* info, ReadObject(e, "custominfo", p, Presence::kOptional));
  if (info == nullptr) return Status::Ok();
  const std::string path = Child(p, "custominfo");
  std::string bdf;
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*info, "pciBDF", path, Presence::kOptional, &bdf));
  if (!bdf.empty()) {
    g->pci_bus_id = NormalizePciBusId(bdf);
    if (g->pci_bus_id.empty()) {
      return Expected(Child(path, "pciBDF"), "a PCI address like 0000:83:00.0", (*info)["pciBDF"]);
    }
  }
  if (const auto w = info->find("cuPerWGP"); w != info->end() && w->is_number()) {
    const double v = w->get<double>();
    if (v > 1 && v <= INT32_MAX && v == std::trunc(v)) g->cu_per_wgp = static_cast<int>(v);
  }
  return Status::Ok();
}

Result<std::vector<HamiRegisteredGpu>> ParseRegisterJson(std::string_view text, bool amd) {
  TOPOSCHED_ASSIGN_OR_RETURN(json doc, ParseBoundedJson(text, 8));
  if (!doc.is_array()) return Expected("top level", "an array", doc);
  std::vector<HamiRegisteredGpu> out;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const json& e = doc[i];
    const std::string p = Element("", i);
    if (!e.is_object()) return Expected(p, "an object", e);
    HamiRegisteredGpu g;  // every key is omitempty: absent = zero value
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "id", p, Presence::kOptional, &g.uuid));
    if (g.uuid.empty()) return Error(Child(p, "id") + ": a GPU UUID is required");
    TOPOSCHED_RETURN_IF_ERROR(ReadInt(e, "index", p, Presence::kOptional, 0, INT_MAX, &g.index));
    TOPOSCHED_RETURN_IF_ERROR(ReadInt(e, "count", p, Presence::kOptional, 0, INT_MAX, &g.count));
    TOPOSCHED_RETURN_IF_ERROR(
        ReadInt<std::int64_t>(e, "devmem", p, Presence::kOptional, 0, INT_MAX, &g.devmem_mib));
    TOPOSCHED_RETURN_IF_ERROR(ReadInt(e, "devcore", p, Presence::kOptional, 0, INT_MAX, &g.devcore));
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "type", p, Presence::kOptional, &g.type));
    TOPOSCHED_RETURN_IF_ERROR(ReadInt(e, "numa", p, Presence::kOptional, INT_MIN, INT_MAX, &g.numa));
    TOPOSCHED_RETURN_IF_ERROR(ReadBool(e, "health", p, &g.health));
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "mode", p, Presence::kOptional, &g.mode));
    if (amd) {
      TOPOSCHED_RETURN_IF_ERROR(ReadAmdCustomInfo(e, p, &g));
      // Written verbatim into HAMi's AMD records, unlike NVIDIA's (UUID and vendor word).
      if (HasRecordSeparator(g.uuid)) {
        return Expected(Child(p, "id"), "an id without ',', ':' or ';'", e["id"]);
      }
      if (HasRecordSeparator(g.type)) {
        return Expected(Child(p, "type"), "a type without ',', ':' or ';'", e["type"]);
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

Result<std::vector<HamiRegisteredGpu>> ParseRegisterRecords(std::string_view text) {
  std::vector<HamiRegisteredGpu> out;
  const std::vector<std::string_view> records = Split(text, ':');
  for (std::size_t r = 0; r < records.size(); ++r) {
    const std::string_view record = TrimSpace(records[r]);
    if (record.empty()) continue;  // after the trailing ':'
    const std::string where = "record " + std::to_string(out.size()) + " " + Quote(record);
    std::vector<std::string_view> fields = Split(record, ',');
    for (std::string_view& f : fields) f = TrimSpace(f);
    if (fields.size() != 9 && fields.size() != 7) {
      return Error(where +
                   ": expected 9 fields (UUID,count,devmem,devcore,type,numa,health,index,mode) or 7 "
                   "(UUID,count,devmem,devcore,type,numa,health), got " +
                   std::to_string(fields.size()));
    }
    HamiRegisteredGpu g;
    g.uuid = std::string(fields[0]);
    if (g.uuid.empty()) return Error(where + ": empty UUID");
    const auto count = ParseInt<int>(fields[1]);
    const auto devmem = ParseInt<std::int64_t>(fields[2]);
    const auto devcore = ParseInt<int>(fields[3]);
    const auto numa = ParseInt<int>(fields[5]);
    if (!count || *count < 0)
      return Error(where + ": count " + Quote(fields[1]) + " is not a non-negative integer");
    if (!devmem || *devmem < 0)
      return Error(where + ": devmem " + Quote(fields[2]) + " is not a non-negative integer");
    if (!devcore || *devcore < 0)
      return Error(where + ": devcore " + Quote(fields[3]) + " is not a non-negative integer");
    if (!numa) return Error(where + ": numa " + Quote(fields[5]) + " is not an integer");
    if (fields[6] != "true" && fields[6] != "false")
      return Error(where + ": health " + Quote(fields[6]) + " is not true or false");
    g.count = *count;
    g.devmem_mib = *devmem;
    g.devcore = *devcore;
    g.type = std::string(fields[4]);
    g.numa = *numa;
    g.health = fields[6] == "true";
    if (fields.size() == 9) {
      const auto index = ParseInt<int>(fields[7]);
      if (!index || *index < 0)
        return Error(where + ": index " + Quote(fields[7]) + " is not a non-negative integer");
      g.index = *index;
      g.mode = std::string(fields[8]);
    } else {
      g.index = static_cast<int>(out.size());  // <= v2.4 lists GPUs in index order
    }
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

Result<std::vector<HamiRegisteredGpu>> ParseHamiRegister(std::string_view text) {
  if (text.size() > kMaxAnnotationBytes) {
    return Error(std::string(kHamiNodeRegister) + " is " + std::to_string(text.size()) +
                 " bytes, over the limit of " + std::to_string(kMaxAnnotationBytes));
  }
  try {
    const std::string_view trimmed = TrimSpace(text);
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::vector<HamiRegisteredGpu> out,
                                   !trimmed.empty() && (trimmed.front() == '[' || trimmed.front() == '{')
                                       ? ParseRegisterJson(trimmed, /*amd=*/false)
                                       : ParseRegisterRecords(trimmed),
                                   std::string(kHamiNodeRegister));
    return out;
  } catch (const std::exception& e) {
    return Error(std::string(kHamiNodeRegister) + ": " + e.what());
  }
}

int ApplyHamiRegister(const std::vector<HamiRegisteredGpu>& gpus, NodeTopology& topology) {
  int min_split = 0;
  for (const HamiRegisteredGpu& r : gpus) {
    if (r.count > 0 && (min_split == 0 || r.count < min_split)) min_split = r.count;
    if (r.index < 0 || r.index >= static_cast<int>(topology.gpus.size())) continue;
    Gpu& g = topology.gpus[static_cast<std::size_t>(r.index)];
    if (g.uuid.empty()) g.uuid = r.uuid;
    // HAMi's per-card figure is exact: it fills an unknown size and replaces an estimate.
    if ((g.memory_mib == 0 || IsMemoryEstimate(g)) && r.devmem_mib > 0)
      g.memory_mib = static_cast<std::uint64_t>(r.devmem_mib);
    // HAMi skips such cards itself: an unhealthy one (health is omitempty: absent is false), and
    // one in MIG mode, which HAMi serves only through its MIG allocations (not written here).
    if (!r.health) {
      g.unusable = "HAMi's device plugin reports the card unhealthy";
    } else if (r.mode == "mig") {
      g.unusable = "in MIG mode, which toposched does not allocate (HAMi's MIG instances)";
    } else {
      g.unusable.clear();
    }
  }
  DropUnusableGpuUuids(topology);  // a registration that names one UUID twice names no GPU
  return min_split;
}

// ---- hami.io/node-amd-register ----

Result<std::vector<HamiRegisteredGpu>> ParseHamiAmdRegister(std::string_view text) {
  const std::string key(kHamiAmdNodeRegister);
  if (text.size() > kMaxAnnotationBytes) {
    return Error(key + " is " + std::to_string(text.size()) + " bytes, over the limit of " +
                 std::to_string(kMaxAnnotationBytes));
  }
  try {
    const std::string_view trimmed = TrimSpace(text);
    if (trimmed.empty()) return std::vector<HamiRegisteredGpu>{};
    // The same bounded reader as NVIDIA's array (8 levels: custominfo nests one more).
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::vector<HamiRegisteredGpu> out,
                                   ParseRegisterJson(trimmed, /*amd=*/true), key);
    return out;
  } catch (const std::exception& e) {
    return Error(key + ": " + e.what());
  }
}

int ApplyHamiAmdRegister(const std::vector<HamiRegisteredGpu>& gpus, NodeTopology& topology) {
  // Which GPU each entry names, and how often each GPU and each id is named.
  std::vector<int> named_by(topology.gpus.size(), 0);
  std::vector<const HamiRegisteredGpu*> entry_of(topology.gpus.size(), nullptr);
  std::map<std::string, int, std::less<>> ids;
  for (const HamiRegisteredGpu& r : gpus) ++ids[r.uuid];
  for (const HamiRegisteredGpu& r : gpus) {
    int found = -1;
    for (std::size_t g = 0; g < topology.gpus.size(); ++g) {
      const Gpu& gpu = topology.gpus[g];
      const bool match =
          !r.pci_bus_id.empty() ? gpu.pci_bus_id == r.pci_bus_id : !gpu.uuid.empty() && gpu.uuid == r.uuid;
      if (match) found = static_cast<int>(g);
    }
    if (found < 0 || topology.gpus[static_cast<std::size_t>(found)].vendor != GpuVendor::kAmd) continue;
    ++named_by[static_cast<std::size_t>(found)];
    entry_of[static_cast<std::size_t>(found)] = &r;
  }
  int matched = 0;
  for (std::size_t g = 0; g < topology.gpus.size(); ++g) {
    Gpu& gpu = topology.gpus[g];
    if (gpu.vendor != GpuVendor::kAmd) continue;
    gpu.hami_amd.reset();
    const HamiRegisteredGpu* r = entry_of[g];
    if (named_by[g] == 0) {
      gpu.unusable = "not in HAMi's AMD registration (" + std::string(kHamiAmdNodeRegister) +
                     "), so HAMi's AMD device plugin cannot hand it out";
      continue;
    }
    if (named_by[g] > 1 || ids[r->uuid] > 1) {
      gpu.unusable =
          "HAMi's AMD registration names it ambiguously (two entries for one card, or one id for two)";
      continue;
    }
    ++matched;
    gpu.hami_amd = HamiAmdCard{r->uuid, r->type.empty() ? std::string(kHamiAmdType) : r->type, r->devmem_mib,
                               r->devcore, r->cu_per_wgp};
    if (gpu.uuid.empty()) gpu.uuid = r->uuid;
    if (gpu.memory_mib == 0 && r->devmem_mib > 0) gpu.memory_mib = static_cast<std::uint64_t>(r->devmem_mib);
    // HAMi's AMD scheduler skips an unhealthy card (health is omitempty: absent is false) and,
    // asking 100 % of the cores for a whole card, one without compute units (Fit).
    if (!r->health) {
      gpu.unusable = "HAMi's AMD device plugin reports the card unhealthy";
    } else if (r->devcore <= 0) {
      gpu.unusable =
          "HAMi's AMD registration gives it no compute units (devcore), so HAMi places nothing on it";
    } else {
      gpu.unusable.clear();
    }
  }
  DropUnusableGpuUuids(topology);
  return matched;
}

void MarkAmdGpusUnregistered(NodeTopology& topology, std::string_view why) {
  for (Gpu& gpu : topology.gpus) {
    if (gpu.vendor != GpuVendor::kAmd) continue;
    gpu.hami_amd.reset();
    gpu.unusable = std::string(why);
  }
}

// ---- hami.io/mutex.lock ----

std::string EncodeHamiNodeLock(const HamiNodeLock& lock) {
  return FormatTime(lock.time) + "," + lock.pod_namespace + "," + lock.pod_name;
}

Result<HamiNodeLock> DecodeHamiNodeLock(std::string_view text) {
  if (text.size() > 4096) return Error(std::string(kHamiNodeLock) + ": value too long");
  const std::vector<std::string_view> parts = Split(text, ',');
  HamiNodeLock lock;
  // HAMi's ParseNodeLock also reads the bare time older versions wrote.
  if (parts.size() != 1 && parts.size() != 3) {
    return Error(std::string(kHamiNodeLock) + ": expected \"<time>,<namespace>,<pod>\", got " + Quote(text));
  }
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::chrono::system_clock::time_point t, ParseTime(parts[0]),
                                 std::string(kHamiNodeLock));
  lock.time = t;
  if (parts.size() == 3) {
    lock.pod_namespace = std::string(parts[1]);
    lock.pod_name = std::string(parts[2]);
  }
  return lock;
}

}  // namespace toposched::kube
