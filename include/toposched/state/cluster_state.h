#pragma once
// Cluster state for the extender: every node's topology, labels and allocated devices, and
// every bound pod's allocation. Readers take an immutable Snapshot (one per request, no lock
// held while they use it); writers go through ClusterStore, which serialises changes per node,
// persists a bind before it becomes visible, and publishes a new snapshot.
//
// Invariant: a published NodeRecord's `allocated` never exceeds its topology's capacity (each
// GPU exclusive to one pod or shared within its share count, memory and cores; each RDMA NIC
// to one pod). ClusterStore checks it on every change, whatever the caller computed.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/framework/allocation.h"
#include "toposched/framework/cluster_view.h"
#include "toposched/placement/placement.h"
#include "toposched/placement/rare_class.h"
#include "toposched/topology/node_topology.h"

namespace toposched::state {

// What a source says about a node (topology may be null: the node published none yet).
struct NodeSpec {
  std::string name;
  std::shared_ptr<const NodeTopology> topology;
  std::map<std::string, std::string> labels;
  bool schedulable = true;
  // The Node's status.allocatable.cpu in milli-cores; -1: unknown (the file source, a Node
  // without it). Only the packing score reads CPU (NodeRecord::cpu_free_milli).
  std::int64_t cpu_allocatable_milli = -1;
};

// One pod's devices on one node, as bind committed them.
struct PodAllocation {
  std::string uid, pod_namespace, pod_name, node;
  framework::AllocationDelta delta;      // topology indices
  std::int64_t topology_generation = 0;  // of the node when bound
  LinkClass worst_class = LinkClass::kPIX;
  // Devices per container, init containers first (HAMi's annotation order): how the kube
  // source splits the GPUs into HAMi's per-container segments. Empty: one container takes all.
  // Not journaled (the file source has no containers to hand devices to).
  std::vector<int> container_devices;
  // How many leading entries of container_devices are init containers: they run before the app
  // containers, one at a time, so each takes its devices from the start of the pod's set.
  int init_containers = 0;
  // The pod's Prefill/Decode role and pool (label llm-d.ai/role and the configured pool label):
  // pool-aware plugins score against where the pool's pods run.
  PodRole role = PodRole::kNone;
  std::string pool;
  bool kv_ipc = false;  // the pod set toposched.io/kv-ipc: true (same-node KV transfer over CUDA IPC)
  // Non-empty: the source could not read this pod's allocation back (ClusterStore::Hold), and
  // this says why. `delta` then holds only the devices its record still identifies, whole.
  std::string hold;
  // A pod another scheduler placed (no allocation record of ours or HAMi's): it holds as many
  // devices as it asked, but which ones the kubelet gave it is not known. `delta` names devices
  // chosen by the kube source's rule (docs/operations.md, "Pods of other schedulers").
  bool foreign = false;
  bool operator==(const PodAllocation&) const = default;
};

struct NodeRecord {
  std::string name;
  std::shared_ptr<const NodeTopology> topology;
  std::uint64_t topology_fingerprint = 0;  // hash of topology->Fingerprint(); 0 without topology
  std::string fingerprint;                 // topology->Fingerprint() itself (computed once), "" without
  std::int64_t topology_generation = 0;    // +1 whenever the fingerprint changes
  std::map<std::string, std::string> labels;
  bool schedulable = true;
  NodeAllocation allocated;
  std::uint64_t allocation_version = 0;  // +1 on every change of `allocated`
  std::vector<std::string> pods;         // UIDs allocated here, sorted
  // UIDs (sorted) of the pods here whose allocation could not be read back (ClusterStore::Hold).
  // While any remains, the node takes no new device placements: which devices such a pod holds
  // is not known, so none can be proved free (fail closed). Its deletion or a readable record
  // ends the hold.
  std::vector<std::string> held_pods;
  // Nodes with equal class keys are in the same scheduling state (same hardware fingerprint,
  // allocation, class labels (StoreOptions::class_labels), schedulability): one filter/score
  // result serves them all. 64-bit hash; a collision could at worst mis-score a node, never
  // oversubscribe one (bind re-checks).
  std::uint64_t class_key = 0;
  // Derived by the store whenever the record changes, for cluster views' passes over every node:
  // where the node sits by its labels under StoreOptions::tier_labels (position.node = name, a
  // missing label ""; HyperNode positions override it in views), and what is free on it.
  pd::Location position;
  // PositionHash of the name and of each of position's domains: passes over every node match
  // them against the few names and domains that matter (a pool's), comparing strings only on a
  // hash match.
  std::uint64_t name_hash = 0;
  std::uint64_t order_key = 0;  // framework::NodeOrderKey of the name
  std::vector<std::uint64_t> position_hashes;
  int free_gpus = 0;  // GPUs neither exclusive nor shared (0 while held_pods is not empty)
  std::array<int, kGpuVendors> free_by_vendor{};  // free_gpus by the GPUs' vendor
  int free_rdma_nics = 0;                         // RDMA NICs no pod holds (0 while held_pods is not empty)
  // What the node has whatever is in use or held: its GPUs by vendor and its RDMA NICs (a rare
  // node class is one of hardware; packing::RareShape).
  packing::NodeHardware hardware;
  bool held() const { return !held_pods.empty(); }
  // CPU in milli-cores: the Node's allocatable (-1: unknown) and the requests of the active pods
  // bound to the node, every pod, with devices or not (ClusterStore::SetPodCpu). Not part of the
  // class key: only the packing score reads it, and the extender asks for it only where it
  // binds (Evaluator::CpuTight).
  std::int64_t cpu_allocatable_milli = -1;
  std::int64_t cpu_requested_milli = 0;
  // What kube-scheduler's NodeResourcesFit would leave for another pod; -1 when unknown.
  std::int64_t cpu_free_milli() const {
    return cpu_allocatable_milli < 0 ? -1
                                     : std::max<std::int64_t>(0, cpu_allocatable_milli - cpu_requested_milli);
  }
};

// The class key of a record's current content (ClusterStore keeps records' keys up to date).
// `class_labels` (sorted, unique): the label keys that take part, a missing label distinct from
// an empty value; null: every label.
std::uint64_t ComputeClassKey(const NodeRecord& record,
                              const std::vector<std::string>* class_labels = nullptr);

class Snapshot {
 public:
  Snapshot() = default;
  const NodeRecord* Find(std::string_view name) const;  // null when unknown
  // The hot path of a filter over thousands of names: the position of `name` in nodes() (npos
  // when unknown), from a flat open-addressing table, and the class keys in one array, so a
  // lookup touches two small contiguous tables instead of map nodes and records.
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t IndexOf(std::string_view name) const;
  // IndexOf, trying `hint` first: one comparison when the caller knows the likely position (the
  // extender's prioritize: the nodes its filter passed, in order); a wrong or out-of-range hint
  // only costs the lookup.
  std::size_t IndexOf(std::string_view name, std::size_t hint) const;
  // IndexOf for each of `names` into `out` (resized): the same answers, faster for thousands.
  void IndexOf(std::span<const std::string_view> names, std::vector<std::size_t>& out) const;
  std::span<const std::uint64_t> class_keys() const { return class_keys_; }  // = nodes()[i]->class_key
  // What passes over every node (cluster views, pool keys) read of each record, parallel to
  // nodes() and contiguous: a 5,000-node pass that dereferences each record waits on memory
  // for most of its time.
  struct Brief {
    std::string_view name;        // the record's name (the record lives as long as the snapshot)
    std::uint64_t name_hash = 0;  // NodeRecord::name_hash
    int free_gpus = 0;
    int free_rdma_nics = 0;
    bool schedulable = false;  // schedulable and not held
    std::array<int, kGpuVendors> free_by_vendor{};
    packing::NodeHardware hardware;    // NodeRecord::hardware
    std::int64_t cpu_free_milli = -1;  // NodeRecord::cpu_free_milli()
    std::uint64_t order_key = 0;       // NodeRecord::order_key
  };
  std::span<const Brief> briefs() const { return briefs_; }
  // NodeRecord::position_hashes of node i at [i * tier_labels().size(), ...): a node whose
  // record has another count of domains gets zeros.
  std::span<const std::uint64_t> position_hashes() const { return position_hashes_; }
  // The nodes grouped by position: indices into nodes(), those whose position_hashes are equal
  // over every tier one after another; run r is order[starts[r]] .. order[starts[r + 1] - 1]
  // (starts ends with order.size()). A pass that needs one node per position (KvTransferCost's
  // scale) visits a few nodes per run instead of every node. Shared between snapshots until
  // the node set or a node's position changes.
  struct PositionRuns {
    std::vector<std::uint32_t> order;
    std::vector<std::uint32_t> starts;
    std::vector<std::uint32_t> run_of;  // node index -> the run it is in
  };
  // The same object, shared: a cache of anything derived from the nodes' positions keeps it and
  // compares it with a later snapshot's (the same object: no node and no position changed).
  std::shared_ptr<const PositionRuns> shared_position_runs() const { return position_runs_; }
  const PositionRuns& position_runs() const;
  std::span<const std::shared_ptr<const NodeRecord>> nodes() const { return nodes_; }
  std::size_t size() const { return nodes_.size(); }
  std::uint64_t version() const { return version_; }  // +1 per published change
  // Each distinct NodeRecord::hardware with how many schedulable nodes have it (a cordoned node
  // is not counted); rebuilt only when a node comes, goes, changes hardware or is cordoned or
  // uncordoned.
  const packing::HardwareCensus& census() const;
  // The tier labels the records' positions were resolved with (StoreOptions::tier_labels).
  const std::vector<std::string>& tier_labels() const;

