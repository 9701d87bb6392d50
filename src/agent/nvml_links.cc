// NVLink and GPU identity from NVML, opened with dlopen (see nvml_links.h for why).

#include "nvml_links.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace toposched {
namespace {

// The slice of the NVML C ABI used here. The names, layouts and values mirror the declarations
// of NVIDIA's nvml.h (NVML API reference, driver r450 and later) so that they can be checked
// against it; the header itself is not used, so nothing NVIDIA ships is needed to build.
namespace nvml {

typedef struct nvmlDevice_st* nvmlDevice_t;
typedef int nvmlReturn_t;  // an enum in nvml.h: int-sized

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr int NVML_FEATURE_ENABLED = 1;  // nvmlEnableState_t
constexpr unsigned NVML_NVLINK_MAX_LINKS = 18;

// nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 and nvmlDeviceGetNvLinkRemotePciInfo_v2 fill it.
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;  // device id in the high 16 bits, vendor id in the low 16 bits
  unsigned pciSubSystemId;
  char busId[32];  // "00000000:18:00.0": 8-digit domain
};

struct nvmlMemory_t {
  unsigned long long total;  // bytes
  unsigned long long free;
  unsigned long long used;
};

using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using ErrorStringFn = const char* (*)(nvmlReturn_t);
using GetCountFn = nvmlReturn_t (*)(unsigned*);
using GetHandleByIndexFn = nvmlReturn_t (*)(unsigned, nvmlDevice_t*);
using GetPciInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);
using GetNvLinkStateFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned, int*);
using GetNvLinkRemotePciInfoFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlPciInfo_t*);
using GetNvLinkVersionFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned, unsigned*);
using GetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);
using GetMemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);

}  // namespace nvml

constexpr unsigned kMaxDevices = 256;   // a corrupt count must not drive the loops
constexpr unsigned kStringBuffer = 96;  // NVML's UUID and name buffer sizes are <= 96
constexpr std::uint16_t kNvidiaVendorId = 0x10de;

struct LibraryCloser {
  void operator()(void* handle) const { dlclose(handle); }
};
using LibraryPtr = std::unique_ptr<void, LibraryCloser>;

// The resolved entry points; the optional ones are null when this driver lacks them.
struct Api {
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;  // optional
  nvml::GetCountFn get_count = nullptr;
  nvml::GetHandleByIndexFn get_handle = nullptr;
  nvml::GetPciInfoFn get_pci_info = nullptr;
  nvml::GetNvLinkStateFn get_nvlink_state = nullptr;
  nvml::GetNvLinkRemotePciInfoFn get_nvlink_remote_pci = nullptr;
  nvml::GetNvLinkVersionFn get_nvlink_version = nullptr;  // optional
  nvml::GetStringFn get_uuid = nullptr;                   // optional
  nvml::GetStringFn get_name = nullptr;                   // optional
  nvml::GetMemoryInfoFn get_memory = nullptr;             // optional
};

// dlsym returns an object pointer; POSIX guarantees it converts to the function's type.
// memcpy instead of a cast keeps -Wpedantic quiet about object-to-function pointer casts.
template <typename Fn>
void Resolve(void* library, const char* name, Fn& out) {
  void* symbol = dlsym(library, name);
  static_assert(sizeof(Fn) == sizeof(symbol));
  std::memcpy(&out, &symbol, sizeof out);
}

