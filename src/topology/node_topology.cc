#include "toposched/topology/node_topology.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <map>
#include <numeric>

#include "toposched/common/hash.h"

namespace toposched {

std::string_view ToString(LinkClass c) {
  switch (c) {
    case LinkClass::kSelf:
      return "X";
    case LinkClass::kNV:
      return "NV";
    case LinkClass::kPIX:
      return "PIX";
    case LinkClass::kPXB:
      return "PXB";
    case LinkClass::kPHB:
      return "PHB";
    case LinkClass::kNODE:
      return "NODE";
    case LinkClass::kSYS:
      return "SYS";
  }
  return "SYS";
}

std::optional<LinkClass> ParseLinkClass(std::string_view s) {
  for (LinkClass c : {LinkClass::kSelf, LinkClass::kPIX, LinkClass::kPXB, LinkClass::kPHB, LinkClass::kNODE,
                      LinkClass::kSYS}) {
    if (s == ToString(c)) return c;
  }
  return std::nullopt;
}

std::string_view ToString(TopologySource s) {
  switch (s) {
    case TopologySource::kHwloc:
      return "hwloc";
    case TopologySource::kHwlocXml:
      return "hwloc-xml";
    case TopologySource::kNcclXml:
      return "nccl-xml";
    case TopologySource::kSynthetic:
      return "synthetic";
  }
  return "synthetic";
}

std::optional<TopologySource> ParseTopologySource(std::string_view s) {
  for (TopologySource v : {TopologySource::kHwloc, TopologySource::kHwlocXml, TopologySource::kNcclXml,
                           TopologySource::kSynthetic}) {
    if (s == ToString(v)) return v;
  }
  return std::nullopt;
}

std::string_view ToString(GpuVendor v) {
  return v == GpuVendor::kAmd ? "amd" : "nvidia";
}

std::string_view ToString(NicKind k) {
  switch (k) {
    case NicKind::kInfiniband:
      return "infiniband";
    case NicKind::kRoce:
      return "roce";
    case NicKind::kEfa:
      return "efa";
    case NicKind::kOmniPath:
      return "omnipath";
    case NicKind::kSlingshot:
      return "slingshot";
    case NicKind::kEthernet:
      return "ethernet";
    case NicKind::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::optional<NicKind> ParseNicKind(std::string_view s) {
  for (NicKind k : {NicKind::kInfiniband, NicKind::kRoce, NicKind::kEfa, NicKind::kOmniPath,
                    NicKind::kSlingshot, NicKind::kEthernet, NicKind::kUnknown}) {
    if (s == ToString(k)) return k;
  }
  return std::nullopt;
}

std::string Link::Token() const {
  if (cls != LinkClass::kNV) return std::string(ToString(cls));
  if (fabric == Fabric::kXgmi) return "XGMI";
  return "NV" + std::to_string(count);
}

std::optional<Link> Link::ParseToken(std::string_view token) {
  if (token == "XGMI") return Link{LinkClass::kNV, Fabric::kXgmi, 0};
  if (token.size() > 2 && token.substr(0, 2) == "NV") {
    int count = 0;
    std::string_view digits = token.substr(2);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), count);
    if (ec != std::errc() || ptr != digits.data() + digits.size() || count <= 0 || count > 1024) {
      return std::nullopt;
    }
    return Link{LinkClass::kNV, Fabric::kNvlink, count};
  }
  if (auto c = ParseLinkClass(token)) return Link{*c, Fabric::kNone, 0};
  return std::nullopt;
}

bool NaturalLess(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      // Compare numerically without overflow: strip leading zeros, then length, then digits.
      std::string_view na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      while (na.size() > 1 && na[0] == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb[0] == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::string ToKubernetesName(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 253)) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u))
      out += static_cast<char>(std::tolower(u));
    else if (c == '.' || c == '-')
      out += c;
    else
      out += '-';
  }
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  while (!out.empty() && !alnum(out.back())) out.pop_back();
  std::size_t start = 0;
  while (start < out.size() && !alnum(out[start])) ++start;
  out.erase(0, start);
  return out.empty() ? "node" : out;
}

