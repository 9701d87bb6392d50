// LeaderElector against a fake Lease store (resourceVersions, 409 on stale writes) in virtual
// time: each candidate runs on its own thread, but only one runs at a time, and the clock only
// moves when every candidate sleeps (a discrete-event simulation), so every run is the same.

#include "toposched/kube/leader.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

namespace toposched::kube {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using TimePoint = std::chrono::steady_clock::time_point;

constexpr const char* kNamespace = "toposched";
constexpr const char* kLeaseName = "toposched-extender";

// The clock and the scheduler of the simulation. Participants (candidate threads) call Sleep;
// when all of them sleep, the one with the earliest wake time (ties: the lowest id) runs next,
// alone. RunUntil lets the simulation run up to a time and returns when it is quiet there.
class VirtualTime {
 public:
  explicit VirtualTime(int participants) : running_(participants) {}

  TimePoint Now() {
    const std::lock_guard lock(mu_);
    return now_;
  }

  void Sleep(int id, milliseconds duration, std::stop_token stop) {
    std::unique_lock lock(mu_);
    if (stop.stop_requested()) return;
    const auto key = std::make_pair(now_ + duration, id);
    sleepers_.insert(key);
    --running_;
    Schedule();
    cv_.wait(lock, stop, [&] { return chosen_ == id; });
    if (chosen_ == id) {
      chosen_ = -1;
    } else {  // stopped: runs on (to its end) outside the schedule
      sleepers_.erase(key);
      ++running_;
    }
  }

  // A participant whose thread is done.
  void Leave() {
    const std::lock_guard lock(mu_);
    --running_;
    Schedule();
  }

  void RunUntil(TimePoint until) {
    std::unique_lock lock(mu_);
    limit_ = until;
    Schedule();
    cv_.wait(lock, [&] { return running_ == 0 && (sleepers_.empty() || sleepers_.begin()->first > limit_); });
    now_ = std::max(now_, until);
  }

