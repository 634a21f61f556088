// KernelTable lookups beside std::unordered_map<std::string, ...> keyed by op info file name, the
// way a runtime that knows kernels by file name would find them.
//
// Three kinds of key, each measured for skc and for the map:
//
//   Key at hand: the lookup key was computed earlier and kept with the op instance.
//     Ours/DigestKey        find(Digest)
//     Map/NameKey           unordered_map::find(name)
//   Compile-time key: the op is an OpDesc, its digest a compile-time constant.
//     Ours/CompileTimeKey   find<Op>() (the slot is remembered per thread and table generation)
//     (the map has no compile-time key: a name would be a string constant, hashed on every
//     lookup: Map/NameKey is its cost)
//   Key from the record: the lookup starts from the op's record, every time.
//     Ours/RecordKey        find(OpRecord): skc::digest of the whole record (MurmurHash3 of its
//                           canonical encoding, about 1.4 KB for these MatMulV2 records), then find
//     Map/RecordKey         the name built from the record as the original builds it
//                           (`<op_type>_<dtype>_<format>_<dims>_<counter>.json` from input 0, no
//                           validation), then find
//     Map/RecordKeySkcName  the same with skc::op_info_file_name, which also validates the names
//
// Floor: the loop of the benchmarks, reading the next key, without a lookup.
//
// Tables hold 1,001 kernels (1,000 MatMulV2 instances and the OpDesc); lookups cycle through keys
// that are all present. The loop index wraps with a compare, not a division (a 64-bit division
// per iteration would cost as much as a lookup). Every iteration ends with ClobberMemory(), so the
// compiler cannot hoist a lookup's loads (the table pointer, the map's buckets) out of the loop,
// which it would otherwise do for the compile-time key: in a program, other work between two
// lookups forces those loads.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include <skc/kernel_table.hpp>
#include <skc/op_desc.hpp>
#include <skc/op_info_io.hpp>

namespace {

using Relu =
    skc::OpDesc<"Relu",
                skc::desc::Inputs<skc::desc::Tensor<"x", skc::DType::float32, skc::Format::ND, skc::Shape<32, 256>>>,
                skc::desc::Outputs<skc::desc::Tensor<"y", skc::DType::float32, skc::Format::ND, skc::Shape<32, 256>>>>;

struct Kernel {
    void (*fn)(const float* const*, float* const*) = nullptr;
    int id = 0;
};

/// The op info file name as the original tool builds it from an op: op type, then dtype, format
/// and dims of the first input, then the counter. No validation (the original does none).
std::string original_file_name(const skc::OpRecord& r, std::uint64_t counter) {
    std::string out = r.op_type;
    if (const skc::TensorDesc* t = r.naming_tensor()) {
        out += '_';
        out += t->dtype;
        out += '_';
        out += t->format;
        for (std::int64_t d : t->shape) {
            out += '_';
            out += std::to_string(d);
        }
    }
    out += '_';
    out += std::to_string(counter);
    out += ".json";
    return out;
}

struct Fixture {
    std::vector<skc::OpRecord> records;
    std::vector<skc::Digest> digests;
    std::vector<std::string> names;
    skc::KernelTable<Kernel> table;
    std::unordered_map<std::string, Kernel> map;

    Fixture() {
        std::vector<skc::KernelTable<Kernel>::Entry> entries;
        const skc::OpRecord base =
            skc::read_op_info(std::string(SKC_BENCH_OP_INFO_DIR) + "/MatMulV2_float_ND_32_64_0.json");
        for (int i = 0; i < 1000; ++i) {
            skc::OpRecord r = base;
            std::get<skc::TensorDesc>(r.inputs[0]).shape[0] = 1 + i;
            std::get<skc::TensorDesc>(r.outputs[0]).shape[0] = 1 + i;
            digests.push_back(skc::digest(r));
            names.push_back(original_file_name(r, static_cast<std::uint64_t>(i)));
            if (names.back() != skc::op_info_file_name(r, static_cast<std::uint64_t>(i))) std::abort();
            entries.emplace_back(digests.back(), Kernel{nullptr, i});
            map.emplace(names.back(), Kernel{nullptr, i});
            records.push_back(std::move(r));
        }
        entries.emplace_back(Relu::digest, Kernel{nullptr, -1});
        table.reload(entries);
    }
};

Fixture& fixture() {
    static Fixture f;
    return f;
}

/// The next index of a cycle through n keys, without a division.
inline std::size_t next(std::size_t i, std::size_t n) { return i + 1 == n ? 0 : i + 1; }

void BM_KernelTable_Floor(benchmark::State& state) {
    Fixture& f = fixture();
    const std::size_t n = f.digests.size();
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(f.digests[i]);
        benchmark::ClobberMemory();
        i = next(i, n);
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_KernelTable_Ours_DigestKey(benchmark::State& state) {
    Fixture& f = fixture();
    const std::size_t n = f.digests.size();
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(f.table.find(f.digests[i]));
        benchmark::ClobberMemory();
        i = next(i, n);
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_KernelTable_Ours_CompileTimeKey(benchmark::State& state) {
    Fixture& f = fixture();
    for (auto _ : state) {
        benchmark::DoNotOptimize(f.table.find<Relu>());
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_KernelTable_Ours_RecordKey(benchmark::State& state) {
    Fixture& f = fixture();
    const std::size_t n = f.records.size();
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(f.table.find(f.records[i]));
        benchmark::ClobberMemory();
        i = next(i, n);
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_KernelTable_Map_NameKey(benchmark::State& state) {
    Fixture& f = fixture();
    const std::size_t n = f.names.size();
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(f.map.find(f.names[i]));
        benchmark::ClobberMemory();
        i = next(i, n);
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_KernelTable_Map_RecordKey(benchmark::State& state) {
    Fixture& f = fixture();
    const std::size_t n = f.records.size();
    std::size_t i = 0;
    for (auto _ : state) {
        const std::string name = original_file_name(f.records[i], i);
        benchmark::DoNotOptimize(f.map.find(name));
        benchmark::ClobberMemory();
        i = next(i, n);
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_KernelTable_Map_RecordKeySkcName(benchmark::State& state) {
    Fixture& f = fixture();
    const std::size_t n = f.records.size();
    std::size_t i = 0;
    for (auto _ : state) {
        const std::string name = skc::op_info_file_name(f.records[i], i);
        benchmark::DoNotOptimize(f.map.find(name));
        benchmark::ClobberMemory();
        i = next(i, n);
    }
    state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(BM_KernelTable_Floor);
BENCHMARK(BM_KernelTable_Ours_DigestKey);
BENCHMARK(BM_KernelTable_Map_NameKey);
BENCHMARK(BM_KernelTable_Ours_CompileTimeKey);
BENCHMARK(BM_KernelTable_Ours_RecordKey);
BENCHMARK(BM_KernelTable_Map_RecordKey);
BENCHMARK(BM_KernelTable_Map_RecordKeySkcName);
BENCHMARK_MAIN();
