#pragma once
// Fake plugins for framework tests: fixed answers, and a shared log where the order of calls is
// the behaviour under test (reserve rollback).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"

namespace toposched::testing {

class FakeFilter final : public framework::FilterPlugin {
 public:
  FakeFilter(std::string name, framework::PluginStatus status)
      : name_(std::move(name)), status_(std::move(status)) {}
  std::string_view Name() const override { return name_; }
  framework::PluginStatus Filter(framework::CycleState&, const framework::NodeInfo&) const override {
    return status_;
  }

 private:
  std::string name_;
  framework::PluginStatus status_;
};

class FakeScore final : public framework::ScorePlugin {
 public:
  // `counted` false: a plugin that does not apply to the pod (ScoreResult::counted).
  // `reads_cluster`: declares ScorePlugin::ReadsCluster.
  FakeScore(std::string name, int score, bool counted = true, bool reads_cluster = false)
      : name_(std::move(name)), score_(score), counted_(counted), reads_cluster_(reads_cluster) {}
  std::string_view Name() const override { return name_; }
  framework::ScoreResult Score(framework::CycleState&, const framework::NodeInfo&) const override {
    return {score_, name_ + " says " + std::to_string(score_), counted_};
  }
  bool ReadsCluster() const override { return reads_cluster_; }

 private:
  std::string name_;
  int score_;
  bool counted_ = true;
  bool reads_cluster_ = false;
};

// Reserve marks node.labels[name] = "reserved" (unless it fails); Unreserve removes the mark.
// Every call is appended to `log` as "reserve NAME" / "unreserve NAME".
class FakeReserve final : public framework::ReservePlugin {
 public:
  FakeReserve(std::string name, framework::PluginStatus status, std::shared_ptr<std::vector<std::string>> log)
      : name_(std::move(name)), status_(std::move(status)), log_(std::move(log)) {}
  std::string_view Name() const override { return name_; }
  framework::PluginStatus Reserve(framework::CycleState&, framework::NodeInfo& node) const override {
    log_->push_back("reserve " + name_);
    if (status_.ok()) node.labels[name_] = "reserved";
    return status_;
  }
  void Unreserve(framework::CycleState&, framework::NodeInfo& node) const override {
    log_->push_back("unreserve " + name_);
    node.labels.erase(name_);
  }

 private:
  std::string name_;
  framework::PluginStatus status_;
  std::shared_ptr<std::vector<std::string>> log_;
};

// Factory helpers. Each rejects args unless `accepted_arg` names the one key it accepts.
template <typename P, typename... Args>
framework::PluginFactory FakeFactory(Args... args) {
  return [=](const framework::PluginArgs& plugin_args) -> Result<std::unique_ptr<framework::Plugin>> {
    if (!plugin_args.empty()) return Error("unknown arg \"" + plugin_args.begin()->first + "\"");
    return std::unique_ptr<framework::Plugin>(std::make_unique<P>(args...));
  };
}

}  // namespace toposched::testing
