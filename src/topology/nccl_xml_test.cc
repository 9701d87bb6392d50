#include "toposched/topology/nccl_xml.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace toposched {
namespace {

#ifdef TOPOSCHED_SHARED_TOPOLOGIES
constexpr const char* kSharedTopologies = TOPOSCHED_SHARED_TOPOLOGIES;
#else
constexpr const char* kSharedTopologies = "";
#endif

// The real NCCL/RCCL files live outside the repository (../shared/topologies, see SOURCES.md
// there); tests that need them skip when the checkout has no such folder.
std::optional<std::string> ReadShared(const std::string& name) {
  if (std::string(kSharedTopologies).empty()) return std::nullopt;
  std::ifstream in(std::filesystem::path(kSharedTopologies) / name, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

#define TOPOSCHED_LOAD_OR_SKIP(var, name)                                                     \
  std::string var;                                                                            \
  if (auto loaded_ = ReadShared(name)) {                                                      \
    var = std::move(*loaded_);                                                                \
  } else {                                                                                    \
    GTEST_SKIP() << "shared topology " << (name) << " not found under '" << kSharedTopologies \
                 << "' (TOPOSCHED_SHARED_TOPOLOGIES)";                                        \
  }

NodeTopology ParseOrDie(const std::string& content) {
  Result<NodeTopology> r = ParseNcclXml(content);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
  return r.ok() ? std::move(r).value() : NodeTopology{};
}

int GpuIndex(const NodeTopology& t, const std::string& bus_id) {
  for (const Gpu& g : t.gpus) {
    if (g.pci_bus_id == bus_id) return g.index;
  }
  ADD_FAILURE() << "no GPU " << bus_id;
  return 0;
}

int NicIndex(const NodeTopology& t, const std::string& name) {
  for (std::size_t i = 0; i < t.nics.size(); ++i) {
    if (t.nics[i].DisplayName() == name) return static_cast<int>(i);
  }
  ADD_FAILURE() << "no NIC " << name;
  return 0;
}

std::string GpuGpu(const NodeTopology& t, int a, int b) {
  return t.gpu_gpu.at(a, b).Token();
}
std::string GpuNic(const NodeTopology& t, int g, int n) {
  return t.gpu_nic.at(g, n).Token();
}

// ---- Every shared NCCL file, with counts read off the files by hand (and cross-checked with a
// throwaway ElementTree script): GPUs, RDMA NICs, all NICs, <cpu> NUMA nodes, top-level bridges
// (NCCL's PCIe switches) and all bridges.

struct FileCase {
  const char* file;
  int gpus;
  int rdma_nics;
  int nics;
  int numa;
  int switches;
  int bridges;
};

const FileCase kFiles[] = {
    {"aliyun__hgx-a100-80g_8xA100_4xCX6-bond.nccl.xml", 8, 5, 5, 2, 4, 20},
    {"aws__g5.48xlarge_8xA10G.nccl.xml", 0, 0, 0, 2, 0, 0},  // bare bus ids: not GPUs
    {"aws__p4d.24xlarge_8xA100_4xEFA.nccl.xml", 8, 4, 4, 2, 4, 4},
    {"aws__p4de.24xlarge_8xA100-80G_4xEFA.nccl.xml", 8, 4, 4, 2, 4, 4},
    {"azure__nc-a100-v4_A100_pcie.nccl.xml", 4, 0, 1, 4, 0, 0},
    {"azure__nd-a100-v4_8xA100_8xCX6.nccl.xml", 8, 8, 8, 4, 4, 4},
    {"azure__nd-v100-v2_8xV100_1xIB.nccl.xml", 8, 1, 1, 2, 0, 0},
    {"nebius__h100-vm_8xH100_8xCX7-VF.nccl.xml", 8, 8, 8, 2, 8, 8},
    {"oci__bm.gpu.b4.8_8xA100-80G_flattened.nccl.xml", 8, 8, 8, 4, 4, 4},
    {"oci__bm.gpu.h100.8_kubernetes-variant.nccl.xml", 8, 16, 16, 2, 8, 24},
    {"oci__bm.gpu4.8_8xA100_flattened.nccl.xml", 8, 8, 8, 4, 4, 4},
    {"rccl__mi250_8xgfx90a_8nics.nccl.xml", 8, 8, 8, 2, 4, 22},
    {"rccl__mi250x_16xGCD_8nics.nccl.xml", 16, 8, 8, 4, 4, 28},
    {"rccl__mi300a_4xgfx940_4nics.nccl.xml", 4, 4, 4, 4, 0, 0},
    {"rccl__mi300x_8xgfx942_8xCX7_baremetal.nccl.xml", 8, 8, 8, 2, 8, 24},
    {"rccl__mi300x_8xgfx942_8xCX7_vm.nccl.xml", 8, 8, 8, 2, 0, 0},
    {"rccl__rome_8xMI100_4nics.nccl.xml", 8, 4, 4, 4, 4, 20},
};

// Test listings show the file rather than the struct's bytes.
void PrintTo(const FileCase& c, std::ostream* os) {
  *os << c.file;
}

class NcclXmlFileTest : public testing::TestWithParam<FileCase> {};

TEST_P(NcclXmlFileTest, CountsMatchTheFile) {
  const FileCase& c = GetParam();
  TOPOSCHED_LOAD_OR_SKIP(content, c.file);
  const NodeTopology t = ParseOrDie(content);
  EXPECT_EQ(t.source, TopologySource::kNcclXml);
  EXPECT_TRUE(t.node_name.empty());
  EXPECT_TRUE(t.source_detail.empty());
  EXPECT_EQ(static_cast<int>(t.gpus.size()), c.gpus);
  EXPECT_EQ(t.RdmaNicCount(), c.rdma_nics);
  EXPECT_EQ(static_cast<int>(t.nics.size()), c.nics);
  EXPECT_EQ(static_cast<int>(t.numa_nodes.size()), c.numa);
  EXPECT_EQ(t.SwitchCount(), c.switches);
  EXPECT_EQ(static_cast<int>(t.pcie.size()), c.bridges);
  // Invariants every source must keep.
  EXPECT_EQ(t.gpu_gpu.rows, c.gpus);
  EXPECT_EQ(t.gpu_nic.cols, c.nics);
  for (std::size_t i = 0; i < t.numa_nodes.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(t.numa_nodes[i - 1].id, t.numa_nodes[i].id);
    }
    EXPECT_EQ(t.numa_nodes[i].package, -1);
  }
  for (std::size_t i = 0; i < t.pcie.size(); ++i) {
    EXPECT_LT(t.pcie[i].parent, static_cast<int>(i)) << "parents before children";
    EXPECT_EQ(t.pcie[i].kind, PcieKind::kBridge) << "NCCL records no host bridges";
    EXPECT_EQ(t.pcie[i].is_switch, t.pcie[i].parent < 0);
  }
  for (const Gpu& g : t.gpus) {
    EXPECT_FALSE(g.pci_bus_id.empty());
    EXPECT_EQ(g.package, -1);
    for (const GpuPeer& p : g.peers) {
      ASSERT_GE(p.gpu, 0);
      ASSERT_LT(p.gpu, c.gpus);
      EXPECT_NE(p.gpu, g.index);
      // Symmetric: the peer lists this GPU back with the same link.
      const auto& back = t.gpus[static_cast<std::size_t>(p.gpu)].peers;
      auto it = std::find_if(back.begin(), back.end(), [&](const GpuPeer& q) { return q.gpu == g.index; });
      ASSERT_NE(it, back.end());
      EXPECT_EQ(it->links, p.links);
      EXPECT_EQ(it->fabric, p.fabric);
    }
  }
}

std::string FileCaseName(const testing::TestParamInfo<FileCase>& info) {
  std::string name = info.param.file;
  name = name.substr(0, name.find(".nccl.xml"));
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(SharedFiles, NcclXmlFileTest, testing::ValuesIn(kFiles), FileCaseName);

// The table must cover every NCCL file in the folder, so a new file cannot go untested.
TEST(NcclXmlTest, TableCoversEverySharedFile) {
  const std::filesystem::path dir = kSharedTopologies;
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) {
    GTEST_SKIP() << "shared topologies folder '" << kSharedTopologies << "' not found";
  }
  std::set<std::string> on_disk, in_table;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 9 && name.substr(name.size() - 9) == ".nccl.xml") on_disk.insert(name);
  }
  for (const FileCase& c : kFiles) in_table.insert(c.file);
  EXPECT_EQ(on_disk, in_table);
  EXPECT_EQ(on_disk.size(), 17u);
}

