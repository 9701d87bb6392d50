#pragma once
// Kubernetes quantities (k8s.io/apimachinery pkg/api/resource ParseQuantity), whole values only:
//   quantity ::= [+-] digits [. digits] suffix
//   suffix   ::= "" | n u m k M G T P E | Ki Mi Gi Ti Pi Ei | e<int> | E<int>
// The value is computed exactly (no floating point), so "1500m" is refused while "2000m" is 2;
// ParseMilliQuantity reads thousandths (CPU) and rounds up.
// Pod resources (placement/request.cc) and the command line's size flags (cmd/flags.cc) read
// quantities through this one parser.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

namespace toposched {

// A quantity longer than this is not one anybody wrote ("9223372036854775807" is 19).
inline constexpr std::size_t kMaxQuantityLength = 64;

struct Quantity {
  std::int64_t value = 0;  // in base units: bytes when `binary`, else the number itself
  bool binary = false;     // a binary suffix (Ki, Mi, ...) was used
  bool operator==(const Quantity&) const = default;
};

// The quantity, or the reason it is not acceptable, phrased to follow the quoted value ("is
// negative", "is not a whole number", "is too large", "is not a Kubernetes quantity ...").
// Zero is accepted whatever its sign and suffix; a negative value is refused.
std::variant<Quantity, std::string> ParseQuantity(std::string_view s);

// The same grammar in thousandths, rounded up (apimachinery's Quantity.MilliValue): "500m" is 500,
// "2" 2000, "0.5" 500, "1u" 1, "1Ki" 1024000. For CPU. Errors as ParseQuantity's, less "is not a
// whole number".
std::variant<std::int64_t, std::string> ParseMilliQuantity(std::string_view s);

}  // namespace toposched
