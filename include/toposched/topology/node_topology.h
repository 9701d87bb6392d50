#pragma once
// NodeTopology: one node's NUMA/PCIe/GPU/NIC topology as a flattened, versioned value.
//
// Written by the agent (from hwloc, an hwloc XML, an NCCL/RCCL XML or the synthetic generator),
// read by the extender, which never links hwloc. The JSON encoding is documented in
// docs/topology-model.md; this header is its C++ form. Every source fills the tree (pcie, numa,
// devices with their parents and locality) and then calls DeriveLinks(), so the link classes of
// all sources come from one rule set.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace toposched {

inline constexpr int kTopologySchemaVersion = 1;
inline constexpr std::string_view kTopologyApiVersion = "toposched.io/v1alpha1";
inline constexpr std::string_view kTopologyKind = "NodeTopology";

// Link classes, best first, as `nvidia-smi topo -m` names them. kSelf is the diagonal ("X").
// kNV covers NVLink (printed NV#, # = bonded links, direct or through NVSwitches) and AMD xGMI
// (printed XGMI as rocm-smi does); Link::fabric says which.
enum class LinkClass : std::uint8_t { kSelf, kNV, kPIX, kPXB, kPHB, kNODE, kSYS };

enum class Fabric : std::uint8_t { kNone, kNvlink, kXgmi };

// Where a topology came from.
enum class TopologySource : std::uint8_t { kHwloc, kHwlocXml, kNcclXml, kSynthetic };

std::string_view ToString(LinkClass c);  // "X", "NV", "PIX", ...
std::string_view ToString(TopologySource s);
std::optional<LinkClass> ParseLinkClass(std::string_view s);  // PCIe classes and "X" only
std::optional<TopologySource> ParseTopologySource(std::string_view s);

// One cell of a link matrix.
struct Link {
  LinkClass cls = LinkClass::kSYS;
  Fabric fabric = Fabric::kNone;  // set only for kNV
  int count = 0;                  // bonded NVLinks for Fabric::kNvlink; 0 for xGMI (see peers)

  // The printed token: "X", "NV12", "XGMI", "PIX", ... ParseToken is its inverse.
  std::string Token() const;
  static std::optional<Link> ParseToken(std::string_view token);
  bool operator==(const Link&) const = default;
};

struct NumaNode {
  int id = 0;                      // OS index (Linux NUMA node number)
  int package = -1;                // OS index of the package (socket), -1 when unknown
  std::string cpus;                // Linux cpulist, e.g. "0-23,48-71"; empty when unknown
  std::uint64_t memory_bytes = 0;  // 0 when unknown
  bool operator==(const NumaNode&) const = default;
};

enum class PcieKind : std::uint8_t { kHostBridge, kBridge };

// A host bridge (root complex) or a PCI-to-PCI bridge of the tree that matters: only bridges on
// the path of a GPU or a NIC are kept.
struct PcieNode {
  std::string id;  // PCI bus id "dddd:bb:dd.f" of a bridge; "hostbridge:N" for host bridges
  PcieKind kind = PcieKind::kBridge;
  int parent = -1;         // index into NodeTopology::pcie; -1 when attached to the CPU side
  bool is_switch = false;  // upstream port of a PCIe switch (a switch group's root)
  int numa = -1;           // locality of the subtree; -1 when unknown
  int package = -1;
  std::uint16_t vendor_id = 0, device_id = 0;  // 0 when unknown (host bridges, fake bridges)
  double link_gbps = 0;                        // GB/s per direction of the upstream link; 0 when unknown
  int link_width = 0;                          // lanes; 0 when unknown
  bool operator==(const PcieNode&) const = default;
};

enum class GpuVendor : std::uint8_t { kNvidia, kAmd };
inline constexpr std::size_t kGpuVendors = 2;
constexpr std::size_t VendorIndex(GpuVendor v) {
  return static_cast<std::size_t>(v);
}
std::string_view ToString(GpuVendor v);