std::string NormalizePciBusId(std::string_view id) {
  // Accepts "[domain:]bus:dev.fn" with hex fields; domain up to 8 digits (NVML), bus 2, dev 2,
  // fn 1.
  auto hex = [](std::string_view s, unsigned& out) {
    if (s.empty() || s.size() > 8) return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
    return ec == std::errc() && p == s.data() + s.size();
  };
  std::size_t dot = id.rfind('.');
  if (dot == std::string_view::npos) return {};
  std::string_view head = id.substr(0, dot), fn_s = id.substr(dot + 1);
  std::size_t c2 = head.rfind(':');
  if (c2 == std::string_view::npos) return {};
  std::string_view dev_s = head.substr(c2 + 1);
  head = head.substr(0, c2);
  std::size_t c1 = head.rfind(':');
  std::string_view bus_s = c1 == std::string_view::npos ? head : head.substr(c1 + 1);
  std::string_view dom_s = c1 == std::string_view::npos ? std::string_view("0") : head.substr(0, c1);
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  if (!hex(dom_s, dom) || !hex(bus_s, bus) || !hex(dev_s, dev) || !hex(fn_s, fn)) return {};
  if (bus > 0xff || dev > 0x1f || fn > 0x7) return {};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
  return buf;
}

namespace {

// Ancestors of a PCIe node, nearest first, including the node itself. Bounded by the tree size
// so that a malformed parent cycle cannot loop forever (the decoder rejects cycles anyway).
std::vector<int> Chain(const NodeTopology& t, int node) {
  std::vector<int> chain;
  for (int n = node; n >= 0 && chain.size() <= t.pcie.size();
       n = t.pcie[static_cast<std::size_t>(n)].parent) {
    chain.push_back(n);
  }
  return chain;
}

}  // namespace

LinkClass ClassifyPath(const NodeTopology& t, int parent_a, int numa_a, int parent_b, int numa_b) {
  const std::vector<int> chain_a = Chain(t, parent_a);
  const std::vector<int> chain_b = Chain(t, parent_b);
  // Lowest common ancestor in the PCIe tree; bridges_a/b count the bridges strictly between each
  // device's own parent chain and that ancestor.
  for (std::size_t ia = 0; ia < chain_a.size(); ++ia) {
    auto it = std::find(chain_b.begin(), chain_b.end(), chain_a[ia]);
    if (it == chain_b.end()) continue;
    const std::size_t ib = static_cast<std::size_t>(it - chain_b.begin());
    const PcieNode& lca = t.pcie[static_cast<std::size_t>(chain_a[ia])];
    if (lca.kind == PcieKind::kHostBridge) return LinkClass::kPHB;
    // A device directly below the LCA has 0 bridges in between; one on its own downstream port
    // of the LCA switch has 1. nvidia-smi's PIX is "at most a single PCIe bridge".
    return std::max(ia, ib) <= 1 ? LinkClass::kPIX : LinkClass::kPXB;
  }
  if (numa_a >= 0 && numa_a == numa_b) return LinkClass::kNODE;
  return LinkClass::kSYS;
}

int NodeTopology::RdmaNicCount() const {
  return static_cast<int>(std::count_if(nics.begin(), nics.end(), [](const Nic& n) { return n.rdma; }));
}

int NodeTopology::SwitchOf(int pcie_parent) const {
  // Chain's walk without its vector (scoring calls this per device of every node it scores).
  int outermost = -1;
  std::size_t steps = 0;
  for (int n = pcie_parent; n >= 0 && steps <= pcie.size();
       n = pcie[static_cast<std::size_t>(n)].parent, ++steps) {
    if (pcie[static_cast<std::size_t>(n)].is_switch) outermost = n;
  }
  return outermost;
}

int NodeTopology::SwitchCount() const {
  return static_cast<int>(
      std::count_if(pcie.begin(), pcie.end(), [](const PcieNode& p) { return p.is_switch; }));
}