// ---- Link classes checked by hand against the files.

TEST(NcclXmlTest, AwsP4dFakeSwitchesGivePixNodeSys) {
  TOPOSCHED_LOAD_OR_SKIP(content, "aws__p4d.24xlarge_8xA100_4xEFA.nccl.xml");
  const NodeTopology t = ParseOrDie(content);
  ASSERT_EQ(t.gpus.size(), 8u);
  ASSERT_EQ(t.nics.size(), 4u);
  const int gpu0 = GpuIndex(t, "0000:10:1c.0");
  const int gpu2 = GpuIndex(t, "0000:20:1c.0");
  const int gpu4 = GpuIndex(t, "0000:90:1c.0");
  EXPECT_EQ(gpu0, 0);
  // Nameless NICs sort by bus id: NIC0 is 0000:10:1b.0, in fake switch ffff:ff:01.0 with GPU0.
  const int nic0 = NicIndex(t, "0000:10:1b.0");
  EXPECT_EQ(nic0, 0);
  // GPU0 and NIC0 hang directly off the same (fake) switch: no bridge between them -> PIX.
  EXPECT_EQ(GpuNic(t, gpu0, nic0), "PIX");
  // GPU2 is under switch ffff:ff:02.0, same <cpu numaid=0>; NCCL has no host bridges -> NODE.
  EXPECT_EQ(GpuGpu(t, gpu0, gpu2), "NODE");
  // GPU4 is under <cpu numaid=1> -> SYS.
  EXPECT_EQ(GpuGpu(t, gpu0, gpu4), "SYS");
  EXPECT_EQ(GpuGpu(t, gpu0, GpuIndex(t, "0000:10:1d.0")), "PIX");

  const Nic& nic = t.nics[static_cast<std::size_t>(nic0)];
  EXPECT_TRUE(nic.rdma) << "a nameless NIC function in an NCCL file is NCCL's network transport";
  EXPECT_TRUE(nic.name.empty());
  EXPECT_EQ(nic.kind, NicKind::kEfa);  // vendor 0x1d0f
  EXPECT_EQ(nic.vendor_id, 0x1d0f);
  EXPECT_EQ(nic.device_id, 0xefa0);
  // 8 GT/s x16 with 128b/130b encoding.
  EXPECT_NEAR(nic.link_gbps, 8.0 * 16 * 128 / 130 / 8, 1e-9);
  EXPECT_EQ(nic.link_width, 16);

  // affinity "000000ff,ffff0000,00ffffff" = bits 0-23 and 48-71; numa 1 is the complement.
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  EXPECT_EQ(t.numa_nodes[0].cpus, "0-23,48-71");
  EXPECT_EQ(t.numa_nodes[1].cpus, "24-47,72-95");
  EXPECT_EQ(t.gpus[static_cast<std::size_t>(gpu4)].cpus, "24-47,72-95");
  EXPECT_EQ(t.gpus[static_cast<std::size_t>(gpu0)].vendor, GpuVendor::kNvidia);
  EXPECT_EQ(t.gpus[static_cast<std::size_t>(gpu0)].device_id, 0x20b0);
  EXPECT_EQ(t.pcie[0].id, "ffff:ff:01.0");
  EXPECT_EQ(t.pcie[0].vendor_id, 0xffff);
}

