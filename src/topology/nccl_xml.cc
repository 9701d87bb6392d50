// NCCL/RCCL topology XML -> NodeTopology.
//
// The format (`<system version="N">`, NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE) is NCCL's own view of
// the machine: <cpu numaid affinity> holds a tree of <pci busid class ...> elements, bridges nest
// their children, GPUs carry <gpu><nvlink|xgmi target count tclass/></gpu> and NICs carry
// <nic><net name speed gdr/></nic>. Cloud images ship such files because their VMs hide the real
// PCIe tree, so many are hand-written: attributes go missing, switches are fake (ffff:ff:01.0),
// the AWS g5 file lists bare bus ids (not taken as GPUs: nothing says what they are). The reader is lenient
// about what it does not need and strict only where a wrong answer would mislead the scheduler (bus ids of
// GPUs and NICs).
//
// What NCCL does not record, the model leaves unknown: packages (-1), memory (0), host bridges
// (none), GPU models and UUIDs, NVLink bandwidth.

#include "toposched/topology/nccl_xml.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>

#include "toposched/common/text.h"

namespace toposched {
namespace {

namespace pt = boost::property_tree;

// rapidxml (behind Boost.PropertyTree) recurses once per nesting level without a limit, so a
// hostile file could exhaust the stack; real NCCL files nest at most ~10 levels.
constexpr int kMaxDepth = 64;
// Real files hold a few hundred elements; the cap keeps the pairwise link resolution (and the
// memory of a hostile file) bounded.
constexpr int kMaxElementsPerKind = 4096;
// Devices per node. Real nodes have at most a few dozen (64 GPU partitions for 8 MI300X in CPX
// mode); DeriveLinks is quadratic in devices and the NVSwitch peers make it cubic, so a hostile
// file of 4096 switch-attached GPUs would otherwise take a minute.
constexpr std::size_t kMaxGpus = 256;
constexpr std::size_t kMaxNics = 256;
// NV# counts above this are not a real machine (and Link::ParseToken rejects them).
constexpr long long kMaxLinkCount = 1024;
// NCCL writes <net speed> in Mb/s; anything above 10 Tb/s must be in another unit (the RCCL
// MI300A file writes 200000000 for a 200 Gb/s Slingshot NIC, i.e. kb/s).
constexpr std::uint64_t kMaxPlausibleMbps = 10'000'000;

// ---- Scalar parsing. Every attribute is optional text; a value that does not parse is treated
// as absent rather than fatal, because hand-written files get informational fields wrong.

std::optional<std::uint64_t> ParseHex(std::string_view s) {
  s = TrimSpace(s);
  if (s.size() >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  if (s.empty() || s.size() > 16) return std::nullopt;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::uint16_t> ParseId16(std::string_view s) {
  auto v = ParseHex(s);
  if (!v || *v > 0xffff) return std::nullopt;
  return static_cast<std::uint16_t>(*v);
}

// PCI class code as 24 bits (base, sub, prog-if). NCCL writes "0x060400"; a 4-digit "0x0604"
// (base and sub only) is accepted too.
std::optional<std::uint32_t> ParseClass(std::string_view s) {
  std::string_view digits = TrimSpace(s);
  if (digits.size() >= 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    digits.remove_prefix(2);
  }
  auto v = ParseHex(s);
  if (!v) return std::nullopt;
  if (digits.size() <= 4) *v <<= 8;
  if (*v > 0xffffff) return std::nullopt;
  return static_cast<std::uint32_t>(*v);
}

// "16 GT/s", "32.0 GT/s PCIe", "2.5 GT/s" -> GT/s; 0 when empty or unrecognised ("Unknown").
double ParseGtPerSecond(std::string_view s) {
  s = TrimSpace(s);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::fixed);
  if (ec != std::errc() || !std::isfinite(v) || v <= 0 || v > 1024) return 0;
  std::string_view unit = TrimSpace(std::string_view(p, static_cast<std::size_t>(s.data() + s.size() - p)));
  return unit.substr(0, 4) == "GT/s" ? v : 0;
}

// GB/s per direction of a PCIe link: 8b/10b encoding up to 5 GT/s (gen1/2), 128b/130b above.
double LinkGbps(double gt_per_s, int width) {
  if (gt_per_s <= 0 || width <= 0) return 0;
  const double encoding = gt_per_s <= 5.0 ? 8.0 / 10.0 : 128.0 / 130.0;
  return gt_per_s * width * encoding / 8.0;
}

// Linux cpumask text ("000000ff,ffff0000,00ffffff": 32-bit hex words, most significant first)
// -> words, least significant first. nullopt when absent or malformed: the CPUs stay unknown.
std::optional<std::vector<std::uint32_t>> ParseCpuMask(std::string_view s) {
  s = TrimSpace(s);
  if (s.empty()) return std::nullopt;
  std::vector<std::uint32_t> words;
  while (true) {
    const std::size_t comma = s.find(',');
    std::string_view word = TrimSpace(s.substr(0, comma));
    if (word.empty() || word.size() > 8) return std::nullopt;
    std::uint32_t v = 0;
    auto [p, ec] = std::from_chars(word.data(), word.data() + word.size(), v, 16);
    if (ec != std::errc() || p != word.data() + word.size()) return std::nullopt;
    words.push_back(v);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  std::reverse(words.begin(), words.end());
  return words;
}

void MergeMask(std::vector<std::uint32_t>& into, const std::vector<std::uint32_t>& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (std::size_t i = 0; i < from.size(); ++i) into[i] |= from[i];
}

// Words (least significant first) -> cpulist "0-23,48-71"; empty for an empty mask.
std::string CpuList(const std::vector<std::uint32_t>& words) {
  std::string out;
  const std::size_t bits = words.size() * 32;
  std::size_t i = 0;
  auto set = [&](std::size_t b) { return ((words[b / 32] >> (b % 32)) & 1u) != 0; };
  while (i < bits) {
    if (!set(i)) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j + 1 < bits && set(j + 1)) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(i);
    if (j > i) out += '-' + std::to_string(j);
    i = j + 1;
  }
  return out;
}

// ---- Structural checks before and after the XML parser.

// Upper bound on the element nesting depth, computed the way rapidxml walks the text (comments,
// CDATA, processing instructions and DOCTYPE skipped; quoted attribute values skipped). It runs
// before the parser because the parser itself would overflow the stack on deep input.
bool NestingWithinLimit(std::string_view s) {
  int depth = 0;
  std::size_t i = 0;
  const std::size_t n = s.size();
  auto skip_past = [&](std::size_t from, std::string_view terminator) {
    const std::size_t e = s.find(terminator, from);
    return e == std::string_view::npos ? n : e + terminator.size();
  };
  while (i < n) {
    const std::size_t lt = s.find('<', i);
    if (lt == std::string_view::npos) break;
    const std::string_view rest = s.substr(lt);
    if (rest.starts_with("<!--")) {
      i = skip_past(lt + 4, "-->");
    } else if (rest.starts_with("<![CDATA[")) {
      i = skip_past(lt + 9, "]]>");
    } else if (rest.starts_with("<?")) {
      i = skip_past(lt + 2, "?>");
    } else if (rest.starts_with("<!DOCTYPE") && rest.size() > 9 &&
               (rest[9] == ' ' || rest[9] == '\t' || rest[9] == '\n' || rest[9] == '\r')) {
      // As rapidxml: '>' ends the DOCTYPE except inside a [...] internal subset.
      std::size_t j = lt + 10;
      while (j < n && s[j] != '>') {
        if (s[j] == '[') {
          int brackets = 1;
          ++j;
          while (j < n && brackets > 0) {
            if (s[j] == '[') ++brackets;
            if (s[j] == ']') --brackets;
            ++j;
          }
        } else {
          ++j;
        }
      }
      i = j + 1;
    } else if (rest.starts_with("<!")) {
      i = skip_past(lt + 2, ">");
    } else if (rest.starts_with("</")) {
      if (depth > 0) --depth;
      i = skip_past(lt + 2, ">");
    } else {
      std::size_t j = lt + 1;
      char quote = 0;
      for (; j < n; ++j) {
        const char c = s[j];
        if (quote != 0) {
          if (c == quote) quote = 0;
        } else if (c == '"' || c == '\'') {
          quote = c;
        } else if (c == '>') {
          break;
        }
      }
      if (j >= n) break;
      if (s[j - 1] != '/' && ++depth > kMaxDepth) return false;
      i = j + 1;
    }
  }
  return true;
}

// File text quoted in an error message: bounded and printable, since messages end up in logs and
// HTTP responses and the text may be anything.
std::string Shown(std::string_view text) {
  constexpr std::size_t kMaxShown = 64;
  std::string out;
  for (char c : text.substr(0, kMaxShown)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > kMaxShown) out += "...";
  return out;
}

Error TooDeep() {
  return Error("NCCL topology XML nests deeper than " + std::to_string(kMaxDepth) + " levels");
}

bool IsElement(const std::string& key) {
  return !key.empty() && key[0] != '<';
}

// Counts elements per tag name; fails past kMaxElementsPerKind of one kind.
std::optional<Error> CountElements(const pt::ptree& node, std::map<std::string, int>& counts, int depth) {
  if (depth > kMaxDepth) return TooDeep();
  for (const auto& [key, child] : node) {
    if (!IsElement(key)) continue;
    if (++counts[key] > kMaxElementsPerKind) {
      return Error("NCCL topology XML has more than " + std::to_string(kMaxElementsPerKind) + " <" +
                   Shown(key) + "> elements");
    }
    if (auto e = CountElements(child, counts, depth + 1)) return e;
  }
  return std::nullopt;
}

std::optional<std::string> Attr(const pt::ptree& node, const char* name) {
  auto attrs = node.find("<xmlattr>");
  if (attrs == node.not_found()) return std::nullopt;
  auto it = attrs->second.find(name);
  if (it == attrs->second.not_found()) return std::nullopt;
  return it->second.data();
}

bool HasChild(const pt::ptree& node, const char* name) {
  return node.find(name) != node.not_found();
}

// ---- Device classification.

constexpr std::uint16_t kVendorNvidia = 0x10de;
constexpr std::uint16_t kVendorAmd = 0x1002;
constexpr std::uint16_t kVendorAmazon = 0x1d0f;  // EFA
constexpr std::uint16_t kVendorHpe = 0x17db;     // Cray Cassini (Slingshot)

bool IsBridgeClass(std::uint32_t cls) {
  return (cls >> 8) == 0x0604;
}
bool IsNetworkClass(std::uint32_t cls) {
  return (cls >> 16) == 0x02;
}

// Display controllers (0x0300 VGA, 0x0302 3D, 0x0380 other: AMD Instinct) and processing
// accelerators (0x1200: MI300). Only NVIDIA/AMD ones, or ones without a vendor attribute (the
// hand-written Azure files), count: a VGA function of another vendor is the BMC's.
bool IsGpuClass(std::uint32_t cls, std::optional<std::uint16_t> vendor) {
  const std::uint32_t sub = cls >> 8;
  if (sub != 0x0300 && sub != 0x0302 && sub != 0x0380 && sub != 0x1200) return false;
  return !vendor || *vendor == kVendorNvidia || *vendor == kVendorAmd;
}

bool StartsWithAny(std::string_view s, std::initializer_list<std::string_view> prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](std::string_view p) { return s.starts_with(p); });
}

// RDMA device names as the kernel/libfabric name them. NCCL's IB transport lists verbs devices
// (mlx5_0, mlx5_bond_0, bnxt_re0, irdma0, qedr0, ionic_0, hfi1_0, rdmap16s27/efa_0 for EFA);
// the RCCL MI300A file lists Slingshot as libfabric cxi0 with gdr=1.
bool IsRdmaDeviceName(std::string_view name) {
  return StartsWithAny(
      name, {"mlx4_", "mlx5_", "rdmap", "efa", "bnxt_re", "hfi1_", "irdma", "qedr", "cxi", "ionic"});
}

// Plain network interfaces, which NCCL's socket transport uses: ethN/enXXX/emN, IPoIB ibN,
// Slingshot hsiN, bonds.
bool IsNetdevName(std::string_view name) {
  return StartsWithAny(name, {"eth", "en", "em", "ib", "hsi", "bond"});
}

bool NetIsRdma(std::string_view name, std::optional<std::string> gdr, bool has_pci) {
  // A nameless NIC PCI function is listed because NCCL's network transport uses it (the p4d EFA
  // and Azure InfiniBand files give only class and bus id), so it counts as RDMA.
  if (name.empty()) return has_pci || (gdr && TrimSpace(*gdr) == "1");
  if (IsRdmaDeviceName(name)) return true;
  if (IsNetdevName(name)) return false;
  // Unknown naming: trust NCCL's GPUDirect flag, which only RDMA transports set.
  return gdr && TrimSpace(*gdr) == "1";
}

// Informational only (`rdma` decides scheduling), so kept simple: vendor and name first, then
// the PCI class (0x0207 InfiniBand; a Mellanox/Broadcom RDMA device on an Ethernet function is
// RoCE), then plain interfaces are Ethernet.
NicKind NetKind(std::string_view name, std::optional<std::uint16_t> vendor, std::optional<std::uint32_t> cls,
                bool rdma) {
  if ((vendor && *vendor == kVendorAmazon) || StartsWithAny(name, {"rdmap", "efa"})) return NicKind::kEfa;
  if (name.starts_with("hfi1")) return NicKind::kOmniPath;
  if ((vendor && *vendor == kVendorHpe) || StartsWithAny(name, {"cxi", "hsi"})) return NicKind::kSlingshot;
  if (cls && (*cls >> 8) == 0x0207) return NicKind::kInfiniband;
  if (cls && (*cls >> 8) == 0x0200 && StartsWithAny(name, {"mlx", "bnxt_re"})) return NicKind::kRoce;
  if (!rdma) return NicKind::kEthernet;
  return NicKind::kUnknown;
}

// Linux interface names and RDMA device names are short printable ASCII (IB_DEVICE_NAME_MAX 64).
bool IsValidDeviceName(std::string_view name) {
  return !name.empty() && name.size() <= 64 &&
         std::all_of(name.begin(), name.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

std::uint64_t LinkRateMbps(const std::optional<std::string>& speed) {
  if (!speed) return 0;
  auto v = ParseInt(TrimSpace(*speed));
  if (!v || *v <= 0) return 0;
  auto mbps = static_cast<std::uint64_t>(*v);
  if (mbps > kMaxPlausibleMbps) mbps /= 1000;
  return mbps;
}

// ---- The builder.

// Where an element sits: its <cpu> and its nearest enclosing bridge.
struct Context {
  int numa = -1;        // numaid of the enclosing <cpu>; -1 when NCCL says -1
  int cpu_element = 0;  // ordinal of the enclosing <cpu>, for its affinity
  int parent = -1;      // index into NodeTopology::pcie of the enclosing bridge
  int depth = 0;
};

struct PciAttrs {
  std::string raw_busid;
  std::string busid;  // normalized; empty when the attribute is missing or malformed
  std::optional<std::uint32_t> cls;
  std::optional<std::uint16_t> vendor, device;
  double link_gbps = 0;
  int link_width = 0;
};

PciAttrs ReadPciAttrs(const pt::ptree& pci) {
  PciAttrs a;
  a.raw_busid = Attr(pci, "busid").value_or("");
  a.busid = NormalizePciBusId(TrimSpace(a.raw_busid));
  if (auto c = Attr(pci, "class")) a.cls = ParseClass(*c);
  if (auto v = Attr(pci, "vendor")) a.vendor = ParseId16(*v);
  if (auto d = Attr(pci, "device")) a.device = ParseId16(*d);
  if (auto w = Attr(pci, "link_width")) {
    auto width = ParseInt(TrimSpace(*w));
    if (width && *width > 0 && *width <= 64) a.link_width = static_cast<int>(*width);
  }
  const double gts = ParseGtPerSecond(Attr(pci, "link_speed").value_or(""));
  a.link_gbps = LinkGbps(gts, a.link_width);
  return a;
}

// One <nvlink> or <xgmi> entry of a GPU, resolved once all GPUs are known.
struct PendingLink {
  int gpu = 0;
  std::string target;  // normalized bus id
  int count = 0;
  std::optional<std::uint32_t> tclass;
  Fabric fabric = Fabric::kNvlink;
};

class Builder {
 public:
  std::optional<Error> Build(const pt::ptree& system) {
    for (const auto& [key, child] : system) {
      if (key != "cpu") continue;  // unknown elements are ignored
      if (auto e = Cpu(child)) return e;
    }
    ResolvePeers();
    PruneBridges();
    Finish();
    return std::nullopt;
  }

  NodeTopology Take() { return std::move(t_); }

 private:
  std::optional<Error> Cpu(const pt::ptree& cpu) {
    auto numaid_text = Attr(cpu, "numaid");
    if (!numaid_text) return Error("<cpu> element without a numaid attribute");
    auto numaid = ParseInt(TrimSpace(*numaid_text));
    // NCCL writes numaid="-1" when the kernel reports no NUMA locality (some VMs): the devices
    // then have unknown NUMA, but their <cpu>'s affinity still gives their local CPUs.
    if (!numaid || *numaid < -1 || *numaid > 1'000'000) {
      return Error("<cpu> element with invalid numaid \"" + Shown(*numaid_text) + "\"");
    }
    Context ctx;
    ctx.numa = static_cast<int>(*numaid);
    ctx.cpu_element = static_cast<int>(cpu_masks_.size());
    std::vector<std::uint32_t> mask;
    if (auto affinity = Attr(cpu, "affinity")) {
      if (auto m = ParseCpuMask(*affinity)) mask = std::move(*m);
    }
    if (ctx.numa >= 0) MergeMask(numa_masks_[ctx.numa], mask);  // duplicate numaids merge
    cpu_masks_.push_back(std::move(mask));

    for (const auto& [key, child] : cpu) {
      if (key == "pci") {
        if (auto e = Pci(child, ctx)) return e;
      } else if (key == "nic") {
        // A NIC without a PCI address (the Azure NC file's eth0).
        if (auto e = Nets(child, ctx, nullptr)) return e;
      }
    }
    return std::nullopt;
  }

  std::optional<Error> Pci(const pt::ptree& pci, const Context& ctx) {
    if (ctx.depth > kMaxDepth) return TooDeep();
    const PciAttrs a = ReadPciAttrs(pci);
    const bool has_gpu = HasChild(pci, "gpu");
    const bool has_nic = HasChild(pci, "nic");
    const bool has_pci = HasChild(pci, "pci");
    if (has_gpu) return GpuDevice(pci, a, ctx);
    // A classless element with <pci> children can only be a switch (NCCL nests nothing else).
    if ((a.cls && IsBridgeClass(*a.cls)) || (!a.cls && has_pci && !has_nic)) return Bridge(pci, a, ctx);
    if (has_nic || (a.cls && IsNetworkClass(*a.cls))) return NicDevice(pci, a, ctx);
    if (a.cls && IsGpuClass(*a.cls, a.vendor)) return GpuDevice(pci, a, ctx);
    // A classless leaf (NCCL's minimal files, AWS g5: bare bus ids that NCCL completes from
    // sysfs at run time) says nothing about what the device is: not taken as a GPU. (The g5 file
    // lists nine such leaves for a machine with eight GPUs.)
    return std::nullopt;  // another device (BMC VGA, NVMe, ...) or an unnamed one: not modelled
  }

  std::optional<Error> Bridge(const pt::ptree& pci, const PciAttrs& a, const Context& ctx) {
    PcieNode node;
    const int index = static_cast<int>(t_.pcie.size());
    // Fake switch ids (ffff:ff:01.0) normalize fine. The JSON encoding names parents by id, so
    // ids must be unique and non-empty: a bridge with a missing, malformed or repeated bus id
    // (which only labels it) gets a synthetic one.
    node.id = a.busid;
    for (int n = index; node.id.empty() || !bridge_ids_.insert(node.id).second; ++n) {
      node.id = "bridge:" + std::to_string(n);
    }
    node.kind = PcieKind::kBridge;
    node.parent = ctx.parent;
    // NCCL collapses the tree below the root port and records no host bridges, so a bridge right
    // under <cpu> is the upstream port of a PCIe switch as NCCL sees it. Without host bridges,
    // devices in different top-level trees of the same <cpu> classify NODE rather than PHB, which
    // is what nvidia-smi prints on servers where every x16 root port is its own host bridge.
    node.is_switch = ctx.parent < 0;
    node.numa = ctx.numa;
    node.vendor_id = a.vendor.value_or(0);
    node.device_id = a.device.value_or(0);
    node.link_gbps = a.link_gbps;
    node.link_width = a.link_width;
    t_.pcie.push_back(std::move(node));

    Context inner = ctx;
    inner.parent = index;
    inner.depth = ctx.depth + 1;
    for (const auto& [key, child] : pci) {
      if (key != "pci") continue;
      if (auto e = Pci(child, inner)) return e;
    }
    return std::nullopt;
  }

  std::optional<Error> GpuDevice(const pt::ptree& pci, const PciAttrs& a, const Context& ctx) {
    if (a.busid.empty()) return Error("GPU with invalid PCI bus id \"" + Shown(a.raw_busid) + "\"");
    if (gpu_by_busid_.count(a.busid) != 0) return Error("GPU bus id " + a.busid + " appears twice");
    if (t_.gpus.size() >= kMaxGpus) return Error("more than " + std::to_string(kMaxGpus) + " GPUs");
    const int index = static_cast<int>(t_.gpus.size());
    gpu_by_busid_[a.busid] = index;

    Gpu g;
    g.index = index;
    g.pci_bus_id = a.busid;
    g.vendor_id = a.vendor.value_or(0);
    g.device_id = a.device.value_or(0);
    bool amd_hint = false;  // RCCL writes gcn="gfx942" on AMD GPUs, NCCL never
    for (const auto& [key, gpu] : pci) {
      if (key == "gpu" && Attr(gpu, "gcn")) amd_hint = true;
    }
    if (a.vendor && *a.vendor == kVendorNvidia) {
      g.vendor = GpuVendor::kNvidia;
    } else if (a.vendor && *a.vendor == kVendorAmd) {
      g.vendor = GpuVendor::kAmd;
    } else {
      const bool amd_class = a.cls && ((*a.cls >> 8) == 0x0380 || (*a.cls >> 16) == 0x12);
      g.vendor = amd_hint || amd_class ? GpuVendor::kAmd : GpuVendor::kNvidia;
    }
    g.numa = ctx.numa;
    g.parent = ctx.parent;
    g.link_gbps = a.link_gbps;
    g.link_width = a.link_width;
    t_.gpus.push_back(std::move(g));
    gpu_cpu_element_.push_back(ctx.cpu_element);

    for (const auto& [key, gpu] : pci) {
      if (key != "gpu") continue;
      for (const auto& [link_key, link] : gpu) {
        Fabric fabric;
        if (link_key == "nvlink") {
          fabric = Fabric::kNvlink;
        } else if (link_key == "xgmi") {
          fabric = Fabric::kXgmi;
        } else {
          continue;
        }
        PendingLink p;
        p.gpu = index;
        p.fabric = fabric;
        p.target = NormalizePciBusId(TrimSpace(Attr(link, "target").value_or("")));
        if (p.target.empty()) continue;
        auto count = Attr(link, "count");
        auto n = count ? ParseInt(TrimSpace(*count)) : std::optional<long long>(1);
        if (!n || *n < 1 || *n > kMaxLinkCount) continue;
        p.count = static_cast<int>(*n);
        if (auto tclass = Attr(link, "tclass")) p.tclass = ParseClass(*tclass);
        links_.push_back(std::move(p));
      }
    }
    return std::nullopt;
  }

  std::optional<Error> NicDevice(const pt::ptree& pci, const PciAttrs& a, const Context& ctx) {
    if (a.busid.empty()) return Error("NIC with invalid PCI bus id \"" + Shown(a.raw_busid) + "\"");
    const std::size_t before = t_.nics.size();
    for (const auto& [key, child] : pci) {
      if (key != "nic") continue;
      if (auto e = Nets(child, ctx, &a)) return e;
    }
    // Several <net> on one function (OCI's dual-port CX-7: mlx5_18 and mlx5_19) are several NICs
    // sharing a bus id; none at all is one nameless NIC.
    if (t_.nics.size() == before) return AddNic(ctx, &a, "", std::nullopt, std::nullopt);
    return std::nullopt;
  }

  std::optional<Error> Nets(const pt::ptree& nic, const Context& ctx, const PciAttrs* a) {
    for (const auto& [key, net] : nic) {
      if (key != "net") continue;
      auto e = AddNic(ctx, a, std::string(TrimSpace(Attr(net, "name").value_or(""))), Attr(net, "gdr"),
                      Attr(net, "speed"));
      if (e) return e;
    }
    return std::nullopt;
  }

  std::optional<Error> AddNic(const Context& ctx, const PciAttrs* a, std::string name,
                              const std::optional<std::string>& gdr,
                              const std::optional<std::string>& speed) {
    if (t_.nics.size() >= kMaxNics) return Error("more than " + std::to_string(kMaxNics) + " NICs");
    // The model's consumers identify NICs by DisplayName() (matrix legends, the JSON encoding),
    // so names must be real device names and unique, and a nameless NIC needs its bus id.
    if (!name.empty() && !IsValidDeviceName(name)) {
      return Error("NIC name \"" + Shown(name) + "\" is not a device or interface name");
    }
    if (name.empty() && a == nullptr) return std::nullopt;  // nothing to call it by: useless
    if (!name.empty() && !nic_names_.insert(name).second) {
      // NCCL dumps taken inside a container list the container's one virtual interface (eth0, no
      // PCI path) under every <cpu>: one NIC, whose locality is then unknown. A name repeated
      // with a PCI device behind either occurrence is two devices under one name: refused.
      for (std::size_t i = 0; i < t_.nics.size(); ++i) {
        Nic& seen = t_.nics[i];
        if (seen.name != name) continue;
        if (a != nullptr || !seen.pci_bus_id.empty()) break;
        if (seen.numa != ctx.numa || nic_cpu_element_[i] != ctx.cpu_element) {
          seen.numa = -1;
          nic_cpu_element_[i] = -1;  // no CPU set either
        }
        return std::nullopt;
      }
      return Error("NIC name " + name + " appears twice");
    }
    if (name.empty() && !nameless_nic_busids_.insert(a->busid).second) {
      return Error("NIC bus id " + a->busid + " appears twice");
    }
    Nic n;
    n.rdma = NetIsRdma(name, gdr, a != nullptr);
    n.kind = NetKind(name, a ? a->vendor : std::nullopt, a ? a->cls : std::nullopt, n.rdma);
    if (!name.empty() && !n.rdma) n.netdevs.push_back(name);  // the name is an interface
    n.name = std::move(name);
    if (a != nullptr) {
      n.pci_bus_id = a->busid;
      n.vendor_id = a->vendor.value_or(0);
      n.device_id = a->device.value_or(0);
      n.link_gbps = a->link_gbps;
      n.link_width = a->link_width;
      n.parent = ctx.parent;
    }
    n.link_rate_mbps = LinkRateMbps(speed);
    n.numa = ctx.numa;
    t_.nics.push_back(std::move(n));
    nic_cpu_element_.push_back(ctx.cpu_element);
    return std::nullopt;
  }

  // NVLink: direct GPU-GPU entries give NV<count>; entries to NVSwitches (tclass 0x0680xx) give
  // each GPU its total switch links, and two switch-attached GPUs get NV<min of the totals>, the
  // bottleneck through the switch plane, which is what nvidia-smi prints (HGX H100: 5+5+4+4 =
  // NV18; HGX A100: 6 switches x 2 = NV12). xGMI is direct only.
  void ResolvePeers() {
    const std::size_t ng = t_.gpus.size();
    if (ng == 0) return;
    std::map<std::pair<int, int>, int> nvlink, xgmi;  // (from, to) -> links, per direction
    std::vector<long long> switch_links(ng, 0);
    for (const PendingLink& p : links_) {
      if (p.target == t_.gpus[static_cast<std::size_t>(p.gpu)].pci_bus_id) continue;  // Azure NC self links
      const bool to_switch = p.fabric == Fabric::kNvlink && p.tclass && (*p.tclass >> 8) == 0x0680;
      if (to_switch) {
        switch_links[static_cast<std::size_t>(p.gpu)] += p.count;
        continue;
      }
      auto it = gpu_by_busid_.find(p.target);
      if (it == gpu_by_busid_.end()) continue;  // a CPU (POWER NVLink) or a device not in the file
      auto& table = p.fabric == Fabric::kXgmi ? xgmi : nvlink;
      table[{p.gpu, it->second}] += p.count;
    }
    auto both_ways = [](const std::map<std::pair<int, int>, int>& table, int a, int b) {
      // Listed on both sides or on one only: never doubled, always symmetric.
      int links = 0;
      if (auto it = table.find({a, b}); it != table.end()) links = std::max(links, it->second);
      if (auto it = table.find({b, a}); it != table.end()) links = std::max(links, it->second);
      return links;
    };
    for (std::size_t a = 0; a < ng; ++a) {
      for (std::size_t b = a + 1; b < ng; ++b) {
        const int ia = static_cast<int>(a), ib = static_cast<int>(b);
        GpuPeer peer;
        const int direct = both_ways(nvlink, ia, ib);
        const long long via = std::min(switch_links[a], switch_links[b]);
        if (direct > 0 || via > 0) {
          peer.fabric = Fabric::kNvlink;
          peer.via_switch = via > direct;
          peer.links = static_cast<int>(std::min<long long>(std::max<long long>(direct, via), kMaxLinkCount));
        } else if (const int x = both_ways(xgmi, ia, ib); x > 0) {
          peer.fabric = Fabric::kXgmi;
          peer.links = x;
        } else {
          continue;
        }
        peer.gpu = ib;
        t_.gpus[a].peers.push_back(peer);
        peer.gpu = ia;
        t_.gpus[b].peers.push_back(peer);
      }
    }
  }

  // The model keeps only bridges on the path of a GPU or a NIC.
  void PruneBridges() {
    std::vector<bool> used(t_.pcie.size(), false);
    auto mark = [&](int parent) {
      for (int n = parent; n >= 0 && !used[static_cast<std::size_t>(n)];
           n = t_.pcie[static_cast<std::size_t>(n)].parent) {
        used[static_cast<std::size_t>(n)] = true;
      }
    };
    for (const Gpu& g : t_.gpus) mark(g.parent);
    for (const Nic& n : t_.nics) mark(n.parent);
    std::vector<int> remap(t_.pcie.size(), -1);
    std::vector<PcieNode> kept;
    for (std::size_t i = 0; i < t_.pcie.size(); ++i) {
      if (!used[i]) continue;
      remap[i] = static_cast<int>(kept.size());
      kept.push_back(std::move(t_.pcie[i]));
    }
    // Parents come before children, so every parent is remapped before its children read it.
    for (PcieNode& p : kept) p.parent = p.parent >= 0 ? remap[static_cast<std::size_t>(p.parent)] : -1;
    for (Gpu& g : t_.gpus) g.parent = g.parent >= 0 ? remap[static_cast<std::size_t>(g.parent)] : -1;
    for (Nic& n : t_.nics) n.parent = n.parent >= 0 ? remap[static_cast<std::size_t>(n.parent)] : -1;
    t_.pcie = std::move(kept);
  }

  void Finish() {
    std::map<int, std::string> numa_cpus;
    for (const auto& [id, mask] : numa_masks_) {
      numa_cpus[id] = CpuList(mask);
      t_.numa_nodes.push_back(NumaNode{id, -1, numa_cpus[id], 0});  // NCCL names no package
    }
    auto cpus_of = [&](int numa, int cpu_element) {
      if (numa >= 0) return numa_cpus[numa];
      return cpu_element >= 0 ? CpuList(cpu_masks_[static_cast<std::size_t>(cpu_element)]) : std::string();
    };
    for (std::size_t i = 0; i < t_.gpus.size(); ++i) {
      t_.gpus[i].cpus = cpus_of(t_.gpus[i].numa, gpu_cpu_element_[i]);
    }
    for (std::size_t i = 0; i < t_.nics.size(); ++i) {
      t_.nics[i].cpus = cpus_of(t_.nics[i].numa, nic_cpu_element_[i]);
    }
  }

  NodeTopology t_;
  std::map<int, std::vector<std::uint32_t>> numa_masks_;  // sorted by id, as numa_nodes must be
  std::vector<std::vector<std::uint32_t>> cpu_masks_;     // per <cpu> element
  std::map<std::string, int> gpu_by_busid_;
  std::set<std::string> bridge_ids_, nic_names_, nameless_nic_busids_;
  std::vector<int> gpu_cpu_element_, nic_cpu_element_;  // parallel to t_.gpus / t_.nics
  std::vector<PendingLink> links_;
};

Result<NodeTopology> Parse(std::string_view content) {
  if (content.size() > kMaxNcclXmlBytes) {
    return Error("NCCL topology XML is " + std::to_string(content.size()) + " bytes, over the limit of " +
                 std::to_string(kMaxNcclXmlBytes));
  }
  // rapidxml stops at the first NUL: reject rather than silently parse a prefix.
  if (content.find('\0') != std::string_view::npos) return Error("NCCL topology XML contains NUL bytes");
  if (TrimSpace(content).empty()) return Error("NCCL topology XML is empty");
  if (!NestingWithinLimit(content)) return TooDeep();

  pt::ptree doc;
  try {
    std::istringstream in{std::string(content)};
    pt::read_xml(in, doc, pt::xml_parser::no_comments | pt::xml_parser::trim_whitespace);
  } catch (const pt::xml_parser_error& e) {
    return Error("malformed NCCL topology XML at line " + std::to_string(e.line()) + ": " + e.message());
  }

  std::map<std::string, int> counts;
  if (auto e = CountElements(doc, counts, 0)) return *e;

  auto root = std::find_if(doc.begin(), doc.end(), [](const auto& kv) { return IsElement(kv.first); });
  if (root == doc.end()) return Error("not an NCCL topology: no root element, expected <system version=...>");
  if (root->first != "system" || !Attr(root->second, "version")) {
    return Error("not an NCCL topology: root element is <" + Shown(root->first) +
                 (root->first == "system" ? "> without a version attribute" : ">") +
                 ", expected <system version=...>");
  }

  Builder builder;
  if (auto e = builder.Build(root->second)) return *e;
  NodeTopology t = builder.Take();
  t.source = TopologySource::kNcclXml;
  DeriveLinks(t);
  return t;
}

}  // namespace

Result<NodeTopology> ParseNcclXml(std::string_view content) {
  // Exceptions stop here (status.h): Boost and the standard library may throw (bad_alloc, ptree
  // errors), the callers expect a Result.
  try {
    return Parse(content);
  } catch (const std::exception& e) {
    return Error(std::string("cannot read NCCL topology XML: ") + e.what());
  } catch (...) {
    return Error("cannot read NCCL topology XML: unknown error");
  }
}

}  // namespace toposched