 private:
  void Schedule() {
    if (running_ > 0) return;
    if (!sleepers_.empty() && sleepers_.begin()->first <= limit_) {
      const auto [wake, id] = *sleepers_.begin();
      sleepers_.erase(sleepers_.begin());
      now_ = std::max(now_, wake);
      chosen_ = id;
      ++running_;
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable_any cv_;
  TimePoint now_ = TimePoint{} + std::chrono::hours(1);
  TimePoint limit_ = now_ - milliseconds(1);  // nothing runs before the first RunUntil
  int running_;
  int chosen_ = -1;
  std::set<std::pair<TimePoint, int>> sleepers_;
};

json StatusBody(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"}, {"code", code}, {"reason", reason}, {"message", message}};
}

// One Lease, as the API server keeps it: every write gets a new resourceVersion; a PUT with a
// stale one gets 409; a POST of an existing one gets 409 AlreadyExists.
class LeaseStore {
 public:
  Result<Response> Handle(const Request& request) {
    const std::lock_guard lock(mu_);
    const std::string path = LeasePath(kNamespace, kLeaseName);
    if (request.method == "GET" && request.path == path) {
      if (!lease_) return Response{404, StatusBody(404, "NotFound", "lease not found").dump()};
      return Response{200, lease_->dump()};
    }
    const json body = json::parse(request.body, nullptr, false);
    if (body.is_discarded()) return Response{400, "bad body"};
    if (request.method == "POST" && request.path == LeaseCollection(kNamespace)) {
      if (lease_) return Response{409, StatusBody(409, "AlreadyExists", "already exists").dump()};
      StoreLocked(body);
      return Response{201, lease_->dump()};
    }
    if (request.method == "PUT" && request.path == path) {
      if (!lease_) return Response{404, StatusBody(404, "NotFound", "lease not found").dump()};
      const auto rv = body["metadata"].value("resourceVersion", "");
      if (rv != (*lease_)["metadata"]["resourceVersion"]) {
        return Response{409, StatusBody(409, "Conflict", "the object has been modified").dump()};
      }
      ++puts_;
      StoreLocked(body);
      return Response{200, lease_->dump()};
    }
    return Response{405, "unexpected " + request.method + " " + request.path};
  }

  std::optional<json> lease() {
    const std::lock_guard lock(mu_);
    return lease_;
  }
  json spec() {
    const std::lock_guard lock(mu_);
    return lease_ ? (*lease_)["spec"] : json();
  }
  int puts() {
    const std::lock_guard lock(mu_);
    return puts_;
  }
  // Another process writes the Lease (a holder renewing it, or taking it).
  void WriteAs(const std::string& holder, const std::string& renew_time) {
    const std::lock_guard lock(mu_);
    json lease = lease_ ? *lease_
                        : json{{"apiVersion", "coordination.k8s.io/v1"},
                               {"kind", "Lease"},
                               {"metadata", {{"name", kLeaseName}, {"namespace", kNamespace}}},
                               {"spec", {{"leaseDurationSeconds", 15}, {"leaseTransitions", 4}}}};
    lease["spec"]["holderIdentity"] = holder;
    lease["spec"]["renewTime"] = renew_time;
    StoreLocked(lease);
  }

 private:
  void StoreLocked(json lease) {
    lease["metadata"]["resourceVersion"] = std::to_string(++version_);
    lease_ = std::move(lease);
  }

  std::mutex mu_;
  std::optional<json> lease_;
  int version_ = 100;
  int puts_ = 0;
};

// One candidate's connection to the store; can be cut off, or race another writer.
class CandidateTransport : public Transport {
 public:
  explicit CandidateTransport(LeaseStore& store) : store_(store) {}
  Result<Response> Do(const Request& request) override {
    if (partitioned.load()) return Error("transport: connection refused");
    if (request.method == "PUT" && before_put) before_put();
    return store_.Handle(request);
  }
  Result<Response> Stream(const Request&, const std::function<bool(std::string_view)>&,
                          std::stop_token) override {
    return Error("transport: no streams here");
  }

  std::atomic<bool> partitioned{false};
  std::function<void()> before_put;  // set before the candidate starts

 private:
  LeaseStore& store_;
};

struct Change {
  TimePoint at;
  bool leading;
  bool operator==(const Change&) const = default;
};

// Candidates on one store and one virtual clock; counts how many lead at once.
class Simulation {
 public:
  struct Candidate {
    std::string identity;
    std::unique_ptr<CandidateTransport> transport;
    std::unique_ptr<Api> api;
    std::unique_ptr<LeaderElector> elector;
    std::vector<Change> changes;  // written by its thread while it runs, read when quiet
    std::jthread thread;
  };

  Simulation(std::vector<std::string> identities, bool release_on_stop = true)
      : time_(static_cast<int>(identities.size())) {
    for (std::size_t i = 0; i < identities.size(); ++i) {
      auto c = std::make_unique<Candidate>();
      c->identity = identities[i];
      c->transport = std::make_unique<CandidateTransport>(store);
      ApiOptions api_options;
      api_options.max_attempts = 1;
      api_options.sleep = [](milliseconds) {};
      c->api = std::make_unique<Api>(*c->transport, api_options);
      LeaderOptions options;
      options.lease_namespace = kNamespace;
      options.lease_name = kLeaseName;
      options.identity = identities[i];
      options.lease_duration = seconds(15);
      options.renew_deadline = seconds(10);
      options.retry_period = seconds(2);
      options.release_on_stop = release_on_stop;
      options.jitter_seed = 1000 + i;
      const int id = static_cast<int>(i);
      options.now = [this] { return time_.Now(); };
      options.sleep = [this, id](milliseconds d, std::stop_token stop) { time_.Sleep(id, d, stop); };
      Candidate* raw = c.get();
      c->elector = std::make_unique<LeaderElector>(*c->api, options, [this, raw](bool leading) {
        raw->changes.push_back({time_.Now(), leading});
        const int now_leading = leaders_ += leading ? 1 : -1;
        max_leaders_ = std::max(max_leaders_.load(), now_leading);
      });
      candidates_.push_back(std::move(c));
    }
  }
  ~Simulation() { StopAll(); }

  void Start() {
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      Candidate* c = candidates_[i].get();
      const int id = static_cast<int>(i);
      c->thread = std::jthread([this, c, id](std::stop_token stop) {
        time_.Sleep(id, milliseconds(0), stop);  // wait for the first turn
        c->elector->Run(stop);
        time_.Leave();
      });
    }
  }
  void RunFor(milliseconds d) { time_.RunUntil(time_.Now() + d); }
  void RequestStop(std::size_t i) { candidates_[i]->thread.request_stop(); }
  void Stop(std::size_t i) {
    candidates_[i]->thread.request_stop();
    candidates_[i]->thread.join();
  }
  void StopAll() {
    for (auto& c : candidates_) c->thread.request_stop();
    for (auto& c : candidates_) {
      if (c->thread.joinable()) c->thread.join();
    }
  }

  Candidate& operator[](std::size_t i) { return *candidates_[i]; }
  TimePoint Now() { return time_.Now(); }
  int max_leaders() const { return max_leaders_.load(); }

  LeaseStore store;

 private:
  VirtualTime time_;
  std::vector<std::unique_ptr<Candidate>> candidates_;
  std::atomic<int> leaders_{0}, max_leaders_{0};
};

TEST(LeaderTest, CreatesAMissingLeaseAndKeepsRenewingIt) {
  Simulation sim({"a"});
  const TimePoint start = sim.Now();
  sim.Start();
  sim.RunFor(milliseconds(500));
  EXPECT_TRUE(sim[0].elector->leading());
  EXPECT_EQ(sim[0].changes, (std::vector<Change>{{start, true}}));
  EXPECT_EQ(sim[0].elector->holder(), "a");
  EXPECT_EQ(sim[0].elector->transitions(), 1u);
  const json lease = *sim.store.lease();
  EXPECT_EQ(lease["apiVersion"], "coordination.k8s.io/v1");
  EXPECT_EQ(lease["kind"], "Lease");
  EXPECT_EQ(lease["metadata"]["name"], kLeaseName);
  EXPECT_EQ(lease["metadata"]["namespace"], kNamespace);
  EXPECT_EQ(lease["spec"]["holderIdentity"], "a");
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 15);
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 0);
  EXPECT_TRUE(ParseTime(lease["spec"]["acquireTime"].get<std::string>()).ok());
  EXPECT_TRUE(ParseTime(lease["spec"]["renewTime"].get<std::string>()).ok());

