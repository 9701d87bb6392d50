#pragma once
// Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules: a candidate
// takes the Lease when it is free or its holder has not renewed it for leaseDurationSeconds
// (as observed by this candidate's own clock, never by comparing clocks); the leader renews
// every retry period and gives leadership up when it could not renew for renew_deadline
// (< lease_duration, so it stops before anyone else can take over). Writes use the Lease's
// resourceVersion: two candidates never both win (one gets 409).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>

#include "toposched/kube/api.h"

namespace toposched::kube {

struct LeaderOptions {
  std::string lease_namespace;
  std::string lease_name = "toposched-extender";
  std::string identity;  // unique per replica: the pod name (and a random suffix)
  std::chrono::milliseconds lease_duration{15'000};
  std::chrono::milliseconds renew_deadline{10'000};
  std::chrono::milliseconds retry_period{2'000};
  // Give the Lease up (holderIdentity cleared) when stopping, so the other replica takes over
  // at once instead of after lease_duration.
  bool release_on_stop = true;
  std::function<std::chrono::steady_clock::time_point()> now;             // tests; default steady_clock
  std::function<void(std::chrono::milliseconds, std::stop_token)> sleep;  // tests
  std::uint64_t jitter_seed = 0;  // the retry period's jitter; 0: from std::random_device
};

class LeaderElector {
 public:
  // `on_change(true)` after this replica became the leader, `on_change(false)` after it lost
  // (or gave up) leadership; called from Run's thread. `api` must outlive the elector.
  LeaderElector(Api& api, LeaderOptions options, std::function<void(bool leading)> on_change);

  // Blocks until `stop` is requested: acquire, renew, lose, acquire again...
  void Run(std::stop_token stop);

  bool leading() const { return leading_.load(std::memory_order_acquire); }
  std::string holder() const;         // the holder last observed ("" unknown)
  std::uint64_t transitions() const;  // leadership gained by this replica

 private:
  Api& api_;
  LeaderOptions options_;
  std::function<void(bool)> on_change_;
  std::atomic<bool> leading_{false};
  mutable std::mutex mu_;
  std::string holder_;
  std::uint64_t transitions_ = 0;
};

}  // namespace toposched::kube
