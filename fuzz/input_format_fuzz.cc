// The format sniffing in front of every topology file (DetectInputFormat: hwloc XML, NCCL XML or
// NodeTopology JSON), as LoadTopologyFile calls it on a file's bytes. The parsers behind it have
// targets of their own (hwloc_xml, nccl_xml, topology_json).

#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "toposched/topology/input_format.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto format = toposched::DetectInputFormat(toposched::fuzz::AsText(data, size));
  if (format.ok()) {
    FUZZ_CHECK(!toposched::ToString(*format).empty());
  } else {
    FUZZ_CHECK(!format.error().message().empty());
  }
  return 0;
}
