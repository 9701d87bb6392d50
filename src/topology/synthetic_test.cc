#include "toposched/topology/synthetic.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace toposched {
namespace {

NodeTopology Preset(const std::string& name) {
  auto spec = SyntheticPreset(name);
  EXPECT_TRUE(spec.ok()) << name;
  auto t = GenerateSynthetic(*spec);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message());
  return t.ok() ? *t : NodeTopology{};
}

struct PresetCase {
  std::string name;
  int gpus, rdma_nics, numa_nodes, switches;
  // Expected classes: GPU0-NIC0, GPU0-NIC(last RDMA), GPU0-GPU1, GPU0-GPU(last).
  std::string g0_n0, g0_nlast, g0_g1, g0_glast;
};

TEST(SyntheticTest, Presets) {
  const std::vector<PresetCase> cases = {
      // 4 switches (2 per socket), each 2 GPUs + 2 NICs on their own downstream ports: PIX inside
      // a switch, NODE to the other switch of the socket, SYS across; NVSwitch NV18 everywhere.
      {"hgx-h100-8gpu", 8, 8, 2, 4, "PIX", "SYS", "NV18", "NV18"},
      // Same layout behind two switch levels: GPU side and NIC side meet at the outer switch.
      {"hgx-a100-8gpu", 8, 8, 2, 12, "PXB", "SYS", "NV12", "NV12"},
      // GPUs on their own root ports, NVLink bridges join pairs (0-1, 2-3); no RDMA NIC.
      {"pcie-4gpu", 4, 0, 2, 0, "", "", "NV12", "SYS"},
      // No PCIe tree: locality only. NICs 0-3 on NUMA 0, 4-7 on NUMA 1.
      {"cloud-vm-8gpu", 8, 8, 2, 0, "NODE", "SYS", "NV12", "NV12"},
      // Two switches with two L40S each on one socket, no NVLink, Ethernet only.
      {"inference-4gpu", 4, 0, 1, 2, "", "", "PIX", "NODE"},
  };
  for (const PresetCase& c : cases) {
    SCOPED_TRACE(c.name);
    const NodeTopology t = Preset(c.name);
    EXPECT_EQ(t.source, TopologySource::kSynthetic);
    EXPECT_EQ(t.source_detail, c.name);
    EXPECT_EQ(static_cast<int>(t.gpus.size()), c.gpus);
    EXPECT_EQ(t.RdmaNicCount(), c.rdma_nics);
    EXPECT_EQ(static_cast<int>(t.numa_nodes.size()), c.numa_nodes);
    EXPECT_EQ(t.SwitchCount(), c.switches);
    const int last_gpu = c.gpus - 1;
    EXPECT_EQ(t.gpu_gpu.at(0, 1).Token(), c.g0_g1);
    EXPECT_EQ(t.gpu_gpu.at(0, last_gpu).Token(), c.g0_glast);
    if (c.rdma_nics > 0) {
      EXPECT_EQ(t.gpu_nic.at(0, 0).Token(), c.g0_n0);
      EXPECT_EQ(t.gpu_nic.at(0, c.rdma_nics - 1).Token(), c.g0_nlast);
    }
    std::set<std::string> bus_ids;
    for (const Gpu& g : t.gpus) EXPECT_TRUE(bus_ids.insert(g.pci_bus_id).second) << "unique bus ids";
    for (const Nic& n : t.nics) EXPECT_TRUE(bus_ids.insert(n.pci_bus_id).second) << "unique bus ids";
    EXPECT_EQ(t.Fingerprint(), Preset(c.name).Fingerprint()) << "deterministic";
  }
}

// HGX: the NIC on GPU0's switch is PIX, the other switch of the same socket NODE.
TEST(SyntheticTest, HgxSwitchGroups) {
  const NodeTopology t = Preset("hgx-h100-8gpu");
  EXPECT_EQ(t.gpu_nic.at(0, 1).Token(), "PIX");
  EXPECT_EQ(t.gpu_nic.at(0, 2).Token(), "NODE");
  EXPECT_EQ(t.gpu_nic.at(0, 4).Token(), "SYS");
  EXPECT_EQ(t.SwitchOf(t.gpus[0].parent), t.SwitchOf(t.nics[1].parent));
  EXPECT_NE(t.SwitchOf(t.gpus[0].parent), t.SwitchOf(t.nics[2].parent));
  EXPECT_EQ(t.nics.back().kind, NicKind::kEthernet);
  EXPECT_FALSE(t.nics.back().rdma);
}

TEST(SyntheticTest, RejectsUnknownPresetAndBadSpecs) {
  auto unknown = SyntheticPreset("dgx-b300");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("hgx-h100-8gpu"), std::string::npos) << "lists known presets";
  SyntheticSpec spec;
  spec.sockets = 0;
  EXPECT_FALSE(GenerateSynthetic(spec).ok());
  spec = SyntheticSpec{};
  spec.gpus_per_switch = -1;
  EXPECT_FALSE(GenerateSynthetic(spec).ok());
  spec = SyntheticSpec{};
  spec.switches_per_numa = 16;
  spec.gpus_per_switch = 16;  // 2 x 16 x 16 = 512 GPUs
  EXPECT_FALSE(GenerateSynthetic(spec).ok());
  for (const std::string& name : SyntheticPresetNames())
    EXPECT_FALSE(SyntheticPresetDescription(name).empty());
}

}  // namespace
}  // namespace toposched