// A GPU's direct or switch-mediated high-speed link to another GPU.
struct GpuPeer {
  int gpu = 0;  // peer GPU index
  Fabric fabric = Fabric::kNvlink;
  int links = 0;                     // bonded links (NV#); 0 when the source gives bandwidth only
  std::uint64_t bandwidth_mbps = 0;  // MB/s per direction; 0 when unknown
  bool via_switch = false;           // through NVSwitches
  bool operator==(const GpuPeer&) const = default;
};

// How HAMi's AMD device plugin registered a card (hami.io/node-amd-register): what HAMi's AMD
// records name it by and count it in (docs/operations.md, "HAMi's records").
struct HamiAmdCard {
  std::string id;               // "id": the card's AMD SMI UUID, the name HAMi's records use
  std::string type;             // "type" as HAMi's records carry it (its product name, or "AMD")
  std::int64_t memory_mib = 0;  // "devmem"
  int compute_units = 0;        // "devcore": the card's compute units (CUs), 0 when not given
  int cu_per_wgp = 1;           // custominfo.cuPerWGP: CUs the device plugin hands out together
  bool operator==(const HamiAmdCard&) const = default;
};

struct Gpu {
  int index = 0;           // position in PCI bus order, the order nvidia-smi uses
  std::string pci_bus_id;  // "dddd:bb:dd.f", lower case
  GpuVendor vendor = GpuVendor::kNvidia;
  std::uint16_t vendor_id = 0, device_id = 0;
  std::string model;             // e.g. "Tesla V100-SXM3-32GB-H"; empty when unknown
  std::string uuid;              // NVIDIA/AMD UUID when the source has it
  std::uint64_t memory_mib = 0;  // 0 when unknown
  int numa = -1;                 // local NUMA node, -1 when unknown or ambiguous
  int package = -1;
  std::string cpus;  // local CPUs (cpulist); empty when unknown
  int parent = -1;   // index into NodeTopology::pcie; -1 when attached to the CPU side
  double link_gbps = 0;
  int link_width = 0;
  std::vector<GpuPeer> peers;  // sorted by peer index
  // Non-empty: the card must not be placed on, and why (HAMi's registration says it is unhealthy
  // or in MIG mode, or, for AMD, does not register it). Set by the extender from the node's
  // state, not by discovery; the engine counts such a card as the node's but never free.
  std::string unusable;
  // Non-empty: nothing on the node enforces a share of this card, and why (no HAMi device plugin
  // registered it, and the node is not labelled as running another plugin that enforces shares):
  // the stock device plugin would hand a shared pod the whole card, so only whole-card requests
  // are placed on it. Set by the extender's Kubernetes source from the node's state, like
  // `unusable`; empty elsewhere (the simulator and `place` model HAMi's device plugin on every
  // node).
  std::string shares_unenforced;
  // Set, like `unusable`, by the extender from HAMi's AMD registration; absent without one. Not in
  // the fingerprint: placement never reads it, only the records a bind writes for HAMi.
  std::optional<HamiAmdCard> hami_amd;
  bool operator==(const Gpu&) const = default;
};

// What kind of network a NIC serves; informational, `rdma` decides scheduling.
enum class NicKind : std::uint8_t { kInfiniband, kRoce, kEfa, kOmniPath, kSlingshot, kEthernet, kUnknown };
std::string_view ToString(NicKind k);
std::optional<NicKind> ParseNicKind(std::string_view s);

struct Nic {
  // RDMA device name (mlx5_0, rdmap16s27, bnxt_re0, hfi1_0) when there is one, else the network
  // interface name (eth0, hsi0), else empty (the source gives only a PCI address).
  std::string name;
  std::string pci_bus_id;            // empty when the source gives none (e.g. NCCL <nic> under <cpu>)
  std::vector<std::string> netdevs;  // network interfaces of this function (ib0, ens1f0np0, ...)
  bool rdma = false;                 // usable for RDMA / GPUDirect by NCCL's network transport
  NicKind kind = NicKind::kUnknown;
  std::uint16_t vendor_id = 0, device_id = 0;
  std::uint64_t link_rate_mbps = 0;  // Mb/s, 0 when unknown
  int numa = -1;
  int package = -1;
  std::string cpus;
  int parent = -1;
  double link_gbps = 0;
  int link_width = 0;
  std::string rail;  // rail label when known; empty otherwise

