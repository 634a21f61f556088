// A MemoryStorage whose objects can be altered in place: tamper(name, bytes) makes reads of `name`
// return other bytes while its identity (stat: size aside, version and times) stays what it was,
// which is what silent corruption looks like (a disk error, or a careless hand). A write, import or
// removal of the object ends the tampering. Copies share the store and the tampering, as
// MemoryStorage's copies share objects.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <skc/policy/memory_storage.hpp>

namespace skc_test {

class TamperableStorage : public skc::MemoryStorage {
public:
    void tamper(std::string_view name, std::string bytes) {
        std::lock_guard lock(state_->mu);
        state_->bytes[std::string(name)] = std::move(bytes);
    }

    [[nodiscard]] std::optional<std::string> read(std::string_view name) const {
        if (std::optional<std::string> t = tampered(name)) return t;
        return MemoryStorage::read(name);
    }
    bool read_chunks(std::string_view name, const skc::ChunkFn& fn) const {
        if (std::optional<std::string> t = tampered(name)) {
            fn(*t);
            return true;
        }
        return MemoryStorage::read_chunks(name, fn);
    }
    void write(std::string_view name, std::string_view data) {
        untamper(name);
        MemoryStorage::write(name, data);
    }
    skc::ObjectInfo import_file(std::string_view name, const std::filesystem::path& file) {
        untamper(name);
        return MemoryStorage::import_file(name, file);
    }
    bool remove(std::string_view name) {
        untamper(name);
        return MemoryStorage::remove(name);
    }

private:
    struct State {
        mutable std::mutex mu;
        std::map<std::string, std::string, std::less<>> bytes;
    };
    [[nodiscard]] std::optional<std::string> tampered(std::string_view name) const {
        std::lock_guard lock(state_->mu);
        const auto it = state_->bytes.find(name);
        if (it == state_->bytes.end()) return std::nullopt;
        return it->second;
    }
    void untamper(std::string_view name) {
        std::lock_guard lock(state_->mu);
        if (const auto it = state_->bytes.find(name); it != state_->bytes.end()) state_->bytes.erase(it);
    }

    std::shared_ptr<State> state_ = std::make_shared<State>();
};

static_assert(skc::Storage<TamperableStorage>);

}  // namespace skc_test
