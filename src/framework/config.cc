#include "toposched/framework/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace toposched::framework {
namespace {

// Errors name the key path and, where yaml-cpp knows it, the line.
std::string At(const std::string& path, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return path;
  return path + " (line " + std::to_string(mark.line + 1) + ")";
}

std::string Join(std::initializer_list<std::string_view> names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// `node` must be a map whose keys are distinct scalars from `known`.
Status CheckMap(const YAML::Node& node, const std::string& path,
                std::initializer_list<std::string_view> known) {
  if (!node.IsMap()) {
    return Error(At(path.empty() ? "document" : path, node) + ": expected a map with keys " + Join(known));
  }
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) return Error(At(path, it->first) + ": keys must be plain strings");
    const std::string key = it->first.Scalar();
    const std::string key_path = path.empty() ? key : path + "." + key;
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return Error(At(key_path, it->first) + ": unknown key (known: " + Join(known) + ")");
    }
    if (!seen.insert(key).second) return Error(At(key_path, it->first) + ": duplicate key");
  }
  return Status::Ok();
}

Result<std::string> ParseString(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) return Error(At(path, node) + ": expected a string");
  if (node.Scalar().empty()) return Error(At(path, node) + ": must not be empty");
  return node.Scalar();
}

Result<int> ParseInt(const YAML::Node& node, const std::string& path, int lo, int hi) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  if (!node.IsScalar()) return Error(At(path, node) + ": expected an integer in " + range);
  const std::string& s = node.Scalar();
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) {
    return Error(At(path, node) + ": expected an integer in " + range + ", got \"" + s + "\"");
  }
  if (value < lo || value > hi) {
    return Error(At(path, node) + ": " + s + " is out of range " + range);
  }
  return value;
}

// A finite decimal number; range checks are pd::Validate's, which names the same key path.
Result<double> ParseDouble(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) return Error(At(path, node) + ": expected a number");
  const std::string& s = node.Scalar();
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty() || !std::isfinite(value)) {
    return Error(At(path, node) + ": expected a number, got \"" + s + "\"");
  }
  return value;
}

Result<bool> ParseBool(const YAML::Node& node, const std::string& path) {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    return Error(At(path, node) + ": expected true or false");
  }
  return value;
}

Result<PackPolicy> ParsePolicy(const YAML::Node& node, const std::string& path) {
  TOPOSCHED_ASSIGN_OR_RETURN(const std::string name, ParseString(node, path));
  if (name == "binpack") return PackPolicy::kBinpack;
  if (name == "spread") return PackPolicy::kSpread;
  return Error(At(path, node) + ": \"" + name + "\" is not a policy (binpack, spread)");
}

class ConfigParser {
 public:
  explicit ConfigParser(const Registry& registry) : registry_(registry) {}

