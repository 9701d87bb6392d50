// A stand-in for libnvidia-ml.so.1 in tests: the NVML entry points that src/agent/nvml_links.cc
// loads, with the same C ABI (declared here as nvml_links.cc declares them, mirroring nvml.h),
// answering from a scenario file instead of a driver. No GPU is needed, and a test can describe
// an HGX board, a POWER9 host or a broken driver.
//
// The scenario is the file named by FAKE_NVML_CONFIG, read by nvmlInit_v2, one item a line:
//   gpu <bus-id> <uuid> <memory-MiB> <name...>      a device, in NVML index order
//   link <bus-id> <remote-bus-id> <remote-pciDeviceId-hex> [version]
//                                                   an active NVLink of GPU <bus-id>; links get
//                                                   indices 0, 1, ... in file order per GPU
//   fail-init                                       nvmlInit_v2 fails (driver not loaded)
// Bus ids are NVML's ("00000000:18:00.0", 8-digit domain). Blank lines and '#' lines are
// skipped. Without the variable or the file, or with a malformed line, nvmlInit_v2 fails.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
struct nvmlDevice_st;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef int nvmlReturn_t;

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;
  unsigned pciSubSystemId;
  char busId[32];
};

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
}

namespace {

constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kUninitialized = 1;
constexpr nvmlReturn_t kInvalidArgument = 2;
constexpr nvmlReturn_t kNotSupported = 3;
constexpr nvmlReturn_t kInsufficientSize = 7;
constexpr nvmlReturn_t kDriverNotLoaded = 9;
constexpr nvmlReturn_t kUnknown = 999;
constexpr unsigned kMaxLinks = 18;
constexpr unsigned kGpuPciDeviceId = 0x233010de;  // H100 SXM5

struct FakeLink {
  std::string remote;
  unsigned remote_pci_device_id = 0;
  unsigned version = 0;  // 0: nvmlDeviceGetNvLinkVersion says "not supported"
};

}  // namespace

struct nvmlDevice_st {
  std::string bus_id;
  std::string uuid;
  unsigned long long memory_mib = 0;
  std::string name;
  std::vector<FakeLink> links;
};

namespace {

// Owned here and freed by nvmlShutdown, so that a leak checker sees nothing once the caller
// has shut NVML down.
std::vector<std::unique_ptr<nvmlDevice_st>>& Devices() {
  static std::vector<std::unique_ptr<nvmlDevice_st>> devices;
  return devices;
}
bool initialized = false;

nvmlDevice_st* FindDevice(const std::string& bus_id) {
  for (auto& d : Devices()) {
    if (d->bus_id == bus_id) return d.get();
  }
  return nullptr;
}

void FillPci(const std::string& bus_id, unsigned pci_device_id, nvmlPciInfo_t* pci) {
  std::memset(pci, 0, sizeof *pci);
  std::snprintf(pci->busId, sizeof pci->busId, "%s", bus_id.c_str());
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) == 4) {
    pci->domain = domain;
    pci->bus = bus;
    pci->device = device;
    std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.0", domain & 0xffffu,
                  bus & 0xffu, device & 0xffu);
  }
  pci->pciDeviceId = pci_device_id;
}

nvmlReturn_t CopyString(const std::string& value, char* out, unsigned length) {
  if (out == nullptr) return kInvalidArgument;
  if (value.size() + 1 > length) return kInsufficientSize;
  std::memcpy(out, value.c_str(), value.size() + 1);
  return kSuccess;
}

nvmlReturn_t Load(const char* path) {
  std::ifstream in(path);
  if (!in) return kUninitialized;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind;
    if (!(fields >> kind) || kind[0] == '#') continue;
    if (kind == "fail-init") return kDriverNotLoaded;
    if (kind == "gpu") {
      auto d = std::make_unique<nvmlDevice_st>();
      if (!(fields >> d->bus_id >> d->uuid >> d->memory_mib)) return kUnknown;
      std::getline(fields >> std::ws, d->name);
      Devices().push_back(std::move(d));
    } else if (kind == "link") {
      std::string bus_id, device_id;
      FakeLink link;
      if (!(fields >> bus_id >> link.remote >> device_id)) return kUnknown;
      link.remote_pci_device_id = static_cast<unsigned>(std::stoul(device_id, nullptr, 16));
      fields >> link.version;  // optional
      nvmlDevice_st* d = FindDevice(bus_id);
      if (d == nullptr || d->links.size() >= kMaxLinks) return kUnknown;
      d->links.push_back(link);
    } else {
      return kUnknown;
    }
  }
  return kSuccess;
}

void Reset() {
  Devices().clear();
  initialized = false;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2() {
  Reset();
  const char* path = std::getenv("FAKE_NVML_CONFIG");
  if (path == nullptr) return kUninitialized;
  nvmlReturn_t rc = kUnknown;
  try {
    rc = Load(path);
  } catch (...) {  // std::stoul on a bad number: a malformed scenario, not a crash
    rc = kUnknown;
  }
  if (rc != kSuccess) {
    Reset();
    return rc;
  }
  initialized = true;
  return kSuccess;
}

nvmlReturn_t nvmlShutdown() {
  if (!initialized) return kUninitialized;
  Reset();
  return kSuccess;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case kSuccess:
      return "Success";
    case kUninitialized:
      return "Uninitialized";
    case kInvalidArgument:
      return "Invalid Argument";
    case kNotSupported:
      return "Not Supported";
    case kInsufficientSize:
      return "Insufficient Size";
    case kDriverNotLoaded:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (!initialized) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  *count = static_cast<unsigned>(Devices().size());
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (!initialized) return kUninitialized;
  if (device == nullptr || index >= Devices().size()) return kInvalidArgument;
  *device = Devices()[index].get();
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  if (!initialized) return kUninitialized;
  if (device == nullptr || pci == nullptr) return kInvalidArgument;
  FillPci(device->bus_id, kGpuPciDeviceId, pci);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, int* state) {
  if (!initialized) return kUninitialized;
  if (device == nullptr || state == nullptr || link >= kMaxLinks) return kInvalidArgument;
  *state = link < device->links.size() ? 1 : 0;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned link, nvmlPciInfo_t* pci) {
  if (!initialized) return kUninitialized;
  if (device == nullptr || pci == nullptr || link >= device->links.size()) return kInvalidArgument;
  const FakeLink& l = device->links[link];
  FillPci(l.remote, l.remote_pci_device_id, pci);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned link, unsigned* version) {
  if (!initialized) return kUninitialized;
  if (device == nullptr || version == nullptr || link >= device->links.size()) return kInvalidArgument;
  if (device->links[link].version == 0) return kNotSupported;
  *version = device->links[link].version;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  if (!initialized) return kUninitialized;
  if (device == nullptr) return kInvalidArgument;
  return CopyString(device->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  if (!initialized) return kUninitialized;
  if (device == nullptr) return kInvalidArgument;
  return CopyString(device->name, name, length);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (!initialized) return kUninitialized;
  if (device == nullptr || memory == nullptr) return kInvalidArgument;
  memory->total = device->memory_mib << 20;
  memory->free = memory->total;
  memory->used = 0;
  return kSuccess;
}

}  // extern "C"
