#include "toposched/topology/json_codec.h"

#include "../common/json_errors.h"
#include "../common/json_read.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace toposched {
namespace {

using nlohmann::json;

// Deeper than any document this schema produces (root > status > links > gpuGpu > row is 5
// levels), with room for nested unknown keys from newer writers. The parser itself is iterative,
// but every level costs memory (16 MiB of "[" would be ~1 GiB of nested arrays) and nothing
// legitimate needs it.
constexpr int kMaxNestingDepth = 32;
// A 64-GPU, 64-NIC node encodes to ~15,000 values (its three matrices dominate); one million
// leaves room for 500 x 500 while keeping a hostile document's parse to tens of MB.
constexpr std::size_t kMaxJsonValues = 1'000'000;
// Kubernetes object names are DNS subdomains: at most 253 characters.
constexpr std::size_t kMaxNodeNameLength = 253;
constexpr int kMaxLinkWidth = 64;
// Link::ParseToken's bound on NV#, so that a peer's links always print as a parsable token.
constexpr int kMaxBondedLinks = 1024;
// Far above any real link (PCIe 7 x16 is ~256 GB/s), and low enough that Fingerprint()'s
// fixed-point conversion (v * 1000 into int64) cannot overflow.
constexpr double kMaxLinkGBps = 1e6;
constexpr int kMaxIndex = std::numeric_limits<int>::max();

// ---------------------------------------------------------------------------------------------
// Names of the enums that node_topology.h does not name itself.

std::string_view PcieKindName(PcieKind k) {
  return k == PcieKind::kHostBridge ? "hostBridge" : "bridge";
}

std::optional<PcieKind> ParsePcieKind(std::string_view s) {
  if (s == "hostBridge") return PcieKind::kHostBridge;
  if (s == "bridge") return PcieKind::kBridge;
  return std::nullopt;
}

std::string_view FabricName(Fabric f) {
  switch (f) {
    case Fabric::kNvlink:
      return "nvlink";
    case Fabric::kXgmi:
      return "xgmi";
    case Fabric::kNone:
      return "none";
  }
  return "none";
}

// "none" is not accepted: a peer entry exists only for a high-speed link (DeriveLinks would turn
// a kNone peer into an unprintable "NV0" cell).
std::optional<Fabric> ParsePeerFabric(std::string_view s) {
  if (s == "nvlink") return Fabric::kNvlink;
  if (s == "xgmi") return Fabric::kXgmi;
  return std::nullopt;
}

std::optional<GpuVendor> ParseGpuVendor(std::string_view s) {
  for (GpuVendor v : {GpuVendor::kNvidia, GpuVendor::kAmd}) {
    if (s == ToString(v)) return v;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Encoding.

std::string HexId(std::uint16_t v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%04x", static_cast<unsigned>(v));
  return buf;
}

// -1 (and any other negative) means unknown, which reads better as null than as a magic number.
json Locality(int v) {
  return v >= 0 ? json(v) : json(nullptr);
}

// Parents are written as the parent's id rather than its index so that the document stays
// readable and survives hand edits that insert or reorder entries.
json ParentId(const NodeTopology& t, int parent) {
  if (parent < 0 || static_cast<std::size_t>(parent) >= t.pcie.size()) return nullptr;
  return t.pcie[static_cast<std::size_t>(parent)].id;
}

// Fields every device kind shares; zero/empty values mean unknown and are left out.
void PutIds(json& o, std::uint16_t vendor_id, std::uint16_t device_id) {
  if (vendor_id != 0) o["vendorId"] = HexId(vendor_id);
  if (device_id != 0) o["deviceId"] = HexId(device_id);
}

void PutLink(json& o, double link_gbps, int link_width) {
  if (link_gbps != 0) o["linkGBps"] = link_gbps;
  if (link_width != 0) o["linkWidth"] = link_width;
}

json EncodeMatrix(const LinkMatrix& m) {
  json rows = json::array();
  for (int r = 0; r < m.rows; ++r) {
    json row = json::array();
    for (int c = 0; c < m.cols; ++c) {
      // A malformed in-memory matrix (cells shorter than rows x cols) is written short rather
      // than read out of bounds; the decoder then rejects its shape.
      const auto i =
          static_cast<std::size_t>(r) * static_cast<std::size_t>(m.cols) + static_cast<std::size_t>(c);
      if (i >= m.cells.size()) break;
      row.push_back(m.cells[i].Token());
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

json EncodeStatus(const NodeTopology& t) {
  json s = json::object();
  s["schemaVersion"] = kTopologySchemaVersion;
  s["source"] = ToString(t.source);
  s["sourceDetail"] = t.source_detail;
  s["agentVersion"] = t.agent_version;
  s["fingerprint"] = t.Fingerprint();

  json numa_nodes = json::array();
  for (const NumaNode& n : t.numa_nodes) {
    json o = {{"id", n.id}, {"package", Locality(n.package)}};
    if (!n.cpus.empty()) o["cpus"] = n.cpus;
    if (n.memory_bytes != 0) o["memoryBytes"] = n.memory_bytes;
    numa_nodes.push_back(std::move(o));
  }
  s["numaNodes"] = std::move(numa_nodes);

  json pcie = json::array();
  for (const PcieNode& p : t.pcie) {
    json o = {{"id", p.id},
              {"kind", PcieKindName(p.kind)},
              {"parent", ParentId(t, p.parent)},
              {"switch", p.is_switch},
              {"numa", Locality(p.numa)},
              {"package", Locality(p.package)}};
    PutIds(o, p.vendor_id, p.device_id);
    PutLink(o, p.link_gbps, p.link_width);
    pcie.push_back(std::move(o));
  }
  s["pcie"] = std::move(pcie);

  json gpus = json::array();
  for (const Gpu& g : t.gpus) {
    json o = {
        {"index", g.index},         {"pciBusId", g.pci_bus_id},       {"vendor", ToString(g.vendor)},
        {"numa", Locality(g.numa)}, {"package", Locality(g.package)}, {"parent", ParentId(t, g.parent)}};
    PutIds(o, g.vendor_id, g.device_id);
    if (!g.model.empty()) o["model"] = g.model;
    if (!g.uuid.empty()) o["uuid"] = g.uuid;
    if (g.memory_mib != 0) o["memoryMiB"] = g.memory_mib;
    if (!g.cpus.empty()) o["cpus"] = g.cpus;
    PutLink(o, g.link_gbps, g.link_width);
    json peers = json::array();
    for (const GpuPeer& p : g.peers) {
      peers.push_back({{"gpu", p.gpu},
                       {"fabric", FabricName(p.fabric)},
                       {"links", p.links},
                       {"bandwidthMBps", p.bandwidth_mbps},
                       {"viaSwitch", p.via_switch}});
    }
    o["peers"] = std::move(peers);
    gpus.push_back(std::move(o));
  }
  s["gpus"] = std::move(gpus);

  json nics = json::array();
  for (const Nic& n : t.nics) {
    json o = {{"name", n.name},
              {"rdma", n.rdma},
              {"kind", ToString(n.kind)},
              {"numa", Locality(n.numa)},
              {"package", Locality(n.package)},
              {"parent", ParentId(t, n.parent)}};
    if (!n.pci_bus_id.empty()) o["pciBusId"] = n.pci_bus_id;
    if (!n.netdevs.empty()) o["netdevs"] = n.netdevs;
    PutIds(o, n.vendor_id, n.device_id);
    if (n.link_rate_mbps != 0) o["linkRateMbps"] = n.link_rate_mbps;
    if (!n.cpus.empty()) o["cpus"] = n.cpus;
    PutLink(o, n.link_gbps, n.link_width);
    if (!n.rail.empty()) o["rail"] = n.rail;
    nics.push_back(std::move(o));
  }
  s["nics"] = std::move(nics);

  // Informational, for people and kubectl columns; the decoder recomputes rather than trusts.
  s["switchCount"] = t.SwitchCount();
  s["rdmaNicCount"] = t.RdmaNicCount();

  s["links"] = {{"gpuGpu", EncodeMatrix(t.gpu_gpu)},
                {"gpuNic", EncodeMatrix(t.gpu_nic)},
                {"nicNic", EncodeMatrix(t.nic_nic)}};
  return s;
}

// ---------------------------------------------------------------------------------------------
// Decoding. Every reader returns the first problem as an Error whose message starts with the
// JSON path of the offending value ("status.gpus[3].pciBusId: ...").
//
// Unknown keys are ignored everywhere, on purpose: a writer of the same schemaVersion may add
// fields (that is what makes them additive), and an older extender must still read its
// documents. Changes that older readers must not silently misread bump schemaVersion instead.

using json_errors::Describe;
using json_errors::Expected;
using json_errors::Quote;
using json_errors::ScanShape;
using json_errors::Shape;
using json_errors::StripExceptionTag;

// The typed readers are common/json_read.h's; a JSON null is a value here (toposched writes
// none where a value belongs), except where a field documents null as "unknown".
using json_read::Child;
using json_read::Element;
using json_read::Presence;
using json_read::ReadBool;
using json_read::ReadInt;
using json_read::ReadString;

// obj[key] (obj is known to be an object) into *out: null only when an optional key is absent,
// so callers of required fields may dereference it once the status is ok (a missing required
// field points at a null value, which no caller reads past the error).
Status Field(const json& obj, const char* key, const std::string& path, Presence presence, const json** out) {
  static const json& kMissing = *new json();  // never destroyed, per the style guide
  Result<const json*> v = json_read::Member(obj, key, path, presence);
  *out = v.ok() ? *v : &kMissing;
  return v.ok() ? Status::Ok() : Status(v.error());
}

Status ReadObject(const json& obj, const char* key, const std::string& path, const json** out) {
  TOPOSCHED_ASSIGN_OR_RETURN(*out, json_read::ReadObject(obj, key, path, Presence::kRequired));
  return Status::Ok();
}

// An array of at most kMaxDevicesPerKind elements. Sets *out to nullptr when an optional key is
// absent.
Status ReadArray(const json& obj, const char* key, const std::string& path, Presence presence,
                 const json** out) {
  TOPOSCHED_ASSIGN_OR_RETURN(*out, json_read::ReadArray(obj, key, path, presence));
  if (*out != nullptr && (*out)->size() > static_cast<std::size_t>(kMaxDevicesPerKind)) {
    return Error(Child(path, key) + ": " + std::to_string((*out)->size()) +
                 " entries, more than the limit of " + std::to_string(kMaxDevicesPerKind));
  }
  return Status::Ok();
}

Status ReadUint64(const json& obj, const char* key, const std::string& path, std::uint64_t* out) {
  const json* v = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(Field(obj, key, path, Presence::kOptional, &v));
  if (v == nullptr) return Status::Ok();
  // The parser stores every non-negative integer literal as unsigned, negative ones as signed.
  if (!v->is_number_unsigned()) return Expected(Child(path, key), "a non-negative integer", *v);
  *out = v->get<std::uint64_t>();
  return Status::Ok();
}

// numa, package: a non-negative OS index, or null (or absent) for unknown.
Status ReadLocality(const json& obj, const char* key, const std::string& path, int* out) {
  const json* v = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(Field(obj, key, path, Presence::kOptional, &v));
  if (v == nullptr || v->is_null()) {
    *out = -1;
    return Status::Ok();
  }
  if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<std::int64_t>() < 0) ||
      (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxIndex))) {
    return Expected(Child(path, key), "a non-negative integer or null", *v);
  }
  *out = static_cast<int>(v->get<std::int64_t>());
  return Status::Ok();
}

// vendorId, deviceId: "0x" and 1 to 4 hex digits.
Status ReadHexId(const json& obj, const char* key, const std::string& path, std::uint16_t* out) {
  const json* v = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(Field(obj, key, path, Presence::kOptional, &v));
  if (v == nullptr) return Status::Ok();
  constexpr std::string_view kWhat = "a 16-bit hex id like \"0x10de\"";
  if (!v->is_string()) return Expected(Child(path, key), kWhat, *v);
  const std::string& s = v->get_ref<const std::string&>();
  if (s.size() < 3 || s.size() > 6 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) {
    return Expected(Child(path, key), kWhat, *v);
  }
  unsigned value = 0;
  for (std::size_t i = 2; i < s.size(); ++i) {
    const char c = s[i];
    unsigned digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<unsigned>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<unsigned>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<unsigned>(c - 'A' + 10);
    } else {
      return Expected(Child(path, key), kWhat, *v);
    }
    value = value * 16 + digit;
  }
  *out = static_cast<std::uint16_t>(value);
  return Status::Ok();
}

Status ReadGbps(const json& obj, const char* key, const std::string& path, double* out) {
  const json* v = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(Field(obj, key, path, Presence::kOptional, &v));
  if (v == nullptr) return Status::Ok();
  const std::string what = "a number in [0, " + std::to_string(static_cast<long long>(kMaxLinkGBps)) + "]";
  if (!v->is_number()) return Expected(Child(path, key), what, *v);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < 0 || d > kMaxLinkGBps) return Expected(Child(path, key), what, *v);
  *out = d;
  return Status::Ok();
}

Status ReadLinkFields(const json& obj, const std::string& path, double* link_gbps, int* link_width) {
  TOPOSCHED_RETURN_IF_ERROR(ReadGbps(obj, "linkGBps", path, link_gbps));
  return ReadInt(obj, "linkWidth", path, Presence::kOptional, 0, kMaxLinkWidth, link_width);
}

// Resolves a "parent" field (a pcie id or null) to an index into `ids_seen`, which holds the
// pcie entries decoded so far: parents must come before children.
// `all_ids`, when given, holds the ids of every pcie entry, to tell a misordered document from
// a dangling reference.
Status ReadParent(const json& obj, const std::string& path,
                  const std::unordered_map<std::string, int>& ids_seen, const std::set<std::string>* all_ids,
                  int* out) {
  const json* v = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(Field(obj, "parent", path, Presence::kOptional, &v));
  if (v == nullptr || v->is_null()) {
    *out = -1;
    return Status::Ok();
  }
  if (!v->is_string()) return Expected(Child(path, "parent"), "a pcie id or null", *v);
  const std::string& id = v->get_ref<const std::string&>();
  auto it = ids_seen.find(id);
  if (it == ids_seen.end()) {
    if (all_ids != nullptr && all_ids->count(id) != 0) {
      return Error(Child(path, "parent") + ": " + Quote(id) +
                   " is not an earlier pcie entry (parents must come before children)");
    }
    return Error(Child(path, "parent") + ": " + Quote(id) + " is not the id of a pcie entry");
  }
  *out = it->second;
  return Status::Ok();
}

Status ReadLocalityFields(const json& obj, const std::string& path, int* numa, int* package) {
  TOPOSCHED_RETURN_IF_ERROR(ReadLocality(obj, "numa", path, numa));
  return ReadLocality(obj, "package", path, package);
}

Status DecodeNumaNodes(const json& status, const std::string& path, NodeTopology* t) {
  const json* arr = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(ReadArray(status, "numaNodes", path, Presence::kRequired, &arr));
  const std::string arr_path = Child(path, "numaNodes");
  std::set<int> ids;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const json& e = (*arr)[i];
    const std::string p = Element(arr_path, i);
    if (!e.is_object()) return Expected(p, "an object", e);
    NumaNode n;
    TOPOSCHED_RETURN_IF_ERROR(ReadInt(e, "id", p, Presence::kRequired, 0, kMaxIndex, &n.id));
    if (!ids.insert(n.id).second) {
      return Error(Child(p, "id") + ": duplicate NUMA node id " + std::to_string(n.id));
    }
    TOPOSCHED_RETURN_IF_ERROR(ReadLocality(e, "package", p, &n.package));
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "cpus", p, Presence::kOptional, &n.cpus));
    TOPOSCHED_RETURN_IF_ERROR(ReadUint64(e, "memoryBytes", p, &n.memory_bytes));
    t->numa_nodes.push_back(std::move(n));
  }
  return Status::Ok();
}

