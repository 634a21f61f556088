// skc/policy/installer/publish.hpp: what RunPackageInstaller publishes for an op library under the
// install lock: config.ini (the installed packages in install order), every device's global index
// of kernels, and the uninstall scripts.
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include "../../detail/install_holders.hpp"
#include "../../op_info_io.hpp"
#include "../../value.hpp"
#include "../run_package_installer.hpp"
#include "../filesystem_storage.hpp"

namespace skc {

inline std::vector<InstalledPackage> RunPackageInstaller::list(const std::filesystem::path& library,
                                                               std::string_view backend) {
    const std::filesystem::path base = install_base(library, backend);
    std::vector<InstalledPackage> out;
    if (!std::filesystem::exists(base)) return out;
    FileLock locks(base);
    auto guard = locks.lock("install", LockMode::exclusive);
    cleanup_locked(base);
    for (const auto& [stem, device] : read_config(base)) {
        InstalledPackage p{stem, device, base / stem, holders_of(base, stem)};
        out.push_back(std::move(p));
    }
    return out;
}

inline std::string RunPackageInstaller::top_uninstall_script(const Order& order) {
    std::string s =
        "#!/bin/sh\n"
        "# Removes every run package installed here, the kept extractions and the shared files\n"
        "# (written by skc).\n"
        "# Do not run it while a process uses the packages.\n"
        "set -e\n"
        "cd \"$(dirname \"$0\")\"\n";
    for (const auto& [stem, device] : order) s += "rm -rf -- \"" + stem + "\"\n";
    s += "rm -rf -- config .holders .kept config.ini uninstall.sh\n";
    return s;
}

inline void RunPackageInstaller::write_text(const std::filesystem::path& p, const std::string& text) {
    FilesystemStorage(p.parent_path()).write(p.filename().string(), text);
}

/// config.ini: "[packages]" then one "<stem> = <device>" line per package, in install order.
inline RunPackageInstaller::Order RunPackageInstaller::read_config(const std::filesystem::path& base) {
    Order out;
    std::optional<std::string> text = FilesystemStorage(base).read("config.ini");
    if (!text) return out;
    std::size_t start = 0;
    bool in_packages = false;
    while (start < text->size()) {
        std::size_t end = text->find('\n', start);
        if (end == std::string::npos) end = text->size();
        std::string line = text->substr(start, end - start);
        start = end + 1;
        if (line.empty() || line[0] == '#' || line[0] == ';') continue;
        if (line[0] == '[') {
            in_packages = line == "[packages]";
            continue;
        }
        const auto eq = line.find(" = ");
        if (!in_packages || eq == std::string::npos) continue;
        std::string stem = line.substr(0, eq), device = line.substr(eq + 3);
        if (detail::safe_component(stem) && detail::safe_component(device)) out.emplace_back(stem, device);
    }
    return out;
}

inline std::string RunPackageInstaller::config_text(const Order& order) {
    std::string s =
        "# Run packages installed here by skc, in install order (for a kernel in several\n"
        "# packages, the last one wins). Format: <package stem> = <device>\n[packages]\n";
    for (const auto& [stem, device] : order) s += stem + " = " + device + "\n";
    return s;
}

inline bool RunPackageInstaller::installed_locked(const std::filesystem::path& base, const std::string& stem) {
    return installed_in(read_config(base), base, stem);
}

inline bool RunPackageInstaller::installed_in(const Order& order, const std::filesystem::path& base,
                                              const std::string& stem) {
    struct stat st {};
    return std::any_of(order.begin(), order.end(), [&](const auto& e) { return e.first == stem; }) &&
           ::lstat((base / stem).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

inline void RunPackageInstaller::install_last(Order& order, const std::string& stem, const std::string& device) {
    order.erase(std::remove_if(order.begin(), order.end(), [&](const auto& e) { return e.first == stem; }),
                order.end());
    order.emplace_back(stem, device);
}

/// Under the lock, with the package folder in place: lists `stem` last in config.ini, rebuilds the
/// shared files, then adds a holder. Published first: should publishing fail, no handle exists
/// whose release would wait for the lock this thread holds (a package listed without a holder is
/// uninstalled by the next cleanup).
inline Installation RunPackageInstaller::publish_and_hold_locked(const std::filesystem::path& base,
                                                                 const std::string& stem, const std::string& device,
                                                                 const InstallOptions& opt, bool extracted,
                                                                 bool reused) {
    auto order = read_config(base);
    install_last(order, stem, device);
    publish_locked(base, order);
    return hold_locked(base, stem, opt, extracted, reused);
}

/// Under the lock: writes config.ini, every device's global index and the top-level uninstall.sh.
inline void RunPackageInstaller::publish_locked(const std::filesystem::path& base, const Order& order) {
    FilesystemStorage storage(base);
    // device -> digest -> entry; later packages override earlier ones.
    std::map<std::string, std::map<std::string, Value>> per_device;
    for (const auto& [stem, device] : order) {
        auto& kernels = per_device[device];
        Value index;
        try {
            index = parse_json(read_file(base / stem / "binary_info_config.json", std::size_t{16} << 20));
        } catch (const Error&) {
            continue;  // checked at install; a package damaged since contributes nothing
        }
        const Value* ks = index.find("kernels");
        if (ks == nullptr || !ks->is_array()) continue;
        for (const Value& k : ks->as_array()) {
            const Value *d = k.find("digest"), *f = k.find("file"), *s = k.find("symbol"), *o = k.find("op_type");
            if (!d || !f || !s || !o || !d->is_string() || !f->is_string() || !s->is_string() || !o->is_string())
                continue;
            // Checked at install; a package's index altered since is checked again, as every name read from a file.
            if (!digest_text_ok(d->as_string()) || !kernel_file_name_ok(f->as_string())) continue;
            kernels[d->as_string()] = Value(Object{{"package", Value(stem)},
                                                   {"file", Value(stem + "/" + f->as_string())},
                                                   {"symbol", *s},
                                                   {"op_type", *o}});
        }
    }
    // Devices that had an index but have no package left lose it.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(base / "config", ec)) {
        const std::string dev = e.path().filename().string();
        if (per_device.count(dev) == 0) storage.remove("config/" + dev + "/binary_info_config.json");
    }
    std::vector<std::pair<std::string, std::string>> files;
    for (const auto& [device, kernels] : per_device) {
        Object ks;
        for (const auto& [digest, v] : kernels) ks.push_back(Member{digest, v});
        const Value doc(Object{{"format", Value("skc-installed-kernels")},
                               {"version", Value(1)},
                               {"backend", Value(base.filename().string())},
                               {"device", Value(device)},
                               {"kernels", Value(std::move(ks))}});
        files.emplace_back("config/" + device + "/binary_info_config.json", dump_json(doc) + "\n");
    }
    files.emplace_back("config.ini", config_text(order));
    files.emplace_back("uninstall.sh", top_uninstall_script(order));
    storage.write_many(files);  // one journal commit for all of them, not two each
    ::chmod((base / "uninstall.sh").c_str(), 0755);
}

}  // namespace skc
