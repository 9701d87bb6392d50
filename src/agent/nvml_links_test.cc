// AddNvmlInfo against the fake NVML of tests/fakes: scenario files stand for an HGX board, NVLink
// bridge pairs, a POWER9 host and broken drivers. No real NVML or GPU is involved.

#include "nvml_links.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "toposched/topology/synthetic.h"

namespace toposched {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFakeNvml = TOPOSCHED_FAKE_NVML_PATH;
constexpr const char* kNvswitchId = "22a310de";  // NVSwitch (H100 generation), NVIDIA vendor
constexpr const char* kGpuId = "233010de";       // H100 SXM5
constexpr const char* kIbmCpuId = "04ea1014";    // POWER9 NVLink endpoint, IBM vendor

// A synthetic machine as live hwloc sees it on Debian: no NVLink peers, no UUID, model or
// memory size.
NodeTopology BarePreset(const std::string& name) {
  auto spec = SyntheticPreset(name);
  EXPECT_TRUE(spec.ok()) << name;
  auto t = GenerateSynthetic(*spec);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message());
  if (!t.ok()) return {};
  for (Gpu& g : t->gpus) {
    g.peers.clear();
    g.uuid.clear();
    g.model.clear();
    g.memory_mib = 0;
  }
  DeriveLinks(*t);
  return *t;
}

// NVML writes bus ids with an 8-digit domain.
std::string NvmlBusId(const Gpu& g) {
  return "0000" + g.pci_bus_id;
}

// Not all zeros even for GPU 0: an all-zero UUID is a placeholder and is dropped.
std::string Uuid(int i) {
  return "GPU-10000000-0000-0000-0000-00000000000" + std::to_string(i);
}

std::string GpuLine(const Gpu& g, int i) {
  return "gpu " + NvmlBusId(g) + " " + Uuid(i) + " 81559 NVIDIA H100 80GB HBM3\n";
}

std::string LinkLines(const std::string& from, const std::string& to, const std::string& device_id, int count,
                      const std::string& version = "4") {
  std::string out;
  for (int i = 0; i < count; ++i) out += "link " + from + " " + to + " " + device_id + " " + version + "\n";
  return out;
}

std::string Token(const NodeTopology& t, int a, int b) {
  return t.gpu_gpu.at(a, b).Token();
}

const GpuPeer* PeerOf(const NodeTopology& t, int a, int b) {
  for (const GpuPeer& p : t.gpus[static_cast<std::size_t>(a)].peers) {
    if (p.gpu == b) return &p;
  }
  return nullptr;
}

class NvmlLinksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("toposched-nvml-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    unsetenv("FAKE_NVML_CONFIG");
    fs::remove_all(dir_);
  }

  // Writes the scenario and points the fake at it.
  void Scenario(const std::string& content) {
    const fs::path p = dir_ / "scenario.txt";
    std::ofstream(p, std::ios::binary) << content;
    setenv("FAKE_NVML_CONFIG", p.c_str(), 1);
  }

  fs::path dir_;
};

TEST_F(NvmlLinksTest, HgxBoardThroughFourNvswitchesIsNv18Everywhere) {
  NodeTopology t = BarePreset("hgx-h100-8gpu");
  ASSERT_EQ(t.gpus.size(), 8u);
  ASSERT_NE(Token(t, 0, 7).substr(0, 2), "NV");  // the PCIe class before NVML
  // Four NVSwitches in a PCI domain of their own, so they cannot collide with the preset's ids;
  // each GPU has 5 + 4 + 4 + 5 links to them, as on HGX H100.
  const std::vector<std::string> switches = {"00000001:01:00.0", "00000001:02:00.0", "00000001:03:00.0",
                                             "00000001:04:00.0"};
  const int per_switch[] = {5, 4, 4, 5};
  std::string scenario;
  for (int i = 0; i < 8; ++i) scenario += GpuLine(t.gpus[static_cast<std::size_t>(i)], i);
  for (int i = 0; i < 8; ++i) {
    for (std::size_t s = 0; s < switches.size(); ++s) {
      scenario +=
          LinkLines(NvmlBusId(t.gpus[static_cast<std::size_t>(i)]), switches[s], kNvswitchId, per_switch[s]);
    }
  }
  Scenario(scenario);

  auto added = AddNvmlInfo(t, kFakeNvml);
  ASSERT_TRUE(added.ok()) << added.error().message();
  EXPECT_EQ(*added, 8);
  DeriveLinks(t);
  for (int a = 0; a < 8; ++a) {
    const Gpu& g = t.gpus[static_cast<std::size_t>(a)];
    EXPECT_EQ(g.uuid, Uuid(a));
    EXPECT_EQ(g.model, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(g.memory_mib, 81559u);
    EXPECT_EQ(g.peers.size(), 7u);
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      SCOPED_TRACE(std::to_string(a) + "-" + std::to_string(b));
      EXPECT_EQ(Token(t, a, b), "NV18");
      const GpuPeer* p = PeerOf(t, a, b);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(p->links, 18);
      EXPECT_EQ(p->bandwidth_mbps, 450000u);
      EXPECT_TRUE(p->via_switch);
      EXPECT_EQ(p->fabric, Fabric::kNvlink);
    }
  }
}

