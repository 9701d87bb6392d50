// Informer over a scripted fake API server: list then watch, re-watch, relist on 410, back off on
// errors, stop. Sleeps are recorded, not slept; a watch with nothing more scripted blocks until
// the informer is stopped (as a quiet real watch would).

#include "toposched/kube/informer.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace toposched::kube {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

struct WatchScript {
  std::vector<std::string> lines;
  std::optional<std::string> error;  // after the lines: the connection breaks
};

class FakeApiServer : public Transport {
 public:
  void AddList(int status, const json& body) {
    const std::lock_guard lock(mu_);
    lists_.push_back(Response{status, body.dump()});
  }
  void AddWatch(std::vector<std::string> lines, std::optional<std::string> error = std::nullopt) {
    const std::lock_guard lock(mu_);
    watches_.push_back({std::move(lines), std::move(error)});
  }
  std::vector<std::string> list_paths() const {
    const std::lock_guard lock(mu_);
    return list_paths_;
  }
  std::vector<std::string> watch_paths() const {
    const std::lock_guard lock(mu_);
    return watch_paths_;
  }

  Result<Response> Do(const Request& request) override {
    const std::lock_guard lock(mu_);
    list_paths_.push_back(request.path);
    if (lists_.empty()) return Error("fake: no list scripted");
    Response next = std::move(lists_.front());
    lists_.pop_front();
    return next;
  }

  Result<Response> Stream(const Request& request, const std::function<bool(std::string_view)>& on_line,
                          std::stop_token stop) override {
    std::optional<WatchScript> script;
    {
      const std::lock_guard lock(mu_);
      watch_paths_.push_back(request.path);
      if (!watches_.empty()) {
        script = std::move(watches_.front());
        watches_.pop_front();
      }
    }
    if (!script) {  // a quiet watch: nothing until stopped
      std::mutex mu;
      std::condition_variable_any cv;
      std::unique_lock lock(mu);
      cv.wait(lock, stop, [] { return false; });
      return Response{200, ""};
    }
    for (const auto& line : script->lines) {
      if (stop.stop_requested() || !on_line(line)) return Response{200, ""};
    }
    if (script->error) return Error(*script->error);
    return Response{200, ""};
  }

 private:
  mutable std::mutex mu_;
  std::deque<Response> lists_;
  std::deque<WatchScript> watches_;
  std::vector<std::string> list_paths_, watch_paths_;
};

json Pod(const std::string& name, const std::string& rv) {
  return {{"metadata", {{"name", name}, {"resourceVersion", rv}}}};
}

json List(const std::string& rv, std::vector<json> items) {
  return {{"metadata", {{"resourceVersion", rv}}}, {"items", std::move(items)}};
}

std::string Event(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump();
}

std::string Bookmark(const std::string& rv) {
  return Event("BOOKMARK", {{"metadata", {{"resourceVersion", rv}}}});
}

std::string Gone() {
  return Event("ERROR", {{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}, {"message", "too old"}});
}

template <typename Pred>
bool Eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

std::string QueryValue(const std::string& path, const std::string& name) {
  const auto at = path.find(name + "=");
  if (at == std::string::npos) return {};
  const auto begin = at + name.size() + 1;
  return path.substr(begin, path.find('&', begin) - begin);
}

