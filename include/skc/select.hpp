// skc/select.hpp: which recorded ops are targets, which can be compiled, and which will be.
//
// TargetPolicy says which op types go to `<pid>` (the original's fixed whitelist of tuning
// targets); SupportPolicy says which go to `<pid>_opcompile` (everything but the op types known not
// to support static compilation). Both are policies: any type with the member function is one, and
// OpTypeList builds one from a list at run time.
//
// select_for_compile() is docs/spec.md section 6, steps 3 to 5: the input folder is `<pid>_opcompile`
// (falling back to `<pid>_debug`); files whose name contains a blacklist substring are copied to
// `<pid>_opcompile_blacklist`; ops this process has already compiled (same content digest) and
// repeated contents are dropped; the rest are copied to `<pid>_opcompile_selected`. The support
// policy is applied as well, which matters when selection falls back to `<pid>_debug`. With the model compile cache the
// input folder is compiled as it is (no `_selected` copy), unless the blacklist or the
// already-compiled filter removes something: then `_selected` is written as usual, so the
// blacklist is never ignored. Input files are never moved or changed.
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <filesystem>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "detail/hash.hpp"
#include "error.hpp"
#include "layout.hpp"
#include "op_info_io.hpp"
#include "op_set.hpp"

namespace skc {

template <class P>
concept TargetPolicy = requires(const P& p, std::string_view op_type) {
    { p.is_target(op_type) } -> std::convertible_to<bool>;
};

template <class P>
concept SupportPolicy = requires(const P& p, std::string_view op_type) {
    { p.supports(op_type) } -> std::convertible_to<bool>;
};

namespace detail {
/// The messages for a Targets or Support policy that does not fit (a host calls each in one line).
template <class P>
consteval bool diagnose_targets() {
    static_assert(TargetPolicy<P>,
                  "skc: the Targets policy needs a member `bool is_target(std::string_view op_type) const`");
    return true;
}
template <class P>
consteval bool diagnose_support() {
    static_assert(SupportPolicy<P>,
                  "skc: the Support policy needs a member `bool supports(std::string_view op_type) const`");
    return true;
}
}  // namespace detail

/// The original's whitelist of tuning targets.
struct DefaultTargets {
    static constexpr std::array<std::string_view, 21> op_types{
        "FlashAttentionScore",
        "FlashAttentionScoreGrad",
        "MatMul",
        "MatMulV2",
        "BatchMatMul",
        "BatchMatMulV2",
        "Transpose",
        "TransData",
        "Gelu",
        "GeluGrad",
        "FastGelu",
        "FastGeluGrad",
        "SoftmaxV2",
        "SoftmaxGrad",
        "LayerNorm",
        "LayerNormV3",
        "LayerNormV4",
        "LayerNormGrad",
        "LayerNormGradV3",
        "LayerNormBetaGammaBackpropV2",
        "Renorm",
    };
    [[nodiscard]] constexpr bool is_target(std::string_view op_type) const noexcept {
        return std::find(op_types.begin(), op_types.end(), op_type) != op_types.end();
    }
};

/// Every op type except those known not to support static compilation.
struct DefaultSupport {
    static constexpr std::array<std::string_view, 8> unsupported{
        "ReduceSum", "ReduceMin", "ReduceMax", "ArgMinWithValue", "ArgMaxWithValue", "FusedInferAttentionScore",
        "GatherV2",  "Range",
    };
    [[nodiscard]] constexpr bool supports(std::string_view op_type) const noexcept {
        return std::find(unsupported.begin(), unsupported.end(), op_type) == unsupported.end();
    }
};

/// A policy from a list chosen at run time: a whitelist (targets or supported types) or a
/// blacklist (unsupported types).
class OpTypeList {
public:
    enum class Mode { only_these, all_but_these };
    OpTypeList(Mode mode, std::vector<std::string> types) : mode_(mode), types_(std::move(types)) {}