 private:
  friend class ClusterStore;
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept;
  };
  std::vector<std::shared_ptr<const NodeRecord>> nodes_;  // sorted by name
  std::vector<std::uint64_t> class_keys_;                 // parallel to nodes_
  std::vector<Brief> briefs_;                             // parallel to nodes_
  std::vector<std::uint64_t> position_hashes_;            // tiers per node
  std::shared_ptr<const PositionRuns> position_runs_;
  // Name -> index into nodes_; shared between snapshots until the node set changes.
  struct NameIndex;
  std::shared_ptr<const NameIndex> index_;
  std::shared_ptr<const std::vector<std::string>> tier_labels_;
  std::shared_ptr<const packing::HardwareCensus> census_;
  std::uint64_t version_ = 0;
};

// Where binds are made durable before they are acknowledged: the file source's journal
// (written and fsync'ed in RecordBind), or the API server (the kube source's RecordBind only
// prepares the pod's annotations, with no API call under the lock; the extender's BindHooks then
// write them, in the Binding itself for kube-scheduler's bind, as a patch for Volcano's
// allocate). Called with the node's lock held; must not call back into the store. `node` is the
// node's record before the change (its topology names the devices).
class Persistence {
 public:
  virtual ~Persistence() = default;
  virtual Status RecordBind(const PodAllocation& allocation, const NodeRecord& node) = 0;
  virtual Status RecordRelease(const PodAllocation& allocation) = 0;
};