TEST(NcclXmlTest, OciH100NvSwitchesGiveNv18AndDualPortNicsShareABusId) {
  TOPOSCHED_LOAD_OR_SKIP(content, "oci__bm.gpu.h100.8_kubernetes-variant.nccl.xml");
  const NodeTopology t = ParseOrDie(content);
  ASSERT_EQ(t.gpus.size(), 8u);
  // Every GPU lists 5+5+4+4 links to four NVSwitches (tclass 0x068000): NV18 between all pairs,
  // as nvidia-smi prints on HGX H100.
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) EXPECT_EQ(GpuGpu(t, a, b), a == b ? "X" : "NV18") << a << "," << b;
  }
  ASSERT_EQ(t.gpus[0].peers.size(), 7u);
  EXPECT_TRUE(t.gpus[0].peers[0].via_switch);
  EXPECT_EQ(t.gpus[0].peers[0].bandwidth_mbps, 0u);

  // Dual-port CX-7 0000:0c:00.0 has two <net>: mlx5_18 and mlx5_19, two NICs on one function.
  // Natural name order puts mlx5_18 first (mlx5_18 .. mlx5_33).
  ASSERT_EQ(t.nics.size(), 16u);
  EXPECT_EQ(t.nics[0].name, "mlx5_18");
  EXPECT_EQ(t.nics[1].name, "mlx5_19");
  EXPECT_EQ(t.nics[15].name, "mlx5_33");
  EXPECT_EQ(t.nics[0].pci_bus_id, "0000:0c:00.0");
  EXPECT_EQ(t.nics[1].pci_bus_id, "0000:0c:00.0");
  EXPECT_EQ(t.nic_nic.at(0, 1).Token(), "PIX");
  EXPECT_EQ(t.nics[0].kind, NicKind::kRoce);  // mlx5 on an Ethernet-class (0x0200) function
  EXPECT_EQ(t.nics[0].link_rate_mbps, 200000u);
  EXPECT_TRUE(t.nics[0].netdevs.empty());
  // GPU0 0000:0f:00.0 sits below port 0d of switch 08, mlx5_18 below port 0a of the same switch:
  // one bridge on each side of the common switch -> PIX.
  EXPECT_EQ(GpuNic(t, GpuIndex(t, "0000:0f:00.0"), NicIndex(t, "mlx5_18")), "PIX");
  EXPECT_EQ(GpuNic(t, GpuIndex(t, "0000:0f:00.0"), NicIndex(t, "mlx5_26")), "NODE");
  // 32 GT/s x16, 128b/130b.
  EXPECT_NEAR(t.gpus[0].link_gbps, 32.0 * 16 * 128 / 130 / 8, 1e-9);
}

TEST(NcclXmlTest, AliyunSixSwitchesTimesTwoGiveNv12) {
  TOPOSCHED_LOAD_OR_SKIP(content, "aliyun__hgx-a100-80g_8xA100_4xCX6-bond.nccl.xml");
  const NodeTopology t = ParseOrDie(content);
  ASSERT_EQ(t.gpus.size(), 8u);
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) EXPECT_EQ(GpuGpu(t, a, b), a == b ? "X" : "NV12");
  }
  // mlx5_bond_0 hangs directly off <cpu numaid=0>, GPU0 below switch 0c: same NUMA only -> NODE.
  EXPECT_EQ(GpuNic(t, GpuIndex(t, "0000:13:00.0"), NicIndex(t, "mlx5_bond_0")), "NODE");
  // GPU1 19 is below 17 below 15; mlx5_bond_1 1a is directly below 15: one bridge on the GPU
  // side, none on the NIC side -> PIX.
  EXPECT_EQ(GpuNic(t, GpuIndex(t, "0000:19:00.0"), NicIndex(t, "mlx5_bond_1")), "PIX");
  // GPU0 13 (below 11, 0e) and mlx5_bond_1 (below 15) meet at switch 0c: two bridges -> PXB.
  EXPECT_EQ(GpuNic(t, GpuIndex(t, "0000:13:00.0"), NicIndex(t, "mlx5_bond_1")), "PXB");
  const Nic& bond = t.nics[static_cast<std::size_t>(NicIndex(t, "mlx5_bond_0"))];
  EXPECT_TRUE(bond.rdma);
  EXPECT_EQ(bond.kind, NicKind::kRoce);
  EXPECT_EQ(bond.parent, -1);
  // affinity "00000000,ffffffff,00000000,ffffffff" -> 0-31 and 64-95.
  EXPECT_EQ(t.numa_nodes[0].cpus, "0-31,64-95");
}

TEST(NcclXmlTest, Mi300xBaremetalXgmiEverywhereAndPxbToItsNic) {
  TOPOSCHED_LOAD_OR_SKIP(content, "rccl__mi300x_8xgfx942_8xCX7_baremetal.nccl.xml");
  const NodeTopology t = ParseOrDie(content);
  ASSERT_EQ(t.gpus.size(), 8u);
  for (int a = 0; a < 8; ++a) {
    EXPECT_EQ(t.gpus[static_cast<std::size_t>(a)].vendor, GpuVendor::kAmd);
    for (int b = 0; b < 8; ++b) EXPECT_EQ(GpuGpu(t, a, b), a == b ? "X" : "XGMI");
  }
  EXPECT_EQ(t.gpus[0].peers[0].fabric, Fabric::kXgmi);
  EXPECT_EQ(t.gpus[0].peers[0].links, 1);
  // GPU0 0c sits below bridges 0a and 08 of switch 05; mlx5_0 (07) sits directly below 05.
  // Bridges strictly between each device and the common bridge 05: 2 on the GPU side, 0 on the
  // NIC side; more than one -> PXB.
  const int gpu0 = GpuIndex(t, "0000:0c:00.0");
  EXPECT_EQ(GpuNic(t, gpu0, NicIndex(t, "mlx5_0")), "PXB");
  // mlx5_1 is in the next switch tree of the same <cpu> -> NODE; mlx5_4 is on the other -> SYS.
  EXPECT_EQ(GpuNic(t, gpu0, NicIndex(t, "mlx5_1")), "NODE");
  EXPECT_EQ(GpuNic(t, gpu0, NicIndex(t, "mlx5_4")), "SYS");
  EXPECT_EQ(t.nics[0].kind, NicKind::kInfiniband);  // class 0x020700
  EXPECT_EQ(t.nics[0].link_rate_mbps, 400000u);
  EXPECT_EQ(t.SwitchOf(t.gpus[static_cast<std::size_t>(gpu0)].parent),
            t.SwitchOf(t.nics[static_cast<std::size_t>(NicIndex(t, "mlx5_0"))].parent));
}

TEST(NcclXmlTest, AzureNcSelfNvlinkIgnoredAndEth0IsNotRdma) {
  TOPOSCHED_LOAD_OR_SKIP(content, "azure__nc-a100-v4_A100_pcie.nccl.xml");
  const NodeTopology t = ParseOrDie(content);
  ASSERT_EQ(t.gpus.size(), 4u);
  // Each GPU lists an NVLink to its own bus id: ignored, so no NV peers; every GPU is on its own
  // <cpu> -> SYS.
  for (int a = 0; a < 4; ++a) {
    EXPECT_TRUE(t.gpus[static_cast<std::size_t>(a)].peers.empty());
    for (int b = 0; b < 4; ++b) EXPECT_EQ(GpuGpu(t, a, b), a == b ? "X" : "SYS");
  }
  // link_speed="" link_width="0": unknown.
  EXPECT_EQ(t.gpus[0].link_gbps, 0);
  ASSERT_EQ(t.nics.size(), 1u);
  const Nic& eth0 = t.nics[0];
  EXPECT_EQ(eth0.name, "eth0");
  EXPECT_FALSE(eth0.rdma);
  EXPECT_EQ(eth0.kind, NicKind::kEthernet);
  EXPECT_TRUE(eth0.pci_bus_id.empty());
  EXPECT_EQ(eth0.parent, -1);
  EXPECT_EQ(eth0.numa, 0);
  EXPECT_EQ(eth0.netdevs, std::vector<std::string>{"eth0"});
  EXPECT_EQ(eth0.link_rate_mbps, 100000u);
  EXPECT_EQ(t.RdmaNicCount(), 0);
  EXPECT_EQ(GpuNic(t, 0, 0), "NODE");  // GPU0 and eth0 share <cpu numaid=0>
  EXPECT_EQ(t.numa_nodes[0].cpus, "0-23");
}

