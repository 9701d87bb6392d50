#include "common/plugin_util.h"

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

}  // namespace toposched::plugins
