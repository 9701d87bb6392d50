// The file source's journal (DIR/journal.jsonl): one line decoded with and without its CRC-32
// (DecodeJournalLine: the checksum would stop most mutants before the JSON), the whole text
// replayed (ReplayJournalText, as FileSource::Load does), and every allocation that decodes
// restored into a store holding one HGX node (ClusterStore::Restore, as the replay is applied).
// Invariants: a line that decodes re-encodes to the same entry; a Restore that fails changes
// nothing in the store; one that succeeds never oversubscribes the node.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "fuzz_check.h"
#include "fuzz_topology.h"
#include "journal.h"
#include "toposched/state/cluster_state.h"

namespace {

namespace state = toposched::state;

state::ClusterStore& Store() {
  static state::ClusterStore* store = [] {
    auto* s = new state::ClusterStore(nullptr, state::StoreOptions{.max_shares_per_gpu = 4});
    state::NodeSpec spec;
    spec.name = "n1";
    spec.topology = std::make_shared<const toposched::NodeTopology>(toposched::fuzz::HgxTopology());
    if (!s->UpsertNode(std::move(spec)).ok()) std::abort();
    return s;
  }();
  return *store;
}

void TryRestore(state::PodAllocation a) {
  state::ClusterStore& store = Store();
  a.node = "n1";
  const auto before = store.snapshot();
  const state::NodeRecord before_record = *before->Find("n1");
  const std::size_t before_pods = store.pod_count();
  if (!store.Restore(a).ok()) {
    const state::NodeRecord* after = store.snapshot()->Find("n1");
    FUZZ_CHECK(after->allocated == before_record.allocated);
    FUZZ_CHECK(after->pods == before_record.pods);
    FUZZ_CHECK(store.pod_count() == before_pods);
    return;
  }
  const state::NodeRecord* after = store.snapshot()->Find("n1");
  const auto& t = *after->topology;
  FUZZ_CHECK(after->allocated.gpu_exclusive.size() <= t.gpus.size());
  FUZZ_CHECK(after->allocated.nic_used.size() <= t.nics.size());
  for (std::size_t g = 0; g < after->allocated.gpu_shares.size(); ++g) {
    const auto& share = after->allocated.gpu_shares[g];
    FUZZ_CHECK(g < t.gpus.size());
    FUZZ_CHECK(share.shares <= 4);
    FUZZ_CHECK(share.memory_mib <= static_cast<std::int64_t>(t.gpus[g].memory_mib));
    FUZZ_CHECK(share.cores <= toposched::kFullGpuCores);
    FUZZ_CHECK(!(share.shares > 0 && g < after->allocated.gpu_exclusive.size() &&
                 after->allocated.gpu_exclusive[g]));
  }
  FUZZ_CHECK(store.Release(a.uid).ok());
  FUZZ_CHECK(store.pod_count() == before_pods);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace internal = state::internal;
  const std::string_view text = toposched::fuzz::AsText(data, size);

  const auto checked = internal::DecodeJournalLine(text);
  const auto entry = internal::DecodeJournalLine(text, /*verify_checksum=*/false);
  if (checked.ok()) FUZZ_CHECK(entry.ok());
  if (entry.ok()) {
    const auto line = internal::EncodeJournalLine(entry->op, entry->allocation);
    FUZZ_CHECK(line.ok());
    const auto round = internal::DecodeJournalLine(std::string_view(*line).substr(0, line->size() - 1));
    FUZZ_CHECK(round.ok());
    FUZZ_CHECK(round->op == entry->op);
    FUZZ_CHECK(round->allocation.uid == entry->allocation.uid);
    if (entry->op == internal::JournalOp::kBind) {
      FUZZ_CHECK(round->allocation == entry->allocation);
      TryRestore(entry->allocation);
    }
  }

  const auto replay = internal::ReplayJournalText(text, "journal.jsonl", 4096);
  if (replay.ok()) {
    for (const state::PodAllocation& a : replay->live) TryRestore(a);
  }
  return 0;
}
