// The GPUs `toposched advise` knows by name (--gpu): datasheet figures and the MFU/MBU
// assumptions, docs/advise.md.

#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/text.h"
#include "toposched/pd/advise.h"

namespace toposched::pd {

const std::vector<GpuProfile>& GpuPresets() {
  // Dense BF16 tensor TFLOPS and HBM bandwidth from NVIDIA's datasheets (docs/advise.md lists
  // each); MFU and MBU are the same assumptions for every GPU.
  static const std::vector<GpuProfile> presets = {
      {"h100-sxm", 989, 3350, 80, 0.5, 0.7},
      {"a100-sxm-80g", 312, 2039, 80, 0.5, 0.7},
      {"h200-sxm", 989, 4800, 141, 0.5, 0.7},
      {"l40s", 362, 864, 48, 0.5, 0.7},
  };
  return presets;
}

Result<GpuProfile> FindGpu(std::string_view name) {
  std::string known;
  for (const GpuProfile& g : GpuPresets()) {
    if (g.name == AsciiLower(name)) return g;
    known += (known.empty() ? "" : ", ") + g.name;
  }
  return Error("unknown GPU '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace toposched::pd
