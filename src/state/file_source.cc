// The file source: node documents from DIR/nodes, binds made durable in DIR/allocations.journal.

#include "file_source_internal.h"
#include "journal.h"

#include "../common/json_errors.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <system_error>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "toposched/common/file.h"
#include "toposched/state/cluster_state.h"
#include "toposched/topology/json_codec.h"
#include "toposched/topology/synthetic.h"

namespace toposched::state {
namespace internal {
namespace {

using json_errors::Expected;
using json_errors::ScanShape;
using json_errors::Shape;
using json_errors::StripExceptionTag;
using nlohmann::json;

// The node document wraps a NodeTopology (which the codec allows 32 levels) in one object.
constexpr int kMaxDocumentDepth = 33;
// The codec's value budget, plus room for the document's own keys and labels.
constexpr std::size_t kMaxDocumentValues = 1'100'000;
constexpr std::size_t kMaxDnsSubdomainLength = 253;

bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

Status CheckTopologyFilePath(const std::string& path) {
  if (path.empty()) return Error("topologyFile: must not be empty");
  if (path.find('\0') != std::string::npos) return Error("topologyFile: contains a NUL byte");
  const std::filesystem::path p(path);
  if (p.is_absolute()) {
    return Error("topologyFile: " + json_errors::Quote(path) +
                 " is absolute; give a path relative to the cluster directory");
  }
  for (const auto& part : p) {
    if (part == "..") {
      return Error("topologyFile: " + json_errors::Quote(path) + " leaves the cluster directory (\"..\")");
    }
  }
  return Status::Ok();
}

Result<NodeDocument> Parse(std::string_view text, std::size_t max_bytes) {
  if (text.size() > max_bytes) {
    return Error("document is " + std::to_string(text.size()) + " bytes, over the limit of " +
                 std::to_string(max_bytes) + " bytes");
  }
  const Shape shape = ScanShape(text);
  if (shape.max_depth > kMaxDocumentDepth) {
    return Error("not valid JSON: nested deeper than " + std::to_string(kMaxDocumentDepth) + " levels");
  }
  if (shape.values > kMaxDocumentValues) {
    return Error("document has more than " + std::to_string(kMaxDocumentValues) + " JSON values");
  }
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return Error("not valid JSON (byte " + std::to_string(e.byte) + "): " + StripExceptionTag(e.what()));
  } catch (const json::exception& e) {
    return Error("not valid JSON: " + StripExceptionTag(e.what()));
  }
  if (!doc.is_object()) return Expected("document", "a JSON object", doc);
  for (const auto& [key, value] : doc.items()) {
    if (key != "name" && key != "labels" && key != "unschedulable" && key != "topology" &&
        key != "topologyFile" && key != "preset") {
      return Error("unknown key " + json_errors::Quote(key) +
                   " (known: name, labels, unschedulable, topology, topologyFile, preset)");
    }
  }

  NodeDocument out;
  if (!doc.contains("name")) return Error("name: required");
  const json& name = doc.at("name");
  if (!name.is_string() || !IsDns1123Subdomain(name.get_ref<const std::string&>())) {
    return Expected(
        "name",
        "a Kubernetes node name (lower-case alphanumerics, '-' and '.', alphanumeric at both ends "
        "of each dot-separated part, at most 253 characters)",
        name);
  }
  out.name = name.get<std::string>();

  if (doc.contains("labels")) {
    const json& labels = doc.at("labels");
    if (!labels.is_object()) return Expected("labels", "an object of strings", labels);
    for (const auto& [key, value] : labels.items()) {
      if (key.empty()) return Error("labels: a label key is empty");
      if (!value.is_string()) return Expected("labels." + key, "a string", value);
      out.labels.emplace(key, value.get<std::string>());
    }
  }
  if (doc.contains("unschedulable")) {
    const json& v = doc.at("unschedulable");
    if (!v.is_boolean()) return Expected("unschedulable", "true or false", v);
    out.schedulable = !v.get<bool>();
  }

