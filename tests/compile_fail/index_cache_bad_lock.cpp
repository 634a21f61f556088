// An IndexCache over a lock policy that does not fit is named in one message, as in the host.
// expect: the Lock policy needs a member `Guard lock_until(std::string_view name, LockMode mode,
#include <skc/policy/cache.hpp>

struct NotALock {
    using Guard = skc::NoLock::Guard;
};

using Cache = skc::IndexCache<skc::MemoryStorage, NotALock>;
static_assert(sizeof(Cache) > 0);
