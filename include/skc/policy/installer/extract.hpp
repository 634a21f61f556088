// skc/policy/installer/extract.hpp: RunPackageInstaller's extraction of a run package (makeself,
// run by detail::run_child) into a staging folder, and the checks of the payload it extracted.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

#include "../../detail/install_holders.hpp"
#include "../../detail/process.hpp"
#include "../../error.hpp"
#include "../../op_info_io.hpp"
#include "../run_package_installer.hpp"

namespace skc {

[[noreturn]] inline void RunPackageInstaller::fail(Errc code, const std::filesystem::path& package,
                                                   const std::string& what, const std::string& log_tail) {
    throw Error(code,
                "run package " + package.stem().string() + ": " + what +
                    (log_tail.empty() ? std::string() : ". Last lines of its output:\n" + log_tail),
                ErrorContext{package.string(), {}, {}});
}

inline void RunPackageInstaller::check_name(const std::string& name, const char* what,
                                            const std::filesystem::path& where) {
    if (!detail::safe_component(name))
        throw Error(Errc::invalid_name,
                    std::string(what) + " \"" + name +
                        "\" is not accepted: use letters, digits, '_', '-', '.', not starting with '.'",
                    ErrorContext{where.string(), {}, {}});
}

/// When the file system of `dir` has little space or no inodes left (less than 4 times the
/// package's size, which unpacks larger), what to add to an extraction error: makeself itself
/// only says "Extraction failed." when tar cannot write.
inline std::string RunPackageInstaller::full_disk_note(const std::filesystem::path& dir, off_t package_size) {
    struct statvfs fs {};
    if (::statvfs(dir.c_str(), &fs) != 0) return {};
    const unsigned long long free_bytes = static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize;
    if (fs.f_files > 0 && fs.f_favail == 0)
        return " (its file system has no inodes left: " + std::string(std::strerror(ENOSPC)) + ")";
    if (free_bytes >= 4ULL * static_cast<unsigned long long>(package_size)) return {};
    return " (its file system has only " + std::to_string(free_bytes / 1024) +
           " KiB free, less than the package needs unpacked: " + std::strerror(ENOSPC) + ")";
}

/// Extracts `package` into `staging`; its output is kept in memory (a full op library is a
/// usual cause of failure, and the message must still say so).
inline void RunPackageInstaller::extract(const std::filesystem::path& package, const std::filesystem::path& staging,
                                         std::chrono::seconds timeout) const {
    struct stat st {};
    if (::stat(package.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        fail(Errc::invalid_argument, package,
             "cannot read the package file: " + std::string(errno ? std::strerror(errno) : "not a regular file"));
    const detail::MemoryLog log;
    if (log.fd() < 0)
        fail(Errc::io_error, package, std::string("cannot keep the extraction's output: ") + std::strerror(errno));
    const std::vector<std::string> args{
        shell_.string(), std::filesystem::absolute(package).string(), "--quiet", "--noexec", "--nox11", "--target",
        staging.string()};
    detail::ChildOptions run;
    run.output_fd = log.fd();
    run.deadline = std::chrono::steady_clock::now() + timeout;
    const detail::ChildRun r = detail::run_child(args, run);
    if (r.fault != detail::ChildRun::Fault::none)
        fail(Errc::io_error, package, "cannot start " + shell_.string() + ": " + std::strerror(r.error));
    const int status = r.status;
    const auto into = [&] {
        return " into " + staging.parent_path().string() + full_disk_note(staging.parent_path(), st.st_size);
    };
    if (!r.finished)
        fail(Errc::timeout, package,
             "extraction" + into() + " did not finish within " + std::to_string(timeout.count()) + " s", log.tail());
    if (WIFSIGNALED(status))
        fail(Errc::corrupt, package,
             "extraction" + into() + " failed: makeself was ended by " + detail::signal_name(WTERMSIG(status)) +
                 (WTERMSIG(status) == SIGTERM ? " (it ends itself so when tar fails)" : ""),
             log.tail());
    if (WEXITSTATUS(status) != 0)
        fail(
            Errc::corrupt, package,
            "extraction" + into() + " failed (makeself exited with status " + std::to_string(WEXITSTATUS(status)) + ")",
            log.tail());
}

/// Checks the extracted payload; returns the package's device and the payload's size.
inline RunPackageInstaller::Payload RunPackageInstaller::check_payload(const std::filesystem::path& package,
                                                                       const std::filesystem::path& root,
                                                                       const std::string& backend) {
    // No symlink in the payload may point outside it.
    std::error_code ec;
    const std::filesystem::path canon_root = std::filesystem::canonical(root, ec);
    if (ec) fail(Errc::corrupt, package, "the payload is missing after extraction");
    Payload out;
    for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (!it->is_symlink(ec)) {
            std::error_code size_ec;
            if (it->is_regular_file(size_ec) && (it.depth() != 0 || it->path().filename() != identity_file))
                if (const std::uintmax_t n = it->file_size(size_ec); !size_ec) out.bytes += n;
            continue;
        }
        const std::string rel = std::filesystem::relative(it->path(), root).string();
        const auto target = std::filesystem::weakly_canonical(it->path(), ec);
        const std::string t = target.string(), r = canon_root.string() + "/";
        if (ec || t.compare(0, r.size(), r) != 0)
            fail(Errc::unsafe_path, package, "symbolic link \"" + rel + "\" points outside the package");
    }
    const std::filesystem::path index_path = root / "binary_info_config.json";
    Value index;
    try {
        index = parse_json(read_file(index_path, std::size_t{16} << 20));
    } catch (const Error& e) {
        fail(Errc::corrupt, package, "bad binary_info_config.json: " + e.message());
    }
    auto str = [&](const Value& obj, const char* key, const std::string& where) -> std::string {
        const Value* v = obj.find(key);
        if (v == nullptr || !v->is_string() || v->as_string().empty())
            fail(Errc::corrupt, package, "bad binary_info_config.json: " + where + key + " must be a non-empty string");
        return v->as_string();
    };
    if (!index.is_object()) fail(Errc::corrupt, package, "bad binary_info_config.json: not a JSON object");
    if (str(index, "format", "") != "skc-run-package")
        fail(Errc::corrupt, package, "bad binary_info_config.json: format is not \"skc-run-package\"");
    const Value* version = index.find("version");
    if (version == nullptr || !version->is_integer() || version->kind() != Kind::integer || version->as_int() != 1)
        fail(Errc::corrupt, package, "bad binary_info_config.json: version must be 1");
    if (const std::string b = str(index, "backend", ""); b != backend)
        fail(Errc::invalid_argument, package, "the package is for backend \"" + b + "\", not \"" + backend + "\"");
    out.device = str(index, "device", "");
    if (!detail::safe_component(out.device))
        fail(Errc::unsafe_path, package, "device \"" + out.device + "\" cannot be used as a folder name");
    const Value* kernels = index.find("kernels");
    if (kernels == nullptr || !kernels->is_array())
        fail(Errc::corrupt, package, "bad binary_info_config.json: kernels must be an array");
    std::size_t i = 0;
    for (const Value& k : kernels->as_array()) {
        const std::string where = "kernels[" + std::to_string(i++) + "].";
        if (!k.is_object()) fail(Errc::corrupt, package, "bad binary_info_config.json: " + where + " not an object");
        const std::string digest = str(k, "digest", where);
        if (!digest_text_ok(digest))
            fail(Errc::corrupt, package,
                 "bad binary_info_config.json: " + where + "digest must be 32 lowercase hex digits");
        str(k, "op_type", where);
        str(k, "symbol", where);
        const std::string file = str(k, "file", where);
        check_file_name(package, file, root);
    }
    return out;
}

/// A kernel file name as the index may give it: a relative path below kernels/ without '.', '..'
/// or empty parts.
inline bool RunPackageInstaller::kernel_file_name_ok(const std::string& file) {
    bool ok = file.rfind("kernels/", 0) == 0 && file.find('\0') == std::string::npos && file.size() < 1000;
    std::size_t start = 0;
    while (ok && start <= file.size()) {
        const std::size_t end = std::min(file.find('/', start), file.size());
        const std::string part = file.substr(start, end - start);
        ok = !part.empty() && part != "." && part != "..";
        start = end + 1;
    }
    return ok;
}

inline bool RunPackageInstaller::digest_text_ok(const std::string& digest) {
    return digest.size() == 32 && digest.find_first_not_of("0123456789abcdef") == std::string::npos;
}

inline void RunPackageInstaller::check_file_name(const std::filesystem::path& package, const std::string& file,
                                                 const std::filesystem::path& root) {
    std::filesystem::path p = root;
    if (!kernel_file_name_ok(file))
        fail(Errc::unsafe_path, package,
             "kernel file name \"" + file +
                 "\" is not accepted: it must be a relative path below kernels/ without "
                 "'.', '..' or empty parts");
    const std::filesystem::path rel(file);
    for (const auto& part : rel) {
        p /= part;
        struct stat st {};
        if (::lstat(p.c_str(), &st) != 0) fail(Errc::corrupt, package, "kernel file \"" + file + "\" is missing");
        if (S_ISLNK(st.st_mode))
            fail(Errc::unsafe_path, package, "kernel file \"" + file + "\" goes through a symbolic link");
    }
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        fail(Errc::corrupt, package, "kernel file \"" + file + "\" is not a regular file");
}

inline std::string RunPackageInstaller::package_uninstall_script(const std::string& stem) {
    return "#!/bin/sh\n"
           "# Removes the run package " +
           stem +
           " from this op library.\n"
           "# It removes the package folder and its holder files only; the shared files\n"
           "# (config.ini, config/<device>/binary_info_config.json) drop it at the next skc\n"
           "# install, uninstall or cleanup. Do not run it while a process uses the package.\n"
           "set -e\n"
           "here=$(cd \"$(dirname \"$0\")\" && pwd)\n"
           "base=$(dirname \"$here\")\n"
           "rm -rf -- \"$base/.holders/" +
           stem + "\" \"$here\"\n";
}

}  // namespace skc