TEST_F(NvmlLinksTest, KeepsIdentityHwlocAlreadyHad) {
  NodeTopology t = BarePreset("pcie-4gpu");
  t.gpus[0].uuid = "GPU-from-hwloc";
  t.gpus[0].model = "from hwloc";
  t.gpus[0].memory_mib = 1234;
  std::string scenario;
  for (int i = 0; i < 4; ++i) scenario += GpuLine(t.gpus[static_cast<std::size_t>(i)], i);
  Scenario(scenario);
  auto added = AddNvmlInfo(t, kFakeNvml);
  ASSERT_TRUE(added.ok()) << added.error().message();
  EXPECT_EQ(*added, 4);
  EXPECT_EQ(t.gpus[0].uuid, "GPU-from-hwloc");
  EXPECT_EQ(t.gpus[0].model, "from hwloc");
  EXPECT_EQ(t.gpus[0].memory_mib, 1234u);
  EXPECT_EQ(t.gpus[1].uuid, Uuid(1));
  EXPECT_EQ(t.gpus[1].memory_mib, 81559u);
  for (const Gpu& g : t.gpus) EXPECT_TRUE(g.peers.empty());  // no link, no peer
}

TEST_F(NvmlLinksTest, DirectBridgeLinksJoinOnlyThatPair) {
  NodeTopology t = BarePreset("pcie-4gpu");
  ASSERT_EQ(t.gpus.size(), 4u);
  const std::string before_23 = Token(t, 2, 3), before_02 = Token(t, 0, 2);
  const std::string g0 = NvmlBusId(t.gpus[0]), g1 = NvmlBusId(t.gpus[1]);
  std::string scenario;
  for (int i = 0; i < 4; ++i) scenario += GpuLine(t.gpus[static_cast<std::size_t>(i)], i);
  // Each side reports its own 12 links (A100 reports nvmlNvlinkVersion_t 5, NVLink 3.1).
  scenario += LinkLines(g0, g1, kGpuId, 12, "5") + LinkLines(g1, g0, kGpuId, 12, "5");
  Scenario(scenario);
  auto added = AddNvmlInfo(t, kFakeNvml);
  ASSERT_TRUE(added.ok()) << added.error().message();
  DeriveLinks(t);
  EXPECT_EQ(Token(t, 0, 1), "NV12");
  EXPECT_EQ(Token(t, 1, 0), "NV12");
  EXPECT_EQ(Token(t, 2, 3), before_23);
  EXPECT_EQ(Token(t, 0, 2), before_02);
  const GpuPeer* p = PeerOf(t, 0, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->links, 12);  // the larger side, not the sum of both reports
  EXPECT_EQ(p->bandwidth_mbps, 12u * 25000u);
  EXPECT_FALSE(p->via_switch);
  EXPECT_TRUE(t.gpus[2].peers.empty());
  EXPECT_TRUE(t.gpus[3].peers.empty());
}

TEST_F(NvmlLinksTest, OneSidedReportStillCounts) {
  NodeTopology t = BarePreset("pcie-4gpu");
  const std::string g2 = NvmlBusId(t.gpus[2]), g3 = NvmlBusId(t.gpus[3]);
  // GPU3 is in the topology but NVML does not list it (a container given only some GPUs still
  // sees every PCI device in sysfs): GPU2's own report is enough.
  Scenario(GpuLine(t.gpus[2], 2) + LinkLines(g2, g3, kGpuId, 4, "4"));
  auto added = AddNvmlInfo(t, kFakeNvml);
  ASSERT_TRUE(added.ok()) << added.error().message();
  EXPECT_EQ(*added, 1);
  DeriveLinks(t);
  EXPECT_EQ(Token(t, 2, 3), "NV4");
  EXPECT_EQ(Token(t, 3, 2), "NV4");
}

