// skc/policy/installer/kept.hpp: RunPackageInstaller's kept extractions: a package's identity, an
// uninstalled package's folder kept in `.kept/` within the keep limit, evicted least recently
// released first, and reused by a later install of the same package.
#pragma once

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../detail/atomic_file.hpp"
#include "../../detail/hash.hpp"
#include "../../detail/install_holders.hpp"
#include "../../detail/unique_fd.hpp"
#include "../../error.hpp"
#include "../../op_info_io.hpp"
#include "../lock.hpp"
#include "../run_package_installer.hpp"

namespace skc {

/// The checksum (`given`, else detail::Hasher over the file's bytes, as the cache computes it) and
/// size of the package file.
inline RunPackageInstaller::Identity RunPackageInstaller::identify_package(const std::filesystem::path& package,
                                                                           const std::optional<Digest>& given) {
    const detail::UniqueFd fd(::open(package.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd)
        fail(Errc::invalid_argument, package, "cannot read the package file: " + std::string(std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
        fail(Errc::invalid_argument, package, "cannot read the package file: not a regular file");
    Identity id;
    id.package_bytes = static_cast<std::uint64_t>(st.st_size);
    if (given) {
        id.checksum = *given;
        return id;
    }
    detail::Hasher h;
    std::string buf(std::size_t{1} << 16, '\0');
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(Errc::io_error, package, "cannot read the package file: " + std::string(std::strerror(errno)));
        if (n == 0) break;
        h.update(buf.data(), static_cast<std::size_t>(n));
    }
    id.checksum = h.digest();
    return id;
}

inline std::string RunPackageInstaller::identity_text(const Identity& id) {
    return "skc-kept-extraction 1\nchecksum " + id.checksum.hex() + "\npackage_bytes " +
           std::to_string(id.package_bytes) + "\nextracted_bytes " + std::to_string(id.extracted_bytes) + "\n";
}

/// The identity file of package folder `folder`; nullopt when it is missing or not exactly as
/// identity_text() writes it.
inline std::optional<RunPackageInstaller::Identity> RunPackageInstaller::read_identity(
    const std::filesystem::path& folder) {
    std::string text;
    try {
        text = read_file(folder / identity_file, 4096);
    } catch (const Error&) {
        return std::nullopt;
    }
    Identity id;
    const char* p = text.data();
    const char* const end = p + text.size();
    auto expect = [&](std::string_view word) {
        if (static_cast<std::size_t>(end - p) < word.size() || std::string_view(p, word.size()) != word) return false;
        p += word.size();
        return true;
    };
    auto number = [&](std::uint64_t& v) {
        const auto [next, err] = std::from_chars(p, end, v);
        if (err != std::errc() || next == p) return false;
        p = next;
        return true;
    };
    if (!expect("skc-kept-extraction 1\nchecksum ") || end - p < 32) return std::nullopt;
    const std::optional<Digest> checksum = Digest::from_hex(std::string_view(p, 32));
    p += 32;
    if (!checksum || !expect("\npackage_bytes ") || !number(id.package_bytes) || !expect("\nextracted_bytes ") ||
        !number(id.extracted_bytes) || !expect("\n") || p != end)
        return std::nullopt;
    id.checksum = *checksum;
    return id;
}

/// Writes a small file whole (an AtomicFile, fsync'd before its rename), so that a reader sees
/// all of it or none; false when it cannot. For the installer's own dot names, which
/// FilesystemStorage does not take (and which no package stem can be).
inline bool RunPackageInstaller::write_small_file(const std::filesystem::path& p, const std::string& text) {
    try {
        detail::AtomicFile out(p);
        out.write(text);
        out.commit(detail::Durability::file);
        return true;
    } catch (const Error&) {
        return false;
    }
}

/// The keep limit recorded in .kept/ (0 when none is).
inline std::uint64_t RunPackageInstaller::read_keep_limit(const std::filesystem::path& base) {
    std::string text;
    try {
        text = read_file(kept_dir(base) / limit_file, 64);
    } catch (const Error&) {
        return 0;
    }
    std::uint64_t v = 0;
    const auto [next, err] = std::from_chars(text.data(), text.data() + text.size(), v);
    return err == std::errc() && next != text.data() ? v : 0;
}

/// Under the lock: moves `stem`'s kept extraction into its installed place when that is the same
/// package (`want`) and passes the payload checks, and returns the package's device (the caller
/// publishes); otherwise deletes the kept folder and returns nullopt (the caller extracts).
inline std::optional<std::string> RunPackageInstaller::reuse_locked(const std::filesystem::path& base,
                                                                    const std::string& stem,
                                                                    const std::filesystem::path& package,
                                                                    const InstallOptions& opt, const Identity& want) {
    const std::filesystem::path kept = kept_dir(base) / stem;
    const std::optional<Identity> have = read_identity(kept);
    std::optional<Payload> payload;
    if (have && have->checksum == want.checksum && have->package_bytes == want.package_bytes) {
        try {
            payload = check_payload(package, kept, opt.backend);
        } catch (const Error&) {  // damaged since it was kept
        }
    }
    const std::filesystem::path folder = base / stem;
    std::error_code ec;
    if (payload && payload->bytes == have->extracted_bytes) {
        std::filesystem::remove_all(folder, ec);  // a leftover not listed in config.ini
        if (::rename(kept.c_str(), folder.c_str()) == 0) return payload->device;
    }
    remove_locked(base, kept, stem);
    return std::nullopt;
}

/// Under the lock: takes package folder `stem` out of its installed place: renamed to
/// .kept/<stem> (replacing an older kept extraction of the stem) when it has an identity and fits
/// `limit`, else deleted. Returns whether it was kept.
inline bool RunPackageInstaller::retire_locked(const std::filesystem::path& base, const std::string& stem,
                                               std::uint64_t limit) {
    const std::filesystem::path folder = base / stem;
    if (const std::optional<Identity> id = limit > 0 ? read_identity(folder) : std::nullopt;
        id && id->extracted_bytes <= limit) {
        const std::filesystem::path kept = kept_dir(base) / stem;
        std::error_code ec;
        std::filesystem::create_directory(kept_dir(base), ec);
        struct stat st {};
        if (::lstat(kept.c_str(), &st) == 0) remove_locked(base, kept, stem);
        if (::rename(folder.c_str(), kept.c_str()) == 0) {
            // Released now: the time LRU eviction goes by (the precise clock: a file system's own
            // "now" is coarse, and releases follow each other closely).
            struct timespec now[2]{};
            ::clock_gettime(CLOCK_REALTIME, &now[0]);
            now[1] = now[0];
            ::utimensat(AT_FDCWD, kept.c_str(), now, 0);
            return true;
        }
    }
    remove_locked(base, folder, stem);
    return false;
}

/// Under the lock: deletes `path` (a package folder, installed or kept), renamed away first so
/// that a crash half-way leaves no half package under its name.
inline void RunPackageInstaller::remove_locked(const std::filesystem::path& base, const std::filesystem::path& path,
                                               const std::string& stem) {
    std::error_code ec;
    const std::filesystem::path gone = base / (".removing-" + stem + "-" + std::to_string(::getpid()));
    if (::rename(path.c_str(), gone.c_str()) == 0) std::filesystem::remove_all(gone, ec);
    else std::filesystem::remove_all(path, ec);
}

/// Under the lock: deletes kept extractions, least recently released first, until their sizes add
/// up to `limit` at most; also whatever else is in .kept/ (a folder without a valid identity, a
/// temporary file of a killed writer of the limit).
inline void RunPackageInstaller::evict_kept_locked(const std::filesystem::path& base, std::uint64_t limit) {
    struct Kept {
        std::int64_t released_ns;
        std::uint64_t bytes;
        std::string stem;
    };
    const std::filesystem::path dir = kept_dir(base);
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
    std::vector<Kept> kept;
    std::uint64_t total = 0;
    for (const std::string& name : names) {
        if (name == limit_file) continue;
        const std::filesystem::path p = dir / name;
        struct stat st {};
        const bool is_dir = ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
        const std::optional<Identity> id = is_dir && detail::safe_component(name) ? read_identity(p) : std::nullopt;
        if (!id) {
            if (is_dir) remove_locked(base, p, name);
            else ::unlink(p.c_str());
            continue;
        }
        kept.push_back(Kept{static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                            id->extracted_bytes, name});
        total += id->extracted_bytes;
    }
    std::sort(kept.begin(), kept.end(), [](const Kept& a, const Kept& b) { return a.released_ns < b.released_ns; });
    for (const Kept& k : kept) {
        if (total <= limit) break;
        remove_locked(base, dir / k.stem, k.stem);
        total -= k.bytes;
    }
}

inline std::vector<Installation> RunPackageInstaller::install_kept(const std::vector<InstallRequest>& requests,
                                                                   const std::filesystem::path& library) {
    std::vector<Installation> out;  // before the lock: on an error its handles are released after it
    if (requests.empty()) return out;
    const std::string& backend = requests.front().options.backend;
    check_name(backend, "backend", requests.front().package);
    const std::filesystem::path base = install_base(library, backend);
    struct stat st {};
    if (::lstat(base.c_str(), &st) != 0) return out;  // nothing installed or kept there yet
    // The identities of the packages with a kept extraction, outside the lock (see install()).
    std::vector<std::optional<Identity>> ids;
    for (const auto& [package, opt] : requests) {
        std::string stem = package.stem().string();
        check_name(stem, "package stem", package);
        const bool kept = opt.keep_bytes > 0 && ::lstat((kept_dir(base) / stem).c_str(), &st) == 0;
        ids.push_back(kept ? std::optional(identify_package(package, opt.checksum)) : std::nullopt);
    }
    FileLock locks(base);
    auto guard = locks.lock("install", LockMode::exclusive);
    cleanup_locked(base, requests.front().options.keep_bytes);
    Order order = read_config(base);
    std::vector<bool> reused;
    for (std::size_t i = 0; i < requests.size() && requests[i].options.backend == backend; ++i) {
        const std::string stem = requests[i].package.stem().string();
        if (installed_in(order, base, stem)) {
            reused.push_back(false);  // installed already
            continue;
        }
        // The kept folder may have gone since its identity was taken (another process reused it).
        if (!ids[i] || ::lstat((kept_dir(base) / stem).c_str(), &st) != 0) break;
        const std::optional<std::string> device =
            reuse_locked(base, stem, requests[i].package, requests[i].options, *ids[i]);
        if (!device) break;
        install_last(order, stem, *device);
        reused.push_back(true);
    }
    // Published before any holder is added, as publish_and_hold_locked() does.
    if (std::find(reused.begin(), reused.end(), true) != reused.end()) publish_locked(base, order);
    for (std::size_t i = 0; i < reused.size(); ++i)
        out.push_back(hold_locked(base, requests[i].package.stem().string(), requests[i].options, false, reused[i]));
    return out;
}

}  // namespace skc
