// skc/options.hpp: the feature's options, with the original's names, parsed strictly.
//
// docs/spec.md section 2: `static_kernel_compile` and `disable_static_kernel_compile_cache`, plus the
// further inputs a host passes (model compile cache, force_eager, op blacklist, timeout, jobs, log
// level, deterministic flag, compiler options). parse_options() takes a JSON object (as a Value):
// an unknown key is an error naming it and listing the known keys; a wrongly typed or out-of-range
// value is an error naming the key and what is accepted. Nothing is silently ignored.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "detail/text.hpp"
#include "error.hpp"
#include "value.hpp"

namespace skc {

enum class LogLevel : unsigned char { debug, info, warning, error };

constexpr std::string_view to_string(LogLevel l) noexcept {
    switch (l) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warning: return "warning";
    case LogLevel::error: return "error";
    }
    return {};
}

/// How the kernel compiler's fingerprint, a part of the cache key, is taken (ccache's
/// `compiler_check`): `content` (a hash of the executable, the default), `mtime` (its size and
/// modification time), `none`, `string:TEXT`, `command:CMD` (the output of CMD, %compiler% replaced
/// by the compiler's path). compiler_check.hpp takes it.
struct CompilerCheck {
    enum class Mode : unsigned char { content, mtime, none, string, command };
    Mode mode = Mode::content;
    std::string text;  // string: the text; command: the command

    friend bool operator==(const CompilerCheck&, const CompilerCheck&) = default;
};

/// Parses `content`, `mtime`, `none`, `string:TEXT` or `command:CMD`. Throws Error(invalid_option)
/// for `option` (the option's name in messages) otherwise.
inline CompilerCheck parse_compiler_check(std::string_view s, std::string_view option = "compiler_check") {
    CompilerCheck c;
    if (s == "content") return c;
    if (s == "mtime") c.mode = CompilerCheck::Mode::mtime;
    else if (s == "none") c.mode = CompilerCheck::Mode::none;
    else if (s.rfind("string:", 0) == 0) c.mode = CompilerCheck::Mode::string, c.text = std::string(s.substr(7));
    else if (s.rfind("command:", 0) == 0) c.mode = CompilerCheck::Mode::command, c.text = std::string(s.substr(8));
    else
        throw Error(
            Errc::invalid_option,
            "value " + detail::quote(s, 64) + " is not accepted: use content, mtime, none, string:TEXT or command:CMD",
            ErrorContext{{}, {}, std::string(option)});
    if (c.mode == CompilerCheck::Mode::command && c.text.empty())
        throw Error(Errc::invalid_option, "command: needs a command, e.g. command:%compiler% --version",
                    ErrorContext{{}, {}, std::string(option)});
    return c;
}

/// How a process uses the cache: `read-write` (look up, compile and store on a miss: the default),
/// `read-only` (look up, never write anything in the cache folder: CI runners on a shared cache; a
/// miss compiles into the run folder only), `recache` (always compile, and overwrite the entry: a
/// suspect one).
enum class CacheMode : unsigned char { read_write, read_only, recache };

constexpr std::string_view to_string(CacheMode m) noexcept {
    switch (m) {
    case CacheMode::read_write: return "read-write";
    case CacheMode::read_only: return "read-only";
    case CacheMode::recache: return "recache";
    }
    return {};
}

/// Parses `read-write`, `read-only` or `recache`; Error(invalid_option) for `option` otherwise.
inline CacheMode parse_cache_mode(std::string_view s, std::string_view option = "cache_mode") {
    for (CacheMode m : {CacheMode::read_write, CacheMode::read_only, CacheMode::recache})
        if (s == to_string(m)) return m;
    throw Error(Errc::invalid_option,
                "value " + detail::quote(s, 64) + " is not accepted: use read-write, read-only or recache",
                ErrorContext{{}, {}, std::string(option)});
}

struct Options {
    // docs/spec.md section 2.
    bool static_kernel_compile = false;
    bool disable_static_kernel_compile_cache = false;  // only has effect when the feature is on

