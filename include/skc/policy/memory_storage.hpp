// skc/policy/memory_storage.hpp: MemoryStorage, the Storage (storage.hpp) that keeps objects in
// memory, shared by the copies of one instance: for tests and caches of a single process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "filesystem_storage.hpp"
#include "storage.hpp"

namespace skc {

/// Objects in memory, shared by copies of one instance; for tests and single-process caches.
class MemoryStorage {
    struct Object {
        std::string data;
        std::uint64_t version = 0;
        std::int64_t mtime_ns = 0;
        std::int64_t ctime_ns = 0;
        std::uint64_t id = 0;    // a log's identity: the version it was made with
        std::uint64_t base = 0;  // bytes of a log discarded before `data`
    };
    struct State {
        mutable std::mutex mu;
        std::map<std::string, Object, std::less<>> objects;
        std::uint64_t next_version = 1;
    };

public:
    MemoryStorage() : state_(std::make_shared<State>()) {}

    [[nodiscard]] std::optional<std::string> read(std::string_view name) const {
        detail::check_object_name(name);
        std::lock_guard lock(state_->mu);
        auto it = state_->objects.find(name);
        if (it == state_->objects.end()) return std::nullopt;
        return it->second.data;
    }
    void write(std::string_view name, std::string_view data) { put(name, std::string(data)); }
    ObjectInfo write_stream(std::string_view name, const std::function<void(const ChunkFn&)>& produce) {
        std::string data;
        produce([&](std::string_view c) { data.append(c); });
        put(name, std::move(data));
        return stat(name).value();
    }
    ObjectInfo import_file(std::string_view name, const std::filesystem::path& file) {
        std::string data;
        FilesystemStorage(file.parent_path()).read_chunks(file.filename().string(), [&](std::string_view c) {
            data.append(c);
        });
        put(name, std::move(data));
        return stat(name).value();
    }
    bool remove(std::string_view name) {
        detail::check_object_name(name);
        std::lock_guard lock(state_->mu);
        return state_->objects.erase(std::string(name)) != 0;
    }
    [[nodiscard]] std::optional<ObjectInfo> stat(std::string_view name) const {
        detail::check_object_name(name);
        std::lock_guard lock(state_->mu);
        auto it = state_->objects.find(name);
        if (it == state_->objects.end()) return std::nullopt;
        return ObjectInfo{it->second.data.size(), it->second.version, it->second.mtime_ns, true, it->second.ctime_ns};
    }
    void touch(std::string_view name) {
        std::lock_guard lock(state_->mu);
        auto it = state_->objects.find(name);
        if (it != state_->objects.end()) it->second.mtime_ns = it->second.ctime_ns = now_ns();
    }
    void touch(std::string_view name, std::int64_t mtime_ns) {
        std::lock_guard lock(state_->mu);
        auto it = state_->objects.find(name);
        if (it == state_->objects.end() || it->second.mtime_ns >= mtime_ns || it->second.ctime_ns >= mtime_ns) return;
        it->second.mtime_ns = mtime_ns;
        it->second.ctime_ns = now_ns();
    }
    [[nodiscard]] std::vector<std::string> list(std::string_view folder) const {
        std::lock_guard lock(state_->mu);
        std::vector<std::string> out;
        const std::string prefix = folder.empty() ? std::string() : std::string(folder) + "/";
        for (const auto& [name, obj] : state_->objects)
            if (name.compare(0, prefix.size(), prefix) == 0 && name.find('/', prefix.size()) == std::string::npos)
                out.push_back(name);
        return out;
    }
    std::uint64_t append(std::string_view name, std::string_view data) {
        detail::check_object_name(name);
        std::lock_guard lock(state_->mu);
        auto it = state_->objects.find(name);
        if (it == state_->objects.end()) {
            const std::uint64_t v = state_->next_version++;
            it = state_->objects.emplace(std::string(name), Object{{}, v, 0, 0, v, 0}).first;
        }
        it->second.data.append(data);
        it->second.version = state_->next_version++;
        it->second.mtime_ns = it->second.ctime_ns = now_ns();
        return it->second.base + it->second.data.size();
    }
    [[nodiscard]] std::optional<LogTail> read_log(std::string_view name, const LogMark& mark) const {
        detail::check_object_name(name);
        std::lock_guard lock(state_->mu);
        auto it = state_->objects.find(name);
        if (it == state_->objects.end()) return std::nullopt;
        const Object& o = it->second;
        const bool same = o.id == mark.id && mark.offset >= o.base && mark.offset <= o.base + o.data.size();
        const std::uint64_t from = same ? mark.offset : o.base;
        return LogTail{o.id, from, o.data.substr(static_cast<std::size_t>(from - o.base))};
    }
    void discard_log(std::string_view name, const LogMark& mark) {
        detail::check_object_name(name);
        std::lock_guard lock(state_->mu);
        auto it = state_->objects.find(name);
        if (it == state_->objects.end() || it->second.id != mark.id || mark.offset <= it->second.base) return;
        Object& o = it->second;
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(mark.offset - o.base, o.data.size()));
        o.data.erase(0, n);
        o.base += n;
    }
    bool read_chunks(std::string_view name, const ChunkFn& fn) const {
        std::optional<std::string> data = read(name);
        if (!data) return false;
        fn(*data);
        return true;
    }

private:
    static std::int64_t now_ns() {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    }
    void put(std::string_view name, std::string data) {
        detail::check_object_name(name);
        std::lock_guard lock(state_->mu);
        const std::int64_t now = now_ns();
        const std::uint64_t v = state_->next_version++;
        state_->objects[std::string(name)] = Object{std::move(data), v, now, now, v, 0};
    }

    std::shared_ptr<State> state_;
};

static_assert(Storage<FilesystemStorage> && Storage<MemoryStorage>);
static_assert(StorageTraits<FilesystemStorage>::appends && StorageTraits<MemoryStorage>::appends);

}  // namespace skc