Result<Api> ResolveApi(void* library) {
  Api api;
  // Required first, in this order: the first one missing names the problem (a library that is
  // not NVML at all lacks nvmlInit_v2).
  Resolve(library, "nvmlInit_v2", api.init);
  if (api.init == nullptr) return Error("symbol nvmlInit_v2 not found");
  Resolve(library, "nvmlShutdown", api.shutdown);
  if (api.shutdown == nullptr) return Error("symbol nvmlShutdown not found");
  Resolve(library, "nvmlDeviceGetCount_v2", api.get_count);
  if (api.get_count == nullptr) return Error("symbol nvmlDeviceGetCount_v2 not found");
  Resolve(library, "nvmlDeviceGetHandleByIndex_v2", api.get_handle);
  if (api.get_handle == nullptr) return Error("symbol nvmlDeviceGetHandleByIndex_v2 not found");
  Resolve(library, "nvmlDeviceGetPciInfo_v3", api.get_pci_info);
  if (api.get_pci_info == nullptr) return Error("symbol nvmlDeviceGetPciInfo_v3 not found");
  Resolve(library, "nvmlDeviceGetNvLinkState", api.get_nvlink_state);
  if (api.get_nvlink_state == nullptr) return Error("symbol nvmlDeviceGetNvLinkState not found");
  Resolve(library, "nvmlDeviceGetNvLinkRemotePciInfo_v2", api.get_nvlink_remote_pci);
  if (api.get_nvlink_remote_pci == nullptr)
    return Error("symbol nvmlDeviceGetNvLinkRemotePciInfo_v2 not found");
  Resolve(library, "nvmlErrorString", api.error_string);
  Resolve(library, "nvmlDeviceGetNvLinkVersion", api.get_nvlink_version);
  Resolve(library, "nvmlDeviceGetUUID", api.get_uuid);
  Resolve(library, "nvmlDeviceGetName", api.get_name);
  Resolve(library, "nvmlDeviceGetMemoryInfo", api.get_memory);
  return api;
}

std::string ErrorText(const Api& api, nvml::nvmlReturn_t rc) {
  std::string text = "NVML error " + std::to_string(rc);
  if (api.error_string != nullptr) {
    if (const char* s = api.error_string(rc); s != nullptr) text = std::string(s) + " (" + text + ")";
  }
  return text;
}