TEST_F(NvmlLinksTest, NvlinkToAPowerCpuIsNotAPeer) {
  NodeTopology t = BarePreset("pcie-4gpu");
  const std::string g0 = NvmlBusId(t.gpus[0]), g1 = NvmlBusId(t.gpus[1]);
  const std::string cpu = "00000007:00:00.0";  // POWER9 NPU: IBM vendor 0x1014
  std::string scenario;
  for (int i = 0; i < 4; ++i) scenario += GpuLine(t.gpus[static_cast<std::size_t>(i)], i);
  scenario += LinkLines(g0, cpu, kIbmCpuId, 3, "2") + LinkLines(g0, g1, kGpuId, 3, "2");
  scenario += LinkLines(g1, cpu, kIbmCpuId, 3, "2") + LinkLines(g1, g0, kGpuId, 3, "2");
  Scenario(scenario);
  auto added = AddNvmlInfo(t, kFakeNvml);
  ASSERT_TRUE(added.ok()) << added.error().message();
  DeriveLinks(t);
  EXPECT_EQ(Token(t, 0, 1), "NV3");
  ASSERT_EQ(t.gpus[0].peers.size(), 1u);  // the CPU links made no switch fabric
  EXPECT_EQ(t.gpus[0].peers[0].bandwidth_mbps, 3u * 25000u);
  EXPECT_FALSE(t.gpus[0].peers[0].via_switch);
  EXPECT_TRUE(t.gpus[2].peers.empty());
}

TEST_F(NvmlLinksTest, NvmlDevicesOutsideTheTopologyAreIgnored) {
  NodeTopology t = BarePreset("pcie-4gpu");
  const std::string g0 = NvmlBusId(t.gpus[0]), g1 = NvmlBusId(t.gpus[1]);
  const std::string hidden = "00000009:01:00.0";  // an NVML GPU hwloc did not report
  const std::string nvswitch = "00000009:02:00.0";
  std::string scenario = GpuLine(t.gpus[0], 0) + GpuLine(t.gpus[1], 1);
  scenario += "gpu " + hidden + " GPU-hidden 81559 NVIDIA H100 80GB HBM3\n";
  // A link to the hidden GPU has an NVIDIA vendor id too, yet is no NVSwitch link.
  scenario += LinkLines(g0, nvswitch, kNvswitchId, 2) + LinkLines(g0, hidden, kGpuId, 5);
  scenario += LinkLines(g1, nvswitch, kNvswitchId, 2) + LinkLines(g1, hidden, kGpuId, 5);
  scenario += LinkLines(hidden, nvswitch, kNvswitchId, 8);
  Scenario(scenario);
  auto added = AddNvmlInfo(t, kFakeNvml);
  ASSERT_TRUE(added.ok()) << added.error().message();
  EXPECT_EQ(*added, 2);
  DeriveLinks(t);
  EXPECT_EQ(Token(t, 0, 1), "NV2");
  ASSERT_EQ(t.gpus[0].peers.size(), 1u);
  EXPECT_TRUE(t.gpus[0].peers[0].via_switch);
  EXPECT_TRUE(t.gpus[2].peers.empty());
  for (const Gpu& g : t.gpus) EXPECT_NE(g.uuid, "GPU-hidden");
}

TEST_F(NvmlLinksTest, PerLinkBandwidthFollowsNvmlNvlinkVersionEnum) {
  // nvmlDeviceGetNvLinkVersion returns nvmlNvlinkVersion_t: 1 = 1.0 ... 6 = 4.0, 7 = 5.0.
  struct Case {
    std::string version;  // empty: the driver does not report it
    std::uint64_t per_link;
  };
  const std::vector<Case> cases = {{"1", 20000}, {"2", 25000}, {"4", 25000}, {"5", 25000},
                                   {"6", 25000}, {"7", 50000}, {"42", 0},    {"", 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE("version '" + c.version + "'");
    NodeTopology t = BarePreset("pcie-4gpu");
    const std::string g0 = NvmlBusId(t.gpus[0]), g1 = NvmlBusId(t.gpus[1]);
    Scenario(GpuLine(t.gpus[0], 0) + GpuLine(t.gpus[1], 1) + LinkLines(g0, g1, kGpuId, 2, c.version) +
             LinkLines(g1, g0, kGpuId, 2, c.version));
    auto added = AddNvmlInfo(t, kFakeNvml);
    ASSERT_TRUE(added.ok()) << added.error().message();
    const GpuPeer* p = PeerOf(t, 0, 1);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->links, 2);  // the count never depends on the version
    EXPECT_EQ(p->bandwidth_mbps, 2 * c.per_link);
  }
}

