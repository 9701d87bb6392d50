// The example scheduler configurations in deploy/ must be valid for their schedulers (the rules
// kube-scheduler's validateExtenders and Volcano's parseExtenderConfig apply) and must name
// routes this server actually serves.

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <regex>
#include <set>
#include <string>

#include "plugins/registry.h"
#include "toposched/extender/service.h"
#include "toposched/framework/framework.h"

namespace toposched::extender {
namespace {

const std::string kDeploy = std::string(TOPOSCHED_SOURCE_DIR) + "/deploy/";

// The path part of a URL ("http://h:8888/scheduler" -> "/scheduler").
std::string UrlPath(const std::string& url) {
  const std::size_t scheme = url.find("://");
  const std::size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  return slash == std::string::npos ? "" : url.substr(slash);
}

// Go's time.ParseDuration for the forms configs use ("5s", "500ms", "1m").
bool IsGoDuration(const std::string& s) {
  return std::regex_match(s, std::regex(R"(([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)"));
}

class Routes {
 public:
  Routes()
      : framework_(framework::Framework::Create(plugins::DefaultSchedulerConfig(), plugins::BuiltinRegistry())
                       .value()),
        store_(nullptr),
        service_(framework_, store_, metrics_, ExtenderOptions{}) {}
  // Served = anything but 404 for a POST of an empty object.
  bool Serves(const std::string& path) {
    server::HttpRequest rq;
    rq.method = "POST";
    rq.target = path;
    rq.content_type = "application/json";
    rq.body = "{}";
    server::HttpResponse rs;
    service_.Handle(rq, rs);
    return rs.status != 404;
  }

