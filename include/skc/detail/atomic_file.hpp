// skc/detail/atomic_file.hpp: a file that readers see whole or not at all. It is written under a
// temporary name in the folder it goes to, fsync'd, renamed (or linked) to its own name, and the
// folder fsync'd; a temporary that does not get there is removed.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "posix.hpp"
#include "unique_fd.hpp"

namespace skc::detail {

/// The temporary name of a file written to become `target`: `.tmp.<pid>.<n>.<target's name>` in
/// the target's folder, `n` counting this process's temporaries. The leading '.' keeps it out of
/// every listing of objects and op info files, and FilesystemStorage::collect_garbage() removes
/// one whose writer (the pid after `.tmp.`) is gone.
inline std::filesystem::path temporary_beside(const std::filesystem::path& target) {
    static std::atomic<std::uint64_t> counter{0};
    return target.parent_path() /
           (".tmp." + std::to_string(::getpid()) + "." +
            std::to_string(counter.fetch_add(1, std::memory_order_relaxed)) + "." + target.filename().string());
}

/// What AtomicFile::commit() has made durable when it returns.
enum class Durability : unsigned char {
    none,  // nothing: readers see the file whole, but a crash may lose it (scratch files)
    file,  // the file's bytes: fsync'd before it takes its name
    full,  // and its name: the folder fsync'd after the rename
};

/// A step of AtomicFile that failed.
enum class AtomicStep : unsigned char { create, write, sync, place };

/// Throws the Error for a failed step, given the temporary, the target and the errno value; for a
/// writer whose messages are its own. By default the messages are throw_errno()'s: "cannot
/// create", "cannot write" and "cannot fsync" name the temporary, "cannot publish" the target.
using AtomicFailure = void (*)(AtomicStep step, const std::filesystem::path& temp, const std::filesystem::path& target,
                               int err);

/// A file written under temporary_beside(target) and then put in place whole. Made by the
/// constructor (O_EXCL, never through a symbolic link, `mode` less the umask); filled with write()
/// or through fd(); placed by commit() (replacing the target) or commit_new() (never replacing
/// it). Every failure throws (see AtomicFailure), and the step that failed has removed the
/// temporary first; the destructor removes one that was not placed.
class AtomicFile {
public:
    explicit AtomicFile(std::filesystem::path target, mode_t mode = 0644, AtomicFailure failure = nullptr)
        : target_(std::move(target)), temp_(temporary_beside(target_)), failure_(failure) {
        fd_.reset(::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
        if (!fd_) fail(AtomicStep::create, errno);
        owns_temp_ = true;
    }
    AtomicFile(AtomicFile&& o) noexcept
        : target_(std::move(o.target_)),
          temp_(std::move(o.temp_)),
          fd_(std::move(o.fd_)),
          failure_(o.failure_),
          owns_temp_(std::exchange(o.owns_temp_, false)) {}
    AtomicFile& operator=(AtomicFile&&) = delete;
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    ~AtomicFile() { discard(); }

    /// The temporary's descriptor (open for writing) until the file is placed.
    [[nodiscard]] int fd() const noexcept { return fd_.get(); }
    [[nodiscard]] const std::filesystem::path& target() const noexcept { return target_; }
    [[nodiscard]] const std::filesystem::path& temp_path() const noexcept { return temp_; }

    /// Writes all of `data` (short writes and EINTR retried).
    void write(std::string_view data) {
        while (!data.empty()) {
            const ssize_t n = ::write(fd_.get(), data.data(), data.size());
            if (n < 0) {
                if (errno == EINTR) continue;
                fail(AtomicStep::write, errno);
            }
            data.remove_prefix(static_cast<std::size_t>(n));
        }
    }

    /// fsyncs the temporary's bytes (commit() does, unless told not to).
    void sync() {
        if (::fsync(fd_.get()) != 0) fail(AtomicStep::sync, errno);
    }

    /// Puts the file in place of the target, whatever was there: made durable as `d` says, closed,
    /// renamed.
    void commit(Durability d = Durability::full) {
        if (d != Durability::none) sync();
        fd_.reset();
        placed(::rename(temp_.c_str(), target_.c_str()) == 0 ? 0 : errno);
        if (d == Durability::full) fsync_folder();
    }

    /// The same, except that an existing target is never replaced: the file is linked to its name
    /// (an existing one fails with EEXIST) and the temporary name removed.
    void commit_new(Durability d = Durability::full) {
        if (d != Durability::none) sync();
        fd_.reset();
        placed(::link(temp_.c_str(), target_.c_str()) == 0 ? 0 : errno);
        ::unlink(temp_.c_str());
        if (d == Durability::full) fsync_folder();
    }

    /// Renames the file into place while its descriptor stays open, and hands the descriptor over
    /// (a file whose lock must be held from before it has its name). Nothing is fsync'd.
    [[nodiscard]] UniqueFd commit_keeping_fd() {
        placed(::rename(temp_.c_str(), target_.c_str()) == 0 ? 0 : errno);
        return std::move(fd_);
    }

    /// Removes the temporary (nothing is placed); the destructor does it too.
    void discard() noexcept {
        fd_.reset();
        if (std::exchange(owns_temp_, false)) ::unlink(temp_.c_str());
    }

private:
    /// After the rename or link into place: `err` is its errno value (0: done).
    void placed(int err) {
        if (err != 0) fail(AtomicStep::place, err);
        owns_temp_ = false;
    }

    void fsync_folder() const {
        const std::filesystem::path folder = target_.parent_path();
        fsync_dir(folder.empty() ? std::filesystem::path(".") : folder);
    }

    [[noreturn]] void fail(AtomicStep step, int err) {
        discard();
        if (failure_ != nullptr) failure_(step, temp_, target_, err);
        static constexpr const char* what[] = {"cannot create", "cannot write", "cannot fsync", "cannot publish"};
        throw_errno(what[static_cast<int>(step)], step == AtomicStep::place ? target_ : temp_, err);
    }

    std::filesystem::path target_;
    std::filesystem::path temp_;
    UniqueFd fd_;
    AtomicFailure failure_;
    bool owns_temp_ = false;  // the temporary exists under temp_ and is this object's to remove
};

}  // namespace skc::detail