Status DecodePcie(const json& status, const std::string& path, NodeTopology* t,
                  std::unordered_map<std::string, int>* ids) {
  const json* arr = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(ReadArray(status, "pcie", path, Presence::kRequired, &arr));
  const std::string arr_path = Child(path, "pcie");
  std::set<std::string> all_ids;
  for (const json& e : *arr) {
    if (e.is_object() && e.contains("id") && e["id"].is_string()) {
      all_ids.insert(e["id"].get<std::string>());
    }
  }
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const json& e = (*arr)[i];
    const std::string p = Element(arr_path, i);
    if (!e.is_object()) return Expected(p, "an object", e);
    PcieNode n;
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "id", p, Presence::kRequired, &n.id));
    if (n.id.empty()) return Error(Child(p, "id") + ": must not be empty");
    std::string kind;
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "kind", p, Presence::kRequired, &kind));
    const std::optional<PcieKind> parsed_kind = ParsePcieKind(kind);
    if (!parsed_kind) return Expected(Child(p, "kind"), "\"hostBridge\" or \"bridge\"", e["kind"]);
    n.kind = *parsed_kind;
    // Only earlier entries are visible, which both enforces parents-before-children and makes a
    // cycle impossible (ClassifyPath walks parent chains).
    TOPOSCHED_RETURN_IF_ERROR(ReadParent(e, p, *ids, &all_ids, &n.parent));
    TOPOSCHED_RETURN_IF_ERROR(ReadBool(e, "switch", p, Presence::kOptional, &n.is_switch));
    TOPOSCHED_RETURN_IF_ERROR(ReadLocalityFields(e, p, &n.numa, &n.package));
    TOPOSCHED_RETURN_IF_ERROR(ReadHexId(e, "vendorId", p, &n.vendor_id));
    TOPOSCHED_RETURN_IF_ERROR(ReadHexId(e, "deviceId", p, &n.device_id));
    TOPOSCHED_RETURN_IF_ERROR(ReadLinkFields(e, p, &n.link_gbps, &n.link_width));
    if (!ids->emplace(n.id, static_cast<int>(i)).second) {
      return Error(Child(p, "id") + ": duplicate pcie id " + Quote(n.id));
    }
    t->pcie.push_back(std::move(n));
  }
  return Status::Ok();
}

