// KernelTable lookups beside std::unordered_map<std::string, ...> keyed by op info file name, the
// way a runtime that knows kernels by file name would find them.
//
//   Ours/DigestKey      find(Digest): the digest is at hand (computed once per op instance)
//   Ours/CompileTimeKey find<Op>(): OpDesc's digest is a compile-time constant
//   Ours/RecordKey      find(OpRecord): the digest computed from the record on every lookup
//   Map/NameKey         unordered_map::find(name): the name string is at hand
//   Map/RecordKey       build the name from the record (op_info_file_name), then find
// Tables hold 1,000 kernels; lookups cycle through keys that are all present.
#include <benchmark/benchmark.h>

#include <string>
#include <unordered_map>
#include <vector>

#include <skc/kernel_table.hpp>
#include <skc/op_desc.hpp>
#include <skc/op_info_io.hpp>

namespace {

using Relu = skc::OpDesc<"Relu", skc::desc::Inputs<skc::desc::Tensor<"x", skc::DType::float32, skc::Format::ND, skc::Shape<32, 256>>>,
                         skc::desc::Outputs<skc::desc::Tensor<"y", skc::DType::float32, skc::Format::ND, skc::Shape<32, 256>>>>;

struct Kernel {
    void (*fn)(const float* const*, float* const*) = nullptr;
    int id = 0;
};

struct Fixture {
    std::vector<skc::OpRecord> records;
    std::vector<skc::Digest> digests;
    std::vector<std::string> names;
    skc::KernelTable<Kernel> table;
    std::unordered_map<std::string, Kernel> map;

    Fixture() {
        std::vector<skc::KernelTable<Kernel>::Entry> entries;
        const skc::OpRecord base = skc::read_op_info(std::string(SKC_BENCH_OP_INFO_DIR) + "/MatMulV2_float_ND_32_64_0.json");
        for (int i = 0; i < 1000; ++i) {
            skc::OpRecord r = base;
            std::get<skc::TensorDesc>(r.inputs[0]).shape[0] = 1 + i;
            std::get<skc::TensorDesc>(r.outputs[0]).shape[0] = 1 + i;
            digests.push_back(skc::digest(r));
            names.push_back(skc::op_info_file_name(r, static_cast<std::uint64_t>(i)));
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

void BM_KernelTable_Ours_DigestKey(benchmark::State& state) {
    Fixture& f = fixture();
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(f.table.find(f.digests[i]));
        i = (i + 1) % f.digests.size();
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_KernelTable_Ours_CompileTimeKey(benchmark::State& state) {
    Fixture& f = fixture();
    for (auto _ : state) benchmark::DoNotOptimize(f.table.find<Relu>());
    state.SetItemsProcessed(state.iterations());
}

void BM_KernelTable_Ours_RecordKey(benchmark::State& state) {
    Fixture& f = fixture();
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(f.table.find(f.records[i]));
        i = (i + 1) % f.records.size();
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_KernelTable_Map_NameKey(benchmark::State& state) {
    Fixture& f = fixture();
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(f.map.find(f.names[i]));
        i = (i + 1) % f.names.size();
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_KernelTable_Map_RecordKey(benchmark::State& state) {
    Fixture& f = fixture();
    std::size_t i = 0;
    for (auto _ : state) {
        const std::string name = skc::op_info_file_name(f.records[i], i);
        benchmark::DoNotOptimize(f.map.find(name));
        i = (i + 1) % f.records.size();
    }
    state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(BM_KernelTable_Ours_DigestKey);
BENCHMARK(BM_KernelTable_Ours_CompileTimeKey);
BENCHMARK(BM_KernelTable_Ours_RecordKey);
BENCHMARK(BM_KernelTable_Map_NameKey);
BENCHMARK(BM_KernelTable_Map_RecordKey);
BENCHMARK_MAIN();
