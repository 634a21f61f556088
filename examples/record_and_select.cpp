// record_and_select: what a framework plugin does with skc, from its options to the set of ops to
// compile.
//
//   record_and_select BASE_DIR
//
// Parses the plugin's options from JSON, resolves the output base directory (BASE_DIR must be an
// existing directory this user can read and write), records ops from four threads as a training
// step would run them, writes the op info folders into a fresh run folder below BASE_DIR, and
// selects what to compile. Prints what was written and selected.
// Exit status: 0 on success, 2 on bad usage or on an skc::Error (its what() is printed), 1 on any
// other exception.
#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <skc/skc.hpp>

namespace {

// ---- options ------------------------------------------------------------------------------------

// What the host framework hands to the plugin. Unknown keys and wrongly typed values are errors.
constexpr std::string_view options_json = R"({
    "static_kernel_compile": true,
    "op_blacklist": ["Gelu"],
    "jobs": 8
})";

// ---- an op known at compile time ----------------------------------------------------------------

// Record-level fields shared by every op this device runs (they are part of each op's identity).
struct DeviceContext : skc::DefaultContext {
    static constexpr std::string_view tune_mode = "all";
    static constexpr std::int64_t vector_core_cnt = 48;
    static constexpr std::int64_t cube_core_cnt = 24;
    static constexpr std::string_view impl_mode = "high_performance";
    static constexpr bool deterministic = false;
    static constexpr std::int64_t deterministic_level = 0;
};

// The projection of a layer whose shapes never change: its digest is computed by the compiler.
using namespace skc::desc;
using Projection =
    skc::OpDesc<"MatMulV2",
                Inputs<Tensor<"x1", skc::DType::float32, skc::Format::ND, skc::Shape<32, 64>>,
                       Tensor<"x2", skc::DType::float32, skc::Format::ND, skc::Shape<64, 192>>, Absent, Absent>,
                Outputs<Tensor<"y", skc::DType::float32, skc::Format::ND, skc::Shape<32, 192>>>,
                Attrs<Attr<"transpose_x1", false>, Attr<"transpose_x2", false>, Attr<"offset_x", 0>>, DeviceContext>;

constexpr skc::Digest projection_key = Projection::digest;  // a constant expression

// ---- ops built at run time ----------------------------------------------------------------------

// A plain tensor as the framework describes it (skc::plain_tensor: storage and origin shape and
// format are the same), with the dtype first as the calls below read best.
skc::TensorDesc tensor(std::string name, std::int64_t index, std::string dtype, skc::RuntimeShape shape) {
    return skc::plain_tensor(std::move(name), index, std::move(shape), std::move(dtype));
}

// An op with the device's record-level fields, the same ones DeviceContext gives Projection.
skc::OpRecord op(std::string op_type, std::vector<skc::TensorSlot> inputs, std::vector<skc::TensorSlot> outputs,
                 std::vector<skc::Attr> attrs = {}) {
    skc::OpRecord r = skc::make_op(std::move(op_type), std::move(inputs), std::move(outputs), std::move(attrs));
    r.tune_mode = std::string(DeviceContext::tune_mode);
    r.platform_info = skc::PlatformInfo{DeviceContext::vector_core_cnt, DeviceContext::cube_core_cnt, {}};
    r.impl_mode = std::string(DeviceContext::impl_mode);
    r.deterministic = DeviceContext::deterministic ? "true" : "false";
    r.deterministic_level = DeviceContext::deterministic_level;
    return r;
}

// The same MatMulV2 as Projection, built from live tensors: the same content, so the same op.
skc::OpRecord projection_at_run_time() {
    return op(
        "MatMulV2",
        {tensor("x1", 0, "float", {32, 64}), tensor("x2", 1, "float", {64, 192}), std::monostate{}, std::monostate{}},
        {tensor("y", 0, "float", {32, 192})},
        {skc::Attr{"transpose_x1", "bool", 0, false, {}}, skc::Attr{"transpose_x2", "bool", 1, false, {}},
         skc::Attr{"offset_x", "int", 2, 0, {}}});
}

skc::OpRecord add(skc::RuntimeShape shape) {
    return op("Add", {tensor("x1", 0, "float", shape), tensor("x2", 1, "float", shape)},
              {tensor("y", 0, "float", shape)});
}

skc::OpRecord gelu(skc::RuntimeShape shape) {
    return op("Gelu", {tensor("x", 0, "float", shape)}, {tensor("y", 0, "float", shape)});
}

// ReduceSum does not support static compilation: it is recorded, but not written to <pid>_opcompile.
skc::OpRecord reduce_sum_rows() {
    skc::TensorDesc axes = tensor("axes", 1, "int64", {1});
    axes.value_depend = skc::Value("required");
    axes.const_data = skc::Value(skc::Array{1});
    return op("ReduceSum", {tensor("x", 0, "float", {32, 64}), std::move(axes)}, {tensor("y", 0, "float", {32})},
              {skc::Attr{"keep_dims", "bool", 0, false, {}}});
}