// nvmlShutdown on every path out once nvmlInit_v2 has succeeded.
class Session {
 public:
  explicit Session(nvml::ShutdownFn shutdown) : shutdown_(shutdown) {}
  ~Session() { shutdown_(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  nvml::ShutdownFn shutdown_;
};

// A fixed-size char field as a string, even when NVML left it without a terminating NUL.
template <std::size_t N>
std::string BoundedString(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

// Normalized "dddd:bb:dd.f" of an NVML PCI record; empty when it holds no usable address.
std::string BusIdOf(const nvml::nvmlPciInfo_t& pci) {
  std::string id = NormalizePciBusId(BoundedString(pci.busId));
  if (!id.empty()) return id;
  // busId is what NVML documents as the address; the numeric fields (function 0, as NVML has
  // no function field) cover a driver that left the string empty.
  if (pci.pciDeviceId == 0 || pci.bus > 0xff || pci.device > 0x1f) return {};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.0", pci.domain, pci.bus, pci.device);
  return NormalizePciBusId(buf);
}

// Per-direction bandwidth of one link, MB/s, from nvmlDeviceGetNvLinkVersion. The value is an
// nvmlNvlinkVersion_t, not the NVLink generation: 1 = NVLink 1.0 (P100), 2 = 2.0 (V100),
// 3 = 2.2, 4 = 3.0, 5 = 3.1 (A100 reports 5), 6 = 4.0 (H100), 7 = 5.0 (B200). A link carries
// 20 GB/s per direction in 1.0, 25 GB/s from 2.0 to 4.0 (later generations halved the lanes
// per link as they doubled the lane rate) and 50 GB/s in 5.0; hwloc's NVML backend uses the same
// table. Anything else is unknown: 0, the link still counts.
std::uint64_t LinkBandwidthMbps(unsigned version) {
  if (version == 1) return 20000;
  if (version >= 2 && version <= 6) return 25000;
  if (version == 7) return 50000;
  return 0;
}

void FillIdentity(const Api& api, nvml::nvmlDevice_t device, Gpu& g) {
  char buf[kStringBuffer];
  if (g.uuid.empty() && api.get_uuid != nullptr) {
    std::memset(buf, 0, sizeof buf);
    if (api.get_uuid(device, buf, sizeof buf) == nvml::NVML_SUCCESS) g.uuid = BoundedString(buf);
  }
  if (g.model.empty() && api.get_name != nullptr) {
    std::memset(buf, 0, sizeof buf);
    if (api.get_name(device, buf, sizeof buf) == nvml::NVML_SUCCESS) g.model = BoundedString(buf);
  }
  if (g.memory_mib == 0 && api.get_memory != nullptr) {
    nvml::nvmlMemory_t memory{};
    if (api.get_memory(device, &memory) == nvml::NVML_SUCCESS) g.memory_mib = memory.total >> 20;
  }
}

}  // namespace

Result<int> AddNvmlInfo(NodeTopology& t, const std::string& library_path) {
  dlerror();  // clear a stale message so that the one below is about this dlopen
  LibraryPtr library(dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (library == nullptr) {
    const char* why = dlerror();
    return Error("cannot load " + library_path + ": " + (why != nullptr ? why : "unknown dlopen error"));
  }
  auto api = ResolveApi(library.get());
  if (!api.ok()) return api.error().WithContext(library_path);
  if (const nvml::nvmlReturn_t rc = api->init(); rc != nvml::NVML_SUCCESS) {
    return Error("nvmlInit_v2 failed: " + ErrorText(*api, rc));
  }
  // Declared after `library`: shuts NVML down before the library is closed.
  const Session session(api->shutdown);
  unsigned count = 0;
  if (const nvml::nvmlReturn_t rc = api->get_count(&count); rc != nvml::NVML_SUCCESS) {
    return Error("nvmlDeviceGetCount_v2 failed: " + ErrorText(*api, rc));
  }
  count = std::min(count, kMaxDevices);

  const int ngpus = static_cast<int>(t.gpus.size());
  std::unordered_map<std::string, int> gpu_by_bus;
  for (int i = 0; i < ngpus; ++i) {
    const std::string id = NormalizePciBusId(t.gpus[static_cast<std::size_t>(i)].pci_bus_id);
    if (!id.empty()) gpu_by_bus.emplace(id, i);
  }

  // Every NVML device first: a link to an NVML GPU that the topology lacks (hidden from hwloc)
  // must not be taken for a link to an NVSwitch, which has the same vendor id.
  struct Device {
    nvml::nvmlDevice_t handle = nullptr;
    int gpu = -1;  // index into t.gpus, -1 when the topology does not have it
  };
  std::vector<Device> devices;
  std::set<std::string> nvml_bus_ids;
  for (unsigned i = 0; i < count; ++i) {
    Device d;
    nvml::nvmlPciInfo_t pci{};
    if (api->get_handle(i, &d.handle) != nvml::NVML_SUCCESS || d.handle == nullptr) continue;
    if (api->get_pci_info(d.handle, &pci) != nvml::NVML_SUCCESS) continue;
    const std::string bus_id = BusIdOf(pci);
    if (bus_id.empty()) continue;
    nvml_bus_ids.insert(bus_id);
    if (auto it = gpu_by_bus.find(bus_id); it != gpu_by_bus.end()) d.gpu = it->second;
    devices.push_back(d);
  }

  // Link counts as each GPU reports its own side.
  std::vector<std::vector<int>> direct(static_cast<std::size_t>(ngpus),
                                       std::vector<int>(static_cast<std::size_t>(ngpus), 0));
  std::vector<int> switch_links(static_cast<std::size_t>(ngpus), 0);
  std::vector<std::uint64_t> link_mbps(static_cast<std::size_t>(ngpus), 0);  // 0: unknown
  std::vector<bool> seen(static_cast<std::size_t>(ngpus), false);
  int matched = 0;
  for (const Device& d : devices) {
    if (d.gpu < 0 || seen[static_cast<std::size_t>(d.gpu)]) continue;
    const auto g = static_cast<std::size_t>(d.gpu);
    seen[g] = true;
    ++matched;
    FillIdentity(*api, d.handle, t.gpus[g]);
    for (unsigned link = 0; link < nvml::NVML_NVLINK_MAX_LINKS; ++link) {
      int state = 0;
      if (api->get_nvlink_state(d.handle, link, &state) != nvml::NVML_SUCCESS) continue;
      if (state != nvml::NVML_FEATURE_ENABLED) continue;
      nvml::nvmlPciInfo_t remote{};
      if (api->get_nvlink_remote_pci(d.handle, link, &remote) != nvml::NVML_SUCCESS) continue;
      const std::string remote_id = BusIdOf(remote);
      if (remote_id.empty()) continue;
      if (auto it = gpu_by_bus.find(remote_id); it != gpu_by_bus.end()) {
        if (it->second == d.gpu) continue;
        ++direct[g][static_cast<std::size_t>(it->second)];
      } else if (nvml_bus_ids.count(remote_id) != 0) {
        continue;  // a GPU outside the topology: no peer to record
      } else if ((remote.pciDeviceId & 0xffffu) == kNvidiaVendorId) {
        ++switch_links[g];  // an NVSwitch
      } else {
        continue;  // a CPU (POWER9's NVLink to the host): not a GPU peer
      }
      unsigned version = 0;
      if (api->get_nvlink_version != nullptr &&
          api->get_nvlink_version(d.handle, link, &version) == nvml::NVML_SUCCESS) {
        // Mixed versions on one GPU do not occur in practice; the slowest is the safe figure.
        const std::uint64_t mbps = LinkBandwidthMbps(version);
        if (mbps != 0 && (link_mbps[g] == 0 || mbps < link_mbps[g])) link_mbps[g] = mbps;
      }
    }
  }

  auto add = [&](int a, int b, int links, bool via_switch) {
    const std::uint64_t ua = link_mbps[static_cast<std::size_t>(a)];
    const std::uint64_t ub = link_mbps[static_cast<std::size_t>(b)];
    const std::uint64_t unit = (ua != 0 && ub != 0) ? std::min(ua, ub) : std::max(ua, ub);
    const std::uint64_t bandwidth = unit * static_cast<std::uint64_t>(links);
    for (const std::pair<int, int>& ends : {std::pair{a, b}, std::pair{b, a}}) {
      // Named copies, not a structured binding: clang before 16 cannot capture one in a lambda.
      const int x = ends.first, y = ends.second;
      auto& peers = t.gpus[static_cast<std::size_t>(x)].peers;
      auto it = std::find_if(peers.begin(), peers.end(), [&](const GpuPeer& p) { return p.gpu == y; });
      const GpuPeer peer{y, Fabric::kNvlink, links, bandwidth, via_switch};
      if (it == peers.end())
        peers.push_back(peer);
      else if (links > it->links)
        *it = peer;
    }
  };
  for (int a = 0; a < ngpus; ++a) {
    for (int b = a + 1; b < ngpus; ++b) {
      const int links = std::max(direct[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)],
                                 direct[static_cast<std::size_t>(b)][static_cast<std::size_t>(a)]);
      if (links > 0) add(a, b, links, false);
    }
  }
  // NVML reports GPU-to-NVSwitch links only, never the switches' trunks, yet all NVSwitches of a
  // node form one fabric (the rule of AddPeers in hwloc_discovery.cc): every pair of
  // switch-attached GPUs is connected, by the smaller of the two GPUs' switch link counts.
  for (int a = 0; a < ngpus; ++a) {
    for (int b = a + 1; b < ngpus; ++b) {
      const int sa = switch_links[static_cast<std::size_t>(a)];
      const int sb = switch_links[static_cast<std::size_t>(b)];
      if (sa > 0 && sb > 0) add(a, b, std::min(sa, sb), true);
    }
  }
  return matched;
}

}  // namespace toposched
