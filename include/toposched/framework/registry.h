#pragma once
// The plugin registry: name -> factory, filled explicitly (no static self-registration, which
// static libraries may silently drop). toposched's own plugins are listed in one place,
// plugins/registry.cc (RegisterBuiltinPlugins); tests and out-of-tree builds add theirs.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/framework/plugin.h"

namespace toposched::framework {

inline constexpr int kMaxPluginWeight = 100;  // Score weights are 0..kMaxPluginWeight

// A plugin's arguments from config (`args:` of a plugin entry): flat string keys and values.
// Factories reject keys they do not know, naming them.
using PluginArgs = std::map<std::string, std::string>;
using PluginFactory = std::function<Result<std::unique_ptr<Plugin>>(const PluginArgs& args)>;

class Registry {
 public:
  // Adds `name`. Errors: empty name, null factory, a weight outside 0..kMaxPluginWeight, or a
  // name already registered (two plugins must never answer to one name).
  // `default_weight` is the Score weight a config gets when it names the plugin without one.
  Status Register(std::string name, PluginFactory factory, int default_weight = 1);

  bool Contains(std::string_view name) const;
  // Builds a plugin. Errors: unknown name (listing the known ones), the factory's own error
  // (bad args), or a plugin whose Name() differs from the registered name (a wiring bug).
  Result<std::unique_ptr<Plugin>> Create(std::string_view name, const PluginArgs& args) const;
  // The default weight of a registered plugin; 1 for unknown names.
  int DefaultWeight(std::string_view name) const;
  // Names in registration order: the order DefaultSchedulerConfig runs them in.
  std::vector<std::string> Names() const;

 private:
  struct Entry {
    std::string name;
    PluginFactory factory;
    int default_weight = 1;
  };
  const Entry* Find(std::string_view name) const;

  std::vector<Entry> entries_;  // registration order; a handful of entries, linear search
};

}  // namespace toposched::framework
