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

class FlagSet;
// Declares TopologyArgs' flags (--input, --synthetic, --node-name, --sysfs-root, --nvml-library)
// on `flags`, under their own group; `node_name_help` says what --node-name names.
void AddTopologyFlags(FlagSet& flags, TopologyArgs& out, const std::string& node_name_help);

}  // namespace toposched::cmd

#include "toposched/common/status.h"
#include "toposched/topology/node_topology.h"

namespace toposched::cmd {

// The topology TopologyArgs names: a file, a synthetic preset, or the live machine. Rejects
// --input together with --synthetic. --node-name overrides the node name of any source. For
// live discovery, `nvml_note` (when set) receives what NVML contributed (DiscoveryOptions).
Result<NodeTopology> ObtainTopology(const TopologyArgs& args, std::string* nvml_note = nullptr);

// The usage errors in TopologyArgs (exit 2, before anything is read): --input together with
// --synthetic, an unknown --synthetic preset. Empty when the arguments are usable.
std::string TopologyArgsUsageError(const TopologyArgs& args);

}  // namespace toposched::cmd
