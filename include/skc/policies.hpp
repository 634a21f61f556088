// skc/policies.hpp: which policies a StaticKernelCompiler<Invoker, Policies...> uses, the checks that
// they fit, and what the host asks of a policy beyond its role's concept (the policy traits).
//
// The policies are given by position, in PolicyRole's order (Storage, Lock, Install, Reselect, Gather,
// Support, Targets, Remote; trailing ones may be left out), or by name, in any order, with the
// selectors of fwd.hpp: `StaticKernelCompiler<MyInvoker, with_gather<LocalFsGather>>` keeps every
// other default. A role left out gets its default (default_policies). The constructor likewise takes
// the policy objects that differ from their defaults in any order, matched by type (pick).
#pragma once

#include <array>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "fwd.hpp"
#include "policy/cache.hpp"
#include "policy/any_gather.hpp"
#include "policy/gather.hpp"
#include "policy/local_fs_gather.hpp"
#include "policy/single_rank.hpp"
#include "policy/installer.hpp"
#include "policy/run_package_installer.hpp"
#include "policy/invoker.hpp"
#include "policy/process_invoker.hpp"
#include "policy/lock.hpp"
#include "policy/remote.hpp"
#include "policy/reselect.hpp"
#include "policy/filesystem_storage.hpp"
#include "policy/memory_storage.hpp"
#include "select.hpp"

namespace skc {

/// A named policy: `with_policy<PolicyRole::gather, G>`, spelt `with_gather<G>` (fwd.hpp).
template <PolicyRole Role, class P>
struct with_policy {
    static constexpr PolicyRole role = Role;
    using type = P;
};

/// How many roles there are: PolicyRole's last one is remote.
inline constexpr std::size_t policy_role_count = static_cast<std::size_t>(PolicyRole::remote) + 1;

/// Each role's default, in PolicyRole's order.
using default_policies = std::tuple<FilesystemStorage, FileLock, RunPackageInstaller, NoReselect, SingleRank,
                                    DefaultSupport, DefaultTargets, NoRemote>;
static_assert(std::tuple_size_v<default_policies> == policy_role_count, "skc: a role without a default");

namespace detail {

/// Whether P fits role R: one static_assert per requirement it misses, stated beside the role's
/// concept.
template <PolicyRole R, class P>
consteval bool fits_role() {
    // if constexpr, not switch: only R's check may be instantiated, or P would be checked against all.
    if constexpr (R == PolicyRole::storage) return diagnose_storage<P>();
    else if constexpr (R == PolicyRole::lock) return diagnose_lock<P>();
    else if constexpr (R == PolicyRole::install) return diagnose_install<P>();
    else if constexpr (R == PolicyRole::reselect) return diagnose_reselect<P>();
    else if constexpr (R == PolicyRole::gather) return diagnose_gather<P>();
    else if constexpr (R == PolicyRole::support) return diagnose_support<P>();
    else if constexpr (R == PolicyRole::targets) return diagnose_targets<P>();
    else return diagnose_remote<P>();
}

template <class P>
inline constexpr bool is_selector = false;
template <PolicyRole R, class P>
inline constexpr bool is_selector<with_policy<R, P>> = true;

template <PolicyRole R>
using default_policy = std::tuple_element_t<static_cast<std::size_t>(R), default_policies>;

/// Role R's policy among named ones: the selector of R, else R's default.
template <PolicyRole R, class... Selectors>
struct named_policy {
    using type = default_policy<R>;
};
template <PolicyRole R, class S, class... Rest>
struct named_policy<R, S, Rest...> {
    using type = std::conditional_t<S::role == R, typename S::type, typename named_policy<R, Rest...>::type>;
};

/// Role R's policy among positional ones: the R-th, else R's default.
template <PolicyRole R, class... Ps>
struct positional_policy {
    static constexpr std::size_t index = static_cast<std::size_t>(R);
    using type = typename std::conditional_t<(index < sizeof...(Ps)), std::tuple_element<index, std::tuple<Ps...>>,
                                             std::tuple_element<index, default_policies>>::type;
};

template <bool Named, class... Ps>
consteval bool roles_distinct() {
    if constexpr (!Named || sizeof...(Ps) == 0) {
        return true;
    } else {
        const PolicyRole roles[] = {Ps::role...};
        for (std::size_t i = 0; i < sizeof...(Ps); ++i)
            for (std::size_t j = i + 1; j < sizeof...(Ps); ++j)
                if (roles[i] == roles[j]) return false;
        return true;
    }
}

/// The policies a StaticKernelCompiler<Invoker, Ps...> uses: `type<PolicyRole::gather>`.
template <class... Ps>
struct chosen_policies {
    static_assert((is_selector<Ps> && ...) || (!is_selector<Ps> && ...),
                  "skc::StaticKernelCompiler: name every policy (with_gather<...>, ...) or give them all by position, "
                  "not both");
    static_assert(sizeof...(Ps) <= policy_role_count,
                  "skc::StaticKernelCompiler: more policies by position than there are roles (PolicyRole)");
    static constexpr bool named = sizeof...(Ps) > 0 && (is_selector<Ps> && ...);
    static_assert(roles_distinct<named, Ps...>(),
                  "skc::StaticKernelCompiler: a policy is chosen twice (two with_<role> of the same role)");

