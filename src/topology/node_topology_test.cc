// The link-class rules, orderings and helpers every source relies on.

#include "toposched/topology/node_topology.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace toposched {
namespace {

// A hand-built tree:
//   NUMA 0 (package 0): hostbridge:0 -> rp0 -> sw0 (switch) -> ds0 -> [A]
//                                                             -> ds1 -> [B]
//                                                             -> ds2 -> sw1 (switch) -> ds3 -> [C]
//                       hostbridge:0 -> rp1 -> [D]
//                       hostbridge:1 -> rp2 -> [E]
//   NUMA 1 (package 0, SNC): hostbridge:2 -> rp3 -> [F]
//   NUMA 2 (package 1): hostbridge:3 -> rp4 -> [G]
//   devices with no parent: [H] on NUMA 0, [U] with unknown NUMA.
NodeTopology Tree() {
  NodeTopology t;
  auto add = [&](std::string id, PcieKind kind, int parent, bool sw, int numa) {
    PcieNode p;
    p.id = std::move(id);
    p.kind = kind;
    p.parent = parent;
    p.is_switch = sw;
    p.numa = numa;
    t.pcie.push_back(p);
    return static_cast<int>(t.pcie.size()) - 1;
  };
  const int hb0 = add("hostbridge:0", PcieKind::kHostBridge, -1, false, 0);  // 0
  const int rp0 = add("0000:00:01.0", PcieKind::kBridge, hb0, false, 0);     // 1
  const int sw0 = add("0000:01:00.0", PcieKind::kBridge, rp0, true, 0);      // 2
  add("0000:02:00.0", PcieKind::kBridge, sw0, false, 0);                     // 3 ds0
  add("0000:02:01.0", PcieKind::kBridge, sw0, false, 0);                     // 4 ds1
  const int ds2 = add("0000:02:02.0", PcieKind::kBridge, sw0, false, 0);     // 5
  const int sw1 = add("0000:05:00.0", PcieKind::kBridge, ds2, true, 0);      // 6
  add("0000:06:00.0", PcieKind::kBridge, sw1, false, 0);                     // 7 ds3
  add("0000:00:02.0", PcieKind::kBridge, hb0, false, 0);                     // 8 rp1
  const int hb1 = add("hostbridge:1", PcieKind::kHostBridge, -1, false, 0);  // 9
  add("0000:20:01.0", PcieKind::kBridge, hb1, false, 0);                     // 10 rp2
  const int hb2 = add("hostbridge:2", PcieKind::kHostBridge, -1, false, 1);  // 11
  add("0000:40:01.0", PcieKind::kBridge, hb2, false, 1);                     // 12 rp3
  const int hb3 = add("hostbridge:3", PcieKind::kHostBridge, -1, false, 2);  // 13
  add("0000:80:01.0", PcieKind::kBridge, hb3, false, 2);                     // 14 rp4
  return t;
}

struct Dev {
  int parent;
  int numa;
};
const Dev A{3, 0}, B{4, 0}, C{7, 0}, D{8, 0}, E{10, 0}, F{12, 1}, G{14, 2}, H{-1, 0}, U{-1, -1};

struct ClassCase {
  const char* name;
  Dev a, b;
  LinkClass expected;
};

TEST(ClassifyPathTest, Table) {
  const NodeTopology t = Tree();
  const std::vector<ClassCase> cases = {
      // A and B: one downstream port each below switch sw0: one bridge between each and the LCA.
      {"same switch, two ports", A, B, LinkClass::kPIX},
      {"same downstream port", A, A, LinkClass::kPIX},
      // C is below sw1 -> ds3: ds3, sw1, ds2 lie between C and sw0: three bridges.
      {"nested switch", A, C, LinkClass::kPXB},
      // A and D meet at hostbridge:0.
      {"same host bridge", A, D, LinkClass::kPHB},
      // A and E: different host bridges, both NUMA 0.
      {"other host bridge, same NUMA", A, E, LinkClass::kNODE},
      // F is on NUMA 1: same package (SNC) still prints SYS, as nvidia-smi does.
      {"other NUMA, same package", A, F, LinkClass::kSYS},
      {"other socket", A, G, LinkClass::kSYS},
      // No PCIe path known (flattened VM): locality decides.
      {"no tree, same NUMA", H, D, LinkClass::kNODE},
      {"unknown NUMA", U, H, LinkClass::kSYS},
      {"unknown both", U, U, LinkClass::kSYS},
  };
  for (const ClassCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(ClassifyPath(t, c.a.parent, c.a.numa, c.b.parent, c.b.numa), c.expected);
    EXPECT_EQ(ClassifyPath(t, c.b.parent, c.b.numa, c.a.parent, c.a.numa), c.expected) << "symmetric";
  }
}

TEST(ClassifyPathTest, SwitchGroups) {
  const NodeTopology t = Tree();
  EXPECT_EQ(t.SwitchCount(), 2);
  EXPECT_EQ(t.SwitchOf(A.parent), 2);  // outermost switch: sw0
  EXPECT_EQ(t.SwitchOf(C.parent), 2);
  EXPECT_EQ(t.SwitchOf(D.parent), -1);
  EXPECT_EQ(t.SwitchOf(-1), -1);
}

TEST(LinkTokenTest, RoundTrip) {
  const std::vector<std::pair<std::string, Link>> cases = {
      {"X", {LinkClass::kSelf, Fabric::kNone, 0}},   {"NV18", {LinkClass::kNV, Fabric::kNvlink, 18}},
      {"NV1", {LinkClass::kNV, Fabric::kNvlink, 1}}, {"XGMI", {LinkClass::kNV, Fabric::kXgmi, 0}},
      {"PIX", {LinkClass::kPIX, Fabric::kNone, 0}},  {"PXB", {LinkClass::kPXB, Fabric::kNone, 0}},
      {"PHB", {LinkClass::kPHB, Fabric::kNone, 0}},  {"NODE", {LinkClass::kNODE, Fabric::kNone, 0}},
      {"SYS", {LinkClass::kSYS, Fabric::kNone, 0}},
  };
  for (const auto& [token, link] : cases) {
    SCOPED_TRACE(token);
    EXPECT_EQ(link.Token(), token);
    auto parsed = Link::ParseToken(token);
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, link);
  }
  for (const char* bad : {"", "NV", "NV0", "NV-1", "NVx", "NV12a", "nv12", "pix", "SYSX", "NV99999"}) {
    EXPECT_FALSE(Link::ParseToken(bad).has_value()) << bad;
  }
}

