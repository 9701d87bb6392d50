#include "toposched/topology/input_format.h"

#include <algorithm>
#include <string>

namespace toposched {

std::string_view ToString(InputFormat f) {
  switch (f) {
    case InputFormat::kHwlocXml:
      return "hwloc XML";
    case InputFormat::kNcclXml:
      return "NCCL topology XML";
    case InputFormat::kTopologyJson:
      return "NodeTopology JSON";
  }
  return "unknown";
}

namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

std::string_view SkipSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}

// Skips the XML prolog: declaration, comments, processing instructions and DOCTYPE.
// Returns the text from the root element's '<' on, or empty if there is none.
std::string_view SkipXmlProlog(std::string_view s) {
  for (int guard = 0; guard < 1000; ++guard) {
    s = SkipSpace(s);
    if (s.substr(0, 4) == "<!--") {
      std::size_t end = s.find("-->", 4);
      if (end == std::string_view::npos) return {};
      s.remove_prefix(end + 3);
    } else if (s.substr(0, 2) == "<?" || s.substr(0, 2) == "<!") {
      std::size_t end = s.find('>');
      if (end == std::string_view::npos) return {};
      s.remove_prefix(end + 1);
    } else {
      return s;
    }
  }
  return {};
}

std::string RootName(std::string_view s) {
  std::size_t i = 1;
  while (i < s.size() && !IsSpace(s[i]) && s[i] != '>' && s[i] != '/') ++i;
  return std::string(s.substr(1, i - 1));
}

// Value of attribute `name` in the start tag at the front of `s`, or empty.
std::string Attribute(std::string_view s, std::string_view name) {
  std::string_view tag = s.substr(0, s.find('>'));
  for (std::size_t pos = tag.find(name); pos != std::string_view::npos; pos = tag.find(name, pos + 1)) {
    if (pos == 0 || !IsSpace(tag[pos - 1])) continue;
    std::string_view rest = SkipSpace(tag.substr(pos + name.size()));
    if (rest.empty() || rest.front() != '=') continue;
    rest = SkipSpace(rest.substr(1));
    if (rest.empty() || (rest.front() != '"' && rest.front() != '\'')) continue;
    const char quote = rest.front();
    std::size_t end = rest.find(quote, 1);
    if (end == std::string_view::npos) return {};
    return std::string(rest.substr(1, end - 1));
  }
  return {};
}

}  // namespace

Result<InputFormat> DetectInputFormat(std::string_view content) {
  // UTF-8 byte order mark. Stripped before the emptiness check: a mark followed by nothing but
  // blanks is empty too (fuzz/input_format_fuzz.cc read past the end of such a file).
  if (content.substr(0, 3) == "\xEF\xBB\xBF") content.remove_prefix(3);
  if (SkipSpace(content).empty()) return Error("the file is empty");
  const std::string_view head = content.substr(0, 4096);
  const bool binary = std::any_of(head.begin(), head.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u == 0 || (u < 0x20 && !IsSpace(c));
  });
  if (binary)
    return Error("binary data, not a topology file (expected hwloc XML, NCCL XML or NodeTopology JSON)");

  const std::string_view text = SkipSpace(content);
  if (text.front() == '{') return InputFormat::kTopologyJson;
  if (text.front() == '<') {
    const std::string_view root = SkipXmlProlog(text);
    if (root.empty() || root.front() != '<') return Error("XML without a root element");
    const std::string name = RootName(root);
    if (name == "topology") {
      const std::string version = Attribute(root, "version");
      // hwloc 2.x imports v1 (no version attribute) and v2 ("2.0"); hwloc 3 writes "3.0".
      if (!version.empty() && version.front() != '1' && version.front() != '2') {
        return Error("hwloc XML version " + version +
                     " cannot be imported by hwloc 2.x; export it with hwloc 2.x "
                     "(`lstopo --of xml`) or with `--export-xml-flags v1`");
      }
      return InputFormat::kHwlocXml;
    }
    if (name == "system") return InputFormat::kNcclXml;
    return Error("unknown XML root element <" + name +
                 ">: expected <topology> (hwloc XML) or <system> (NCCL topology XML)");
  }
  if (text.find("GPU0") != std::string_view::npos &&
      (text.find("Legend") != std::string_view::npos || text.find("Affinity") != std::string_view::npos)) {
    return Error(
        "this looks like `nvidia-smi topo -m` output, which has no PCIe tree; give an hwloc "
        "XML (`lstopo --of xml`) or an NCCL topology dump (NCCL_TOPO_DUMP_FILE) instead");
  }
  return Error(
      "not a topology file: expected hwloc XML (<topology>), NCCL topology XML (<system>) "
      "or NodeTopology JSON ({...})");
}

}  // namespace toposched
