#include "toposched/topology/gpu_memory.h"
#include "toposched/kube/objects.h"

#include "../common/json_errors.h"

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

#include "toposched/common/text.h"
#include "toposched/kube/time.h"
#include "toposched/placement/placement.h"
#include "toposched/topology/json_codec.h"

namespace toposched::kube {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Annotations are small; anything near this is not ours (the API server caps all annotations of
// an object at 256 KiB together).
constexpr std::size_t kMaxAnnotationBytes = 1u << 20;
// toposched.io/allocation is at most four levels deep; a bound keeps nlohmann's recursive
// destructor and the readers away from hostile nesting.
constexpr int kMaxAllocationDepth = 16;

// ---- small helpers ----

using json_errors::Expected;
using json_errors::Quote;

std::string Child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string Element(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

// A decimal integer, optionally signed, nothing else.
template <typename T>
std::optional<T> ParseInt(std::string_view s) {
  if (s.size() > 1 && s.front() == '+' && s[1] != '-') s.remove_prefix(1);
  T value{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// Percent of a GPU's SMs from hundredths of a percent, rounded up (HAMi takes whole percents;
// rounding down could promise less compute than the engine reserved).
int CoresPercent(std::int64_t cores) {
  if (cores <= 0) return 0;
  const std::int64_t percent = cores / 100 + (cores % 100 != 0 ? 1 : 0);
  return static_cast<int>(std::min<std::int64_t>(percent, INT_MAX));
}

// Deepest nesting of brackets outside strings; stops counting past `limit`.
int NestingDepth(std::string_view text, int limit) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{')
      max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}')
      --depth;
    if (max_depth > limit) break;
  }
  return max_depth;
}

// Parses a bounded JSON document without letting exceptions out.
Result<json> ParseBoundedJson(std::string_view text, int max_depth) {
  if (text.size() > kMaxAnnotationBytes) {
    return Error("value is " + std::to_string(text.size()) + " bytes, over the limit of " +
                 std::to_string(kMaxAnnotationBytes));
  }
  if (NestingDepth(text, max_depth) > max_depth) {
    return Error("not valid JSON: nested deeper than " + std::to_string(max_depth) + " levels");
  }
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Error(std::string("not valid JSON: ") + e.what());
  }
}

// ---- typed readers over nlohmann::json; every one names the JSON path of a problem ----

enum class Presence { kRequired, kOptional };

// The member `key` of object `o`, or null when absent (or JSON null, which Go's encoding/json
// and the API server treat as absent). Errors when required and absent.
Result<const json*> Member(const json& o, std::string_view key, const std::string& path, Presence presence) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    if (presence == Presence::kRequired) return Error(Child(path, key) + ": required");
    return static_cast<const json*>(nullptr);
  }
  return &*it;
}

Status ReadString(const json& o, std::string_view key, const std::string& path, Presence presence,
                  std::string* out) {
  Result<const json*> v = Member(o, key, path, presence);
  if (!v.ok()) return v.error();
  if (*v == nullptr) return Status::Ok();
  if (!(*v)->is_string()) return Expected(Child(path, key), "a string", **v);
  *out = (*v)->get<std::string>();
  return Status::Ok();
}

template <typename T>
Status ReadInt(const json& o, std::string_view key, const std::string& path, Presence presence, T min, T max,
               T* out) {
  Result<const json*> v = Member(o, key, path, presence);
  if (!v.ok()) return v.error();
  if (*v == nullptr) return Status::Ok();
  const json& j = **v;
  const std::string what = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  if (!j.is_number_integer()) return Expected(Child(path, key), what, j);
  if (j.is_number_unsigned()) {
    const auto u = j.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(max)) return Expected(Child(path, key), what, j);
    *out = static_cast<T>(u);
    return Status::Ok();
  }
  const auto s = j.get<std::int64_t>();
  if (s < static_cast<std::int64_t>(min) || s > static_cast<std::int64_t>(max)) {
    return Expected(Child(path, key), what, j);
  }
  *out = static_cast<T>(s);
  return Status::Ok();
}

Status ReadBool(const json& o, std::string_view key, const std::string& path, bool* out) {
  Result<const json*> v = Member(o, key, path, Presence::kOptional);
  if (!v.ok()) return v.error();
  if (*v == nullptr) return Status::Ok();
  if (!(*v)->is_boolean()) return Expected(Child(path, key), "true or false", **v);
  *out = (*v)->get<bool>();
  return Status::Ok();
}

