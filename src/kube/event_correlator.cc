// Event deduplication, aggregation and rate limiting, after client-go's EventCorrelator
// (k8s.io/client-go@v0.37.2 tools/record/events_cache.go). See event_correlator.h.

#include "toposched/kube/event_correlator.h"

#include <algorithm>
#include <cstdio>

namespace toposched::kube {
namespace {

// Drops the entry of `table` least recently touched (`when` of its value) while over `limit`
// (client-go keeps each of these in an LRU of the same size).
template <typename Table, typename When>
void DropOldest(Table& table, std::size_t limit, When when) {
  while (table.size() > limit) {
    auto oldest = table.begin();
    for (auto it = table.begin(); it != table.end(); ++it) {
      if (when(it->second) < when(oldest->second)) oldest = it;
    }
    table.erase(oldest);
  }
}

}  // namespace

bool EventCorrelator::Observe(const Occurrence& o, TimePoint now) {
  // The spam filter first, on every occurrence (client-go's filterFunc runs before aggregation).
  const std::string bucket_key = o.pod_uid + '\n' + o.type;
  auto bucket = buckets_.find(bucket_key);
  if (bucket == buckets_.end()) {
    if (!buckets_.empty())
      DropOldest(buckets_, options_.max_events - 1, [](const Bucket& b) { return b.updated; });
    bucket = buckets_.emplace(bucket_key, Bucket{static_cast<double>(options_.spam_burst), now}).first;
  } else {
    const double refill = std::chrono::duration<double>(now - bucket->second.updated).count() /
                          std::chrono::duration<double>(options_.spam_refill).count();
    bucket->second.tokens =
        std::min<double>(options_.spam_burst, bucket->second.tokens + std::max(0.0, refill));
  }
  bucket->second.updated = now;
  if (bucket->second.tokens < 1) {
    ++dropped_;
    return false;
  }
  bucket->second.tokens -= 1;

  // Aggregation: too many different messages of one reason on one pod become one event.
  std::string message = o.message;
  std::string key_message = o.message;
  const auto similar_key = std::make_tuple(o.pod_uid, o.reason, o.type);
  if (!similar_.contains(similar_key) && !similar_.empty()) {
    DropOldest(similar_, options_.max_events - 1, [](const Similar& x) { return x.last; });
  }
  Similar& similar = similar_[similar_key];
  if (now - similar.last > options_.aggregate_window) similar.messages.clear();
  similar.messages.emplace(o.message, true);
  similar.last = now;
  if (static_cast<int>(similar.messages.size()) >= options_.aggregate_max_messages) {
    message = "(combined from similar events): " + o.message;
    key_message.clear();  // one event for all of them
  }

  // Deduplication: the same event again raises its count.
  const Key key{o.pod_uid, o.reason, o.type, key_message};
  auto it = events_.find(key);
  if (it == events_.end()) {
    EvictIfFull();
    Event e;
    e.id = next_id_++;
    // client-go names an event <object name>.<hex nanoseconds of its first occurrence>.
    char stamp[32];
    std::snprintf(
        stamp, sizeof stamp, "%llx",
        static_cast<unsigned long long>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count() + e.id));
    e.name = o.pod_name + "." + stamp;
    e.pod_namespace = o.pod_namespace;
    e.pod_name = o.pod_name;
    e.pod_uid = o.pod_uid;
    e.reason = o.reason;
    e.type = o.type;
    e.first = now;
    it = events_.emplace(key, std::move(e)).first;
  }
  Event& e = it->second;
  e.message = std::move(message);
  e.last = now;
  ++e.count;
  return true;
}

std::vector<EventCorrelator::Write> EventCorrelator::Due() const {
  std::vector<Write> out;
  for (const auto& [key, e] : events_) {
    if (e.count == e.written) continue;
    out.push_back({e.id, !e.created, e.name, e.pod_namespace, e.pod_name, e.pod_uid, e.reason, e.message,
                   e.type, e.count, e.first, e.last});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Write& a, const Write& b) { return a.create > b.create; });
  return out;
}

void EventCorrelator::Written(const Write& write, bool ok) {
  for (auto it = events_.begin(); it != events_.end(); ++it) {
    if (it->second.id != write.id) continue;
    if (ok) {
      it->second.created = true;
      // The count that was sent: an occurrence observed during the write stays due.
      it->second.written = std::max(it->second.written, write.count);
    } else {
      events_.erase(it);
    }
    return;
  }
}

void EventCorrelator::DropUnwritten(std::string_view pod_uid) {
  for (auto it = events_.begin(); it != events_.end();) {
    Event& e = it->second;
    if (e.pod_uid != pod_uid) {
      ++it;
    } else if (!e.created) {
      it = events_.erase(it);
    } else {
      e.count = e.written;
      ++it;
    }
  }
}

void EventCorrelator::EvictIfFull() {
  if (events_.size() >= options_.max_events) {
    DropOldest(events_, options_.max_events - 1, [](const Event& e) { return e.last; });
  }
}

}  // namespace toposched::kube
