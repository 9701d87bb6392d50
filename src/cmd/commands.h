#pragma once
// Subcommands of the `toposched` binary. Each takes its arguments (after the subcommand name)
// and returns the process exit code: 0 success, 1 failure (message on stderr), 2 usage error.

#include <string>
#include <vector>

namespace toposched::cmd {

int RunTopo(const std::vector<std::string>& args);
int RunAgent(const std::vector<std::string>& args);
int RunPlace(const std::vector<std::string>& args);
int RunSimulate(const std::vector<std::string>& args);
int RunServe(const std::vector<std::string>& args);
int RunAdvise(const std::vector<std::string>& args);

// Where a topology comes from on the command line: --input FILE, --synthetic PRESET, or the
// live machine. Shared by topo and agent.
struct TopologyArgs {
  std::string input;
  std::string synthetic;
  std::string node_name;
  std::string sysfs_root = "/sys";
  // --nvml-library: empty when not given (DiscoveryOptions' default and TOPOSCHED_NVML_LIBRARY
  // apply); "none" disables NVML.
  std::string nvml_library;
};

// Parses the flag at args[i] if it is one of TopologyArgs' flags, advancing i past its value.
// Returns false if args[i] is not such a flag; sets *error when its value is missing.
bool ParseTopologyFlag(const std::vector<std::string>& args, std::size_t& i, TopologyArgs& out,
                       std::string* error);

}  // namespace toposched::cmd

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched::cmd {

// The topology TopologyArgs names: a file, a synthetic preset, or the live machine. Rejects
// --input together with --synthetic. --node-name overrides the node name of any source. For
// live discovery, `nvml_note` (when set) receives what NVML contributed (DiscoveryOptions).
Result<NodeTopology> ObtainTopology(const TopologyArgs& args, std::string* nvml_note = nullptr);

inline constexpr const char* kTopologyFlagsHelp =
    "  --input FILE        hwloc XML (v1/v2), NCCL/RCCL topology XML or NodeTopology JSON;\n"
    "                      the format is detected from the content\n"
    "  --synthetic PRESET  a generated machine (see `toposched topo --list-synthetic`)\n"
    "  --node-name NAME    node name to record (default: from the source, else the host name)\n"
    "  --sysfs-root DIR    host sysfs for live discovery (default /sys; in a pod, the host's /sys\n"
    "                      mounted read-only)\n"
    "  --nvml-library PATH NVML library read for NVLink, GPU UUIDs and memory on a live node\n"
    "                      (default libnvidia-ml.so.1 from the host driver, or\n"
    "                      $TOPOSCHED_NVML_LIBRARY; \"none\" disables it)\n"
    "  without --input or --synthetic: discover this machine with hwloc\n";

}  // namespace toposched::cmd
