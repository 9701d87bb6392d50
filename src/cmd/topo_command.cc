// `toposched topo`: the node's GPU/NIC link matrix, or its NodeTopology JSON.

#include <cstdio>
#include <string>

#include "commands.h"
#include "toposched/topology/json_codec.h"
#include "toposched/topology/matrix_text.h"
#include "toposched/topology/synthetic.h"

namespace toposched::cmd {

namespace {

void PrintHelp() {
  std::printf(
      "usage: toposched topo [--input FILE | --synthetic PRESET] [--format text|json]\n\n"
      "Prints the GPU/NIC link matrix the way `nvidia-smi topo -m` does (GPUs in PCI bus order,\n"
      "RDMA NICs as NIC columns with a legend), or the NodeTopology JSON with --format json.\n\n"
      "flags:\n%s"
      "  --format text|json  output format (default text)\n"
      "  --list-synthetic    list the synthetic presets and exit\n",
      kTopologyFlagsHelp);
}

}  // namespace

int RunTopo(const std::vector<std::string>& args) {
  TopologyArgs source;
  std::string format = "text";
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string error;
    if (ParseTopologyFlag(args, i, source, &error)) {
      if (!error.empty()) {
        std::fprintf(stderr, "toposched topo: %s\n", error.c_str());
        return 2;
      }
    } else if (args[i] == "--format" && i + 1 < args.size()) {
      format = args[++i];
    } else if (args[i] == "--list-synthetic") {
      for (const std::string& name : SyntheticPresetNames()) {
        std::printf("%-16s %s\n", name.c_str(), SyntheticPresetDescription(name).c_str());
      }
      return 0;
    } else if (args[i] == "--help" || args[i] == "-h") {
      PrintHelp();
      return 0;
    } else {
      std::fprintf(stderr, "toposched topo: unknown or incomplete flag '%s' (see --help)\n", args[i].c_str());
      return 2;
    }
  }
  if (format != "text" && format != "json") {
    std::fprintf(stderr, "toposched topo: --format must be text or json, not '%s'\n", format.c_str());
    return 2;
  }
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