Status DecodePeers(const json& gpu, const std::string& path, int self, int gpu_count,
                   std::vector<GpuPeer>* out) {
  const json* arr = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(ReadArray(gpu, "peers", path, Presence::kOptional, &arr));
  if (arr == nullptr) return Status::Ok();
  const std::string arr_path = Child(path, "peers");
  std::set<int> seen;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const json& e = (*arr)[i];
    const std::string p = Element(arr_path, i);
    if (!e.is_object()) return Expected(p, "an object", e);
    GpuPeer peer;
    TOPOSCHED_RETURN_IF_ERROR(ReadInt(e, "gpu", p, Presence::kRequired, 0, kMaxIndex, &peer.gpu));
    if (peer.gpu >= gpu_count) {
      return Error(Child(p, "gpu") + ": " + std::to_string(peer.gpu) + " is out of range (" +
                   std::to_string(gpu_count) + " GPUs)");
    }
    if (peer.gpu == self) return Error(Child(p, "gpu") + ": a GPU cannot be its own peer");
    if (!seen.insert(peer.gpu).second) {
      return Error(Child(p, "gpu") + ": duplicate peer " + std::to_string(peer.gpu));
    }
    std::string fabric;
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "fabric", p, Presence::kRequired, &fabric));
    const std::optional<Fabric> parsed_fabric = ParsePeerFabric(fabric);
    if (!parsed_fabric) return Expected(Child(p, "fabric"), "\"nvlink\" or \"xgmi\"", e["fabric"]);
    peer.fabric = *parsed_fabric;
    TOPOSCHED_RETURN_IF_ERROR(ReadInt(e, "links", p, Presence::kOptional, 0, kMaxBondedLinks, &peer.links));
    TOPOSCHED_RETURN_IF_ERROR(ReadUint64(e, "bandwidthMBps", p, &peer.bandwidth_mbps));
    TOPOSCHED_RETURN_IF_ERROR(ReadBool(e, "viaSwitch", p, Presence::kOptional, &peer.via_switch));
    out->push_back(peer);
  }
  return Status::Ok();
}