enum class BindKind : std::uint8_t {
  kBound,         // newly bound
  kAlreadyBound,  // the pod was already bound to this node (a retried bind): nothing changed
};

struct BindResult {
  BindKind kind = BindKind::kBound;
  PodAllocation allocation;
};

struct StoreOptions {
  int max_shares_per_gpu = 10;  // HAMi deviceSplitCount; the capacity check uses it
  // The node labels that take part in node classes (NodeRecord::class_key); unset: every label.
  // The extender sets none (extender::StoreOptionsFor): a label unique to each node
  // (kubernetes.io/hostname, which every node carries; cloud instance ids) would otherwise make
  // every node a class of its own and every filter call evaluate every node.
  std::optional<std::vector<std::string>> class_labels = std::nullopt;
  // The network tiers' labels, innermost first (NetworkConfig::tiers): each record's position is
  // resolved from them once, when the record changes, not by every pool pod's pass over the nodes.
  std::vector<std::string> tier_labels = {};
};

class ClusterStore {
 public:
  // `persistence` may be null (in memory only: tests, simulate). Not owned; must outlive the store.
  explicit ClusterStore(Persistence* persistence, StoreOptions options = {});
  ~ClusterStore();
  ClusterStore(const ClusterStore&) = delete;
  ClusterStore& operator=(const ClusterStore&) = delete;

  // Sets the persistence after construction, for a source that needs the store to exist
  // first (the kube source). Call before the first Bind or Release.
  void SetPersistence(Persistence* persistence);

  std::shared_ptr<const Snapshot> snapshot() const;

  // Adds or replaces a node's topology, labels and schedulability, keeping its allocations.
  // A changed topology fingerprint bumps topology_generation; allocations that no longer fit the
  // new topology (device index gone) are kept and reported by the returned error (the node is
  // updated anyway: the hardware is what it is).
  Status UpsertNode(NodeSpec spec);
  // UpsertNode for many nodes, published as one snapshot (a source's initial load: n single
  // upserts would copy the node list and rebuild the name index n times). The last spec of a
  // name wins; the errors of all nodes are joined; every valid node is updated regardless.
  Status UpsertNodes(std::vector<NodeSpec> specs);
  // Forgets a node; its pods' allocations are dropped with it. Their CPU requests (SetPodCpu)
  // are not: the source reports those pods' end itself, and a node that comes back starts from
  // what the pods still bound to its name ask.
  void RemoveNode(std::string_view name);

