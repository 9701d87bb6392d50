#pragma once
// An informer (client-go's reflector, reduced to what toposched needs): LIST a collection
// (paged), hand the whole set to the handler, then WATCH from the list's resourceVersion with
// bookmarks, handing over every event; re-watch where a watch ended, relist on 410 Gone, back
// off with jitter on errors. One thread runs it (Run); the handler is called from that thread
// only, in order.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "toposched/kube/api.h"

namespace toposched::kube {

struct InformerHandler {
  // After every (re)list: the complete current set, replacing whatever came before (objects
  // the handler knew that are missing were deleted while the watch was down).
  std::function<void(std::vector<nlohmann::json>&& objects)> replace;
  std::function<void(const nlohmann::json& object)> upsert;  // ADDED, MODIFIED
  std::function<void(const nlohmann::json& object)> remove;  // DELETED (the last state)
};

struct InformerOptions {
  std::string collection_path;  // "/api/v1/pods", kNodeTopologyCollection, ...
  std::string label_selector, field_selector;
  int page_size = 500;
  // Each watch asks the server to end it after a random time in [min, 2*min) (as client-go
  // does, so a fleet of clients does not re-watch in step).
  int watch_timeout_seconds = 300;
  std::chrono::milliseconds idle_timeout{120'000};
  std::chrono::milliseconds backoff_base{250};
  std::chrono::milliseconds backoff_max{30'000};
  std::uint64_t jitter_seed = 0;
  // Waits between attempts (interruptible by the stop token); tests replace it.
  std::function<void(std::chrono::milliseconds, std::stop_token)> sleep;
  std::string name;  // for logs: "pods", "nodes", "nodetopologies"
};

struct InformerCounters {
  std::uint64_t lists = 0;    // successful (re)lists
  std::uint64_t watches = 0;  // watch requests started
  std::uint64_t gone = 0;     // 410s (each forces a relist)
  std::uint64_t errors = 0;   // failed lists/watches (each followed by a backoff)
  std::uint64_t events = 0;   // ADDED/MODIFIED/DELETED delivered
  std::uint64_t bookmarks = 0;
};

class Informer {
 public:
  // `api` must outlive the informer.
  Informer(Api& api, InformerOptions options, InformerHandler handler);

  // Blocks until `stop` is requested: list, watch, re-watch, relist, back off.
  void Run(std::stop_token stop);

  // True once the first list has been handed to `replace` (stays true across relists).
  bool synced() const { return synced_.load(std::memory_order_acquire); }
  // Blocks until synced or `timeout`; true when synced.
  bool WaitForSync(std::chrono::milliseconds timeout) const;
  std::string resource_version() const;
  InformerCounters counters() const;

 private:
  Api& api_;
  InformerOptions options_;
  InformerHandler handler_;
  std::atomic<bool> synced_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable sync_cv_;  // notified once synced_ is set (under mu_)
  std::string resource_version_;
  InformerCounters counters_;
};

}  // namespace toposched::kube