// An informer on FakeApiServer whose handler calls and sleeps are recorded.
class Harness {
 public:
  Harness() {
    ApiOptions api_options;
    api_options.max_attempts = 1;  // the informer's own backoff is under test
    api_options.sleep = [](milliseconds) {};
    api_ = std::make_unique<Api>(server, api_options);
    options.collection_path = "/api/v1/pods";
    options.name = "pods";
    options.label_selector = "app=web";
    options.page_size = 100;
    options.watch_timeout_seconds = 60;
    options.backoff_base = milliseconds(250);
    options.backoff_max = milliseconds(30'000);
    options.jitter_seed = 11;
    options.sleep = [this](milliseconds d, std::stop_token) {
      const std::lock_guard lock(mu_);
      sleeps_.push_back(d);
    };
  }
  ~Harness() { Stop(); }

  void Start() {
    InformerHandler handler;
    handler.replace = [this](std::vector<json>&& objects) {
      std::string call = "replace:";
      for (const auto& o : objects) call += o["metadata"]["name"].get<std::string>() + ",";
      Record(call);
    };
    handler.upsert = [this](const json& o) { Record("upsert:" + Describe(o)); };
    handler.remove = [this](const json& o) { Record("remove:" + Describe(o)); };
    informer_ = std::make_unique<Informer>(*api_, options, std::move(handler));
    thread_ = std::jthread([this](std::stop_token stop) { informer_->Run(stop); });
  }
  // Stops Run and returns how long that took.
  milliseconds Stop() {
    const auto start = std::chrono::steady_clock::now();
    if (thread_.joinable()) {
      thread_.request_stop();
      thread_.join();
    }
    return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
  }
  // Waits until the n-th watch request has been made.
  bool WaitForWatches(std::size_t n) {
    return Eventually([&] { return server.watch_paths().size() >= n; });
  }

  std::vector<std::string> calls() {
    const std::lock_guard lock(mu_);
    return calls_;
  }
  std::vector<milliseconds> sleeps() {
    const std::lock_guard lock(mu_);
    return sleeps_;
  }
  Informer& informer() { return *informer_; }

  FakeApiServer server;
  InformerOptions options;

 private:
  static std::string Describe(const json& o) {
    return o["metadata"]["name"].get<std::string>() + "@" +
           o["metadata"]["resourceVersion"].get<std::string>();
  }
  void Record(std::string call) {
    const std::lock_guard lock(mu_);
    calls_.push_back(std::move(call));
  }

  std::unique_ptr<Api> api_;
  std::unique_ptr<Informer> informer_;
  std::mutex mu_;
  std::vector<std::string> calls_;
  std::vector<milliseconds> sleeps_;
  std::jthread thread_;  // last: stopped before the rest goes
};

TEST(InformerTest, ListsThenSyncsThenWatchesFromTheListsVersion) {
  Harness h;
  h.server.AddList(200, List("10", {Pod("a", "3"), Pod("b", "7")}));
  h.Start();
  ASSERT_TRUE(h.informer().WaitForSync(milliseconds(5000)));
  EXPECT_TRUE(h.informer().synced());
  ASSERT_TRUE(h.WaitForWatches(1));
  EXPECT_EQ(h.calls(), std::vector<std::string>{"replace:a,b,"});
  EXPECT_EQ(h.informer().resource_version(), "10");
  ASSERT_EQ(h.server.list_paths().size(), 1u);
  EXPECT_EQ(h.server.list_paths()[0], "/api/v1/pods?limit=100&labelSelector=app%3Dweb");
  const std::string watch = h.server.watch_paths()[0];
  EXPECT_EQ(QueryValue(watch, "resourceVersion"), "10");
  EXPECT_EQ(QueryValue(watch, "allowWatchBookmarks"), "true");
  EXPECT_EQ(QueryValue(watch, "labelSelector"), "app%3Dweb");
  // The watch is quiet: stopping ends it promptly.
  EXPECT_LT(h.Stop(), milliseconds(1000));
  const auto counters = h.informer().counters();
  EXPECT_EQ(counters.lists, 1u);
  EXPECT_EQ(counters.watches, 1u);
  EXPECT_EQ(counters.errors, 0u);
  EXPECT_TRUE(h.informer().synced());
}

TEST(InformerTest, WaitForSyncTimesOutBeforeTheFirstList) {
  Harness h;
  h.server.AddList(403, {{"kind", "Status"}, {"message", "forbidden"}});
  h.options.sleep = [](milliseconds, std::stop_token) { std::this_thread::sleep_for(milliseconds(2)); };
  h.Start();  // then lists fail ("nothing scripted") and it backs off
  EXPECT_FALSE(h.informer().WaitForSync(milliseconds(20)));
  EXPECT_FALSE(h.informer().synced());
  ASSERT_TRUE(Eventually([&] { return h.informer().counters().errors >= 2; }));
  EXPECT_LT(h.Stop(), milliseconds(1000));
  EXPECT_TRUE(h.calls().empty());
}

TEST(InformerTest, EventsReachTheHandlerInOrder) {
  Harness h;
  h.server.AddList(200, List("10", {Pod("b", "5")}));
  h.server.AddWatch({Event("ADDED", Pod("a", "11")), Event("MODIFIED", Pod("a", "12")),
                     Event("DELETED", Pod("b", "13")), Bookmark("14")});
  h.Start();
  ASSERT_TRUE(h.WaitForWatches(2));
  const std::vector<std::string> want = {"replace:b,", "upsert:a@11", "upsert:a@12", "remove:b@13"};
  EXPECT_EQ(h.calls(), want);
  EXPECT_EQ(h.informer().resource_version(), "14");  // the bookmark's
  const auto counters = h.informer().counters();
  EXPECT_EQ(counters.events, 3u);
  EXPECT_EQ(counters.bookmarks, 1u);
}

TEST(InformerTest, CleanEndRewatchesFromTheLastVersionWithoutRelisting) {
  Harness h;
  h.server.AddList(200, List("10", {}));
  h.server.AddWatch({Event("ADDED", Pod("a", "11"))});
  h.server.AddWatch({Bookmark("25")});
  h.Start();
  ASSERT_TRUE(h.WaitForWatches(3));
  const auto watches = h.server.watch_paths();
  EXPECT_EQ(QueryValue(watches[0], "resourceVersion"), "10");
  EXPECT_EQ(QueryValue(watches[1], "resourceVersion"), "11");
  EXPECT_EQ(QueryValue(watches[2], "resourceVersion"), "25");
  h.Stop();
  EXPECT_EQ(h.server.list_paths().size(), 1u);
  EXPECT_EQ(h.informer().counters().lists, 1u);
  EXPECT_EQ(h.informer().counters().errors, 0u);
  EXPECT_TRUE(h.sleeps().empty());
}

TEST(InformerTest, GoneRelistsAndReplaces) {
  Harness h;
  h.server.AddList(200, List("10", {Pod("a", "3")}));
  h.server.AddWatch({Event("ADDED", Pod("b", "11")), Gone()});
  h.server.AddList(200, List("30", {Pod("c", "29")}));
  h.Start();
  ASSERT_TRUE(h.WaitForWatches(2));
  const std::vector<std::string> want = {"replace:a,", "upsert:b@11", "replace:c,"};
  EXPECT_EQ(h.calls(), want);
  EXPECT_EQ(QueryValue(h.server.watch_paths()[1], "resourceVersion"), "30");
  h.Stop();
  const auto counters = h.informer().counters();
  EXPECT_EQ(counters.gone, 1u);
  EXPECT_EQ(counters.lists, 2u);
  EXPECT_EQ(counters.errors, 0u);
  EXPECT_TRUE(h.sleeps().empty());  // a relist needs no backoff
}

TEST(InformerTest, TransportErrorBacksOffThenRewatchesFromTheSameVersion) {
  Harness h;
  h.server.AddList(200, List("10", {}));
  h.server.AddWatch({Event("ADDED", Pod("a", "11"))}, "transport: connection reset");
  h.server.AddWatch({}, "transport: connection refused");
  h.Start();
  ASSERT_TRUE(h.WaitForWatches(3));
  h.Stop();
  const auto watches = h.server.watch_paths();
  EXPECT_EQ(QueryValue(watches[1], "resourceVersion"), "11");
  EXPECT_EQ(QueryValue(watches[2], "resourceVersion"), "11");
  EXPECT_EQ(h.server.list_paths().size(), 1u);  // no relist
  const auto sleeps = h.sleeps();
  ASSERT_EQ(sleeps.size(), 2u);
  // The first watch delivered an event (backoff reset): at most 250 ms, then at most 500 ms.
  EXPECT_LE(sleeps[0], milliseconds(250));
  EXPECT_LE(sleeps[1], milliseconds(500));
  EXPECT_EQ(h.informer().counters().errors, 2u);
}

TEST(InformerTest, AVersionThatKeepsFailingIsRelisted) {
  Harness h;
  h.server.AddList(200, List("10", {Pod("a", "3")}));
  for (int i = 0; i < 3; ++i) h.server.AddWatch({}, "transport: connection reset");
  h.server.AddList(200, List("40", {Pod("a", "3")}));
  h.Start();
  ASSERT_TRUE(h.WaitForWatches(4));
  h.Stop();
  EXPECT_EQ(h.server.list_paths().size(), 2u);
  EXPECT_EQ(QueryValue(h.server.watch_paths()[3], "resourceVersion"), "40");
  EXPECT_EQ(h.informer().counters().errors, 3u);
  EXPECT_EQ(h.sleeps().size(), 3u);
}

TEST(InformerTest, ListErrorBacksOffAndRelists) {
  Harness h;
  h.server.AddList(500, {{"kind", "Status"}, {"message", "etcd"}});
  h.server.AddList(200, List("10", {Pod("a", "3")}));
  h.Start();
  ASSERT_TRUE(h.informer().WaitForSync(milliseconds(5000)));
  ASSERT_TRUE(h.WaitForWatches(1));
  h.Stop();
  EXPECT_EQ(h.sleeps().size(), 1u);
  EXPECT_LE(h.sleeps()[0], milliseconds(250));
  EXPECT_EQ(h.informer().counters().errors, 1u);
  EXPECT_EQ(h.informer().counters().lists, 1u);
}

TEST(InformerTest, WatchTimeoutIsRandomisedWithinOneToTwoTimes) {
  Harness h;
  h.options.watch_timeout_seconds = 10;
  h.server.AddList(200, List("10", {}));
  for (int i = 0; i < 40; ++i) h.server.AddWatch({Bookmark(std::to_string(11 + i))});
  h.Start();
  ASSERT_TRUE(h.WaitForWatches(41));
  h.Stop();
  std::set<int> seen;
  for (const auto& path : h.server.watch_paths()) {
    const int timeout = std::stoi(QueryValue(path, "timeoutSeconds"));
    EXPECT_GE(timeout, 10);
    EXPECT_LT(timeout, 20);
    seen.insert(timeout);
  }
  EXPECT_GE(seen.size(), 3u);  // 41 draws from 10 values
  EXPECT_EQ(h.informer().resource_version(), "50");
}

TEST(InformerTest, StopInterruptsTheDefaultBackoffSleep) {
  Harness h;
  h.options.sleep = nullptr;  // the real, interruptible wait
  h.options.backoff_base = milliseconds(60'000);
  h.options.backoff_max = milliseconds(60'000);
  h.Start();  // every list fails ("nothing scripted")
  ASSERT_TRUE(Eventually([&] { return h.informer().counters().errors >= 1; }));
  EXPECT_LT(h.Stop(), milliseconds(1000));
}

}  // namespace
}  // namespace toposched::kube
