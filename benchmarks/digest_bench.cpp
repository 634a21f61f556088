// benchmarks/digest_bench.cpp: skc's content digests against the original tool's cache key.
//
// The original (Python) tool keys a set of op info files by SHA-256 of each file's bytes, the hex
// digests sorted, then SHA-256 of the sorted hex digests concatenated. skc keys a record by
// MurmurHash3_x64_128 of its canonical encoding (skc::digest) and a set by hashing the sorted
// record digests (skc::OpSet). Both are measured here on the same records:
//
//   BM_RecordDigest_Ours/<file>            skc::digest(record)
//   BM_RecordDigest_OriginalSha256/<file>  SHA-256 of the record's file bytes (in memory)
//   BM_RecordParse_Ours/<file>             skc::parse_op_info(file bytes), for scale only
//   BM_SetDigest_Ours_Cold/<n>             skc::digest of every record, then OpSet::combine_digests
//   BM_SetDigest_Ours_Warm/<n>             OpSet::set_digest() (record digests computed at insert)
//   BM_SetDigest_OriginalSha256/<n>        SHA-256 of every file, hex, sort, SHA-256 of the hex
//
// The file bytes of a record are what skc writes for it: dump_json(to_value(record)) + "\n",
// computed before timing; the baseline never touches the disk, so it is a lower bound for the
// original tool, which also reads every file and runs in Python.
//
// Records: the distinct records of examples/op_info, and for the sets, records derived from them
// by giving the leading dim (batch or token count) of the first input the values 1, 2, 3, ...
// (in every tensor where that dim appears first), as a model run with dynamic shapes records them.
//
// Options besides Google Benchmark's: --op_info_dir=DIR reads the seed records from DIR instead
// of the examples/op_info directory of the source tree.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <benchmark/benchmark.h>
#include <openssl/evp.h>

#include <skc/op_info_io.hpp>
#include <skc/op_record.hpp>
#include <skc/op_set.hpp>

#ifndef SKC_BENCH_OP_INFO_DIR
#define SKC_BENCH_OP_INFO_DIR "examples/op_info"
#endif

namespace {

[[noreturn]] void die(const std::string& message) {
    std::fprintf(stderr, "digest_bench: %s\n", message.c_str());
    std::exit(1);
}

// ---- the original's hash: SHA-256 through OpenSSL's EVP API -------------------------------------

using Sha256Digest = std::array<unsigned char, 32>;
using Sha256Hex = std::array<char, 64>;

/// SHA-256 with the algorithm fetched once and one context reused, the cheapest EVP usage (Python's
/// hashlib fetches once too, but makes a context per hash object).
class Sha256 {
public:
    Sha256() : md_(EVP_MD_fetch(nullptr, "SHA256", nullptr)), ctx_(EVP_MD_CTX_new()) {
        if (md_ == nullptr || ctx_ == nullptr) die("OpenSSL: cannot fetch SHA256");
    }
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    ~Sha256() {
        EVP_MD_CTX_free(ctx_);
        EVP_MD_free(md_);
    }

    void init() {
        if (EVP_DigestInit_ex2(ctx_, md_, nullptr) != 1) die("OpenSSL: EVP_DigestInit_ex2 failed");
    }
    void update(const void* data, std::size_t size) {
        if (EVP_DigestUpdate(ctx_, data, size) != 1) die("OpenSSL: EVP_DigestUpdate failed");
    }
    Sha256Digest finish() {
        Sha256Digest out{};
        unsigned int len = 0;
        if (EVP_DigestFinal_ex(ctx_, out.data(), &len) != 1 || len != out.size())
            die("OpenSSL: EVP_DigestFinal_ex failed");
        return out;
    }
    Sha256Digest operator()(std::string_view data) {
        init();
        update(data.data(), data.size());
        return finish();
    }

private:
    EVP_MD* md_;
    EVP_MD_CTX* ctx_;
};

/// Lower-case hex, as Python's hexdigest().
Sha256Hex to_hex(const Sha256Digest& d) {
    static constexpr char digits[] = "0123456789abcdef";
    Sha256Hex out{};
    for (std::size_t i = 0; i < d.size(); ++i) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 0xF];
    }
    return out;
}

/// The original's set key: sha256("".join(sorted(sha256(f).hexdigest() for f in files))).
Sha256Digest original_set_key(Sha256& sha, const std::vector<std::string>& files) {
    std::vector<Sha256Hex> hexes;
    hexes.reserve(files.size());
    for (const std::string& f : files) hexes.push_back(to_hex(sha(f)));
    std::sort(hexes.begin(), hexes.end());
    sha.init();
    for (const Sha256Hex& h : hexes) sha.update(h.data(), h.size());
    return sha.finish();
}

