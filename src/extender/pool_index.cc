// The pool keys: what a Prefill/Decode pool's pods hold on each node and in each tier's domain,
// as commutative hashes (MemberHash, ApplyMember, BuildPoolTables), and the per-pool index of
// them kept between calls (Evaluator::PoolIndexFor), patched rather than rebuilt when only a few
// of the pool's pods changed. NodeVerdicts keys a pool pod's scores by these contents.

#include "pool_index.h"

#include <string>
#include <utility>
#include <vector>

#include "evaluator.h"

namespace toposched::extender {

// One pool pod as the pool plugins see it (framework::PoolMember without uid and node).
std::uint64_t MemberHash(const framework::PoolMember& p) {
  const auto gpus = static_cast<std::uint64_t>(p.gpus);
  const auto nics = static_cast<std::uint64_t>(p.rdma_nics);
  return Mix64((static_cast<std::uint64_t>(p.role) + 1) | (gpus << 8) | (nics << 24) |
               (static_cast<std::uint64_t>(p.worst_class) << 40) |
               (static_cast<std::uint64_t>(p.kv_ipc) << 48));
}

// Adds `p`'s content to NodeVerdicts' by-hash tables (`sign` -1: subtracts it, for a pod that
// left; its node and domains are found as they were when it was added, the positions being the
// same). `keep` gives a view of a name that lives as long as the tables. False when two names
// or two domains share a hash.
bool ApplyMember(const framework::PoolMember& p, int sign, const state::Snapshot& snap, std::size_t tiers,
                 FlatHashIndex<std::pair<std::string_view, std::uint64_t>>& node,
                 std::vector<FlatHashIndex<PoolContent>>& domain,
                 const std::function<std::string_view(std::string_view)>& keep) {
  bool usable = true;
  const std::uint64_t h = sign > 0 ? MemberHash(p) : std::uint64_t{0} - MemberHash(p);  // mod 2^64
  const std::uint64_t name_hash = framework::PositionHash(p.node);
  if (auto* on = node.Find(name_hash); on != nullptr) {
    if (on->first != p.node) usable = false;
    on->second += h;
  } else {
    node.Insert(name_hash, {keep(p.node), h});
  }
  const std::size_t i = snap.IndexOf(p.node);
  if (i == state::Snapshot::npos) return usable;
  const std::span<const std::uint64_t> hashes = snap.position_hashes();
  const state::NodeRecord& record = *snap.nodes()[i];
  for (std::size_t t = 0; t < tiers; ++t) {
    const std::string_view d = record.position.domains[t];
    if (d.empty()) continue;
    const std::uint64_t parent = t + 1 < tiers ? hashes[i * tiers + t + 1] : 0;
    PoolContent* c = domain[t].Find(hashes[i * tiers + t]);
    if (c == nullptr) {
      domain[t].Insert(hashes[i * tiers + t], PoolContent{h, {}, parent, false, keep(d)});
      continue;
    }
    if (c->domain != d) usable = false;  // two domains, one hash
    c->hash += h;
    // A pod that leaves never clears `mixed`: a node keyed alone is exact, only slower.
    if (c->parent_hash != parent) c->mixed = true;
  }
  return usable;
}

// NodeVerdicts' by-hash tables of what `members` (all but `skip_uid`'s) hold on each node and
// in each tier's domain, from `snap`'s hashes (ApplyMember).
PoolTables BuildPoolTables(const std::vector<framework::PoolMember>& members, const state::Snapshot& snap,
                           std::size_t tiers, std::string_view skip_uid,
                           FlatHashIndex<std::pair<std::string_view, std::uint64_t>>& node,
                           std::vector<FlatHashIndex<PoolContent>>& domain,
                           const std::function<std::string_view(std::string_view)>& keep) {
  PoolTables out;
  node.clear();
  domain.resize(tiers);
  for (auto& d : domain) d.clear();
  for (const framework::PoolMember& p : members) {
    // The pod itself, when re-scored, is not one of the pool's pods to the plugins.
    if (!skip_uid.empty() && p.uid == skip_uid) continue;
    ++out.count;
    if (!ApplyMember(p, +1, snap, tiers, node, domain, keep)) out.usable = false;
  }
  return out;
}

namespace {

// The members of `after` not in `before` (or different there) into `added`, and those of
// `before` not in `after` (or different) into `removed`; both lists sorted by UID
// (ClusterStore::VersionedPoolMembers). False when more than `limit` differ: a rebuild is then
// as cheap.
bool DiffMembers(const std::vector<framework::PoolMember>& before,
                 const std::vector<framework::PoolMember>& after, std::size_t limit,
                 std::vector<const framework::PoolMember*>& added,
                 std::vector<const framework::PoolMember*>& removed) {
  std::size_t i = 0, j = 0;
  while (i < before.size() || j < after.size()) {
    if (added.size() + removed.size() > limit) return false;
    if (j == after.size() || (i < before.size() && before[i].uid < after[j].uid)) {
      removed.push_back(&before[i++]);
    } else if (i == before.size() || after[j].uid < before[i].uid) {
      added.push_back(&after[j++]);
    } else {
      if (!(before[i] == after[j])) {  // the same UID, placed or shaped otherwise
        removed.push_back(&before[i]);
        added.push_back(&after[j]);
      }
      ++i;
      ++j;
    }
  }
  return added.size() + removed.size() <= limit;
}

}  // namespace

std::shared_ptr<const PoolIndex> Evaluator::PoolIndexFor(std::string_view pool, const state::Snapshot& snap,
                                                         std::size_t tiers) {
  std::shared_ptr<const state::Snapshot::PositionRuns> runs = snap.shared_position_runs();
  if (runs == nullptr) return nullptr;
  std::lock_guard lock(pool_mu_);
  const auto it = pool_index_.find(pool);
  // The last index, when it was built for these positions: reused, or patched.
  PoolIndex* last = it != pool_index_.end() && it->second->runs == runs && it->second->tiers == tiers
                        ? it->second.get()
                        : nullptr;
  if (last != nullptr && last->version == store_.PoolVersion(pool)) return it->second;
  auto [version, members] = store_.VersionedPoolMembers(pool);
  auto index = std::make_shared<PoolIndex>();
  index->version = version;
  index->runs = std::move(runs);
  index->tiers = tiers;
  index->members = std::move(members);
  for (const framework::PoolMember& m : *index->members)
    index->uids.Insert(framework::PositionHash(m.uid), true);
  // A pool that changed by a few pods (a rollout binds its pods one by one): the last index's
  // tables less the pods that left, plus those that came.
  thread_local std::vector<const framework::PoolMember*> added, removed;
  added.clear();
  removed.clear();
  const bool patch =
      last != nullptr && last->usable &&
      DiffMembers(*last->members, *index->members, index->members->size() / 4 + 1, added, removed);
  if (patch) index->names = last->names;  // appended to from here on, never changed
  const auto keep = [&names = *index->names](std::string_view d) {
    return std::string_view(names.emplace_back(d));
  };
  if (patch) {
    // The map holds the only reference (other calls take theirs under pool_mu_, held here): the
    // tables move into the new version instead of being copied; the old index is dropped below.
    if (it->second.use_count() == 1) {
      index->node = std::move(last->node);
      index->domain = std::move(last->domain);
    } else {
      index->node = last->node;
      index->domain = last->domain;
    }
    index->count = last->count;
    index->patched = true;
    for (const framework::PoolMember* m : removed) {
      --index->count;
      if (!ApplyMember(*m, -1, snap, tiers, index->node, index->domain, keep)) index->usable = false;
    }
    for (const framework::PoolMember* m : added) {
      ++index->count;
      if (!ApplyMember(*m, +1, snap, tiers, index->node, index->domain, keep)) index->usable = false;
    }
  } else {
    const PoolTables built =
        BuildPoolTables(*index->members, snap, tiers, {}, index->node, index->domain, keep);
    index->count = built.count;
    index->usable = built.usable;
  }
  // An empty pool (all its pods gone) is not kept: a cluster that names pools per rollout would
  // otherwise keep one entry per pool it ever saw.
  if (index->members->empty())
    pool_index_.erase(std::string(pool));
  else
    pool_index_.insert_or_assign(std::string(pool), index);
  return index;
}

}  // namespace toposched::extender
