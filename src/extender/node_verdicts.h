#pragma once
// NodeVerdicts (private to the extender): one call's verdicts for the nodes of one snapshot,
// each evaluated once per key, which kube-scheduler's filter and prioritize and /explain read
// node by node.

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "evaluator.h"
#include "pool_index.h"

namespace toposched::extender {

// One call's verdicts for nodes of one snapshot (kube-scheduler's filter and prioritize, which
// name up to thousands of nodes): node i's verdict, evaluated once per key this call (the
// node's class; for a pool pod's scores also its position relative to the pool). The hot path:
// a key from the snapshot's contiguous class-key array and this call's verdicts in a short
// vector (a cluster has a few classes; a linear scan beats hashing at that size). Buffers are
// the thread's, reused between calls: one NodeVerdicts per thread at a time.
class NodeVerdicts {
 public:
  NodeVerdicts(Evaluator& evaluator, PodEntry& entry, std::shared_ptr<const state::Snapshot> snap, Want want);
  NodeVerdicts(const NodeVerdicts&) = delete;
  NodeVerdicts& operator=(const NodeVerdicts&) = delete;

  // The verdict for the snapshot's node at `index` (Snapshot::IndexOf).
  const ClassVerdict* At(std::size_t index);
  // Distinct keys evaluated so far (for logs and tests).
  std::size_t evaluated() const { return local_.size(); }
  const state::Snapshot& snapshot() const { return *snap_; }

 private:
  std::uint64_t KeyOf(std::size_t index);
  const ClassVerdict* Lookup(std::uint64_t key, std::size_t index);  // At without the direct table
  std::string_view DomainAt(const state::NodeRecord& record, std::size_t tier) const;

  static constexpr std::size_t kLinearClasses = 24;
  // A direct-mapped table in front of the lookups below: one predictable comparison per node
  // when a call's nodes come in an order whose classes do not repeat in a pattern
  // (kube-scheduler's workers interleave their chunks), where the linear scan's exit branch is
  // mispredicted most of the time.
  static constexpr std::size_t kDirect = 64;
  std::array<std::pair<std::uint64_t, const ClassVerdict*>, kDirect> direct_{};
  Evaluator& evaluator_;
  PodEntry& entry_;
  const std::shared_ptr<const state::Snapshot> snap_;
  const std::span<const std::uint64_t> class_keys_;
  const Want want_;
  std::optional<framework::CycleState> cycle_;
  std::vector<std::pair<std::uint64_t, std::shared_ptr<const ClassVerdict>>>& local_;
  FlatHashIndex<const ClassVerdict*>& many_;  // once a call sees more than kLinearClasses
  // Pool pods scored: where the pool's pods are.
  const bool pool_scoring_;
  const bool per_node_;
  // Scores only: nodes with less free CPU than this are keyed and evaluated with their own CPU
  // (Evaluator::CpuBound); the filter's pass or fail does not read CPU.
  std::int64_t cpu_bound_ = 0;
  std::int64_t CpuFreeIfBinding(std::size_t index) const;  // -1 where it does not bind
  bool positions_resolved_ = false;
  std::shared_ptr<const std::vector<framework::PoolMember>> pool_members_;
  std::uint64_t pool_version_ = 0;  // of pool_members_, when they are the pool's index's
  std::shared_ptr<const std::map<std::string, pd::Location>> positions_;
  // What the pool holds where: the multiset of its pods (role, devices, worst class, IPC
  // consent) on each node and in each tier's domain, as a commutative 64-bit hash; and, per
  // domain of tier t, the tier t + 1 domain all its pods sit in (mixed: they sit in several).
  using Content = PoolContent;
  int other_members_ = 0;  // the pool's pods other than the one scored
  Evaluator::PoolParts parts_;
  std::unordered_map<std::string_view, std::uint64_t> node_content_;
  std::vector<std::unordered_map<std::string_view, Content>> domain_content_;  // per tier
  // The same by the snapshot's hashes (Snapshot::briefs, position_hashes), which KeyOf reads
  // instead of the records when the records' positions are the ones that count (no
  // HyperNodes); unusable when two keys share a hash.
  bool by_hash_ = false;
  struct HashTables {  // the thread's, reused call after call (their arrays stay allocated)
    FlatHashIndex<std::pair<std::string_view, std::uint64_t>> node;
    std::vector<FlatHashIndex<Content>> domain;
  };
  static HashTables& ThreadTables();
  // The tables KeyOf reads: the pool's cached index (Evaluator::PoolIndexFor), or the thread's
  // when the scored pod is one of the pool's own (it must not count itself).
  std::shared_ptr<const PoolIndex> index_;
  const FlatHashIndex<std::pair<std::string_view, std::uint64_t>>* node_by_hash_ = nullptr;
  const std::vector<FlatHashIndex<Content>>* domain_by_hash_ = nullptr;
  // KeyOf by hash: a node without pool pods on it has its run's position key (the snapshot's
  // runs of nodes of equal domains, Snapshot::position_runs), computed once per run and call
  // whatever order the names come in. The thread's array, stamped with this call's generation.
  struct RunKey {
    std::uint64_t generation = 0;
    std::uint64_t position = 0;
    bool own = false;  // the tiers do not nest there: every node is its own key
  };
  static std::vector<RunKey>& ThreadRunKeys();
  // By hash: a bit per snapshot node, set where the node holds pods of the pool (the thread's
  // array, filled per call); null: look every node up.
  static std::vector<std::uint64_t>& ThreadPoolNodes();
  const std::uint64_t* pool_nodes_ = nullptr;
  const std::vector<std::uint32_t>* run_of_ = nullptr;
  RunKey* run_keys_ = nullptr;
  std::uint64_t generation_ = 0;
};

}  // namespace toposched::extender
