// NodeVerdicts: one call's verdicts for the nodes of one snapshot, each evaluated once per key
// (the node's class; for a pool pod's scores also its position relative to the pool, from the
// pool keys of pool_index.h), the hot path of kube-scheduler's filter and prioritize.

#include "node_verdicts.h"

#include <deque>
#include <utility>
#include <vector>

namespace toposched::extender {

namespace {

struct Buffers {
  std::vector<std::pair<std::uint64_t, std::shared_ptr<const ClassVerdict>>> classes;
  FlatHashIndex<const ClassVerdict*> many;
  std::deque<ClassVerdict> arena;  // Evaluator::PoolParts::arena
};
Buffers& ThreadBuffers() {
  thread_local Buffers buffers;
  return buffers;
}

}  // namespace

// Pool pods scored: a node's verdict depends on its class and on where it sits relative to the
// pool's pods. The pool plugins read, for a node, only which of the pool's pods stand on the
// node itself and in each of its tier domains (the paths to them, their counts per role), and
// nothing of which node or domain it is. So a node's key is its class plus the *content* of its
// node and of each of its domains: the multiset of pool pods there, hashed (two leaves that each
// hold one decode instance of one shape give their nodes one result). That is exact when the
// tiers nest as the pool's pods see them: the paths a node has to the pods of its tier t + 1
// domain follow from the contents when every pod of its tier t domain is in that same tier t + 1
// domain. A node where that does not hold (tiers that do not nest, a HyperNode tree with a leaf
// under two spines) is a key of its own. Its position is HyperNodes' where they place the node,
// else its tier labels, as the cluster view locates it. The filter wants pass/fail only: a pool
// pod is then filtered per class like any pod.
namespace {

constexpr std::uint64_t kOwnKey = std::uint64_t{1} << 63;  // NodeVerdicts' keys of one node alone

}  // namespace

NodeVerdicts::NodeVerdicts(Evaluator& evaluator, PodEntry& entry, std::shared_ptr<const state::Snapshot> snap,
                           Want want)
    : evaluator_(evaluator),
      entry_(entry),
      snap_(std::move(snap)),
      class_keys_(snap_->class_keys()),
      want_(want),
      local_(ThreadBuffers().classes),
      many_(ThreadBuffers().many),
      pool_scoring_(IsPoolPod(entry.request) && want == Want::kScores),
      per_node_(entry.request.NamesGpuUuids()),
      cpu_bound_(want == Want::kScores ? Evaluator::CpuBound(entry.request, entry.mix.get()) : 0) {
  local_.clear();  // before the arena its pointers may point into
  many_.clear();
  if (!pool_scoring_) return;
  ThreadBuffers().arena.clear();
  parts_.arena = &ThreadBuffers().arena;
  const pd::NetworkConfig& network = evaluator_.framework().config().network;
  const std::size_t tiers = network.tiers.size();
  positions_resolved_ = state::PositionsResolvedFor(*snap_, network);
  domain_content_.resize(tiers);
  positions_ = evaluator_.store().node_locations();
  if (positions_ != nullptr && positions_->empty()) positions_ = nullptr;
  const auto skip = [&](const framework::PoolMember& p) {
    // The pod itself, when re-scored, is not one of the pool's pods to the plugins.
    return !entry.request.pod_uid.empty() && p.uid == entry.request.pod_uid;
  };
  // By hash, from the snapshot's arrays, when the records' positions count; by string when
  // HyperNodes place nodes, or when two names or domains share a hash. By hash, the tables come
  // from the pool's index (built once per version of the pool and of the positions), unless
  // the scored pod is one of the pool's own: then from the thread's, without it.
  by_hash_ = positions_ == nullptr && positions_resolved_ && snap_->tier_labels().size() == tiers;
  if (by_hash_) {
    index_ = evaluator_.PoolIndexFor(entry.request.pool, *snap_, tiers);
    if (index_ != nullptr) {
      pool_members_ = index_->members;
      pool_version_ = index_->version;
    }
    const bool self = index_ != nullptr && !entry.request.pod_uid.empty() &&
                      index_->uids.Find(framework::PositionHash(entry.request.pod_uid)) != nullptr;
    if (index_ != nullptr && index_->usable && !self) {
      node_by_hash_ = &index_->node;
      domain_by_hash_ = &index_->domain;
      other_members_ = index_->count;
    } else if (index_ == nullptr || index_->usable) {
      if (pool_members_ == nullptr) {
        pool_members_ = std::make_shared<const std::vector<framework::PoolMember>>(
            evaluator_.store().PoolMembers(entry.request.pool));
      }
      HashTables& tables = ThreadTables();
      const PoolTables built =
          BuildPoolTables(*pool_members_, *snap_, tiers, entry.request.pod_uid, tables.node, tables.domain,
                          [](std::string_view d) { return d; });
      by_hash_ = built.usable;
      other_members_ = built.count;
      node_by_hash_ = &tables.node;
      domain_by_hash_ = &tables.domain;
    } else {
      by_hash_ = false;
    }
    if (by_hash_) {
      // The nodes that hold pods of the pool, by index: KeyOf looks a node up in the pool's
      // table only when its bit is set (a few hundred nodes of thousands), not by every node's
      // name hash. A bit is set where the table has the node, so the two agree.
      if (pool_members_ != nullptr) {
        std::vector<std::uint64_t>& bits = ThreadPoolNodes();
        bits.assign((snap_->size() + 63) / 64, 0);
        for (const framework::PoolMember& m : *pool_members_) {
          const std::size_t at = snap_->IndexOf(m.node);
          if (at == state::Snapshot::npos || node_by_hash_->Find(snap_->briefs()[at].name_hash) == nullptr)
            continue;
          bits[at / 64] |= std::uint64_t{1} << (at % 64);
        }
        pool_nodes_ = bits.data();
      }
      // This call's generation for the run keys (KeyOf), and an array for every run.
      thread_local std::uint64_t generation = 0;
      generation_ = ++generation;
      const state::Snapshot::PositionRuns& runs = snap_->position_runs();
      if (runs.run_of.size() == snap_->size()) {
        run_of_ = &runs.run_of;
        std::vector<RunKey>& keys = ThreadRunKeys();
        if (keys.size() < runs.starts.size()) keys.resize(runs.starts.size());
        run_keys_ = keys.data();
      }
      return;
    }
    other_members_ = 0;
  }
  if (pool_members_ == nullptr) {
    pool_members_ = std::make_shared<const std::vector<framework::PoolMember>>(
        evaluator_.store().PoolMembers(entry.request.pool));
  }
  for (const framework::PoolMember& p : *pool_members_) {
    if (skip(p)) continue;
    const std::uint64_t h = MemberHash(p);
    ++other_members_;
    node_content_[p.node] += h;
    const state::NodeRecord* record = snap_->Find(p.node);
    for (std::size_t t = 0; t < tiers; ++t) {
      const std::string_view d = record != nullptr ? DomainAt(*record, t) : std::string_view();
      if (d.empty()) continue;
      const std::string_view parent = t + 1 < tiers ? DomainAt(*record, t + 1) : std::string_view();
      auto [it, inserted] =
          domain_content_[t].try_emplace(d, Content{0, parent, framework::PositionHash(parent), false, {}});
      it->second.hash += h;
      if (!inserted && it->second.parent != parent) it->second.mixed = true;
    }
  }
}

std::vector<std::uint64_t>& NodeVerdicts::ThreadPoolNodes() {
  thread_local std::vector<std::uint64_t> bits;
  return bits;
}

std::vector<NodeVerdicts::RunKey>& NodeVerdicts::ThreadRunKeys() {
  thread_local std::vector<RunKey> keys;
  return keys;
}

NodeVerdicts::HashTables& NodeVerdicts::ThreadTables() {
  thread_local HashTables tables;
  return tables;
}

// Tier t's domain of `record`, pointing into the positions or the snapshot (both held here).
std::string_view NodeVerdicts::DomainAt(const state::NodeRecord& record, std::size_t t) const {
  if (positions_ != nullptr) {
    if (const auto it = positions_->find(record.name); it != positions_->end()) {
      return t < it->second.domains.size() ? std::string_view(it->second.domains[t]) : std::string_view();
    }
  }
  if (positions_resolved_) return record.position.domains[t];
  const pd::NetworkConfig& network = evaluator_.framework().config().network;
  const auto label = record.labels.find(network.tiers[t].label);
  return label == record.labels.end() ? std::string_view() : std::string_view(label->second);
}

std::uint64_t NodeVerdicts::KeyOf(std::size_t i) {
  if (per_node_) return kOwnKey | i;  // Evaluator::VerdictKey: every node on its own
  if (!pool_scoring_) return class_keys_[i];
  // No pod of the pool yet: the gang anchor may be one node (one without the anchor tier's
  // label), so every node is its own key for this first pod.
  if (other_members_ == 0) return kOwnKey | i;
  const std::size_t tiers = domain_content_.size();
  if (by_hash_) {
    // The snapshot's contiguous hashes, no record read (a 64-bit hash collision could at worst
    // mis-score a node, as class keys could).
    const std::uint64_t* hashes = snap_->position_hashes().data() + i * tiers;
    const std::pair<std::string_view, std::uint64_t>* on_node = nullptr;
    if (pool_nodes_ == nullptr || ((pool_nodes_[i / 64] >> (i % 64)) & 1) != 0) {
      on_node = node_by_hash_->Find(snap_->briefs()[i].name_hash);
    }
    RunKey* run = nullptr;
    if (on_node == nullptr && run_of_ != nullptr) {
      run = &run_keys_[(*run_of_)[i]];
      if (run->generation == generation_) {  // a node of equal domains came before, no pool pod on either
        if (run->own) return kOwnKey | i;
        parts_.position = run->position;
        return Mix64(run->position ^ class_keys_[i]) & ~kOwnKey;
      }
      run->generation = generation_;
      run->own = false;
    }
    std::uint64_t key = Mix64(on_node == nullptr ? 0 : on_node->second);
    for (std::size_t t = 0; t < tiers; ++t) {
      const Content* found = (*domain_by_hash_)[t].Find(hashes[t]);
      if (found != nullptr && (found->mixed || (t + 1 < tiers && found->parent_hash != hashes[t + 1]))) {
        if (run != nullptr) run->own = true;
        return kOwnKey | i;  // tiers do not nest here
      }
      key = Mix64(key ^ (found == nullptr ? 0 : found->hash) ^ (t + 1));
    }
    parts_.position = key;
    if (run != nullptr) run->position = key;
    return Mix64(key ^ class_keys_[i]) & ~kOwnKey;
  }
  const state::NodeRecord& record = *snap_->nodes()[i];
  std::uint64_t on_node = 0;
  if (const auto it = node_content_.find(record.name); it != node_content_.end()) {
    on_node = it->second;
  }
  std::uint64_t key = Mix64(on_node);  // the position key: what the node and its domains hold
  std::string_view d = tiers > 0 ? DomainAt(record, 0) : std::string_view();
  for (std::size_t t = 0; t < tiers; ++t) {
    const std::string_view up = t + 1 < tiers ? DomainAt(record, t + 1) : std::string_view();
    const Content* found = nullptr;
    if (!d.empty()) {
      if (const auto it = domain_content_[t].find(d); it != domain_content_[t].end()) found = &it->second;
    }
    if (found != nullptr && (found->mixed || found->parent != up))
      return kOwnKey | i;  // tiers do not nest here
    key = Mix64(key ^ (found == nullptr ? 0 : found->hash) ^ (t + 1));
    d = up;
  }
  parts_.position = key;
  return Mix64(key ^ class_keys_[i]) & ~kOwnKey;
}

std::int64_t NodeVerdicts::CpuFreeIfBinding(std::size_t i) const {
  if (cpu_bound_ <= 0) return -1;
  const std::int64_t free = snap_->briefs()[i].cpu_free_milli;
  return free >= 0 && free < cpu_bound_ ? free : -1;
}

const ClassVerdict* NodeVerdicts::At(std::size_t i) {
  std::uint64_t key = KeyOf(i);
  // A node whose CPU binds the packing score has a verdict of its own. A key of one node alone
  // (a pod naming GPU UUIDs; a pool pod's kOwnKey keys) is that already; a class key may have any
  // bit set, so the mode tells them apart, not the bit.
  const bool own = per_node_ || (pool_scoring_ && (key & kOwnKey) != 0);
  if (const std::int64_t cpu = CpuFreeIfBinding(i); cpu >= 0 && !own) {
    key = Evaluator::CpuVerdictKey(
              key, Evaluator::CpuClass(entry_.cpu_thresholds, entry_.request.cpu_milli, cpu)) &
          ~kOwnKey;
  }
  auto& direct = direct_[(key ^ (key >> 29) ^ (key >> 47)) & (kDirect - 1)];
  if (direct.second != nullptr && direct.first == key) return direct.second;
  direct = {key, Lookup(key, i)};
  return direct.second;
}

const ClassVerdict* NodeVerdicts::Lookup(std::uint64_t key, std::size_t i) {
  if (local_.size() <= kLinearClasses) {
    for (const auto& [k, v] : local_) {
      if (k == key) return v.get();
    }
  } else if (const ClassVerdict* const* known = many_.Find(key); known != nullptr) {
    return *known;
  }
  const Evaluator::NodeQuery query{
      .record = *snap_->nodes()[i],
      .snap = snap_,
      .want = want_,
      .members = pool_scoring_ ? pool_members_ : nullptr,
      .positions = positions_,
      .parts = pool_scoring_ && (key & kOwnKey) == 0 ? &parts_ : nullptr,
      .pool_version = pool_version_,
      .cpu_free = CpuFreeIfBinding(i),
  };
  local_.emplace_back(key, evaluator_.Evaluate(entry_, cycle_, query));
  if (local_.size() == kLinearClasses + 1) {
    for (const auto& [k, v] : local_) many_.Insert(k, v.get());
  } else if (local_.size() > kLinearClasses + 1) {
    many_.Insert(key, local_.back().second.get());
  }
  return local_.back().second.get();
}

}  // namespace toposched::extender
