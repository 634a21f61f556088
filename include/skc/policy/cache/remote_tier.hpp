// skc/policy/cache/remote_tier.hpp: IndexCache's side of the remote tier's protocol
// (policy/remote.hpp): download after a local miss, the key's lease (renewed while compiling),
// upload of what was compiled, and the fallback to the local cache when the remote fails.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include "../../cache_format.hpp"
#include "../index_cache.hpp"
#include "../remote.hpp"
#include "../storage.hpp"

namespace skc {

/// A fault of the remote tier: counted, one warning for the whole process, and the remote is not
/// used again by this cache (every later lookup and compile is local only).
template <class S, class L>
void IndexCache<S, L>::remote_failed(const std::string& what) {
    {
        std::lock_guard lock(mu_);
        ++stats_.remote_errors;
    }
    if (!remote_down_.exchange(true))
        log(LogLevel::warning, "the remote cache failed (" + what + "); going on with the local cache only");
}

/// After a local miss, under the key's exclusive lock (so one process per node asks the remote):
/// true when the key's package was downloaded from the remote tier and stored here; otherwise
/// false, with `lease` set when this process took the key's remote lease (it compiles and
/// uploads). While another node holds the lease, waits for its upload (until `deadline`, then it
/// compiles here too), and takes the lease when it ends without one (that node died or failed).
/// A fault of the remote ends the wait: false without a lease, and the compile is local.
template <class S, class L>
bool IndexCache<S, L>::remote_lookup_or_lease(const std::string& hex, LockClock::time_point deadline,
                                              std::optional<RemoteLease>& lease) {
    const bool fetch = config_.mode != CacheMode::recache;
    bool got = false;
    std::optional<std::uint64_t> bad;  // the upload found unusable (counted and told once)
    try {
        if (fetch) got = download(hex, /*count_miss=*/true, bad);
        if (!got && !remote_->read_only()) {
            auto pause = std::chrono::milliseconds(10);
            bool told = false;
            for (;;) {
                if (const std::optional<std::uint64_t> token = remote_->try_lease(remote_ns_, hex, remote_lease_ttl_)) {
                    lease = RemoteLease{remote_ns_, hex, *token};
                    // The lease's holder before may have uploaded it since the lookup above.
                    if (fetch && (got = download(hex, /*count_miss=*/false, bad))) {
                        remote_->release_lease(*lease);
                        lease.reset();
                    }
                    break;
                }
                if (!told) {
                    told = true;
                    log(LogLevel::info, "another node is compiling cache key " + hex +
                                            " (it holds the key's lease on " + remote_->where() +
                                            "): waiting for its upload");
                }
                if (LockClock::now() + pause >= deadline) {
                    log(LogLevel::warning, "waited " + detail::seconds_text(config_.wait_timeout) +
                                               " for another node compiling cache key " + hex + "; compiling it here");
                    break;
                }
                std::this_thread::sleep_for(pause);
                pause = std::min(pause * 2, std::chrono::milliseconds(500));
                if (fetch && (got = download(hex, /*count_miss=*/false, bad))) break;
            }
        }
    } catch (const LocalFault& f) {  // this node's storage failed: as a failed publish, an error
        if (lease) release_quietly(*lease);
        std::rethrow_exception(f.error);
    } catch (const std::exception& e) {
        remote_failed(e.what());
        if (lease) release_quietly(*lease);
        lease.reset();
        got = false;
    }
    return got;
}

/// Downloads the key's package from the remote tier straight into this cache's storage, checked
/// as it streams (size and checksum against the record), then writes the entry: true. False when
/// it is not there (absent, a composite's record, or evicted: a miss) or is refused (tampered:
/// counted as an error, with a warning); nothing is stored then. An upload found unusable before
/// (`bad`, its token) is not counted or told again. Faults of the remote throw; those of the
/// storage throw LocalFault.
template <class S, class L>
bool IndexCache<S, L>::download(const std::string& hex, bool count_miss, std::optional<std::uint64_t>& bad) {
    std::optional<std::string> record = remote_->get_record(remote_ns_, hex);
    // A composite's record has no package of its own (fetch_composite() downloads its parts): when
    // a part could not be had, the key is a miss, not a refused record.
    if (!record || decode_remote_composite(*record, hex)) {
        if (count_miss) {
            std::lock_guard lock(mu_);
            ++stats_.remote_misses;
        }
        return false;
    }
    struct NotWhole {};
    RemoteRead r;
    bool remote_fault = false, write_failed = false;
    const std::string package = "packages/" + hex + ".run";
    ObjectInfo info;
    try {
        judge_subfolders();
        info = StorageTraits<S>::write_stream(storage_, package, [&](const ChunkFn& write) {
            const ChunkFn sink = [&](std::string_view c) {
                try {
                    write(c);
                } catch (...) {
                    write_failed = true;
                    throw;
                }
            };
            try {
                r = read_remote_package(*remote_, remote_ns_, hex, sink, std::move(record));
            } catch (...) {
                remote_fault = true;  // unless the storage's write threw (below)
                throw;
            }
            if (r.status != RemoteRead::Status::whole) throw NotWhole{};
        });
    } catch (const NotWhole&) {
        // nothing stored: told below
    } catch (const LocalFault&) {
        throw;
    } catch (...) {
        if (!remote_fault || write_failed) throw LocalFault{std::current_exception()};
        throw;
    }
    if (r.status != RemoteRead::Status::whole) {
        if (bad == r.record.token) return false;
        bad = r.record.token;
        std::lock_guard lock(mu_);
        if (r.status == RemoteRead::Status::evicted) {
            ++stats_.remote_misses;
            log(LogLevel::info,
                "the package of cache key " + hex + " was evicted from " + remote_->where() + ": a miss");
        } else {
            ++stats_.remote_errors;
            log(LogLevel::warning, "the remote package of cache key " + hex + " on " + remote_->where() +
                                       " is refused: " + r.why + "; it is compiled here");
        }
        return false;
    }
    // Checked as it was written: the entry now (after its package, as a publish), and the node's
    // memo that its package is whole, so that the first hit does not read it again.
    CacheEntry e = std::move(r.record.entry);
    e.package = package;
    storage_.write("entries/" + hex, detail::encode_entry(e));
    write_manifest();
    remember_checked(hex, info);
    std::lock_guard lock(mu_);
    ++stats_.remote_hits;
    ++stats_.misses;
    stats_.remote_download_bytes += e.size;
    stats_.compile_time_saved_ns += e.compile_ns;
    return true;
}

/// Uploads entry `e`, which this process just published, under `lease`: the package in chunks
/// (expiring until committed), then the record, committed only while the lease is still ours.
template <class S, class L>
void IndexCache<S, L>::upload(const RemoteLease& lease, const CacheEntry& e) {
    if (!remote_usable()) return;
    const std::string& hex = e.key;
    try {
        if (e.size > remote_max_package_bytes) {
            log(LogLevel::warning, "cache key " + hex + " is not uploaded to " + remote_->where() +
                                       ": its package has " + std::to_string(e.size) +
                                       " bytes, above the remote tier's limit of " +
                                       std::to_string(remote_max_package_bytes) + " bytes");
            return;
        }
        std::string chunk;
        chunk.reserve(static_cast<std::size_t>(std::min(e.size, remote_chunk_bytes)));
        std::uint64_t index = 0;
        const auto put = [&] {
            remote_->put_chunk(lease, index++, chunk, remote_chunk_ttl);
            chunk.clear();
        };
        storage_.read_chunks(e.package, [&](std::string_view c) {
            while (!c.empty()) {
                const std::size_t n = std::min<std::size_t>(c.size(), remote_chunk_bytes - chunk.size());
                chunk.append(c.substr(0, n));
                c.remove_prefix(n);
                if (chunk.size() == remote_chunk_bytes) put();
            }
        });
        if (!chunk.empty() || index == 0) put();
        if (!remote_->commit(lease, index, encode_remote_record(RemoteRecord{lease.token, index, e}))) {
            log(LogLevel::info, "cache key " + hex + " was not uploaded to " + remote_->where() +
                                    ": its lease ended first (another node took the key over)");
            return;
        }
        std::lock_guard lock(mu_);
        ++stats_.remote_uploads;
        stats_.remote_upload_bytes += e.size;
    } catch (const std::exception& err) {
        remote_failed(err.what());
    }
}

/// After a local miss of key `hex` and of its composite (cover()): what the remote tier has for it.
/// A composite: the parts this node lacks are downloaded (each under its key's lock, as after a
/// miss), then the composite is stored here (`composite`). A package of its own: left to
/// get_or_compile(), which downloads it (`package`). A fault of the remote: `nothing`, after the
/// one warning.
template <class S, class L>
auto IndexCache<S, L>::fetch_composite(const std::string& hex) -> RemoteHas {
    try {
        const std::optional<std::string> record = remote_->get_record(remote_ns_, hex);
        if (!record) return RemoteHas::nothing;
        const std::optional<CompositeEntry> c = decode_remote_composite(*record, hex);
        if (!c) return RemoteHas::package;
        const auto deadline = LockClock::now() + config_.wait_timeout;
        for (const CachePart& p : c->parts) {
            const auto here = [&] {
                const Loaded l = load_entry(p.key, /*with_components=*/false);
                return l.entry && l.entry->checksum == p.checksum;
            };
            if (here()) continue;  // a node that has some of the parts downloads only the rest
            Guard ex = locks_.lock_until(key_lock(p.key), LockMode::exclusive, deadline);
            std::optional<std::uint64_t> bad;
            if (!ex.owns() || (!here() && (!download(p.key, /*count_miss=*/true, bad) || !here())))
                return RemoteHas::nothing;  // compiled here from the entries there are
        }
        storage_.write("composites/" + hex, detail::encode_composite(*c));
        return RemoteHas::composite;
    } catch (const LocalFault& f) {
        std::rethrow_exception(f.error);
    } catch (const std::exception& e) {
        remote_failed(e.what());
        return RemoteHas::nothing;
    }
}

/// Uploads composite `c`, just recorded here, and those of its parts the remote tier lacks (a
/// part compiled before the remote was there), each under its own lease; a key whose lease
/// another node holds is left to it. The composite's record goes last, after its parts.
template <class S, class L>
void IndexCache<S, L>::upload_composite(const CompositeEntry& c) {
    if (!remote_usable() || remote_->read_only()) return;
    try {
        for (const CachePart& p : c.parts) {
            const std::optional<std::string> there = remote_->get_record(remote_ns_, p.key);
            const std::optional<RemoteRecord> r = there ? decode_remote_record(*there, p.key) : std::nullopt;
            if (r && r->entry.checksum == p.checksum) continue;
            const std::optional<std::uint64_t> token = remote_->try_lease(remote_ns_, p.key, remote_lease_ttl_);
            if (!token) return;  // another node is uploading it: its composite waits for the next cover
            const RemoteLease lease{remote_ns_, p.key, *token};
            const Loaded l = load_entry(p.key, /*with_components=*/true);
            if (l.entry && l.entry->checksum == p.checksum) upload(lease, *l.entry);
            release_quietly(lease);
            if (!l.entry || l.entry->checksum != p.checksum) return;
        }
        const std::optional<std::uint64_t> token = remote_->try_lease(remote_ns_, c.key, remote_lease_ttl_);
        if (!token) return;
        const RemoteLease lease{remote_ns_, c.key, *token};
        remote_->commit(lease, 0, encode_remote_composite(*token, c));
        release_quietly(lease);
    } catch (const std::exception& e) {
        remote_failed(e.what());
    }
}

template <class S, class L>
void IndexCache<S, L>::release_quietly(const RemoteLease& lease) noexcept {
    try {
        remote_->release_lease(lease);
    } catch (...) {  // it expires on its own
    }
}

/// Holds a remote lease while this process compiles: renewed every third of its time to live by
/// a thread of its own, released at the end (the next node need not wait for it to expire). A
/// renewal that fails is a fault of the remote, reported when the holder ends.
template <class S, class L>
class IndexCache<S, L>::RemoteLeaseHolder {
public:
    RemoteLeaseHolder(IndexCache& cache, const std::optional<RemoteLease>& lease) : cache_(cache), lease_(lease) {
        if (!lease_) return;
        renewer_ = std::jthread([this](std::stop_token stop) {
            std::mutex m;
            std::condition_variable_any cv;
            std::unique_lock lock(m);
            const auto every = cache_.remote_lease_ttl_ / 3;
            while (!cv.wait_for(lock, stop, every, [&stop] { return stop.stop_requested(); })) {
                try {
                    if (!cache_.remote_->renew_lease(*lease_, cache_.remote_lease_ttl_)) return;  // fenced out
                } catch (const std::exception& e) {
                    fault_ = e.what();
                    return;
                }
            }
        });
    }
    RemoteLeaseHolder(const RemoteLeaseHolder&) = delete;
    RemoteLeaseHolder& operator=(const RemoteLeaseHolder&) = delete;
    ~RemoteLeaseHolder() {
        if (!lease_) return;
        renewer_.request_stop();
        renewer_.join();
        if (!fault_.empty()) cache_.remote_failed(fault_);
        else if (cache_.remote_usable()) cache_.release_quietly(*lease_);
    }

private:
    IndexCache& cache_;
    const std::optional<RemoteLease>& lease_;
    std::string fault_;
    std::jthread renewer_;
};

}  // namespace skc
