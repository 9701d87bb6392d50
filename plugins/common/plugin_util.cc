#include "common/plugin_util.h"

#include <algorithm>

namespace toposched::plugins {

std::string_view RankName(int rank) {
  switch (rank) {
    case 0:
      return "NV";
    case 1:
      return "PIX";
    case 2:
      return "PXB";
    case 3:
      return "PHB";
    case 4:
      return "NODE";
    case 5:
      return "SYS(pkg)";
    default:
      return "SYS";
  }
}

Status RequireNoArgs(const framework::PluginArgs& args) {
  if (args.empty()) return Status::Ok();
  std::string keys;
  for (const auto& [key, value] : args) keys += (keys.empty() ? "" : ", ") + key;
  return Error("takes no args (got: " + keys + ")");
}

bool PacksByMixWithoutNics(const framework::CycleState& state) {
  if (!state.packs_for_shape_mix() || state.request().rdma_nics > 0) return false;
  const packing::ShapeMix* mix = state.shape_mix();
  if (mix == nullptr || mix->shapes.empty()) return false;
  return std::none_of(mix->shapes.begin(), mix->shapes.end(), [](const auto& s) { return s.shape.nics > 0; });
}

}  // namespace toposched::plugins