    template <PolicyRole R>
    using type = typename std::conditional_t<named, named_policy<R, Ps...>, positional_policy<R, Ps...>>::type;
};

/// Whether every policy fits its role: one static_assert per missing member, stated beside each
/// role's concept (tests/compile_fail/ holds a test per role). The host asks only for what it calls.
template <class Invoker, class Chosen>
consteval bool diagnose_policies() {
    const bool invoker_fits = diagnose_invoker<Invoker>();
    // Every role's check runs (each reports what its policy misses), then the results are joined.
    constexpr auto each_fits = []<std::size_t... I>(std::index_sequence<I...>) {
        return std::array<bool, sizeof...(I)>{
            fits_role<static_cast<PolicyRole>(I), typename Chosen::template type<static_cast<PolicyRole>(I)>>()...};
    }
    (std::make_index_sequence<policy_role_count>{});
    for (bool f : each_fits)
        if (!f) return false;
    return invoker_fits;
}

/// IndexCache<S, L> when both policies fit (checked by diagnose_policies), else a stand-in so that a
/// misfit reports the host's messages and not the cache's constraint failure.
template <bool Fits, class S, class L>
struct cache_for {
    using type = NoCache;
};
template <class S, class L>
struct cache_for<true, S, L> {
    using type = IndexCache<S, L>;
};

/// The constructor's policy objects: the one of type T among `ps`, else T().
template <class T>
T pick() {
    static_assert(
        std::is_default_constructible_v<T>,
        "skc::StaticKernelCompiler: a policy without a default constructor must be passed to the constructor");
    return T();
}
template <class T, class P, class... Ps>
T pick(P&& p, Ps&&... ps) {
    if constexpr (std::is_same_v<std::remove_cvref_t<P>, T>) return T(std::forward<P>(p));
    else return pick<T>(std::forward<Ps>(ps)...);
}

/// How many of the roles' types are exactly P's (a constructor argument must fill exactly one).
template <class P, class... Roles>
inline constexpr std::size_t roles_of = (std::size_t{std::is_same_v<std::remove_cvref_t<P>, Roles>} + ...);

}  // namespace detail

// ---- policy traits: what the host uses when a policy has it -----------------------------------

/// How the host opens the cache of namespace `stem` in cache folder `root` for a Storage and a Lock:
/// each constructed from the folder when it takes one (FilesystemStorage, FileLock; a FileLock gets
/// read_only access with a read-only cache), default-constructed otherwise (MemoryStorage,
/// ProcessLock). `on_disk`: the entries are files under `root`, which a miss's explanation reads.
template <class S, class L>
struct cache_opening {
    static constexpr bool on_disk = std::is_same_v<S, FilesystemStorage>;

    template <class P>
    static P make(const std::filesystem::path& dir, CacheMode mode) {
        if constexpr (std::is_constructible_v<P, std::filesystem::path, LockAccess>)
            return P(dir, mode == CacheMode::read_only ? LockAccess::read_only : LockAccess::read_write);
        else if constexpr (std::is_constructible_v<P, std::filesystem::path>) return P(dir);
        else return P{};
    }

    static std::unique_ptr<IndexCache<S, L>> open(const std::filesystem::path& root, const std::string& stem,
                                                  CacheConfig config) {
        if (config.mode != CacheMode::read_only) detail::make_dir(root / stem);
        const CacheMode mode = config.mode;
        return std::make_unique<IndexCache<S, L>>(make<S>(root / stem, mode), make<L>(root, mode), std::move(config),
                                                  CacheLockNames{stem + "/keys/", stem});
    }
};

/// The cache folder on disk: its manifest, trust checks and limits (open_cache_namespace).
template <>
struct cache_opening<FilesystemStorage, FileLock> {
    static constexpr bool on_disk = true;

    static std::unique_ptr<IndexCache<FilesystemStorage, FileLock>> open(const std::filesystem::path& root,
                                                                         const std::string& stem, CacheConfig config) {
        return open_cache_namespace(root, stem, std::move(config));
    }
};

// ---- named configurations ---------------------------------------------------------------------

/// Everything in the process: the cache in memory, process-local locks, no installs (tests, dry runs).
template <class Invoker>
using InMemoryCompiler = StaticKernelCompiler<Invoker, MemoryStorage, ProcessLock, NoInstall>;

/// The configuration of a program that runs alone, under torchrun or under MPI alike (AnyGather:
/// the ranks from the environment unless given a gather), with the remote tier `Remote` (RedisRemote
/// from ext/redis.hpp, or none), and any other roles named (`with_reselect<Hook>`): the skc tool and
/// the PyTorch plugin.
template <class Invoker, class Remote = NoRemote, class... Named>
using NodeCompiler = StaticKernelCompiler<Invoker, with_gather<AnyGather>, with_remote<Remote>, Named...>;

}  // namespace skc
