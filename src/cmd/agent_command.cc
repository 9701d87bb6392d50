// `toposched agent --once`: discover and write the NodeTopology JSON. Publication to the
// Kubernetes API server (the DaemonSet mode without --once) is a separate capability.

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "commands.h"
#include "toposched/topology/json_codec.h"

namespace toposched::cmd {

namespace {

void PrintHelp() {
  std::printf(
      "usage: toposched agent --once [--input FILE | --synthetic PRESET] [--output FILE]\n\n"
      "Discovers the node topology and writes its NodeTopology JSON to --output (atomically:\n"
      "a temporary file in the same folder, then rename) or to stdout.\n\n"
      "flags:\n%s"
      "  --once              discover once, write, exit (required: publishing to Kubernetes\n"
      "                      is not part of this build)\n"
      "  --output FILE       where to write the JSON (default: stdout)\n",
      kTopologyFlagsHelp);
}

// Writes `content` to `path` via a temporary file and rename, so readers never see half a file.
Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Error("cannot write " + tmp + ": " + std::strerror(errno));
    out << content;
    out.flush();
    if (!out) return Error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
  return Status::Ok();
}

}  // namespace

int RunAgent(const std::vector<std::string>& args) {
  TopologyArgs source;
  std::string output;
  bool once = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string error;
    if (ParseTopologyFlag(args, i, source, &error)) {
      if (!error.empty()) {
        std::fprintf(stderr, "toposched agent: %s\n", error.c_str());
        return 2;
      }
    } else if (args[i] == "--once") {
      once = true;
    } else if (args[i] == "--output" && i + 1 < args.size()) {
      output = args[++i];
    } else if (args[i] == "--help" || args[i] == "-h") {
      PrintHelp();
      return 0;
    } else {
      std::fprintf(stderr, "toposched agent: unknown or incomplete flag '%s' (see --help)\n", args[i].c_str());
      return 2;
    }
  }
  if (!once) {
    std::fprintf(stderr,
                 "toposched agent: only --once is supported by this build (publishing NodeTopology "
                 "objects to Kubernetes is not implemented yet)\n");
    return 2;
  }
  // Logs go to stderr: stdout may carry the JSON.
  auto logger = std::make_shared<spdlog::logger>("agent", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l component=agent %v", spdlog::pattern_time_type::utc);
  std::string nvml_note;
  auto topology = ObtainTopology(source, &nvml_note);
  if (!topology.ok()) {
    logger->error("msg=\"discovery failed\" error=\"{}\"", topology.error().message());
    return 1;
  }
  const std::string json = EncodeTopologyJson(*topology) + "\n";
  if (output.empty()) {
    std::fputs(json.c_str(), stdout);
  } else if (Status written = WriteFileAtomically(output, json); !written.ok()) {
    logger->error("msg=\"write failed\" error=\"{}\"", written.error().message());
    return 1;
  }
  // nvml= only when live discovery tried NVML: says whether NVLink came from it, or why not.
  logger->info("msg=\"discovered\" node={} source={} gpus={} rdma_nics={} fingerprint={}{}{}", topology->node_name,
               ToString(topology->source), topology->gpus.size(), topology->RdmaNicCount(),
               topology->Fingerprint(), output.empty() ? "" : " output=" + output,
               nvml_note.empty() ? "" : " nvml=\"" + nvml_note + "\"");
  return 0;
}

}  // namespace toposched::cmd