Status DecodeGpus(const json& status, const std::string& path,
                  const std::unordered_map<std::string, int>& pcie_ids, NodeTopology* t) {
  const json* arr = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(ReadArray(status, "gpus", path, Presence::kRequired, &arr));
  const std::string arr_path = Child(path, "gpus");
  const int gpu_count = static_cast<int>(arr->size());
  std::set<std::string> bus_ids;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const json& e = (*arr)[i];
    const std::string p = Element(arr_path, i);
    if (!e.is_object()) return Expected(p, "an object", e);
    Gpu g;
    TOPOSCHED_RETURN_IF_ERROR(ReadInt(e, "index", p, Presence::kRequired, 0, kMaxIndex, &g.index));
    // The index is the GPU's name in matrices, peers and allocations; a gap or a reorder would
    // silently renumber them.
    if (g.index != static_cast<int>(i)) {
      return Error(Child(p, "index") + ": expected " + std::to_string(i) +
                   " (GPUs are listed in index order), got " + std::to_string(g.index));
    }
    std::string bus_id;
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "pciBusId", p, Presence::kRequired, &bus_id));
    g.pci_bus_id = NormalizePciBusId(bus_id);
    if (g.pci_bus_id.empty()) {
      return Expected(Child(p, "pciBusId"), "a PCI bus id like 0000:4e:00.0", e["pciBusId"]);
    }
    if (!bus_ids.insert(g.pci_bus_id).second) {
      return Error(Child(p, "pciBusId") + ": duplicate GPU bus id " + g.pci_bus_id);
    }
    std::string vendor;
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "vendor", p, Presence::kRequired, &vendor));
    const std::optional<GpuVendor> parsed_vendor = ParseGpuVendor(vendor);
    if (!parsed_vendor) return Expected(Child(p, "vendor"), "\"nvidia\" or \"amd\"", e["vendor"]);
    g.vendor = *parsed_vendor;
    TOPOSCHED_RETURN_IF_ERROR(ReadHexId(e, "vendorId", p, &g.vendor_id));
    TOPOSCHED_RETURN_IF_ERROR(ReadHexId(e, "deviceId", p, &g.device_id));
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "model", p, Presence::kOptional, &g.model));
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "uuid", p, Presence::kOptional, &g.uuid));
    TOPOSCHED_RETURN_IF_ERROR(ReadUint64(e, "memoryMiB", p, &g.memory_mib));
    TOPOSCHED_RETURN_IF_ERROR(ReadLocalityFields(e, p, &g.numa, &g.package));
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "cpus", p, Presence::kOptional, &g.cpus));
    TOPOSCHED_RETURN_IF_ERROR(ReadParent(e, p, pcie_ids, nullptr, &g.parent));
    TOPOSCHED_RETURN_IF_ERROR(ReadLinkFields(e, p, &g.link_gbps, &g.link_width));
    TOPOSCHED_RETURN_IF_ERROR(DecodePeers(e, p, g.index, gpu_count, &g.peers));
    t->gpus.push_back(std::move(g));
  }
  return Status::Ok();
}