TEST(NcclXmlTest, NebiusNicNamesAndOneGpuOneNicPerSwitch) {
  TOPOSCHED_LOAD_OR_SKIP(content, "nebius__h100-vm_8xH100_8xCX7-VF.nccl.xml");
  const NodeTopology t = ParseOrDie(content);
  ASSERT_EQ(t.nics.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const Nic& n = t.nics[static_cast<std::size_t>(i)];
    EXPECT_EQ(n.DisplayName(), "mlx5_" + std::to_string(i));
    EXPECT_TRUE(n.rdma);
    EXPECT_EQ(n.kind, NicKind::kInfiniband);
    EXPECT_EQ(n.link_rate_mbps, 400000u);
  }
  // GPU 8d and mlx5_4 (8c) share virtual bridge 8a -> PIX; no <gpu> tags, so no NVLink info:
  // two GPUs in different bridges of one <cpu> -> NODE.
  EXPECT_EQ(GpuNic(t, GpuIndex(t, "0000:8d:00.0"), NicIndex(t, "mlx5_4")), "PIX");
  EXPECT_EQ(GpuNic(t, GpuIndex(t, "0000:8d:00.0"), NicIndex(t, "mlx5_0")), "SYS");
  EXPECT_EQ(GpuGpu(t, 0, 1), "NODE");
  EXPECT_TRUE(t.gpus[0].peers.empty());
  // affinity with five words: numa 0 = bits 0-79, numa 1 = bits 80-159.
  EXPECT_EQ(t.numa_nodes[0].cpus, "0-79");
  EXPECT_EQ(t.numa_nodes[1].cpus, "80-159");
}

// Issue 16: a <pci> with no class is not a GPU (the g5 file's nine bare bus ids stand for eight
// GPUs and something else; the file does not say which). The NUMA nodes are still read.
TEST(NcclXmlTest, AwsG5ClasslessLeavesAreNotGpus) {
  TOPOSCHED_LOAD_OR_SKIP(content, "aws__g5.48xlarge_8xA10G.nccl.xml");
  const NodeTopology t = ParseOrDie(content);
  EXPECT_TRUE(t.gpus.empty());
  EXPECT_TRUE(t.nics.empty());
  EXPECT_EQ(t.numa_nodes.size(), 2u);
  // With a class, the same leaf is a GPU.
  const NodeTopology classed = ParseOrDie(
      "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:00:16.0\" class=\"0x030200\" "
      "vendor=\"0x10de\"/>"
      "<pci busid=\"0000:00:17.0\"/></cpu></system>");
  ASSERT_EQ(classed.gpus.size(), 1u);
  EXPECT_EQ(classed.gpus[0].pci_bus_id, "0000:00:16.0");
}

TEST(NcclXmlTest, Mi300aSlingshotSpeedClampAndSparseAffinity) {
  TOPOSCHED_LOAD_OR_SKIP(content, "rccl__mi300a_4xgfx940_4nics.nccl.xml");
  const NodeTopology t = ParseOrDie(content);
  ASSERT_EQ(t.nics.size(), 4u);
  const Nic& cxi0 = t.nics[0];
  EXPECT_EQ(cxi0.name, "cxi0");
  EXPECT_TRUE(cxi0.rdma);
  EXPECT_EQ(cxi0.kind, NicKind::kSlingshot);
  // speed="200000000" cannot be Mb/s (200 Tb/s); read as kb/s -> 200 Gb/s.
  EXPECT_EQ(cxi0.link_rate_mbps, 200000u);
  // 16.0 GT/s x16.
  EXPECT_NEAR(cxi0.link_gbps, 16.0 * 16 * 128 / 130 / 8, 1e-9);
  // numaids appear as 2, 3, 0, 1 and come out sorted.
  ASSERT_EQ(t.numa_nodes.size(), 4u);
  EXPECT_EQ(t.numa_nodes[0].id, 0);
  EXPECT_EQ(t.numa_nodes[3].id, 3);
  // numa 2: "000000ff,ffff0000,00000000,000000ff,ffff0000,00000000" -> 48-71 and 144-167.
  EXPECT_EQ(t.numa_nodes[2].cpus, "48-71,144-167");
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b) EXPECT_EQ(GpuGpu(t, a, b), a == b ? "X" : "XGMI");
  }
  // Each APU and its Cassini NIC hang directly off the same <cpu> -> NODE.
  EXPECT_EQ(GpuNic(t, GpuIndex(t, "0000:02:00.0"), NicIndex(t, "cxi2")), "NODE");
}

TEST(NcclXmlTest, AzureNdV100ClassOnlyDevices) {
  TOPOSCHED_LOAD_OR_SKIP(content, "azure__nd-v100-v2_8xV100_1xIB.nccl.xml");
  const NodeTopology t = ParseOrDie(content);
  ASSERT_EQ(t.nics.size(), 1u);
  // class 0x020700 without vendor or <nic>: one nameless InfiniBand NIC, shown by bus id.
  EXPECT_EQ(t.nics[0].DisplayName(), "0101:00:00.0");
  EXPECT_EQ(t.nics[0].kind, NicKind::kInfiniband);
  EXPECT_TRUE(t.nics[0].rdma);
  EXPECT_EQ(t.gpus[0].vendor, GpuVendor::kNvidia);  // class 0x0302 without vendor
  EXPECT_EQ(t.gpus[0].pci_bus_id, "0001:00:00.0");
}