 private:
  framework::Framework framework_;
  state::ClusterStore store_;
  metrics::Registry metrics_;
  ExtenderService service_;
};

TEST(DeployConfig, KubeSchedulerExtenderEntryIsValidAndMatchesOurRoutes) {
  const YAML::Node doc = YAML::LoadFile(kDeploy + "kube-scheduler/scheduler-config.yaml");
  EXPECT_EQ(doc["apiVersion"].as<std::string>(), "kubescheduler.config.k8s.io/v1");
  EXPECT_EQ(doc["kind"].as<std::string>(), "KubeSchedulerConfiguration");
  const YAML::Node extenders = doc["extenders"];
  ASSERT_TRUE(extenders.IsSequence());
  ASSERT_EQ(extenders.size(), 2u);  // the devices' entry, and the CPU-only pods' (scoreCpuPods)
  const YAML::Node e = extenders[0];
  const std::set<std::string> known = {
      "urlPrefix",   "filterVerb", "preemptVerb", "prioritizeVerb",   "bindVerb",         "weight",
      "enableHTTPS", "tlsConfig",  "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"};
  for (const auto& kv : e) EXPECT_TRUE(known.count(kv.first.as<std::string>())) << kv.first.as<std::string>();
  const std::string prefix = UrlPath(e["urlPrefix"].as<std::string>());
  EXPECT_EQ(prefix, ExtenderOptions{}.kube_prefix);
  Routes routes;
  for (const char* verb : {"filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb"}) {
    ASSERT_TRUE(e[verb]) << verb;
    EXPECT_TRUE(routes.Serves(prefix + "/" + e[verb].as<std::string>())) << verb;
  }
  EXPECT_GT(e["weight"].as<long>(), 0);  // required with prioritizeVerb
  EXPECT_TRUE(e["nodeCacheCapable"].as<bool>());
  EXPECT_TRUE(IsGoDuration(e["httpTimeout"].as<std::string>()));
  EXPECT_FALSE(e["ignorable"].as<bool>());  // a binder must not be ignorable
  std::set<std::string> names;
  for (const YAML::Node& r : e["managedResources"]) {
    const std::string name = r["name"].as<std::string>();
    // An extended resource name (IsExtendedResourceName in kubernetes pkg/apis/core/helper):
    // "prefix/name" with a DNS-subdomain prefix, a qualified name, and not kubernetes.io's.
    EXPECT_TRUE(std::regex_match(
        name,
        std::regex(
            R"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)")))
        << name;
    EXPECT_EQ(name.find("kubernetes.io/"), std::string::npos) << name;
    EXPECT_TRUE(names.insert(name).second) << "duplicate " << name;
    (void)r["ignoredByScheduler"].as<bool>();
  }
  EXPECT_TRUE(names.count("nvidia.com/gpu"));

  // The second entry: every pod reaches it (no managedResources), it only scores, and it may be
  // ignored (validateExtenders allows one binder; a prioritize error only drops its scores).
  const YAML::Node cpu = extenders[1];
  for (const auto& kv : cpu)
    EXPECT_TRUE(known.count(kv.first.as<std::string>())) << kv.first.as<std::string>();
  EXPECT_EQ(UrlPath(cpu["urlPrefix"].as<std::string>()), prefix);
  ASSERT_TRUE(cpu["prioritizeVerb"]);
  EXPECT_EQ(cpu["prioritizeVerb"].as<std::string>(), "prioritize-cpu");
  EXPECT_TRUE(routes.Serves(prefix + "/" + cpu["prioritizeVerb"].as<std::string>()));
  for (const char* absent : {"filterVerb", "preemptVerb", "bindVerb", "managedResources"}) {
    EXPECT_FALSE(cpu[absent]) << absent;
  }
  EXPECT_GT(cpu["weight"].as<long>(), 0);
  EXPECT_TRUE(cpu["ignorable"].as<bool>());
  EXPECT_TRUE(cpu["nodeCacheCapable"].as<bool>());
  EXPECT_EQ(cpu["tlsConfig"].IsDefined(), e["tlsConfig"].IsDefined());
}

TEST(DeployConfig, VolcanoExtenderPluginArgumentsAreValidAndMatchOurRoutes) {
  const YAML::Node doc = YAML::LoadFile(kDeploy + "volcano/volcano-scheduler.conf");
  YAML::Node args;
  for (const YAML::Node& tier : doc["tiers"]) {
    for (const YAML::Node& plugin : tier["plugins"]) {
      if (plugin["name"].as<std::string>() == "extender") args = plugin["arguments"];
    }
  }
  ASSERT_TRUE(args.IsMap()) << "no extender plugin in any tier";
  // parseExtenderConfig's keys (volcano-sh/volcano pkg/scheduler/plugins/extender/extender.go).
  const std::set<std::string> known = {
      "extender.urlPrefix",          "extender.httpTimeout",     "extender.onSessionOpenVerb",
      "extender.onSessionCloseVerb", "extender.predicateVerb",   "extender.prioritizeVerb",
      "extender.preemptableVerb",    "extender.reclaimableVerb", "extender.queueOverusedVerb",
      "extender.jobEnqueueableVerb", "extender.jobReadyVerb",    "extender.allocateFuncVerb",
      "extender.deallocateFuncVerb", "extender.ignorable",       "extender.managedResources"};
  const std::string prefix = UrlPath(args["extender.urlPrefix"].as<std::string>());
  EXPECT_EQ(prefix, ExtenderOptions{}.volcano_prefix);
  Routes routes;
  for (const auto& kv : args) {
    const std::string key = kv.first.as<std::string>();
    EXPECT_TRUE(known.count(key)) << key;
    if (key.ends_with("Verb")) {
      EXPECT_TRUE(routes.Serves(prefix + "/" + kv.second.as<std::string>())) << key;
    }
  }
  EXPECT_TRUE(IsGoDuration(args["extender.httpTimeout"].as<std::string>()));
  EXPECT_FALSE(args["extender.ignorable"].as<bool>());
  EXPECT_TRUE(args["extender.managedResources"].IsSequence());
}

}  // namespace
}  // namespace toposched::extender
