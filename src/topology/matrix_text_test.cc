#include "toposched/topology/matrix_text.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "toposched/topology/synthetic.h"

namespace toposched {
namespace {

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string cell; std::getline(in, cell, '\t');) out.push_back(cell);
  return out;
}

TEST(MatrixTextTest, NvidiaSmiLayout) {
  auto spec = SyntheticPreset("hgx-h100-8gpu");
  ASSERT_TRUE(spec.ok());
  auto t = GenerateSynthetic(*spec);
  ASSERT_TRUE(t.ok());
  const std::vector<std::string> lines = Lines(RenderTopologyMatrix(*t));
  ASSERT_GT(lines.size(), 20u);
  EXPECT_EQ(
      lines[0].rfind(
          "# synthetic hgx-h100-8gpu: 8 GPUs, 8 RDMA NICs, 1 other NIC, 2 NUMA nodes, 4 PCIe switches", 0),
      0u)
      << lines[0];
  const std::vector<std::string> header = Cells(lines[1]);
  ASSERT_EQ(header.size(), 1u + 8 + 8 + 2);
  EXPECT_EQ(header[0], "");
  EXPECT_EQ(header[1], "GPU0");
  EXPECT_EQ(header[9], "NIC0");
  EXPECT_EQ(header[17], "CPU Affinity");
  EXPECT_EQ(header[18], "NUMA Affinity");
  // GPU0 row: " X " on the diagonal, NV18 to the other GPUs, PIX to its switch's NICs.
  const std::vector<std::string> gpu0 = Cells(lines[2]);
  EXPECT_EQ(gpu0[0], "GPU0");
  EXPECT_EQ(gpu0[1], " X ");
  EXPECT_EQ(gpu0[2], "NV18");
  EXPECT_EQ(gpu0[9], "PIX");
  EXPECT_EQ(gpu0[11], "NODE");
  EXPECT_EQ(gpu0[13], "SYS");
  EXPECT_EQ(gpu0[17], "0-27");
  EXPECT_EQ(gpu0.back(), "0");
  // NIC rows follow the GPU rows; the Ethernet port is not a column.
  EXPECT_EQ(Cells(lines[10])[0], "NIC0");
  EXPECT_EQ(Cells(lines[10])[9], " X ");
  const std::string text = RenderTopologyMatrix(*t);
  EXPECT_NE(text.find("NIC Legend:\n\n  NIC0: mlx5_0\n"), std::string::npos);
  EXPECT_NE(text.find("  NIC7: mlx5_7\n"), std::string::npos);
  EXPECT_EQ(text.find("eno1"), std::string::npos);
  EXPECT_NE(text.find("NV#  = Connection traversing a bonded set of # NVLinks"), std::string::npos);
  EXPECT_EQ(text.find("XGMI ="), std::string::npos);
}

TEST(MatrixTextTest, UnnamedNicsAreLabelledByBusIdAndXgmiGetsALegend) {
  NodeTopology t;
  Gpu a, b;
  a.pci_bus_id = "0000:01:00.0";
  b.pci_bus_id = "0000:02:00.0";
  a.vendor = b.vendor = GpuVendor::kAmd;
  a.peers = {GpuPeer{1, Fabric::kXgmi, 0, 100000, false}};
  b.peers = {GpuPeer{0, Fabric::kXgmi, 0, 100000, false}};
  t.gpus = {a, b};
  Nic n;
  n.pci_bus_id = "0000:10:00.0";
  n.rdma = true;
  t.nics = {n};
  DeriveLinks(t);
  const std::string text = RenderTopologyMatrix(t);
  EXPECT_NE(text.find("  NIC0: 0000:10:00.0\n"), std::string::npos);
  EXPECT_NE(text.find("XGMI = "), std::string::npos);
  EXPECT_NE(text.find("GPU0\t X \tXGMI\tSYS\tN/A\t\tN/A\n"), std::string::npos) << text;
}

TEST(MatrixTextTest, NoGpuStatementIsOneLine) {
  NodeTopology t;
  t.source = TopologySource::kHwlocXml;
  t.source_detail = "cpu-only.xml";
  Nic n;
  n.name = "hfi1_0";
  n.rdma = true;
  t.nics = {n};
  t.numa_nodes = {NumaNode{0, 0, "0-3", 0}, NumaNode{1, 1, "4-7", 0}};
  DeriveLinks(t);
  const std::string s = NoGpuStatement(t);
  EXPECT_EQ(s,
            "No GPUs found (hwloc-xml cpu-only.xml): 0 GPUs, 1 RDMA NIC, 0 other NICs, 2 NUMA nodes, 0 PCIe "
            "switches.");
}

}  // namespace
}  // namespace toposched