TEST_F(NvmlLinksTest, ReplacesAnExistingPeerOnlyWithMoreLinks) {
  NodeTopology t = BarePreset("pcie-4gpu");
  t.gpus[0].peers.push_back(GpuPeer{1, Fabric::kNvlink, 4, 100000, false});
  t.gpus[1].peers.push_back(GpuPeer{0, Fabric::kNvlink, 4, 100000, false});
  t.gpus[2].peers.push_back(GpuPeer{3, Fabric::kNvlink, 12, 300000, false});
  t.gpus[3].peers.push_back(GpuPeer{2, Fabric::kNvlink, 12, 300000, false});
  const std::string g0 = NvmlBusId(t.gpus[0]), g1 = NvmlBusId(t.gpus[1]);
  const std::string g2 = NvmlBusId(t.gpus[2]), g3 = NvmlBusId(t.gpus[3]);
  std::string scenario;
  for (int i = 0; i < 4; ++i) scenario += GpuLine(t.gpus[static_cast<std::size_t>(i)], i);
  scenario += LinkLines(g0, g1, kGpuId, 6) + LinkLines(g2, g3, kGpuId, 2);
  Scenario(scenario);
  auto added = AddNvmlInfo(t, kFakeNvml);
  ASSERT_TRUE(added.ok()) << added.error().message();
  const GpuPeer* p01 = PeerOf(t, 0, 1);
  const GpuPeer* p10 = PeerOf(t, 1, 0);
  const GpuPeer* p23 = PeerOf(t, 2, 3);
  ASSERT_TRUE(p01 != nullptr && p10 != nullptr && p23 != nullptr);
  EXPECT_EQ(p01->links, 6);
  EXPECT_EQ(p10->links, 6);
  EXPECT_EQ(p23->links, 12);  // 2 new links do not replace the 12 already known
  EXPECT_EQ(p23->bandwidth_mbps, 300000u);
  EXPECT_EQ(t.gpus[2].peers.size(), 1u);
}

TEST_F(NvmlLinksTest, UnknownLibraryIsAnErrorAndChangesNothing) {
  NodeTopology t = BarePreset("pcie-4gpu");
  const std::string before = t.Fingerprint();
  auto added = AddNvmlInfo(t, "/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(added.ok());
  EXPECT_NE(added.error().message().find("cannot load /nonexistent/libnvidia-ml.so.1"), std::string::npos)
      << added.error().message();
  EXPECT_EQ(t.Fingerprint(), before);
}

TEST_F(NvmlLinksTest, FailingInitIsAnError) {
  NodeTopology t = BarePreset("pcie-4gpu");
  const std::string before = t.Fingerprint();
  Scenario(GpuLine(t.gpus[0], 0) + "fail-init\n");
  auto added = AddNvmlInfo(t, kFakeNvml);
  ASSERT_FALSE(added.ok());
  EXPECT_NE(added.error().message().find("nvmlInit_v2 failed"), std::string::npos) << added.error().message();
  EXPECT_NE(added.error().message().find("Driver Not Loaded"), std::string::npos) << added.error().message();
  EXPECT_EQ(t.Fingerprint(), before);
}

TEST_F(NvmlLinksTest, MissingScenarioFailsInit) {
  NodeTopology t = BarePreset("pcie-4gpu");
  unsetenv("FAKE_NVML_CONFIG");
  auto added = AddNvmlInfo(t, kFakeNvml);
  ASSERT_FALSE(added.ok());
  EXPECT_NE(added.error().message().find("nvmlInit_v2 failed"), std::string::npos) << added.error().message();
}

TEST_F(NvmlLinksTest, LibraryWithoutNvmlSymbolsIsAnError) {
  NodeTopology t = BarePreset("pcie-4gpu");
  auto added = AddNvmlInfo(t, "libm.so.6");
  ASSERT_FALSE(added.ok());
  EXPECT_NE(added.error().message().find("nvmlInit_v2"), std::string::npos) << added.error().message();
}

TEST_F(NvmlLinksTest, RepeatedCallsGiveTheSameResult) {
  // The fake (like NVML) is opened and closed on every call; nothing may carry over.
  NodeTopology first = BarePreset("pcie-4gpu");
  NodeTopology second = first;
  const std::string g0 = NvmlBusId(first.gpus[0]), g1 = NvmlBusId(first.gpus[1]);
  Scenario(GpuLine(first.gpus[0], 0) + GpuLine(first.gpus[1], 1) + LinkLines(g0, g1, kGpuId, 4));
  ASSERT_TRUE(AddNvmlInfo(first, kFakeNvml).ok());
  ASSERT_TRUE(AddNvmlInfo(second, kFakeNvml).ok());
  DeriveLinks(first);
  DeriveLinks(second);
  EXPECT_EQ(first.Fingerprint(), second.Fingerprint());
  EXPECT_EQ(Token(first, 0, 1), "NV4");
}

}  // namespace
}  // namespace toposched