    // Further inputs.
    bool model_compile_cache = false;     // a model compile cache is enabled ...
    std::string model_compile_cache_dir;  // ... in this directory (required when enabled)
    bool force_eager = false;
    std::string base_dir;                   // explicit output base; empty: docs/spec.md section 3's rules
    std::vector<std::string> op_blacklist;  // substrings of op info file names
    std::chrono::seconds compile_timeout{3600};
    unsigned jobs = default_jobs();
    std::optional<LogLevel> log_level;          // passed to the compiler as -l when set
    bool deterministic = false;                 // changes the kernels: part of the cache key
    std::vector<std::string> compiler_options;  // extra compiler arguments; part of the cache key
    CompilerCheck compiler_check;               // how the compiler's fingerprint (part of the cache key) is taken
    std::string cache_dir;                      // the cache's folder, shared by any number of bases; empty:
                            // $SKC_CACHE_DIR, else <base>/static_kernel_compile_outputs/static_kernel_cache
    std::optional<CacheMode> cache_mode;  // unset: $SKC_CACHE_MODE, else the CompilerSettings' (read-write)
    std::string remote_cache;             // the remote tier's URL (policy/remote.hpp); empty: $SKC_REMOTE_CACHE
    bool remote_cache_read_only = false;  // the remote tier is only read (also $SKC_REMOTE_CACHE_READ_ONLY=1)

    /// The cache is used: the feature is on and the cache is not disabled.
    [[nodiscard]] bool cache_enabled() const noexcept {
        return static_kernel_compile && !disable_static_kernel_compile_cache;
    }
    /// docs/spec.md section 3: outputs go to the model cache's directory when it is on and eager is off.
    [[nodiscard]] bool use_model_cache_dir() const noexcept { return model_compile_cache && !force_eager; }

    static unsigned default_jobs() noexcept {
        const unsigned n = std::thread::hardware_concurrency();
        return n == 0 ? 1 : n;
    }
};

/// The option names parse_options() accepts, in documentation order.
inline constexpr std::array<std::string_view, 18> option_names{
    "static_kernel_compile",
    "disable_static_kernel_compile_cache",
    "model_compile_cache",
    "model_compile_cache_dir",
    "force_eager",
    "base_dir",
    "op_blacklist",
    "compile_timeout_seconds",
    "jobs",
    "log_level",
    "deterministic",
    "compiler_options",
    "super_kernel",
    "compiler_check",
    "cache_dir",
    "cache_mode",
    "remote_cache",
    "remote_cache_read_only",
};

namespace detail {

[[noreturn]] inline void option_error(std::string_view key, std::string message) {
    throw Error(Errc::invalid_option, std::move(message), ErrorContext{{}, {}, std::string(key)});
}

/// A value as an error message shows it: its kind and, for scalars, the value itself
/// (`string "yes"`, `integer -3`, `number 2.5`, `true`, `null`, `array`, `object`). Long strings are
/// cut, control characters escaped.
inline std::string found_kind(const Value& v) {
    switch (v.kind()) {
    case Kind::null: return "null";
    case Kind::boolean: return v.as_bool() ? "true" : "false";
    case Kind::integer: return "integer " + std::to_string(v.as_int());
    case Kind::unsigned_integer: return "an integer above 2^63-1";
    case Kind::number: {
        char buf[32];
        const auto r = std::to_chars(buf, buf + sizeof buf, v.as_double());
        return "number " + std::string(buf, r.ptr);
    }
    case Kind::string: return "string " + quote(v.as_string(), 64);
    case Kind::array: return "array";
    case Kind::object: return "object";
    }
    return std::string(to_string(v.kind()));
}

inline bool option_bool(std::string_view key, const Value& v) {
    if (!v.is_bool()) option_error(key, "expected true or false, found " + found_kind(v));
    return v.as_bool();
}

inline std::string option_string(std::string_view key, const Value& v) {
    if (!v.is_string()) option_error(key, "expected a string, found " + found_kind(v));
    return v.as_string();
}

inline std::vector<std::string> option_strings(std::string_view key, const Value& v) {
    if (!v.is_array()) option_error(key, "expected an array of strings, found " + found_kind(v));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.as_array().size(); ++i) {
        const Value& e = v.as_array()[i];
        if (!e.is_string())
            option_error(key, "element " + std::to_string(i) + ": expected a string, found " + found_kind(e));
        out.push_back(e.as_string());
    }
    return out;
}

inline std::int64_t option_positive(std::string_view key, const Value& v, std::int64_t max) {
    if (v.kind() != Kind::integer || v.as_int() < 1 || v.as_int() > max)
        option_error(key, "expected an integer from 1 to " + std::to_string(max) + ", found " +
                              (v.kind() == Kind::integer ? std::to_string(v.as_int()) : found_kind(v)));
    return v.as_int();
}

}  // namespace detail

