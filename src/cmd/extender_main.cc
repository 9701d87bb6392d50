// toposched-extender: `toposched serve` alone, linked without toposched::discovery, so the
// extender's image needs no hwloc (docs/architecture.md, "Binaries"). It takes exactly the flags
// of `toposched serve`; a leading `serve` is accepted, so the two commands are interchangeable.

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "serve") args.erase(args.begin());
  if (!args.empty() && (args[0] == "version" || args[0] == "--version")) {
    std::printf("toposched-extender %s\n", TOPOSCHED_VERSION);
    return 0;
  }
  try {
    return toposched::cmd::RunServe(args);
  } catch (const std::exception& e) {
    // The edge: nothing below throws by design, but a bug must not turn into an abort.
    std::fprintf(stderr, "toposched-extender: internal error: %s\n", e.what());
    return 1;
  }
}