  sim.RunFor(seconds(60));
  // One renewal every retry period (2 s): 30 in 60 s.
  EXPECT_EQ(sim.store.puts(), 30);
  EXPECT_TRUE(sim[0].elector->leading());
  EXPECT_EQ(sim[0].changes.size(), 1u);
  EXPECT_EQ(sim.store.spec()["leaseTransitions"], 0);
}

TEST(LeaderTest, FollowsWhileTheHolderRenewsThenTakesOverAfterTheLeaseDuration) {
  Simulation sim({"a"});
  int renewal = 0;
  const auto renew = [&] {
    sim.store.WriteAs("other", "2026-12-02T16:35:" + std::to_string(10 + renewal++) + ".000000Z");
  };
  renew();
  sim.Start();
  for (int i = 0; i < 12; ++i) {  // "other" renews every 5 s for a minute
    sim.RunFor(seconds(5));
    EXPECT_FALSE(sim[0].elector->leading());
    renew();
  }
  const TimePoint last_renewal = sim.Now();
  EXPECT_EQ(sim[0].elector->holder(), "other");
  EXPECT_TRUE(sim[0].changes.empty());

  sim.RunFor(seconds(14));
  EXPECT_FALSE(sim[0].elector->leading());  // not yet lease_duration since the last change
  sim.RunFor(seconds(16));
  ASSERT_TRUE(sim[0].elector->leading());
  ASSERT_EQ(sim[0].changes.size(), 1u);
  // It saw the last change within one retry period (at most 2.4 s with jitter), and takes over
  // at the first attempt 15 s after that.
  const auto waited = sim[0].changes[0].at - last_renewal;
  EXPECT_GE(waited, seconds(15));
  EXPECT_LE(waited, milliseconds(15'000 + 2 * 2'400));
  const json spec = sim.store.spec();
  EXPECT_EQ(spec["holderIdentity"], "a");
  EXPECT_EQ(spec["leaseTransitions"], 5);  // 4 before
}

