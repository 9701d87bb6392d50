// A file source node document (DIR/nodes/*.json: name, labels, and an inline topology, a
// topology file or a preset): ParseNodeDocument, as FileSource::Load reads each file.
// What parses must keep the parser's promises (a DNS-1123 name, exactly one topology source,
// a topologyFile that stays inside DIR).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "file_source_internal.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace internal = toposched::state::internal;
  const auto doc = internal::ParseNodeDocument(toposched::fuzz::AsText(data, size), 1u << 20);
  if (!doc.ok()) {
    FUZZ_CHECK(!doc.error().message().empty());
    return 0;
  }
  FUZZ_CHECK(internal::IsDns1123Subdomain(doc->name));
  const int sources = static_cast<int>(doc->topology.has_value()) +
                      static_cast<int>(!doc->topology_file.empty()) + static_cast<int>(!doc->preset.empty());
  FUZZ_CHECK(sources == 1);
  FUZZ_CHECK(!doc->topology_file.starts_with("/"));
  // No ".." path component ("hgx..json" is a file name, not a way out of DIR).
  const std::string& file = doc->topology_file;
  for (std::size_t begin = 0; begin <= file.size();) {
    const std::size_t end = std::min(file.find('/', begin), file.size());
    FUZZ_CHECK(file.compare(begin, end - begin, "..") != 0);
    begin = end + 1;
  }
  return 0;
}
