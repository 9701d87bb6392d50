// Mutation fuzzing of the file source's untrusted inputs: node documents and journal lines
// (and whole journals). Nothing may crash, leak or trip a sanitizer; what parses must satisfy the
// parsers' documented guarantees, and no journal line may oversubscribe a node.

#include <gtest/gtest.h>

#include "file_source_internal.h"
#include "journal.h"
#include "state_testing.h"
#include "testing/fuzz_driver.h"
#include "toposched/topology/json_codec.h"

namespace toposched::state {
namespace {

using testing::Allocation;
using testing::PresetNode;
using testing::PresetTopology;
using testing::RecordViolation;
using testing::Share;
using testing::Whole;

constexpr std::size_t kMaxDocumentBytes = 1u << 20;

TEST(StateFuzzTest, NodeDocuments) {
  const std::vector<std::string> seeds = {
      R"({"name": "gpu-a1", "preset": "hgx-h100-8gpu"})",
      R"({"name": "infer-0.rack-2", "labels": {"zone": "z1", "toposched.io/pool": "prefill"},
          "unschedulable": true, "preset": "inference-4gpu"})",
      R"({"name": "gpu-b", "topologyFile": "topologies/hgx.json", "labels": {}})",
      R"({"name": "gpu-c", "topology": )" + EncodeTopologyJson(*PresetTopology("inference-4gpu"), -1) + "}",
  };
  int parsed = 0;
  toposched::testing::RunFuzz(
      seeds,
      [&](std::string_view text) {
        const auto doc = internal::ParseNodeDocument(text, kMaxDocumentBytes);
        if (!doc.ok()) {
          EXPECT_FALSE(doc.error().message().empty());
          return;
        }
        ++parsed;
        // What the parser promises about anything it accepts.
        EXPECT_TRUE(internal::IsDns1123Subdomain(doc->name)) << doc->name;
        const int sources = static_cast<int>(doc->topology.has_value()) +
                            static_cast<int>(!doc->topology_file.empty()) +
                            static_cast<int>(!doc->preset.empty());
        EXPECT_EQ(sources, 1);
        EXPECT_FALSE(doc->topology_file.starts_with("/"));
        EXPECT_EQ(doc->topology_file.find(".."), std::string::npos);
      },
      4000);
  EXPECT_GE(parsed, static_cast<int>(seeds.size()));  // the seeds themselves parse
}

TEST(StateFuzzTest, JournalLines) {
  std::vector<std::string> seeds;
  auto add = [&](internal::JournalOp op, PodAllocation a) {
    a.worst_class = LinkClass::kNV;
    auto line = internal::EncodeJournalLine(op, a);
    ASSERT_TRUE(line.ok());
    line->pop_back();  // the '\n'
    seeds.push_back(*line);
  };
  add(internal::JournalOp::kBind, Allocation("u1", "n1", Whole({0, 1}, {0, 1})));
  add(internal::JournalOp::kBind, Allocation("u2", "n1", Share(3, 20000, 2500)));
  add(internal::JournalOp::kRelease, Allocation("u1", "n1", {}));
  ASSERT_EQ(seeds.size(), 3u);

  // Whatever decodes is restored into a real node: hostile device lists and share amounts must
  // be turned away by the capacity checks, never published.
  ClusterStore store(nullptr, StoreOptions{.max_shares_per_gpu = 4});
  ASSERT_TRUE(store.UpsertNode(PresetNode("n1", "hgx-h100-8gpu")).ok());
  int decoded = 0, restored = 0;
  toposched::testing::RunFuzz(
      seeds,
      [&](std::string_view line) {
        const auto checked = internal::DecodeJournalLine(line);  // mostly stops at the checksum
        const auto entry = internal::DecodeJournalLine(line, /*verify_checksum=*/false);
        if (checked.ok()) {
          EXPECT_TRUE(entry.ok());
        }
        if (!entry.ok()) return;
        ++decoded;
        PodAllocation a = entry->allocation;
        // Encoding what was decoded gives a line that decodes to the same entry.
        const auto again = internal::EncodeJournalLine(entry->op, a);
        ASSERT_TRUE(again.ok());
        const auto round = internal::DecodeJournalLine(std::string_view(*again).substr(0, again->size() - 1));
        ASSERT_TRUE(round.ok()) << round.error().message();
        EXPECT_EQ(round->allocation.uid, a.uid);
        if (entry->op == internal::JournalOp::kBind) {
          EXPECT_EQ(round->allocation, a);
        }
        if (entry->op != internal::JournalOp::kBind) return;
        a.node = "n1";
        if (store.Restore(a).ok()) {
          ++restored;
          EXPECT_EQ(RecordViolation(*store.snapshot()->Find("n1"), 4), "");
          ASSERT_TRUE(store.Release(a.uid).ok());
        }
        EXPECT_EQ(store.pod_count(), 0u);
      },
      20000);
  EXPECT_GT(decoded, 3);
  EXPECT_GT(restored, 0);
  EXPECT_EQ(store.snapshot()->Find("n1")->allocated, NodeAllocation{});
}

TEST(StateFuzzTest, WholeJournals) {
  std::string journal;
  for (const PodAllocation& a : {Allocation("u1", "n1", Whole({0})), Allocation("u2", "n1", Share(1, 100)),
                                 Allocation("u3", "n2", Whole({2}, {2}))}) {
    auto line = internal::EncodeJournalLine(internal::JournalOp::kBind, a);
    ASSERT_TRUE(line.ok());
    journal += *line;
  }
  auto release = internal::EncodeJournalLine(internal::JournalOp::kRelease, Allocation("u2", "n1", {}));
  ASSERT_TRUE(release.ok());
  journal += *release;
  const std::vector<std::string> seeds = {journal};
  const auto clean = internal::ReplayJournalText(journal, "j", 1u << 20);
  ASSERT_TRUE(clean.ok());
  ASSERT_EQ(clean->live.size(), 2u);  // u1, u3
  toposched::testing::RunFuzz(
      seeds,
      [&](std::string_view text) {
        const auto replay = internal::ReplayJournalText(text, "j", 4096);
        if (!replay.ok()) {
          EXPECT_TRUE(replay.error().message().starts_with("j:")) << replay.error().message();
          return;
        }
        // Replay dedupes: each UID at most once.
        std::set<std::string> uids;
        for (const PodAllocation& a : replay->live) EXPECT_TRUE(uids.insert(a.uid).second) << a.uid;
      },
      3000);
}

}  // namespace
}  // namespace toposched::state
