#pragma once
// The pool keys (private to the extender): what a Prefill/Decode pool's pods hold on each node
// and in each tier's domain, as commutative 64-bit hashes by the snapshot's name and domain
// hashes, and the per-pool index of them the evaluator keeps between calls
// (Evaluator::PoolIndexFor). NodeVerdicts keys a pool pod's scores by these contents.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "toposched/common/flat_hash_index.h"
#include "toposched/framework/cluster_view.h"
#include "toposched/state/cluster_state.h"

namespace toposched::extender {

// What a Prefill/Decode pool holds in one domain of a tier, for NodeVerdicts' keys: the multiset
// of its pods there (role, devices, worst class, IPC consent) as a commutative 64-bit hash, and
// the tier t + 1 domain all of them sit in (mixed: they sit in several).
struct PoolContent {
  std::uint64_t hash = 0;
  std::string_view parent;
  std::uint64_t parent_hash = 0;  // framework::PositionHash(parent)
  bool mixed = false;
  std::string_view domain;  // by hash: the domain (two domains with one hash: by string)
};

// A pool's members and what they hold where, by the snapshot's hashes (NodeVerdicts' keys), as
// of one version of the pool (ClusterStore::PoolVersion) and one set of node positions
// (Snapshot::shared_position_runs): what every prioritize call for the pool's pods would build
// again while neither changes, as when other pods bind between them. When only the pool changed
// (a pod of it bound or left, as in a rollout), the next index is the last one patched with the
// members that differ, not rebuilt: contents are sums, so a pod that leaves is subtracted.
struct PoolIndex {
  std::uint64_t version = 0;
  std::shared_ptr<const state::Snapshot::PositionRuns> runs;  // kept: compared by identity
  std::size_t tiers = 0;
  std::shared_ptr<const std::vector<framework::PoolMember>> members;  // by UID
  FlatHashIndex<std::pair<std::string_view, std::uint64_t>> node;     // name hash -> (name, content)
  std::vector<FlatHashIndex<PoolContent>> domain;                     // per tier: domain hash -> content
  // What PoolContent::domain and `node` view: append-only, shared by the patched successors.
  std::shared_ptr<std::deque<std::string>> names = std::make_shared<std::deque<std::string>>();
  FlatHashIndex<bool> uids;  // PositionHash of each member's UID
  int count = 0;
  bool usable = true;    // no two names, nor two domains of a tier, share a hash
  bool patched = false;  // built from the last index and the members that differ (for tests)
};

// One pool pod as the pool plugins see it (framework::PoolMember without uid and node).
std::uint64_t MemberHash(const framework::PoolMember& p);

// What BuildPoolTables found: the members counted, and whether the hashes told every name and
// domain apart.
struct PoolTables {
  int count = 0;
  bool usable = true;
};

// Adds `p`'s content to NodeVerdicts' by-hash tables (`sign` -1: subtracts it, for a pod that
// left; its node and domains are found as they were when it was added, the positions being the
// same). `keep` gives a view of a name that lives as long as the tables. False when two names
// or two domains share a hash.
bool ApplyMember(const framework::PoolMember& p, int sign, const state::Snapshot& snap, std::size_t tiers,
                 FlatHashIndex<std::pair<std::string_view, std::uint64_t>>& node,
                 std::vector<FlatHashIndex<PoolContent>>& domain,
                 const std::function<std::string_view(std::string_view)>& keep);

// NodeVerdicts' by-hash tables of what `members` (all but `skip_uid`'s) hold on each node and
// in each tier's domain, from `snap`'s hashes (ApplyMember).
PoolTables BuildPoolTables(const std::vector<framework::PoolMember>& members, const state::Snapshot& snap,
                           std::size_t tiers, std::string_view skip_uid,
                           FlatHashIndex<std::pair<std::string_view, std::uint64_t>>& node,
                           std::vector<FlatHashIndex<PoolContent>>& domain,
                           const std::function<std::string_view(std::string_view)>& keep);

}  // namespace toposched::extender
