#pragma once
// Detects what a topology input file holds from its first bytes, so `toposched topo --input`
// needs no format flag, and explains what is wrong with the files it cannot read.

#include <string_view>

#include "toposched/common/status.h"

namespace toposched {

enum class InputFormat { kHwlocXml, kNcclXml, kTopologyJson };
std::string_view ToString(InputFormat f);

// Errors: empty file, binary data, `nvidia-smi topo -m` text, hwloc XML v3 (which hwloc 2.x
// cannot import), unknown XML root, anything else.
Result<InputFormat> DetectInputFormat(std::string_view content);

}  // namespace toposched