// The object member `key` (null when absent and optional).
Result<const json*> ReadObject(const json& o, std::string_view key, const std::string& path,
                               Presence presence) {
  Result<const json*> v = Member(o, key, path, presence);
  if (!v.ok() || *v == nullptr) return v;
  if (!(*v)->is_object()) return Expected(Child(path, key), "an object", **v);
  return v;
}

Result<const json*> ReadArray(const json& o, std::string_view key, const std::string& path,
                              Presence presence) {
  Result<const json*> v = Member(o, key, path, presence);
  if (!v.ok() || *v == nullptr) return v;
  if (!(*v)->is_array()) return Expected(Child(path, key), "an array", **v);
  return v;
}

// A map[string]string (labels, annotations); `keep` filters the keys kept (all are type-checked).
Status ReadStringMap(const json& o, std::string_view key, const std::string& path,
                     bool (*keep)(const std::string&), std::map<std::string, std::string>* out) {
  Result<const json*> m = ReadObject(o, key, path, Presence::kOptional);
  if (!m.ok()) return m.error();
  if (*m == nullptr) return Status::Ok();
  for (const auto& [k, v] : (*m)->items()) {
    if (!v.is_string()) return Expected(Child(Child(path, key), k), "a string", v);
    if (keep(k)) (*out)[k] = v.get<std::string>();
  }
  return Status::Ok();
}

// ---- devices of an allocation ----

bool ValidGpu(const NodeTopology& t, int g) {
  return g >= 0 && g < static_cast<int>(t.gpus.size());
}
bool ValidNic(const NodeTopology& t, int n) {
  return n >= 0 && n < static_cast<int>(t.nics.size());
}

struct ChosenGpu {
  int index = 0;
  std::optional<GpuShareUsage> share;  // null: whole GPU
};

// The delta's GPUs in delta order (whole, then shared); indices the topology lacks are skipped
// (the store never publishes such a delta; an encoder has no error channel).
std::vector<ChosenGpu> ChosenGpus(const framework::AllocationDelta& delta, const NodeTopology& t) {
  std::vector<ChosenGpu> out;
  for (int g : delta.exclusive_gpus) {
    if (ValidGpu(t, g)) out.push_back({g, std::nullopt});
  }
  for (const auto& [g, usage] : delta.shares) {
    if (ValidGpu(t, g)) out.push_back({g, usage});
  }
  return out;
}

std::vector<int> ChosenNics(const framework::AllocationDelta& delta, const NodeTopology& t) {
  std::vector<int> out;
  for (int n : delta.nics) {
    if (ValidNic(t, n)) out.push_back(n);
  }
  return out;
}

// Matrix cells, falling back to the path rules when a matrix does not have the cell.
Link GpuNicLink(const NodeTopology& t, int g, int n) {
  if (t.gpu_nic.rows == static_cast<int>(t.gpus.size()) &&
      t.gpu_nic.cols == static_cast<int>(t.nics.size())) {
    return t.gpu_nic.at(g, n);
  }
  return Link{
      ClassifyPath(t, t.gpus[static_cast<std::size_t>(g)].parent, t.gpus[static_cast<std::size_t>(g)].numa,
                   t.nics[static_cast<std::size_t>(n)].parent, t.nics[static_cast<std::size_t>(n)].numa),
      Fabric::kNone, 0};
}

Link GpuGpuLink(const NodeTopology& t, int a, int b) {
  if (t.gpu_gpu.rows == static_cast<int>(t.gpus.size()) && t.gpu_gpu.cols == t.gpu_gpu.rows) {
    return t.gpu_gpu.at(a, b);
  }
  const Gpu& ga = t.gpus[static_cast<std::size_t>(a)];
  const Gpu& gb = t.gpus[static_cast<std::size_t>(b)];
  return Link{ClassifyPath(t, ga.parent, ga.numa, gb.parent, gb.numa), Fabric::kNone, 0};
}

// Worse-than order of links: by LinkRank, then (NVLink) fewer bonded links.
bool WorseLink(const Link& a, int rank_a, const Link& b, int rank_b) {
  if (rank_a != rank_b) return rank_a > rank_b;
  return a.cls == LinkClass::kNV && b.cls == LinkClass::kNV && a.count < b.count;
}