Status DecodeNics(const json& status, const std::string& path,
                  const std::unordered_map<std::string, int>& pcie_ids, NodeTopology* t) {
  const json* arr = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(ReadArray(status, "nics", path, Presence::kRequired, &arr));
  const std::string arr_path = Child(path, "nics");
  std::set<std::string> names;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const json& e = (*arr)[i];
    const std::string p = Element(arr_path, i);
    if (!e.is_object()) return Expected(p, "an object", e);
    Nic n;
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "name", p, Presence::kRequired, &n.name));
    std::string bus_id;
    const json* bus_id_value = nullptr;
    TOPOSCHED_RETURN_IF_ERROR(Field(e, "pciBusId", p, Presence::kOptional, &bus_id_value));
    if (bus_id_value != nullptr) {
      TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "pciBusId", p, Presence::kRequired, &bus_id));
      n.pci_bus_id = NormalizePciBusId(bus_id);
      if (n.pci_bus_id.empty()) {
        return Expected(Child(p, "pciBusId"), "a PCI bus id like 0000:4e:00.0", *bus_id_value);
      }
    }
    // DisplayName() must name the NIC in matrix legends.
    if (n.name.empty() && n.pci_bus_id.empty()) {
      return Error(Child(p, "name") + ": must not be empty when there is no pciBusId");
    }
    if (!n.name.empty() && !names.insert(n.name).second) {
      return Error(Child(p, "name") + ": duplicate NIC name " + Quote(n.name));
    }
    const json* netdevs = nullptr;
    TOPOSCHED_RETURN_IF_ERROR(ReadArray(e, "netdevs", p, Presence::kOptional, &netdevs));
    if (netdevs != nullptr) {
      for (std::size_t k = 0; k < netdevs->size(); ++k) {
        const json& d = (*netdevs)[k];
        if (!d.is_string() || d.get_ref<const std::string&>().empty()) {
          return Expected(Element(Child(p, "netdevs"), k), "a non-empty interface name", d);
        }
        n.netdevs.push_back(d.get<std::string>());
      }
    }
    TOPOSCHED_RETURN_IF_ERROR(ReadBool(e, "rdma", p, Presence::kRequired, &n.rdma));
    std::string kind;
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "kind", p, Presence::kOptional, &kind));
    if (e.contains("kind")) {
      const std::optional<NicKind> parsed_kind = ParseNicKind(kind);
      if (!parsed_kind) {
        return Expected(Child(p, "kind"),
                        "one of infiniband, roce, efa, omnipath, slingshot, ethernet, unknown", e["kind"]);
      }
      n.kind = *parsed_kind;
    }
    TOPOSCHED_RETURN_IF_ERROR(ReadHexId(e, "vendorId", p, &n.vendor_id));
    TOPOSCHED_RETURN_IF_ERROR(ReadHexId(e, "deviceId", p, &n.device_id));
    TOPOSCHED_RETURN_IF_ERROR(ReadUint64(e, "linkRateMbps", p, &n.link_rate_mbps));
    TOPOSCHED_RETURN_IF_ERROR(ReadLocalityFields(e, p, &n.numa, &n.package));
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "cpus", p, Presence::kOptional, &n.cpus));
    TOPOSCHED_RETURN_IF_ERROR(ReadParent(e, p, pcie_ids, nullptr, &n.parent));
    TOPOSCHED_RETURN_IF_ERROR(ReadLinkFields(e, p, &n.link_gbps, &n.link_width));
    TOPOSCHED_RETURN_IF_ERROR(ReadString(e, "rail", p, Presence::kOptional, &n.rail));
    t->nics.push_back(std::move(n));
  }
  return Status::Ok();
}

