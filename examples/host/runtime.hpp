// examples/host/runtime.hpp: a small host (CPU) runtime that uses static kernels when it has them.
//
// Runtime runs ops with the pointer convention of plan.hpp. For each call it looks the op's content
// digest up in its KernelTable: a static (shape-specialised, ahead-of-time compiled) kernel runs
// when the table has one, the shape-generic kernel of dispatch.hpp otherwise. HostReselect is the
// skc::ReselectHook that refills the table from the op library after StaticKernelCompiler installs
// a package (docs/spec.md section 9: "reselect"), so the next call of an op already uses its static kernel.
//
// Why HostOp: a model runs the same op instances over and over. Building the record, hashing it and
// analysing it into a generic plan on every call would cost more than the small kernels themselves,
// so a model prepares each op once (HostOp: record, digest and plan) and a call is then one table
// probe and one indirect call. run(const skc::OpRecord&, ...) does the same from a bare record for
// one-off calls (it hashes and analyses per call).
//
// While a recording session is attached (set_recorder), every op run is recorded too (skc's
// recorder deduplicates by digest, so a repeated op costs a shard lock and a set lookup; the record
// is copied only the first time). Records get bin_type 0 when a static kernel ran and 1 when the
// generic one did, as the original's `<pid>` and `<pid>_debug` files say which kernel ran.
//
// Threads: run() may be called from any number of threads, also while another thread reloads the
// table (KernelTable publishes a new table atomically and keeps the old ones alive) or attaches or
// detaches a recorder. Detaching does not wait for calls in flight: stop the recorder (or
// StaticKernelCompiler::compile(recorder), which stops it) only when no run() that may still see it
// is in progress, or those calls throw skc::Error(no_session).
//
// Kernel code stays loaded for the life of the process (load_installed_kernels never closes its
// handles), so a kernel pointer taken from an old table stays callable after a reload.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <skc/error.hpp>
#include <skc/kernel_table.hpp>
#include <skc/op_record.hpp>
#include <skc/policy/reselect.hpp>
#include <skc/recorder.hpp>

#include "dispatch.hpp"
#include "loader.hpp"
#include "plan.hpp"

namespace skc_host {

/// One op instance of a model, prepared once: its record, content digest and generic plan.
class HostOp {
public:
    /// Validates the record and analyses it. Throws skc::Error: the record's fault (with its JSON
    /// path), or Errc::invalid_argument with the reason when the host kernels do not support it.
    explicit HostOp(skc::OpRecord record) : record_(std::move(record)) {
        skc::validate(record_);
        Analysis a = analyze(record_);
        if (!a.plan) throw skc::Error(skc::Errc::invalid_argument, "op not supported by the host runtime: " + a.reason);
        plan_ = std::move(*a.plan);
        digest_ = skc::digest(record_);
    }

    [[nodiscard]] const skc::OpRecord& record() const noexcept { return record_; }
    [[nodiscard]] const std::string& op_type() const noexcept { return record_.op_type; }
    [[nodiscard]] const skc::Digest& digest() const noexcept { return digest_; }
    [[nodiscard]] const Plan& plan() const noexcept { return plan_; }

private:
    skc::OpRecord record_;
    Plan plan_;
    skc::Digest digest_;
};

class Runtime {
public:
    using Recorder = skc::OpRecorder<>;

    /// Calls since construction or the last reset_counters().
    struct Counters {
        std::uint64_t static_calls = 0;
        std::uint64_t generic_calls = 0;
    };

    Runtime() = default;
    Runtime(const Runtime&) = delete;
    Runtime& operator=(const Runtime&) = delete;

    /// Runs a prepared op: its static kernel when the table has one, else the generic kernel.
    void run(const HostOp& op, const float* const* inputs, float* const* outputs) {
        const KernelFn* k = table_.find(op.digest());
        if (Recorder* rec = recorder_.load(std::memory_order_acquire))
            rec->record(op.digest(), [&] { return with_bin_type(op.record(), k != nullptr); });
        if (k != nullptr) {
            statics_.fetch_add(1, std::memory_order_relaxed);
            (*k)(inputs, outputs);
        } else {
            generics_.fetch_add(1, std::memory_order_relaxed);
            run_plan(op.plan(), inputs, outputs);
        }
    }

