#include "toposched/framework/status.h"

namespace toposched::framework {

std::string_view ToString(Code code) {
  switch (code) {
    case Code::kSuccess:
      return "Success";
    case Code::kUnschedulable:
      return "Unschedulable";
    case Code::kUnschedulableAndUnresolvable:
      return "UnschedulableAndUnresolvable";
    case Code::kError:
      return "Error";
    case Code::kSkip:
      return "Skip";
  }
  return "Unknown";
}

std::string PluginStatus::ToString() const {
  std::string out(framework::ToString(code_));
  if (!plugin_.empty()) out += " (" + plugin_ + ")";
  if (!reason_.empty()) out += ": " + reason_;
  return out;
}

}  // namespace toposched::framework
