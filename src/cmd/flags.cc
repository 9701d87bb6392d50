#include "flags.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <variant>

#include "toposched/common/quantity.h"

namespace toposched::cmd {

namespace {

// Help: "usage: ..." first, then what the command does, then the flags by group with each
// flag's value name and default, then the footer. CLI11's own layout puts the description
// first and "=default" after the type, which reads worse for long descriptions.
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter(std::string usage, std::string description)
      : usage_(std::move(usage)), description_(std::move(description)) {
    column_width(26);
  }

  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode mode) const override {
    std::ostringstream out;
    out << "usage: " << usage_ << "\n";
    if (!description_.empty()) out << "\n" << description_ << (description_.back() == '\n' ? "" : "\n");
    out << "\n" << make_groups(app, mode);
    if (!app->get_footer().empty()) out << "\n" << app->get_footer() << "\n";
    return out.str();
  }

  // CLI11 separates groups with a blank line of its own; no second one here.
  std::string make_group(std::string group, bool positional,
                         std::vector<const CLI::Option*> opts) const override {
    std::string out = group + ":\n";
    for (const CLI::Option* opt : opts) out += make_option(opt, positional);
    return out;
  }

  std::string make_option_opts(const CLI::Option* opt) const override {
    return opt->get_option_text().empty() ? "" : " " + opt->get_option_text();
  }

  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string desc = opt->get_description();
    if (!opt->get_default_str().empty()) {
      desc += (desc.empty() ? "(default " : " (default ") + opt->get_default_str() + ")";
    }
    return desc;
  }

 private:
  std::string usage_, description_;
};

std::string Quoted(std::string_view v) {
  return "'" + std::string(v) + "'";
}

std::string Join(const std::vector<std::string>& items, std::string_view last_sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? std::string(last_sep) : ", ";
    out += items[i];
  }
  return out;
}

std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A usage error of a flag's value: thrown from an option's callback, caught in Parse().
[[noreturn]] void Reject(const std::string& message) {
  throw CLI::ValidationError(message);
}

}  // namespace

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  if (text == "0") return std::chrono::milliseconds(0);
  if (text.empty()) return Error("empty duration");
  constexpr std::int64_t kMaxMs = 366LL * 24 * 3600 * 1000;
  std::int64_t total = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
    if (ec != std::errc() || n < 0 || end == rest.data()) return Error("not a duration");
    rest.remove_prefix(static_cast<std::size_t>(end - rest.data()));
    std::int64_t unit_ms = 0;
    if (rest.starts_with("ms")) {
      unit_ms = 1;
      rest.remove_prefix(2);
    } else if (rest.starts_with("s")) {
      unit_ms = 1000;
      rest.remove_prefix(1);
    } else if (rest.starts_with("m")) {
      unit_ms = 60'000;
      rest.remove_prefix(1);
    } else if (rest.starts_with("h")) {
      unit_ms = 3'600'000;
      rest.remove_prefix(1);
    } else {
      return Error("not a duration");  // a number without a unit: 30 is not 30s
    }
    if (n > kMaxMs / unit_ms || total > kMaxMs - n * unit_ms) return Error("longer than a year");
    total += n * unit_ms;
  }
  return std::chrono::milliseconds(total);
}

std::string FormatDuration(std::chrono::milliseconds d) {
  const std::int64_t ms = d.count();
  if (ms == 0) return "0";
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

// A size flag is a Kubernetes quantity, read by the parser pod resources use.
Result<std::int64_t> ParseQuantity(std::string_view text) {
  const std::variant<Quantity, std::string> q = ::toposched::ParseQuantity(text);
  if (const auto* why = std::get_if<std::string>(&q)) return Error(*why);
  return std::get<Quantity>(q).value;
}

Result<bool> ParseBoolValue(std::string_view text) {
  if (text == "true" || text == "1" || text == "yes") return true;
  if (text == "false" || text == "0" || text == "no") return false;
  return Error("not a boolean");
}

FlagSet::FlagSet(std::string command, std::string usage, std::string description)
    : command_(std::move(command)), app_("", "toposched " + command_) {
  app_.formatter(std::make_shared<HelpFormatter>(std::move(usage), std::move(description)));
  app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app_.set_help_flag();  // declared last, in Parse(), so that it is listed last
}

CLI::Option* FlagSet::Add(CLI::Option* option, const std::string& value_name,
                          const std::string& shown_default) {
  option->group(group_);
  option->option_text(value_name);
  option->default_str(shown_default);
  return option;
}

CLI::Option* FlagSet::Text(const std::string& name, std::string& out, const std::string& value_name,
                           const std::string& help) {
  auto* option = app_.add_option_function<std::string>(
      name,
      [&out, name](const std::string& v) {
        if (v.empty()) Reject(name + " needs a value");
        out = v;
      },
      help);
  return Add(option, value_name, out);
}

CLI::Option* FlagSet::Choice(const std::string& name, std::string& out, std::vector<std::string> choices,
                             const std::string& help) {
  std::string bar;
  for (const std::string& c : choices) bar += (bar.empty() ? "" : "|") + c;
  auto* option = app_.add_option_function<std::string>(
      name,
      [&out, name, choices](const std::string& v) {
        for (const std::string& c : choices) {
          if (v == c) {
            out = v;
            return;
          }
        }
        Reject(name + " must be " + (choices.size() == 2 ? "" : "one of ") +
               Join(choices, choices.size() == 2 ? " or " : ", ") + ", not " + Quoted(v));
      },
      help);
  return Add(option, bar, out);
}

CLI::Option* FlagSet::Switch(const std::string& name, bool& out, const std::string& help) {
  return Add(app_.add_flag(name, out, help), "", "");
}

CLI::Option* FlagSet::Bool(const std::string& name, bool& out, const std::string& help) {
  auto* option = app_.add_option_function<std::string>(
      name,
      [&out, name](const std::string& v) {
        auto b = ParseBoolValue(v);
        if (!b.ok()) Reject(name + " must be true or false, not " + Quoted(v));
        out = *b;
      },
      help);
  return Add(option, "true|false", out ? "true" : "false");
}

CLI::Option* FlagSet::Integer(const std::string& name, long long& out, long long lo, long long hi,
                              const std::string& value_name, const std::string& help) {
  auto* option = app_.add_option_function<std::string>(
      name,
      [&out, name, lo, hi](const std::string& v) {
        long long n = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec != std::errc() || end != v.data() + v.size() || n < lo || n > hi) {
          Reject(name + ": " + Quoted(v) + " is not an integer in " + std::to_string(lo) + ".." +
                 std::to_string(hi));
        }
        out = n;
      },
      help);
  return Add(option, value_name, std::to_string(out));
}

