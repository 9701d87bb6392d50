// The virtual cluster: synthetic shapes and topology files turned into framework nodes.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "toposched/agent/discovery.h"
#include "toposched/simulate/simulator.h"
#include "toposched/topology/synthetic.h"

namespace toposched::simulate {
namespace {

namespace fs = std::filesystem;

// Fractions of the default mix in parts per hundred; see DefaultShapes().
struct MixEntry {
  const char* preset;
  int percent;
};
constexpr MixEntry kDefaultMix[] = {
    {"hgx-h100-8gpu", 35}, {"hgx-a100-8gpu", 20},  {"cloud-vm-8gpu", 15},
    {"pcie-4gpu", 10},     {"inference-4gpu", 20},
};

ShapeCount& ShapeEntry(VirtualCluster& cluster, const std::string& shape) {
  for (ShapeCount& s : cluster.shapes) {
    if (s.shape == shape) return s;
  }
  cluster.shapes.push_back({shape, 0});
  return cluster.shapes.back();
}

// Node names must be unique: the framework caches per node name within a cycle.
class NameSet {
 public:
  explicit NameSet(const VirtualCluster& cluster) {
    for (const VirtualNode& n : cluster.nodes) names_.insert(n.name);
  }
  std::string Claim(const std::string& wanted) {
    std::string name = wanted;
    for (int k = 2; names_.count(name) != 0; ++k) name = wanted + "-" + std::to_string(k);
    names_.insert(name);
    return name;
  }

 private:
  std::set<std::string> names_;
};

// Appends one node; tier labels follow from its position so that they are deterministic.
void AddNode(VirtualCluster& cluster, NameSet& names, const std::string& name, const std::string& shape,
             std::shared_ptr<const NodeTopology> topology) {
  const int index = static_cast<int>(cluster.nodes.size());
  VirtualNode node;
  node.name = names.Claim(name);
  node.topology = std::move(topology);
  node.labels[std::string(kShapeLabel)] = shape;
  node.labels[std::string(kLeafLabel)] = "leaf-" + std::to_string(index / kNodesPerLeaf);
  node.labels[std::string(kSpineLabel)] = "spine-" + std::to_string(index / kNodesPerSpine);
  node.labels[std::string(kZoneLabel)] = "zone-" + std::to_string(index / kNodesPerZone);
  cluster.nodes.push_back(std::move(node));
  ++ShapeEntry(cluster, shape).count;
}

std::string Numbered(const std::string& base, int n, int width) {
  char digits[16];
  std::snprintf(digits, sizeof digits, "%0*d", width, n);
  return base + "-" + digits;
}

int DigitsFor(int count) {
  int width = 1;
  for (int c = count - 1; c >= 10; c /= 10) ++width;
  return std::max(width, 3);
}

}  // namespace

std::vector<ShapeCount> DefaultShapes(int nodes) {
  nodes = std::max(nodes, 0);
  // Largest remainder: floors first, then the leftover nodes to the largest fractions
  // (earlier entries on ties), so the counts always add up to `nodes`.
  std::vector<ShapeCount> out;
  std::vector<std::pair<int, std::size_t>> remainders;
  int assigned = 0;
  for (std::size_t i = 0; i < std::size(kDefaultMix); ++i) {
    const int exact100 = nodes * kDefaultMix[i].percent;
    out.push_back({kDefaultMix[i].preset, exact100 / 100});
    assigned += exact100 / 100;
    remainders.emplace_back(exact100 % 100, i);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t k = 0; assigned < nodes; ++k, ++assigned) ++out[remainders[k].second].count;
  return out;
}

Status AddSyntheticNodes(const std::vector<ShapeCount>& shapes, VirtualCluster& cluster) {
  // One topology per preset, shared by all its nodes (the framework and the engine's memo key
  // on the hardware, not the node).
  std::vector<std::shared_ptr<const NodeTopology>> topologies;
  int total = 0;
  for (const ShapeCount& s : shapes) {
    if (s.count < 0) return Error("shape " + s.shape + ": negative count " + std::to_string(s.count));
    TOPOSCHED_ASSIGN_OR_RETURN(const auto spec, SyntheticPreset(s.shape));
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(NodeTopology topology, GenerateSynthetic(spec), "shape " + s.shape);
    topologies.push_back(std::make_shared<const NodeTopology>(std::move(topology)));
    total += s.count;
  }
  // Smooth weighted round robin (nginx's): each step every shape gains its count, the richest
  // is emitted and pays the total. Deterministic, and every window of nodes holds the shapes
  // in proportion.
  // The shape list keeps the order the caller gave, not the interleaved order.
  for (const ShapeCount& s : shapes) {
    if (s.count > 0) ShapeEntry(cluster, s.shape);
  }
  NameSet names(cluster);
  std::vector<int> current(shapes.size(), 0);
  std::vector<int> emitted(shapes.size(), 0);
  for (int step = 0; step < total; ++step) {
    std::size_t best = 0;
    bool found = false;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      if (emitted[i] >= shapes[i].count) continue;
      current[i] += shapes[i].count;
      if (!found || current[i] > current[best]) {
        best = i;
        found = true;
      }
    }
    current[best] -= total;
    const ShapeCount& s = shapes[best];
    AddNode(cluster, names, Numbered(s.shape, emitted[best]++, DigitsFor(s.count)), s.shape,
            topologies[best]);
  }
  return Status::Ok();
}

