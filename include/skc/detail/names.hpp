// skc/detail/names.hpp: what a name must be to become part of a path. The checks of names read from
// a user, a file or another process use these; their rules differ on purpose:
//   is_name_char             letters, digits, '_', '-', '.': the characters of a portable name
//   is_portable_name         portable characters only, not starting with '.', at most `max`: stems,
//                            devices and holders of an op library, a rendezvous's run id and host
//   is_plain_file_name       any bytes but '/', '\n' and NUL, not "." or "..", at most 255: one
//                            component, as op info file names may be (they hold shapes, '[', ',')
//   is_plain_relative_path   '/'-separated parts, none empty or starting with '.': lock names and
//                            storage keys, which stay below their folder
// Two rules live with their names: skc::is_safe_name (op_record.hpp: op types, dtypes and formats,
// letters, digits and '_' only) and detail::cache_name_part (layout.hpp: toolchain versions and
// devices, any bytes but '/' and NUL, not starting with '.', spaces turned into '-').
#pragma once

#include <cstddef>
#include <string_view>

namespace skc::detail {

constexpr bool is_alnum(char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

constexpr bool is_name_char(char c) noexcept { return is_alnum(c) || c == '_' || c == '-' || c == '.'; }

constexpr bool is_portable_name(std::string_view s, std::size_t max) noexcept {
    if (s.empty() || s.size() > max || s.front() == '.') return false;
    for (char c : s)
        if (!is_name_char(c)) return false;
    return true;
}

constexpr bool is_plain_file_name(std::string_view name) noexcept {
    return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
           name.find_first_of(std::string_view("/\n\0", 3)) == std::string_view::npos;
}

constexpr bool is_plain_relative_path(std::string_view name) noexcept {
    if (name.empty() || name.find('\0') != std::string_view::npos) return false;
    std::size_t start = 0;
    while (start <= name.size()) {
        const std::size_t slash = name.find('/', start);
        const std::size_t end = slash == std::string_view::npos ? name.size() : slash;
        if (end == start || name[start] == '.') return false;
        start = end + 1;
    }
    return true;
}

}  // namespace skc::detail