TEST(NcclXmlTest, RcclMi250XgmiCountsAndRomeClassOnlyAmdGpus) {
  {
    TOPOSCHED_LOAD_OR_SKIP(content, "rccl__mi250_8xgfx90a_8nics.nccl.xml");
    const NodeTopology t = ParseOrDie(content);
    // 0000:32:00.0 lists 0000:35:00.0 with count 4 and vice versa: 4 links, not 8.
    const Gpu& g = t.gpus[static_cast<std::size_t>(GpuIndex(t, "0000:32:00.0"))];
    const int peer = GpuIndex(t, "0000:35:00.0");
    auto it = std::find_if(g.peers.begin(), g.peers.end(), [&](const GpuPeer& p) { return p.gpu == peer; });
    ASSERT_NE(it, g.peers.end());
    EXPECT_EQ(it->fabric, Fabric::kXgmi);
    EXPECT_EQ(it->links, 4);
    EXPECT_FALSE(it->via_switch);
    EXPECT_EQ(GpuGpu(t, g.index, peer), "XGMI");
    // 0000:32:00.0 has no xGMI to 0000:b3:00.0: PCIe path, different <cpu> -> SYS.
    EXPECT_EQ(GpuGpu(t, g.index, GpuIndex(t, "0000:b3:00.0")), "SYS");
  }
  {
    TOPOSCHED_LOAD_OR_SKIP(content, "rccl__rome_8xMI100_4nics.nccl.xml");
    const NodeTopology t = ParseOrDie(content);
    for (const Gpu& g : t.gpus) EXPECT_EQ(g.vendor, GpuVendor::kAmd) << g.pci_bus_id;  // class 0x0380, gcn
  }
}

// ---- Inline fixtures.

Result<NodeTopology> Parse(const std::string& s) {
  return ParseNcclXml(s);
}

bool ErrorContains(const Result<NodeTopology>& r, const std::string& needle) {
  return !r.ok() && r.error().message().find(needle) != std::string::npos;
}

TEST(NcclXmlTest, TruncatedXmlReportsTheLine) {
  const auto r = Parse("<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:01:00.0\" cl");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(ErrorContains(r, "line 3")) << r.error().message();
  EXPECT_TRUE(ErrorContains(r, "malformed")) << r.error().message();
}

TEST(NcclXmlTest, WrongRootIsRejected) {
  const auto r = Parse(
      "<?xml version=\"1.0\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
      "<topology version=\"2.0\"><object type=\"Machine\"/></topology>\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(),
            "not an NCCL topology: root element is <topology>, expected <system version=...>");
  EXPECT_TRUE(ErrorContains(Parse("<system><cpu numaid=\"0\"/></system>"), "without a version"));
}

TEST(NcclXmlTest, EmptyAndGarbageAreErrors) {
  EXPECT_FALSE(Parse("").ok());
  EXPECT_FALSE(Parse("  \n\t ").ok());
  const std::string png("\x89PNG\r\n\x1a\n\0\0\0\rIHDR\xff\xfe<<>>\x01", 24);
  EXPECT_FALSE(Parse(png).ok());
  EXPECT_FALSE(Parse("\x89PNG\r\n\x1a\n garbage \xff\xfe").ok());
  EXPECT_FALSE(Parse("<<<<>>>></></></>").ok());
  const char with_nul[] = "<system version=\"1\">\0</system>";
  EXPECT_TRUE(ErrorContains(Parse(std::string(with_nul, sizeof with_nul - 1)), "NUL"));
}

TEST(NcclXmlTest, MissingNumaidIsAnError) {
  const auto r = Parse(
      "<system version=\"1\"><cpu affinity=\"ff\"><pci busid=\"0000:01:00.0\" class=\"0x030200\"/>"
      "</cpu></system>");
  EXPECT_TRUE(ErrorContains(r, "numaid")) << (r.ok() ? "parsed" : r.error().message());
  EXPECT_TRUE(ErrorContains(Parse("<system version=\"1\"><cpu numaid=\"zero\"/></system>"), "numaid"));
}

TEST(NcclXmlTest, InvalidOrDuplicateDeviceBusIdsAreErrors) {
  EXPECT_TRUE(ErrorContains(Parse("<system version=\"1\"><cpu numaid=\"0\">"
                                  "<pci busid=\"not-a-bus-id\" class=\"0x030200\" vendor=\"0x10de\"/>"
                                  "</cpu></system>"),
                            "GPU with invalid PCI bus id"));
  EXPECT_TRUE(ErrorContains(Parse("<system version=\"1\"><cpu numaid=\"0\">"
                                  "<pci class=\"0x020700\"/></cpu></system>"),
                            "NIC with invalid PCI bus id"));
  EXPECT_TRUE(ErrorContains(Parse("<system version=\"1\"><cpu numaid=\"0\">"
                                  "<pci busid=\"0000:01:00.0\" class=\"0x030200\"/></cpu>"
                                  "<cpu numaid=\"1\"><pci busid=\"01:00.0\" class=\"0x030200\"/></cpu>"
                                  "</system>"),
                            "GPU bus id 0000:01:00.0 appears twice"));
}

TEST(NcclXmlTest, NoGpusIsValid) {
  const auto r = Parse("<system version=\"1\"><cpu numaid=\"0\" affinity=\"0000000f\"/></system>");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->gpus.empty());
  ASSERT_EQ(r->numa_nodes.size(), 1u);
  EXPECT_EQ(r->numa_nodes[0].cpus, "0-3");
}

// Builds a file with two GPUs whose <gpu> element holds `links_a` / `links_b`.
std::string TwoGpus(const std::string& links_a, const std::string& links_b) {
  return "<system version=\"1\"><cpu numaid=\"0\" affinity=\"ff\">"
         "<pci busid=\"0000:0a:00.0\" class=\"0x030200\" vendor=\"0x10de\"><gpu dev=\"0\">" +
         links_a +
         "</gpu></pci>"
         "<pci busid=\"0000:0b:00.0\" class=\"0x030200\" vendor=\"0x10de\"><gpu dev=\"1\">" +
         links_b + "</gpu></pci></cpu></system>";
}

std::string NvSwitchLinks(int switches, int per_switch) {
  std::string s;
  for (int i = 0; i < switches; ++i) {
    s += "<nvlink target=\"0000:c" + std::to_string(i) + ":00.0\" count=\"" + std::to_string(per_switch) +
         "\" tclass=\"0x068000\"/>";
  }
  return s;
}

TEST(NcclXmlTest, NvSwitchPairGetsTheSmallerSwitchLinkTotal) {
  // GPU A reaches the switch plane with 6 x 2 = 12 links, GPU B with 3 x 2 = 6: B's 6 links are
  // the bottleneck of any A-B transfer -> NV6.
  const NodeTopology t = ParseOrDie(TwoGpus(NvSwitchLinks(6, 2), NvSwitchLinks(3, 2)));
  ASSERT_EQ(t.gpus.size(), 2u);
  EXPECT_EQ(GpuGpu(t, 0, 1), "NV6");
  EXPECT_EQ(GpuGpu(t, 1, 0), "NV6");
  ASSERT_EQ(t.gpus[0].peers.size(), 1u);
  EXPECT_TRUE(t.gpus[0].peers[0].via_switch);
  EXPECT_EQ(t.gpus[0].peers[0].links, 6);
  EXPECT_EQ(t.gpus[0].peers[0].fabric, Fabric::kNvlink);
}