namespace {

// A topology file with GPUs, loaded.
struct TopologyFile {
  std::string shape;  // the file's stem
  std::shared_ptr<const NodeTopology> topology;
};

// Every *.xml and *.json file of `dir` with GPUs, sorted by name; the others named in `skipped`.
Result<std::vector<TopologyFile>> LoadTopologyFiles(const std::string& dir,
                                                    std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Error(dir + ": not a directory");
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string ext = p.extension().string();
    if ((ext == ".xml" || ext == ".json") && it->is_regular_file(ec)) files.push_back(p);
  }
  if (ec) return Error(dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  std::vector<TopologyFile> out;
  for (const fs::path& file : files) {
    TOPOSCHED_ASSIGN_OR_RETURN(NodeTopology topology, LoadTopologyFile(file.string()));
    if (topology.gpus.empty()) {
      if (skipped != nullptr) skipped->push_back(file.filename().string());
      continue;
    }
    out.push_back({file.stem().string(), std::make_shared<const NodeTopology>(std::move(topology))});
  }
  if (out.empty()) return Error(dir + ": no topology file with GPUs (*.xml, *.json)");
  return out;
}

}  // namespace

Status AddTopologyDirectory(const std::string& dir, int copies, VirtualCluster& cluster,
                            std::vector<std::string>* skipped) {
  if (copies < 1) return Error("copies must be at least 1, got " + std::to_string(copies));
  TOPOSCHED_ASSIGN_OR_RETURN(const std::vector<TopologyFile> files, LoadTopologyFiles(dir, skipped));
  NameSet names(cluster);
  for (const TopologyFile& f : files) {
    const std::string base = ToKubernetesName(f.shape);
    for (int c = 0; c < copies; ++c) {
      AddNode(cluster, names, copies == 1 ? base : Numbered(base, c, DigitsFor(copies)), f.shape, f.topology);
    }
  }
  return Status::Ok();
}

Status AddTopologyMix(const std::string& dir, int nodes, std::uint32_t seed, VirtualCluster& cluster,
                      std::vector<std::string>* skipped) {
  if (nodes < 1) return Error("a topology mix needs at least 1 node, got " + std::to_string(nodes));
  TOPOSCHED_ASSIGN_OR_RETURN(const std::vector<TopologyFile> files, LoadTopologyFiles(dir, skipped));
  std::mt19937 rng(seed);
  std::vector<int> count(files.size(), 0);
  for (int n = 0; n < nodes; ++n) ++count[rng() % files.size()];
  // Each drawn file's nodes together, in file order, numbered per file: the same names and
  // order for a directory, size and seed.
  NameSet names(cluster);
  for (std::size_t f = 0; f < files.size(); ++f) {
    const std::string base = ToKubernetesName(files[f].shape);
    for (int c = 0; c < count[f]; ++c) {
      AddNode(cluster, names, Numbered(base, c, DigitsFor(count[f])), files[f].shape, files[f].topology);
    }
  }
  return Status::Ok();
}

Result<VirtualCluster> DefaultCluster(int nodes) {
  VirtualCluster cluster;
  TOPOSCHED_RETURN_IF_ERROR(AddSyntheticNodes(DefaultShapes(nodes), cluster));
  return cluster;
}

}  // namespace toposched::simulate
