// LoadTopologyFile: format detection and error reporting on real files and broken ones.

#include <gtest/gtest.h>

#include <map>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "testing/shared_topologies.h"
#include "toposched/agent/discovery.h"
#include "toposched/topology/gpu_memory.h"
#include "toposched/topology/json_codec.h"

namespace toposched {
namespace {

namespace fs = std::filesystem;

class LoadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("toposched-load-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& content) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }

  fs::path dir_;
};

TEST_F(LoadFileTest, EverySharedTopologyLoadsWithItsDetectedFormat) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  int hwloc = 0, nccl = 0;
  for (const auto& entry : fs::directory_iterator(testing::SharedTopologiesDir())) {
    if (entry.path().extension() != ".xml") continue;
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    auto t = LoadTopologyFile(entry.path().string());
    ASSERT_TRUE(t.ok()) << t.error().message();
    const bool is_nccl = name.find(".nccl.") != std::string::npos;
    EXPECT_EQ(t->source, is_nccl ? TopologySource::kNcclXml : TopologySource::kHwlocXml);
    EXPECT_EQ(t->source_detail, name);
    (is_nccl ? nccl : hwloc)++;
  }
  EXPECT_EQ(hwloc, 23);
  EXPECT_EQ(nccl, 17);
}

// Issue 16: NCCL files carry no card memory; cards whose PCI id fixes it get the estimate
// (gpu_memory.h), so shared pods can be placed there. The estimate stays below what every real
// export that does record memory says for a card of that size.
TEST_F(LoadFileTest, CardMemoryIsEstimatedBelowEveryMeasuredFigure) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  const auto dir = testing::SharedTopologiesDir();
  auto h100 = LoadTopologyFile((dir / "nebius__h100-vm_8xH100_8xCX7-VF.nccl.xml").string());
  ASSERT_TRUE(h100.ok()) << h100.error().message();
  ASSERT_EQ(h100->gpus.size(), 8u);
  for (const Gpu& g : h100->gpus) EXPECT_EQ(g.memory_mib, EstimatedUsableMib(80));
  auto mi250 = LoadTopologyFile((dir / "rccl__mi250_8xgfx90a_8nics.nccl.xml").string());
  ASSERT_TRUE(mi250.ok()) << mi250.error().message();
  for (const Gpu& g : mi250->gpus) EXPECT_EQ(g.memory_mib, EstimatedUsableMib(64));
  int measured = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".xml") continue;
    auto t = LoadTopologyFile(entry.path().string());
    ASSERT_TRUE(t.ok()) << entry.path();
    for (const Gpu& g : t->gpus) {
      const std::uint64_t nominal = NominalGpuMemoryGib(g.vendor_id, g.device_id, g.model);
      if (nominal == 0 || g.memory_mib == EstimatedUsableMib(nominal)) continue;  // unknown, or estimated
      ++measured;
      EXPECT_LE(EstimatedUsableMib(nominal), g.memory_mib) << entry.path().filename() << " " << g.model;
      EXPECT_GE(EstimatedUsableMib(nominal) * 100, g.memory_mib * 85)
          << entry.path().filename() << " " << g.model;
    }
  }
  EXPECT_GE(measured, 20);  // V100, P100, MI50, MI250X cards whose exports record memory
}

// Issue 16: node names taken from file names stay distinct (the three OCI files all became
// "oci--bm" when the name stopped at the first dot).
TEST_F(LoadFileTest, NamesFromFileNamesStayDistinct) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  std::map<std::string, std::string> by_name;
  for (const auto& entry : fs::directory_iterator(testing::SharedTopologiesDir())) {
    if (entry.path().extension() != ".xml") continue;
    auto t = LoadTopologyFile(entry.path().string());
    ASSERT_TRUE(t.ok()) << t.error().message();
    if (t->source != TopologySource::kNcclXml) continue;  // hwloc exports carry their host name
    const auto [it, inserted] = by_name.emplace(t->node_name, entry.path().filename().string());
    EXPECT_TRUE(inserted) << t->node_name << " names both " << it->second << " and "
                          << entry.path().filename();
  }
  EXPECT_TRUE(by_name.contains("oci--bm.gpu.h100.8-kubernetes-variant")) << by_name.begin()->first;
}

TEST_F(LoadFileTest, JsonRoundTripThroughAFile) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  auto t = LoadTopologyFile(
      testing::SharedTopology("llnl__lassen_ibm-ac922_power9_4xV100_4xmlx5.hwloc2.xml").string());
  ASSERT_TRUE(t.ok()) << t.error().message();
  const std::string path = Write("lassen.json", EncodeTopologyJson(*t));
  auto back = LoadTopologyFile(path);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->Fingerprint(), t->Fingerprint());
  EXPECT_EQ(back->gpu_nic, t->gpu_nic);
  EXPECT_EQ(back->source, TopologySource::kHwlocXml);
}

struct BadFileCase {
  std::string name;
  std::string content;
  std::string expected;  // substring of the error after the file name
};

// Each broken input gives an error that names the file and the problem, and never crashes
// (this test also runs in the ASan/UBSan build).
TEST_F(LoadFileTest, BrokenFilesGiveClearErrors) {
  const std::string hwloc_head =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
      "<topology version=\"2.0\">\n  <object type=\"Machine\" os_index=\"0\" cpuset=\"0x1\"";
  const std::vector<BadFileCase> cases = {
      {"empty.xml", "", "the file is empty"},
      {"blank.xml", "  \n\t\n", "the file is empty"},
      {"garbage.bin", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16), "binary data"},
      {"truncated.xml", hwloc_head, "an <object> tag is not closed (truncated file?)"},
      {"wrong-root.xml", "<?xml version=\"1.0\"?>\n<html><body/></html>", "unknown XML root element <html>"},
      {"v3.xml", "<?xml version=\"1.0\"?>\n<topology version=\"3.0\"><object type=\"Machine\"/></topology>",
       "hwloc XML version 3.0"},
      {"matrix.txt",
       "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV12\t0-63\t0\nGPU1\tNV12\t X "
       "\t0-63\t0\n\nLegend:\n",
       "nvidia-smi topo -m"},
      {"nccl-truncated.xml", "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:01:00.0\"",
       ""},
      {"json-broken.json", "{\"apiVersion\": \"toposched.io/v1alpha1\", \"kind\": ", ""},
      {"prose.txt", "this is not a topology\n", "not a topology file"},
  };
  for (const BadFileCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Write(c.name, c.content);
    auto t = LoadTopologyFile(path);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().message().rfind(path, 0), 0u)
        << "error should start with the file name: " << t.error().message();
    EXPECT_NE(t.error().message().find(c.expected), std::string::npos) << t.error().message();
  }
}

TEST_F(LoadFileTest, MissingFileAndDirectory) {
  auto missing = LoadTopologyFile((dir_ / "nope.xml").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("cannot open"), std::string::npos);
  auto directory = LoadTopologyFile(dir_.string());
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.error().message().find("is a directory"), std::string::npos);
}

// Truncating a real export at many points must never crash hwloc's importer or ours.
TEST_F(LoadFileTest, TruncatedRealExportsNeverCrash) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  const std::string content =
      testing::ReadFile(testing::SharedTopology("llnl__pascal_relion-x1904gt_2xP100_1xmlx5.hwloc2.xml"));
  ASSERT_FALSE(content.empty());
  for (std::size_t cut = 1; cut < content.size(); cut += content.size() / 40 + 1) {
    auto t = ParseHwlocXml(content.substr(0, cut));
    EXPECT_FALSE(t.ok()) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace toposched
