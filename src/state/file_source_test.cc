#include <gtest/gtest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "journal.h"
#include "state_testing.h"
#include "toposched/state/cluster_state.h"
#include "toposched/topology/json_codec.h"

namespace toposched::state {
namespace {

using testing::Allocation;
using testing::IndexViolation;
using testing::Lines;
using testing::PresetTopology;
using testing::ReadFile;
using testing::RecordViolation;
using testing::Share;
using testing::Take;
using testing::TempDir;
using testing::Whole;
using testing::WriteFile;

std::string PresetDoc(const std::string& name, const std::string& preset = "hgx-h100-8gpu") {
  return R"({"name": ")" + name + R"(", "preset": ")" + preset + R"("})";
}

// A cluster directory with `nodes` preset documents named gpu-0.. (8 GPUs, 8 RDMA NICs each).
class ClusterDir {
 public:
  explicit ClusterDir(int nodes = 2) {
    for (int i = 0; i < nodes; ++i) AddNode("gpu-" + std::to_string(i));
  }
  const std::string& path() const { return dir_.path(); }
  std::string File(const std::string& relative) const { return dir_.path() + "/" + relative; }
  std::string Journal() const { return File("allocations.journal"); }
  void AddNode(const std::string& name, const std::string& preset = "hgx-h100-8gpu") {
    WriteFile(File("nodes/" + name + ".json"), PresetDoc(name, preset));
  }

