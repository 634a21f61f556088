// skc/log.hpp: where skc's messages go. A LogSink is any callable taking a level and a line; the
// default writes warnings and errors to stderr, prefixed "skc: ".
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

#include "options.hpp"

namespace skc {

using LogSink = std::function<void(LogLevel, std::string_view)>;

/// Writes messages at `min_level` and above to stderr.
inline LogSink stderr_log(LogLevel min_level = LogLevel::warning) {
    return [min_level](LogLevel level, std::string_view line) {
        if (static_cast<int>(level) < static_cast<int>(min_level)) return;
        std::fprintf(stderr, "skc: %s: %.*s\n", std::string(to_string(level)).c_str(), static_cast<int>(line.size()),
                     line.data());
    };
}

/// Discards every message.
inline LogSink null_log() {
    return [](LogLevel, std::string_view) {};
}

}  // namespace skc
