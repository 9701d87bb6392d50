#pragma once
// EventCorrelator: deduplication, aggregation and rate limiting of the Events the extender
// writes on pods that repeat (FailedScheduling summaries: a pending pod is filtered again on
// every retry), modelled on client-go's event correlator, k8s.io/client-go@v0.37.2
// tools/record/events_cache.go (EventCorrelator = EventAggregator + eventLogger + spam filter),
// with its default figures:
//   - spam filter: a token bucket per involved object (the pod), burst 25, one token back every
//     5 minutes (defaultSpamBurst, defaultSpamQPS = 1/300); an occurrence without a token is
//     dropped (counted);
//   - aggregation: once a pod has had 10 different messages of one reason and type within 10
//     minutes (defaultAggregateMaxEvents, defaultAggregateIntervalInSeconds), further ones go
//     into one event "(combined from similar events): <latest message>";
//   - deduplication: an occurrence identical to an earlier event (pod, reason, type, message)
//     raises that event's count and lastTimestamp (a PATCH) instead of creating another;
//   - at most 4,096 events remembered (maxLruCacheEntries), the least recently seen forgotten.
// One difference: writes are batched by the caller's periodic flush, so occurrences between two
// flushes become one write (a create, or one patch with the new count), never one per call.
// Pure: the clock is passed in; not thread-safe (the caller locks).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace toposched::kube {

struct EventCorrelatorOptions {
  int spam_burst = 25;
  std::chrono::seconds spam_refill{300};  // one token per this long
  int aggregate_max_messages = 10;
  std::chrono::seconds aggregate_window{600};
  std::size_t max_events = 4096;
};

class EventCorrelator {
 public:
  using TimePoint = std::chrono::system_clock::time_point;

  struct Occurrence {
    std::string pod_namespace, pod_name, pod_uid;
    std::string reason, message;
    std::string type = "Warning";
  };

  // One Event object to write: created when `create`, else patched (count, lastTimestamp,
  // message) under `name`.
  struct Write {
    std::uint64_t id = 0;  // Written() finds the event by it
    bool create = true;
    std::string name;  // the Event's metadata.name (chosen at its first occurrence)
    std::string pod_namespace, pod_name, pod_uid, reason, message, type;
    int count = 0;
    TimePoint first, last;
  };

  explicit EventCorrelator(EventCorrelatorOptions options = {}) : options_(options) {}

  // Records one occurrence at `now`. False when the spam filter dropped it.
  bool Observe(const Occurrence& occurrence, TimePoint now);
  // The events whose count grew since their last write (creates first seen, patches after).
  std::vector<Write> Due() const;
  // The outcome of writing one of Due()'s writes: on success its count is written (occurrences
  // observed while it was being written stay due); a failed create or patch (the Event expired,
  // the API server refused) is forgotten, so the next occurrence creates a new Event.
  void Written(const Write& write, bool ok);
  // The pod was placed after all: its occurrences not yet written are dropped (an Event already
  // created stays, with the count it was written with).
  void DropUnwritten(std::string_view pod_uid);

  std::uint64_t dropped() const { return dropped_; }
  std::size_t size() const { return events_.size(); }

 private:
  struct Event {
    std::uint64_t id = 0;
    std::string name, pod_namespace, pod_name, pod_uid, reason, message, type;
    int count = 0, written = 0;
    bool created = false;
    TimePoint first, last;
  };
  struct Bucket {
    double tokens = 0;
    TimePoint updated;
  };
  struct Similar {  // per (pod, reason, type): distinct messages since the last gap > the window
    TimePoint last;
    std::map<std::string, bool, std::less<>> messages;
  };
  using Key = std::tuple<std::string, std::string, std::string, std::string>;  // uid, reason, type, message

  void EvictIfFull();

  EventCorrelatorOptions options_;
  std::map<Key, Event> events_;
  std::map<std::string, Bucket, std::less<>> buckets_;  // by pod uid + type (client-go's getSpamKey)
  std::map<std::tuple<std::string, std::string, std::string>, Similar> similar_;
  std::uint64_t next_id_ = 1;
  std::uint64_t dropped_ = 0;
};

}  // namespace toposched::kube
