// `toposched topo`: the node's GPU/NIC link matrix, or its NodeTopology JSON.

#include <cstdio>
#include <string>

#include "commands.h"
#include "flags.h"
#include "toposched/topology/json_codec.h"
#include "toposched/topology/matrix_text.h"
#include "toposched/topology/synthetic.h"

namespace toposched::cmd {

int RunTopo(const std::vector<std::string>& args) {
  TopologyArgs source;
  std::string format = "text";
  bool list_synthetic = false;
  FlagSet flags("topo", "toposched topo [--input FILE | --synthetic PRESET] [--format text|json]",
                "Prints the GPU/NIC link matrix the way `nvidia-smi topo -m` does (GPUs in PCI bus order,\n"
                "RDMA NICs as NIC columns with a legend), or the NodeTopology JSON with --format json.");
  AddTopologyFlags(flags, source, "node name to record (default: from the source, else the host name)");
  flags.Group("output");
  flags.Choice("--format", format, {"text", "json"}, "output format");
  bool json = false;
  flags.Switch("--json", json, "the same as --format json (as in advise and simulate)");
  flags.Switch("--list-synthetic", list_synthetic, "list the synthetic presets and exit");
  if (const auto exit_code = flags.Parse(args)) return *exit_code;
  if (json) format = "json";
  if (list_synthetic) {
    for (const std::string& name : SyntheticPresetNames()) {
      std::printf("%-16s %s\n", name.c_str(), SyntheticPresetDescription(name).c_str());
    }
    return 0;
  }
  if (const std::string bad = TopologyArgsUsageError(source); !bad.empty()) return flags.UsageError(bad);
  auto topology = ObtainTopology(source);
  if (!topology.ok()) {
    std::fprintf(stderr, "toposched topo: %s\n", topology.error().message().c_str());
    return 1;
  }
  if (format == "json") {
    std::printf("%s\n", EncodeTopologyJson(*topology).c_str());
  } else if (topology->gpus.empty()) {
    std::printf("%s\n", NoGpuStatement(*topology).c_str());
  } else {
    std::fputs(RenderTopologyMatrix(*topology).c_str(), stdout);
  }
  return 0;
}

}  // namespace toposched::cmd