TEST(NaturalLessTest, NumbersCompareByValue) {
  EXPECT_TRUE(NaturalLess("mlx5_2", "mlx5_10"));
  EXPECT_FALSE(NaturalLess("mlx5_10", "mlx5_2"));
  EXPECT_TRUE(NaturalLess("mlx5_0", "mlx5_bond_0"));
  EXPECT_TRUE(NaturalLess("mlx5_9", "mlx5_18"));
  EXPECT_FALSE(NaturalLess("mlx5_1", "mlx5_1"));
  EXPECT_TRUE(NaturalLess("a", "ab"));
  EXPECT_TRUE(NaturalLess("rdmap16s27", "rdmap144s27"));
  EXPECT_TRUE(NaturalLess("x99999999999999999999", "x100000000000000000000"));  // no overflow
}

TEST(NormalizePciBusIdTest, Table) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"0000:4e:00.0", "0000:4e:00.0"},
      {"0000:4E:00.0", "0000:4e:00.0"},
      {"00000000:83:00.0", "0000:83:00.0"},  // NVML's 8-digit domain
      {"83:00.0", "0000:83:00.0"},           // no domain
      {"0004:04:00.0", "0004:04:00.0"},
      {"ffff:ff:01.0", "ffff:ff:01.0"},
      {"10000:01:00.0", "10000:01:00.0"},  // VMD domain
      {"", ""},
      {"zz:00.0", ""},
      {"0000:100:00.0", ""},
      {"0000:00:20.0", ""},
      {"0000:00:00.8", ""},
      {"0000:00:00", ""},
      {"0000:00.0", "0000:00:00.0"},
      {"123456789:00:00.0", ""},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(NormalizePciBusId(in), out) << in;
}

