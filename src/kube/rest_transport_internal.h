#pragma once
// For tests: the cpprestsdk transport with a shorter token re-read period and smaller size
// limits, so that tests need not wait a minute or send 256 MiB (rest_transport.cc).

#include <chrono>
#include <cstddef>
#include <memory>

#include "toposched/kube/transport.h"

namespace toposched::kube::internal {

Result<std::unique_ptr<Transport>> MakeRestTransportForTesting(const ClientConfig& config,
                                                               std::chrono::milliseconds token_reread_period,
                                                               std::size_t max_response_bytes,
                                                               std::size_t max_line_bytes);

}  // namespace toposched::kube::internal
