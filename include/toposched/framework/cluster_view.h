#pragma once
// ClusterView: what a pool-aware plugin may know beyond the node it scores: where every node
// sits in the network, which pods of a Prefill/Decode pool already run where, and how much
// whole-GPU capacity each node has left. The extender builds one per request from its store's
// snapshot; the simulator keeps one over its virtual cluster; tests fill a StaticClusterView.
// Immutable while a cycle reads it (CycleState holds a shared_ptr).

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/hash.h"
#include "toposched/pd/network.h"
#include "toposched/placement/placement.h"
#include "toposched/placement/request.h"
#include "toposched/topology/node_topology.h"

namespace toposched::framework {

// A running (bound or reserved) pod of a pool.
struct PoolMember {
  std::string uid;
  std::string node;
  PodRole role = PodRole::kNone;
  int gpus = 0;  // whole GPUs, or vGPUs for shared requests
  int rdma_nics = 0;
  LinkClass worst_class = LinkClass::kPIX;  // its worst GPU->NIC class (kPIX without NICs)
  bool kv_ipc = false;  // it set toposched.io/kv-ipc: same-node CUDA IPC needs both ends' consent
  bool operator==(const PoolMember&) const = default;
};

// The hash NodeSummary's hashes use (std::hash of the text).
inline std::uint64_t PositionHash(std::string_view text) {
  return std::hash<std::string_view>{}(text);
}
// A node's place in a stable order of nodes: FNV-1a (64-bit) of its name, the same in every
// process, replica and release (std::hash is not), whatever order a node list comes in. The
// extender breaks ties among its best nodes by it (extender::PreferOneOfTheBest).
constexpr std::uint64_t NodeOrderKey(std::string_view name) {
  return Fnv1a64(name);
}

struct NodeSummary {
  std::string_view name;
  const pd::Location* location = nullptr;  // never null
  int free_gpus = 0;                       // GPUs neither exclusive nor shared
  int free_rdma_nics = 0;
  bool schedulable = true;
  // When the view has them (null otherwise): PositionHash of each of location's domains, and
  // of the name; a plugin matching nodes against a few known domains compares these first.
  const std::uint64_t* domain_hashes = nullptr;
  std::uint64_t name_hash = 0;
  // free_gpus by the GPUs' vendor (VendorIndex): a pod's GPUs are all of its vendor, so a node
  // of AMD GPUs has no room for an NVIDIA pod however many are free.
  std::array<int, kGpuVendors> free_by_vendor{};
  int FreeGpusFor(GpuVendor vendor) const { return free_by_vendor[VendorIndex(vendor)]; }
};

// What lets a pool-aware plugin keep what it derived from a pool across cycles: while a view
// gives an equal token for the pool, the pool's members and every node's position are what they
// were when the token was first given (free devices may differ). version 0: the view keeps no
// versions, nothing may be kept. `positions` is compared by identity (the one object is shared
// until a position changes) and kept alive by whoever keeps the token.
struct PoolToken {
  std::uint64_t version = 0;
  std::shared_ptr<const void> positions;
  bool operator==(const PoolToken&) const = default;
};

class ClusterView {
 public:
  virtual ~ClusterView() = default;
  virtual const pd::NetworkConfig& network() const = 0;
  // The node's position; a node the view does not know gets one that shares no tier.
  virtual pd::Location Locate(std::string_view node) const = 0;
  // The pool's running pods, any order; empty for an unknown pool or "". Valid as long as the
  // view is (a cycle holds its view).
  virtual std::span<const PoolMember> PoolMembers(std::string_view pool) const = 0;
  // Every node, in a stable order (the store's / the cluster's).
  virtual void ForEachNode(const std::function<void(const NodeSummary&)>& fn) const = 0;
  // Calls `fn` with one node's summary, as ForEachNode would give it (its pointers valid during
  // the call); false, without calling it, when the view does not know the node. The default is
  // a pass over every node.
  virtual bool WithNode(std::string_view node, const std::function<void(const NodeSummary&)>& fn) const;
  // Every node, those of equal domains (NodeSummary::domain_hashes) one after another: a pass
  // that needs one node per position returns false from `fn` to skip the rest of the current
  // run of equal domains. The default gives ForEachNode's order and never skips, which is
  // always correct (every node is visited), only not faster.
  virtual void ForEachNodeByPosition(const std::function<bool(const NodeSummary&)>& fn) const;
  // The pool's token (PoolToken); the default keeps no versions.
  virtual PoolToken PoolVersion(std::string_view pool) const;
  // The runs ForEachNodeByPosition gives, by index, in a view that gives PoolTokens: the same
  // runs (the same nodes, by index) while a token's positions are the same object. 0: the view
  // has none (the default).
  virtual std::size_t PositionRunCount() const { return 0; }
  // Calls `fn` with each node of run `run` (< PositionRunCount()) until it returns false.
  virtual void ForEachNodeInRun(std::size_t /*run*/,
                                const std::function<bool(const NodeSummary&)>& /*fn*/) const {}
};

// What a node has free for new pods, as every view counts it (the extender's store and the
// simulator's): GPUs neither exclusive nor shared and not marked unusable (NodeTopology's
// Gpu::unusable), by vendor, and RDMA NICs not in use; nothing on a node that takes no new device
// placements (`held`: an allocation there could not be read back).
struct FreeDevices {
  std::array<int, kGpuVendors> gpus_by_vendor{};
  int gpus = 0;
  int rdma_nics = 0;
};
FreeDevices FreeDevicesOf(const NodeTopology* topology, const NodeAllocation& allocated, bool held);

// A plain in-memory view: tests, the simulator, `toposched advise`.
class StaticClusterView : public ClusterView {
 public:
  using VendorCounts = std::array<int, kGpuVendors>;  // free GPUs by VendorIndex
  // `free_gpus` alone: NVIDIA GPUs.
  static VendorCounts Nvidia(int free_gpus) { return {free_gpus, 0}; }
  struct Node {
    pd::Location location;
    VendorCounts free_by_vendor{};
    int free_rdma_nics = 0;
    bool schedulable = true;
  };
  explicit StaticClusterView(pd::NetworkConfig network = {}) : network_(std::move(network)) {}

