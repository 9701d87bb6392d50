#pragma once
// Times as the Kubernetes API writes them (RFC 3339, UTC): metav1.Time "2026-12-02T16:35:41Z"
// and metav1.MicroTime "2026-12-02T16:35:41.123456Z".

#include <chrono>
#include <string>
#include <string_view>

#include "toposched/common/status.h"

namespace toposched::kube {

std::string FormatTime(std::chrono::system_clock::time_point t);       // seconds, truncated
std::string FormatMicroTime(std::chrono::system_clock::time_point t);  // microseconds
// Reads both forms, any number of fraction digits, "Z" or a "+hh:mm"/"-hh:mm" offset.
Result<std::chrono::system_clock::time_point> ParseTime(std::string_view text);

}  // namespace toposched::kube
