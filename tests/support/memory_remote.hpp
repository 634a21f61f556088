// A RemoteTier in the memory of this process, shared by the caches given one State: the remote
// protocol's tests without a server (the Redis model is tested against a real redis-server in
// tests/redis/). Faults on demand: every call throws from a given call on, a chunk can be removed
// or altered, a lease taken for a node that then "dies".
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <skc/error.hpp>
#include <skc/policy/remote.hpp>

namespace skc_test {

class MemoryRemote final : public skc::RemoteTier {
public:
    using Clock = std::chrono::steady_clock;
    struct State {
        std::mutex mu;
        std::map<std::string, std::string, std::less<>> records;  // ns/key
        std::map<std::string, std::string, std::less<>> chunks;   // ns/key/token/index
        std::map<std::string, std::pair<std::uint64_t, Clock::time_point>, std::less<>> leases;
        std::uint64_t fence = 0;
        std::atomic<long> calls{0};
        std::atomic<long> fail_from{-1};  // calls from this one on throw (-1: never)
        std::atomic<int> leases_taken{0};
        std::atomic<int> uploads{0};
    };

    explicit MemoryRemote(std::shared_ptr<State> s, bool read_only = false,
                          std::chrono::milliseconds lease_ttl = std::chrono::seconds(30))
        : s_(std::move(s)), ro_(read_only), ttl_(lease_ttl) {}

    [[nodiscard]] std::string where() const override { return "memory://test"; }
    [[nodiscard]] bool read_only() const override { return ro_; }
    [[nodiscard]] std::chrono::milliseconds lease_ttl() const override { return ttl_; }

    std::optional<std::string> get_record(std::string_view ns, std::string_view key) override {
        std::lock_guard lock(enter());
        const auto it = s_->records.find(name(ns, key));
        if (it == s_->records.end()) return std::nullopt;
        return it->second;
    }
    bool get_chunk(std::string_view ns, std::string_view key, std::uint64_t token, std::uint64_t index,
                   const skc::ChunkFn& fn) override {
        std::string bytes;
        {
            std::lock_guard lock(enter());
            const auto it = s_->chunks.find(chunk(ns, key, token, index));
            if (it == s_->chunks.end()) return false;
            bytes = it->second;
        }
        fn(bytes);
        return true;
    }
    std::optional<std::uint64_t> try_lease(std::string_view ns, std::string_view key,
                                           std::chrono::milliseconds ttl) override {
        std::lock_guard lock(enter());
        const std::string n = name(ns, key);
        const auto it = s_->leases.find(n);
        if (it != s_->leases.end() && it->second.second > Clock::now()) return std::nullopt;
        const std::uint64_t token = ++s_->fence;
        s_->leases[n] = {token, Clock::now() + ttl};
        ++s_->leases_taken;
        return token;
    }
    bool renew_lease(const skc::RemoteLease& l, std::chrono::milliseconds ttl) override {
        std::lock_guard lock(enter());
        const auto it = s_->leases.find(name(l.ns, l.key));
        if (it == s_->leases.end() || it->second.first != l.token || it->second.second <= Clock::now()) return false;
        it->second.second = Clock::now() + ttl;
        return true;
    }
    void release_lease(const skc::RemoteLease& l) override {
        std::lock_guard lock(enter());
        const auto it = s_->leases.find(name(l.ns, l.key));
        if (it != s_->leases.end() && it->second.first == l.token) s_->leases.erase(it);
    }
    bool lease_held(std::string_view ns, std::string_view key) override {
        std::lock_guard lock(enter());
        const auto it = s_->leases.find(name(ns, key));
        return it != s_->leases.end() && it->second.second > Clock::now();
    }
    void put_chunk(const skc::RemoteLease& l, std::uint64_t index, std::string_view bytes,
                   std::chrono::milliseconds) override {
        std::lock_guard lock(enter());
        s_->chunks[chunk(l.ns, l.key, l.token, index)] = std::string(bytes);
    }
    bool commit(const skc::RemoteLease& l, std::uint64_t chunks, std::string_view record) override {
        std::lock_guard lock(enter());
        const auto it = s_->leases.find(name(l.ns, l.key));
        if (it == s_->leases.end() || it->second.first != l.token || it->second.second <= Clock::now()) return false;
        for (std::uint64_t i = 0; i < chunks; ++i)
            if (s_->chunks.count(chunk(l.ns, l.key, l.token, i)) == 0) return false;
        s_->records[name(l.ns, l.key)] = std::string(record);
        ++s_->uploads;
        return true;
    }
    std::vector<std::string> namespaces() override {
        std::lock_guard lock(enter());
        std::vector<std::string> out;
        for (const auto& [n, r] : s_->records) {
            std::string ns = n.substr(0, n.find('/'));
            if (out.empty() || out.back() != ns) out.push_back(std::move(ns));
        }
        return out;
    }
    std::vector<std::string> keys(std::string_view ns) override {
        std::lock_guard lock(enter());
        std::vector<std::string> out;
        for (const auto& [n, r] : s_->records)
            if (n.starts_with(std::string(ns) + "/")) out.push_back(n.substr(ns.size() + 1));
        return out;
    }
    void remove(std::string_view ns, std::string_view key) override {
        std::lock_guard lock(enter());
        s_->records.erase(name(ns, key));
    }

    /// Every chunk of `key`'s record(s): for tests that alter or drop them.
    static std::vector<std::string> chunk_names(State& s, std::string_view ns, std::string_view key) {
        std::lock_guard lock(s.mu);
        std::vector<std::string> out;
        for (const auto& [n, c] : s.chunks)
            if (n.starts_with(std::string(ns) + "/" + std::string(key) + "/")) out.push_back(n);
        return out;
    }

private:
    std::mutex& enter() {
        const long n = s_->calls++;
        const long from = s_->fail_from.load();
        if (from >= 0 && n >= from) throw skc::Error(skc::Errc::remote_failed, "memory://test: connection refused");
        return s_->mu;
    }
    static std::string name(std::string_view ns, std::string_view key) {
        return std::string(ns) + "/" + std::string(key);
    }
    static std::string chunk(std::string_view ns, std::string_view key, std::uint64_t token, std::uint64_t index) {
        return name(ns, key) + "/" + std::to_string(token) + "/" + std::to_string(index);
    }

    std::shared_ptr<State> s_;
    bool ro_;
    std::chrono::milliseconds ttl_;
};

}  // namespace skc_test
