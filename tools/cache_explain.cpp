// skc cache explain: why `skc compile` with the same options would miss. It makes the key of the
// op info files in --ops exactly as skc compile does (the same selection and key options), then
// names the nearest entry of the cache and what differs. It only reads: it writes nothing, not even a
// lock file.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <skc/compiler.hpp>
#include <skc/op_info_io.hpp>
#include <skc/policy/cache.hpp>
#include <skc/select.hpp>
#include <skc/value.hpp>

#include "cache.hpp"
#include "cli.hpp"
#include "commands.hpp"
#include "common.hpp"

namespace skc_tool {

namespace {

namespace fs = std::filesystem;

skc::Object explanation_json(const skc::MissExplanation& x) {
    skc::Object j;
    j.push_back({"key", x.entry.key});
    j.push_back({"namespace", utf8(x.ns)});
    j.push_back({"created_unix", x.entry.created_unix});
    skc::Array parts;
    for (const skc::PartDifference& d : x.parts)
        parts.emplace_back(skc::Object{{"part", d.part}, {"entry", utf8(d.entry)}, {"wanted", utf8(d.wanted)}});
    j.push_back({"parts", std::move(parts)});
    skc::Object ops;
    ops.push_back({"differ", x.ops_differ});
    ops.push_back({"known", x.ops_known});
    ops.push_back({"common", x.common_ops});
    auto names = [](const std::vector<std::string>& v) {
        skc::Array a;
        for (const std::string& n : v) a.emplace_back(utf8(n));
        return a;
    };
    ops.push_back({"added", names(x.added)});
    ops.push_back({"removed", names(x.removed)});
    skc::Array changed;
    for (const auto& [was, now] : x.changed)
        changed.emplace_back(skc::Object{{"entry", utf8(was)}, {"now", utf8(now)}});
    ops.push_back({"changed", std::move(changed)});
    j.push_back({"ops", std::move(ops)});
    j.push_back({"near", x.near()});
    return j;
}

std::string explanation_text(const skc::MissExplanation& x) {
    std::string r = "nearest entry: " + x.entry.key + " in " + printable(x.ns) + ", stored " +
                    local_time(x.entry.created_unix) + "\n";
    if (x.parts.empty() && !x.ops_differ) return r;
    r += "it differs in:\n";
    for (const skc::PartDifference& d : x.parts)
        r += "  " + d.part + ": " + printable(d.entry) + " (entry) -> " + printable(d.wanted) + " (now)\n";
    if (x.ops_differ && !x.ops_known) {
        r += "  ops: the entry keeps no op list to compare with (" + std::to_string(x.entry.ops) + " ops)\n";
    } else if (x.ops_differ) {
        r += "  ops: " + std::to_string(x.changed.size()) + " changed, " + std::to_string(x.added.size()) + " added, " +
             std::to_string(x.removed.size()) + " removed, " + std::to_string(x.common_ops) + " the same\n";
        for (const auto& [was, now] : x.changed)
            r += "    changed  " + printable(now) + " (the entry's " + printable(was) + ")\n";
        for (const std::string& n : x.added) r += "    added    " + printable(n) + "\n";
        for (const std::string& n : x.removed) r += "    removed  " + printable(n) + "\n";
    }
    return r;
}

/// The key of --ops and the nearest entry, with what differs (key_options() makes the key as skc compile does).
int cache_explain(const Target& t, const CacheOptions& opts) {
    const KeyArgs& k = opts.key;
    const fs::path& cache_dir = t.dir;
    const skc::Options o = key_options(k);
    require_folder("--ops", k.ops);
    // The same selection as skc compile's: supported ops, not blacklisted, distinct, without bin fields.
    skc::DirReadResult in = skc::read_op_info_dir(k.ops);
    for (skc::LoadedOp& op : in.ops) op.record = skc::without_bin_fields(std::move(op.record));
    const skc::CompiledSet none;
    const std::vector<skc::Decision> decisions =
        skc::plan_selection(in.ops, skc::SelectOptions{o.op_blacklist, false}, none);
    std::vector<skc::Digest> digests;
    std::vector<skc::KeyOp> named;
    for (const skc::Decision& d : decisions)
        if (d.verdict == skc::Verdict::selected) {
            digests.push_back(d.digest);
            named.push_back({d.digest, d.name});
        }
    if (digests.empty())
        throw skc::Error(skc::Errc::invalid_argument,
                         "no op info file to compile in the folder (none, or all left out)",
                         skc::ErrorContext{k.ops, {}, {}});
    const std::string fingerprint =
        skc::compiler_fingerprint(k.compiler, o.compiler_check, cache_dir, skc::MemoAccess::read_only);
    skc::CacheKey key = skc::make_cache_key(digests, skc::key_inputs(o, k.toolchain_version, k.device, fingerprint));
    key.ops = std::move(named);
    const std::optional<skc::MissExplanation> x = skc::explain_miss(cache_dir, key, opts.ns.value_or(""));
    if (opts.json) {
        skc::Object root;
        root.push_back({"cache_dir", utf8(t.shown)});
        root.push_back({"key", key.hex()});
        root.push_back({"ops", digests.size()});
        root.push_back({"hit", x && x->hit});
        if (x && x->composite) {
            skc::Array parts;
            for (const skc::CachePart& p : x->composite->parts)
                parts.emplace_back(skc::Object{{"key", p.key}, {"size", p.size}});
            root.push_back({"composite", skc::Object{{"namespace", utf8(x->ns)}, {"parts", std::move(parts)}}});
        }
        root.push_back({"nearest", x && !x->hit ? skc::Value(explanation_json(*x)) : skc::Value(nullptr)});
        print_json(std::move(root));
        return exit_ok;
    }
    std::string r = "cache directory: " + printable(t.shown) + "\nkey " + key.hex() + " (" +
                    plural(digests.size(), "op", "ops") + ")\n";
    if (x && x->composite) {
        r += "hit: the key is a composite entry in " + printable(x->ns) + ", held by " +
             plural(x->composite->parts.size(), "package", "packages") + " of other entries:\n";
        for (const skc::CachePart& p : x->composite->parts) r += "  " + p.key + "  " + human_size(p.size) + "\n";
    } else if (x && x->hit) r += "hit: the key has an entry in " + printable(x->ns) + "\n";
    else if (!x) r += "miss: the cache has no entry to compare with\n";
    else r += "miss\n" + explanation_text(*x);
    out(r);
    return exit_ok;
}

}  // namespace

void add_cache_explain(CLI::App& cache, Action& action) {
    CacheCommand c = add_cache_command(cache, action, "explain",
                                       "why the ops in --ops miss: the nearest entry and what differs", cache_explain);
    add_key_options(c.app, c.options.key);
    c.app.footer(
        "explain takes the key's options as skc compile does, and only reads.\n\n"
        "exit status: 0 done (hit or miss); 2 bad usage, or an --ops folder that cannot be read or holds a bad op "
        "info file; 3 the cache could not be read");
}

}  // namespace skc_tool