TEST(LeaderTest, AReleasedLeaseIsTakenAtOnce) {
  Simulation sim({"a"});
  sim.store.WriteAs("", "2026-12-02T16:35:10.000000Z");
  const TimePoint start = sim.Now();
  sim.Start();
  sim.RunFor(milliseconds(100));
  EXPECT_TRUE(sim[0].elector->leading());
  EXPECT_EQ(sim[0].changes, (std::vector<Change>{{start, true}}));
}

TEST(LeaderTest, GivesUpWhenItCannotRenewWithinTheDeadline) {
  Simulation sim({"a"});
  sim.Start();
  sim.RunFor(seconds(11));
  ASSERT_TRUE(sim[0].elector->leading());
  const TimePoint cut = sim.Now();
  sim[0].transport->partitioned = true;
  // Renewed at 0, 2, ..., 10 s; cut at 11 s; failed attempts at 12, 14, ... s.
  sim.RunFor(seconds(8));
  EXPECT_TRUE(sim[0].elector->leading());  // 8 s since the last renewal: within the deadline
  sim.RunFor(seconds(7));
  ASSERT_FALSE(sim[0].elector->leading());
  ASSERT_EQ(sim[0].changes.size(), 2u);
  // The last renewal was at most one retry period before the cut; it gives up at the first
  // attempt 10 s after it: well before the 15 s after which another could take over.
  const auto lost_after = sim[0].changes[1].at - cut;
  EXPECT_GT(lost_after, seconds(8));
  EXPECT_LE(lost_after, seconds(12));

  sim[0].transport->partitioned = false;
  sim.RunFor(seconds(5));
  EXPECT_TRUE(sim[0].elector->leading());  // still the holder on record: renews and leads again
  EXPECT_EQ(sim[0].elector->transitions(), 2u);
  EXPECT_EQ(sim.store.spec()["leaseTransitions"], 0);
}

TEST(LeaderTest, StepsDownAtOnceWhenAnotherHoldsTheLease) {
  Simulation sim({"a"});
  sim.Start();
  sim.RunFor(seconds(5));
  ASSERT_TRUE(sim[0].elector->leading());
  sim.store.WriteAs("intruder", "2026-12-02T16:35:10.000000Z");
  const TimePoint written = sim.Now();
  sim.RunFor(seconds(3));
  EXPECT_FALSE(sim[0].elector->leading());
  ASSERT_EQ(sim[0].changes.size(), 2u);
  EXPECT_LE(sim[0].changes[1].at - written, seconds(2));
  EXPECT_EQ(sim[0].elector->holder(), "intruder");
}

TEST(LeaderTest, LosingTheWriteRaceKeepsItAFollower) {
  Simulation sim({"a"});
  sim.store.WriteAs("", "2026-12-02T16:35:10.000000Z");
  bool raced = false;
  sim[0].transport->before_put = [&] {
    if (!raced) sim.store.WriteAs("b", "2026-12-02T16:35:11.000000Z");  // b's PUT lands first
    raced = true;
  };
  sim.Start();
  sim.RunFor(seconds(10));
  EXPECT_FALSE(sim[0].elector->leading());
  EXPECT_TRUE(sim[0].changes.empty());
  EXPECT_EQ(sim[0].elector->holder(), "b");
  EXPECT_EQ(sim.store.spec()["holderIdentity"], "b");
}