  // How the matrix legend names it: the name, or the PCI bus id when there is no name.
  const std::string& DisplayName() const { return name.empty() ? pci_bus_id : name; }
  bool operator==(const Nic&) const = default;
};

// Row-major square or rectangular matrix of links.
struct LinkMatrix {
  int rows = 0, cols = 0;
  std::vector<Link> cells;
  const Link& at(int r, int c) const { return cells[Offset(r, c)]; }
  Link& at(int r, int c) { return cells[Offset(r, c)]; }
  std::size_t Offset(int r, int c) const {
    return static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c);
  }
  bool operator==(const LinkMatrix&) const = default;
};

struct NodeTopology {
  std::string node_name;  // metadata.name: the Kubernetes node name
  TopologySource source = TopologySource::kSynthetic;
  std::string source_detail;  // file name, synthetic preset or hostname; informational
  std::string agent_version;
  std::vector<NumaNode> numa_nodes;  // sorted by id; only nodes with CPUs
  std::vector<PcieNode> pcie;        // parents before children
  std::vector<Gpu> gpus;             // PCI bus order; gpus[i].index == i
  // RDMA NICs first, in natural name order (mlx5_2 < mlx5_10; unnamed last, by bus id), then the
  // other NICs; the matrix columns NIC0.. are the RDMA NICs in this order.
  std::vector<Nic> nics;
  LinkMatrix gpu_gpu, gpu_nic, nic_nic;  // filled by DeriveLinks
  bool operator==(const NodeTopology&) const = default;

  int RdmaNicCount() const;
  // Index of the PCIe switch group (outermost switch upstream port) a device sits under, or -1.
  int SwitchOf(int pcie_parent) const;
  int SwitchCount() const;
  // Stable 64-bit FNV-1a hash of the hardware description (everything but node name, source,
  // agent version and GPU UUIDs), as 16 hex digits: two nodes with equal fingerprints are
  // interchangeable for placement. UUIDs name devices, they do not shape a placement, and every
  // real node's are its own (NVML, HAMi's registration): with them no two nodes would ever share
  // a fingerprint. A request that names UUIDs (PlacementRequest::NamesGpuUuids) is keyed with
  // the node's UUIDs wherever results are shared (PlacementMemo, the extender's node classes).
  std::string Fingerprint() const;
};

// Class of the PCIe/CPU path between two devices given their parent (index into pcie, -1 for
// none) and NUMA node (-1 unknown). See docs/topology-model.md for the rules.
LinkClass ClassifyPath(const NodeTopology& t, int parent_a, int numa_a, int parent_b, int numa_b);

// Sorts GPUs into PCI bus order (renumbering peers) and NICs into matrix order, then fills
// gpu_gpu, gpu_nic and nic_nic. Sources call it last.
void DeriveLinks(NodeTopology& t);

// GPU UUIDs that identify nothing are cleared (treated as unknown): placeholders (nothing but
// zeros after the "GPU-"/"MIG-" prefix, as anonymised exports write them) and any UUID that more
// than one GPU of the node carries. A UUID names a device to HAMi's device plugin and in
// allocation annotations: one name for several GPUs would hand the same card to several pods.
// DeriveLinks calls it; so do the JSON decoder and the sources that add UUIDs after it (NVML,
// HAMi's registration). Returns how many GPUs lost their UUID.
int DropUnusableGpuUuids(NodeTopology& t);
bool IsPlaceholderGpuUuid(std::string_view uuid);

// Natural order of names: "mlx5_2" < "mlx5_10".
bool NaturalLess(std::string_view a, std::string_view b);

// Turns `s` into a valid Kubernetes object name (DNS subdomain: lower case alphanumerics, '-'
// and '.', alphanumeric at both ends, at most 253 characters); "node" if nothing is left.
// Used to name topologies read from files that carry no host name.
std::string ToKubernetesName(std::string_view s);

// Normalizes a PCI bus id to "dddd:bb:dd.f" lower case (NVML's 8-digit domains shortened, a
// missing domain taken as 0000). Returns empty when `id` is not a bus id.
std::string NormalizePciBusId(std::string_view id);

}  // namespace toposched
