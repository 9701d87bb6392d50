#pragma once
// ASCII text helpers the parsers share (one copy each): header values, HAMi's and kubeconfig's
// lists, NCCL attributes, command-line numbers. ASCII only, locale-independent: what Kubernetes,
// HAMi and NCCL write is ASCII where these apply.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace toposched {

// `s` without ASCII whitespace (space, \t, \n, \v, \f, \r) at either end.
std::string_view TrimSpace(std::string_view s);
// `s` with ASCII letters lower-cased.
std::string AsciiLower(std::string_view s);
// Whether `haystack` contains `needle`, ASCII letters compared case-insensitively.
bool ContainsIgnoringCase(std::string_view haystack, std::string_view needle);
// The parts of `s` between `sep`s: n separators give n + 1 parts, empty ones included ("" gives
// one empty part). The views point into `s`.
std::vector<std::string_view> Split(std::string_view s, char sep);
// A whole base-10 integer (an optional '-', then digits, nothing else: no blanks, no '+'), or
// nullopt (empty, other characters, out of range).
std::optional<long long> ParseInt(std::string_view s);

}  // namespace toposched