TEST(NcclXmlTest, NvSwitchNeedsBothSides) {
  // Only A is attached to switches: B cannot be reached through them.
  const NodeTopology t = ParseOrDie(TwoGpus(NvSwitchLinks(6, 2), ""));
  EXPECT_EQ(GpuGpu(t, 0, 1), "NODE");
  EXPECT_TRUE(t.gpus[0].peers.empty());
}

TEST(NcclXmlTest, DirectNvlinkListedOnBothSidesIsNotDoubled) {
  const std::string to_b = "<nvlink target=\"0000:0b:00.0\" count=\"4\" tclass=\"0x030200\"/>";
  const std::string to_a = "<nvlink target=\"0000:0a:00.0\" count=\"2\" tclass=\"0x030200\"/>";
  // Both sides (disagreeing): the larger count, symmetric.
  NodeTopology t = ParseOrDie(TwoGpus(to_b, to_a));
  EXPECT_EQ(GpuGpu(t, 0, 1), "NV4");
  EXPECT_EQ(GpuGpu(t, 1, 0), "NV4");
  EXPECT_FALSE(t.gpus[0].peers[0].via_switch);
  // One side only: still symmetric.
  t = ParseOrDie(TwoGpus("", to_a));
  EXPECT_EQ(GpuGpu(t, 0, 1), "NV2");
  EXPECT_EQ(GpuGpu(t, 1, 0), "NV2");
  // Targets that are neither a GPU of the file nor an NVSwitch (a POWER9 CPU) are ignored.
  t = ParseOrDie(TwoGpus("<nvlink target=\"0000:ff:00.0\" count=\"3\" tclass=\"0x060400\"/>", ""));
  EXPECT_TRUE(t.gpus[0].peers.empty());
}

TEST(NcclXmlTest, DuplicateNumaidsMerge) {
  const NodeTopology t = ParseOrDie(
      "<system version=\"1\">"
      "<cpu numaid=\"0\" affinity=\"0000000f\"><pci busid=\"0000:01:00.0\" class=\"0x030200\"/></cpu>"
      "<cpu numaid=\"0\" affinity=\"000000f0\"><pci busid=\"0000:02:00.0\" class=\"0x030200\"/></cpu>"
      "</system>");
  ASSERT_EQ(t.numa_nodes.size(), 1u);
  EXPECT_EQ(t.numa_nodes[0].cpus, "0-7");
  EXPECT_EQ(t.gpus[0].cpus, "0-7");
  EXPECT_EQ(GpuGpu(t, 0, 1), "NODE");
}

TEST(NcclXmlTest, UnknownNumaKeepsTheCpuAffinity) {
  // NCCL writes numaid="-1" when sysfs has no NUMA node for the device.
  const NodeTopology t = ParseOrDie(
      "<system version=\"1\"><cpu numaid=\"-1\" affinity=\"00000003\">"
      "<pci busid=\"0000:01:00.0\" class=\"0x030200\"/><pci busid=\"0000:02:00.0\" class=\"0x030200\"/>"
      "</cpu></system>");
  EXPECT_TRUE(t.numa_nodes.empty());
  ASSERT_EQ(t.gpus.size(), 2u);
  EXPECT_EQ(t.gpus[0].numa, -1);
  EXPECT_EQ(t.gpus[0].cpus, "0-1");
  EXPECT_EQ(GpuGpu(t, 0, 1), "SYS");
}

TEST(NcclXmlTest, LinkSpeedsAndEncodings) {
  const NodeTopology t = ParseOrDie(
      "<system version=\"1\"><cpu numaid=\"0\">"
      "<pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"2.5 GT/s\" link_width=\"1\"/>"
      "<pci busid=\"0000:02:00.0\" class=\"0x030200\" link_speed=\"5 GT/s\" link_width=\"8\"/>"
      "<pci busid=\"0000:03:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\"/>"
      "<pci busid=\"0000:04:00.0\" class=\"0x030200\" link_speed=\"Unknown\" link_width=\"16\"/>"
      "<pci busid=\"0000:05:00.0\" class=\"0x030200\" link_speed=\"nan GT/s\" link_width=\"16\"/>"
      "<pci busid=\"0000:06:00.0\" class=\"0x030200\" link_speed=\"16 GT/s\" link_width=\"x\"/>"
      "</cpu></system>");
  ASSERT_EQ(t.gpus.size(), 6u);
  EXPECT_NEAR(t.gpus[0].link_gbps, 0.25, 1e-9);  // 2.5 * 1 * 8/10 / 8
  EXPECT_NEAR(t.gpus[1].link_gbps, 4.0, 1e-9);   // 5 * 8 * 8/10 / 8
  EXPECT_NEAR(t.gpus[2].link_gbps, 32.0 * 16 * 128 / 130 / 8, 1e-9);
  EXPECT_EQ(t.gpus[2].link_width, 16);
  EXPECT_EQ(t.gpus[3].link_gbps, 0);
  EXPECT_EQ(t.gpus[4].link_gbps, 0);
  EXPECT_EQ(t.gpus[5].link_gbps, 0);
  EXPECT_EQ(t.gpus[5].link_width, 0);
}

