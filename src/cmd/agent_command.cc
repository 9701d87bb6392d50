// `toposched agent`: discover the node's topology and publish it as its NodeTopology object
// (the DaemonSet mode), or with --once write the NodeTopology JSON to a file or stdout.

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "commands.h"
#include "flags.h"
#include "toposched/kube/agent.h"
#include "toposched/kube/api.h"
#include "toposched/kube/transport.h"
#include "toposched/metrics/logging.h"
#include "toposched/topology/json_codec.h"

namespace toposched::cmd {

namespace {

// Writes `content` to `path` via a temporary file and rename, so readers never see half a file.
Status WriteFileAtomically(const std::string& path, const std::string& content) {
  // The usual mistake is a directory that is not there (a hostPath not mounted): say so, rather
  // than fail on the temporary file's name.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code dir_ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, dir_ec)) {
    return Error("cannot write " + path + ": the directory " + parent.string() +
                 (std::filesystem::exists(parent, dir_ec) ? " is not a directory" : " does not exist"));
  }
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
                const std::string& context, metrics::LogFormat log_format, metrics::LogLevel log_level) {
  metrics::ConfigureLogging(log_format, log_level);
  auto fatal = [](const std::string& message) {
    metrics::Log(metrics::LogLevel::kError, {"agent", "", ""}, message);
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
      metrics::Log(metrics::LogLevel::kInfo, {"agent", "", node_name}, "nvml: " + nvml_note);
      *last_nvml_note = nvml_note;
    }
    return topology;
  });
  metrics::Log(metrics::LogLevel::kInfo, {"agent", "", publish.node_name},
               "publishing NodeTopology to " + client->server);
  std::jthread loop([&publisher](std::stop_token stop) { publisher.Run(stop); });
  int sig = 0;
  sigwait(&signals, &sig);
  metrics::Log(metrics::LogLevel::kInfo, {"agent", "", publish.node_name}, "stopping");
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
  std::string log_format = "text", log_level = "info";
  FlagSet flags("agent",
                "toposched agent [--node-name NAME] [--kubeconfig FILE] [flags]\n"
                "       toposched agent --once [--input FILE | --synthetic PRESET] [--output FILE]",
                "Discovers the node topology (hwloc, or a file / preset below) and publishes it as the\n"
                "node's NodeTopology object (toposched.io/v1alpha1), re-discovering every --interval and\n"
                "refreshing status.heartbeatTime every --heartbeat; labels the Node with\n"
                "toposched.io/gpu-count, rdma-nic-count and topology-class. Runs until SIGTERM.\n"
                "With --once: discover, write the JSON to --output (atomically) or stdout, exit.\n"
                "Logs go to stderr, in --log-format, in both modes.");
  AddTopologyFlags(flags, source,
                   "the Kubernetes node to publish as, and the name recorded in the\n"
                   "topology (default: $NODE_NAME; with --once, from the source, else\n"
                   "the host name)");
  flags.Group("publishing (the DaemonSet mode)");
  flags.Text("--kubeconfig", kubeconfig, "FILE",
             "use this kubeconfig (default: the in-cluster service account)");
  flags.Text("--context", context, "NAME", "kubeconfig context (default: current-context)");
  flags.Duration("--interval", publish.interval, std::chrono::milliseconds(1), std::chrono::hours(24 * 7),
                 "re-discovery period");
  flags.Duration("--heartbeat", publish.heartbeat, std::chrono::milliseconds(1), std::chrono::hours(24 * 7),
                 "heartbeat refresh when nothing changed");
  flags.Bool("--label-node", publish.label_node, "set the toposched.io/ node labels");
  flags.Group("once");
  flags.Switch("--once", once, "discover once, write, exit");
  flags.Text("--output", output, "FILE", "with --once: where to write the JSON (default: stdout)");
  flags.Group("logging");
  flags.Choice("--log-format", log_format, {"text", "json"}, "log line format");
  flags.Choice("--log-level", log_level, {"trace", "debug", "info", "warn", "error", "off"},
               "least severe level logged");
  if (const auto exit_code = flags.Parse(args)) return *exit_code;
  if (const std::string bad = TopologyArgsUsageError(source); !bad.empty()) return flags.UsageError(bad);
  if (!output.empty() && !once) return flags.UsageError("--output goes with --once");
  if (const char* node = std::getenv("NODE_NAME"); node != nullptr) publish.node_name = node;
  // --node-name is the name recorded in the topology and the Kubernetes node to publish as; it
  // overrides $NODE_NAME.
  if (!source.node_name.empty()) publish.node_name = source.node_name;
  // One log format in both modes, on stderr (with --once, stdout may carry the JSON).
  const metrics::LogFormat format = *metrics::ParseLogFormat(log_format);
  const metrics::LogLevel level = *metrics::ParseLogLevel(log_level);
  if (!once) return PublishLoop(source, publish, kubeconfig, context, format, level);
  metrics::ConfigureLogging(format, level);
  std::string nvml_note;
  auto topology = ObtainTopology(source, &nvml_note);
  if (!topology.ok()) {
    metrics::Log(metrics::LogLevel::kError, {"agent", "", source.node_name},
                 "discovery failed: " + topology.error().message());
    return 1;
  }
  const std::string json = EncodeTopologyJson(*topology) + "\n";
  if (output.empty()) {
    std::fputs(json.c_str(), stdout);
  } else if (Status written = WriteFileAtomically(output, json); !written.ok()) {
    metrics::Log(metrics::LogLevel::kError, {"agent", "", topology->node_name},
                 "write failed: " + written.error().message());
    return 1;
  }
  // nvml= only when live discovery tried NVML: says whether NVLink came from it, or why not.
  metrics::Log(metrics::LogLevel::kInfo, {"agent", "", topology->node_name},
               "discovered: source=" + std::string(ToString(topology->source)) +
                   " gpus=" + std::to_string(topology->gpus.size()) +
                   " rdma_nics=" + std::to_string(topology->RdmaNicCount()) +
                   " fingerprint=" + topology->Fingerprint() + (output.empty() ? "" : " output=" + output) +
                   (nvml_note.empty() ? "" : " nvml: " + nvml_note));
  return 0;
}

}  // namespace toposched::cmd