TEST(DeriveLinksTest, OrdersGpusByBusIdAndNicsRdmaFirstInNaturalOrder) {
  NodeTopology t = Tree();
  auto gpu = [](std::string bus, int parent) {
    Gpu g;
    g.pci_bus_id = std::move(bus);
    g.parent = parent;
    g.numa = 0;
    return g;
  };
  t.gpus = {gpu("0000:07:00.0", 7), gpu("0000:03:00.0", 3), gpu("0000:04:00.0", 4)};
  // Peer declared on the GPU at position 0 (bus 07) towards position 1 (bus 03).
  t.gpus[0].peers = {GpuPeer{1, Fabric::kNvlink, 4, 100000, false}};
  t.gpus[1].peers = {GpuPeer{0, Fabric::kNvlink, 4, 100000, false}};
  auto nic = [](std::string name, bool rdma, int parent) {
    Nic n;
    n.name = std::move(name);
    n.rdma = rdma;
    n.parent = parent;
    n.numa = 0;
    n.pci_bus_id = "0000:99:00.0";
    return n;
  };
  t.nics = {nic("eth0", false, 8), nic("mlx5_10", true, 4), nic("mlx5_2", true, 3), nic("", true, 10)};
  DeriveLinks(t);
  ASSERT_EQ(t.gpus.size(), 3u);
  EXPECT_EQ(t.gpus[0].pci_bus_id, "0000:03:00.0");
  EXPECT_EQ(t.gpus[2].pci_bus_id, "0000:07:00.0");
  EXPECT_EQ(t.gpus[2].index, 2);
  // The peer relation followed the renumbering: bus 03 (now 0) <-> bus 07 (now 2).
  ASSERT_EQ(t.gpus[0].peers.size(), 1u);
  EXPECT_EQ(t.gpus[0].peers[0].gpu, 2);
  EXPECT_EQ(t.gpu_gpu.at(0, 2).Token(), "NV4");
  EXPECT_EQ(t.gpu_gpu.at(0, 1).Token(), "PIX");  // ds0 and ds1 of sw0
  EXPECT_EQ(t.gpu_gpu.at(1, 1).Token(), "X");
  std::vector<std::string> names;
  for (const Nic& n : t.nics) names.push_back(n.DisplayName());
  EXPECT_EQ(names, (std::vector<std::string>{"mlx5_2", "mlx5_10", "0000:99:00.0", "eth0"}));
  EXPECT_EQ(t.RdmaNicCount(), 3);
  EXPECT_EQ(t.gpu_nic.at(0, 0).Token(), "PIX");   // same downstream port ds0
  EXPECT_EQ(t.gpu_nic.at(0, 1).Token(), "PIX");   // ds0 vs ds1
  EXPECT_EQ(t.gpu_nic.at(2, 0).Token(), "PXB");   // nested switch vs ds0
  EXPECT_EQ(t.gpu_nic.at(0, 2).Token(), "NODE");  // other host bridge
  EXPECT_EQ(t.gpu_nic.at(0, 3).Token(), "PHB");   // rp1 under hostbridge:0
  EXPECT_EQ(t.nic_nic.at(0, 1).Token(), "PIX");
  EXPECT_EQ(t.nic_nic.at(3, 3).Token(), "X");
}

