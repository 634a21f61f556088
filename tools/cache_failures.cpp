// skc cache failures, skc cache forget-failures: the ops the kernel compiler failed on, which skc
// remembers in each namespace and leaves out of later compiles (docs/cache.md, "Remembered
// failures"), listed with what the compiler said, and forgotten so that they are tried again.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include <skc/known_failures.hpp>
#include <skc/value.hpp>

#include "cache.hpp"
#include "cli.hpp"
#include "common.hpp"

namespace skc_tool {

namespace {

std::filesystem::path failures_file(const Target& t, const std::string& stem) {
    return t.dir / stem / std::string(skc::KnownFailures::file_name);
}

/// The message's first line, for the table.
std::string first_line(const std::string& s) {
    const std::size_t nl = s.find('\n');
    return nl == std::string::npos ? s : s.substr(0, nl) + " ...";
}

int cache_failures(const Target& t, const CacheOptions& o) {
    if (nothing_there(t, o)) return exit_ok;
    skc::Array list;
    for (const std::string& stem : t.namespaces) {
        const std::optional<skc::KnownFailures::Stored> s = skc::KnownFailures::load(failures_file(t, stem));
        if (o.json) {
            skc::Array ops;
            if (s)
                for (const skc::FailedOp& f : s->ops)
                    ops.emplace_back(skc::Object{{"digest", f.digest.hex()},
                                                 {"op_type", utf8(f.op_type)},
                                                 {"file", utf8(f.file)},
                                                 {"message", utf8(f.message)}});
            list.emplace_back(skc::Object{{"namespace", utf8(stem)},
                                          {"compiler_fingerprint", utf8(s ? s->fingerprint : std::string())},
                                          {"ops", std::move(ops)}});
            continue;
        }
        if (!s || s->ops.empty()) {
            out(printable(stem) + ": no known failures\n");
            continue;
        }
        out(printable(stem) + ": " + plural(s->ops.size(), "op", "ops") + " the compiler failed on (compiler " +
            printable(s->fingerprint) + "):\n");
        for (const skc::FailedOp& f : s->ops)
            out("  " + f.digest.hex() + "  " + printable(f.op_type) + "  " + printable(f.file) + "\n      " +
                printable(first_line(f.message)) + "\n");
    }
    if (o.json) print_namespaces_json(t, std::move(list));
    return exit_ok;
}

int cache_forget_failures(const Target& t, const CacheOptions& o) {
    if (nothing_there(t, o)) return exit_ok;
    skc::Array list;
    for (const std::string& stem : t.namespaces) {
        const std::optional<skc::KnownFailures::Stored> s = skc::KnownFailures::load(failures_file(t, stem));
        skc::KnownFailures known(t.dir / stem, s ? s->fingerprint : std::string());
        const std::size_t n = known.forget();
        if (o.json) list.emplace_back(skc::Object{{"namespace", utf8(stem)}, {"forgotten", std::uint64_t{n}}});
        else out(printable(stem) + ": forgot " + plural(n, "failed op", "failed ops") + "\n");
    }
    if (o.json) print_namespaces_json(t, std::move(list));
    return exit_ok;
}

}  // namespace

void add_cache_failures(CLI::App& cache, Action& action) {
    CacheCommand c = add_cache_command(
        cache, action, "failures", "the ops the kernel compiler failed on, which compiles leave out", cache_failures);
    c.app.footer("exit status: 0 done (also when there is no cache); 2 bad usage; 3 the cache could not be read");
}

void add_cache_forget_failures(CLI::App& cache, Action& action) {
    CacheCommand c = add_cache_command(
        cache, action, "forget-failures",
        "forget the ops the kernel compiler failed on: the next compile tries them again", cache_forget_failures);
    c.app.footer("exit status: 0 done (also when there is no cache); 2 bad usage; 3 the cache could not be changed");
}

}  // namespace skc_tool
