#include "toposched/framework/registry.h"

#include <string>
#include <utility>

namespace toposched::framework {

Status Registry::Register(std::string name, PluginFactory factory, int default_weight) {
  if (name.empty()) return Error("plugin registry: empty plugin name");
  if (!factory) return Error("plugin registry: " + name + ": null factory");
  if (default_weight < 0 || default_weight > kMaxPluginWeight) {
    return Error("plugin registry: " + name + ": default weight " + std::to_string(default_weight) +
                 " is out of range 0.." + std::to_string(kMaxPluginWeight));
  }
  if (Find(name) != nullptr) return Error("plugin registry: " + name + " is registered twice");
  entries_.push_back(Entry{std::move(name), std::move(factory), default_weight});
  return Status::Ok();
}

const Registry::Entry* Registry::Find(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

bool Registry::Contains(std::string_view name) const {
  return Find(name) != nullptr;
}

int Registry::DefaultWeight(std::string_view name) const {
  const Entry* e = Find(name);
  return e == nullptr ? 1 : e->default_weight;
}

std::vector<std::string> Registry::Names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const Entry& e : entries_) names.push_back(e.name);
  return names;
}

Result<std::unique_ptr<Plugin>> Registry::Create(std::string_view name, const PluginArgs& args) const {
  const Entry* e = Find(name);
  if (e == nullptr) {
    std::string known;
    for (const Entry& entry : entries_) known += (known.empty() ? "" : ", ") + entry.name;
    return Error("unknown plugin \"" + std::string(name) + "\" (known: " + known + ")");
  }
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::unique_ptr<Plugin> plugin, e->factory(args), e->name);
  if (plugin == nullptr) return Error(e->name + ": factory returned no plugin");
  if (plugin->Name() != e->name) {
    return Error(e->name + ": factory built a plugin named \"" + std::string(plugin->Name()) + "\"");
  }
  return plugin;
}

}  // namespace toposched::framework
