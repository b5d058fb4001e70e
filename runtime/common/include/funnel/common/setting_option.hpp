// funnel-server's options that set a FUNNEL_* setting: declared by setting_table()'s rows
// (SettingInfo::option), they accept exactly what the variable accepts, and a value given
// on the command line wins over the variable (Settings::from(given_first(...))).
#pragma once
#include <map>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "funnel/common/config.hpp"

namespace funnel {

// The values given on the command line, by variable name.
using GivenSettings = std::map<std::string, std::string>;

// Adds `row`'s option (row.option must be set) to `app`: checked as the variable is, and a
// value given lands in `given` under the variable's name.
inline CLI::Option* add_setting_option(CLI::App& app, const SettingInfo& row, GivenSettings& given) {
  const std::string variable = row.variable;
  CLI::Option* opt = app.add_option_function<std::string>(
      row.option, [&given, variable](const std::string& v) { given[variable] = v; }, setting_option_help(row));
  opt->check([&row](const std::string& v) { return setting_option_error(row, v); });
  opt->type_name(std::holds_alternative<IntegerRange>(row.check) ? "N" : "TEXT");
  return opt;
}

// Every row's option that has one.
inline void add_setting_options(CLI::App& app, GivenSettings& given) {
  for (const SettingInfo& row : setting_table())
    if (row.option != nullptr) add_setting_option(app, row, given);
}

// A Lookup that answers from `given` first, then from `env`.
inline Settings::Lookup given_first(const GivenSettings& given, Settings::Lookup env = Settings::environment) {
  return [&given, env = std::move(env)](const char* name) -> std::optional<std::string> {
    if (auto it = given.find(name); it != given.end()) return it->second;
    return env(name);
  };
}

}  // namespace funnel