TEST(LeaderTest, TwoCandidatesNeverLeadTogether) {
  Simulation sim({"a", "b"});
  sim.Start();
  sim.RunFor(seconds(30));
  ASSERT_TRUE(sim[0].elector->leading());  // a had the first turn
  EXPECT_FALSE(sim[1].elector->leading());
  EXPECT_EQ(sim[1].elector->holder(), "a");

  sim[0].transport->partitioned = true;  // a cannot renew: b takes over, after a gave up
  sim.RunFor(seconds(40));
  EXPECT_FALSE(sim[0].elector->leading());
  ASSERT_TRUE(sim[1].elector->leading());
  ASSERT_EQ(sim[0].changes.size(), 2u);
  ASSERT_EQ(sim[1].changes.size(), 1u);
  EXPECT_LT(sim[0].changes[1].at, sim[1].changes[0].at);

  sim[0].transport->partitioned = false;  // a is back: follows b
  sim.RunFor(seconds(40));
  EXPECT_FALSE(sim[0].elector->leading());
  EXPECT_TRUE(sim[1].elector->leading());
  EXPECT_EQ(sim[0].elector->holder(), "b");

  sim[1].transport->partitioned = true;  // and the other way round
  sim.RunFor(seconds(40));
  EXPECT_TRUE(sim[0].elector->leading());
  EXPECT_FALSE(sim[1].elector->leading());
  EXPECT_EQ(sim.store.spec()["leaseTransitions"], 2);
  EXPECT_EQ(sim.max_leaders(), 1);
}

TEST(LeaderTest, ReleaseOnStopClearsTheHolderForTheNextCandidate) {
  Simulation sim({"a", "b"});
  sim.Start();
  sim.RunFor(seconds(10));
  ASSERT_TRUE(sim[0].elector->leading());
  const TimePoint stopped = sim.Now();
  sim.Stop(0);
  EXPECT_FALSE(sim[0].elector->leading());
  ASSERT_EQ(sim[0].changes.size(), 2u);
  EXPECT_FALSE(sim[0].changes[1].leading);
  EXPECT_EQ(sim.store.spec()["holderIdentity"], "");
  EXPECT_EQ(sim.store.spec()["leaseDurationSeconds"], 1);

  sim.RunFor(seconds(5));  // b (still in the simulation) takes the free lease at its next try
  ASSERT_TRUE(sim[1].elector->leading());
  EXPECT_LE(sim[1].changes[0].at - stopped, milliseconds(2'400));
  EXPECT_EQ(sim.store.spec()["holderIdentity"], "b");
  EXPECT_EQ(sim.store.spec()["leaseTransitions"], 1);
}

TEST(LeaderTest, StoppedWhileWinningGivesTheLeaseBackUnannounced) {
  Simulation sim({"a"});
  sim.store.WriteAs("", "2026-12-02T16:35:10.000000Z");
  int puts = 0;
  sim[0].transport->before_put = [&] {
    if (puts++ == 0) sim.RequestStop(0);  // stop arrives while the take-over is in flight
  };
  sim.Start();
  sim.RunFor(seconds(5));
  sim.Stop(0);
  EXPECT_EQ(puts, 2);  // the take-over, then the release
  EXPECT_TRUE(sim[0].changes.empty());
  EXPECT_FALSE(sim[0].elector->leading());
  EXPECT_EQ(sim.store.spec()["holderIdentity"], "");
  EXPECT_EQ(sim.store.spec()["leaseDurationSeconds"], 1);
}

TEST(LeaderTest, WithoutReleaseTheLeaseStaysHeld) {
  Simulation sim({"a"}, /*release_on_stop=*/false);
  sim.Start();
  sim.RunFor(seconds(4));
  ASSERT_TRUE(sim[0].elector->leading());
  sim.Stop(0);
  EXPECT_FALSE(sim[0].elector->leading());
  EXPECT_EQ(sim[0].changes.size(), 2u);
  EXPECT_EQ(sim.store.spec()["holderIdentity"], "a");
}

}  // namespace
}  // namespace toposched::kube