TEST(NcclXmlTest, DeviceClassification) {
  const NodeTopology t = ParseOrDie(
      "<system version=\"1\"><cpu numaid=\"0\">"
      // BMC VGA (ASPEED): not a GPU.
      "<pci busid=\"0000:03:00.0\" class=\"0x030000\" vendor=\"0x1a03\" device=\"0x2000\"/>"
      // NVMe: not part of the model.
      "<pci busid=\"0000:04:00.0\" class=\"0x010802\" vendor=\"0x144d\"/>"
      // AMD accelerator by class and vendor.
      "<pci busid=\"0000:05:00.0\" class=\"0x120000\" vendor=\"0x1002\" device=\"0x74a1\"/>"
      "<pci busid=\"0000:10:00.0\" class=\"0x020000\" vendor=\"0x8086\"><nic>"
      "<net name=\"eth0\" speed=\"25000\" gdr=\"0\"/></nic></pci>"
      "<pci busid=\"0000:11:00.0\" class=\"0x020000\" vendor=\"0x14e4\"><nic>"
      "<net name=\"bnxt_re0\" speed=\"100000\" gdr=\"1\"/></nic></pci>"
      "<pci busid=\"0000:12:00.0\" class=\"0x020700\" vendor=\"0x15b3\"><nic>"
      "<net name=\"ib0\" speed=\"100000\" gdr=\"0\"/></nic></pci>"
      "<pci busid=\"0000:13:00.0\" class=\"0x020800\" vendor=\"0x8086\"><nic>"
      "<net name=\"hfi1_0\" speed=\"100000\" gdr=\"1\"/></nic></pci>"
      "<pci busid=\"0000:14:00.0\" class=\"0x020000\" vendor=\"0x1d0f\"><nic>"
      "<net name=\"rdmap20s0\" speed=\"100000\" gdr=\"1\"/></nic></pci>"
      "<pci busid=\"0000:15:00.0\" class=\"0x020000\"><nic>"
      "<net name=\"fancy0\" gdr=\"1\"/><net name=\"plain0\" gdr=\"0\"/></nic></pci>"
      "</cpu></system>");
  ASSERT_EQ(t.gpus.size(), 1u);
  EXPECT_EQ(t.gpus[0].vendor, GpuVendor::kAmd);
  EXPECT_EQ(t.gpus[0].device_id, 0x74a1);
  auto nic = [&](const std::string& name) -> const Nic& {
    return t.nics[static_cast<std::size_t>(NicIndex(t, name))];
  };
  EXPECT_FALSE(nic("eth0").rdma);
  EXPECT_EQ(nic("eth0").kind, NicKind::kEthernet);
  EXPECT_EQ(nic("eth0").link_rate_mbps, 25000u);
  EXPECT_TRUE(nic("bnxt_re0").rdma);
  EXPECT_EQ(nic("bnxt_re0").kind, NicKind::kRoce);
  EXPECT_FALSE(nic("ib0").rdma) << "IPoIB interface";
  EXPECT_EQ(nic("ib0").kind, NicKind::kInfiniband);
  EXPECT_TRUE(nic("hfi1_0").rdma);
  EXPECT_EQ(nic("hfi1_0").kind, NicKind::kOmniPath);
  EXPECT_TRUE(nic("rdmap20s0").rdma);
  EXPECT_EQ(nic("rdmap20s0").kind, NicKind::kEfa);
  EXPECT_TRUE(nic("fancy0").rdma) << "unknown name, gdr=1";
  EXPECT_FALSE(nic("plain0").rdma) << "unknown name, gdr=0";
  EXPECT_EQ(nic("fancy0").pci_bus_id, nic("plain0").pci_bus_id);
  EXPECT_EQ(t.RdmaNicCount(), 4);
  // RDMA NICs first.
  for (std::size_t i = 0; i < t.nics.size(); ++i) {
    EXPECT_EQ(t.nics[i].rdma, i < 4u) << t.nics[i].DisplayName();
  }
}

TEST(NcclXmlTest, NicNamesMustBeUsableIdentifiers) {
  // Consumers identify NICs by name (matrix legends, the JSON encoding): duplicates and
  // non-printable names are errors.
  EXPECT_TRUE(ErrorContains(
      Parse("<system version=\"1\"><cpu numaid=\"0\">"
            "<pci busid=\"0000:01:00.0\" class=\"0x020700\"><nic><net name=\"mlx5_0\"/></nic></pci>"
            "<pci busid=\"0000:02:00.0\" class=\"0x020700\"><nic><net name=\"mlx5_0\"/></nic></pci>"
            "</cpu></system>"),
      "NIC name mlx5_0 appears twice"));
  EXPECT_TRUE(ErrorContains(
      Parse("<system version=\"1\"><cpu numaid=\"0\">"
            "<pci busid=\"0000:01:00.0\" class=\"0x020700\"><nic><net name=\"mlx5 0\"/></nic></pci>"
            "</cpu></system>"),
      "is not a device or interface name"));
  // A container's NCCL dump lists its one virtual interface (no PCI path) under every <cpu>:
  // one NIC, locality unknown. Under one <cpu> it keeps that locality.
  const NodeTopology container = ParseOrDie(
      "<system version=\"1\">"
      "<cpu numaid=\"0\" affinity=\"0000ffff\"><pci busid=\"0000:07:00.0\" class=\"0x030200\"/>"
      "<nic><net name=\"eth0\" speed=\"10000\"/></nic></cpu>"
      "<cpu numaid=\"1\" affinity=\"ffff0000\"><nic><net name=\"eth0\" speed=\"10000\"/></nic></cpu>"
      "</system>");
  ASSERT_EQ(container.nics.size(), 1u);
  EXPECT_EQ(container.nics[0].name, "eth0");
  EXPECT_EQ(container.nics[0].numa, -1);
  EXPECT_EQ(container.nics[0].cpus, "");
  const NodeTopology once = ParseOrDie(
      "<system version=\"1\"><cpu numaid=\"1\" affinity=\"ffff0000\">"
      "<nic><net name=\"eth0\"/></nic><nic><net name=\"eth0\"/></nic></cpu></system>");
  ASSERT_EQ(once.nics.size(), 1u);
  EXPECT_EQ(once.nics[0].numa, 1);
  // A repeated name with a PCI device behind it is two devices under one name: still refused.
  EXPECT_TRUE(ErrorContains(
      Parse("<system version=\"1\"><cpu numaid=\"0\">"
            "<pci busid=\"0000:01:00.0\" class=\"0x020000\"><nic><net name=\"eth0\"/></nic></pci>"
            "</cpu><cpu numaid=\"1\"><nic><net name=\"eth0\"/></nic></cpu></system>"),
      "NIC name eth0 appears twice"));
  // A <net> without a name and without a PCI function cannot be named at all: skipped.
  const NodeTopology t =
      ParseOrDie("<system version=\"1\"><cpu numaid=\"0\"><nic><net speed=\"1000\"/></nic></cpu></system>");
  EXPECT_TRUE(t.nics.empty());
}

TEST(NcclXmlTest, BridgeIdsAreUniqueAndNonEmpty) {
  // The JSON encoding names parents by id: bridges without a usable bus id, or repeating one,
  // get synthetic ids.
  const NodeTopology t = ParseOrDie(
      "<system version=\"1\"><cpu numaid=\"0\">"
      "<pci class=\"0x060400\"><pci busid=\"0000:01:00.0\" class=\"0x030200\"/></pci>"
      "<pci busid=\"ffff:ff:01.0\" class=\"0x060400\"><pci busid=\"0000:02:00.0\" class=\"0x030200\"/></pci>"
      "<pci busid=\"ffff:ff:01.0\" class=\"0x060400\"><pci busid=\"0000:03:00.0\" class=\"0x030200\"/></pci>"
      "</cpu></system>");
  ASSERT_EQ(t.pcie.size(), 3u);
  EXPECT_EQ(t.pcie[0].id, "bridge:0");
  EXPECT_EQ(t.pcie[1].id, "ffff:ff:01.0");
  EXPECT_EQ(t.pcie[2].id, "bridge:2");
  EXPECT_EQ(t.SwitchCount(), 3);
}

