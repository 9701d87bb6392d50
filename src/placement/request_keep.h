#pragma once
// The fields of a Pod that ParsePodRequest reads, kept from its JSON text (request.cc), by two
// readers that must agree: nlohmann's parser with the keep filter (every document, the errors'
// wording), and a simdjson pass (the common case, cheaper on real pods full of managedFields
// and status: docs/benchmarks.md, "Prefill/Decode pool pods in the extender") that gives up
// (nullopt) on anything but well-formed JSON whose kept fields have the types a Pod gives them.
// Private to the placement library, its tests and the pod_request fuzz target (which checks that
// the two agree).

#include <cstddef>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace toposched::request_keep {

// nlohmann's parser with the keep filter; throws nlohmann::json::exception on bad JSON.
nlohmann::json ByFilter(std::string_view text);

// The largest text BySimdjson reads (each thread's parser keeps buffers of the largest).
inline constexpr std::size_t kMaxBytes = 256u << 10;

// The same document by simdjson, or nullopt: longer than kMaxBytes, not valid JSON to simdjson,
// not an object, or a kept field of another type than a Pod gives it (ByFilter's result then
// decides).
std::optional<nlohmann::json> BySimdjson(std::string_view text);

}  // namespace toposched::request_keep
