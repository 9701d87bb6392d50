#include "toposched/kube/leader.h"

#include <algorithm>
#include <condition_variable>
#include <random>
#include <utility>

#include "toposched/metrics/logging.h"

namespace toposched::kube {
namespace {

using metrics::LogLevel;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

void SleepUnlessStopped(std::chrono::milliseconds duration, std::stop_token stop) {
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock lock(mu);
  cv.wait_for(lock, stop, duration, [] { return false; });
}

std::string StringAt(const json& object, const char* outer, const char* key) {
  if (!object.is_object()) return {};
  const auto o = object.find(outer);
  if (o == object.end() || !o->is_object()) return {};
  const auto v = o->find(key);
  return v != o->end() && v->is_string() ? v->get<std::string>() : std::string();
}

std::int64_t TransitionsOf(const json& lease) {
  if (!lease.is_object()) return 0;
  const auto spec = lease.find("spec");
  if (spec == lease.end() || !spec->is_object()) return 0;
  const auto v = spec->find("leaseTransitions");
  return v != spec->end() && v->is_number_integer() ? v->get<std::int64_t>() : 0;
}

// What this candidate last saw of the Lease: any change to it is a sign of life of its holder.
struct Observed {
  std::string holder, renew_time, resource_version;
  bool operator==(const Observed&) const = default;
};

Observed ObservedOf(const json& lease) {
  return {StringAt(lease, "spec", "holderIdentity"), StringAt(lease, "spec", "renewTime"),
          StringAt(lease, "metadata", "resourceVersion")};
}

enum class Attempt {
  kHeld,         // we hold the Lease now (acquired or renewed)
  kHeldByOther,  // someone else holds it and has renewed it recently
  kFailed,       // an error (transport, API, lost a race with 409)
};

}  // namespace

LeaderElector::LeaderElector(Api& api, LeaderOptions options, std::function<void(bool leading)> on_change)
    : api_(api), options_(std::move(options)), on_change_(std::move(on_change)) {
  if (!options_.now) options_.now = [] { return Clock::now(); };
  if (!options_.sleep) options_.sleep = SleepUnlessStopped;
}

void LeaderElector::Run(std::stop_token stop) {
  const metrics::LogFields fields{"leader", "-", "-"};
  if (options_.identity.empty()) {
    metrics::Log(LogLevel::kError, fields, "leader election needs an identity; not taking part");
    return;
  }
  const std::string lease_path = LeasePath(options_.lease_namespace, options_.lease_name);
  const std::string lease_collection = LeaseCollection(options_.lease_namespace);
  const auto duration_seconds =
      static_cast<std::int64_t>(std::max<std::int64_t>(1, (options_.lease_duration.count() + 999) / 1000));
  std::mt19937_64 rng(options_.jitter_seed != 0 ? options_.jitter_seed : std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.0, 0.2);

  Observed observed;
  bool have_observed = false;
  Clock::time_point observed_at{};  // our clock when `observed` last changed
  json last_written;                // the Lease as our last successful write left it
  bool last_failed = false;         // log the first of a run of failures only

  const auto set_holder = [&](const std::string& holder) {
    const std::lock_guard lock(mu_);
    if (holder_ != holder && !leading() && holder != options_.identity) {
      metrics::Log(LogLevel::kInfo, fields,
                   holder.empty() ? std::string("the lease is free") : "the leader is " + holder);
    }
    holder_ = holder;
  };
  const auto failed = [&](const std::string& what) {
    if (!last_failed) metrics::Log(LogLevel::kWarn, fields, what);
    last_failed = true;
    return Attempt::kFailed;
  };

  // client-go's tryAcquireOrRenew.
  const auto try_acquire_or_renew = [&](Clock::time_point now) -> Attempt {
    const std::string wall_now = FormatMicroTime(std::chrono::system_clock::now());
    auto got = api_.Get(lease_path);
    if (!got) {
      if (!IsNotFound(got.error())) return failed("reading the lease: " + got.error().message());
      const json lease = {
          {"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata", {{"name", options_.lease_name}, {"namespace", options_.lease_namespace}}},
          {"spec",
           {{"holderIdentity", options_.identity},
            {"leaseDurationSeconds", duration_seconds},
            {"acquireTime", wall_now},
            {"renewTime", wall_now},
            {"leaseTransitions", 0}}}};
      auto created = api_.Create(lease_collection, lease);
      if (!created) return failed("creating the lease: " + created.error().message());
      last_written = std::move(*created);
      observed = ObservedOf(last_written);
      have_observed = true;
      observed_at = now;
      set_holder(options_.identity);
      last_failed = false;
      return Attempt::kHeld;
    }
    json& lease = *got;
    Observed current = ObservedOf(lease);
    if (!have_observed || current != observed) {
      observed = current;
      have_observed = true;
      observed_at = now;
    }
    set_holder(current.holder);
    const bool ours = current.holder == options_.identity;
    if (!current.holder.empty() && !ours && now - observed_at < options_.lease_duration) {
      last_failed = false;
      return Attempt::kHeldByOther;
    }
    if (!lease["spec"].is_object()) lease["spec"] = json::object();
    json& spec = lease["spec"];
    if (!ours) {
      spec["acquireTime"] = wall_now;
      spec["leaseTransitions"] = TransitionsOf(lease) + 1;
    }
    spec["holderIdentity"] = options_.identity;
    spec["leaseDurationSeconds"] = duration_seconds;
    spec["renewTime"] = wall_now;
    // The GET's resourceVersion makes this conditional: of two candidates, one gets 409.
    auto written = api_.Replace(lease_path, lease);
    if (!written) {
      return failed((ours ? "renewing the lease: " : "taking over the lease: ") + written.error().message());
    }
    last_written = std::move(*written);
    observed = ObservedOf(last_written);
    observed_at = now;
    set_holder(options_.identity);
    last_failed = false;
    return Attempt::kHeld;
  };

  const auto set_leading = [&](bool leading) {
    leading_.store(leading, std::memory_order_release);
    if (leading) {
      const std::lock_guard lock(mu_);
      ++transitions_;
    }
    if (on_change_) on_change_(leading);
  };

  // client-go's release: holder cleared, a 1 s lease, under our last resourceVersion (a 409
  // means someone else wrote since: nothing of ours to release). Errors are only logged.
  const auto release = [&] {
    if (!last_written.is_object()) return;
    json lease = last_written;
    if (!lease["spec"].is_object()) lease["spec"] = json::object();
    json& spec = lease["spec"];
    const std::string wall_now = FormatMicroTime(std::chrono::system_clock::now());
    spec["holderIdentity"] = "";
    spec["leaseDurationSeconds"] = 1;
    spec["acquireTime"] = wall_now;
    spec["renewTime"] = wall_now;
    auto released = api_.Replace(lease_path, lease);
    if (released) {
      set_holder("");
      metrics::Log(LogLevel::kInfo, fields, "released the lease");
    } else {
      metrics::Log(LogLevel::kWarn, fields, "releasing the lease: " + released.error().message());
    }
  };

  Clock::time_point last_renew{};
  while (!stop.stop_requested()) {
    const Clock::time_point attempt_start = options_.now();
    const Attempt attempt = try_acquire_or_renew(attempt_start);
    if (stop.stop_requested() && !leading()) {
      // Stopped during an attempt that won the Lease: give it back unannounced.
      if (attempt == Attempt::kHeld && options_.release_on_stop) release();
      break;
    }
    if (!leading()) {
      if (attempt == Attempt::kHeld) {
        // Leadership counts from before the write: the others saw it no earlier than that.
        last_renew = attempt_start;
        metrics::Log(LogLevel::kInfo, fields, "became the leader (" + options_.identity + ")");
        set_leading(true);
        options_.sleep(options_.retry_period, stop);
      } else {
        const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(options_.retry_period *
                                                                                (1.0 + jitter(rng)));
        options_.sleep(wait, stop);
      }
      continue;
    }
    if (attempt == Attempt::kHeld) {
      last_renew = attempt_start;
    } else if (attempt == Attempt::kHeldByOther) {
      // Someone took the Lease over (we could not renew in time): stop at once.
      metrics::Log(LogLevel::kWarn, fields, "lost leadership: the lease is held by " + observed.holder);
      set_leading(false);
    } else if (options_.now() - last_renew >= options_.renew_deadline) {
      metrics::Log(LogLevel::kWarn, fields, "lost leadership: no renewal within the renew deadline");
      set_leading(false);
    }
    options_.sleep(options_.retry_period, stop);
  }

  if (leading()) {
    if (options_.release_on_stop) release();
    set_leading(false);
  }
}

std::string LeaderElector::holder() const {
  const std::lock_guard lock(mu_);
  return holder_;
}

std::uint64_t LeaderElector::transitions() const {
  const std::lock_guard lock(mu_);
  return transitions_;
}

}  // namespace toposched::kube