// What a matrix may hold: gpuGpu and nicNic are square with "X" exactly on the diagonal;
// NVLink/xGMI cells join two GPUs only.
enum class MatrixKind { kGpuGpu, kGpuNic, kNicNic };

Status DecodeMatrix(const json& links, const char* key, const std::string& path, MatrixKind kind, int rows,
                    int cols, LinkMatrix* out) {
  const json* m = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(Field(links, key, path, Presence::kRequired, &m));
  const std::string m_path = Child(path, key);
  if (!m->is_array()) return Expected(m_path, "an array of rows", *m);
  if (m->size() != static_cast<std::size_t>(rows)) {
    return Error(m_path + ": expected " + std::to_string(rows) + " rows, got " + std::to_string(m->size()));
  }
  out->rows = rows;
  out->cols = cols;
  out->cells.clear();
  out->cells.reserve(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  const bool square = kind != MatrixKind::kGpuNic;
  for (int r = 0; r < rows; ++r) {
    const json& row = (*m)[static_cast<std::size_t>(r)];
    const std::string row_path = Element(m_path, static_cast<std::size_t>(r));
    if (!row.is_array()) return Expected(row_path, "an array of link tokens", row);
    if (row.size() != static_cast<std::size_t>(cols)) {
      return Error(row_path + ": expected " + std::to_string(cols) + " columns, got " +
                   std::to_string(row.size()));
    }
    for (int c = 0; c < cols; ++c) {
      const json& cell = row[static_cast<std::size_t>(c)];
      const std::string cell_path = Element(row_path, static_cast<std::size_t>(c));
      if (!cell.is_string()) return Expected(cell_path, "a link token", cell);
      const std::optional<Link> link = Link::ParseToken(cell.get_ref<const std::string&>());
      if (!link) {
        return Expected(cell_path, "a link token (X, NV#, XGMI, PIX, PXB, PHB, NODE or SYS)", cell);
      }
      const bool diagonal = square && r == c;
      if (diagonal && link->cls != LinkClass::kSelf) {
        return Expected(cell_path, "\"X\" on the diagonal", cell);
      }
      if (!diagonal && link->cls == LinkClass::kSelf) {
        return Error(cell_path + ": \"X\" is allowed only on the diagonal of a square matrix");
      }
      if (kind != MatrixKind::kGpuGpu && link->cls == LinkClass::kNV) {
        return Error(cell_path + ": " + Quote(cell.get_ref<const std::string&>()) + " joins GPUs only");
      }
      out->cells.push_back(*link);
    }
  }
  if (square) {
    // A path has one class whichever end it is read from; NV# counts may differ per direction.
    for (int r = 0; r < rows; ++r) {
      for (int c = r + 1; c < cols; ++c) {
        if (out->at(r, c).cls != out->at(c, r).cls) {
          return Error(Element(Element(m_path, static_cast<std::size_t>(r)), static_cast<std::size_t>(c)) +
                       ": " + Quote(out->at(r, c).Token()) + " but [" + std::to_string(c) + "][" +
                       std::to_string(r) + "] is " + Quote(out->at(c, r).Token()) +
                       " (the matrix must be symmetric)");
        }
      }
    }
  }
  return Status::Ok();
}

Status DecodeStatus(const json& status, NodeTopology* t) {
  const std::string path = "status";
  const json* v = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(Field(status, "schemaVersion", path, Presence::kRequired, &v));
  if (!v->is_number_integer()) return Expected(Child(path, "schemaVersion"), "an integer", *v);
  if (v->is_number_unsigned() ? v->get<std::uint64_t>() != kTopologySchemaVersion
                              : v->get<std::int64_t>() != kTopologySchemaVersion) {
    return Error(Child(path, "schemaVersion") + ": unsupported schemaVersion " + v->dump() +
                 " (this build reads " + std::to_string(kTopologySchemaVersion) + ")");
  }

  std::string source;
  TOPOSCHED_RETURN_IF_ERROR(ReadString(status, "source", path, Presence::kRequired, &source));
  const std::optional<TopologySource> parsed_source = ParseTopologySource(source);
  if (!parsed_source) {
    return Expected(Child(path, "source"), "one of hwloc, hwloc-xml, nccl-xml, synthetic", status["source"]);
  }
  t->source = *parsed_source;
  TOPOSCHED_RETURN_IF_ERROR(ReadString(status, "sourceDetail", path, Presence::kOptional, &t->source_detail));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(status, "agentVersion", path, Presence::kOptional, &t->agent_version));
  // fingerprint, switchCount and rdmaNicCount are derived values; they are recomputed from the
  // decoded topology, never trusted, so a hand-edited document need not update them.

  TOPOSCHED_RETURN_IF_ERROR(DecodeNumaNodes(status, path, t));
  std::unordered_map<std::string, int> pcie_ids;
  TOPOSCHED_RETURN_IF_ERROR(DecodePcie(status, path, t, &pcie_ids));
  TOPOSCHED_RETURN_IF_ERROR(DecodeGpus(status, path, pcie_ids, t));
  TOPOSCHED_RETURN_IF_ERROR(DecodeNics(status, path, pcie_ids, t));

  // The matrices are read as written, not re-derived: they are what the writer measured or
  // computed, and the scheduler must see the same cells the agent published.
  const json* links = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(ReadObject(status, "links", path, &links));
  const std::string links_path = Child(path, "links");
  const int ng = static_cast<int>(t->gpus.size());
  const int nn = static_cast<int>(t->nics.size());
  TOPOSCHED_RETURN_IF_ERROR(
      DecodeMatrix(*links, "gpuGpu", links_path, MatrixKind::kGpuGpu, ng, ng, &t->gpu_gpu));
  TOPOSCHED_RETURN_IF_ERROR(
      DecodeMatrix(*links, "gpuNic", links_path, MatrixKind::kGpuNic, ng, nn, &t->gpu_nic));
  TOPOSCHED_RETURN_IF_ERROR(
      DecodeMatrix(*links, "nicNic", links_path, MatrixKind::kNicNic, nn, nn, &t->nic_nic));
  return Status::Ok();
}

