#include "commands.h"

namespace toposched::cmd {

bool ParseTopologyFlag(const std::vector<std::string>& args, std::size_t& i, TopologyArgs& out,
                       std::string* error) {
  const std::string& flag = args[i];
  std::string* target = nullptr;
  if (flag == "--input") target = &out.input;
  else if (flag == "--synthetic") target = &out.synthetic;
  else if (flag == "--node-name") target = &out.node_name;
  else if (flag == "--sysfs-root") target = &out.sysfs_root;
  else if (flag == "--nvml-library") target = &out.nvml_library;
  if (target == nullptr) return false;
  if (i + 1 >= args.size() || args[i + 1].empty()) {
    *error = flag + " needs a value";
    return true;
  }
  *target = args[++i];
  return true;
}

}  // namespace toposched::cmd

#include "toposched/agent/discovery.h"
#include "toposched/topology/synthetic.h"

namespace toposched::cmd {

Result<NodeTopology> ObtainTopology(const TopologyArgs& args, std::string* nvml_note) {
  if (!args.input.empty() && !args.synthetic.empty()) {
    return Error("--input and --synthetic are mutually exclusive");
  }
  Result<NodeTopology> topology = Error("no source");
  if (!args.input.empty()) {
    topology = LoadTopologyFile(args.input);
  } else if (!args.synthetic.empty()) {
    auto spec = SyntheticPreset(args.synthetic);
    if (!spec.ok()) return spec.error();
    topology = GenerateSynthetic(*spec);
  } else {
    DiscoveryOptions options;
    options.sysfs_root = args.sysfs_root;
    options.node_name = args.node_name;
    if (args.nvml_library == "none") options.nvml_library.clear();
    else if (!args.nvml_library.empty()) options.nvml_library = args.nvml_library;
    options.nvml_note = nvml_note;
    topology = DiscoverLive(options);
  }
  if (topology.ok()) {
    if (!args.node_name.empty()) topology->node_name = args.node_name;
    topology->agent_version = TOPOSCHED_VERSION;
  }
  return topology;
}

}  // namespace toposched::cmd
