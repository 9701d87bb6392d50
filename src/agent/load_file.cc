#include <filesystem>
#include <string>

#include "toposched/agent/discovery.h"
#include "toposched/common/file.h"
#include "toposched/topology/gpu_memory.h"
#include "toposched/topology/input_format.h"
#include "toposched/topology/json_codec.h"
#include "toposched/topology/nccl_xml.h"

namespace toposched {

Result<NodeTopology> LoadTopologyFile(const std::string& path) {
  auto content = ReadFileBounded(path, kMaxTopologyFileBytes);
  if (!content.ok()) return content.error().WithContext(path);
  auto format = DetectInputFormat(*content);
  if (!format.ok()) return format.error().WithContext(path);
  Result<NodeTopology> topology = Error("unreachable");
  switch (*format) {
    case InputFormat::kHwlocXml:
      topology = ParseHwlocXml(*content);
      break;
    case InputFormat::kNcclXml:
      topology = ParseNcclXml(*content);
      break;
    case InputFormat::kTopologyJson: {
      // A NodeTopology document keeps the source and detail it was written with.
      auto decoded = DecodeTopologyJson(*content);
      if (!decoded.ok()) return decoded.error().WithContext(path + " (NodeTopology JSON)");
      return decoded;
    }
  }
  if (!topology.ok()) return topology.error().WithContext(path + " (" + std::string(ToString(*format)) + ")");
  // NCCL files and hwloc exports without NVML carry no card memory: estimated from the model's
  // name or PCI id where that fixes it (gpu_memory.h), so shared requests can be placed.
  FillKnownGpuMemory(*topology);
  topology->source_detail = std::filesystem::path(path).filename().string();
  // NCCL files and some hwloc exports carry no host name: name the topology after the file.
  // The name keeps everything but the extension and a format marker (".nccl", ".hwloc2"):
  // oci__bm.gpu.h100.8_... and oci__bm.gpu4.8_... must not both become "oci--bm".
  if (topology->node_name.empty()) {
    std::string stem = std::filesystem::path(path).stem().string();
    for (std::string_view marker : {".nccl", ".hwloc1", ".hwloc2", ".hwloc", ".topo"}) {
      if (stem.size() > marker.size() && stem.ends_with(marker)) {
        stem.resize(stem.size() - marker.size());
        break;
      }
    }
    topology->node_name = ToKubernetesName(stem);
  }
  return topology;
}

}  // namespace toposched
