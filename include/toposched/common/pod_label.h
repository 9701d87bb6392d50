#pragma once
// How logs, events and errors name a pod: "namespace/name", or its UID when it has no name (a
// Volcano task seen without its Pod). One spelling for the extender, the Kubernetes source and
// the CLI.

#include <string>
#include <string_view>

namespace toposched {

inline std::string PodLabel(std::string_view ns, std::string_view name, std::string_view uid = {}) {
  if (name.empty()) return std::string(uid);
  std::string s;
  s.reserve(ns.size() + name.size() + 1);
  s.append(ns).append("/").append(name);
  return s;
}

}  // namespace toposched