CLI::Option* FlagSet::Number(const std::string& name, double& out, double lo, double hi,
                             const std::string& value_name, const std::string& help) {
  auto* option = app_.add_option_function<std::string>(
      name,
      [&out, name, lo, hi](const std::string& v) {
        double x = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        if (ec != std::errc() || end != v.data() + v.size() || !std::isfinite(x) || x < lo || x > hi) {
          Reject(name + ": " + Quoted(v) + " is not a number in " + FormatNumber(lo) + ".." +
                 FormatNumber(hi));
        }
        out = x;
      },
      help);
  return Add(option, value_name, FormatNumber(out));
}

CLI::Option* FlagSet::Duration(const std::string& name, std::chrono::milliseconds& out,
                               std::chrono::milliseconds at_least, std::chrono::milliseconds at_most,
                               const std::string& help) {
  auto* option = app_.add_option_function<std::string>(
      name,
      [&out, name, at_least, at_most](const std::string& v) {
        auto d = ParseDuration(v);
        if (!d.ok()) Reject(name + ": " + Quoted(v) + " is not a duration like 500ms, 30s, 5m, 1h or 1m30s");
        if (*d < at_least || *d > at_most) {
          Reject(name + ": " + Quoted(v) + " is not in " + FormatDuration(at_least) + ".." +
                 FormatDuration(at_most));
        }
        out = *d;
      },
      help);
  return Add(option, "DUR", FormatDuration(out));
}

CLI::Option* FlagSet::Quantity(const std::string& name, std::int64_t& out, std::int64_t lo, std::int64_t hi,
                               const std::string& help) {
  auto* option = app_.add_option_function<std::string>(
      name,
      [&out, name, lo, hi](const std::string& v) {
        auto q = ParseQuantity(v);
        if (!q.ok()) Reject(name + ": " + Quoted(v) + " is not a quantity like 16777216, 512Ki, 16Mi or 1G");
        if (*q < lo || *q > hi) {
          Reject(name + ": " + Quoted(v) + " is not in " + std::to_string(lo) + ".." + std::to_string(hi));
        }
        out = *q;
      },
      help);
  return Add(option, "QUANTITY", std::to_string(out));
}

int FlagSet::UsageError(const std::string& message) const {
  std::fprintf(stderr, "toposched %s: %s (see --help)\n", command_.c_str(), message.c_str());
  return 2;
}

std::optional<int> FlagSet::Parse(const std::vector<std::string>& args) {
  app_.set_help_flag("-h,--help", "print this help and exit")->group(group_);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    app_.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app_.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ExtrasError&) {
    const std::vector<std::string> extra = app_.remaining();
    std::string first = extra.empty() ? "?" : extra.front();
    for (const std::string& e : extra) {
      if (e.starts_with("-")) {
        first = e;
        break;
      }
    }
    return UsageError((first.starts_with("-") ? "unknown flag " : "unexpected argument ") + Quoted(first));
  } catch (const CLI::ArgumentMismatch& e) {
    // "--input: 1 required TEXT missing": the value after the flag is missing.
    const std::string what = e.what();
    return UsageError(what.substr(0, what.find(':')) + " needs a value");
  } catch (const CLI::ParseError& e) {
    return UsageError(e.what());
  }
  return std::nullopt;
}

}  // namespace toposched::cmd
