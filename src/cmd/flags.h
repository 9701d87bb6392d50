#pragma once
// The subcommands' flags, parsed by CLI11 with one syntax for every kind of value:
//
//   durations   500ms, 30s, 5m, 1h, 1m30s; a bare 0 (Go's time.ParseDuration, integers only)
//   quantities  16777216, 512Ki, 16Mi, 1Gi (binary), 64k, 16M, 1G (decimal): Kubernetes' forms
//   booleans    true|false (also 1|0, yes|no)
//   integers and numbers checked against their range; choices against their list
//
// `--flag value` and `--flag=value` both work; a flag given twice keeps the last value. The help
// (`--help`) is generated from the declarations, defaults included, so it cannot drift from what
// is parsed. Usage errors print "toposched <command>: <what> (see --help)" and exit 2.

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"

namespace toposched::cmd {

Result<std::chrono::milliseconds> ParseDuration(std::string_view text);
std::string FormatDuration(std::chrono::milliseconds d);  // the largest exact unit: 90000 -> 90s
Result<std::int64_t> ParseQuantity(std::string_view text);
Result<bool> ParseBoolValue(std::string_view text);

class FlagSet {
 public:
  // `usage`: the synopsis lines after "usage: "; `description`: what the command does (wrapped
  // by hand, printed as is).
  FlagSet(std::string command, std::string usage, std::string description);
  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;

  // Flags declared after this are listed under `title` in the help.
  void Group(std::string title) { group_ = std::move(title); }
  // Printed after the flags.
  void Footer(std::string text) { app_.footer(std::move(text)); }

  // Each declaration returns the CLI11 option (for ->count(), ->excludes(), ->default_str(...)).
  // Defaults shown in the help are the target's value at declaration; pass "" as `shown_default`
  // to say nothing, or a phrase when the default is computed.
  CLI::Option* Text(const std::string& name, std::string& out, const std::string& value_name,
                    const std::string& help);
  CLI::Option* Choice(const std::string& name, std::string& out, std::vector<std::string> choices,
                      const std::string& help);
  CLI::Option* Switch(const std::string& name, bool& out, const std::string& help);  // takes no value
  CLI::Option* Bool(const std::string& name, bool& out, const std::string& help);
  CLI::Option* Integer(const std::string& name, long long& out, long long lo, long long hi,
                       const std::string& value_name, const std::string& help);
  CLI::Option* Number(const std::string& name, double& out, double lo, double hi,
                      const std::string& value_name, const std::string& help);
  // `at_least`: the smallest duration accepted (0 allows "0").
  CLI::Option* Duration(const std::string& name, std::chrono::milliseconds& out,
                        std::chrono::milliseconds at_least, std::chrono::milliseconds at_most,
                        const std::string& help);
  CLI::Option* Quantity(const std::string& name, std::int64_t& out, std::int64_t lo, std::int64_t hi,
                        const std::string& help);

  // nullopt: parsed, go on. Otherwise the exit code: 0 after --help (printed on stdout), 2 after
  // a usage error (printed on stderr).
  std::optional<int> Parse(const std::vector<std::string>& args);
  // Prints "toposched <command>: <message> (see --help)" on stderr and returns 2.
  int UsageError(const std::string& message) const;
  std::string Help() const { return app_.help(); }
  bool Given(const CLI::Option* option) const { return option->count() > 0; }

 private:
  CLI::Option* Add(CLI::Option* option, const std::string& value_name, const std::string& shown_default);

  std::string command_;
  CLI::App app_;
  std::string group_ = "flags";
};

}  // namespace toposched::cmd
