#include "toposched/kube/informer.h"

#include <algorithm>
#include <condition_variable>
#include <random>
#include <utility>

#include "toposched/metrics/logging.h"

namespace toposched::kube {
namespace {

using metrics::LogLevel;

// A watch that fails this many times in a row from the same resourceVersion (without
// delivering anything) is given up for a relist: the version may be unusable in ways the
// server does not report as 410.
constexpr int kWatchFailuresBeforeRelist = 3;

// A watch that ends cleanly this soon with nothing delivered counts as a failure (as
// client-go's "very short watch"), so a server that closes every watch at once is not
// hammered in a loop.
constexpr std::chrono::seconds kShortestCleanWatch{1};

void SleepUnlessStopped(std::chrono::milliseconds duration, std::stop_token stop) {
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock lock(mu);
  cv.wait_for(lock, stop, duration, [] { return false; });
}

std::string ResourceVersionOf(const nlohmann::json& object) {
  if (!object.is_object()) return {};
  const auto metadata = object.find("metadata");
  if (metadata == object.end() || !metadata->is_object()) return {};
  const auto rv = metadata->find("resourceVersion");
  return rv != metadata->end() && rv->is_string() ? rv->get<std::string>() : std::string();
}

}  // namespace

Informer::Informer(Api& api, InformerOptions options, InformerHandler handler)
    : api_(api), options_(std::move(options)), handler_(std::move(handler)) {
  if (!options_.sleep) options_.sleep = SleepUnlessStopped;
}

void Informer::Run(std::stop_token stop) {
  const std::string verb = "informer/" + (options_.name.empty() ? options_.collection_path : options_.name);
  const metrics::LogFields fields{verb, "-", "-"};
  Backoff backoff(options_.backoff_base, options_.backoff_max, options_.jitter_seed);
  std::mt19937_64 rng(options_.jitter_seed != 0 ? options_.jitter_seed + 1 : std::random_device{}());
  const int min_timeout = std::max(1, options_.watch_timeout_seconds);
  std::uniform_int_distribution<int> extra_seconds(0, min_timeout - 1);

  bool need_list = true;
  std::string rv;          // where the next watch starts
  std::string failing_rv;  // the resourceVersion the last failed watches started from
  int failures_at_rv = 0;

  // Counts, logs and backs off: "<what> (retry in Nms): <error>".
  const auto fail = [&](const std::string& what, const Error& error) {
    {
      const std::lock_guard lock(mu_);
      ++counters_.errors;
    }
    const auto delay = backoff.Next();
    metrics::Log(LogLevel::kWarn, fields,
                 what + " (retry in " + std::to_string(delay.count()) + "ms): " + error.message());
    options_.sleep(delay, stop);
  };

  while (!stop.stop_requested()) {
    if (need_list) {
      ListOptions list_options;
      list_options.label_selector = options_.label_selector;
      list_options.field_selector = options_.field_selector;
      list_options.limit = options_.page_size;
      auto list = api_.List(options_.collection_path, list_options);
      if (stop.stop_requested()) break;
      if (!list) {
        fail("list failed", list.error());
        continue;
      }
      const std::size_t count = list->items.size();
      if (handler_.replace) handler_.replace(std::move(list->items));
      rv = list->resource_version;
      const bool first = !synced();
      {
        const std::lock_guard lock(mu_);
        resource_version_ = rv;
        ++counters_.lists;
        synced_.store(true, std::memory_order_release);
      }
      sync_cv_.notify_all();
      metrics::Log(LogLevel::kInfo, fields,
                   std::string(first ? "synced: " : "relisted: ") + std::to_string(count) +
                       " objects at resourceVersion " + rv);
      backoff.Reset();
      need_list = false;
      failures_at_rv = 0;
    }

    WatchOptions watch_options;
    watch_options.label_selector = options_.label_selector;
    watch_options.field_selector = options_.field_selector;
    watch_options.resource_version = rv;
    watch_options.timeout_seconds = min_timeout + extra_seconds(rng);
    watch_options.idle_timeout = options_.idle_timeout;
    {
      const std::lock_guard lock(mu_);
      ++counters_.watches;
    }
    const std::string started_at_rv = rv;
    std::uint64_t delivered = 0;  // events and bookmarks
    const auto started = std::chrono::steady_clock::now();
    auto result = api_.Watch(
        options_.collection_path, watch_options,
        [&](WatchEvent&& event) {
          switch (event.type) {
            case WatchEventType::kAdded:
            case WatchEventType::kModified:
              if (handler_.upsert) handler_.upsert(event.object);
              break;
            case WatchEventType::kDeleted:
              if (handler_.remove) handler_.remove(event.object);
              break;
            case WatchEventType::kBookmark:
              break;
          }
          std::string event_rv = ResourceVersionOf(event.object);
          {
            const std::lock_guard lock(mu_);
            if (!event_rv.empty()) resource_version_ = event_rv;
            ++(event.type == WatchEventType::kBookmark ? counters_.bookmarks : counters_.events);
          }
          if (!event_rv.empty()) rv = std::move(event_rv);
          ++delivered;
          return !stop.stop_requested();
        },
        stop);
    if (stop.stop_requested()) break;
    if (delivered > 0) {
      backoff.Reset();
      failures_at_rv = 0;
    }

    if (result) {
      if (!result->empty()) rv = *result;
      {
        const std::lock_guard lock(mu_);
        resource_version_ = rv;
      }
      if (delivered > 0 || std::chrono::steady_clock::now() - started >= kShortestCleanWatch) {
        continue;  // the server ended the watch (timeoutSeconds): re-watch where it ended
      }
      result = Error("watch ended at once with nothing delivered");
    }

    if (IsGone(result.error())) {
      {
        const std::lock_guard lock(mu_);
        ++counters_.gone;
      }
      metrics::Log(LogLevel::kInfo, fields,
                   "resourceVersion " + rv + " expired, relisting: " + result.error().message());
      need_list = true;
      continue;
    }
    // Re-watch from where we are (client-go does); a version that keeps failing is relisted.
    if (delivered == 0 && started_at_rv == failing_rv) {
      ++failures_at_rv;
    } else {
      failing_rv = started_at_rv;
      failures_at_rv = 1;
      if (delivered > 0) failing_rv = rv;
    }
    if (failures_at_rv >= kWatchFailuresBeforeRelist) {
      need_list = true;
      failures_at_rv = 0;
      fail("watch failed " + std::to_string(kWatchFailuresBeforeRelist) + " times from resourceVersion " +
               started_at_rv + ", relisting",
           result.error());
    } else {
      fail("watch failed", result.error());
    }
  }
}

bool Informer::WaitForSync(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return sync_cv_.wait_for(lock, timeout, [this] { return synced(); });
}

std::string Informer::resource_version() const {
  const std::lock_guard lock(mu_);
  return resource_version_;
}

InformerCounters Informer::counters() const {
  const std::lock_guard lock(mu_);
  return counters_;
}

}  // namespace toposched::kube
