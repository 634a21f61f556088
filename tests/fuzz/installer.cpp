// Fuzzes what RunPackageInstaller (include/skc/policy/installer.hpp) reads from an op library:
// `config.ini` (the installed packages in install order), each package's own
// `binary_info_config.json` (the kernel index the shared per-device index is built from) and the
// holder file names under `.holders/<stem>/`. They are read by RunPackageInstaller::list (and every
// install, uninstall and cleanup), which first removes dead holders and packages without a live
// holder and then rewrites the shared files.
//
// The input is four parts separated by lines `%%`: config.ini; the index of package `pkgA`; the
// index of package `pkgB`; holder file names for `pkgB`, one a line (`@self` stands for a holder
// name of this process, which is alive). Each execution lays out a fresh op library
// `<lib>/static_kernel/host/` with both package folders (pkgA held by a `persistent` holder, pkgB
// by the given holders), a stale shared index of device `stale`, and calls list() twice.
// Properties:
//   - list() returns, in config.ini's order, the entries whose package is present and held by a
//     live holder (pkgA, and pkgB when one of its holders is alive), with only live holders;
//   - the folders of listed packages that are not held are removed;
//   - when anything was dropped, config.ini is rewritten to the listed packages, and each listed
//     device gets a shared index that merges the kernels of its packages' indexes that follow the
//     rules of docs/run-package.md, in install order (the last package wins), while devices
//     without packages lose theirs; when nothing was dropped, nothing is rewritten;
//   - a second list() returns the same and changes nothing;
//   - detail::holder_alive takes any name without throwing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <skc/error.hpp>
#include <skc/op_info_io.hpp>
#include <skc/policy/run_package_installer.hpp>
#include <skc/value.hpp>

#include "fuzz_support.hpp"

