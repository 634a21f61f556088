// The key of an op call from its raw arguments, as the PyTorch plugin computes it per call
// (examples/torch/mapping.hpp), beside the other ways to find the call's kernel.
//
// The call is a Linear layer's addmm(bias, x, W.t()): three tensors, bias [256], x [m, 128] and the
// transposed weight view [128, 256] (strides 1, 128), m = 1 .. 1,000 (1,000 distinct instances).
// Each benchmark starts from the raw arguments (sizes and strides arrays and the contiguity flag,
// as at::Tensor hands them out) and ends with the kernel's address:
//
//   Ours/CallKey        key_of() into an skc::CallKey, skc::CallMap::find() -> digest,
//                       KernelTable::find(digest): what the plugin does on every call
//   Ours/CallKeyOnly    key_of() and the key's hash, no lookup
//   Ours/RecordDigest   skc::digest() of the call's OpRecord (built beforehand) and find(): the
//                       key without CallKey, even with the record at hand
//   Ours/DescribeDigest describe() (builds the OpRecord) and skc::digest() and find(): what a
//                       plugin without any memo would pay
//   Map/ShapeName       a std::string name built from the op and the shapes, then
//                       std::unordered_map<std::string, Kernel>::find
//   Floor               the loop, reading the next call's arguments
//
// Tables hold the 1,000 kernels; lookups cycle through calls that are all present.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include <skc/call_key.hpp>
#include <skc/kernel_table.hpp>

#include "torch/mapping.hpp"

namespace {

using skc_torch::Aten;
using skc_torch::Call;
using skc_torch::Dims;

struct Kernel {
    int id = 0;
};

/// One call's raw arguments, kept where at::Tensor would keep them.
struct Args {
    std::vector<std::int64_t> bias_sizes, bias_strides, x_sizes, x_strides, w_sizes, w_strides;
    [[nodiscard]] Call call() const {
        return Call{Aten::addmm,
                    {skc_torch::TensorArg{bias_sizes, bias_strides, true},
                     skc_torch::TensorArg{x_sizes, x_strides, true}, skc_torch::TensorArg{w_sizes, w_strides, false}},
                    3};
    }
};

struct Fixture {
    std::vector<Args> args;
    std::vector<skc::OpRecord> records;
    skc::CallMap<skc::Digest> digests;
    skc::KernelTable<Kernel> table;
    std::unordered_map<std::string, Kernel> by_name;

    Fixture() {
        std::vector<skc::KernelTable<Kernel>::Entry> entries;
        for (std::int64_t m = 1; m <= 1000; ++m) {
            args.push_back(Args{{256}, {1}, {m, 128}, {128, 1}, {128, 256}, {1, 128}});
            const Call c = args.back().call();
            skc_torch::Description d = skc_torch::describe(c);
            if (!d.record) std::abort();
            const skc::Digest dg = skc::digest(*d.record);
            skc::CallKey key;
            skc_torch::key_of(c, key);
            digests.emplace(key, [&] { return dg; });
            entries.emplace_back(dg, Kernel{static_cast<int>(m)});
            by_name.emplace(name_of(args.back()), Kernel{static_cast<int>(m)});
            records.push_back(std::move(*d.record));
        }
        table.reload(entries);
    }

    /// "addmm_256_x_m_128_128_256_s1_128": the op, every size, the strides of the view.
    static std::string name_of(const Args& a) {
        std::string s = "addmm";
        for (const auto* dims : {&a.bias_sizes, &a.x_sizes, &a.w_sizes, &a.w_strides})
            for (std::int64_t d : *dims) {
                s += '_';
                s += std::to_string(d);
            }
        return s;
    }
};

Fixture& fixture() {
    static Fixture f;
    return f;
}

inline std::size_t next(std::size_t i, std::size_t n) { return i + 1 == n ? 0 : i + 1; }

void BM_CallKey_Floor(benchmark::State& state) {
    Fixture& f = fixture();
    std::size_t i = 0;
    for (auto _ : state) {
        const Call c = f.args[i].call();
        benchmark::DoNotOptimize(c);
        benchmark::ClobberMemory();
        i = next(i, f.args.size());
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_CallKey_Ours_CallKey(benchmark::State& state) {
    Fixture& f = fixture();
    std::size_t i = 0;
    for (auto _ : state) {
        const Call c = f.args[i].call();
        skc::CallKey key;
        skc_torch::key_of(c, key);
        const skc::Digest* d = f.digests.find(key);
        benchmark::DoNotOptimize(f.table.find(*d));
        benchmark::ClobberMemory();
        i = next(i, f.args.size());
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_CallKey_Ours_CallKeyOnly(benchmark::State& state) {
    Fixture& f = fixture();
    std::size_t i = 0;
    for (auto _ : state) {
        const Call c = f.args[i].call();
        skc::CallKey key;
        skc_torch::key_of(c, key);
        benchmark::DoNotOptimize(key.hash());
        benchmark::ClobberMemory();
        i = next(i, f.args.size());
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_CallKey_Ours_RecordDigest(benchmark::State& state) {
    Fixture& f = fixture();
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(f.table.find(skc::digest(f.records[i])));
        benchmark::ClobberMemory();
        i = next(i, f.records.size());
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_CallKey_Ours_DescribeDigest(benchmark::State& state) {
    Fixture& f = fixture();
    std::size_t i = 0;
    for (auto _ : state) {
        const skc_torch::Description d = skc_torch::describe(f.args[i].call());
        benchmark::DoNotOptimize(f.table.find(skc::digest(*d.record)));
        benchmark::ClobberMemory();
        i = next(i, f.args.size());
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_CallKey_Map_ShapeName(benchmark::State& state) {
    Fixture& f = fixture();
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(f.by_name.find(Fixture::name_of(f.args[i])));
        benchmark::ClobberMemory();
        i = next(i, f.args.size());
    }
    state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(BM_CallKey_Floor);
BENCHMARK(BM_CallKey_Ours_CallKey);
BENCHMARK(BM_CallKey_Ours_CallKeyOnly);
BENCHMARK(BM_CallKey_Map_ShapeName);
BENCHMARK(BM_CallKey_Ours_RecordDigest);
BENCHMARK(BM_CallKey_Ours_DescribeDigest);
BENCHMARK_MAIN();
