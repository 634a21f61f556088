// skc/detail/text.hpp: how skc shows untrusted text in a message: quoted, with control characters,
// quotes and backslashes as \xNN, so a hostile name cannot forge lines or hide its end.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace skc::detail {

/// `s` in double quotes, control characters, DEL, '"' and '\' shown as \xNN. With `max` > 0, only
/// the first `max` bytes are shown, followed by `...` after the closing quote when cut.
inline std::string quote(std::string_view s, std::size_t max = 0) {
    static constexpr char digits[] = "0123456789abcdef";
    const bool cut = max > 0 && s.size() > max;
    std::string out = "\"";
    for (char c : cut ? s.substr(0, max) : s) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f || c == '"' || c == '\\') {
            out += "\\x";
            out += digits[u >> 4];
            out += digits[u & 0xF];
        } else {
            out += c;
        }
    }
    out += '"';
    if (cut) out += "...";
    return out;
}

}  // namespace skc::detail
