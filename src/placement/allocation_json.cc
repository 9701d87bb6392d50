#include "toposched/placement/allocation_json.h"

#include <nlohmann/json.hpp>

#include <string>

#include "../common/json_read.h"

namespace toposched {
namespace {

using nlohmann::json;

// A device reference: an index (GPUs only), a PCI bus id, or (NICs) a name.
Result<int> FindGpu(const json& ref, const NodeTopology& t, const std::string& path) {
  if (ref.is_number_integer()) {
    const auto i = ref.get<std::int64_t>();
    if (i < 0 || i >= static_cast<std::int64_t>(t.gpus.size())) {
      return Error(path + ": GPU index " + std::to_string(i) + " out of range (the node has " +
                   std::to_string(t.gpus.size()) + " GPUs)");
    }
    return static_cast<int>(i);
  }
  if (ref.is_string()) {
    const std::string bus = NormalizePciBusId(ref.get<std::string>());
    for (const Gpu& g : t.gpus) {
      if (!bus.empty() && g.pci_bus_id == bus) return g.index;
    }
    return Error(path + ": no GPU with PCI bus id \"" + ref.get<std::string>() + "\" on this node");
  }
  return Error(path + ": expected a GPU index or PCI bus id");
}

Result<int> FindNic(const json& ref, const NodeTopology& t, const std::string& path) {
  if (!ref.is_string()) return Error(path + ": expected a NIC name or PCI bus id");
  const std::string s = ref.get<std::string>();
  const std::string bus = NormalizePciBusId(s);
  for (std::size_t i = 0; i < t.nics.size(); ++i) {
    if (t.nics[i].name == s || (!bus.empty() && t.nics[i].pci_bus_id == bus)) return static_cast<int>(i);
  }
  return Error(path + ": no NIC \"" + s + "\" on this node");
}

// An optional integer member in [0, max]; 0 when absent.
Result<std::int64_t> NonNegative(const json& o, const char* key, std::int64_t max, const std::string& path) {
  std::int64_t v = 0;
  TOPOSCHED_RETURN_IF_ERROR(
      json_read::ReadInt(o, key, path, json_read::Presence::kOptional, std::int64_t{0}, max, &v));
  return v;
}

Status CheckKeys(const json& o, std::initializer_list<const char*> known, const std::string& path) {
  for (const auto& [key, value] : o.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) return Error(path + ": unknown key \"" + key + "\"");
  }
  return Status::Ok();
}

Result<NodeAllocation> Decode(std::string_view text, const NodeTopology& t) {
  if (text.size() > kMaxAllocationJsonBytes) return Error("allocation document larger than 1 MiB");
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Error("not valid JSON");
  if (!doc.is_object()) return Error("expected a JSON object");
  TOPOSCHED_RETURN_IF_ERROR(CheckKeys(doc, {"exclusiveGpus", "usedNics", "sharedGpus"}, "allocation"));
  NodeAllocation a;
  a.gpu_exclusive.assign(t.gpus.size(), false);
  a.nic_used.assign(t.nics.size(), false);
  a.gpu_shares.assign(t.gpus.size(), GpuShareUsage{});
  auto array = [&](const char* key) {
    return json_read::ReadArray(doc, key, "", json_read::Presence::kOptional);
  };
  TOPOSCHED_ASSIGN_OR_RETURN(const json* exclusive, array("exclusiveGpus"));
  if (exclusive != nullptr) {
    for (std::size_t i = 0; i < exclusive->size(); ++i) {
      TOPOSCHED_ASSIGN_OR_RETURN(const int g,
                                 FindGpu((*exclusive)[i], t, "exclusiveGpus[" + std::to_string(i) + "]"));
      a.gpu_exclusive[static_cast<std::size_t>(g)] = true;
    }
  }
  TOPOSCHED_ASSIGN_OR_RETURN(const json* nics, array("usedNics"));
  if (nics != nullptr) {
    for (std::size_t i = 0; i < nics->size(); ++i) {
      TOPOSCHED_ASSIGN_OR_RETURN(const int n, FindNic((*nics)[i], t, "usedNics[" + std::to_string(i) + "]"));
      a.nic_used[static_cast<std::size_t>(n)] = true;
    }
  }
  TOPOSCHED_ASSIGN_OR_RETURN(const json* shared, array("sharedGpus"));
  if (shared != nullptr) {
    for (std::size_t i = 0; i < shared->size(); ++i) {
      const std::string path = "sharedGpus[" + std::to_string(i) + "]";
      const json& e = (*shared)[i];
      if (!e.is_object()) return Error(path + ": expected an object");
      TOPOSCHED_RETURN_IF_ERROR(CheckKeys(e, {"gpu", "shares", "memoryMiB", "coresPercent"}, path));
      TOPOSCHED_ASSIGN_OR_RETURN(const json* gpu,
                                 json_read::Member(e, "gpu", path, json_read::Presence::kRequired));
      TOPOSCHED_ASSIGN_OR_RETURN(const int g, FindGpu(*gpu, t, path + ".gpu"));
      TOPOSCHED_ASSIGN_OR_RETURN(const std::int64_t shares, NonNegative(e, "shares", 1000, path));
      TOPOSCHED_ASSIGN_OR_RETURN(const std::int64_t memory,
                                 NonNegative(e, "memoryMiB", std::int64_t{1} << 40, path));
      TOPOSCHED_ASSIGN_OR_RETURN(const std::int64_t cores, NonNegative(e, "coresPercent", 100, path));
      GpuShareUsage& u = a.gpu_shares[static_cast<std::size_t>(g)];
      u.shares += static_cast<int>(shares == 0 ? 1 : shares);
      u.memory_mib += memory;
      u.cores += cores * (kFullGpuCores / 100);
      if (u.cores > kFullGpuCores)
        return Error(path + ": GPU" + std::to_string(g) + " shares add up to more than 100% of its cores");
      const std::uint64_t capacity = t.gpus[static_cast<std::size_t>(g)].memory_mib;
      if (capacity != 0 && static_cast<std::uint64_t>(u.memory_mib) > capacity) {
        return Error(path + ": GPU" + std::to_string(g) + " shares use " + std::to_string(u.memory_mib) +
                     " MiB, more than its " + std::to_string(capacity) + " MiB");
      }
      if (a.gpu_exclusive[static_cast<std::size_t>(g)]) {
        return Error(path + ": GPU" + std::to_string(g) + " is listed as exclusive and shared");
      }
    }
  }
  return a;
}

}  // namespace

Result<NodeAllocation> DecodeAllocationJson(std::string_view text, const NodeTopology& topology) {
  try {
    return Decode(text, topology);
  } catch (const std::exception& e) {  // backstop: type errors are checked before every access
    return Error(std::string("cannot decode allocation JSON: ") + e.what());
  }
}

}  // namespace toposched