namespace {

namespace fs = std::filesystem;
using Order = std::vector<std::pair<std::string, std::string>>;

/// config.ini as docs and installer.hpp describe it: a `[packages]` section of `<stem> = <device>`
/// lines, both made of letters, digits, '_', '-' and '.', not starting with '.'; `#` and `;` start
/// comments; anything else is skipped.
Order reference_config(std::string_view text) {
    Order out;
    bool in_packages = false;
    for (std::string_view line : skc::detail::split(text, '\n')) {
        if (line.empty() || line[0] == '#' || line[0] == ';') continue;
        if (line[0] == '[') {
            in_packages = line == "[packages]";
            continue;
        }
        const std::size_t eq = line.find(" = ");
        if (!in_packages || eq == std::string_view::npos) continue;
        const std::string stem(line.substr(0, eq)), device(line.substr(eq + 3));
        if (skc::detail::safe_component(stem) && skc::detail::safe_component(device)) out.emplace_back(stem, device);
    }
    return out;
}

std::optional<std::string> read_text(const fs::path& p) {
    try {
        return skc::read_file(p, std::size_t{1} << 24);
    } catch (const skc::Error&) {
        return std::nullopt;
    }
}

bool is_dir(const fs::path& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

/// A kernel of a package's index as docs/run-package.md requires it: a digest of 32 lower-case hex
/// digits, a file that is a relative path below kernels/ without empty, '.' or '..' parts.
bool kernel_ok(const std::string& digest, const std::string& file) {
    if (digest.size() != 32 || digest.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
    if (!file.starts_with("kernels/") || file.size() >= 1000 || file.find('\0') != std::string::npos) return false;
    for (std::string_view part : skc::detail::split(file, '/'))
        if (part.empty() || part == "." || part == "..") return false;
    return true;
}

/// The shared index of `device` that the kept packages `order` give (publish_locked's merge: the
/// kernels of each package's index that follow the rules, the last package winning).
skc::Value expected_index(const fs::path& base, const Order& order, const std::string& device) {
    std::map<std::string, skc::Value> kernels;
    for (const auto& [stem, dev] : order) {
        if (dev != device) continue;
        skc::Value index;
        try {
            index = skc::parse_json(skc::read_file(base / stem / "binary_info_config.json", std::size_t{16} << 20));
        } catch (const skc::Error&) {
            continue;
        }
        const skc::Value* ks = index.find("kernels");
        if (ks == nullptr || !ks->is_array()) continue;
        for (const skc::Value& k : ks->as_array()) {
            const skc::Value *d = k.find("digest"), *f = k.find("file"), *s = k.find("symbol"), *o = k.find("op_type");
            if (!d || !f || !s || !o || !d->is_string() || !f->is_string() || !s->is_string() || !o->is_string())
                continue;
            if (!kernel_ok(d->as_string(), f->as_string())) continue;
            kernels[d->as_string()] = skc::Value(skc::Object{{"package", skc::Value(stem)},
                                                             {"file", skc::Value(stem + "/" + f->as_string())},
                                                             {"symbol", *s},
                                                             {"op_type", *o}});
        }
    }
    skc::Object ks;
    for (auto& [digest, v] : kernels) ks.push_back(skc::Member{digest, std::move(v)});
    return skc::Value(skc::Object{{"format", skc::Value("skc-installed-kernels")},
                                  {"version", skc::Value(1)},
                                  {"backend", skc::Value("host")},
                                  {"device", skc::Value(device)},
                                  {"kernels", skc::Value(std::move(ks))}});
}

bool plain_file_name(std::string_view s) {
    return !s.empty() && s.size() <= 255 && s != "." && s != ".." && s.find('/') == std::string_view::npos &&
           s.find('\0') == std::string_view::npos;
}

const std::string& self_holder() {
    static const std::string name =
        std::to_string(::getpid()) + "-" + std::to_string(skc::detail::process_start_time(0).value_or(0)) + ".0";
    return name;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const bool checked_once = [] {
        FUZZ_CHECK(skc::detail::holder_alive("persistent"));
        FUZZ_CHECK(skc::detail::holder_alive(self_holder()));
        return true;
    }();
    (void)checked_once;

    std::string_view rest = fuzz::as_text(data, size);
    const std::string_view config = fuzz::take_part(rest, "\n%%\n");
    const std::string_view index_a = fuzz::take_part(rest, "\n%%\n");
    const std::string_view index_b = fuzz::take_part(rest, "\n%%\n");
    const std::string holders = fuzz::replace_all(rest, "@self", self_holder());

    // The op library.
    const fs::path lib = fuzz::scratch() / "lib";
    const fs::path base = skc::install_base(lib, "host");
    fuzz::fresh_dir(lib);
    fs::create_directories(base / "pkgA");
    fs::create_directories(base / "pkgB");
    fs::create_directories(base / ".holders" / "pkgA");
    fs::create_directories(base / ".holders" / "pkgB");
    fs::create_directories(base / "config" / "stale");
    fuzz::write_file(base / "config.ini", config);
    fuzz::write_file(base / "pkgA" / "binary_info_config.json", index_a);
    fuzz::write_file(base / "pkgB" / "binary_info_config.json", index_b);
    fuzz::write_file(base / ".holders" / "pkgA" / "persistent", "");
    const std::string stale_index = "{\"format\": \"skc-installed-kernels\", \"kernels\": {}}\n";
    fuzz::write_file(base / "config" / "stale" / "binary_info_config.json", stale_index);
    bool b_live = false;
    for (std::string_view h : skc::detail::split(holders, '\n')) {
        const bool alive = skc::detail::holder_alive(std::string(h));
        if (h == "persistent") FUZZ_CHECK(alive);
        if (!plain_file_name(h)) continue;
        fuzz::write_file(base / ".holders" / "pkgB" / std::string(h), "");
        b_live = b_live || alive;
    }

    // What list() must find.
    const Order order = reference_config(config);
    Order keep;
    for (const auto& e : order)
        if (e.first == "pkgA" || (e.first == "pkgB" && b_live)) keep.push_back(e);

    skc::RunPackageInstaller installer;
    const std::vector<skc::InstalledPackage> listed = installer.list(lib, "host");
    FUZZ_CHECK(listed.size() == keep.size());
    for (std::size_t i = 0; i < listed.size(); ++i) {
        const skc::InstalledPackage& p = listed[i];
        FUZZ_CHECK(p.stem == keep[i].first && p.device == keep[i].second);
        FUZZ_CHECK(p.folder == base / p.stem && is_dir(p.folder));
        FUZZ_CHECK(!p.holders.empty());
        for (const std::string& h : p.holders) FUZZ_CHECK(skc::detail::holder_alive(h));
        if (p.stem == "pkgA") FUZZ_CHECK(p.persistent());
    }
    std::set<std::string> kept_stems, dropped_stems;
    for (const auto& e : keep) kept_stems.insert(e.first);
    for (const auto& e : order)
        if (kept_stems.count(e.first) == 0) dropped_stems.insert(e.first);
    for (const std::string& s : dropped_stems) FUZZ_CHECK(!is_dir(base / s) || s == "config");

    const std::optional<std::string> config_after = read_text(base / "config.ini");
    if (keep == order) {
        FUZZ_CHECK(config_after && *config_after == config);
        FUZZ_CHECK(read_text(base / "config" / "stale" / "binary_info_config.json") == stale_index);
    } else {
        FUZZ_CHECK(config_after && reference_config(*config_after) == keep);
        std::set<std::string> devices;
        for (const auto& e : keep) devices.insert(e.second);
        for (const std::string& d : devices) {
            const std::optional<std::string> text = read_text(base / "config" / d / "binary_info_config.json");
            FUZZ_CHECK(text.has_value());
            FUZZ_CHECK(skc::parse_json(*text) == expected_index(base, keep, d));
        }
        if (devices.count("stale") == 0) FUZZ_CHECK(!fs::exists(base / "config" / "stale" / "binary_info_config.json"));
    }

    // Listing again finds the same and changes nothing.
    const std::vector<skc::InstalledPackage> again = installer.list(lib, "host");
    FUZZ_CHECK(again.size() == listed.size());
    for (std::size_t i = 0; i < again.size(); ++i)
        FUZZ_CHECK(again[i].stem == listed[i].stem && again[i].device == listed[i].device &&
                   again[i].holders == listed[i].holders);
    FUZZ_CHECK(read_text(base / "config.ini") == config_after);
    return 0;
}