  const int sources = static_cast<int>(doc.contains("topology")) +
                      static_cast<int>(doc.contains("topologyFile")) +
                      static_cast<int>(doc.contains("preset"));
  if (sources != 1) {
    return Error(sources == 0 ? "topology: required (give one of topology, topologyFile or preset)"
                              : "topology, topologyFile and preset are alternatives: give exactly one");
  }
  if (doc.contains("topology")) {
    const json& t = doc.at("topology");
    if (!t.is_object()) return Expected("topology", "a NodeTopology object", t);
    // The codec reads text; the depth bound above keeps this re-encoding's recursion shallow.
    auto topology = DecodeTopologyJson(t.dump());
    if (!topology.ok()) return topology.error().WithContext("topology");
    out.topology = std::move(topology).value();
  } else if (doc.contains("topologyFile")) {
    const json& f = doc.at("topologyFile");
    if (!f.is_string()) return Expected("topologyFile", "a path relative to the cluster directory", f);
    out.topology_file = f.get<std::string>();
    TOPOSCHED_RETURN_IF_ERROR(CheckTopologyFilePath(out.topology_file));
    out.topology_file = std::filesystem::path(out.topology_file).lexically_normal().string();
  } else {
    const json& p = doc.at("preset");
    if (!p.is_string() || p.get_ref<const std::string&>().empty()) {
      return Expected("preset", "a synthetic preset name", p);
    }
    out.preset = p.get<std::string>();
  }
  return out;
}

}  // namespace

bool IsDns1123Subdomain(std::string_view name) {
  if (name.empty() || name.size() > kMaxDnsSubdomainLength) return false;
  for (;;) {
    const std::size_t dot = name.find('.');
    const std::string_view label = name.substr(0, dot);
    if (label.empty() || !IsLowerAlnum(label.front()) || !IsLowerAlnum(label.back())) return false;
    for (const char c : label) {
      if (!IsLowerAlnum(c) && c != '-') return false;
    }
    if (dot == std::string_view::npos) return true;
    name.remove_prefix(dot + 1);
  }
}

Result<NodeDocument> ParseNodeDocument(std::string_view text, std::size_t max_bytes) {
  try {
    return Parse(text, max_bytes);
  } catch (const std::exception& e) {  // backstop: types are checked before every access
    return Error(std::string("cannot decode node document: ") + e.what());
  }
}

}  // namespace internal

namespace {

std::string ErrnoText(int err) {
  return std::strerror(err);
}

}  // namespace

struct FileSource::Impl {
  std::string dir;
  FileSourceOptions options;
  int lock_fd = -1;
  std::vector<NodeSpec> nodes;  // sorted by file name
  std::vector<std::string> warnings;
  std::unique_ptr<internal::JournalWriter> journal;  // set by Load
  bool loaded = false;

  ~Impl() {
    if (lock_fd >= 0) ::close(lock_fd);  // releases the flock
  }

  std::string JournalPath() const { return dir + "/" + std::string(internal::kJournalFileName); }

  Status Lock() {
    const std::string path = dir + "/.lock";
    lock_fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) return Error("cannot open " + path + ": " + ErrnoText(errno));
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        return Error("cluster directory " + dir + " is in use: another process holds " + path +
                     " (is another toposched serve running on it?)");
      }
      return Error("cannot lock " + path + ": " + ErrnoText(err));
    }
    return Status::Ok();
  }

  Status ReadNodes() {
    namespace fs = std::filesystem;
    const std::string nodes_dir = dir + "/nodes";
    std::error_code ec;
    if (!fs::is_directory(nodes_dir, ec)) {
      return Error(nodes_dir + ": not a directory (node documents go in " + nodes_dir + "/*.json)");
    }
    std::vector<std::string> files;
    for (fs::directory_iterator it(nodes_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.ends_with(".json") && it->is_regular_file(ec)) files.push_back(name);
    }
    if (ec) return Error("cannot list " + nodes_dir + ": " + ec.message());
    std::sort(files.begin(), files.end());
    if (files.empty()) warnings.push_back(nodes_dir + ": no node documents (*.json); the cluster is empty");

    std::unordered_map<std::string, std::shared_ptr<const NodeTopology>> by_file, by_preset;
    std::unordered_map<std::string, std::string> file_of_node;
    for (const std::string& file : files) {
      const std::string path = nodes_dir + "/" + file;
      auto text = ReadFileBounded(path, options.max_node_document_bytes);
      if (!text.ok()) return text.error().WithContext(path);
      auto doc = internal::ParseNodeDocument(*text, options.max_node_document_bytes);
      if (!doc.ok()) return doc.error().WithContext(path);
      NodeSpec spec;
      spec.name = doc->name;
      spec.labels = std::move(doc->labels);
      spec.schedulable = doc->schedulable;
      if (doc->topology) {
        spec.topology = std::make_shared<const NodeTopology>(std::move(*doc->topology));
      } else if (!doc->topology_file.empty()) {
        auto cached = by_file.find(doc->topology_file);
        if (cached == by_file.end()) {
          const std::string topology_path = dir + "/" + doc->topology_file;
          auto topology_text = ReadFileBounded(topology_path, options.max_node_document_bytes);
          if (!topology_text.ok()) {
            return topology_text.error().WithContext(path + ": topologyFile: " + topology_path);
          }
          auto topology = DecodeTopologyJson(*topology_text);
          if (!topology.ok()) return topology.error().WithContext(path + ": topologyFile: " + topology_path);
          cached =
              by_file.emplace(doc->topology_file, std::make_shared<const NodeTopology>(std::move(*topology)))
                  .first;
        }
        spec.topology = cached->second;
      } else {
        auto cached = by_preset.find(doc->preset);
        if (cached == by_preset.end()) {
          auto preset = SyntheticPreset(doc->preset);
          if (!preset.ok()) return preset.error().WithContext(path + ": preset");
          auto topology = GenerateSynthetic(*preset);
          if (!topology.ok()) return topology.error().WithContext(path + ": preset");
          cached = by_preset.emplace(doc->preset, std::make_shared<const NodeTopology>(std::move(*topology)))
                       .first;
        }
        spec.topology = cached->second;
      }
      const auto [previous, inserted] = file_of_node.emplace(spec.name, path);
      if (!inserted) {
        return Error(path + ": name: node " + json_errors::Quote(spec.name) + " is already defined by " +
                     previous->second);
      }
      nodes.push_back(std::move(spec));
    }
    return Status::Ok();
  }
};