/// skc's set key computed from scratch: every record digested, then combined.
skc::Digest ours_cold_set_key(const skc::OpSet& set) {
    std::vector<skc::Digest> ds;
    ds.reserve(set.size());
    for (const skc::OpSet::Entry& e : set) ds.push_back(skc::digest(e.record));
    return skc::OpSet::combine_digests(std::move(ds));
}

// ---- records --------------------------------------------------------------------------------------

std::filesystem::path g_op_info_dir = SKC_BENCH_OP_INFO_DIR;

std::string file_bytes(const skc::OpRecord& r) { return skc::dump_json(skc::to_value(r)) + "\n"; }

struct Seed {
    std::string stem;  // file name without ".json"
    skc::OpRecord record;
};

/// The distinct records of the op info directory, sorted by file name (duplicates dropped).
const std::vector<Seed>& seeds() {
    static const std::vector<Seed> all = [] {
        std::vector<Seed> out;
        skc::OpSet distinct;
        try {
            for (skc::LoadedOp& op : skc::read_op_info_dir(g_op_info_dir).ops)
                if (distinct.insert(op.record)) out.push_back(Seed{op.path.stem().string(), std::move(op.record)});
        } catch (const std::exception& e) {
            die(std::string("cannot read the seed records: ") + e.what());
        }
        if (out.empty()) die("no op info files in " + g_op_info_dir.string());
        return out;
    }();
    return all;
}

const Seed& seed_named(std::string_view stem) {
    for (const Seed& s : seeds())
        if (s.stem == stem) return s;
    die("seed record " + std::string(stem) + ".json not found in " + g_op_info_dir.string());
}

void replace_leading_dim(skc::RuntimeShape& s, std::int64_t from, std::int64_t to) {
    if (s.rank() != 0 && s[0] == from) s[0] = to;
}

void replace_leading_dim(skc::TensorDesc& t, std::int64_t from, std::int64_t to) {
    replace_leading_dim(t.shape, from, to);
    if (t.origin_shape) replace_leading_dim(*t.origin_shape, from, to);
}

void replace_leading_dim(std::vector<skc::TensorSlot>& slots, std::int64_t from, std::int64_t to) {
    for (skc::TensorSlot& slot : slots) {
        if (auto* t = std::get_if<skc::TensorDesc>(&slot)) replace_leading_dim(*t, from, to);
        if (auto* list = std::get_if<std::vector<skc::TensorDesc>>(&slot))
            for (skc::TensorDesc& e : *list) replace_leading_dim(e, from, to);
    }
}

/// Record i of a generated set: seed i % seeds, its leading dim set to 1 + i / seeds.
skc::OpRecord generated_record(std::size_t i) {
    const std::vector<Seed>& all = seeds();
    skc::OpRecord r = all[i % all.size()].record;
    const skc::TensorDesc* t = r.naming_tensor();
    if (t == nullptr || t->shape.rank() == 0)
        die("seed record " + all[i % all.size()].stem + " has no leading dim to vary");
    const std::int64_t from = t->shape[0];
    const auto to = static_cast<std::int64_t>(1 + i / all.size());
    replace_leading_dim(r.inputs, from, to);
    replace_leading_dim(r.outputs, from, to);
    return r;
}

struct SetData {
    skc::OpSet set;                  // the records, digested at insert (as skc keeps them)
    std::vector<std::string> files;  // their file bytes, for the baseline
    std::int64_t file_bytes = 0;     // total
    std::int64_t canon_bytes = 0;    // total canonical bytes (what skc::digest hashes)
};

const SetData& set_data(std::size_t n) {
    static std::map<std::size_t, std::unique_ptr<SetData>> cache;
    std::unique_ptr<SetData>& slot = cache[n];
    if (!slot) {
        auto d = std::make_unique<SetData>();
        d->files.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            skc::OpRecord r = generated_record(i);
            skc::validate(r);
            d->files.push_back(file_bytes(r));
            d->file_bytes += static_cast<std::int64_t>(d->files.back().size());
            d->canon_bytes += static_cast<std::int64_t>(skc::canonical_bytes(r).size());
            if (!d->set.insert(std::move(r))) die("generated record " + std::to_string(i) + " is a duplicate");
        }
        slot = std::move(d);
    }
    return *slot;
}

// ---- benchmarks -------------------------------------------------------------------------------------