/// Parses options from a JSON object. Throws skc::Error (invalid_option) naming the option and
/// the value found. `host_keys` are keys the host reads itself (a plugin's own settings, such as the
/// compiler's path): they are skipped here, and listed with the options when a key is unknown.
inline Options parse_options(const Value& obj, std::span<const std::string_view> host_keys = {}) {
    if (!obj.is_object())
        throw Error(Errc::invalid_option, "options must be a JSON object, found " + detail::found_kind(obj));
    Options o;
    bool super_kernel = false;
    for (const Member& m : obj.as_object()) {
        const std::string_view k = m.key;
        const Value& v = m.value;
        if (k == "static_kernel_compile") o.static_kernel_compile = detail::option_bool(k, v);
        else if (k == "disable_static_kernel_compile_cache")
            o.disable_static_kernel_compile_cache = detail::option_bool(k, v);
        else if (k == "model_compile_cache") o.model_compile_cache = detail::option_bool(k, v);
        else if (k == "model_compile_cache_dir") o.model_compile_cache_dir = detail::option_string(k, v);
        else if (k == "force_eager") o.force_eager = detail::option_bool(k, v);
        else if (k == "base_dir") o.base_dir = detail::option_string(k, v);
        else if (k == "op_blacklist") o.op_blacklist = detail::option_strings(k, v);
        else if (k == "compile_timeout_seconds")
            o.compile_timeout = std::chrono::seconds(detail::option_positive(k, v, 7 * 24 * 3600));
        else if (k == "jobs") o.jobs = static_cast<unsigned>(detail::option_positive(k, v, 1024));
        else if (k == "log_level") {
            const std::string s = detail::option_string(k, v);
            if (s == "debug") o.log_level = LogLevel::debug;
            else if (s == "info") o.log_level = LogLevel::info;
            else if (s == "warning") o.log_level = LogLevel::warning;
            else if (s == "error") o.log_level = LogLevel::error;
            else
                detail::option_error(k, "value " + detail::quote(s, 64) +
                                            " is not accepted: use \"debug\", \"info\", \"warning\" or \"error\"");
        } else if (k == "deterministic") o.deterministic = detail::option_bool(k, v);
        else if (k == "compiler_options") o.compiler_options = detail::option_strings(k, v);
        else if (k == "super_kernel") super_kernel = detail::option_bool(k, v);
        else if (k == "compiler_check") o.compiler_check = parse_compiler_check(detail::option_string(k, v), k);
        else if (k == "cache_dir") o.cache_dir = detail::option_string(k, v);
        else if (k == "cache_mode") o.cache_mode = parse_cache_mode(detail::option_string(k, v), k);
        else if (k == "remote_cache") o.remote_cache = detail::option_string(k, v);
        else if (k == "remote_cache_read_only") o.remote_cache_read_only = detail::option_bool(k, v);
        else if (std::find(host_keys.begin(), host_keys.end(), k) != host_keys.end()) continue;
        else {
            std::string known;
            for (std::string_view n : option_names) {
                if (!known.empty()) known += ", ";
                known += n;
            }
            for (std::string_view n : host_keys) known += ", " + std::string(n);
            detail::option_error(k, "unknown option; known options are: " + known);
        }
    }
    // The original's super-kernel flag is one of the compiler options that change the kernels.
    if (super_kernel) o.compiler_options.insert(o.compiler_options.begin(), "--super-kernel=true");
    if (o.model_compile_cache && o.model_compile_cache_dir.empty())
        detail::option_error("model_compile_cache_dir", "required when model_compile_cache is true");
    for (const std::string& b : o.op_blacklist)
        if (b.empty()) detail::option_error("op_blacklist", "an empty substring would blacklist every op");
    return o;
}

/// The cache mode `o` asks for: its `cache_mode`, else the environment's `SKC_CACHE_MODE` (a bad
/// value is an Error naming the variable), else nullopt (the caller's own, read-write by default).
inline std::optional<CacheMode> requested_cache_mode(const Options& o) {
    if (o.cache_mode) return o.cache_mode;
    if (const char* env = std::getenv("SKC_CACHE_MODE"); env != nullptr && *env != '\0')
        return parse_cache_mode(env, "SKC_CACHE_MODE");
    return std::nullopt;
}

}  // namespace skc
