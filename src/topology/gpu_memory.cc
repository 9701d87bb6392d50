// Card memory estimates (gpu_memory.h).

#include "toposched/topology/gpu_memory.h"

#include <cctype>
#include <string>

namespace toposched {
namespace {

struct KnownCard {
  std::uint16_t vendor, device;
  std::uint16_t gib;
};

// Data-center cards whose PCI device id fixes the memory size. The names are pci.ids' (Debian's
// pci.ids 2023.04.10); where pci.ids names no size, the size is the vendor's data sheet's for the
// only configuration sold under that id (marked "sheet").
constexpr KnownCard kCards[] = {
    // NVIDIA (0x10de)
    {0x10de, 0x15f7, 12},  // GP100GL [Tesla P100 PCIe 12GB]
    {0x10de, 0x15f8, 16},  // GP100GL [Tesla P100 PCIe 16GB]
    {0x10de, 0x15f9, 16},  // GP100GL [Tesla P100 SXM2 16GB]
    {0x10de, 0x1db1, 16},  // GV100GL [Tesla V100 SXM2 16GB]
    {0x10de, 0x1db2, 16},  // GV100GL [Tesla V100 DGXS 16GB]
    {0x10de, 0x1db3, 16},  // GV100GL [Tesla V100 FHHL 16GB]
    {0x10de, 0x1db4, 16},  // GV100GL [Tesla V100 PCIe 16GB]
    {0x10de, 0x1db5, 32},  // GV100GL [Tesla V100 SXM2 32GB]
    {0x10de, 0x1db6, 32},  // GV100GL [Tesla V100 PCIe 32GB]
    {0x10de, 0x1db7, 32},  // GV100GL [Tesla V100 DGXS 32GB]
    {0x10de, 0x1db8, 32},  // GV100GL [Tesla V100 SXM3 32GB]
    {0x10de, 0x1df5, 16},  // GV100GL [Tesla V100 SXM2 16GB]
    {0x10de, 0x1df6, 32},  // GV100GL [Tesla V100S PCIe 32GB]
    {0x10de, 0x1eb8, 16},  // TU104GL [Tesla T4] (sheet: 16 GB GDDR6)
    {0x10de, 0x20b0, 40},  // GA100 [A100 SXM4 40GB]
    {0x10de, 0x20b1, 40},  // GA100 [A100 PCIe 40GB]
    {0x10de, 0x20b2, 80},  // GA100 [A100 SXM4 80GB]
    {0x10de, 0x20b3, 64},  // GA100 [A100-SXM-64GB]
    {0x10de, 0x20b5, 80},  // GA100 [A100 PCIe 80GB]
    {0x10de, 0x20b7, 24},  // GA100GL [A30 PCIe] (sheet: 24 GB HBM2)
    {0x10de, 0x20f1, 40},  // GA100 [A100 PCIe 40GB]
    {0x10de, 0x20f3, 80},  // GA100 [A800-SXM4-80GB]
    {0x10de, 0x20f5, 80},  // GA100 [A800 80GB PCIe]
    {0x10de, 0x20f6, 40},  // GA100 [A800 40GB PCIe]
    {0x10de, 0x2235, 48},  // GA102GL [A40] (sheet: 48 GB GDDR6)
    {0x10de, 0x2236, 24},  // GA102GL [A10] (sheet: 24 GB GDDR6)
    {0x10de, 0x2237, 24},  // GA102GL [A10G] (AWS G5: 24 GB GDDR6)
    {0x10de, 0x2330, 80},  // GH100 [H100 SXM5 80GB]
    {0x10de, 0x26b5, 48},  // AD102GL [L40] (sheet: 48 GB GDDR6)
    {0x10de, 0x27b8, 24},  // AD104GL [L4] (sheet: 24 GB GDDR6)
    // AMD (0x1002). An MI250/MI250X card is two GCDs, each its own device with half the memory.
    {0x1002, 0x66a1, 32},  // Vega 20 [Radeon Pro VII/Radeon Instinct MI50 32GB]
    {0x1002, 0x738c, 32},  // Arcturus GL-XL [Instinct MI100] (sheet: 32 GB HBM2)
    {0x1002, 0x738e, 32},  // Arcturus GL-XL [Instinct MI100]
    {0x1002, 0x7408, 64},  // Aldebaran/MI200 [Instinct MI250X] (sheet: 128 GB per card, 2 GCDs)
    {0x1002, 0x740c, 64},  // Aldebaran/MI200 [Instinct MI250X/MI250] (128 GB per card, 2 GCDs)
    {0x1002, 0x740f, 64},  // Aldebaran/MI200 [Instinct MI210] (sheet: 64 GB HBM2e)
};

// "...32GB..." / "... 80 GB ..." in a model name: the number of GB, else 0.
std::uint64_t SizeInName(std::string_view model) {
  for (std::size_t i = 0; i + 1 < model.size(); ++i) {
    const bool g = model[i] == 'G' || model[i] == 'g';
    const bool b = model[i + 1] == 'B' || model[i + 1] == 'b';
    if (!g || !b) continue;
    // "GB" must end a word: "GBps" is not a size.
    if (i + 2 < model.size() && std::isalpha(static_cast<unsigned char>(model[i + 2]))) continue;
    std::size_t end = i;
    if (end > 0 && model[end - 1] == ' ') --end;
    std::size_t begin = end;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(model[begin - 1]))) --begin;
    if (begin == end || end - begin > 4) continue;
    const std::uint64_t gb = std::stoull(std::string(model.substr(begin, end - begin)));
    if (gb >= 1 && gb <= 4096) return gb;
  }
  return 0;
}

}  // namespace

std::uint64_t NominalGpuMemoryGib(std::uint16_t vendor_id, std::uint16_t device_id, std::string_view model) {
  if (const std::uint64_t named = SizeInName(model); named > 0) return named;
  for (const KnownCard& c : kCards) {
    if (c.vendor == vendor_id && c.device == device_id) return c.gib;
  }
  return 0;
}

std::uint64_t EstimatedUsableMib(std::uint64_t nominal_gib) {
  if (nominal_gib == 0) return 0;
  return nominal_gib * 1024 * 15 / 16 - 64;
}

bool IsMemoryEstimate(const Gpu& g) {
  return g.memory_mib > 0 &&
         g.memory_mib == EstimatedUsableMib(NominalGpuMemoryGib(g.vendor_id, g.device_id, g.model));
}

int FillKnownGpuMemory(NodeTopology& topology) {
  int filled = 0;
  for (Gpu& g : topology.gpus) {
    if (g.memory_mib > 0) continue;
    const std::uint64_t mib = EstimatedUsableMib(NominalGpuMemoryGib(g.vendor_id, g.device_id, g.model));
    if (mib == 0) continue;
    g.memory_mib = mib;
    ++filled;
  }
  return filled;
}

}  // namespace toposched
