#include "commands.h"
#include "flags.h"

namespace toposched::cmd {

void AddTopologyFlags(FlagSet& flags, TopologyArgs& out, const std::string& node_name_help) {
  flags.Group("topology source (neither --input nor --synthetic: this machine, by hwloc)");
  flags.Text("--input", out.input, "FILE",
             "hwloc XML (v1/v2), NCCL/RCCL topology XML or NodeTopology JSON;\n"
             "the format is detected from the content");
  flags.Text("--synthetic", out.synthetic, "PRESET",
             "a generated machine (see `toposched topo --list-synthetic`)");
  flags.Text("--node-name", out.node_name, "NAME", node_name_help);
  flags.Text("--sysfs-root", out.sysfs_root, "DIR",
             "host sysfs for live discovery (in a pod, the host's /sys mounted\nread-only)");
  flags.Text("--nvml-library", out.nvml_library, "PATH",
             "NVML library read for NVLink, GPU UUIDs and memory on a live node\n"
             "(default libnvidia-ml.so.1 from the host driver, or\n"
             "$TOPOSCHED_NVML_LIBRARY; \"none\" disables it)");
}

}  // namespace toposched::cmd

#include "toposched/agent/discovery.h"
#include "toposched/topology/synthetic.h"

namespace toposched::cmd {

std::string TopologyArgsUsageError(const TopologyArgs& args) {
  if (!args.input.empty() && !args.synthetic.empty()) return "--input and --synthetic are mutually exclusive";
  if (!args.synthetic.empty()) {
    if (auto spec = SyntheticPreset(args.synthetic); !spec.ok())
      return "--synthetic: " + spec.error().message();
  }
  return "";
}

Result<NodeTopology> ObtainTopology(const TopologyArgs& args, std::string* nvml_note) {
  if (!args.input.empty() && !args.synthetic.empty()) {
    return Error("--input and --synthetic are mutually exclusive");
  }
  Result<NodeTopology> topology = Error("no source");
  if (!args.input.empty()) {
    topology = LoadTopologyFile(args.input);
  } else if (!args.synthetic.empty()) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto spec, SyntheticPreset(args.synthetic));
    topology = GenerateSynthetic(spec);
  } else {
    DiscoveryOptions options;
    options.sysfs_root = args.sysfs_root;
    options.node_name = args.node_name;
    if (args.nvml_library == "none")
      options.nvml_library.clear();
    else if (!args.nvml_library.empty())
      options.nvml_library = args.nvml_library;
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
