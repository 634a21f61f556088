// skc/ext/redis_detail.hpp: what RedisRemote (ext/redis.hpp) talks to its server with: the limits and
// the fencing key, the SIGPIPE guard, hiredis timeouts and reply types, and the Lua scripts of
// renew, release, commit and remove.
#pragma once

#include <hiredis/hiredis.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include "../policy/remote.hpp"

namespace skc::detail {

/// The slowest transfer a chunk command is given time for: 8 MB/s.
inline constexpr std::uint64_t redis_min_bytes_per_second = 8'000'000;
inline constexpr std::uint64_t redis_max_chunks = remote_max_package_bytes / remote_chunk_bytes;
inline constexpr std::string_view redis_fence_key = "skc:fence";

/// `s` with Redis's glob characters (`*?[]\`) escaped, for SCAN MATCH.
inline std::string redis_glob_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}

/// Blocks SIGPIPE on this thread while it lives, and discards one raised meanwhile (hiredis writes
/// with write(2), and a write to a connection the server closed raises it).
class RedisSigpipeGuard {
public:
    RedisSigpipeGuard() noexcept {
        sigset_t pipe;
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        sigset_t pending;
        sigemptyset(&pending);
        (void)sigpending(&pending);
        was_pending_ = sigismember(&pending, SIGPIPE) == 1;
        (void)pthread_sigmask(SIG_BLOCK, &pipe, &old_);
    }
    RedisSigpipeGuard(const RedisSigpipeGuard&) = delete;
    RedisSigpipeGuard& operator=(const RedisSigpipeGuard&) = delete;
    ~RedisSigpipeGuard() {
        const int saved = errno;
        if (!was_pending_) {
            sigset_t pending;
            sigemptyset(&pending);
            if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
                sigset_t pipe;
                sigemptyset(&pipe);
                sigaddset(&pipe, SIGPIPE);
                const timespec zero{};
                while (sigtimedwait(&pipe, nullptr, &zero) < 0 && errno == EINTR) {}
            }
        }
        (void)pthread_sigmask(SIG_SETMASK, &old_, nullptr);
        errno = saved;
    }

private:
    sigset_t old_{};
    bool was_pending_ = false;
};

inline timeval redis_timeval(std::chrono::milliseconds ms) {
    timeval tv{};
    tv.tv_sec = static_cast<decltype(tv.tv_sec)>(ms.count() / 1000);
    tv.tv_usec = static_cast<decltype(tv.tv_usec)>((ms.count() % 1000) * 1000);
    return tv;
}

inline std::string_view redis_reply_type_name(int type) {
    switch (type) {
    case REDIS_REPLY_STRING: return "a string";
    case REDIS_REPLY_ARRAY: return "an array";
    case REDIS_REPLY_INTEGER: return "an integer";
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_STATUS: return "a status";
    case REDIS_REPLY_ERROR: return "an error";
    default: return "an unknown type";
    }
}

/// Reply types a command accepts (an error reply is never accepted).
enum RedisAccept : unsigned {
    redis_string = 1u << REDIS_REPLY_STRING,
    redis_array = 1u << REDIS_REPLY_ARRAY,
    redis_integer = 1u << REDIS_REPLY_INTEGER,
    redis_nil = 1u << REDIS_REPLY_NIL,
    redis_status = 1u << REDIS_REPLY_STATUS,
};

// KEYS[1] the lease; ARGV[1] the token, ARGV[2] the ttl in ms. 1 when renewed.
inline constexpr const char* redis_renew_script = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
)lua";

// KEYS[1] the lease; ARGV[1] the token. 1 when released.
inline constexpr const char* redis_release_script = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
)lua";

// KEYS[1] the lease, KEYS[2] the record; ARGV[1] the token, ARGV[2] the upload's chunk count,
// ARGV[3] the key's chunk prefix (skc:<ns>:chunk:<key>:), ARGV[4] the record, ARGV[5] the most
// chunks a record may name. 1 when committed, 0 when fenced out or a chunk is missing.
inline constexpr const char* redis_commit_script = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local n = tonumber(ARGV[2])
local p = ARGV[3]
for i = 0, n - 1 do
  if redis.call('EXISTS', p .. ARGV[1] .. ':' .. i) == 0 then return 0 end
end
for i = 0, n - 1 do redis.call('PERSIST', p .. ARGV[1] .. ':' .. i) end
local old = redis.call('GET', KEYS[2])
if old then
  local t, c = string.match(old, '^skc%-remote%-record 1 (%d+) (%d+)\n')
  if t and t ~= ARGV[1] and tonumber(c) <= tonumber(ARGV[5]) then
    for i = 0, tonumber(c) - 1 do redis.call('UNLINK', p .. t .. ':' .. i) end
  end
end
redis.call('SET', KEYS[2], ARGV[4])
return 1
)lua";

// KEYS[1] the record; ARGV[1] the key's chunk prefix, ARGV[2] the most chunks a record may name.
// 1 when a record was removed.
inline constexpr const char* redis_remove_script = R"lua(
local old = redis.call('GET', KEYS[1])
if not old then return 0 end
local t, c = string.match(old, '^skc%-remote%-record 1 (%d+) (%d+)\n')
if t and tonumber(c) <= tonumber(ARGV[2]) then
  for i = 0, tonumber(c) - 1 do redis.call('UNLINK', ARGV[1] .. t .. ':' .. i) end
end
redis.call('DEL', KEYS[1])
return 1
)lua";

}  // namespace skc::detail