  // Adds or replaces a node (located by its labels, or by `location` when given).
  void SetNode(const std::string& name, const std::map<std::string, std::string>& labels, int free_gpus,
               int free_rdma_nics = 0, bool schedulable = true);
  void SetNode(const std::string& name, const std::map<std::string, std::string>& labels,
               VendorCounts free_gpus, int free_rdma_nics, bool schedulable = true);
  void SetNodeLocation(const std::string& name, pd::Location location, VendorCounts free_gpus,
                       int free_rdma_nics = 0, bool schedulable = true);
  void SetFree(std::string_view name, int free_gpus, int free_rdma_nics);
  void SetFree(std::string_view name, VendorCounts free_gpus, int free_rdma_nics);
  void AddMember(const std::string& pool, PoolMember member);
  void RemoveMember(std::string_view uid);  // from whichever pool holds it; no-op when absent

  const pd::NetworkConfig& network() const override { return network_; }
  pd::Location Locate(std::string_view node) const override;
  std::span<const PoolMember> PoolMembers(std::string_view pool) const override;
  void ForEachNode(const std::function<void(const NodeSummary&)>& fn) const override;
  bool WithNode(std::string_view node, const std::function<void(const NodeSummary&)>& fn) const override;

 private:
  pd::NetworkConfig network_;
  std::vector<std::string> order_;
  std::map<std::string, Node, std::less<>> nodes_;
  std::map<std::string, std::vector<PoolMember>, std::less<>> pools_;
};

}  // namespace toposched::framework