    /// Runs an op given as a bare record (hashed and, on the generic path, analysed per call).
    /// Throws skc::Error when the record is invalid and std::invalid_argument (run_generic) when
    /// the generic path is needed and the op is not supported.
    void run(const skc::OpRecord& op, const float* const* inputs, float* const* outputs) {
        const skc::Digest d = skc::digest(op);
        const KernelFn* k = table_.find(d);
        if (Recorder* rec = recorder_.load(std::memory_order_acquire))
            rec->record(d, [&] { return with_bin_type(op, k != nullptr); });
        if (k != nullptr) {
            statics_.fetch_add(1, std::memory_order_relaxed);
            (*k)(inputs, outputs);
        } else {
            generics_.fetch_add(1, std::memory_order_relaxed);
            run_generic(op, inputs, outputs);
        }
    }

    /// The static kernel of `op`, or nullptr (for timing a kernel on its own; not counted).
    [[nodiscard]] KernelFn static_kernel(const HostOp& op) const noexcept {
        const KernelFn* k = table_.find(op.digest());
        return k != nullptr ? *k : nullptr;
    }

    /// Runs `op` with its generic kernel whatever the table holds (not counted, not recorded).
    static void run_generic_kernel(const HostOp& op, const float* const* inputs, float* const* outputs) {
        run_plan(op.plan(), inputs, outputs);
    }

    /// Attaches a recording session (nullptr detaches it). See the header comment on threads.
    void set_recorder(Recorder* rec) noexcept { recorder_.store(rec, std::memory_order_release); }
    [[nodiscard]] Recorder* recorder() const noexcept { return recorder_.load(std::memory_order_acquire); }

    /// Replaces the static kernels (a reselect); calls in progress finish with the old table.
    void reload(const std::vector<std::pair<skc::Digest, KernelFn>>& kernels) { table_.reload(kernels); }
    [[nodiscard]] const skc::KernelTable<KernelFn>& table() const noexcept { return table_; }

    [[nodiscard]] Counters counters() const noexcept {
        return {statics_.load(std::memory_order_relaxed), generics_.load(std::memory_order_relaxed)};
    }
    void reset_counters() noexcept {
        statics_.store(0, std::memory_order_relaxed);
        generics_.store(0, std::memory_order_relaxed);
    }

private:
    static skc::OpRecord with_bin_type(const skc::OpRecord& op, bool static_kernel) {
        skc::OpRecord r = op;
        r.bin_type = static_kernel ? 0 : 1;
        return r;
    }

    skc::KernelTable<KernelFn> table_;
    std::atomic<Recorder*> recorder_{nullptr};
    std::atomic<std::uint64_t> statics_{0};
    std::atomic<std::uint64_t> generics_{0};
};

/// The reselect hook: re-reads the op library's global kernel index and reloads the runtime's
/// table with exactly what it lists (an absent index means no static kernels). Errors from the
/// loader (a corrupt index, a missing kernel file or symbol) are skc::Error and leave the table as
/// it was.
class HostReselect {
public:
    explicit HostReselect(Runtime& runtime) noexcept : runtime_(&runtime) {}

    void reselect(const skc::ReselectContext& ctx) {
        std::vector<std::pair<skc::Digest, KernelFn>> kernels = load_installed_kernels(ctx);
        loaded_ = kernels.size();
        runtime_->reload(kernels);
        ++count_;
    }

    [[nodiscard]] Runtime& runtime() const noexcept { return *runtime_; }
    /// Kernels the last reselect loaded, and how many reselects ran.
    [[nodiscard]] std::size_t loaded() const noexcept { return loaded_; }
    [[nodiscard]] std::size_t count() const noexcept { return count_; }

private:
    Runtime* runtime_;
    std::size_t loaded_ = 0;
    std::size_t count_ = 0;
};

static_assert(skc::ReselectHook<HostReselect>);

}  // namespace skc_host
