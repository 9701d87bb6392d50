// The scheduler configuration (serve/place/simulate --config, the chart's config.yaml):
// LoadSchedulerConfigYaml with the built-in plugin registry, then Framework::Create, as
// `toposched serve` does at start. A bad config must be refused with an error, never crash.

#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "plugins/registry.h"
#include "toposched/framework/config.h"
#include "toposched/framework/framework.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace framework = toposched::framework;
  static const framework::Registry registry = toposched::plugins::BuiltinRegistry();
  const auto config = framework::LoadSchedulerConfigYaml(toposched::fuzz::AsText(data, size), registry);
  if (!config.ok()) {
    FUZZ_CHECK(!config.error().message().empty());
    return 0;
  }
  (void)framework::Framework::Create(*config, registry);
  return 0;
}
