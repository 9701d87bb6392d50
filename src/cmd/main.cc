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
  // `toposched help topo` is `toposched topo --help`.
  if (args.size() == 2 && args[0] == "help") args = {args[1], "--help"};
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    if (args.size() > 1) {
      std::fprintf(stderr, "toposched: unexpected argument '%s' after %s (see toposched --help)\n",
                   args[1].c_str(), args[0].c_str());
      return 2;
    }
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
      if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
        std::fputs("usage: toposched version\n\nPrints the version and exits. It takes no flags.\n", stdout);
        return 0;
      }
      if (!args.empty()) {
        std::fprintf(stderr, "toposched version: %s '%s' (it takes none)\n",
                     args[0].starts_with("-") ? "unknown flag" : "unexpected argument", args[0].c_str());
        return 2;
      }
      std::printf("toposched %s\n", TOPOSCHED_VERSION);
      return 0;
    }
  } catch (const std::exception& e) {
    // The edge: nothing below throws by design, but a bug must not turn into an abort.
    std::fprintf(stderr, "toposched %s: internal error: %s\n", command.c_str(), e.what());
    return 1;
  }
  // One line, like every other usage error; the command list is one --help away.
  std::fprintf(stderr, "toposched: unknown command '%s' (see toposched --help)\n", command.c_str());
  return 2;
}