void set_rates(benchmark::State& state, std::int64_t records, std::int64_t file_bytes, std::int64_t hashed_bytes) {
    state.SetItemsProcessed(state.iterations() * records);
    state.SetBytesProcessed(state.iterations() * file_bytes);  // op info file bytes, for every variant
    state.counters["per_record"] = benchmark::Counter(
        static_cast<double>(records), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    if (hashed_bytes > 0) state.counters["hashed_bytes"] = static_cast<double>(hashed_bytes);  // per iteration
}

void BM_RecordDigest_Ours(benchmark::State& state, const skc::OpRecord* rec) {
    const auto file = static_cast<std::int64_t>(file_bytes(*rec).size());
    const auto canon = static_cast<std::int64_t>(skc::canonical_bytes(*rec).size());
    for (auto _ : state) {
        skc::Digest d = skc::digest(*rec);
        benchmark::DoNotOptimize(d);
        benchmark::ClobberMemory();  // the record may have changed: digest it again
    }
    set_rates(state, 1, file, canon);
}

void BM_RecordDigest_OriginalSha256(benchmark::State& state, const skc::OpRecord* rec) {
    const std::string bytes = file_bytes(*rec);
    const auto file = static_cast<std::int64_t>(bytes.size());
    Sha256 sha;
    for (auto _ : state) {
        Sha256Digest d = sha(bytes);
        benchmark::DoNotOptimize(d);
        benchmark::ClobberMemory();
    }
    set_rates(state, 1, file, file);
}

void BM_RecordParse_Ours(benchmark::State& state, const skc::OpRecord* rec) {
    const std::string bytes = file_bytes(*rec);
    const auto file = static_cast<std::int64_t>(bytes.size());
    for (auto _ : state) {
        skc::OpRecord r = skc::parse_op_info(bytes);
        benchmark::DoNotOptimize(r);
        benchmark::ClobberMemory();
    }
    set_rates(state, 1, file, 0);
}

void BM_SetDigest_Ours_Cold(benchmark::State& state, std::size_t n) {
    const SetData& data = set_data(n);
    for (auto _ : state) {
        skc::Digest d = ours_cold_set_key(data.set);
        benchmark::DoNotOptimize(d);
        benchmark::ClobberMemory();
    }
    const auto records = static_cast<std::int64_t>(n);
    set_rates(state, records, data.file_bytes, data.canon_bytes + 8 + 16 * records);
}

void BM_SetDigest_Ours_Warm(benchmark::State& state, std::size_t n) {
    const SetData& data = set_data(n);
    for (auto _ : state) {
        skc::Digest d = data.set.set_digest();
        benchmark::DoNotOptimize(d);
        benchmark::ClobberMemory();
    }
    const auto records = static_cast<std::int64_t>(n);
    set_rates(state, records, data.file_bytes, 8 + 16 * records);
}

void BM_SetDigest_OriginalSha256(benchmark::State& state, std::size_t n) {
    const SetData& data = set_data(n);
    Sha256 sha;
    for (auto _ : state) {
        Sha256Digest d = original_set_key(sha, data.files);
        benchmark::DoNotOptimize(d);
        benchmark::ClobberMemory();
    }
    const auto records = static_cast<std::int64_t>(n);
    set_rates(state, records, data.file_bytes, data.file_bytes + 64 * records);
}

/// The single-record cases: the smallest, a typical and the largest example record.
constexpr std::array<std::string_view, 3> single_records = {
    "Gelu_float_ND_32_256_8",
    "MatMulV2_float_ND_32_64_0",
    "LayerNorm_float_ND_32_64_7",
};

constexpr std::array<std::size_t, 3> set_sizes = {10, 1'000, 100'000};

void register_all() {
    for (std::string_view stem : single_records) {
        const skc::OpRecord* rec = &seed_named(stem).record;
        const std::string suffix = "/" + std::string(stem);
        benchmark::RegisterBenchmark(("BM_RecordDigest_Ours" + suffix).c_str(), BM_RecordDigest_Ours, rec)
            ->Unit(benchmark::kNanosecond);
        benchmark::RegisterBenchmark(("BM_RecordDigest_OriginalSha256" + suffix).c_str(),
                                     BM_RecordDigest_OriginalSha256, rec)
            ->Unit(benchmark::kNanosecond);
        benchmark::RegisterBenchmark(("BM_RecordParse_Ours" + suffix).c_str(), BM_RecordParse_Ours, rec)
            ->Unit(benchmark::kNanosecond);
    }
    for (std::size_t n : set_sizes) {
        const std::string suffix = "/" + std::to_string(n);
        benchmark::RegisterBenchmark(("BM_SetDigest_Ours_Cold" + suffix).c_str(), BM_SetDigest_Ours_Cold, n)
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("BM_SetDigest_Ours_Warm" + suffix).c_str(), BM_SetDigest_Ours_Warm, n)
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("BM_SetDigest_OriginalSha256" + suffix).c_str(), BM_SetDigest_OriginalSha256, n)
            ->Unit(benchmark::kMicrosecond);
    }
}

}  // namespace

int main(int argc, char** argv) {
    // Take our own option out before Google Benchmark sees the arguments.
    constexpr std::string_view dir_flag = "--op_info_dir=";
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg.substr(0, dir_flag.size()) == dir_flag) g_op_info_dir = std::string(arg.substr(dir_flag.size()));
        else argv[kept++] = argv[i];
    }
    argc = kept;

    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    register_all();
    benchmark::AddCustomContext("op_info_dir", g_op_info_dir.string());
    benchmark::AddCustomContext("seed_records", std::to_string(seeds().size()));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