TEST(NcclXmlTest, EmptyBridgesArePruned) {
  // The bridge with only a BMC VGA below it is not on the path of a GPU or NIC.
  const NodeTopology t = ParseOrDie(
      "<system version=\"1\"><cpu numaid=\"0\">"
      "<pci busid=\"0000:01:00.0\" class=\"0x060400\"><pci busid=\"0000:02:00.0\" class=\"0x030000\" "
      "vendor=\"0x1a03\"/></pci>"
      "<pci busid=\"0000:10:00.0\" class=\"0x060400\"><pci busid=\"0000:11:00.0\" class=\"0x060400\">"
      "<pci busid=\"0000:12:00.0\" class=\"0x030200\"/></pci></pci>"
      "</cpu></system>");
  ASSERT_EQ(t.pcie.size(), 2u);
  EXPECT_EQ(t.pcie[0].id, "0000:10:00.0");
  EXPECT_TRUE(t.pcie[0].is_switch);
  EXPECT_EQ(t.pcie[1].parent, 0);
  EXPECT_FALSE(t.pcie[1].is_switch);
  EXPECT_EQ(t.gpus[0].parent, 1);
}

// A distinct bus id per i < 8192.
std::string BusId(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0000:%02x:%02x.0", i / 32, i % 32);
  return buf;
}

TEST(NcclXmlTest, LimitsAreEnforced) {
  // Nesting: far past the limit must fail cleanly, not overflow the parser's stack.
  std::string deep = "<system version=\"1\"><cpu numaid=\"0\">";
  for (int i = 0; i < 100000; ++i) deep += "<pci class=\"0x060400\">";
  EXPECT_TRUE(ErrorContains(Parse(deep), "nests deeper than 64"));
  std::string just_over = "<system version=\"1\"><cpu numaid=\"0\">";
  for (int i = 0; i < 63; ++i) just_over += "<pci class=\"0x060400\">";
  for (int i = 0; i < 63; ++i) just_over += "</pci>";
  just_over += "</cpu></system>";
  EXPECT_TRUE(ErrorContains(Parse(just_over), "nests deeper than 64"));
  std::string at_limit = "<system version=\"1\"><cpu numaid=\"0\">";
  for (int i = 0; i < 62; ++i) at_limit += "<pci class=\"0x060400\">";
  for (int i = 0; i < 62; ++i) at_limit += "</pci>";
  at_limit += "</cpu></system>";
  EXPECT_TRUE(Parse(at_limit).ok());

  std::string many = "<system version=\"1\"><cpu numaid=\"0\">";
  for (int i = 0; i < 4097; ++i) many += "<pci/>";
  many += "</cpu></system>";
  EXPECT_TRUE(ErrorContains(Parse(many), "more than 4096 <pci>"));

  EXPECT_TRUE(ErrorContains(Parse(std::string(kMaxNcclXmlBytes + 1, ' ')), "over the limit"));

  // Devices are capped well below 4096: link derivation is quadratic to cubic in them.
  std::string gpus = "<system version=\"1\"><cpu numaid=\"0\">";
  for (int i = 0; i < 257; ++i) {
    gpus += "<pci busid=\"" + BusId(i) + "\" class=\"0x030200\"/>";
  }
  gpus += "</cpu></system>";
  EXPECT_TRUE(ErrorContains(Parse(gpus), "more than 256 GPUs"));
  std::string nets =
      "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x020000\"><nic>";
  for (int i = 0; i < 257; ++i) nets += "<net name=\"mlx5_" + std::to_string(i) + "\"/>";
  nets += "</nic></pci></cpu></system>";
  EXPECT_TRUE(ErrorContains(Parse(nets), "more than 256 NICs"));
}

// Truncations and byte flips of real files: every outcome must be a value or an Error (this runs
// under ASan/UBSan in the sanitizer build), and every value must be internally consistent.
void CheckConsistent(const NodeTopology& t) {
  const int np = static_cast<int>(t.pcie.size());
  for (int i = 0; i < np; ++i) ASSERT_LT(t.pcie[static_cast<std::size_t>(i)].parent, i);
  for (const Gpu& g : t.gpus) {
    ASSERT_LT(g.parent, np);
    for (const GpuPeer& p : g.peers) {
      ASSERT_GE(p.gpu, 0);
      ASSERT_LT(p.gpu, static_cast<int>(t.gpus.size()));
    }
  }
  for (const Nic& n : t.nics) ASSERT_LT(n.parent, np);
  ASSERT_EQ(t.gpu_gpu.cells.size(), t.gpus.size() * t.gpus.size());
  ASSERT_EQ(t.gpu_nic.cells.size(), t.gpus.size() * t.nics.size());
}

TEST(NcclXmlTest, TruncatedAndCorruptedFilesNeverCrash) {
  TOPOSCHED_LOAD_OR_SKIP(content, "oci__bm.gpu.h100.8_kubernetes-variant.nccl.xml");
  int errors = 0, values = 0;
  auto check = [&](const std::string& input) {
    const Result<NodeTopology> r = ParseNcclXml(input);
    if (r.ok()) {
      ++values;
      CheckConsistent(*r);
    } else {
      ++errors;
      EXPECT_FALSE(r.error().message().empty());
    }
  };
  for (std::size_t cut = 0; cut < content.size(); cut += 13) check(content.substr(0, cut));
  std::mt19937 rng(12345);  // fixed seed: reproducible failures
  std::uniform_int_distribution<std::size_t> pos(0, content.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  const char interesting[] = {'<', '>', '/', '"', '\'', '=', '\0', ' ', '-', '!', '?', '&', 'x'};
  std::uniform_int_distribution<std::size_t> pick(0, sizeof interesting - 1);
  for (int i = 0; i < 600; ++i) {
    std::string mutated = content;
    const int flips = 1 + i % 4;
    for (int f = 0; f < flips; ++f) {
      mutated[pos(rng)] = i % 2 == 0 ? static_cast<char>(byte(rng)) : interesting[pick(rng)];
    }
    check(mutated);
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(values, 0);
}

}  // namespace
}  // namespace toposched