    [[nodiscard]] bool is_target(std::string_view op_type) const { return matches(op_type); }
    [[nodiscard]] bool supports(std::string_view op_type) const { return matches(op_type); }

private:
    [[nodiscard]] bool matches(std::string_view op_type) const {
        const bool listed = std::find(types_.begin(), types_.end(), op_type) != types_.end();
        return mode_ == Mode::only_these ? listed : !listed;
    }
    Mode mode_;
    std::vector<std::string> types_;
};

static_assert(TargetPolicy<DefaultTargets> && TargetPolicy<OpTypeList>);
static_assert(SupportPolicy<DefaultSupport> && SupportPolicy<OpTypeList>);

/// A selected op: its content digest and its op info file name in the compile folder.
struct SelectedOp {
    Digest digest;
    std::string name;
};

/// Digests of the ops compiled so far; thread-safe. The process keeps one (process_compiled()),
/// so an op compiled once is not compiled again by the same process.
class CompiledSet {
public:
    void mark(const OpSet& ops) {
        std::lock_guard lock(mu_);
        for (const OpSet::Entry& e : ops) done_.insert(e.digest);
    }
    void mark(const std::vector<SelectedOp>& ops) {
        std::lock_guard lock(mu_);
        for (const SelectedOp& e : ops) done_.insert(e.digest);
    }
    [[nodiscard]] bool contains(const Digest& d) const {
        std::lock_guard lock(mu_);
        return done_.count(d) != 0;
    }
    [[nodiscard]] std::size_t size() const {
        std::lock_guard lock(mu_);
        return done_.size();
    }
    void clear() {
        std::lock_guard lock(mu_);
        done_.clear();
    }

private:
    mutable std::mutex mu_;
    std::unordered_set<Digest, DigestHash> done_;
};

inline CompiledSet& process_compiled() {
    static CompiledSet set;
    return set;
}

struct SelectOptions {
    std::vector<std::string> blacklist;  // substrings of op info file names
    bool model_cache = false;            // the model compile cache variant
};

/// Why an op is or is not compiled.
enum class Verdict : unsigned char {
    selected,          // will be compiled
    unsupported,       // the SupportPolicy says its op type cannot be compiled statically
    blacklisted,       // its file name contains a blacklist substring
    already_compiled,  // this process compiled the same content before
    duplicate,         // another file earlier in name order has the same content
};

constexpr std::string_view to_string(Verdict v) noexcept {
    switch (v) {
    case Verdict::selected: return "selected";
    case Verdict::unsupported: return "unsupported";
    case Verdict::blacklisted: return "blacklisted";
    case Verdict::already_compiled: return "already compiled";
    case Verdict::duplicate: return "duplicate";
    }
    return {};
}

struct Decision {
    std::string name;  // file name
    Digest digest;     // content digest (without bin_type/bin_info)
    Verdict verdict;
};

namespace detail {

inline bool is_blacklisted(std::string_view file_name, const std::vector<std::string>& blacklist) {
    for (const std::string& b : blacklist)
        if (file_name.find(b) != std::string_view::npos) return true;
    return false;
}

/// The verdict for each file in turn (name order): the support policy first, then the blacklist,
/// then the already-compiled filter, then duplicates of an earlier file.
template <class Support>
struct SelectionJudge {
    const SelectOptions& opt;
    const CompiledSet& already;
    const Support& support;
    std::unordered_set<Digest, DigestHash> seen;

