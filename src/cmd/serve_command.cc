// `toposched serve`: the scheduler extender. Loads the scheduler config and the cluster state
// (the Kubernetes API with --kube, or a directory with --cluster), starts the HTTP server and
// serves until SIGTERM/SIGINT, then drains in-flight requests, gives up the Lease and exits 0.

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "plugins/registry.h"
#include "toposched/common/file.h"
#include "toposched/extender/service.h"
#include "toposched/framework/config.h"
#include "toposched/framework/framework.h"
#include "toposched/kube/api.h"
#include "toposched/kube/leader.h"
#include "toposched/kube/source.h"
#include "toposched/kube/transport.h"
#include "toposched/metrics/logging.h"
#include "toposched/metrics/metrics.h"
#include "toposched/server/http_server.h"
#include "toposched/state/cluster_state.h"

namespace toposched::cmd {
namespace {

struct ServeFlags {
  bool kube = false;
  std::string kubeconfig, context;
  bool leader_elect = true;
  kube::LeaderOptions lease;
  kube::KubeSourceOptions source;
  std::string cluster, config, port_file;
  server::ServerOptions http;
  extender::ExtenderOptions extender;
  metrics::LogFormat log_format = metrics::LogFormat::kText;
  metrics::LogLevel log_level = metrics::LogLevel::kInfo;
  std::chrono::milliseconds grace{10'000};
};

// Returns nullopt to go on, else the exit code (0 after --help).
std::optional<int> ParseFlags(const std::vector<std::string>& args, ServeFlags& f) {
  using std::chrono::milliseconds;
  constexpr milliseconds kDay = std::chrono::hours(24);
  f.http.port = 8888;
  f.source.stale_topology_age = std::chrono::minutes(15);
  FlagSet flags(
      "serve", "toposched serve (--kube | --cluster DIR) [flags]",
      "The scheduler extender: kube-scheduler's filter/prioritize/bind/preempt verbs and Volcano's\n"
      "extender-plugin verbs over HTTP, with /healthz, /readyz and /metrics (docs/extender.md).");
  flags.Group("cluster state (one of)");
  flags.Switch("--kube", f.kube, "the Kubernetes API server: in-cluster service account, or --kubeconfig");
  flags.Text("--cluster", f.cluster, "DIR",
             "file source: DIR/nodes/*.json node documents and the durable\n"
             "DIR/allocations.journal (created if absent); binds append to it");

  flags.Group("Kubernetes (with --kube; docs/operations.md)");
  flags.Text("--kubeconfig", f.kubeconfig, "FILE",
             "use this kubeconfig instead of the in-cluster service account\n"
             "(token, client certificate or basic auth; exec credential plugins\n"
             "such as EKS's, GKE's or OIDC's are refused: use a service account)");
  flags.Text("--context", f.context, "NAME", "kubeconfig context (default: current-context)");
  flags.Bool("--leader-elect", f.leader_elect, "elect one leader among replicas with a Lease");
  flags.Text("--lease-namespace", f.lease.lease_namespace, "NS",
             "the Lease's namespace (default: the service account's namespace)");
  flags.Text("--lease-name", f.lease.lease_name, "NAME", "the Lease's name");
  flags.Text("--identity", f.lease.identity, "ID",
             "this replica's name in the Lease (default: $POD_NAME, else hostname).\n"
             "With $POD_NAMESPACE and $POD_NAME set, every synced replica is ready\n"
             "and the leader labels its pod toposched.io/leader=true (the Service\n"
             "selects it); without them only the leader is ready.");
  flags.Duration("--lease-duration", f.lease.lease_duration, milliseconds(1), kDay, "how long a Lease holds");
  flags.Duration("--renew-deadline", f.lease.renew_deadline, milliseconds(1), kDay,
                 "the leader gives up leading when it cannot renew within this");
  flags.Duration("--retry-period", f.lease.retry_period, milliseconds(1), kDay, "between Lease attempts");
  milliseconds stale_age = f.source.stale_topology_age;
  flags.Duration("--stale-topology-age", stale_age, milliseconds(0), kDay * 365,
                 "a NodeTopology whose agent heartbeat is older is stale\n(0 = never)");
  std::string stale_policy = "closed";
  flags.Choice("--stale-topology-policy", stale_policy, {"closed", "open"},
               "stale: no new GPU pods there (closed), or keep using the last\ntopology (open)");
  std::string hami_lock = "auto";
  flags.Choice("--hami-node-lock", hami_lock, {"auto", "true", "false"},
               "take HAMi's node lock (hami.io/mutex.lock) when a bind hands\n"
               "GPUs to HAMi's NVIDIA or AMD device plugin: auto on nodes that\n"
               "carry that plugin's registration annotation, true on every\nnode");
  std::string pod_events = "all";
  flags.Choice("--pod-events", pod_events, {"all", "warnings"},
               "events on pods: all (DevicesAllocated after each bind and\n"
               "ReadyAfterBind, two API writes a pod, and the warnings), or\n"
               "warnings only");
  flags.Bool("--dra", f.source.dra,
             "Dynamic Resource Allocation (Kubernetes 1.34+): watch\n"
             "ResourceSlices and ResourceClaims, count claimed devices as\n"
             "taken, rank nodes for pods whose GPUs/NICs come from\n"
             "claims");

  flags.Group("scheduling");
  flags.Text("--config", f.config, "FILE",
             "scheduler config YAML (docs/configuration.md); default: every\n"
             "built-in plugin with its default weight");
  flags.Duration("--reservation-ttl", f.extender.reservation_ttl, milliseconds(1), kDay,
                 "how long filter results wait for the pod's bind");
  long long volcano_weight = static_cast<long long>(f.extender.volcano_score_weight);
  flags.Integer("--volcano-score-weight", volcano_weight, 0, 1000, "W",
                "multiplier of the 0..100 score in Volcano replies");

  flags.Group("HTTP");
  auto* address_flag = flags
                           .Text("--address", f.http.address, "ADDR",
                                 "listen address (default 127.0.0.1 with --cluster, 0.0.0.0 with\n"
                                 "--kube); bind is unauthenticated without --tls-client-ca")
                           ->default_str("");
  long long port = f.http.port;
  flags.Integer("--port", port, 0, 65535, "N", "listen port (0 = any free port, see --port-file)");
  flags.Text("--port-file", f.port_file, "FILE", "write the bound port to FILE once listening");
  long long threads = 0;
  flags.Integer("--threads", threads, 1, 256, "N", "worker threads")
      ->default_str("the number of CPUs, at least 2");
  long long bind_concurrency = 64;
  flags.Integer("--bind-concurrency", bind_concurrency, 1, 1024, "N",
                "kube-scheduler's binds waiting on the API server at once, on\n"
                "threads of their own; as many more wait, and one over that is\n"
                "answered 429 (the scheduler retries it)");
  flags.Text("--kube-prefix", f.extender.kube_prefix, "PATH", "kube-scheduler urlPrefix path");
  flags.Text("--volcano-prefix", f.extender.volcano_prefix, "PATH", "Volcano extender.urlPrefix path");
  std::int64_t max_body = static_cast<std::int64_t>(f.extender.max_body_bytes);
  flags.Quantity("--max-body-bytes", max_body, 1024, std::int64_t{1} << 30,
                 "request body limit, bytes or 16Mi-style\n(onSessionOpen: 512Mi)");
  flags.Duration("--read-timeout", f.http.read_timeout, milliseconds(1), kDay,
                 "a request must arrive within this");
  flags.Duration("--idle-timeout", f.http.idle_timeout, milliseconds(1), kDay,
                 "idle keep-alive connections close after this");
  flags.Text("--tls-cert", f.http.tls.cert_file, "FILE",
             "serve HTTPS with this certificate (with --tls-key); both files are\nre-read when they change");
  flags.Text("--tls-key", f.http.tls.key_file, "FILE", "the certificate's private key");
  flags.Text("--tls-client-ca", f.http.tls.client_ca_file, "FILE",
             "mutual TLS: every verb needs a client certificate signed by this CA\n"
             "(kube-scheduler's tlsConfig certFile/keyFile); health and metrics\n"
             "stay open. Not with Volcano, whose client sends no certificate");
  flags.Duration("--shutdown-grace", f.grace, milliseconds(0), kDay,
                 "on SIGTERM, how long in-flight requests may take");

  flags.Group("logging");
  std::string log_format = "text", log_level = "info";
  flags.Choice("--log-format", log_format, {"text", "json"}, "log line format");
  flags.Choice("--log-level", log_level, {"trace", "debug", "info", "warn", "error", "off"},
               "least severe level logged");
  flags.Footer("Durations: 500ms, 30s, 5m, 1h, 1m30s. Quantities: 16777216, 512Ki, 16Mi, 1G.");
  if (const auto exit_code = flags.Parse(args)) return exit_code;

  f.source.stale_topology_age = std::chrono::duration_cast<std::chrono::seconds>(stale_age);
  f.source.stale_policy =
      stale_policy == "open" ? kube::StaleTopologyPolicy::kOpen : kube::StaleTopologyPolicy::kClosed;
  f.source.hami_node_lock = hami_lock == "auto"   ? kube::HamiNodeLockMode::kAuto
                            : hami_lock == "true" ? kube::HamiNodeLockMode::kOn
                                                  : kube::HamiNodeLockMode::kOff;
  f.source.normal_events = pod_events == "all";
  f.extender.volcano_score_weight = static_cast<double>(volcano_weight);
  f.http.port = static_cast<std::uint16_t>(port);
  f.http.threads = threads > 0 ? static_cast<int>(threads)
                               : static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  f.extender.max_body_bytes = static_cast<std::size_t>(max_body);
  f.http.offload_threads = static_cast<int>(bind_concurrency);
  f.log_format = *metrics::ParseLogFormat(log_format);
  f.log_level = *metrics::ParseLogLevel(log_level);

  if (f.cluster.empty() == !f.kube) return flags.UsageError("give exactly one of --kube and --cluster DIR");
  // A local try stays on this machine unless asked otherwise; in a cluster the Service needs
  // every interface (the chart's NetworkPolicy limits who reaches it).
  if (!flags.Given(address_flag) && !f.cluster.empty()) f.http.address = "127.0.0.1";
  if (f.leader_elect &&
      !(f.lease.renew_deadline < f.lease.lease_duration && f.lease.retry_period < f.lease.renew_deadline)) {
    return flags.UsageError("leader election needs retry-period < renew-deadline < lease-duration");
  }
  if (f.http.tls.cert_file.empty() != f.http.tls.key_file.empty()) {
    return flags.UsageError("--tls-cert and --tls-key go together");
  }
  f.http.tls_enabled = !f.http.tls.cert_file.empty();
  if (!f.http.tls.client_ca_file.empty() && !f.http.tls_enabled) {
    return flags.UsageError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)");
  }
  f.extender.require_client_certificate = !f.http.tls.client_ca_file.empty();
  return std::nullopt;
}

// $POD_NAME (the downward API), else the host name, plus a random suffix: two processes must
// never share an identity, or both would think they hold the Lease.
std::string DefaultIdentity() {
  std::string base;
  if (const char* pod = std::getenv("POD_NAME"); pod != nullptr && *pod != '\0') {
    base = pod;
  } else {
    char host[256] = {};
    base = gethostname(host, sizeof host - 1) == 0 && host[0] != '\0' ? host : "toposched";
  }
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "_%08x", rd());
  return base + suffix;
}

void Fatal(const std::string& message) {
  metrics::Log(metrics::LogLevel::kError, {"startup", "", ""}, message);
}

}  // namespace

