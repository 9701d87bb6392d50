// `toposched agent`: discover the node's topology and publish it as its NodeTopology object
// (the DaemonSet mode), or with --once write the NodeTopology JSON to a file or stdout.

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <thread>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <fstream>
#include <string>

#include "commands.h"
#include "toposched/kube/agent.h"
#include "toposched/kube/api.h"
#include "toposched/kube/transport.h"
#include "toposched/server/logging.h"
#include "toposched/topology/json_codec.h"

namespace toposched::cmd {

namespace {

void PrintHelp() {
  std::printf(
      "usage: toposched agent [--node-name NAME] [--kubeconfig FILE] [flags]\n"
      "       toposched agent --once [--input FILE | --synthetic PRESET] [--output FILE]\n\n"
      "Discovers the node topology (hwloc, or a file / preset below) and publishes it as the\n"
      "node's NodeTopology object (toposched.io/v1alpha1), re-discovering every --interval and\n"
      "refreshing status.heartbeatTime every --heartbeat; labels the Node with\n"
      "toposched.io/gpu-count, rdma-nic-count and topology-class. Runs until SIGTERM.\n"
      "With --once: discover, write the JSON to --output (atomically) or stdout, exit.\n\n"
      "flags:\n%s"
      "  --node-name NAME    the Kubernetes node (default: $NODE_NAME)\n"
      "  --kubeconfig FILE   use this kubeconfig (default: the in-cluster service account)\n"
      "  --context NAME      kubeconfig context (default: current-context)\n"
      "  --interval DUR      re-discovery period (default 60s)\n"
      "  --heartbeat DUR     heartbeat refresh when nothing changed (default 5m)\n"
      "  --label-node BOOL   set the toposched.io/ node labels (default true)\n"
      "  --log-format text|json, --log-level LEVEL (default text, info)\n"
      "  --once              discover once, write, exit\n"
      "  --output FILE       with --once: where to write the JSON (default: stdout)\n"
      "Durations: 500ms, 30s, 2m.\n",
      kTopologyFlagsHelp);
}

Result<std::chrono::milliseconds> AgentDuration(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  const std::string unit = end != nullptr ? std::string(end) : "";
  if (end == v.c_str() || n <= 0 || n > 7LL * 24 * 3600 * 1000) {
    return Error(flag + " \"" + v + "\": expected a positive duration like 500ms, 30s or 2m");
  }
  if (unit == "ms") return std::chrono::milliseconds(n);
  if (unit == "s") return std::chrono::milliseconds(n * 1000);
  if (unit == "m") return std::chrono::milliseconds(n * 60'000);
  return Error(flag + " \"" + v + "\": expected a duration like 500ms, 30s or 2m");
}

// Writes `content` to `path` via a temporary file and rename, so readers never see half a file.
Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Error("cannot write " + tmp + ": " + std::strerror(errno));
    out << content;
    out.flush();
    if (!out) return Error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
  return Status::Ok();
}

// The DaemonSet mode: publish until SIGTERM/SIGINT.
int PublishLoop(const TopologyArgs& source, kube::AgentOptions publish, const std::string& kubeconfig,
                const std::string& context, server::LogFormat log_format, server::LogLevel log_level) {
  server::ConfigureLogging(log_format, log_level);
  auto fatal = [](const std::string& message) {
    server::Log(server::LogLevel::kError, {"agent", "", ""}, message);
    return 1;
  };
  if (publish.node_name.empty()) {
    return fatal("no node name: pass --node-name or set NODE_NAME (downward API: spec.nodeName)");
  }
  if (publish.heartbeat < publish.interval) {
    return fatal("--heartbeat must be at least --interval (the heartbeat is checked once per round)");
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Result<kube::ClientConfig> client =
      kubeconfig.empty() ? kube::InClusterConfig() : kube::LoadKubeconfig(kubeconfig, context);
  if (!client.ok()) return fatal(client.error().message());
  Result<std::unique_ptr<kube::Transport>> transport = kube::MakeRestTransport(*client);
  if (!transport.ok()) return fatal(transport.error().message());
  kube::Api api(**transport);
  // What NVML contributed (NVLink peers, UUIDs) or why not: logged when it changes, so a node
  // that fell back to hwloc-only data says so once, not every round.
  auto last_nvml_note = std::make_shared<std::string>();
  const std::string node_name = publish.node_name;
  kube::AgentPublisher publisher(api, publish, [source, last_nvml_note, node_name]() -> Result<NodeTopology> {
    std::string nvml_note;
    Result<NodeTopology> topology = ObtainTopology(source, &nvml_note);
    if (!nvml_note.empty() && nvml_note != *last_nvml_note) {
      server::Log(server::LogLevel::kInfo, {"agent", "", node_name}, "nvml: " + nvml_note);
      *last_nvml_note = nvml_note;
    }
    return topology;
  });
  server::Log(server::LogLevel::kInfo, {"agent", "", publish.node_name},
              "publishing NodeTopology to " + client->server);
  std::jthread loop([&publisher](std::stop_token stop) { publisher.Run(stop); });
  int sig = 0;
  sigwait(&signals, &sig);
  server::Log(server::LogLevel::kInfo, {"agent", "", publish.node_name}, "stopping");
  loop.request_stop();
  loop.join();
  return 0;
}

}  // namespace

int RunAgent(const std::vector<std::string>& args) {
  TopologyArgs source;
  std::string output, kubeconfig, context;
  bool once = false;
  kube::AgentOptions publish;
  server::LogFormat log_format = server::LogFormat::kText;
  server::LogLevel log_level = server::LogLevel::kInfo;
  if (const char* node = std::getenv("NODE_NAME"); node != nullptr) publish.node_name = node;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string error;
    const bool has_value = i + 1 < args.size();
    if (ParseTopologyFlag(args, i, source, &error)) {
      if (!error.empty()) {
        std::fprintf(stderr, "toposched agent: %s\n", error.c_str());
        return 2;
      }
    } else if (args[i] == "--once") {
      once = true;
    } else if (args[i] == "--output" && has_value) {
      output = args[++i];
    } else if (args[i] == "--kubeconfig" && has_value) {
      kubeconfig = args[++i];
    } else if (args[i] == "--context" && has_value) {
      context = args[++i];
    } else if ((args[i] == "--interval" || args[i] == "--heartbeat") && has_value) {
      const std::string& flag = args[i];
      Result<std::chrono::milliseconds> d = AgentDuration(flag, args[++i]);
      if (!d.ok()) {
        std::fprintf(stderr, "toposched agent: %s\n", d.error().message().c_str());
        return 2;
      }
      (flag == "--interval" ? publish.interval : publish.heartbeat) = *d;
    } else if (args[i] == "--label-node" && has_value) {
      const std::string& v = args[++i];
      if (v != "true" && v != "false") {
        std::fprintf(stderr, "toposched agent: --label-node \"%s\": expected true or false\n", v.c_str());
        return 2;
      }
      publish.label_node = v == "true";
    } else if (args[i] == "--log-format" && has_value) {
      auto f = server::ParseLogFormat(args[++i]);
      if (!f.ok()) {
        std::fprintf(stderr, "toposched agent: %s\n", f.error().message().c_str());
        return 2;
      }
      log_format = *f;
    } else if (args[i] == "--log-level" && has_value) {
      auto l = server::ParseLogLevel(args[++i]);
      if (!l.ok()) {
        std::fprintf(stderr, "toposched agent: %s\n", l.error().message().c_str());
        return 2;
      }
      log_level = *l;
    } else if (args[i] == "--help" || args[i] == "-h") {
      PrintHelp();
      return 0;
    } else {
      std::fprintf(stderr, "toposched agent: unknown or incomplete flag '%s' (see --help)\n", args[i].c_str());
      return 2;
    }
  }
  // ParseTopologyFlag takes --node-name (the name recorded in the topology); it is also the
  // Kubernetes node to publish as, and overrides $NODE_NAME.
  if (!source.node_name.empty()) publish.node_name = source.node_name;
  if (!once) return PublishLoop(source, publish, kubeconfig, context, log_format, log_level);
  // Logs go to stderr: stdout may carry the JSON.
  auto logger = std::make_shared<spdlog::logger>("agent", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l component=agent %v", spdlog::pattern_time_type::utc);
  std::string nvml_note;
  auto topology = ObtainTopology(source, &nvml_note);
  if (!topology.ok()) {
    logger->error("msg=\"discovery failed\" error=\"{}\"", topology.error().message());
    return 1;
  }
  const std::string json = EncodeTopologyJson(*topology) + "\n";
  if (output.empty()) {
    std::fputs(json.c_str(), stdout);
  } else if (Status written = WriteFileAtomically(output, json); !written.ok()) {
    logger->error("msg=\"write failed\" error=\"{}\"", written.error().message());
    return 1;
  }
  // nvml= only when live discovery tried NVML: says whether NVLink came from it, or why not.
  logger->info("msg=\"discovered\" node={} source={} gpus={} rdma_nics={} fingerprint={}{}{}", topology->node_name,
               ToString(topology->source), topology->gpus.size(), topology->RdmaNicCount(),
               topology->Fingerprint(), output.empty() ? "" : " output=" + output,
               nvml_note.empty() ? "" : " nvml=\"" + nvml_note + "\"");
  return 0;
}

}  // namespace toposched::cmd