Status DecodeDocument(const json& doc, NodeTopology* t) {
  if (!doc.is_object()) return Expected("top level", "a JSON object", doc);
  std::string api_version, kind;
  TOPOSCHED_RETURN_IF_ERROR(ReadString(doc, "apiVersion", "", Presence::kRequired, &api_version));
  if (api_version != kTopologyApiVersion) {
    return Expected("apiVersion", "\"" + std::string(kTopologyApiVersion) + "\"", doc["apiVersion"]);
  }
  TOPOSCHED_RETURN_IF_ERROR(ReadString(doc, "kind", "", Presence::kRequired, &kind));
  if (kind != kTopologyKind) {
    return Expected("kind", "\"" + std::string(kTopologyKind) + "\"", doc["kind"]);
  }
  const json* metadata = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(ReadObject(doc, "metadata", "", &metadata));
  TOPOSCHED_RETURN_IF_ERROR(ReadString(*metadata, "name", "metadata", Presence::kRequired, &t->node_name));
  if (t->node_name.empty() || t->node_name.size() > kMaxNodeNameLength) {
    return Expected("metadata.name", "a node name of 1 to 253 characters", (*metadata)["name"]);
  }
  const json* status = nullptr;
  TOPOSCHED_RETURN_IF_ERROR(ReadObject(doc, "status", "", &status));
  return DecodeStatus(*status, t);
}