// The permutation is a value-dependent input: its values (const_data) change the kernel, so they are
// part of the op's identity. Two Transposes of the same input with different permutations are two ops.
skc::OpRecord transpose(std::vector<std::int64_t> perm) {
    skc::TensorDesc p = tensor("perm", 1, "int64", {3});
    p.value_depend = skc::Value("required");
    skc::Array values;
    for (std::int64_t v : perm) values.emplace_back(v);
    p.const_data = skc::Value(std::move(values));
    const skc::RuntimeShape in{2, 16, 64};
    skc::RuntimeShape out;
    for (std::int64_t axis : perm) out.push_back(in[static_cast<std::size_t>(axis)]);
    return op("Transpose", {tensor("x", 0, "float", in), std::move(p)}, {tensor("y", 0, "float", std::move(out))});
}

constexpr std::array<skc::Verdict, 5> all_verdicts{skc::Verdict::selected, skc::Verdict::unsupported,
                                                   skc::Verdict::blacklisted, skc::Verdict::already_compiled,
                                                   skc::Verdict::duplicate};

int run(const std::filesystem::path& base_arg) {
    // 1. Options. The base directory comes from the command line here; a host could also pass
    //    "base_dir" in the JSON. Without either, outputs go to the model compile cache's directory
    //    (when that cache is on and force_eager is off) or to the working directory.
    skc::Options options = skc::parse_options(skc::parse_json(options_json));
    if (!options.static_kernel_compile) {
        std::cout << "static kernel compilation is off: nothing to record\n";
        return 0;
    }
    options.base_dir = base_arg.string();
    const std::filesystem::path base = skc::resolve_base(options);  // absolute, safe, readable and writable

    // 2. The recording session: one per process. Starting it throws Error(session_active) when
    //    another session (a profiler that records op arguments from step 0) holds it.
    skc::OpRecorder<> rec;

    // 3. Record from four threads, three steps each. Every call with content seen before is a no-op.
    std::atomic<std::size_t> calls{0};
    std::atomic<std::size_t> fresh{0};
    std::vector<std::exception_ptr> failures(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            try {
                for (int step = 0; step < 3; ++step) {
                    bool added[5];
                    if (t == 3) added[0] = rec.record(projection_at_run_time());
                    else  // the compile-time digest: the record is only built when the op is new
                        added[0] = rec.record(Projection::digest, [] { return Projection::record(); });
                    added[1] = rec.record(add({32, 64}));
                    added[2] = rec.record(gelu({32, 256}));
                    added[3] = rec.record(reduce_sum_rows());
                    added[4] = rec.record(transpose(t % 2 == 0 ? std::vector<std::int64_t>{0, 2, 1}
                                                               : std::vector<std::int64_t>{1, 0, 2}));
                    for (bool a : added) {
                        ++calls;
                        fresh += a ? 1 : 0;
                    }
                }
            } catch (...) {
                failures[static_cast<std::size_t>(t)] = std::current_exception();  // an invalid record
            }
        });
    for (std::thread& th : threads) th.join();
    for (const std::exception_ptr& f : failures)
        if (f) std::rethrow_exception(f);
    std::cout << calls << " record calls from 4 threads: " << fresh << " distinct ops\n";

    // 4. Stop: write <pid>_debug (every op), <pid> (tuning targets) and <pid>_opcompile (ops that
    //    support static compilation) into a fresh run folder.
    const skc::Layout layout(base);
    const skc::RunLayout run = layout.create_run();
    const skc::RecordingResult written = rec.stop(run);
    std::cout << "run folder " << run.dir().lexically_relative(base).string() << ":\n"
              << "  " << run.debug().filename().string() << ": " << written.recorded << " files\n"
              << "  " << run.targets().filename().string() << ": " << written.targets << " files\n"
              << "  " << run.opcompile().filename().string() << ": " << written.supported << " files\n";

    // 5. Select: blacklist, already compiled by this process, duplicates. Nothing left: skip.
    const skc::Selection sel =
        skc::select_for_compile(run, skc::SelectOptions{options.op_blacklist, options.use_model_cache_dir()});
    std::cout << "selection from " << sel.input_dir.filename().string() << ":\n";
    for (skc::Verdict v : all_verdicts) std::cout << "  " << skc::to_string(v) << ": " << sel.count(v) << "\n";
    for (const skc::Decision& d : sel.decisions)
        if (d.verdict != skc::Verdict::selected)
            std::cout << "  " << d.name << ": " << skc::to_string(d.verdict) << "\n";
    if (sel.skipped()) {
        std::cout << "nothing to compile: compilation skipped\n";
        return 0;
    }
    std::cout << "compile dir: " << sel.compile_dir.lexically_relative(base).string() << "\n"
              << "set digest: " << sel.ops.set_digest().hex() << " (" << sel.ops.size() << " ops)\n";

    // 6. Read one selected file back: the file on disk is the op Projection describes.
    if (const skc::OpSet::Entry* entry = sel.ops.find(projection_key)) {
        const skc::OpRecord back = skc::read_op_info(sel.compile_dir / entry->name);
        std::cout << entry->name << ": digest " << skc::digest(back).hex()
                  << (skc::digest(back) == Projection::digest ? " (equals Projection::digest)\n" : " (differs)\n");
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: record_and_select BASE_DIR  (an existing directory this user can read and write)\n";
        return 2;
    }
    try {
        return run(argv[1]);
    } catch (const skc::Error& e) {
        std::cerr << "record_and_select: " << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {  // not from skc: out of memory, no more threads, ...
        std::cerr << "record_and_select: " << e.what() << "\n";
        return 1;
    }
}
