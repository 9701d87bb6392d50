// `toposched serve`: the scheduler extender. Loads the scheduler config and the cluster state
// (the Kubernetes API with --kube, or a directory with --cluster), starts the HTTP server and
// serves until SIGTERM/SIGINT, then drains in-flight requests, gives up the Lease and exits 0.

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "plugins/registry.h"
#include "toposched/extender/service.h"
#include "toposched/framework/config.h"
#include "toposched/framework/framework.h"
#include "toposched/kube/api.h"
#include "toposched/kube/leader.h"
#include "toposched/kube/source.h"
#include "toposched/kube/transport.h"
#include "toposched/server/http_server.h"
#include "toposched/server/logging.h"
#include "toposched/server/metrics.h"
#include "toposched/state/cluster_state.h"

namespace toposched::cmd {
namespace {

constexpr const char* kServeHelp = R"(usage: toposched serve (--kube | --cluster DIR) [flags]

The scheduler extender: kube-scheduler's filter/prioritize/bind/preempt verbs and Volcano's
extender-plugin verbs over HTTP, with /healthz, /readyz and /metrics (docs/extender.md).

cluster state (one of):
  --kube                 the Kubernetes API server: in-cluster service account, or --kubeconfig
  --cluster DIR          file source: DIR/nodes/*.json node documents and the durable
                         DIR/allocations.journal (created if absent); binds append to it
Kubernetes (with --kube; docs/operations.md):
  --kubeconfig FILE      use this kubeconfig instead of the in-cluster service account
  --context NAME         kubeconfig context (default: current-context)
  --leader-elect BOOL    elect one leader among replicas with a Lease (default true)
  --lease-namespace NS   the Lease's namespace (default: the service account's namespace)
  --lease-name NAME      (default toposched-extender)
  --identity ID          this replica's name in the Lease (default: $POD_NAME, else hostname)
                         With $POD_NAMESPACE and $POD_NAME set, every synced replica is ready
                         and the leader labels its pod toposched.io/leader=true (the Service
                         selects it); without them only the leader is ready.
  --lease-duration DUR --renew-deadline DUR --retry-period DUR   (defaults 15s, 10s, 2s)
  --stale-topology-age DUR   a NodeTopology whose agent heartbeat is older is stale
                         (default 15m; 0 = never stale)
  --stale-topology-policy closed|open   stale: no new GPU pods there (closed, default), or
                         keep using the last topology (open)
  --hami-node-lock auto|true|false   take HAMi's node lock (hami.io/mutex.lock) when a bind
                         hands NVIDIA GPUs to HAMi's device plugin: auto (default) on nodes
                         that carry HAMi's registration annotation, true on every node
scheduling:
  --config FILE          scheduler config YAML (docs/configuration.md); default: every
                         built-in plugin with its default weight
  --reservation-ttl DUR  how long filter results wait for the pod's bind (default 120s)
  --volcano-score-weight W  multiplier of the 0..100 score in Volcano replies (default 1)
HTTP:
  --address ADDR         listen address (default 0.0.0.0)
  --port N               listen port (default 8888; 0 = any free port, see --port-file)
  --port-file FILE       write the bound port to FILE once listening
  --threads N            worker threads (default: the number of CPUs, at least 2)
  --kube-prefix PATH     kube-scheduler urlPrefix path (default /scheduler)
  --volcano-prefix PATH  Volcano extender.urlPrefix path (default /volcano)
  --max-body-bytes N     request body limit (default 16777216; onSessionOpen: 512 MiB)
  --read-timeout DUR     a request must arrive within this (default 10s)
  --idle-timeout DUR     idle keep-alive connections close after this (default 90s)
  --tls-cert FILE --tls-key FILE   serve HTTPS; the files are re-read when they change
  --tls-client-ca FILE   mutual TLS: every verb needs a client certificate signed by this CA
                         (kube-scheduler's tlsConfig certFile/keyFile); health and metrics
                         stay open. Not with Volcano, whose client sends no certificate
  --shutdown-grace DUR   on SIGTERM, how long in-flight requests may take (default 10s)
logging:
  --log-format text|json (default text)
  --log-level trace|debug|info|warn|error (default info)

Durations: 500ms, 30s, 2m.
)";

Result<std::chrono::milliseconds> ParseDuration(std::string_view flag, std::string_view s) {
  auto bad = [&] {
    return Error(std::string(flag) + " \"" + std::string(s) + "\": expected a duration like 500ms, 30s or 2m");
  };
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || n < 0) return bad();
  const std::string_view unit(end, static_cast<std::size_t>(s.data() + s.size() - end));
  std::int64_t ms = 0;
  if (unit == "ms") ms = n;
  else if (unit == "s") ms = n * 1000;
  else if (unit == "m") ms = n * 60'000;
  else return bad();
  if (n > 24LL * 3600 * 1000) return bad();
  return std::chrono::milliseconds(ms);
}

Result<long> ParseInt(std::string_view flag, std::string_view s, long lo, long hi) {
  long n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size() || n < lo || n > hi) {
    return Error(std::string(flag) + " \"" + std::string(s) + "\": expected an integer in " + std::to_string(lo) +
                 ".." + std::to_string(hi));
  }
  return n;
}

Result<std::string> ReadSmallFile(const std::string& path, std::size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error("cannot read " + path);
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > limit) return Error(path + ": larger than " + std::to_string(limit) + " bytes");
  }
  return text;
}

struct KubeFlags {
  bool enabled = false;
  std::string kubeconfig, context;
  bool leader_elect = true;
  kube::LeaderOptions lease;
  kube::KubeSourceOptions source;
};

Result<bool> ParseBool(std::string_view flag, std::string_view v) {
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return Error(std::string(flag) + " \"" + std::string(v) + "\": expected true or false");
}

struct ServeFlags {
  KubeFlags kube;
  std::string cluster, config, port_file;
  server::ServerOptions http;
  extender::ExtenderOptions extender;
  server::LogFormat log_format = server::LogFormat::kText;
  server::LogLevel log_level = server::LogLevel::kInfo;
  std::chrono::milliseconds grace{10'000};
};

// Returns 0 to go on, else the exit code (help 0 is signalled by setting `help`).
int ParseFlags(const std::vector<std::string>& args, ServeFlags& f, bool& help) {
  f.http.port = 8888;
  f.kube.source.stale_topology_age = std::chrono::minutes(15);
  f.http.threads = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      help = true;
      return 0;
    }
    if (a == "--kube") {
      f.kube.enabled = true;
      continue;
    }
    if (i + 1 >= args.size()) {
      std::fprintf(stderr, "toposched serve: %s: missing value or unknown flag\n%s", a.c_str(), kServeHelp);
      return 2;
    }
    const std::string& v = args[++i];
    auto fail = [&](const Error& e) {
      std::fprintf(stderr, "toposched serve: %s\n", e.message().c_str());
      return 2;
    };
    if (a == "--cluster") f.cluster = v;
    else if (a == "--kubeconfig") f.kube.kubeconfig = v;
    else if (a == "--context") f.kube.context = v;
    else if (a == "--lease-namespace") f.kube.lease.lease_namespace = v;
    else if (a == "--lease-name") f.kube.lease.lease_name = v;
    else if (a == "--identity") f.kube.lease.identity = v;
    else if (a == "--leader-elect") {
      auto b = ParseBool(a, v);
      if (!b.ok()) return fail(b.error());
      f.kube.leader_elect = *b;
    } else if (a == "--hami-node-lock") {
      if (v == "auto") {
        f.kube.source.hami_node_lock = kube::HamiNodeLockMode::kAuto;
      } else {
        auto b = ParseBool(a, v);
        if (!b.ok()) return fail(Error("--hami-node-lock \"" + v + "\": expected auto, true or false"));
        f.kube.source.hami_node_lock = *b ? kube::HamiNodeLockMode::kOn : kube::HamiNodeLockMode::kOff;
      }
    } else if (a == "--stale-topology-policy") {
      if (v == "closed") f.kube.source.stale_policy = kube::StaleTopologyPolicy::kClosed;
      else if (v == "open") f.kube.source.stale_policy = kube::StaleTopologyPolicy::kOpen;
      else return fail(Error("--stale-topology-policy \"" + v + "\": expected closed or open"));
    } else if (a == "--lease-duration" || a == "--renew-deadline" || a == "--retry-period" ||
               a == "--stale-topology-age") {
      auto d = ParseDuration(a, v);
      if (!d.ok()) return fail(d.error());
      if (a == "--lease-duration") f.kube.lease.lease_duration = *d;
      if (a == "--renew-deadline") f.kube.lease.renew_deadline = *d;
      if (a == "--retry-period") f.kube.lease.retry_period = *d;
      if (a == "--stale-topology-age") {
        f.kube.source.stale_topology_age = std::chrono::duration_cast<std::chrono::seconds>(*d);
      }
    }
    else if (a == "--config") f.config = v;
    else if (a == "--port-file") f.port_file = v;
    else if (a == "--address") f.http.address = v;
    else if (a == "--kube-prefix") f.extender.kube_prefix = v;
    else if (a == "--volcano-prefix") f.extender.volcano_prefix = v;
    else if (a == "--tls-cert") f.http.tls.cert_file = v;
    else if (a == "--tls-key") f.http.tls.key_file = v;
    else if (a == "--tls-client-ca") f.http.tls.client_ca_file = v;
    else if (a == "--port") {
      auto n = ParseInt(a, v, 0, 65535);
      if (!n.ok()) return fail(n.error());
      f.http.port = static_cast<std::uint16_t>(*n);
    } else if (a == "--threads") {
      auto n = ParseInt(a, v, 1, 256);
      if (!n.ok()) return fail(n.error());
      f.http.threads = static_cast<int>(*n);
    } else if (a == "--max-body-bytes") {
      auto n = ParseInt(a, v, 1024, 1L << 30);
      if (!n.ok()) return fail(n.error());
      f.extender.max_body_bytes = static_cast<std::size_t>(*n);
    } else if (a == "--volcano-score-weight") {
      auto n = ParseInt(a, v, 0, 1000);
      if (!n.ok()) return fail(n.error());
      f.extender.volcano_score_weight = static_cast<double>(*n);
    } else if (a == "--reservation-ttl" || a == "--read-timeout" || a == "--idle-timeout" ||
               a == "--shutdown-grace") {
      auto d = ParseDuration(a, v);
      if (!d.ok()) return fail(d.error());
      if (a == "--reservation-ttl") f.extender.reservation_ttl = *d;
      if (a == "--read-timeout") f.http.read_timeout = *d;
      if (a == "--idle-timeout") f.http.idle_timeout = *d;
      if (a == "--shutdown-grace") f.grace = *d;
    } else if (a == "--log-format") {
      auto lf = server::ParseLogFormat(v);
      if (!lf.ok()) return fail(lf.error());
      f.log_format = *lf;
    } else if (a == "--log-level") {
      auto ll = server::ParseLogLevel(v);
      if (!ll.ok()) return fail(ll.error());
      f.log_level = *ll;
    } else {
      std::fprintf(stderr, "toposched serve: unknown flag %s\n%s", a.c_str(), kServeHelp);
      return 2;
    }
  }
  if (f.cluster.empty() == !f.kube.enabled) {
    std::fprintf(stderr, "toposched serve: give exactly one of --kube and --cluster DIR\n%s", kServeHelp);
    return 2;
  }
  if (f.kube.leader_elect && !(f.kube.lease.renew_deadline < f.kube.lease.lease_duration &&
                               f.kube.lease.retry_period < f.kube.lease.renew_deadline)) {
    std::fprintf(stderr, "toposched serve: leader election needs retry-period < renew-deadline < lease-duration\n");
    return 2;
  }
  if (f.http.tls.cert_file.empty() != f.http.tls.key_file.empty()) {
    std::fprintf(stderr, "toposched serve: --tls-cert and --tls-key go together\n");
    return 2;
  }
  f.http.tls_enabled = !f.http.tls.cert_file.empty();
  if (!f.http.tls.client_ca_file.empty() && !f.http.tls_enabled) {
    std::fprintf(stderr, "toposched serve: --tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)\n");
    return 2;
  }
  f.extender.require_client_certificate = !f.http.tls.client_ca_file.empty();
  return 0;
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

void Fatal(const std::string& message) { server::Log(server::LogLevel::kError, {"startup", "", ""}, message); }

}  // namespace

int RunServe(const std::vector<std::string>& args) {
  ServeFlags flags;
  bool help = false;
  if (const int rc = ParseFlags(args, flags, help); rc != 0 || help) {
    if (help) std::fputs(kServeHelp, stdout);
    return rc;
  }
  server::ConfigureLogging(flags.log_format, flags.log_level);

  // Block the shutdown signals before any thread starts, so that only sigwait() below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const framework::Registry registry = plugins::BuiltinRegistry();
  framework::SchedulerConfig config = plugins::DefaultSchedulerConfig();
  if (!flags.config.empty()) {
    Result<std::string> yaml = ReadSmallFile(flags.config, framework::kMaxConfigYamlBytes);
    if (!yaml.ok()) return Fatal(yaml.error().message()), 1;
    Result<framework::SchedulerConfig> loaded = framework::LoadSchedulerConfigYaml(*yaml, registry);
    if (!loaded.ok()) return Fatal(flags.config + ": " + loaded.error().message()), 1;
    config = std::move(loaded).value();
  }
  flags.kube.source.pool_label = config.request.pool_label;
  flags.kube.source.rdma_resources = config.request.rdma_resources;
  flags.kube.source.network = config.network;
  Result<framework::Framework> fw = framework::Framework::Create(config, registry);
  if (!fw.ok()) return Fatal("scheduler config: " + fw.error().message()), 1;

  server::Registry metrics;
  state::ClusterStore store(nullptr, extender::StoreOptionsFor(config));
  std::unique_ptr<state::FileSource> file_source;
  std::unique_ptr<kube::Transport> transport;
  std::unique_ptr<kube::Api> api, lease_api;
  std::unique_ptr<kube::LeaderElector> elector;
  std::unique_ptr<kube::KubeSource> kube_source;
  std::jthread elector_thread;
  if (flags.kube.enabled) {
    Result<kube::ClientConfig> client = flags.kube.kubeconfig.empty()
                                            ? kube::InClusterConfig()
                                            : kube::LoadKubeconfig(flags.kube.kubeconfig, flags.kube.context);
    if (!client.ok()) return Fatal(client.error().message()), 1;
    Result<std::unique_ptr<kube::Transport>> t = kube::MakeRestTransport(*client);
    if (!t.ok()) return Fatal(t.error().message()), 1;
    transport = std::move(t).value();
    api = std::make_unique<kube::Api>(*transport);
    kube::LeaderOptions& lease = flags.kube.lease;
    if (lease.lease_namespace.empty()) lease.lease_namespace = client->namespace_name;
    if (lease.identity.empty()) lease.identity = DefaultIdentity();
    flags.kube.source.identity = lease.identity;
    if (flags.kube.leader_elect) {
      // In a pod (the downward API sets both): followers report ready too and the leader labels
      // its pod toposched.io/leader=true, which the Service selects (docs/operations.md).
      const char* pod_namespace = std::getenv("POD_NAMESPACE");
      const char* pod_name = std::getenv("POD_NAME");
      if (pod_namespace != nullptr && *pod_namespace != '\0' && pod_name != nullptr && *pod_name != '\0') {
        flags.kube.source.self_namespace = pod_namespace;
        flags.kube.source.self_name = pod_name;
      }
      // The Lease gets its own Api: one attempt per renewal, bounded well inside the gap between
      // the renew deadline and the lease duration, so a hung API server cannot keep this replica
      // believing it leads after another one could have taken over.
      kube::ApiOptions lease_options;
      lease_options.max_attempts = 1;
      lease_options.request_timeout = std::max(std::chrono::milliseconds(500),
                                               (lease.lease_duration - lease.renew_deadline) / 2);
      lease_api = std::make_unique<kube::Api>(*transport, lease_options);
      elector = std::make_unique<kube::LeaderElector>(*lease_api, lease, [&kube_source](bool leading) {
        if (kube_source) kube_source->OnLeadership(leading);
      });
    }
    kube_source = std::make_unique<kube::KubeSource>(*api, store, metrics, flags.kube.source, elector.get());
    store.SetPersistence(kube_source.get());
    kube_source->Start();
    if (elector) elector_thread = std::jthread([&elector](std::stop_token stop) { elector->Run(stop); });
    server::Log(server::LogLevel::kInfo, {"startup", "", ""},
                "Kubernetes API " + client->server + (elector ? ", leader election on Lease " + lease.lease_namespace +
                                                                 "/" + lease.lease_name + " as " + lease.identity
                                                           : ", no leader election") +
                    "; ready once synced");
  } else {
    Result<std::unique_ptr<state::FileSource>> source = state::FileSource::Open(flags.cluster);
    if (!source.ok()) return Fatal(source.error().message()), 1;
    file_source = std::move(source).value();
    store.SetPersistence(file_source.get());
    if (Status loaded = file_source->Load(store); !loaded.ok()) return Fatal(loaded.error().message()), 1;
    for (const std::string& w : file_source->warnings()) {
      server::Log(server::LogLevel::kWarn, {"startup", "", ""}, w);
    }
    server::Log(server::LogLevel::kInfo, {"startup", "", ""},
                "cluster " + flags.cluster + ": " + std::to_string(store.snapshot()->size()) + " nodes, " +
                    std::to_string(store.pod_count()) + " pods with allocations");
  }

  extender::ExtenderService service(*fw, store, metrics, flags.extender, nullptr, kube_source.get());
  flags.http.body_limit = [&service](std::string_view target) { return service.BodyLimit(target); };
  Result<std::unique_ptr<server::HttpServer>> http = server::HttpServer::Start(
      flags.http, [&service](const server::HttpRequest& req, server::HttpResponse& resp) { service.Handle(req, resp); });
  if (!http.ok()) return Fatal(http.error().message()), 1;
  server::HttpServer& srv = **http;

  auto& conn_open = metrics.AddGauge("toposched_http_open_connections", "Open HTTP connections.");
  auto& conn_total = metrics.AddCounter("toposched_http_connections_accepted_total", "HTTP connections accepted.");
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
  server::Log(server::LogLevel::kInfo, {"startup", "", ""},
              std::string(flags.http.tls_enabled ? "serving https" : "serving http") + " on " + flags.http.address +
                  ":" + std::to_string(srv.port()) + " (kube " + flags.extender.kube_prefix + ", volcano " +
                  flags.extender.volcano_prefix + ", " + std::to_string(flags.http.threads) + " threads)");

  int sig = 0;
  sigwait(&signals, &sig);
  server::Log(server::LogLevel::kInfo, {"shutdown", "", ""},
              std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                  ": finishing in-flight requests");
  srv.Shutdown(flags.grace);
  srv.Wait();
  if (elector_thread.joinable()) {
    elector_thread.request_stop();  // gives the Lease up, so the other replica leads at once
    elector_thread.join();
  }
  if (kube_source) kube_source->Stop();
  server::Log(server::LogLevel::kInfo, {"shutdown", "", ""}, "stopped");
  return 0;
}

}  // namespace toposched::cmd