  // Pod `uid` is active and bound to `node`, requesting `milli` CPU (placement::PodCpuRequestMilli);
  // `node` "" (the pod finished, was deleted or is not bound): it requests nothing. Every pod
  // counts, with devices or not, and one the store does not know the node of yet is kept for
  // that node. Changes the node's cpu_requested_milli and publishes only when the sum changes.
  void SetPodCpu(std::string_view uid, std::string_view node, std::int64_t milli);
  // SetPodCpu for many pods, published as one snapshot (a source's relist: a publish per pod
  // would copy the node list once per pod). Applied in order: a later entry of a UID wins.
  struct PodCpu {
    std::string uid, node;
    std::int64_t milli = 0;
  };
  void SetPodCpus(std::span<const PodCpu> pods);
  // A pod's request is clamped to this (a thousand million cores): node sums cannot overflow
  // before 2^23 such pods, and saturate after.
  static constexpr std::int64_t kMaxPodCpuMilli = std::int64_t{1} << 40;
  // The CPU pod `uid` requests where it is bound (SetPodCpu), 0 when none is known.
  std::int64_t PodCpuMilli(std::string_view uid) const;

  // Puts back an allocation read from persistence at start (journal replay, pod annotations)
  // without persisting it again. Errors: unknown node, device out of range, over capacity,
  // UID already bound elsewhere. Restoring the same devices on the same node again is a no-op.
  Status Restore(const PodAllocation& allocation);

  // Fail closed for an allocation the source could not read back (an annotation naming devices
  // the node lacks, fields that disagree, devices another pod already holds): `allocation.hold`
  // says why (required), `allocation.delta` lists the devices its record still identifies. Those
  // that are free are taken whole; the rest are already held by someone. The pod joins the
  // node's held_pods, which keeps the node out of new device placements, until Release(uid) (the
  // pod is deleted, or its record became readable and the source restores it). Holding a pod that
  // already has an allocation replaces it. Errors: empty UID or reason, unknown node.
  Status Hold(PodAllocation allocation);

  // The bind transaction, under `node`'s lock (binds to other nodes proceed in parallel):
  //   1. a pod already bound to this node -> kAlreadyBound with its allocation; bound to another
  //      node -> error (kConflict);
  //   2. `decide` gets the node's current record and returns the allocation to make (or an
  //      error, returned as is);
  //   3. the store applies it to a copy of the record and checks capacity (error, nothing
  //      changes), persists it (error, nothing changes), then publishes the new snapshot.
  using Decide = std::function<Result<PodAllocation>(const NodeRecord&)>;
  Result<BindResult> Bind(std::string_view node, std::string_view pod_uid, const Decide& decide);

  // Releases a pod's devices (pod deleted, Volcano deallocate, a Binding that failed):
  // persisted (unless `persist` is false: the source reports a pod that is already gone, so
  // there is nothing to undo), then published. Returns the released allocation, or nullopt
  // when the UID holds nothing. A held pod (Hold) is released only with `persist` false: nothing
  // but the source's report that the pod is gone proves its devices free.
  Result<std::optional<PodAllocation>> Release(std::string_view pod_uid, bool persist = true);
  // Release, only while the pod's allocation is still `expected` (the same node and devices),
  // checked under the pod's claim: a caller undoing its own bind must not release what another
  // bind of the same pod made meanwhile. nullopt when it is not.
  Result<std::optional<PodAllocation>> ReleaseIfStill(const PodAllocation& expected);

  std::optional<PodAllocation> FindPod(std::string_view pod_uid) const;
  // The node where the pod holds devices of its own allocation (not foreign, not held), or ""
  // when it holds none: a pod pending with such an allocation (its bind never completed) fits
  // there on its own devices. Copies no allocation, for the per-call verbs.
  std::string NodeOfOwnAllocation(std::string_view pod_uid) const;
  // The allocations of a Prefill/Decode pool's pods (PodAllocation::pool), by UID; empty for "".
  std::vector<PodAllocation> PoolPods(std::string_view pool) const;
  // The same as pool-aware plugins see them (framework::PoolMember: no devices, no containers).
  std::vector<framework::PoolMember> PoolMembers(std::string_view pool) const;
  // The pool's version: it changes (to a value never used before) whenever one of its pods is
  // indexed, replaced or dropped; 0 for a pool that never had one. PoolMembers with the version
  // they were read at, under one lock, for caches of what a pool holds: sorted by UID, and
  // shared, not copied (a bind or release of a pool pod builds the list, not the next reader).
  std::uint64_t PoolVersion(std::string_view pool) const;
  std::pair<std::uint64_t, std::shared_ptr<const std::vector<framework::PoolMember>>> VersionedPoolMembers(
      std::string_view pool) const;
  std::size_t pod_count() const;