TEST(FingerprintTest, StableAndSensitiveToHardwareOnly) {
  NodeTopology a = Tree();
  NodeTopology b = Tree();
  b.node_name = "other-node";
  b.source = TopologySource::kHwloc;
  b.agent_version = "9.9";
  EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
  EXPECT_EQ(a.Fingerprint().size(), 16u);
  // GPU UUIDs name devices, every node's its own: two nodes of one type stay interchangeable.
  Gpu gpu;
  gpu.pci_bus_id = "0000:1b:00.0";
  gpu.model = "H100";
  gpu.memory_mib = 81559;
  a.gpus.push_back(gpu);
  gpu.uuid = "GPU-5b1f2a3c-0000-4000-8000-000000000001";
  b.gpus.push_back(gpu);
  EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
  b.gpus[0].memory_mib += 1024;
  EXPECT_NE(a.Fingerprint(), b.Fingerprint());
  b = Tree();
  b.pcie[3].is_switch = true;
  EXPECT_NE(a.Fingerprint(), b.Fingerprint());
}

}  // namespace
}  // namespace toposched

namespace toposched {
namespace {

TEST(ToKubernetesNameTest, Table) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"lassen28", "lassen28"}, {"drac-12.grenoble.grid5000.fr", "drac-12.grenoble.grid5000.fr"},
      {"aws__p4d", "aws--p4d"}, {"GPU_Node_7", "gpu-node-7"},
      {"--x--", "x"},           {"", "node"},
      {"___", "node"},          {std::string(300, 'a'), std::string(253, 'a')},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(ToKubernetesName(in), out) << in;
}

}  // namespace
}  // namespace toposched

namespace toposched {
namespace {

// Issue 13: a UUID that names no single GPU must not be published (HAMi's records would then
// name one card for several pods).
TEST(DropUnusableGpuUuidsTest, PlaceholdersAndDuplicatesBecomeUnknown) {
  struct Case {
    std::string name;
    std::vector<std::string> before, after;
    int dropped;
  };
  const std::vector<Case> cases = {
      {"real UUIDs stay", {"GPU-8c1a", "GPU-2f00"}, {"GPU-8c1a", "GPU-2f00"}, 0},
      {"an anonymised export's zero UUID on every GPU",
       {"GPU-00000000-0000-0000-0000-000000000000", "GPU-00000000-0000-0000-0000-000000000000"},
       {"", ""},
       2},
      {"one zero UUID among real ones", {"GPU-0000", "GPU-1234"}, {"", "GPU-1234"}, 1},
      {"a MIG placeholder", {"MIG-00000000-0000"}, {""}, 1},
      {"one UUID on two GPUs: neither keeps it", {"GPU-a", "GPU-b", "GPU-a"}, {"", "GPU-b", ""}, 2},
      {"unknown stays unknown", {"", "GPU-b"}, {"", "GPU-b"}, 0},
      {"a UUID with a zero in it is real", {"GPU-10"}, {"GPU-10"}, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    NodeTopology t;
    for (std::size_t i = 0; i < c.before.size(); ++i) {
      Gpu g;
      g.index = static_cast<int>(i);
      g.uuid = c.before[i];
      t.gpus.push_back(g);
    }
    EXPECT_EQ(DropUnusableGpuUuids(t), c.dropped);
    for (std::size_t i = 0; i < c.after.size(); ++i) EXPECT_EQ(t.gpus[i].uuid, c.after[i]) << i;
  }
  // Every source's last step does it.
  NodeTopology t;
  for (int i = 0; i < 2; ++i) {
    Gpu g;
    g.pci_bus_id = "0000:0" + std::to_string(i) + ":00.0";
    g.uuid = "GPU-same";
    t.gpus.push_back(g);
  }
  DeriveLinks(t);
  EXPECT_EQ(t.gpus[0].uuid, "");
  EXPECT_EQ(t.gpus[1].uuid, "");
}

}  // namespace
}  // namespace toposched