namespace {

// The fingerprint's field encoding over FNV-1a (common/hash.h): strings length-prefixed, integers
// as 8 bytes, reals in thousandths.
struct FingerprintHasher {
  Fnv1aHasher fnv;
  void Str(const std::string& s) { fnv.String(s); }
  void Int(std::int64_t v) { fnv.I64(v); }
  void Real(double v) { Int(static_cast<std::int64_t>(v * 1000.0)); }
};

}  // namespace

std::string NodeTopology::Fingerprint() const {
  FingerprintHasher f;
  f.Int(kTopologySchemaVersion);
  for (const NumaNode& n : numa_nodes) {
    f.Int(n.id);
    f.Int(n.package);
    f.Str(n.cpus);
    f.Int(static_cast<std::int64_t>(n.memory_bytes));
  }
  for (const PcieNode& p : pcie) {
    f.Str(p.id);
    f.Int(static_cast<int>(p.kind));
    f.Int(p.parent);
    f.Int(p.is_switch);
    f.Int(p.numa);
    f.Int(p.package);
    f.Int(p.vendor_id);
    f.Int(p.device_id);
    f.Real(p.link_gbps);
    f.Int(p.link_width);
  }
  for (const Gpu& g : gpus) {
    f.Str(g.pci_bus_id);
    f.Int(static_cast<int>(g.vendor));
    f.Int(g.vendor_id);
    f.Int(g.device_id);
    f.Str(g.model);
    f.Int(static_cast<std::int64_t>(g.memory_mib));
    f.Int(g.numa);  // not g.uuid
    f.Int(g.package);
    f.Str(g.cpus);
    f.Int(g.parent);
    f.Real(g.link_gbps);
    f.Int(g.link_width);
    if (!g.unusable.empty()) f.Str(g.unusable);  // absent for usable cards: fingerprints unchanged
    if (!g.shares_unenforced.empty()) f.Str(g.shares_unenforced);  // likewise
    for (const GpuPeer& p : g.peers) {
      f.Int(p.gpu);
      f.Int(static_cast<int>(p.fabric));
      f.Int(p.links);
      f.Int(static_cast<std::int64_t>(p.bandwidth_mbps));
      f.Int(p.via_switch);
    }
  }
  for (const Nic& n : nics) {
    f.Str(n.name);
    f.Str(n.pci_bus_id);
    for (const std::string& d : n.netdevs) f.Str(d);
    f.Int(n.rdma);
    f.Int(static_cast<int>(n.kind));
    f.Int(n.vendor_id);
    f.Int(n.device_id);
    f.Int(static_cast<std::int64_t>(n.link_rate_mbps));
    f.Int(n.numa);
    f.Int(n.package);
    f.Str(n.cpus);
    f.Int(n.parent);
    f.Real(n.link_gbps);
    f.Int(n.link_width);
    f.Str(n.rail);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(f.fnv.value()));
  return buf;
}

namespace {

bool NicOrder(const Nic& a, const Nic& b) {
  if (a.rdma != b.rdma) return a.rdma;
  if (a.name.empty() != b.name.empty()) return !a.name.empty();
  if (a.name != b.name) return NaturalLess(a.name, b.name);
  return a.pci_bus_id < b.pci_bus_id;
}

}  // namespace

bool IsPlaceholderGpuUuid(std::string_view uuid) {
  for (std::string_view prefix : {"GPU-", "MIG-", "gpu-", "mig-"}) {
    if (uuid.starts_with(prefix)) {
      uuid.remove_prefix(prefix.size());
      break;
    }
  }
  return std::all_of(uuid.begin(), uuid.end(), [](char c) { return c == '0' || c == '-'; });
}

