// A storage that fails on purpose: after `fail_after` more writes it either throws before writing
// (Mode::throw_first) or writes half of the object and then throws (Mode::half_write), which is what
// a storage without atomic publish does when the disk fills up or the process is interrupted.
#pragma once

#include <stdexcept>
#include <string>

#include <skc/policy/memory_storage.hpp>

#include "test_support.hpp"

namespace skc_test {

class HostileStorage {
public:
    enum class Mode { throw_first, half_write };

    HostileStorage(Mode mode, int fail_after) : mode_(mode), fail_after_(std::make_shared<int>(fail_after)) {}

    [[nodiscard]] std::optional<std::string> read(std::string_view name) const { return inner_.read(name); }
    void write(std::string_view name, std::string_view data) {
        maybe_fail(name, data);
        inner_.write(name, data);
    }
    skc::ObjectInfo import_file(std::string_view name, const std::filesystem::path& file) {
        maybe_fail(name, slurp(file));
        return inner_.import_file(name, file);
    }
    bool remove(std::string_view name) { return inner_.remove(name); }
    [[nodiscard]] std::optional<skc::ObjectInfo> stat(std::string_view name) const { return inner_.stat(name); }
    void touch(std::string_view name) { inner_.touch(name); }
    [[nodiscard]] std::vector<std::string> list(std::string_view folder) const { return inner_.list(folder); }
    bool read_chunks(std::string_view name, const skc::ChunkFn& fn) const { return inner_.read_chunks(name, fn); }

    /// From now on, fail after `n` more writes (negative: never).
    void fail_after(int n) { *fail_after_ = n; }
    skc::MemoryStorage& inner() { return inner_; }

private:
    void maybe_fail(std::string_view name, std::string_view data) {
        if (*fail_after_ < 0) return;
        if ((*fail_after_)-- > 0) return;
        if (mode_ == Mode::half_write) inner_.write(name, data.substr(0, data.size() / 2));
        throw std::runtime_error("hostile storage: write of " + std::string(name) + " failed");
    }

    Mode mode_;
    std::shared_ptr<int> fail_after_;
    skc::MemoryStorage inner_;
};

static_assert(skc::Storage<HostileStorage>);

}  // namespace skc_test
