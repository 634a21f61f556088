// tools/cli.hpp: what the commands share about their command line: CLI11, the action a command's
// callback sets, usage errors, and the validators of counts and names that several commands use
// (validator() makes one from a check returning skc's message; the cache commands' sizes and
// durations are checked in cache.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>

#include <skc/detail/names.hpp>
#include <skc/detail/text.hpp>

#include "common.hpp"

namespace skc_tool {

/// What the command given runs: its callback sets it once the command line is parsed, and main runs it.
using Action = std::function<int()>;

/// Bad usage found after parsing, exit status 2: `message` without the command (main puts the command
/// before it). With `hint`, main adds the line that points to the command's --help.
struct UsageError {
    std::string message;
    bool hint = true;
};

/// "skc cache prune": the command an App stands for.
inline std::string command_path(const CLI::App* app) {
    std::string r = app->get_name();
    for (const CLI::App* a = app->get_parent(); a != nullptr; a = a->get_parent()) r = a->get_name() + " " + r;
    return r;
}

// ---- options -----------------------------------------------------------------------------------------

/// A CLI11 validator from `check`, which returns the message for a bad value ("" for a good one) and
/// may rewrite the value (a transform). No description: the help shows only the value's name.
inline CLI::Validator validator(std::function<std::string(std::string&)> check) {
    return CLI::Validator(std::move(check), "");
}

inline std::string bad_value(std::string_view s) { return "bad value '" + printable(s) + "': "; }

/// An empty value is refused: `--base ""` names no folder.
inline CLI::Validator non_empty() {
    return validator([](std::string& s) { return s.empty() ? std::string("the value is empty; give one") : ""; });
}

/// `--name VALUE` (also `--name=VALUE`), given at most once; `value` names the value in the help.
template <class T>
CLI::Option* add_value(CLI::App& app, const std::string& name, T& target, const std::string& value,
                       const std::string& help) {
    return app.add_option(name, target, help)->type_name(value)->check(non_empty());
}

/// `--name VALUE`, repeatable: one value each time.
inline CLI::Option* add_values(CLI::App& app, const std::string& name, std::vector<std::string>& target,
                               const std::string& value, const std::string& help) {
    return app.add_option(name, target, help)->type_name(value)->allow_extra_args(false)->check(non_empty());
}

/// `--name`, a flag without a value (`--name=yes` is refused).
inline CLI::Option* add_switch(CLI::App& app, const std::string& name, bool& target, const std::string& help) {
    return app.add_flag(name, target, help)->disable_flag_override();
}

/// A decimal number that fits in 64 bits (skc::detail::parse_u64), nullopt for anything else.
inline std::optional<std::uint64_t> parse_count(std::string_view s) {
    std::uint64_t v = 0;
    if (!skc::detail::parse_u64(s, v)) return std::nullopt;
    return v;
}

/// A whole number from 1 to `max`.
inline CLI::Validator positive_value(std::uint64_t max) {
    return validator([max](std::string& s) {
        const std::optional<std::uint64_t> n = parse_count(s);
        return !n || *n == 0 || *n > max ? bad_value(s) + "expected a whole number from 1 to " + std::to_string(max)
                                         : std::string();
    });
}

/// Letters, digits, '_', '-', '.', not starting with '.': a name that is one path component.
inline CLI::Validator plain_name_value() {
    return validator([](std::string& s) {
        return skc::detail::is_portable_name(s, 255)
                   ? std::string()
                   : bad_value(s) + "use letters, digits, '_', '-' and '.', not starting with '.'";
    });
}

/// A folder the command needs, checked before anything is written.
inline void require_folder(const char* option, const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec))
        throw UsageError{std::string(option) + " " + printable(path) + ": " +
                             (std::filesystem::exists(std::filesystem::symlink_status(path, ec)) ? "not a folder"
                                                                                                 : "no such folder"),
                         false};
}

}  // namespace skc_tool
