// `toposched serve` as a process: start on port 0 with the file source, drive it over HTTP,
// SIGTERM (graceful) and SIGKILL (crash) it, restart it on the same directory.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/http_client.h"
#include "testing/k8s_payloads.h"
#include "testing/run_cli.h"

extern char** environ;

namespace toposched::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A cluster directory: `n` nodes of `preset` (node documents), nothing bound yet; node i gets
// labels(i) when given.
fs::path MakeClusterDir(const std::string& tag, int n, const std::string& preset,
                        const std::function<json(int)>& labels = {}) {
  const fs::path dir =
      fs::temp_directory_path() / ("toposched-serve-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "nodes");
  for (int i = 0; i < n; ++i) {
    const std::string name = "node-" + std::to_string(i);
    json doc{{"name", name}, {"preset", preset}};
    if (labels) doc["labels"] = labels(i);
    std::ofstream(dir / "nodes" / (name + ".json")) << doc.dump();
  }
  return dir;
}

class ServeProcess {
 public:
  explicit ServeProcess(const fs::path& dir, const std::string& log_level = "warn") : dir_(dir) {
    const fs::path port_file = dir / "port";
    fs::remove(port_file);
    const std::string bin = ToposchedBinary();
    const std::string log = (dir / "serve.log").string();
    std::vector<std::string> args = {bin,         "serve",  "--cluster",   dir.string(),  "--address",
                                     "127.0.0.1", "--port", "0",           "--port-file", port_file.string(),
                                     "--threads", "4",      "--log-level", log_level};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    EXPECT_EQ(posix_spawn(&pid_, bin.c_str(), &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    for (int i = 0; i < 600 && port_ == 0; ++i) {  // up to 60 s (ASan builds start slowly)
      std::ifstream in(port_file);
      int p = 0;
      if (in >> p && p > 0)
        port_ = static_cast<std::uint16_t>(p);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_NE(port_, 0) << "server did not start; log:\n" << ReadFile(dir / "serve.log");
  }
  ~ServeProcess() {
    if (pid_ > 0) Kill(SIGKILL);
  }
  std::uint16_t port() const { return port_; }
  // Sends `sig` and returns the exit status (as waitpid reports it).
  int Kill(int sig) {
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  fs::path dir_;
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

TEST(Serve, StartsServesAndStopsGracefullyOnSigterm) {
  const fs::path dir = MakeClusterDir("term", 3, "hgx-h100-8gpu");
  ServeProcess s(dir);
  ASSERT_NE(s.port(), 0);
  HttpClient c(s.port());
  EXPECT_EQ(c.Get("/readyz")->status, 200);
  const PodSpec p{.name = "p", .uid = "uid-p", .gpus = 2, .rdma = 2};
  auto f = c.Post("/scheduler/filter", ExtenderArgs(MakePod(p), {"node-0", "node-1", "node-2"}));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(json::parse(f->body)["NodeNames"].size(), 3u);
  auto b = c.Post("/scheduler/bind", BindingArgs(p, "node-1"));
  EXPECT_EQ(json::parse(b->body)["Error"], "");
  const int status = s.Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The bind is in the journal.
  EXPECT_NE(ReadFile(dir / "allocations.journal").find("uid-p"), std::string::npos);
  fs::remove_all(dir);
}

// Real nodes all carry a unique kubernetes.io/hostname (and often other per-node labels, and
// network tier labels such as toposched.io/leaf): the filter still evaluates one result per node
// class, classes being hardware, allocation and schedulability, not labels.
TEST(Serve, NodesDifferingOnlyInLabelsShareOneEvaluation) {
  const fs::path dir = MakeClusterDir("classes", 4, "hgx-h100-8gpu", [](int i) {
    return json{{"kubernetes.io/hostname", "node-" + std::to_string(i)},
                {"example.com/instance-id", "i-" + std::to_string(1000 + i)},
                {"toposched.io/leaf", i < 2 ? "leaf-a" : "leaf-b"}};
  });
  ServeProcess s(dir, "debug");
  ASSERT_NE(s.port(), 0);
  HttpClient c(s.port());
  const PodSpec p{.name = "p", .uid = "uid-p", .gpus = 2, .rdma = 2};
  auto f = c.Post("/scheduler/filter", ExtenderArgs(MakePod(p), {"node-0", "node-1", "node-2", "node-3"}));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(json::parse(f->body)["NodeNames"].size(), 4u);
  // A Prefill/Decode pool pod too: its filter decision depends on the class alone (only its
  // scores depend on where the pool runs).
  const PodSpec decode{.name = "decode",
                       .uid = "uid-decode",
                       .gpus = 2,
                       .rdma = 2,
                       .labels = {{"llm-d.ai/role", "decode"}, {"toposched.io/pool", "chat"}}};
  f = c.Post("/scheduler/filter", ExtenderArgs(MakePod(decode), {"node-0", "node-1", "node-2", "node-3"}));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(json::parse(f->body)["NodeNames"].size(), 4u);
  const int status = s.Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const std::string log = ReadFile(dir / "serve.log");
  for (const char* pod : {"pod=default/p ", "pod=default/decode "}) {
    const std::size_t at = log.find(pod);
    ASSERT_NE(at, std::string::npos) << pod << "\n" << log;
    EXPECT_NE(log.find("4 of 4 nodes fit (1 node classes evaluated)", at), std::string::npos) << pod << "\n"
                                                                                              << log;
  }
  fs::remove_all(dir);
}

TEST(Serve, RefusesToStartOnABadClusterDirectory) {
  const fs::path dir = MakeClusterDir("bad", 1, "hgx-h100-8gpu");
  std::ofstream(dir / "nodes" / "broken.json") << "{\"name\": \"x\", \"preset\": ";
  const CliRun r = RunToposched("serve --cluster " + ShellQuote(dir.string()) + " --port 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("broken.json"), std::string::npos) << r.err;
  EXPECT_EQ(RunToposched("serve --port 0").exit_code, 2);  // no --cluster
  EXPECT_EQ(RunToposched("serve --cluster " + ShellQuote(dir.string()) + " --port 99999").exit_code, 2);
  fs::remove_all(dir);
}

// kill -9 in the middle of concurrent binds, then a restart: every acknowledged bind is still
// there exactly once, and no device is held twice.
TEST(Serve, KillNineMidRunLosesNoAcknowledgedBindAndDuplicatesNone) {
  const fs::path dir = MakeClusterDir("kill", 6, "hgx-h100-8gpu");
  std::vector<std::string> names;
  for (int i = 0; i < 6; ++i) names.push_back("node-" + std::to_string(i));
  std::mutex mu;
  std::map<std::string, std::string> acked;  // uid -> node
  {
    ServeProcess s(dir);
    ASSERT_NE(s.port(), 0);
    std::atomic<bool> stop{false};
    std::atomic<int> acks{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < 6; ++t) {
      clients.emplace_back([&, t] {
        HttpClient c(s.port());
        for (int i = 0; !stop.load(); ++i) {
          const PodSpec p{.name = "p" + std::to_string(t) + "-" + std::to_string(i),
                          .uid = "k" + std::to_string(t) + "-" + std::to_string(i),
                          .gpus = 1};
          auto f = c.Post("/scheduler/filter", ExtenderArgs(MakePod(p), names));
          if (!f || f->status != 200) return;  // the server is gone
          const json fr = json::parse(f->body);
          if (fr["NodeNames"].empty()) return;  // the cluster is full
          const std::string node = fr["NodeNames"][(t + i) % fr["NodeNames"].size()];
          auto b = c.Post("/scheduler/bind", BindingArgs(p, node));
          if (!b) return;
          if (b->status == 200 && json::parse(b->body)["Error"] == "") {
            std::lock_guard lock(mu);
            acked[p.uid] = node;
            acks.fetch_add(1);
          }
        }
      });
    }
    // Kill once a good number of binds is acknowledged (the cluster holds 48 one-GPU pods).
    for (int i = 0; i < 600 && acks.load() < 20; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s.Kill(SIGKILL);
    stop = true;
    for (auto& th : clients) th.join();
  }
  ASSERT_GE(acked.size(), 1u);

  ServeProcess again(dir);
  ASSERT_NE(again.port(), 0) << ReadFile(dir / "serve.log");
  // After replay and compaction the journal holds each live bind exactly once.
  std::map<std::string, int> seen;
  std::set<std::pair<std::string, int>> gpus;
  std::ifstream journal(dir / "allocations.journal");
  for (std::string line; std::getline(journal, line);) {
    const json j = json::parse(line);
    if (j["op"] != "bind") continue;
    ++seen[j["uid"]];
    for (const json& g : j["gpus"]) EXPECT_TRUE(gpus.insert({j["node"], g.get<int>()}).second) << line;
  }
  for (const auto& [uid, n] : seen) EXPECT_EQ(n, 1) << uid;
  for (const auto& [uid, node] : acked) {
    EXPECT_EQ(seen.count(uid), 1u) << "acknowledged bind of " << uid << " lost";
  }
  // The server agrees: a retried bind of an acknowledged pod is "already bound" (no error).
  HttpClient c(again.port());
  for (const auto& [uid, node] : acked) {
    const PodSpec p{.name = "x", .uid = uid};
    EXPECT_EQ(json::parse(c.Post("/scheduler/bind", BindingArgs(p, node))->body)["Error"], "") << uid;
  }
  const std::string metrics = c.Get("/metrics")->body;
  EXPECT_NE(metrics.find("toposched_state_pods " + std::to_string(seen.size()) + "\n"), std::string::npos)
      << metrics;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace toposched::testing