 private:
  TempDir dir_;
};

// An opened and loaded source with its store.
struct Loaded {
  std::unique_ptr<FileSource> source;
  std::unique_ptr<ClusterStore> store;
};

Result<Loaded> OpenAndLoad(const std::string& dir) {
  Loaded out;
  TOPOSCHED_ASSIGN_OR_RETURN(out.source, FileSource::Open(dir));
  out.store = std::make_unique<ClusterStore>(out.source.get());
  TOPOSCHED_RETURN_IF_ERROR(out.source->Load(*out.store));
  return out;
}

bool Contains(const std::vector<std::string>& v, std::string_view part) {
  for (const std::string& s : v) {
    if (s.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST(FileSourceTest, LoadsInlineFileAndPresetDocuments) {
  TempDir dir;
  const auto hgx = PresetTopology("hgx-h100-8gpu");
  const std::string hgx_json = EncodeTopologyJson(*hgx);
  WriteFile(dir.path() + "/nodes/a.json",
            R"({"name": "gpu-a", "labels": {"zone": "z1"}, "topology": )" + hgx_json + "}");
  WriteFile(dir.path() + "/topologies/hgx.json", hgx_json);
  WriteFile(dir.path() + "/nodes/b.json", R"({"name": "gpu-b", "topologyFile": "topologies/hgx.json"})");
  WriteFile(dir.path() + "/nodes/c.json", R"({"name": "gpu-c", "topologyFile": "./topologies//hgx.json"})");
  WriteFile(dir.path() + "/nodes/d.json",
            R"({"name": "infer-0.rack-2", "preset": "inference-4gpu", "unschedulable": true, "labels": {}})");
  WriteFile(dir.path() + "/nodes/README.md", "not a node");
  WriteFile(dir.path() + "/nodes/e.json.bak", "{not json");

  auto loaded = OpenAndLoad(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_EQ(loaded->source->node_count(), 4u);
  EXPECT_EQ(loaded->source->dir(), dir.path());
  EXPECT_TRUE(loaded->store->synced());
  const auto s = loaded->store->snapshot();
  ASSERT_EQ(s->size(), 4u);
  const NodeRecord* a = s->Find("gpu-a");
  const NodeRecord* b = s->Find("gpu-b");
  const NodeRecord* c = s->Find("gpu-c");
  const NodeRecord* d = s->Find("infer-0.rack-2");
  ASSERT_TRUE(a && b && c && d);
  EXPECT_EQ(a->labels, (std::map<std::string, std::string>{{"zone", "z1"}}));
  EXPECT_EQ(*a->topology, *hgx);        // the codec round-trips
  EXPECT_EQ(b->topology, c->topology);  // one file, parsed once, shared
  EXPECT_EQ(*b->topology, *hgx);
  EXPECT_EQ(a->topology_fingerprint, b->topology_fingerprint);
  EXPECT_EQ(d->topology->gpus.size(), 4u);
  EXPECT_FALSE(d->schedulable);
  EXPECT_TRUE(a->schedulable);
  EXPECT_TRUE(loaded->source->warnings().empty());
  // Load compacts into an (empty) journal.
  EXPECT_EQ(ReadFile(dir.path() + "/allocations.journal"), "");
}

TEST(FileSourceTest, BadDocumentsAreRefusedNamingTheFileAndTheField) {
  const std::string big_label(300, 'x');
  struct Case {
    const char* name;
    std::map<std::string, std::string> files;  // relative path -> content
    std::vector<std::string> want;             // parts of the message
    FileSourceOptions options = {};
  };
  const Case cases[] = {
      {"unknown key",
       {{"nodes/x.json", R"({"name":"a","preset":"hgx-h100-8gpu","colour":1})"}},
       {"nodes/x.json: unknown key \"colour\""}},
      {"missing name", {{"nodes/x.json", R"({"preset":"hgx-h100-8gpu"})"}}, {"nodes/x.json: name: required"}},
      {"name not a DNS subdomain",
       {{"nodes/x.json", R"({"name":"Bad_Name","preset":"hgx-h100-8gpu"})"}},
       {"nodes/x.json: name: expected a Kubernetes node name", "\"Bad_Name\""}},
      {"name too long",
       {{"nodes/x.json", R"({"name":")" + std::string(254, 'a') + R"(","preset":"hgx-h100-8gpu"})"}},
       {"nodes/x.json: name: expected"}},
      {"name not a string",
       {{"nodes/x.json", R"({"name":7,"preset":"hgx-h100-8gpu"})"}},
       {"nodes/x.json: name: expected", "got 7"}},
      {"labels not an object",
       {{"nodes/x.json", R"({"name":"a","labels":[],"preset":"hgx-h100-8gpu"})"}},
       {"nodes/x.json: labels: expected an object"}},
      {"label value not a string",
       {{"nodes/x.json", R"({"name":"a","labels":{"zone":3},"preset":"hgx-h100-8gpu"})"}},
       {"nodes/x.json: labels.zone: expected a string, got 3"}},
      {"unschedulable not a bool",
       {{"nodes/x.json", R"({"name":"a","unschedulable":"yes","preset":"hgx-h100-8gpu"})"}},
       {"nodes/x.json: unschedulable: expected true or false"}},
      {"no topology", {{"nodes/x.json", R"({"name":"a"})"}}, {"nodes/x.json: topology: required"}},
      {"two topologies",
       {{"nodes/x.json", R"({"name":"a","preset":"hgx-h100-8gpu","topologyFile":"t.json"})"}},
       {"nodes/x.json: ", "give exactly one"}},
      {"absolute topologyFile",
       {{"nodes/x.json", R"({"name":"a","topologyFile":"/etc/passwd"})"}},
       {"nodes/x.json: topologyFile: \"/etc/passwd\" is absolute"}},
      {"topologyFile outside the directory",
       {{"nodes/x.json", R"({"name":"a","topologyFile":"t/../../x.json"})"}},
       {"nodes/x.json: topologyFile: ", "leaves the cluster directory"}},
      {"missing topologyFile",
       {{"nodes/x.json", R"({"name":"a","topologyFile":"nope.json"})"}},
       {"nodes/x.json: topologyFile: ", "nope.json: cannot open"}},
      {"topologyFile not a topology",
       {{"nodes/x.json", R"({"name":"a","topologyFile":"t.json"})"}, {"t.json", R"({"kind":"Pod"})"}},
       {"nodes/x.json: topologyFile: ", "t.json: "}},
      {"unknown preset",
       {{"nodes/x.json", R"({"name":"a","preset":"dgx-9000"})"}},
       {"nodes/x.json: preset: unknown synthetic preset 'dgx-9000'"}},
      {"inline topology invalid",
       {{"nodes/x.json", R"({"name":"a","topology":{"kind":"NodeTopology"}})"}},
       {"nodes/x.json: topology: "}},
      {"inline topology not an object",
       {{"nodes/x.json", R"({"name":"a","topology":"hgx"})"}},
       {"nodes/x.json: topology: expected a NodeTopology object"}},
      {"not JSON", {{"nodes/x.json", R"({"name":"a",)"}}, {"nodes/x.json: not valid JSON"}},
      {"not an object", {{"nodes/x.json", "[1]"}}, {"nodes/x.json: document: expected a JSON object"}},
      {"too large",
       {{"nodes/x.json", R"({"name":"a","labels":{"k":")" + big_label + R"("},"preset":"hgx-h100-8gpu"})"}},
       {"nodes/x.json: larger than 200 bytes"},
       FileSourceOptions{.max_node_document_bytes = 200}},
      {"duplicate node names",
       {{"nodes/x.json", PresetDoc("gpu-a")}, {"nodes/y.json", PresetDoc("gpu-a")}},
       {"nodes/y.json: name: node \"gpu-a\" is already defined by ", "nodes/x.json"}},
      {"deep nesting",
       {{"nodes/x.json", R"({"name":"a","labels":)" + std::string(100, '[') + "}"}},
       {"nodes/x.json: not valid JSON: nested deeper than 33 levels"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    for (const auto& [path, text] : c.files) WriteFile(dir.path() + "/" + path, text);
    const auto source = FileSource::Open(dir.path(), c.options);
    ASSERT_FALSE(source.ok());
    const std::string& message = source.error().message();
    EXPECT_TRUE(message.starts_with(dir.path() + "/nodes/")) << message;
    for (const std::string& part : c.want) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

TEST(FileSourceTest, MissingDirectoriesAreErrors) {
  TempDir dir;
  const auto missing = FileSource::Open(dir.path() + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("nope"), std::string::npos);
  const auto no_nodes = FileSource::Open(dir.path());
  ASSERT_FALSE(no_nodes.ok());
  EXPECT_NE(no_nodes.error().message().find("/nodes: not a directory"), std::string::npos)
      << no_nodes.error().message();
  std::filesystem::create_directories(dir.path() + "/nodes");
  auto empty = FileSource::Open(dir.path());
  ASSERT_TRUE(empty.ok()) << empty.error().message();
  EXPECT_EQ((*empty)->node_count(), 0u);
  EXPECT_TRUE(Contains((*empty)->warnings(), "no node documents"));
}

TEST(FileSourceTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  TempDir dir;
  WriteFile(dir.path() + "/nodes/x.json", R"({"name":"a","topologyFile":"pipe.json"})");
  ASSERT_EQ(::mkfifo((dir.path() + "/pipe.json").c_str(), 0644), 0);
  const auto source = FileSource::Open(dir.path());
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.error().message().find("pipe.json: not a regular file"), std::string::npos)
      << source.error().message();
}

TEST(FileSourceTest, ASecondOpenOfALockedDirectoryFails) {
  ClusterDir dir;
  auto first = FileSource::Open(dir.path());
  ASSERT_TRUE(first.ok());
  const auto second = FileSource::Open(dir.path());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message().find("is in use"), std::string::npos) << second.error().message();
  EXPECT_NE(second.error().message().find(dir.path() + "/.lock"), std::string::npos);
  first.value().reset();  // closing releases the lock
  EXPECT_TRUE(FileSource::Open(dir.path()).ok());
}

TEST(FileSourceTest, BindAndReleaseAreJournaledBeforeTheyReturn) {
  ClusterDir dir;
  auto loaded = OpenAndLoad(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  ClusterStore& store = *loaded->store;
  const auto bound = store.Bind("gpu-0", "uid-1", Take(Whole({0, 1}, {0}), LinkClass::kNV));
  ASSERT_TRUE(bound.ok()) << bound.error().message();
  std::vector<std::string> lines = Lines(ReadFile(dir.Journal()));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(ReadFile(dir.Journal()).ends_with("\n"));
  auto entry = internal::DecodeJournalLine(lines[0]);
  ASSERT_TRUE(entry.ok()) << entry.error().message();
  EXPECT_EQ(entry->op, internal::JournalOp::kBind);
  EXPECT_EQ(entry->allocation, bound->allocation);

  ASSERT_TRUE(store.Release("uid-1").ok());
  lines = Lines(ReadFile(dir.Journal()));
  ASSERT_EQ(lines.size(), 2u);
  entry = internal::DecodeJournalLine(lines[1]);
  ASSERT_TRUE(entry.ok()) << entry.error().message();
  EXPECT_EQ(entry->op, internal::JournalOp::kRelease);
  EXPECT_EQ(entry->allocation.uid, "uid-1");
  EXPECT_EQ(entry->allocation.node, "gpu-0");
}

TEST(FileSourceTest, RecordBeforeLoadIsAnError) {
  ClusterDir dir;
  auto source = FileSource::Open(dir.path());
  ASSERT_TRUE(source.ok());
  EXPECT_FALSE((*source)->RecordBind(Allocation("u", "gpu-0", Whole({0})), NodeRecord{}).ok());
  EXPECT_FALSE((*source)->RecordRelease(Allocation("u", "gpu-0", Whole({0}))).ok());
  ClusterStore store(source->get());
  ASSERT_TRUE((*source)->Load(store).ok());
  EXPECT_FALSE((*source)->Load(store).ok());  // once
}

TEST(FileSourceTest, AReopenReplaysBindsAndReleasesAndCompacts) {
  ClusterDir dir;
  std::map<std::string, PodAllocation> live;
  std::vector<NodeRecord> records;
  {
    auto loaded = OpenAndLoad(dir.path());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message();
    ClusterStore& store = *loaded->store;
    const std::pair<std::string, framework::AllocationDelta> pods[] = {
        {"whole", Whole({0, 1}, {0, 1})},    {"shared-1", Share(2, 20000, 2500)},
        {"shared-2", Share(2, 20000, 2500)}, {"gone-1", Whole({3})},
        {"gone-2", Whole({4}, {4})},
    };
    for (const auto& [uid, delta] : pods) {
      const auto bound = store.Bind(uid.starts_with("shared-2") ? "gpu-1" : "gpu-0", uid, Take(delta));
      ASSERT_TRUE(bound.ok()) << bound.error().message();
      live[uid] = bound->allocation;
    }
    for (const char* uid : {"gone-1", "gone-2"}) {
      ASSERT_TRUE(store.Release(uid).ok());
      live.erase(uid);
    }
    EXPECT_EQ(Lines(ReadFile(dir.Journal())).size(), 7u);  // 5 binds, 2 releases
    for (const auto& r : store.snapshot()->nodes()) records.push_back(*r);
  }
  auto loaded = OpenAndLoad(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_TRUE(loaded->source->warnings().empty()) << loaded->source->warnings()[0];
  ClusterStore& store = *loaded->store;
  EXPECT_EQ(store.pod_count(), live.size());
  for (const auto& [uid, allocation] : live) EXPECT_EQ(store.FindPod(uid), allocation) << uid;
  EXPECT_FALSE(store.FindPod("gone-1").has_value());
  for (const NodeRecord& before : records) {
    const NodeRecord* after = store.snapshot()->Find(before.name);
    ASSERT_NE(after, nullptr);
    EXPECT_EQ(after->allocated, before.allocated) << before.name;
    EXPECT_EQ(after->pods, before.pods) << before.name;
    EXPECT_EQ(after->class_key, before.class_key) << before.name;
  }
  // Compacted: one bind line per live pod, nothing else.
  const std::vector<std::string> lines = Lines(ReadFile(dir.Journal()));
  ASSERT_EQ(lines.size(), live.size());
  std::set<std::string> journaled;
  for (const std::string& line : lines) {
    const auto entry = internal::DecodeJournalLine(line);
    ASSERT_TRUE(entry.ok()) << entry.error().message();
    EXPECT_EQ(entry->op, internal::JournalOp::kBind);
    EXPECT_EQ(entry->allocation, live.at(entry->allocation.uid));
    journaled.insert(entry->allocation.uid);
  }
  EXPECT_EQ(journaled.size(), live.size());
  EXPECT_FALSE(std::filesystem::exists(dir.File("allocations.journal.tmp")));
  // New binds append to the compacted journal and survive the next reopen.
  ASSERT_TRUE(store.Bind("gpu-1", "late", Take(Whole({7}))).ok());
  loaded.value() = {};
  auto again = OpenAndLoad(dir.path());
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(again->store->pod_count(), live.size() + 1);
  EXPECT_TRUE(again->store->FindPod("late").has_value());
}

std::string BindLine(const std::string& uid, const std::string& node, framework::AllocationDelta delta) {
  auto line =
      internal::EncodeJournalLine(internal::JournalOp::kBind, Allocation(uid, node, std::move(delta)));
  return line.ok() ? *line : std::string();
}

TEST(FileSourceTest, ATornLastLineIsDroppedAndCutAway) {
  const std::string good = BindLine("kept", "gpu-0", Whole({0}));
  const std::string last = BindLine("torn", "gpu-0", Whole({1}));
  std::string bad_crc = last;
  bad_crc[bad_crc.find("\"crc\":\"") + 7] ^= 1;  // one checksum digit
  struct Case {
    const char* name;
    std::string tail;
    std::string want_warning;
  };
  const Case cases[] = {
      {"cut mid-line", last.substr(0, last.size() / 2), "torn last line"},
      {"cut just before the newline", last.substr(0, last.size() - 1), "torn last line"},
      {"zeros from a lost write", std::string(64, '\0'), "torn last line"},
      {"checksum mismatch on the last line", bad_crc, "checksum mismatch"},
      {"garbage last line with a newline", "{\"op\":\"bi\n", "bad last line"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ClusterDir dir;
    WriteFile(dir.Journal(), good + c.tail);
    auto loaded = OpenAndLoad(dir.path());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message();
    EXPECT_TRUE(Contains(loaded->source->warnings(), c.want_warning));
    EXPECT_TRUE(Contains(loaded->source->warnings(), "allocations.journal:2"));
    EXPECT_TRUE(loaded->store->FindPod("kept").has_value());
    EXPECT_FALSE(loaded->store->FindPod("torn").has_value());
    EXPECT_EQ(loaded->store->pod_count(), 1u);
    EXPECT_EQ(ReadFile(dir.Journal()), good);  // the tail is gone from the file
  }
}

TEST(FileSourceTest, ACorruptLineInTheMiddleRefusesToStart) {
  const std::string first = BindLine("a", "gpu-0", Whole({0}));
  const std::string second = BindLine("b", "gpu-0", Whole({1}));
  const std::string third = BindLine("c", "gpu-0", Whole({2}));
  std::string flipped = second;
  flipped[flipped.find("\"gpus\":[") + 8] = '5';  // payload changed, checksum not
  struct Case {
    const char* name;
    std::string middle;
    std::string want;
  };
  const Case cases[] = {
      {"payload changed under its checksum", flipped, "checksum mismatch"},
      {"line without a checksum", "{\"op\":\"bind\"}\n", "does not end with its \"crc\" field"},
      {"empty line", "\n", "empty line"},
      {"torn line followed by more", second.substr(0, 20) + "\n", "does not end with its \"crc\" field"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ClusterDir dir;
    const std::string journal = first + c.middle + third;
    WriteFile(dir.Journal(), journal);
    const auto loaded = OpenAndLoad(dir.path());
    ASSERT_FALSE(loaded.ok());
    const std::string& message = loaded.error().message();
    EXPECT_TRUE(message.starts_with(dir.Journal() + ":2: ")) << message;
    EXPECT_NE(message.find(c.want), std::string::npos) << message;
    EXPECT_NE(message.find("refusing to start"), std::string::npos) << message;
    EXPECT_EQ(ReadFile(dir.Journal()), journal);  // untouched
  }
}

TEST(FileSourceTest, AnOverlongJournalLineIsBoundedAndRefused) {
  ClusterDir dir;
  const std::string first = BindLine("a", "gpu-0", Whole({0}));
  WriteFile(dir.Journal(), first + std::string(5000, 'x') + "\n" + first);
  auto source = FileSource::Open(dir.path(), FileSourceOptions{.max_journal_line_bytes = 1024});
  ASSERT_TRUE(source.ok());
  ClusterStore store(source->get());
  const Status s = (*source)->Load(store);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find(":2: line longer than 1024 bytes"), std::string::npos)
      << s.error().message();
}

// A removed node's pods are dropped (nothing can be placed there); a pod whose devices the
// node no longer has is held: the node takes no new placements (fail closed), the line stays in
// the journal, and a node document that has the device again restores it.
TEST(FileSourceTest, AJournaledPodOnARemovedNodeIsDroppedAndOneThatNoLongerFitsIsHeld) {
  ClusterDir dir(3);
  {
    auto loaded = OpenAndLoad(dir.path());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message();
    ASSERT_TRUE(loaded->store->Bind("gpu-0", "stays", Take(Whole({0}))).ok());
    ASSERT_TRUE(loaded->store->Bind("gpu-2", "orphan", Take(Whole({0}))).ok());
    ASSERT_TRUE(loaded->store->Bind("gpu-1", "misfit", Take(Whole({7}))).ok());
  }
  std::filesystem::remove(dir.File("nodes/gpu-2.json"));
  dir.AddNode("gpu-1", "inference-4gpu");  // 4 GPUs now: GPU7 is gone
  {
    auto loaded = OpenAndLoad(dir.path());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message();
    const auto& warnings = loaded->source->warnings();
    EXPECT_TRUE(Contains(warnings,
                         "dropped the allocation of pod default/pod (uid orphan) on node gpu-2: "
                         "unknown node gpu-2"));
    EXPECT_TRUE(Contains(warnings, "held the allocation of pod default/pod (uid misfit)"));
    EXPECT_TRUE(Contains(warnings, "node gpu-1: GPU index 7 out of range"));
    EXPECT_TRUE(loaded->store->FindPod("stays").has_value());
    EXPECT_FALSE(loaded->store->FindPod("orphan").has_value());
    ASSERT_TRUE(loaded->store->FindPod("misfit").has_value());
    EXPECT_FALSE(loaded->store->FindPod("misfit")->hold.empty());
    EXPECT_TRUE(loaded->store->snapshot()->Find("gpu-1")->held());
    EXPECT_FALSE(loaded->store->snapshot()->Find("gpu-0")->held());
    // Released only by the pod's end, not by a persisted release (a scheduler's deallocate).
    EXPECT_FALSE(loaded->store->Release("misfit").ok());
    EXPECT_EQ(Lines(ReadFile(dir.Journal())).size(), 2u);  // the orphan forgotten, the misfit kept
  }
  dir.AddNode("gpu-2");
  dir.AddNode("gpu-1");  // the 8-GPU document again: GPU7 is back
  auto loaded = OpenAndLoad(dir.path());
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE(loaded->source->warnings().empty());
  EXPECT_FALSE(loaded->store->FindPod("orphan").has_value());
  ASSERT_TRUE(loaded->store->FindPod("misfit").has_value());
  EXPECT_TRUE(loaded->store->FindPod("misfit")->hold.empty());
  EXPECT_FALSE(loaded->store->snapshot()->Find("gpu-1")->held());
}

// A child process binds until the journal cannot grow (RLIMIT_FSIZE): the short write must be
// cut back off the journal and the bind fail with nothing changed; later binds still work.
TEST(FileSourceTest, AFailedAppendIsCutBackAndTheBindFails) {
  ClusterDir dir;
  {
    auto loaded = OpenAndLoad(dir.path());
    ASSERT_TRUE(loaded.ok());
  }
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto loaded = OpenAndLoad(dir.path());
    if (!loaded.ok()) ::_exit(10);
    ClusterStore& store = *loaded->store;
    if (!store.Bind("gpu-0", "first", Take(Whole({0}))).ok()) ::_exit(11);
    const auto size = static_cast<rlim_t>(std::filesystem::file_size(dir.Journal()));
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit {};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    const rlim_t saved = limit.rlim_cur;
    limit.rlim_cur = size + 40;  // room for part of a line
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(12);
    const auto before = store.snapshot();
    if (store.Bind("gpu-0", "refused", Take(Whole({1}))).ok()) ::_exit(13);
    if (store.snapshot() != before || store.FindPod("refused").has_value()) ::_exit(14);
    if (std::filesystem::file_size(dir.Journal()) != size) ::_exit(15);  // cut back
    limit.rlim_cur = saved;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(16);
    if (!store.Bind("gpu-0", "third", Take(Whole({1}))).ok()) ::_exit(17);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto loaded = OpenAndLoad(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_TRUE(loaded->source->warnings().empty());
  EXPECT_TRUE(loaded->store->FindPod("first").has_value());
  EXPECT_TRUE(loaded->store->FindPod("third").has_value());
  EXPECT_FALSE(loaded->store->FindPod("refused").has_value());
}

// ---- crash test ----

// Binds and releases forever on 4 threads, reporting on `fd`: "b UID" before a bind, "B UID"
// after it returned OK, "r UID" before a release, "R UID" after it returned OK.
[[noreturn]] void BindUntilKilled(const std::string& dir, int fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto source = FileSource::Open(dir);
  if (!source.ok()) ::_exit(10);
  ClusterStore store(source->get(), StoreOptions{.max_shares_per_gpu = 4});
  if (!(*source)->Load(store).ok()) ::_exit(11);
  auto report = [fd](char what, const std::string& uid) {
    const std::string line = std::string(1, what) + " " + uid + "\n";  // < PIPE_BUF: atomic
    if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) ::_exit(12);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::deque<std::string> mine;
      for (int i = 0;; ++i) {
        const std::string uid = "t" + std::to_string(t) + "-" + std::to_string(i);
        const std::string node = "gpu-" + std::to_string(i % 4);
        // Whole GPUs on even pods, a vGPU on odd ones: the first free devices the record shows.
        auto decide = [i](const NodeRecord& r) -> Result<PodAllocation> {
          PodAllocation a;
          for (int g = 0; g < 8; ++g) {
            const GpuShareUsage u = GpuShares(r.allocated, g);
            if (i % 2 == 0 && GpuFree(r.allocated, g)) {
              a.delta.exclusive_gpus.push_back(g);
              return a;
            }
            if (i % 2 == 1 && !GpuExclusive(r.allocated, g) && u.shares < 4) {
              a.delta.shares.emplace_back(g, GpuShareUsage{1, 10000, 2000});
              return a;
            }
          }
          return Error("full");
        };
        report('b', uid);
        const auto bound = store.Bind(node, uid, decide);
        if (bound.ok()) {
          report('B', uid);
          mine.push_back(uid);
        }
        if (!bound.ok() || mine.size() > 6) {
          if (mine.empty()) continue;
          report('r', mine.front());
          const auto released = store.Release(mine.front());
          if (!released.ok() || !released->has_value()) ::_exit(13);
          report('R', mine.front());
          mine.pop_front();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ::_exit(14);
}

TEST(FileSourceCrashTest, EveryAcknowledgedBindSurvivesAKill) {
  ClusterDir dir(4);
  {
    auto loaded = OpenAndLoad(dir.path());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  }
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();  // the test process has no other threads here
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    BindUntilKilled(dir.path(), fds[1]);
  }
  ::close(fds[1]);
  struct Reaper {
    explicit Reaper(pid_t child) : pid(child) {}
    pid_t pid;
    ~Reaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  };
  std::optional<Reaper> reaper;
  reaper.emplace(pid);

  std::map<std::string, char> last_event;  // uid -> last of b, B, r, R
  std::string buffer;
  std::size_t events = 0, acknowledged = 0;
  auto consume = [&](bool until_eof) {
    char block[4096];
    while (until_eof || acknowledged < 300) {
      const ssize_t n = ::read(fds[0], block, sizeof block);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      buffer.append(block, static_cast<std::size_t>(n));
      for (std::size_t nl = buffer.find('\n'); nl != std::string::npos; nl = buffer.find('\n')) {
        const std::string line = buffer.substr(0, nl);
        buffer.erase(0, nl + 1);
        ++events;
        if (line[0] == 'B' || line[0] == 'R') ++acknowledged;
        last_event[line.substr(2)] = line[0];
      }
    }
  };
  consume(false);
  ASSERT_GE(acknowledged, 300u) << "the child stopped early";
  reaper.reset();  // SIGKILL mid-run
  consume(true);   // what it acknowledged before dying is still in the pipe
  ::close(fds[0]);

  auto loaded = OpenAndLoad(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  const ClusterStore& store = *loaded->store;
  std::size_t acked_bound = 0;
  for (const auto& [uid, event] : last_event) {
    const bool bound = store.FindPod(uid).has_value();
    if (event == 'B') {
      EXPECT_TRUE(bound) << uid << ": bind acknowledged, lost";
      ++acked_bound;
    }
    if (event == 'R') {
      EXPECT_FALSE(bound) << uid << ": release acknowledged, bound again";
    }
  }
  // Anything else bound was in flight (its "b" or "r" was the last report): at most one per thread.
  EXPECT_LE(store.pod_count(), acked_bound + 4);
  for (const auto& r : store.snapshot()->nodes()) {
    EXPECT_EQ(RecordViolation(*r, 4), "");
    for (const std::string& uid : r->pods) EXPECT_TRUE(last_event.contains(uid)) << uid << " was never bound";
  }
  EXPECT_EQ(IndexViolation(store), "");
  EXPECT_GT(events, 300u);
}

}  // namespace
}  // namespace toposched::state