Result<NodeTopology> Decode(std::string_view text) {
  if (text.size() > kMaxTopologyJsonBytes) {
    return Error("document is " + std::to_string(text.size()) + " bytes, over the limit of " +
                 std::to_string(kMaxTopologyJsonBytes) + " bytes");
  }
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return Error("not valid JSON: the document is empty");
  }
  const Shape shape = ScanShape(text);
  if (shape.max_depth > kMaxNestingDepth) {
    return Error("not valid JSON: nested deeper than " + std::to_string(kMaxNestingDepth) + " levels");
  }
  if (shape.values > kMaxJsonValues) {
    return Error("document has more than " + std::to_string(kMaxJsonValues) +
                 " JSON values; a NodeTopology of any real node has far fewer");
  }
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return Error("not valid JSON (byte " + std::to_string(e.byte) + "): " + StripExceptionTag(e.what()));
  } catch (const json::exception& e) {
    // E.g. out_of_range for a number literal too large for a double.
    return Error("not valid JSON: " + StripExceptionTag(e.what()));
  }
  NodeTopology t;
  TOPOSCHED_RETURN_IF_ERROR(DecodeDocument(doc, &t));
  return t;
}

}  // namespace

std::string EncodeTopologyJson(const NodeTopology& topology, int indent) {
  json doc = {{"apiVersion", kTopologyApiVersion},
              {"kind", kTopologyKind},
              {"metadata", {{"name", topology.node_name}}},
              {"status", EncodeStatus(topology)}};
  // Strings come from hardware and files (model names, hostnames); invalid UTF-8 is replaced
  // with U+FFFD rather than thrown on, since the encoder cannot report errors.
  return doc.dump(indent < 0 ? -1 : indent, ' ', false, json::error_handler_t::replace);
}

Result<NodeTopology> DecodeTopologyJson(std::string_view text) {
  // The readers check types before every access, so nothing below should throw; this is the
  // backstop that keeps the codec's no-exceptions promise (e.g. for std::bad_alloc).
  try {
    Result<NodeTopology> t = Decode(text);
    // An object an older agent wrote may name one UUID for several GPUs, or a placeholder.
    if (t.ok()) DropUnusableGpuUuids(*t);
    return t;
  } catch (const std::exception& e) {
    return Error(std::string("cannot decode topology JSON: ") + e.what());
  }
}

}  // namespace toposched