    Verdict operator()(std::string_view file_name, std::string_view op_type, const Digest& d) {
        if (!support.supports(op_type)) return Verdict::unsupported;
        if (is_blacklisted(file_name, opt.blacklist)) return Verdict::blacklisted;
        if (already.contains(d)) return Verdict::already_compiled;
        if (!seen.insert(d).second) return Verdict::duplicate;
        return Verdict::selected;
    }
};

}  // namespace detail

/// Decides, file by file and without touching the disk, what selection does with `ops` (in their
/// order): the support policy first, then the blacklist, then the already-compiled filter, then
/// duplicates. Both select_for_compile() and `skc ops inspect` use it, so they always agree.
template <SupportPolicy Support = DefaultSupport>
std::vector<Decision> plan_selection(const std::vector<LoadedOp>& ops, const SelectOptions& opt = {},
                                     const CompiledSet& already = process_compiled(), const Support& support = {}) {
    std::vector<Decision> out;
    out.reserve(ops.size());
    detail::SelectionJudge<Support> judge{opt, already, support, {}};
    for (const LoadedOp& op : ops) {
        Decision d{op.path.filename().string(), digest(op.record), Verdict::selected};
        d.verdict = judge(d.name, op.record.op_type, d.digest);
        out.push_back(std::move(d));
    }
    return out;
}

struct Selection {
    std::filesystem::path input_dir;    // `<pid>_opcompile`, or `<pid>_debug` when that is absent
    std::filesystem::path compile_dir;  // what the compiler gets; empty when nothing is left
    OpSet ops;                          // the selected ops; names are their file names
    std::vector<Decision> decisions;    // one per input file, in name order

    /// docs/spec.md section 6, step 5: nothing left, so compilation is skipped.
    [[nodiscard]] bool skipped() const noexcept { return ops.empty(); }
    /// How many input files got verdict `v`.
    [[nodiscard]] std::size_t count(Verdict v) const noexcept {
        std::size_t n = 0;
        for (const Decision& d : decisions) n += d.verdict == v;
        return n;
    }
};

/// docs/spec.md section 6, steps 3 to 5, on the run folder `run` (see the header comment). Throws
/// skc::Error when neither input folder exists or a file in it is not a valid op info file;
/// nothing is written then.
template <SupportPolicy Support = DefaultSupport>
Selection select_for_compile(const RunLayout& run, const SelectOptions& opt = {},
                             const CompiledSet& already = process_compiled(), const Support& support = {}) {
    Selection s;
    std::error_code ec;
    s.input_dir = std::filesystem::is_directory(run.opcompile(), ec) ? run.opcompile() : run.debug();
    if (!std::filesystem::is_directory(s.input_dir, ec))
        throw Error(Errc::io_error,
                    "no op info to select from: neither '" + run.opcompile().filename().string() + "' nor '" +
                        run.debug().filename().string() + "' exists",
                    ErrorContext{run.dir().string(), {}, {}});

    // Never read or write through a symbolic link; checked before anything is written.
    check_path_safety(s.input_dir);
    check_path_safety(run.blacklisted());
    check_path_safety(run.selected());
    for (const std::filesystem::path& out : {run.selected(), run.blacklisted()})
        if (std::filesystem::exists(std::filesystem::symlink_status(out, ec)))
            throw Error(Errc::invalid_argument,
                        "selection already ran in this run folder ('" + out.filename().string() +
                            "' exists); select once per run folder",
                        ErrorContext{run.dir().string(), {}, {}});

    // Read and decide everything before writing anything: a bad file leaves the run folder as it was.
    DirReadResult in = read_op_info_dir(s.input_dir);
    for (LoadedOp& op : in.ops) op.record = without_bin_fields(std::move(op.record));
    s.decisions = plan_selection(in.ops, opt, already, support);

    bool filtered = false;
    for (std::size_t i = 0; i < in.ops.size(); ++i) {
        const Decision& d = s.decisions[i];
        if (d.verdict == Verdict::blacklisted) {
            detail::make_dir(run.blacklisted());
            write_op_info_as(run.blacklisted(), d.name, in.ops[i].record, WriteOptions{false, false});
        }
        if (d.verdict == Verdict::selected) s.ops.insert(d.digest, std::move(in.ops[i].record), d.name);
        else filtered = true;
    }
    if (s.ops.empty()) return s;  // step 5: nothing to compile
    if (opt.model_cache && !filtered && s.input_dir == run.opcompile()) {
        s.compile_dir = s.input_dir;
        return s;
    }
    detail::make_dir(run.selected());
    for (const OpSet::Entry& e : s.ops) write_op_info_as(run.selected(), e.name, e.record, WriteOptions{false, false});
    s.compile_dir = run.selected();
    return s;
}

}  // namespace skc