// HAMi's vendor word for NVIDIA is "NVIDIA" (protocols.md §3.4); AMD's records carry the
// registered type instead (HamiAmdCard::type).
constexpr std::string_view kHamiNvidiaType = "NVIDIA";
// The type HAMi's AMD scheduler writes when the registration gives none (device.go Fit: the
// request's type, AMDDevice = "AMD").
constexpr std::string_view kHamiAmdType = "AMD";

}  // namespace

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
  Result<const json*> gpus = ReadArray(doc, "gpus", "", Presence::kOptional);
  if (!gpus.ok()) return gpus.error();
  if (*gpus != nullptr) {
    for (std::size_t i = 0; i < (*gpus)->size(); ++i) {
      const json& e = (**gpus)[i];
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
            if (found >= 0) return Error(Child(p, "pciBusId") + ": several GPUs of the node are at " + Quote(normalized));
            found = static_cast<int>(g);
          }
        }
        if (found < 0) return Error(Child(p, "pciBusId") + ": node has no GPU at " + Quote(normalized));
        // A re-discovery renumbers GPUs when one falls off the bus: the index is then the stale
        // field, which only a matching UUID can show. Without one, the fields just disagree.
        const std::string& at_bus = t.gpus[static_cast<std::size_t>(found)].uuid;
        if (has_index && index != found && (uuid.empty() || uuid != at_bus)) {
          return Error(p + ": index " + std::to_string(index) + " but the GPU at " + Quote(normalized) + " is GPU " +
                       std::to_string(found) + " (the record names two different GPUs)");
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
            return Error(Child(p, "uuid") + ": " + Quote(uuid) + " is the node's GPU " + std::to_string(other.index) +
                         ", not GPU " + std::to_string(found));
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
  Result<const json*> nics = ReadArray(doc, "nics", "", Presence::kOptional);
  if (!nics.ok()) return nics.error();
  if (*nics != nullptr) {
    for (std::size_t i = 0; i < (*nics)->size(); ++i) {
      const json& e = (**nics)[i];
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
          return Error(Child(p, "pciBusId") + ": " + Quote(normalized) + " but the node's NIC " + Quote(name) +
                       " is at " + Quote(nic.pci_bus_id) + " (the record names two different NICs)");
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
  Result<const json*> containers = ReadArray(doc, "containers", "", Presence::kOptional);
  if (!containers.ok()) return containers.error();
  if (*containers != nullptr) {
    for (std::size_t i = 0; i < (*containers)->size(); ++i) {
      const json& c = (**containers)[i];
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
    Result<json> doc = ParseBoundedJson(text, kMaxAllocationDepth);
    if (!doc.ok()) return doc.error();
    framework::AllocationDelta delta;
    if (Status s = DecodeAllocationDoc(*doc, topology, &delta); !s.ok()) return s.error();
    if (worst_gpu_nic != nullptr) {
      *worst_gpu_nic = LinkClass::kPIX;
      const json* links = doc->contains("links") ? &(*doc)["links"] : nullptr;
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
            if (index >= 0 && index < static_cast<std::int64_t>(t.gpus.size())) gpus.insert(static_cast<int>(index));
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
        return Error(where + ": node " + Quote(topology.node_name) + " has no GPU with UUID " + Quote(dev.uuid));
      }
      const GpuVendor at = topology.gpus[static_cast<std::size_t>(found)].vendor;
      if (at != vendor) {
        return Error(where + ": " + Quote(dev.uuid) + " is the node's GPU " + std::to_string(found) + ", an " +
                     Upper(ToString(at)) + " GPU, in HAMi's " + Upper(ToString(vendor)) + " record");
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
bool HasRecordSeparator(std::string_view s) { return s.find_first_of(",:;") != std::string_view::npos; }

// AMD's custominfo: the card's PCI address, and cuPerWGP read as HAMi's cuPerWGP reads it (a
// JSON number that is a whole number from 2 to 2^31-1, else 1).
Status ReadAmdCustomInfo(const json& e, const std::string& p, HamiRegisteredGpu* g) {
  Result<const json*> info = ReadObject(e, "custominfo", p, Presence::kOptional);
  if (!info.ok()) return info.error();
  if (*info == nullptr) return Status::Ok();
  const std::string path = Child(p, "custominfo");
  std::string bdf;
  TOPOSCHED_RETURN_IF_ERROR(ReadString(**info, "pciBDF", path, Presence::kOptional, &bdf));
  if (!bdf.empty()) {
    g->pci_bus_id = NormalizePciBusId(bdf);
    if (g->pci_bus_id.empty()) {
      return Expected(Child(path, "pciBDF"), "a PCI address like 0000:83:00.0", (**info)["pciBDF"]);
    }
  }
  if (const auto w = (*info)->find("cuPerWGP"); w != (*info)->end() && w->is_number()) {
    const double v = w->get<double>();
    if (v > 1 && v <= INT32_MAX && v == std::trunc(v)) g->cu_per_wgp = static_cast<int>(v);
  }
  return Status::Ok();
}

Result<std::vector<HamiRegisteredGpu>> ParseRegisterJson(std::string_view text, bool amd) {
  Result<json> doc = ParseBoundedJson(text, 8);
  if (!doc.ok()) return doc.error();
  if (!doc->is_array()) return Expected("top level", "an array", *doc);
  std::vector<HamiRegisteredGpu> out;
  for (std::size_t i = 0; i < doc->size(); ++i) {
    const json& e = (*doc)[i];
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
    Result<std::vector<HamiRegisteredGpu>> out =
        !trimmed.empty() && (trimmed.front() == '[' || trimmed.front() == '{')
            ? ParseRegisterJson(trimmed, /*amd=*/false)
            : ParseRegisterRecords(trimmed);
    if (!out.ok()) return out.error().WithContext(std::string(kHamiNodeRegister));
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
    if ((g.memory_mib == 0 || IsMemoryEstimate(g)) && r.devmem_mib > 0) g.memory_mib = static_cast<std::uint64_t>(r.devmem_mib);
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
    Result<std::vector<HamiRegisteredGpu>> out = ParseRegisterJson(trimmed, /*amd=*/true);
    if (!out.ok()) return out.error().WithContext(key);
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
  Result<std::chrono::system_clock::time_point> t = ParseTime(parts[0]);
  if (!t.ok()) return t.error().WithContext(std::string(kHamiNodeLock));
  lock.time = *t;
  if (parts.size() == 3) {
    lock.pod_namespace = std::string(parts[1]);
    lock.pod_name = std::string(parts[2]);
  }
  return lock;
}

// ---- objects ----

namespace {

Status ReadNodeImpl(const json& node, NodeView* v) {
  if (!node.is_object()) return Expected("top level", "an object", node);
  Result<const json*> meta = ReadObject(node, "metadata", "", Presence::kRequired);
  if (!meta.ok()) return meta.error();
  TOPOSCHED_RETURN_IF_ERROR(ReadString(**meta, "name", "metadata", Presence::kRequired, &v->name));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(**meta, "uid", "metadata", Presence::kRequired, &v->uid));
  if (v->name.empty()) return Error("metadata.name: must not be empty");
  if (v->uid.empty()) return Error("metadata.uid: must not be empty");
  TOPOSCHED_RETURN_IF_ERROR(
      ReadString(**meta, "resourceVersion", "metadata", Presence::kOptional, &v->resource_version));
  TOPOSCHED_RETURN_IF_ERROR(ReadStringMap(
      **meta, "labels", "metadata", [](const std::string&) { return true; }, &v->labels));
  std::map<std::string, std::string> annotations;
  TOPOSCHED_RETURN_IF_ERROR(ReadStringMap(
      **meta, "annotations", "metadata",
      [](const std::string& k) { return k == kHamiNodeRegister || k == kHamiAmdNodeRegister; }, &annotations));
  if (const auto it = annotations.find(std::string(kHamiNodeRegister)); it != annotations.end()) {
    v->hami_register = it->second;
  }
  if (const auto it = annotations.find(std::string(kHamiAmdNodeRegister)); it != annotations.end()) {
    v->hami_amd_register = it->second;
  }
  Result<const json*> spec = ReadObject(node, "spec", "", Presence::kOptional);
  if (!spec.ok()) return spec.error();
  if (*spec != nullptr)
    TOPOSCHED_RETURN_IF_ERROR(ReadBool(**spec, "unschedulable", "spec", &v->unschedulable));
  return Status::Ok();
}

bool KeptPodAnnotation(const std::string& key) {
  return key.starts_with("toposched.io/") || key.starts_with("hami.io/");
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
  Result<const json*> meta = ReadObject(pod, "metadata", "", Presence::kRequired);
  if (!meta.ok()) return meta.error();
  TOPOSCHED_RETURN_IF_ERROR(ReadString(**meta, "name", "metadata", Presence::kRequired, &v->pod_name));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(**meta, "uid", "metadata", Presence::kRequired, &v->uid));
  if (v->pod_name.empty()) return Error("metadata.name: must not be empty");
  if (v->uid.empty()) return Error("metadata.uid: must not be empty");
  TOPOSCHED_RETURN_IF_ERROR(
      ReadString(**meta, "namespace", "metadata", Presence::kOptional, &v->pod_namespace));
  TOPOSCHED_RETURN_IF_ERROR(
      ReadString(**meta, "resourceVersion", "metadata", Presence::kOptional, &v->resource_version));
  std::string deletion;
  TOPOSCHED_RETURN_IF_ERROR(
      ReadString(**meta, "deletionTimestamp", "metadata", Presence::kOptional, &deletion));
  v->deleting = !deletion.empty();
  TOPOSCHED_RETURN_IF_ERROR(
      ReadStringMap(**meta, "annotations", "metadata", KeptPodAnnotation, &v->annotations));
  TOPOSCHED_RETURN_IF_ERROR(
      ReadStringMap(**meta, "labels", "metadata", [](const std::string&) { return true; }, &v->labels));

  Result<const json*> spec = ReadObject(pod, "spec", "", Presence::kOptional);
  if (!spec.ok()) return spec.error();
  if (*spec != nullptr) {
    TOPOSCHED_RETURN_IF_ERROR(ReadString(**spec, "nodeName", "spec", Presence::kOptional, &v->node_name));
    ReadExtendedResources(**spec, &v->extended_resources);
  }

  Result<const json*> status = ReadObject(pod, "status", "", Presence::kOptional);
  if (!status.ok()) return status.error();
  if (*status == nullptr) return Status::Ok();
  TOPOSCHED_RETURN_IF_ERROR(ReadString(**status, "phase", "status", Presence::kOptional, &v->phase));
  Result<const json*> conditions = ReadArray(**status, "conditions", "status", Presence::kOptional);
  if (!conditions.ok()) return conditions.error();
  if (*conditions == nullptr) return Status::Ok();
  for (std::size_t i = 0; i < (*conditions)->size(); ++i) {
    const json& c = (**conditions)[i];
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
      Result<std::chrono::system_clock::time_point> t = ParseTime(since);
      if (!t.ok()) return t.error().WithContext(Child(p, "lastTransitionTime"));
      v->ready_since = *t;
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
  Result<const json*> meta = ReadObject(object, "metadata", "", Presence::kRequired);
  if (!meta.ok()) return meta.error();
  TOPOSCHED_RETURN_IF_ERROR(ReadString(**meta, "name", "metadata", Presence::kRequired, &v->name));
  if (v->name.empty()) return Error("metadata.name: must not be empty");
  TOPOSCHED_RETURN_IF_ERROR(
      ReadString(**meta, "resourceVersion", "metadata", Presence::kOptional, &v->resource_version));
  Result<const json*> status = ReadObject(object, "status", "", Presence::kOptional);
  if (!status.ok()) return status.error();
  if (*status == nullptr) return Status::Ok();  // created, status not written yet
  TOPOSCHED_RETURN_IF_ERROR(ReadInt<std::int64_t>(**status, "generation", "status", Presence::kOptional, 0,
                                                  std::numeric_limits<std::int64_t>::max(), &v->generation));
  std::string heartbeat;
  TOPOSCHED_RETURN_IF_ERROR(ReadString(**status, "heartbeatTime", "status", Presence::kOptional, &heartbeat));
  if (!heartbeat.empty()) {
    Result<std::chrono::system_clock::time_point> t = ParseTime(heartbeat);
    if (!t.ok()) return t.error().WithContext("status.heartbeatTime");
    v->heartbeat = *t;
  }
  // The codec reads a whole document; summary, generation and heartbeatTime are unknown keys to it.
  const json doc = {{"apiVersion", kTopologyApiVersion},
                    {"kind", kTopologyKind},
                    {"metadata", {{"name", v->name}}},
                    {"status", **status}};
  Result<NodeTopology> topology =
      DecodeTopologyJson(doc.dump(-1, ' ', false, json::error_handler_t::replace));
  if (!topology.ok()) return topology.error();
  v->topology = std::make_shared<const NodeTopology>(std::move(topology).value());
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
