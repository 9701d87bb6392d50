// toposched: topology-aware GPU placement for Kubernetes. One binary, several subcommands.

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.h"

namespace {

constexpr const char* kUsage = R"(usage: toposched <command> [flags]

commands:
  topo     print this node's (or a file's) GPU/NIC topology matrix, like `nvidia-smi topo -m`
  agent    discover the topology and write the NodeTopology JSON (--once)
  place    choose a pod's GPUs and RDMA NICs on one node, with the score and why
  simulate compare placement policies on a virtual cluster (embedded default: no flags)
  serve    the scheduler extender for kube-scheduler and Volcano (HTTP)
  advise   co-located or disaggregated Prefill/Decode for a model, workload and cluster
  version  print the version

Run `toposched <command> --help` for a command's flags.
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  try {
    if (command == "topo") return toposched::cmd::RunTopo(args);
    if (command == "agent") return toposched::cmd::RunAgent(args);
    if (command == "place") return toposched::cmd::RunPlace(args);
    if (command == "simulate") return toposched::cmd::RunSimulate(args);
    if (command == "serve") return toposched::cmd::RunServe(args);
    if (command == "advise") return toposched::cmd::RunAdvise(args);
    if (command == "version" || command == "--version") {
      std::printf("toposched %s\n", TOPOSCHED_VERSION);
      return 0;
    }
  } catch (const std::exception& e) {
    // The edge: nothing below throws by design, but a bug must not turn into an abort.
    std::fprintf(stderr, "toposched %s: internal error: %s\n", command.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "toposched: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
