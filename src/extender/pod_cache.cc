#include "pod_cache.h"

#include <utility>

#include <algorithm>
#include <vector>

namespace toposched::extender {

std::shared_ptr<const ClassVerdict> VerdictTable::Find(std::uint64_t class_key) const {
  std::lock_guard lock(mu_);
  auto it = verdicts_.find(class_key);
  return it == verdicts_.end() ? nullptr : it->second;
}

std::shared_ptr<const ClassVerdict> VerdictTable::Store(std::uint64_t class_key,
                                                        std::shared_ptr<const ClassVerdict> v) {
  std::lock_guard lock(mu_);
  if (max_ != 0 && verdicts_.size() >= max_ && !verdicts_.contains(class_key)) verdicts_.clear();
  return verdicts_.try_emplace(class_key, std::move(v)).first->second;
}

std::size_t VerdictTable::size() const {
  std::lock_guard lock(mu_);
  return verdicts_.size();
}

std::shared_ptr<const ClassVerdict> PodEntry::FindVerdict(std::uint64_t class_key) const {
  return verdicts_->Find(class_key);
}

std::shared_ptr<const ClassVerdict> PodEntry::StoreVerdict(std::uint64_t class_key,
                                                           std::shared_ptr<const ClassVerdict> v) {
  return verdicts_->Store(class_key, std::move(v));
}

std::shared_ptr<const std::vector<std::uint32_t>> PodEntry::passed_order() const {
  std::lock_guard<std::mutex> lock(mu_);
  return passed_order_;
}

void PodEntry::set_passed_order(std::shared_ptr<const std::vector<std::uint32_t>> order) {
  std::lock_guard<std::mutex> lock(mu_);
  passed_order_ = std::move(order);
}

std::size_t PodEntry::verdict_count() const {
  return verdicts_->size();
}

std::shared_ptr<PodEntry> PodCache::Find(std::string_view uid, std::string_view resource_version,
                                         TimePoint now) {
  if (uid.empty()) return nullptr;
  std::lock_guard lock(mu_);
  auto it = entries_.find(std::string(uid));
  if (it == entries_.end()) return nullptr;
  PodEntry& e = *it->second;
  if (e.expires_ <= now) {
    entries_.erase(it);
    return nullptr;
  }
  if (!resource_version.empty() && e.resource_version != resource_version) return nullptr;
  e.expires_ = now + ttl_;
  return it->second;
}

std::shared_ptr<PodEntry> PodCache::Put(std::shared_ptr<PodEntry> entry, TimePoint now) {
  if (entry->uid.empty()) return entry;
  std::lock_guard lock(mu_);
  entry->expires_ = now + ttl_;
  auto it = entries_.find(entry->uid);
  if (it != entries_.end()) {
    it->second = entry;
    return entry;
  }
  if (entries_.size() >= capacity_) EvictLocked(now);
  entries_.emplace(entry->uid, entry);
  return entry;
}

void PodCache::EvictLocked(TimePoint now) {
  std::erase_if(entries_, [now](const auto& kv) { return kv.second->expires_ <= now; });
  if (entries_.size() < capacity_) return;
  // Still full of live entries: drop the tenth closest to expiry (the least recently used,
  // since every hit extends an entry's life). O(n) but only when full.
  std::vector<std::pair<TimePoint, std::string>> by_expiry;
  by_expiry.reserve(entries_.size());
  for (const auto& [uid, e] : entries_) by_expiry.emplace_back(e->expires_, uid);
  const std::size_t drop = std::max<std::size_t>(1, entries_.size() / 10);
  std::nth_element(by_expiry.begin(), by_expiry.begin() + static_cast<std::ptrdiff_t>(drop - 1),
                   by_expiry.end());
  for (std::size_t i = 0; i < drop; ++i) entries_.erase(by_expiry[i].second);
}

void PodCache::Erase(std::string_view uid) {
  std::lock_guard lock(mu_);
  entries_.erase(std::string(uid));
}

std::size_t PodCache::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace toposched::extender