FileSource::FileSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FileSource::~FileSource() = default;

Result<std::unique_ptr<FileSource>> FileSource::Open(const std::string& dir, FileSourceOptions options) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Error("cluster directory " + dir + ": " + ErrnoText(errno));
  if (!S_ISDIR(st.st_mode)) return Error("cluster directory " + dir + ": not a directory");
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  while (impl->dir.size() > 1 && impl->dir.back() == '/') impl->dir.pop_back();
  impl->options = options;
  TOPOSCHED_RETURN_IF_ERROR(impl->Lock());
  TOPOSCHED_RETURN_IF_ERROR(impl->ReadNodes());
  return std::unique_ptr<FileSource>(new FileSource(std::move(impl)));
}

Status FileSource::Load(ClusterStore& store) {
  Impl& m = *impl_;
  if (m.loaded) return Error("file source " + m.dir + ": Load called twice");
  if (Status s = store.UpsertNodes(m.nodes); !s.ok()) m.warnings.push_back(s.error().message());
  TOPOSCHED_ASSIGN_OR_RETURN(const auto replay,
                             internal::ReplayJournal(m.JournalPath(), m.options.max_journal_line_bytes));
  m.warnings.insert(m.warnings.end(), replay.warnings.begin(), replay.warnings.end());

  // Restore what still fits. What does not fit a node that is still there (smaller hardware,
  // two records on one device) is held (ClusterStore::Hold: that node takes no new placements)
  // and kept in the journal, so a restart holds it again until the node's document is fixed;
  // the allocation of a node gone from DIR is dropped with a warning and compaction forgets it.
  std::string compacted;
  for (const PodAllocation& a : replay.live) {
    const std::string pod = a.pod_namespace + "/" + a.pod_name + " (uid " + a.uid + ")";
    if (Status s = store.Restore(a); !s.ok()) {
      PodAllocation held = a;
      held.hold = "journaled allocation does not fit node " + a.node + ": " + s.error().message();
      if (store.snapshot()->Find(a.node) == nullptr || !store.Hold(held).ok()) {
        m.warnings.push_back(m.JournalPath() + ": dropped the allocation of pod " + pod + " on node " +
                             a.node + ": " + s.error().message());
        continue;
      }
      m.warnings.push_back(m.JournalPath() + ": held the allocation of pod " + pod + ": " + held.hold +
                           "; node " + a.node + " takes no new placements until its document is fixed");
    }
    auto line = internal::EncodeJournalLine(internal::JournalOp::kBind, a);
    if (!line.ok()) return line.error().WithContext(m.JournalPath());  // decoded from JSON: cannot happen
    compacted += *line;
  }
  if (Status s = internal::ReplaceFileDurably(m.dir, internal::kJournalTempFileName,
                                              internal::kJournalFileName, compacted);
      !s.ok()) {
    return s.error().WithContext("compacting the journal");
  }
  TOPOSCHED_ASSIGN_OR_RETURN(m.journal, internal::JournalWriter::Open(m.JournalPath()));
  m.loaded = true;
  store.SetSynced(true);
  return Status::Ok();
}

Status FileSource::RecordBind(const PodAllocation& allocation, const NodeRecord& /*node*/) {
  if (!impl_->journal) return Error("file source " + impl_->dir + ": bind before Load");
  TOPOSCHED_ASSIGN_OR_RETURN(const std::string line,
                             internal::EncodeJournalLine(internal::JournalOp::kBind, allocation));
  return impl_->journal->Append(line);
}

Status FileSource::RecordRelease(const PodAllocation& allocation) {
  if (!impl_->journal) return Error("file source " + impl_->dir + ": release before Load");
  TOPOSCHED_ASSIGN_OR_RETURN(const std::string line,
                             internal::EncodeJournalLine(internal::JournalOp::kRelease, allocation));
  return impl_->journal->Append(line);
}

std::size_t FileSource::node_count() const {
  return impl_->nodes.size();
}

const std::string& FileSource::dir() const {
  return impl_->dir;
}

const std::vector<std::string>& FileSource::warnings() const {
  return impl_->warnings;
}

}  // namespace toposched::state