  Result<SchedulerConfig> Parse(const YAML::Node& root) {
    SchedulerConfig config = DefaultSchedulerConfig(registry_);
    if (root.IsNull()) return config;  // an empty document: every default
    if (Status s = CheckMap(root, "", {"plugins", "engine", "request", "network", "capacity"}); !s.ok()) {
      return s.error().WithContext("config");
    }
    if (const YAML::Node plugins = root["plugins"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(config.plugins, ParsePlugins(plugins));
    }
    if (const YAML::Node engine = root["engine"]) {
      TOPOSCHED_RETURN_IF_ERROR(ParseEngine(engine, config.engine));
    }
    if (const YAML::Node request = root["request"]) {
      TOPOSCHED_RETURN_IF_ERROR(ParseRequest(request, config.request));
    }
    if (const YAML::Node network = root["network"]) {
      TOPOSCHED_RETURN_IF_ERROR(ParseNetwork(network, config.network));
    }
    if (const YAML::Node capacity = root["capacity"]) {
      TOPOSCHED_RETURN_IF_ERROR(ParseCapacity(capacity, config.capacity));
    }
    // Tiers named in plugin args against the network tiers (the defaults when not given).
    for (std::size_t i = 0; i < config.plugins.size(); ++i) {
      const PluginConfig& plugin = config.plugins[i];
      // Create does not fail here: ParsePlugins built the same plugin from the same args.
      TOPOSCHED_ASSIGN_OR_RETURN(const std::unique_ptr<Plugin> built,
                                 registry_.Create(plugin.name, plugin.args));
      if (Status s = built->CheckNetwork(config.network); !s.ok()) {
        return s.error().WithContext("plugins[" + std::to_string(i) + "].args");
      }
    }
    return config;
  }

 private:
  Result<std::vector<PluginConfig>> ParsePlugins(const YAML::Node& node) {
    if (!node.IsSequence()) return Error(At("plugins", node) + ": expected a list of {name, weight, args}");
    if (node.size() == 0) {
      return Error(At("plugins", node) + ": an empty list enables nothing; omit the key for the defaults");
    }
    std::vector<PluginConfig> plugins;
    for (std::size_t i = 0; i < node.size(); ++i) {
      const std::string path = "plugins[" + std::to_string(i) + "]";
      const YAML::Node entry = node[i];
      TOPOSCHED_RETURN_IF_ERROR(CheckMap(entry, path, {"name", "weight", "args"}));
      const YAML::Node name_node = entry["name"];
      if (!name_node) return Error(At(path, entry) + ": missing key \"name\"");
      TOPOSCHED_ASSIGN_OR_RETURN(const std::string name, ParseString(name_node, path + ".name"));
      if (!registry_.Contains(name)) {
        std::string known;
        for (const std::string& n : registry_.Names()) known += (known.empty() ? "" : ", ") + n;
        return Error(At(path + ".name", name_node) + ": unknown plugin \"" + name + "\" (known: " + known +
                     ")");
      }
      for (std::size_t j = 0; j < plugins.size(); ++j) {
        if (plugins[j].name == name) {
          return Error(At(path + ".name", name_node) + ": " + name + " is listed twice (first at plugins[" +
                       std::to_string(j) + "])");
        }
      }
      PluginConfig plugin;
      plugin.name = name;
      plugin.weight = registry_.DefaultWeight(name);
      if (const YAML::Node weight = entry["weight"]) {
        TOPOSCHED_ASSIGN_OR_RETURN(plugin.weight, ParseInt(weight, path + ".weight", 0, kMaxPluginWeight));
      }
      if (const YAML::Node args = entry["args"]) {
        TOPOSCHED_ASSIGN_OR_RETURN(plugin.args, ParseArgs(args, path + ".args"));
      }
      // Build the plugin once so that bad args stop the start, with the path.
      if (Result<std::unique_ptr<Plugin>> built = registry_.Create(plugin.name, plugin.args); !built.ok()) {
        return built.error().WithContext(path + ".args");
      }
      plugins.push_back(std::move(plugin));
    }
    return plugins;
  }

  Result<PluginArgs> ParseArgs(const YAML::Node& node, const std::string& path) {
    if (!node.IsMap()) return Error(At(path, node) + ": expected a map of string keys to string values");
    PluginArgs args;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar()) return Error(At(path, it->first) + ": keys must be plain strings");
      const std::string key = it->first.Scalar();
      const std::string key_path = path + "." + key;
      if (!it->second.IsScalar()) return Error(At(key_path, it->second) + ": expected a string value");
      if (!args.emplace(key, it->second.Scalar()).second)
        return Error(At(key_path, it->first) + ": duplicate key");
    }
    return args;
  }

  Status ParseCapacity(const YAML::Node& node, CapacityConfig& capacity) {
    TOPOSCHED_RETURN_IF_ERROR(
        CheckMap(node, "capacity", {"plugin", "band", "rareClassLast", "evenRemnants", "minTypicalPods"}));
    if (const YAML::Node plugin = node["plugin"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(const std::string name, ParseString(plugin, "capacity.plugin"));
      if (name == "none") {
        capacity.plugin.clear();
      } else {
        Result<std::unique_ptr<Plugin>> built = registry_.Create(name, {});
        if (!built.ok()) return Error(At("capacity.plugin", plugin) + ": " + built.error().message());
        if (dynamic_cast<const ScorePlugin*>(built->get()) == nullptr) {
          return Error(At("capacity.plugin", plugin) + ": " + name + " has no Score");
        }
        capacity.plugin = name;
      }
    }
    if (const YAML::Node band = node["band"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(capacity.band, ParseInt(band, "capacity.band", 0, kMaxScore));
    }
    if (const YAML::Node flag = node["rareClassLast"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(capacity.rare_class_last, ParseBool(flag, "capacity.rareClassLast"));
    }
    if (const YAML::Node flag = node["evenRemnants"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(capacity.even_remnants, ParseBool(flag, "capacity.evenRemnants"));
    }
    if (const YAML::Node min = node["minTypicalPods"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(capacity.min_typical_pods,
                                 ParseInt(min, "capacity.minTypicalPods", 1, kMaxMinTypicalPods));
    }
    return Status::Ok();
  }

  Status ParseEngine(const YAML::Node& node, EngineOptions& engine) {
    TOPOSCHED_RETURN_IF_ERROR(CheckMap(node, "engine", {"defaultGpuPolicy", "maxSharesPerGpu"}));
    if (const YAML::Node policy = node["defaultGpuPolicy"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(engine.default_gpu_policy, ParsePolicy(policy, "engine.defaultGpuPolicy"));
    }
    if (const YAML::Node shares = node["maxSharesPerGpu"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(engine.max_shares_per_gpu,
                                 ParseInt(shares, "engine.maxSharesPerGpu", 1, kMaxSharesPerGpuLimit));
    }
    return Status::Ok();
  }

  Status ParseRequest(const YAML::Node& node, RequestConfig& request) {
    TOPOSCHED_RETURN_IF_ERROR(CheckMap(node, "request", {"rdmaResources", "poolLabel"}));
    if (const YAML::Node resources = node["rdmaResources"]) {
      if (!resources.IsSequence()) return Error(At("request.rdmaResources", resources) + ": expected a list");
      request.rdma_resources.clear();
      for (std::size_t i = 0; i < resources.size(); ++i) {
        const std::string path = "request.rdmaResources[" + std::to_string(i) + "]";
        TOPOSCHED_ASSIGN_OR_RETURN(std::string name, ParseString(resources[i], path));
        // Extended resources are always "domain/name"; a bare word would never match.
        if (name.find('/') == std::string::npos) {
          return Error(At(path, resources[i]) + ": \"" + name +
                       "\" is not an extended resource name or a prefix ending in '/'");
        }
        request.rdma_resources.push_back(std::move(name));
      }
    }
    if (const YAML::Node label = node["poolLabel"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(std::string key, ParseString(label, "request.poolLabel"));
      if (key.find_first_of(" \t\n") != std::string::npos) {
        return Error(At("request.poolLabel", label) + ": a label key has no whitespace");
      }
      request.pool_label = std::move(key);
    }
    return Status::Ok();
  }

  // The schema is NetworkConfig's comment in toposched/pd/network.h. Keys given override the
  // defaults one by one (a path kind's bandwidth alone keeps its latency); `tiers` replaces the
  // whole list. Ranges are checked once, by pd::Validate, after everything is read.
  Status ParseNetwork(const YAML::Node& node, pd::NetworkConfig& network) {
    TOPOSCHED_RETURN_IF_ERROR(CheckMap(
        node, "network", {"tiers", "hyperNodes", "sameNodeIpc", "paths", "alignment", "transferOverheadUs"}));
    if (const YAML::Node tiers = node["tiers"]) {
      if (!tiers.IsSequence())
        return Error(At("network.tiers", tiers) + ": expected a list of {label, path}");
      network.tiers.clear();
      for (std::size_t i = 0; i < tiers.size(); ++i) {
        const std::string path = "network.tiers[" + std::to_string(i) + "]";
        const YAML::Node entry = tiers[i];
        TOPOSCHED_RETURN_IF_ERROR(CheckMap(entry, path, {"label", "path"}));
        for (const char* key : {"label", "path"}) {
          if (!entry[key]) return Error(At(path, entry) + ": missing key \"" + key + "\"");
        }
        TOPOSCHED_ASSIGN_OR_RETURN(std::string label, ParseString(entry["label"], path + ".label"));
        TOPOSCHED_ASSIGN_OR_RETURN(const std::string kind, ParseString(entry["path"], path + ".path"));
        const std::optional<pd::PathKind> parsed = pd::ParsePathKind(kind);
        if (!parsed) {
          return Error(At(path + ".path", entry["path"]) + ": \"" + kind +
                       "\" is not a tier path (nvlink-domain, leaf, spine, zone)");
        }
        network.tiers.push_back(pd::Tier{std::move(label), *parsed});
      }
    }
    if (const YAML::Node flag = node["hyperNodes"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(network.hyper_nodes, ParseBool(flag, "network.hyperNodes"));
    }
    if (const YAML::Node flag = node["sameNodeIpc"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(network.same_node_ipc, ParseBool(flag, "network.sameNodeIpc"));
    }
    if (const YAML::Node paths = node["paths"]) {
      TOPOSCHED_RETURN_IF_ERROR(
          CheckMap(paths, "network.paths",
                   {"same-node-ipc", "same-node-rdma", "nvlink-domain", "leaf", "spine", "zone", "beyond"}));
      for (auto it = paths.begin(); it != paths.end(); ++it) {
        const std::string path = "network.paths." + it->first.Scalar();
        const YAML::Node cost = it->second;
        TOPOSCHED_RETURN_IF_ERROR(CheckMap(cost, path, {"bandwidthGBps", "latencyUs"}));
        pd::PathCost& out = network.paths[static_cast<std::size_t>(*pd::ParsePathKind(it->first.Scalar()))];
        if (const YAML::Node v = cost["bandwidthGBps"]) {
          TOPOSCHED_ASSIGN_OR_RETURN(out.bandwidth_gbps, ParseDouble(v, path + ".bandwidthGBps"));
        }
        if (const YAML::Node v = cost["latencyUs"]) {
          TOPOSCHED_ASSIGN_OR_RETURN(out.latency_us, ParseDouble(v, path + ".latencyUs"));
        }
      }
    }
    if (const YAML::Node alignment = node["alignment"]) {
      TOPOSCHED_RETURN_IF_ERROR(
          CheckMap(alignment, "network.alignment", {"PIX", "PXB", "PHB", "NODE", "SYS"}));
      const std::pair<const char*, double*> factors[] = {{"PIX", &network.alignment.pix},
                                                         {"PXB", &network.alignment.pxb},
                                                         {"PHB", &network.alignment.phb},
                                                         {"NODE", &network.alignment.node},
                                                         {"SYS", &network.alignment.sys}};
      for (const auto& [key, field] : factors) {
        if (const YAML::Node v = alignment[key]) {
          TOPOSCHED_ASSIGN_OR_RETURN(*field, ParseDouble(v, std::string("network.alignment.") + key));
        }
      }
    }
    if (const YAML::Node overhead = node["transferOverheadUs"]) {
      TOPOSCHED_ASSIGN_OR_RETURN(network.transfer_overhead_us,
                                 ParseDouble(overhead, "network.transferOverheadUs"));
    }
    return pd::Validate(network);
  }

  const Registry& registry_;
};

}  // namespace

SchedulerConfig DefaultSchedulerConfig(const Registry& registry) {
  SchedulerConfig config;
  for (const std::string& name : registry.Names()) {
    config.plugins.push_back(PluginConfig{name, registry.DefaultWeight(name), {}});
  }
  return config;
}

Result<SchedulerConfig> LoadSchedulerConfigYaml(std::string_view yaml, const Registry& registry) {
  if (yaml.size() > kMaxConfigYamlBytes) {
    return Error("config: " + std::to_string(yaml.size()) + " bytes is over the limit of " +
                 std::to_string(kMaxConfigYamlBytes));
  }
  // yaml-cpp reports through exceptions; they stop here.
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    return ConfigParser(registry).Parse(root);
  } catch (const YAML::Exception& e) {
    const std::string where = e.mark.line >= 0 ? " at line " + std::to_string(e.mark.line + 1) : "";
    return Error("config: malformed YAML" + where + ": " + e.msg);
  }
}

}  // namespace toposched::framework