int RunServe(const std::vector<std::string>& args) {
  ServeFlags flags;
  if (const auto exit_code = ParseFlags(args, flags)) return *exit_code;
  metrics::ConfigureLogging(flags.log_format, flags.log_level);

  // Block the shutdown signals before any thread starts, so that only sigwait() below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const framework::Registry registry = plugins::BuiltinRegistry();
  framework::SchedulerConfig config = plugins::DefaultSchedulerConfig();
  if (!flags.config.empty()) {
    Result<std::string> yaml = ReadFileBounded(flags.config, framework::kMaxConfigYamlBytes);
    if (!yaml.ok()) return Fatal(yaml.error().WithContext(flags.config).message()), 1;
    Result<framework::SchedulerConfig> loaded = framework::LoadSchedulerConfigYaml(*yaml, registry);
    if (!loaded.ok()) return Fatal(flags.config + ": " + loaded.error().message()), 1;
    config = std::move(loaded).value();
  }
  flags.source.pool_label = config.request.pool_label;
  flags.source.rdma_resources = config.request.rdma_resources;
  flags.source.network = config.network;
  Result<framework::Framework> fw = framework::Framework::Create(config, registry);
  if (!fw.ok()) return Fatal("scheduler config: " + fw.error().message()), 1;

  metrics::Registry metrics;
  state::ClusterStore store(nullptr, extender::StoreOptionsFor(config));
  std::unique_ptr<state::FileSource> file_source;
  std::unique_ptr<kube::Transport> transport;
  std::unique_ptr<kube::Api> api, lease_api;
  std::unique_ptr<kube::LeaderElector> elector;
  std::unique_ptr<kube::KubeSource> kube_source;
  std::jthread elector_thread;
  if (flags.kube) {
    Result<kube::ClientConfig> client = flags.kubeconfig.empty()
                                            ? kube::InClusterConfig()
                                            : kube::LoadKubeconfig(flags.kubeconfig, flags.context);
    if (!client.ok()) return Fatal(client.error().message()), 1;
    Result<std::unique_ptr<kube::Transport>> t = kube::MakeRestTransport(*client);
    if (!t.ok()) return Fatal(t.error().message()), 1;
    transport = std::move(t).value();
    api = std::make_unique<kube::Api>(*transport);
    kube::LeaderOptions& lease = flags.lease;
    if (lease.lease_namespace.empty()) lease.lease_namespace = client->namespace_name;
    if (lease.identity.empty()) lease.identity = DefaultIdentity();
    flags.source.identity = lease.identity;
    if (flags.leader_elect) {
      // In a pod (the downward API sets both): followers report ready too and the leader labels
      // its pod toposched.io/leader=true, which the Service selects (docs/operations.md).
      const char* pod_namespace = std::getenv("POD_NAMESPACE");
      const char* pod_name = std::getenv("POD_NAME");
      if (pod_namespace != nullptr && *pod_namespace != '\0' && pod_name != nullptr && *pod_name != '\0') {
        flags.source.self_namespace = pod_namespace;
        flags.source.self_name = pod_name;
      }
      // The Lease gets its own Api: one attempt per renewal, bounded well inside the gap between
      // the renew deadline and the lease duration, so a hung API server cannot keep this replica
      // believing it leads after another one could have taken over.
      kube::ApiOptions lease_options;
      lease_options.max_attempts = 1;
      lease_options.request_timeout =
          std::max(std::chrono::milliseconds(500), (lease.lease_duration - lease.renew_deadline) / 2);
      lease_api = std::make_unique<kube::Api>(*transport, lease_options);
      elector = std::make_unique<kube::LeaderElector>(*lease_api, lease, [&kube_source](bool leading) {
        if (kube_source) kube_source->OnLeadership(leading);
      });
    }
    kube_source = std::make_unique<kube::KubeSource>(*api, store, metrics, flags.source, elector.get());
    store.SetPersistence(kube_source.get());
    kube_source->Start();
    if (elector) elector_thread = std::jthread([&elector](std::stop_token stop) { elector->Run(stop); });
    metrics::Log(metrics::LogLevel::kInfo, {"startup", "", ""},
                 "Kubernetes API " + client->server +
                     (elector ? ", leader election on Lease " + lease.lease_namespace + "/" +
                                    lease.lease_name + " as " + lease.identity
                              : ", no leader election") +
                     "; ready once synced");
  } else {
    Result<std::unique_ptr<state::FileSource>> source = state::FileSource::Open(flags.cluster);
    if (!source.ok()) return Fatal(source.error().message()), 1;
    file_source = std::move(source).value();
    store.SetPersistence(file_source.get());
    if (Status loaded = file_source->Load(store); !loaded.ok()) return Fatal(loaded.error().message()), 1;
    for (const std::string& w : file_source->warnings()) {
      metrics::Log(metrics::LogLevel::kWarn, {"startup", "", ""}, w);
    }
    metrics::Log(metrics::LogLevel::kInfo, {"startup", "", ""},
                 "cluster " + flags.cluster + ": " + std::to_string(store.snapshot()->size()) + " nodes, " +
                     std::to_string(store.pod_count()) + " pods with allocations");
  }

  extender::ExtenderService service(*fw, store, metrics, flags.extender, nullptr, kube_source.get());
  flags.http.body_limit = [&service](std::string_view target) { return service.BodyLimit(target); };
  flags.http.offload = [&service](std::string_view target) { return service.WaitsOnApi(target); };
  Result<std::unique_ptr<server::HttpServer>> http = server::HttpServer::Start(
      flags.http,
      [&service](const server::HttpRequest& req, server::HttpResponse& resp) { service.Handle(req, resp); });
  if (!http.ok()) return Fatal(http.error().message()), 1;
  server::HttpServer& srv = **http;

  auto& conn_open = metrics.AddGauge("toposched_http_open_connections", "Open HTTP connections.");
  auto& conn_total =
      metrics.AddCounter("toposched_http_connections_accepted_total", "HTTP connections accepted.");
  auto& conn_rejected = metrics.AddCounter("toposched_http_connections_rejected_total",
                                           "Connections closed at once: over the connection limit.");
  auto& http_errors = metrics.AddCounter("toposched_http_protocol_errors_total",
                                         "Requests answered by the HTTP layer itself, by kind.", {"kind"});
  service.SetScrapeHook([&] {
    if (kube_source) kube_source->RefreshMetrics();
    const server::ServerCounters c = srv.counters();
    conn_open.With({}).Set(static_cast<double>(c.open_connections));
    conn_total.With({}).Advance(c.connections_accepted);
    conn_rejected.With({}).Advance(c.connections_rejected);
    http_errors.With({"bad_request"}).Advance(c.bad_requests);
    http_errors.With({"body_too_large"}).Advance(c.body_too_large);
    http_errors.With({"timeout"}).Advance(c.timeouts);
    http_errors.With({"handler_exception"}).Advance(c.handler_exceptions);
    http_errors.With({"tls_reload_failure"}).Advance(c.tls_reload_failures);
    http_errors.With({"binds_over_concurrency"}).Advance(c.offload_rejected);
  });

  if (!flags.port_file.empty()) {
    std::ofstream pf(flags.port_file + ".tmp");
    pf << srv.port() << "\n";
    pf.close();
    if (!pf || std::rename((flags.port_file + ".tmp").c_str(), flags.port_file.c_str()) != 0) {
      Fatal("cannot write " + flags.port_file);
      srv.Shutdown(std::chrono::milliseconds(0));
      srv.Wait();
      return 1;
    }
  }
  // The file source has no API server in front of it: whoever reaches the port can bind.
  const bool loopback =
      flags.http.address == "127.0.0.1" || flags.http.address == "::1" || flags.http.address == "localhost";
  if (!flags.cluster.empty() && !loopback && !flags.extender.require_client_certificate) {
    metrics::Log(
        metrics::LogLevel::kWarn, {"startup", "", ""},
        "listening on " + flags.http.address +
            ": every host that reaches this port can call bind, which writes to " + flags.cluster +
            " unauthenticated (--address 127.0.0.1 keeps it local; --tls-client-ca requires a client "
            "certificate)");
  }
  metrics::Log(metrics::LogLevel::kInfo, {"startup", "", ""},
               std::string(flags.http.tls_enabled ? "serving https" : "serving http") + " on " +
                   flags.http.address + ":" + std::to_string(srv.port()) + " (kube " +
                   flags.extender.kube_prefix + ", volcano " + flags.extender.volcano_prefix + ", " +
                   std::to_string(flags.http.threads) + " threads, " +
                   std::to_string(flags.http.offload_threads) + " binds in flight)");

  int sig = 0;
  sigwait(&signals, &sig);
  metrics::Log(
      metrics::LogLevel::kInfo, {"shutdown", "", ""},
      std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + ": finishing in-flight requests");
  srv.Shutdown(flags.grace);
  srv.Wait();
  if (elector_thread.joinable()) {
    elector_thread.request_stop();  // gives the Lease up, so the other replica leads at once
    elector_thread.join();
  }
  if (kube_source) kube_source->Stop();
  metrics::Log(metrics::LogLevel::kInfo, {"shutdown", "", ""}, "stopped");
  return 0;
}

}  // namespace toposched::cmd
