// `toposched agent` and `toposched serve --kube` as processes against the fake Kubernetes API
// server, through a kubeconfig with a bearer token (the fake refuses requests without it): the
// agent publishes and heartbeats its NodeTopology and stops on SIGTERM; serve waits for the API
// server before /readyz says ready, filters and binds over HTTP, and gives its Lease up on
// SIGTERM; bad flags and bad kubeconfigs refuse to start with the documented exit codes.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/fake_apiserver.h"
#include "testing/http_client.h"
#include "testing/k8s_payloads.h"
#include "testing/run_cli.h"
#include "testing/shared_topologies.h"

extern char** environ;

namespace toposched::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using std::chrono::milliseconds;

constexpr char kToken[] = "kube-cli-test-token";
constexpr char kNodes[] = "/api/v1/nodes";
constexpr char kPods[] = "/api/v1/namespaces/default/pods";
constexpr char kTopologies[] = "/apis/toposched.io/v1alpha1/nodetopologies";
constexpr char kLeases[] = "/apis/coordination.k8s.io/v1/namespaces/toposched-system/leases";
constexpr char kLeaseName[] = "toposched-extender";
// 8 A100s, 8 CX6 HCAs (listed as PCI devices only).
constexpr char kAzureA100[] = "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml";
constexpr int kAzureA100Gpus = 8;

