#pragma once
// A JSON string literal (RFC 8259) appended to `out`: quotes, backslashes and control characters
// escaped; each byte of invalid UTF-8 written as \ufffd, as Go's encoder does, so that whatever
// the input, the output parses (the wire writers' replies, the HTTP server's error bodies).

#include <string>
#include <string_view>

namespace toposched {

void AppendJsonString(std::string& out, std::string_view s);

}  // namespace toposched