  // Node positions that override the labels' (Volcano HyperNodes, network.hyperNodes): the
  // source replaces the whole map when HyperNodes change. Null: none.
  void SetNodeLocations(std::shared_ptr<const std::map<std::string, pd::Location>> locations);
  std::shared_ptr<const std::map<std::string, pd::Location>> node_locations() const;

  // Ready to serve: the source has loaded everything once (readyz).
  void SetSynced(bool synced);
  bool synced() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether `snapshot`'s records' positions (NodeRecord::position) were resolved under `network`'s
// tiers (StoreOptions::tier_labels equal to their labels, in order): then they can be read
// instead of each node's labels.
bool PositionsResolvedFor(const Snapshot& snapshot, const pd::NetworkConfig& network);

// The cluster as pool-aware plugins see it for one pod of `pool`: positions from each node's
// labels (or from `hyper_nodes` where it places the node: Volcano HyperNodes), the pool's
// pods from the store, free GPUs and RDMA NICs from the snapshot. Only `pool`'s members are
// listed (the view is built per request). `network` must outlive the view.
std::shared_ptr<const framework::ClusterView> MakeClusterView(
    const ClusterStore& store, std::shared_ptr<const Snapshot> snapshot, const pd::NetworkConfig& network,
    std::string_view pool, std::shared_ptr<const std::map<std::string, pd::Location>> hyper_nodes = nullptr);
// The same with the pool's members given (ClusterStore::PoolMembers(pool)), shared, not copied.
// `pool_version`: the ClusterStore::PoolVersion the members were read at (0: unknown); with it,
// and where the view places nodes by the records' own positions, the view gives a
// framework::PoolToken (the version and the snapshot's shared position runs).
std::shared_ptr<const framework::ClusterView> MakeClusterView(
    std::shared_ptr<const Snapshot> snapshot, const pd::NetworkConfig& network, std::string_view pool,
    std::shared_ptr<const std::vector<framework::PoolMember>> members,
    std::shared_ptr<const std::map<std::string, pd::Location>> hyper_nodes = nullptr,
    std::uint64_t pool_version = 0);
// A pool pod as pool-aware plugins see it.
framework::PoolMember MemberOf(const PodAllocation& pod);

// The start of the message of a conflict (a pod bound elsewhere) for people; callers read its
// code, ErrorCode::kConflict.
inline constexpr std::string_view kConflictTag = "conflict: ";

// ---- the file source ----
//
// A cluster in a directory, for `toposched serve --cluster DIR` and tests:
//   DIR/nodes/*.json         one node document each (docs/extender.md):
//     {"name": "gpu-a1", "labels": {...}, "unschedulable": false,
//      "topology": {NodeTopology JSON} | "topologyFile": "hgx.json" | "preset": "hgx-h100-8gpu"}
//     (topologyFile: a NodeTopology JSON file, relative to DIR; parsed once per file)
//   DIR/allocations.journal  the binds and releases, one JSON line each with a checksum,
//     appended and fdatasync'ed before a bind is acknowledged. Replayed at Load; a torn last
//     line (crash mid-write) is dropped and truncated away; a corrupt line in the middle is an
//     error (refuse to start rather than forget a bind). Load then compacts the journal to the
//     live allocations (write temp, fsync, rename, fsync DIR).
// The directory is locked (flock on DIR/.lock) so two servers cannot write one journal.
struct FileSourceOptions {
  std::size_t max_node_document_bytes = 16u << 20;
  std::size_t max_journal_line_bytes = 1u << 20;
};

class FileSource : public Persistence {
 public:
  // Opens DIR, takes the lock, reads every node document (errors name the file and the field).
  static Result<std::unique_ptr<FileSource>> Open(const std::string& dir, FileSourceOptions options = {});
  ~FileSource() override;

  // Upserts every node into `store`, replays and compacts the journal, marks the store synced.
  // Call once, before serving. `store` must use this source as its persistence.
  Status Load(ClusterStore& store);

  Status RecordBind(const PodAllocation& allocation, const NodeRecord& node) override;
  Status RecordRelease(const PodAllocation& allocation) override;

  std::size_t node_count() const;
  const std::string& dir() const;
  // What Open and Load skipped without failing, one sentence each, for the caller to log: a
  // dropped torn last journal line, a journaled allocation whose node is gone or no longer
  // fits (dropped, and forgotten by the compaction), an empty nodes directory.
  const std::vector<std::string>& warnings() const;

 private:
  struct Impl;
  explicit FileSource(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace toposched::state