bool WaitFor(const std::function<bool()>& done, milliseconds timeout = milliseconds(10'000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return done();
}

// A `toposched` child process with stdout and stderr in `log`. NODE_NAME is never inherited
// (tests pass --node-name, or test its absence). Killed (SIGKILL) if still running at the end.
class Process {
 public:
  Process(const std::vector<std::string>& args, fs::path log) : log_(std::move(log)) {
    const std::string bin = ToposchedBinary();
    std::vector<std::string> argv_storage = {bin};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_storage;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!std::string_view(*e).starts_with("NODE_NAME=")) env_storage.emplace_back(*e);
    }
    std::vector<char*> envp;
    for (std::string& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    EXPECT_EQ(posix_spawn(&pid_, bin.c_str(), &actions, nullptr, argv.data(), envp.data()), 0) << bin;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  void Signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // The exit code (128 + signal when killed by one), or nullopt when still running at `timeout`.
  std::optional<int> WaitExit(milliseconds timeout = milliseconds(10'000)) {
    if (pid_ <= 0) return exit_code_;
    std::optional<int> code;
    WaitFor(
        [&] {
          int status = 0;
          if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
          code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          return true;
        },
        timeout);
    if (code) {
      pid_ = -1;
      exit_code_ = code;
    }
    return code;
  }
  std::string log() const { return ReadFile(log_); }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// The "msg" of every line of a --log-format json log; a line that is not such a JSON object
// fails the test.
std::vector<std::string> JsonLogMessages(const std::string& log) {
  std::vector<std::string> messages;
  std::size_t start = 0;
  while (start < log.size()) {
    std::size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(j.is_object() && j.contains("level") && j.contains("ts") && j.contains("msg") &&
                j["msg"].is_string())
        << "not a JSON log line: " << line;
    if (j.is_object() && j.contains("msg") && j["msg"].is_string()) messages.push_back(j["msg"]);
  }
  return messages;
}

bool AnyContains(const std::vector<std::string>& messages, const std::string& part) {
  for (const std::string& m : messages) {
    if (m.find(part) != std::string::npos) return true;
  }
  return false;
}

class KubeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("toposched-kube-cli-" + std::to_string(::getpid()) + "-" + test);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    server_.Start();
    kubeconfig_ = WriteKubeconfig("kubeconfig", server_.url(), std::string("token: ") + kToken);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A kubeconfig with one context (namespace toposched-system) whose user is `user_yaml`
  // (the fields of `user:`, one line).
  std::string WriteKubeconfig(const std::string& name, const std::string& server,
                              const std::string& user_yaml) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << "apiVersion: v1\n"
                           "kind: Config\n"
                           "current-context: fake\n"
                           "clusters:\n"
                           "- name: fake\n"
                           "  cluster:\n"
                           "    server: "
                        << server
                        << "\n"
                           "contexts:\n"
                           "- name: fake\n"
                           "  context:\n"
                           "    cluster: fake\n"
                           "    user: tester\n"
                           "    namespace: toposched-system\n"
                           "users:\n"
                           "- name: tester\n"
                           "  user:\n"
                           "    "
                        << user_yaml << "\n";
    return path.string();
  }

  void CreateNode(const std::string& name) {
    json node = MakeNode(name);
    node["metadata"].erase("uid");
    server_.Create(kNodes, node);
  }

  std::vector<std::string> AgentArgs(const std::string& node) const {
    return {"agent",
            "--kubeconfig",
            kubeconfig_,
            "--node-name",
            node,
            "--input",
            SharedTopology(kAzureA100).string(),
            "--interval",
            "200ms",
            "--heartbeat",
            "1s",
            "--log-format",
            "json"};
  }

  // The NodeTopology of `node` once it has a status (the agent's first publish is complete).
  std::optional<json> PublishedTopology(const std::string& node) const {
    std::optional<json> object = server_.Get(kTopologies, node);
    if (!object || !object->contains("status")) return std::nullopt;
    return object;
  }

  std::vector<std::string> ServeArgs(const std::string& kubeconfig) const {
    return {"serve",
            "--kube",
            "--kubeconfig",
            kubeconfig,
            "--address",
            "127.0.0.1",
            "--port",
            "0",
            "--port-file",
            (dir_ / "port").string(),
            "--threads",
            "2",
            "--lease-namespace",
            "toposched-system",
            "--identity",
            "replica-a",
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "200ms",
            "--log-format",
            "json"};
  }

  std::uint16_t WaitForPort(const Process& serve) const {
    std::uint16_t port = 0;
    WaitFor([&] {
      std::ifstream in(dir_ / "port");
      int p = 0;
      if (in >> p && p > 0) port = static_cast<std::uint16_t>(p);
      return port != 0;
    });
    EXPECT_NE(port, 0) << "serve did not write its port; log:\n" << serve.log();
    return port;
  }

  bool SkipWithoutTopology() const {
    return !HaveSharedTopologies() || !fs::exists(SharedTopology(kAzureA100));
  }

  static FakeApiServerOptions TokenRequired() {
    FakeApiServerOptions options;
    options.required_token = kToken;
    return options;
  }

  fs::path dir_;
  FakeApiServer server_{TokenRequired()};
  std::string kubeconfig_;
};

#define SKIP_WITHOUT_TOPOLOGY()                                                     \
  do {                                                                              \
    if (SkipWithoutTopology()) {                                                    \
      GTEST_SKIP() << "no " << SharedTopology(kAzureA100)                           \
                   << " (set TOPOSCHED_SHARED_TOPOLOGIES to ../shared/topologies)"; \
    }                                                                               \
  } while (0)

// ---------------------------------------------------------------------------------------------
// toposched agent

TEST_F(KubeCli, AgentPublishesLabelsHeartbeatsAndStopsOnSigterm) {
  SKIP_WITHOUT_TOPOLOGY();
  CreateNode("gpu-node-0");
  Process agent(AgentArgs("gpu-node-0"), dir_ / "agent.log");

  std::optional<json> object;
  ASSERT_TRUE(WaitFor([&] { return (object = PublishedTopology("gpu-node-0")).has_value(); })) << agent.log();
  EXPECT_EQ((*object)["status"]["summary"]["gpus"], kAzureA100Gpus) << object->dump();
  EXPECT_EQ((*object)["status"]["generation"], 1);
  EXPECT_EQ((*object)["metadata"]["ownerReferences"][0]["name"], "gpu-node-0");
  const std::string first_heartbeat = (*object)["status"]["heartbeatTime"];
  EXPECT_FALSE(first_heartbeat.empty());
  ASSERT_TRUE(WaitFor([&] {
    const json labels = (*server_.Get(kNodes, "gpu-node-0"))["metadata"]["labels"];
    return labels.value("toposched.io/gpu-count", "") == std::to_string(kAzureA100Gpus);
  })) << server_.Get(kNodes, "gpu-node-0")->dump();
  const json labels = (*server_.Get(kNodes, "gpu-node-0"))["metadata"]["labels"];
  EXPECT_TRUE(labels.contains("toposched.io/topology-class")) << labels.dump();

  // Unchanged hardware: after --heartbeat (1s) only status.heartbeatTime moves.
  json beat;
  ASSERT_TRUE(WaitFor([&] {
    beat = *server_.Get(kTopologies, "gpu-node-0");
    return beat["status"]["heartbeatTime"] != first_heartbeat;
  })) << agent.log();
  EXPECT_EQ(beat["status"]["generation"], 1);
  EXPECT_EQ(beat["status"]["summary"]["gpus"], kAzureA100Gpus);
  for (const RequestRecord& r : server_.requests()) {
    EXPECT_NE(r.status, 401) << r.method << " " << r.path << ": the kubeconfig's token was not sent";
  }
  // Rounds run every 200 ms, but an unchanged round writes nothing: over one second (five
  // rounds) at most the heartbeats (about one a second; heartbeatTime has whole seconds).
  auto status_writes = [&] {
    int n = 0;
    for (const RequestRecord& r : server_.requests()) {
      n += r.resource == "nodetopologies/status" && (r.verb == "update" || r.verb == "patch") ? 1 : 0;
    }
    return n;
  };
  ASSERT_TRUE(WaitFor([&] { return status_writes() >= 2; }));  // records follow the replies
  const int writes_before = status_writes();
  std::this_thread::sleep_for(milliseconds(1'000));
  EXPECT_LE(status_writes() - writes_before, 2);
  EXPECT_EQ((*server_.Get(kTopologies, "gpu-node-0"))["status"]["generation"], 1);

  const auto term = std::chrono::steady_clock::now();
  agent.Signal(SIGTERM);
  EXPECT_EQ(agent.WaitExit(), 0) << agent.log();
  EXPECT_LT(std::chrono::steady_clock::now() - term, milliseconds(3'000)) << "SIGTERM stops it at once";
  EXPECT_TRUE(AnyContains(JsonLogMessages(agent.log()), "publishing NodeTopology to " + server_.url()))
      << agent.log();
}

TEST_F(KubeCli, AgentWithoutANodeNameSaysToSetNodeName) {
  SKIP_WITHOUT_TOPOLOGY();
  std::vector<std::string> args = AgentArgs("unused");
  args.erase(args.begin() + 3, args.begin() + 5);  // --node-name unused (NODE_NAME is not inherited)
  Process agent(args, dir_ / "agent.log");
  EXPECT_EQ(agent.WaitExit(), 1) << agent.log();
  EXPECT_TRUE(AnyContains(JsonLogMessages(agent.log()), "NODE_NAME")) << agent.log();
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(KubeCli, AgentRefusesAKubeconfigWithAnExecCredentialPlugin) {
  SKIP_WITHOUT_TOPOLOGY();
  CreateNode("gpu-node-0");
  kubeconfig_ = WriteKubeconfig("exec-kubeconfig", server_.url(),
                                "exec: {apiVersion: client.authentication.k8s.io/v1, command: aws, "
                                "args: [eks, get-token, --cluster-name, c]}");
  Process agent(AgentArgs("gpu-node-0"), dir_ / "agent.log");
  EXPECT_EQ(agent.WaitExit(), 1) << agent.log();
  EXPECT_TRUE(AnyContains(JsonLogMessages(agent.log()), "exec credential plugin")) << agent.log();
  EXPECT_TRUE(server_.requests().empty());
  EXPECT_FALSE(server_.Get(kTopologies, "gpu-node-0").has_value());
}

// ---------------------------------------------------------------------------------------------
// toposched serve --kube

TEST_F(KubeCli, ServeFiltersBindsAndReleasesTheLeaseOnSigterm) {
  SKIP_WITHOUT_TOPOLOGY();
  CreateNode("gpu-node-0");
  {
    Process agent(AgentArgs("gpu-node-0"), dir_ / "agent.log");
    ASSERT_TRUE(WaitFor([&] { return PublishedTopology("gpu-node-0").has_value(); })) << agent.log();
    agent.Signal(SIGTERM);
    ASSERT_EQ(agent.WaitExit(), 0) << agent.log();
  }

  Process serve(ServeArgs(kubeconfig_), dir_ / "serve.log");
  const std::uint16_t port = WaitForPort(serve);
  ASSERT_NE(port, 0);
  HttpClient http(port);
  ASSERT_TRUE(WaitFor([&] {
    auto r = http.Get("/readyz");
    return r && r->status == 200;
  })) << http.Get("/readyz")->body
      << "\n"
      << serve.log();
  const std::optional<json> lease = server_.Get(kLeases, kLeaseName);
  ASSERT_TRUE(lease.has_value()) << "no Lease in toposched-system";
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "replica-a");

  PodSpec spec{.name = "llm-0", .gpus = 2};
  json pod = MakePod(spec);
  pod["metadata"].erase("uid");
  pod["metadata"].erase("resourceVersion");
  pod = server_.Create(kPods, pod);
  spec.uid = pod["metadata"]["uid"];

  auto filter = http.Post("/scheduler/filter", ExtenderArgs(pod, {"gpu-node-0"}));
  ASSERT_TRUE(filter.has_value());
  ASSERT_EQ(filter->status, 200) << filter->body;
  EXPECT_EQ(json::parse(filter->body)["NodeNames"], json::array({"gpu-node-0"})) << filter->body;
  auto bind = http.Post("/scheduler/bind", BindingArgs(spec, "gpu-node-0"));
  ASSERT_TRUE(bind.has_value());
  ASSERT_EQ(bind->status, 200) << bind->body;
  EXPECT_EQ(json::parse(bind->body)["Error"], "") << bind->body;

  const json bound = *server_.Get(kPods, "llm-0");
  EXPECT_EQ(bound["spec"]["nodeName"], "gpu-node-0") << bound.dump();
  const json annotations = bound["metadata"].value("annotations", json::object());
  ASSERT_TRUE(annotations.contains("toposched.io/allocation")) << bound.dump();
  const json allocation = json::parse(annotations["toposched.io/allocation"].get<std::string>());
  EXPECT_EQ(allocation["node"], "gpu-node-0");
  EXPECT_EQ(allocation["gpus"].size(), 2u) << allocation.dump();

  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.WaitExit(), 0) << serve.log();
  const std::optional<json> released = server_.Get(kLeases, kLeaseName);
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(released->value("/spec/holderIdentity"_json_pointer, std::string()), "") << released->dump();
  for (const RequestRecord& r : server_.requests()) {
    EXPECT_NE(r.status, 401) << r.method << " " << r.path << ": the kubeconfig's token was not sent";
  }
  const std::vector<std::string> messages = JsonLogMessages(serve.log());
  EXPECT_TRUE(AnyContains(
      messages, "leader election on Lease toposched-system/" + std::string(kLeaseName) + " as replica-a"))
      << serve.log();
  EXPECT_TRUE(AnyContains(messages, "stopped")) << serve.log();
}

TEST_F(KubeCli, ServeIsNotReadyUntilTheApiServerAnswers) {
  const int api_port = server_.port();
  server_.Stop();  // the kubeconfig points at a closed port
  Process serve(ServeArgs(kubeconfig_), dir_ / "serve.log");
  const std::uint16_t port = WaitForPort(serve);
  ASSERT_NE(port, 0);
  HttpClient http(port);
  for (int i = 0; i < 5; ++i) {
    auto health = http.Get("/healthz");
    ASSERT_TRUE(health.has_value());
    EXPECT_EQ(health->status, 200) << "alive while the API server is down";
    auto ready = http.Get("/readyz");
    ASSERT_TRUE(ready.has_value());
    EXPECT_EQ(ready->status, 503) << ready->body;
    std::this_thread::sleep_for(milliseconds(100));
  }

  server_.Start(api_port);
  ASSERT_TRUE(WaitFor([&] {
    auto r = http.Get("/readyz");
    return r && r->status == 200;
  })) << http.Get("/readyz")->body
      << "\n"
      << serve.log();
  EXPECT_EQ((*server_.Get(kLeases, kLeaseName))["spec"]["holderIdentity"], "replica-a");
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.WaitExit(), 0) << serve.log();
}

// ---------------------------------------------------------------------------------------------
// Flags and configuration that refuse to start: 2 for bad flags, 1 for a bad environment.

TEST_F(KubeCli, ServeRefusesBadKubeFlags) {
  const std::string missing = (dir_ / "no-such-kubeconfig").string();
  struct Case {
    const char* name;
    std::vector<std::string> args;
    int exit_code;
    std::string message;  // part of the output
  };
  const std::vector<Case> cases = {
      {"both sources", {"serve", "--kube", "--cluster", dir_.string(), "--port", "0"}, 2, "exactly one of"},
      {"no source", {"serve", "--port", "0"}, 2, "exactly one of"},
      {"missing kubeconfig", {"serve", "--kube", "--kubeconfig", missing, "--port", "0"}, 1, missing},
      {"bad stale policy",
       {"serve", "--kube", "--kubeconfig", kubeconfig_, "--stale-topology-policy", "maybe", "--port", "0"},
       2,
       "--stale-topology-policy"},
      // Control: a valid policy passes flag checking (then the missing kubeconfig stops it).
      {"good stale policy",
       {"serve", "--kube", "--kubeconfig", missing, "--stale-topology-policy", "open", "--port", "0"},
       1,
       missing},
      {"renew deadline past lease duration",
       {"serve", "--kube", "--kubeconfig", kubeconfig_, "--leader-elect", "true", "--renew-deadline", "20s",
        "--lease-duration", "15s", "--port", "0"},
       2,
       "retry-period < renew-deadline < lease-duration"},
      // Control: without leader election the Lease timings do not matter.
      {"lease timings without election",
       {"serve", "--kube", "--kubeconfig", missing, "--leader-elect", "false", "--renew-deadline", "20s",
        "--lease-duration", "15s", "--port", "0"},
       1,
       missing},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Process serve(c.args, dir_ / (std::string(c.name) + ".log"));
    EXPECT_EQ(serve.WaitExit(), c.exit_code) << serve.log();
    EXPECT_NE(serve.log().find(c.message), std::string::npos) << serve.log();
  }
  EXPECT_TRUE(server_.requests().empty()) << "nothing may reach the API server when startup is refused";
}

}  // namespace
}  // namespace toposched::testing