int DropUnusableGpuUuids(NodeTopology& t) {
  std::map<std::string, int, std::less<>> seen;
  for (const Gpu& g : t.gpus) {
    if (!g.uuid.empty()) ++seen[g.uuid];
  }
  int dropped = 0;
  for (Gpu& g : t.gpus) {
    if (g.uuid.empty()) continue;
    if (IsPlaceholderGpuUuid(g.uuid) || seen[g.uuid] > 1) {
      g.uuid.clear();
      ++dropped;
    }
  }
  return dropped;
}

void DeriveLinks(NodeTopology& t) {
  DropUnusableGpuUuids(t);
  // GPUs into PCI bus order; peers renumbered through the permutation.
  std::vector<int> order(t.gpus.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return t.gpus[static_cast<std::size_t>(a)].pci_bus_id < t.gpus[static_cast<std::size_t>(b)].pci_bus_id;
  });
  std::vector<int> new_index(t.gpus.size());
  std::vector<Gpu> sorted;
  sorted.reserve(t.gpus.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    new_index[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
    sorted.push_back(std::move(t.gpus[static_cast<std::size_t>(order[i])]));
  }
  t.gpus = std::move(sorted);
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    Gpu& g = t.gpus[i];
    g.index = static_cast<int>(i);
    // Peers pointing outside the GPU list (a source bug) are dropped, not followed.
    std::erase_if(g.peers,
                  [&](const GpuPeer& p) { return p.gpu < 0 || p.gpu >= static_cast<int>(new_index.size()); });
    for (GpuPeer& p : g.peers) p.gpu = new_index[static_cast<std::size_t>(p.gpu)];
    std::sort(g.peers.begin(), g.peers.end(),
              [](const GpuPeer& a, const GpuPeer& b) { return a.gpu < b.gpu; });
  }
  std::stable_sort(t.nics.begin(), t.nics.end(), NicOrder);

  const int ng = static_cast<int>(t.gpus.size());
  const int nn = static_cast<int>(t.nics.size());
  auto init = [](LinkMatrix& m, int rows, int cols) {
    m.rows = rows;
    m.cols = cols;
    m.cells.assign(static_cast<std::size_t>(rows * cols), Link{});
  };
  init(t.gpu_gpu, ng, ng);
  init(t.gpu_nic, ng, nn);
  init(t.nic_nic, nn, nn);

  for (int a = 0; a < ng; ++a) {
    const Gpu& ga = t.gpus[static_cast<std::size_t>(a)];
    for (int b = 0; b < ng; ++b) {
      const Gpu& gb = t.gpus[static_cast<std::size_t>(b)];
      Link& cell = t.gpu_gpu.at(a, b);
      if (a == b) {
        cell = Link{LinkClass::kSelf, Fabric::kNone, 0};
        continue;
      }
      cell = Link{ClassifyPath(t, ga.parent, ga.numa, gb.parent, gb.numa), Fabric::kNone, 0};
    }
    // NVLink/xGMI peers override the PCIe class.
    for (const GpuPeer& p : ga.peers) {
      if (p.gpu < 0 || p.gpu >= ng || p.gpu == a) continue;
      t.gpu_gpu.at(a, p.gpu) =
          Link{LinkClass::kNV, p.fabric, p.fabric == Fabric::kNvlink ? std::max(p.links, 1) : 0};
    }
    for (int n = 0; n < nn; ++n) {
      const Nic& nic = t.nics[static_cast<std::size_t>(n)];
      t.gpu_nic.at(a, n) = Link{ClassifyPath(t, ga.parent, ga.numa, nic.parent, nic.numa), Fabric::kNone, 0};
    }
  }
  for (int a = 0; a < nn; ++a) {
    for (int b = 0; b < nn; ++b) {
      const Nic& na = t.nics[static_cast<std::size_t>(a)];
      const Nic& nb = t.nics[static_cast<std::size_t>(b)];
      t.nic_nic.at(a, b) =
          a == b ? Link{LinkClass::kSelf, Fabric::kNone, 0}
                 : Link{ClassifyPath(t, na.parent, na.numa, nb.parent, nb.numa), Fabric::kNone, 0};
    }
  }
}

}  // namespace toposched
