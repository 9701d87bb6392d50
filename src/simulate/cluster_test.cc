// The virtual cluster: the default mix, interleaving, labels, names, topology directories.

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "testing/shared_topologies.h"
#include "toposched/simulate/simulator.h"

namespace toposched::simulate {
namespace {

namespace fs = std::filesystem;

int Total(const std::vector<ShapeCount>& shapes) {
  int n = 0;
  for (const ShapeCount& s : shapes) n += s.count;
  return n;
}

TEST(DefaultShapes, ScalesTheMixAndAddsUpExactly) {
  EXPECT_EQ(DefaultShapes(240), (std::vector<ShapeCount>{{"hgx-h100-8gpu", 84},
                                                         {"hgx-a100-8gpu", 48},
                                                         {"cloud-vm-8gpu", 36},
                                                         {"pcie-4gpu", 24},
                                                         {"inference-4gpu", 48}}));
  for (int n : {0, 1, 7, 10, 33, 101, 1000}) EXPECT_EQ(Total(DefaultShapes(n)), n) << n;
  // 10 nodes: floors 3, 2, 1, 1, 2 (= 9); the largest remainders are hgx-h100's and cloud-vm's
  // (0.5 each), and the earlier entry wins the tie.
  std::vector<int> ten;
  for (const ShapeCount& s : DefaultShapes(10)) ten.push_back(s.count);
  EXPECT_EQ(ten, (std::vector<int>{4, 2, 1, 1, 2}));
}

TEST(DefaultCluster, InterleavesShapesLabelsTiersAndSharesTopologies) {
  auto cluster = DefaultCluster();
  ASSERT_TRUE(cluster.ok()) << cluster.error().message();
  ASSERT_EQ(cluster->nodes.size(), 240u);
  EXPECT_EQ(cluster->shapes, DefaultShapes(240));
  std::set<std::string> names;
  std::map<std::string, const NodeTopology*> topology_of_shape;
  for (std::size_t i = 0; i < cluster->nodes.size(); ++i) {
    const VirtualNode& n = cluster->nodes[i];
    EXPECT_TRUE(names.insert(n.name).second) << n.name;
    ASSERT_NE(n.topology, nullptr);
    const std::string shape = n.labels.at(std::string(kShapeLabel));
    EXPECT_EQ(n.name.rfind(shape + "-", 0), 0u) << n.name;
    auto [it, inserted] = topology_of_shape.emplace(shape, n.topology.get());
    EXPECT_EQ(it->second, n.topology.get()) << "nodes of one shape share one topology";
    EXPECT_EQ(n.labels.at(std::string(kLeafLabel)), "leaf-" + std::to_string(i / 16));
    EXPECT_EQ(n.labels.at(std::string(kSpineLabel)), "spine-" + std::to_string(i / 128));
  }
  // Every leaf (16 nodes) holds at least four of the five shapes: no shape is bunched up at one
  // end of the cluster order, where first-fit would meet it first or last.
  for (std::size_t leaf = 0; leaf < 240 / 16; ++leaf) {
    std::set<std::string> shapes;
    for (std::size_t i = leaf * 16; i < leaf * 16 + 16; ++i) {
      shapes.insert(cluster->nodes[i].labels.at(std::string(kShapeLabel)));
    }
    EXPECT_GE(shapes.size(), 4u) << "leaf " << leaf;
  }
}

TEST(AddSyntheticNodes, RejectsUnknownPresetsAndKeepsNamesUnique) {
  VirtualCluster cluster;
  EXPECT_FALSE(AddSyntheticNodes({{"dgx-b300", 1}}, cluster).ok());
  EXPECT_FALSE(AddSyntheticNodes({{"pcie-4gpu", -1}}, cluster).ok());
  ASSERT_TRUE(AddSyntheticNodes({{"pcie-4gpu", 2}}, cluster).ok());
  ASSERT_TRUE(AddSyntheticNodes({{"pcie-4gpu", 2}}, cluster).ok());
  ASSERT_EQ(cluster.nodes.size(), 4u);
  std::set<std::string> names;
  for (const VirtualNode& n : cluster.nodes) names.insert(n.name);
  EXPECT_EQ(names.size(), 4u);
  EXPECT_EQ(cluster.shapes, (std::vector<ShapeCount>{{"pcie-4gpu", 4}}));
}

TEST(AddTopologyDirectory, AddsFilesWithGpusAndSkipsTheRest) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  VirtualCluster cluster;
  std::vector<std::string> skipped;
  ASSERT_TRUE(AddTopologyDirectory(testing::SharedTopologiesDir().string(), 2, cluster, &skipped).ok());
  ASSERT_FALSE(cluster.nodes.empty());
  EXPECT_EQ(cluster.nodes.size() % 2, 0u);
  EXPECT_FALSE(skipped.empty()) << "the shared exports include CPU-only machines";
  for (const std::string& s : skipped) EXPECT_NE(s.find(".xml"), std::string::npos) << s;
  for (const VirtualNode& n : cluster.nodes) EXPECT_FALSE(n.topology->gpus.empty()) << n.name;
  // Copies of one file share its topology.
  EXPECT_EQ(cluster.nodes[0].topology, cluster.nodes[1].topology);
  EXPECT_EQ(cluster.nodes[0].labels.at(std::string(kShapeLabel)),
            cluster.nodes[1].labels.at(std::string(kShapeLabel)));
}

TEST(AddTopologyDirectory, ErrorsNameTheProblem) {
  VirtualCluster cluster;
  auto missing = AddTopologyDirectory("/nonexistent-dir", 1, cluster);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("not a directory"), std::string::npos);

  const fs::path dir = fs::temp_directory_path() / ("toposched-sim-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto empty = AddTopologyDirectory(dir.string(), 1, cluster);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message().find("no topology file with GPUs"), std::string::npos);
  std::ofstream(dir / "broken.xml") << "<topology><cpu";
  auto broken = AddTopologyDirectory(dir.string(), 1, cluster);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().message().find("broken.xml"), std::string::npos) << broken.error().message();
  EXPECT_FALSE(AddTopologyDirectory(dir.string(), 0, cluster).ok());
  fs::remove_all(dir);
  EXPECT_TRUE(cluster.nodes.empty());
}

// A topology mix: N nodes drawn from the files with GPUs, the same for a seed, another for
// another seed, every node a copy of one file.
TEST(AddTopologyMix, DrawsNodesFromTheFilesBySeed) {
  TOPOSCHED_SKIP_WITHOUT_SHARED_TOPOLOGIES();
  const std::string dir = testing::SharedTopologiesDir().string();
  auto mix = [&](std::uint32_t seed) {
    VirtualCluster cluster;
    EXPECT_TRUE(AddTopologyMix(dir, 60, seed, cluster).ok());
    std::vector<std::string> names;
    for (const VirtualNode& n : cluster.nodes) {
      EXPECT_FALSE(n.topology->gpus.empty()) << n.name;
      names.push_back(n.name);
    }
    return names;
  };
  const std::vector<std::string> a = mix(1);
  EXPECT_EQ(a.size(), 60u);
  EXPECT_EQ(mix(1), a);
  EXPECT_NE(mix(2), a);
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), a.size()) << "names are unique";
  VirtualCluster cluster;
  EXPECT_FALSE(AddTopologyMix(dir, 0, 1, cluster).ok());
  EXPECT_FALSE(AddTopologyMix("/nonexistent-dir", 5, 1, cluster).ok());
}

}  // namespace
}  // namespace toposched::simulate
