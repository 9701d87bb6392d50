#pragma once
// PluginStatus: what a Filter or Reserve plugin says about one node, with kube-scheduler's
// closed set of codes (staging/src/k8s.io/kube-scheduler/framework/interface.go). The extender
// maps them in one place: kUnschedulable -> FailedNodes, kUnschedulableAndUnresolvable ->
// FailedAndUnresolvableNodes, kError -> the reply's Error field.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace toposched::framework {

enum class Code : std::uint8_t {
  kSuccess,
  // The pod does not fit now; it might after other pods leave (preemption may help).
  kUnschedulable,
  // The pod never fits on this node as it is (e.g. fewer GPUs in total than requested, no
  // topology); preemption would not help.
  kUnschedulableAndUnresolvable,
  // Something went wrong that is not about the pod or the node (a bug, an inconsistent cache);
  // the whole cycle fails and the pod is retried.
  kError,
  // The plugin has nothing to say for this pod; the framework treats it like kSuccess.
  kSkip,
};
std::string_view ToString(Code code);  // "Success", "Unschedulable", ...

// A value: success is the default-constructed state. `plugin` names who failed (the framework
// fills it in when a plugin leaves it empty); `reason` is a sentence a user can act on.
class PluginStatus {
 public:
  PluginStatus() = default;

  static PluginStatus Success() { return PluginStatus(); }
  static PluginStatus Skip(std::string plugin) { return PluginStatus(Code::kSkip, std::move(plugin), ""); }
  static PluginStatus Unschedulable(std::string plugin, std::string reason) {
    return PluginStatus(Code::kUnschedulable, std::move(plugin), std::move(reason));
  }
  static PluginStatus Unresolvable(std::string plugin, std::string reason) {
    return PluginStatus(Code::kUnschedulableAndUnresolvable, std::move(plugin), std::move(reason));
  }
  static PluginStatus Error(std::string plugin, std::string reason) {
    return PluginStatus(Code::kError, std::move(plugin), std::move(reason));
  }

  Code code() const { return code_; }
  const std::string& plugin() const { return plugin_; }
  const std::string& reason() const { return reason_; }
  // kSuccess and kSkip both let the pod go on.
  bool ok() const { return code_ == Code::kSuccess || code_ == Code::kSkip; }
  // "Unschedulable (DeviceFit): 2 GPUs requested, 1 free"; "Success" when ok.
  std::string ToString() const;

  PluginStatus WithPlugin(std::string plugin) const {
    return PluginStatus(code_, std::move(plugin), reason_);
  }
  bool operator==(const PluginStatus&) const = default;

 private:
  PluginStatus(Code code, std::string plugin, std::string reason)
      : code_(code), plugin_(std::move(plugin)), reason_(std::move(reason)) {}

  Code code_ = Code::kSuccess;
  std::string plugin_;
  std::string reason_;
};

}  // namespace toposched::framework
