#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include <skc/op_desc.hpp>
#include <skc/recorder.hpp>
#include <skc/session_files.hpp>

#include "test_support.hpp"

namespace skc_recorder_test {

namespace {

skc::OpRecord op(const std::string& type, std::int64_t a, std::int64_t b) {
    skc::TensorDesc t;
    t.name = "x";
    t.dtype = "float";
    t.format = "ND";
    t.shape = skc::RuntimeShape{a, b};
    skc::OpRecord r;
    r.op_type = type;
    r.inputs = {t};
    r.outputs = {t};
    return r;
}

/// `r` as a recording hands it over: with its digest, supported, a target when `target`.
skc::RecordedOp recorded(skc::OpRecord r, bool target) {
    const skc::Digest d = skc::digest(r);
    return skc::RecordedOp{d, std::move(r), target, true};
}

/// `n` distinct MatMulV2 ops (targets), [1, 8] to [n, 8].
std::vector<skc::RecordedOp> matmuls(std::int64_t n) {
    std::vector<skc::RecordedOp> ops;
    for (std::int64_t i = 0; i < n; ++i) ops.push_back(recorded(op("MatMulV2", i + 1, 8), true));
    return ops;
}

}  // namespace

TEST_CASE("one recording session per process; a second start says why it fails") {
    CHECK_FALSE(skc::recording_session_active());
    {
        skc::OpRecorder<> first;
        CHECK(skc::recording_session_active());
        try {
            skc::OpRecorder<> second;
            FAIL("a second session started");
        } catch (const skc::Error& e) {
            CHECK(e.code() == skc::Errc::session_active);
            CHECK_EQ(std::string(e.what()),
                     "a recording session is already active in this process (a profiler that records op arguments "
                     "from step 0 holds it); stop it before enabling static kernel compilation");
        }
        CHECK(skc::recording_session_active());  // the failed start did not release the first
    }
    CHECK_FALSE(skc::recording_session_active());
    skc::OpRecorder<> again;  // free again
    CHECK(skc::recording_session_active());
}

TEST_CASE("8 threads x 10,000 records: each distinct op recorded exactly once") {
    skc::OpRecorder<> rec;
    std::atomic<std::size_t> fresh{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 10000; ++i) {
                // Threads t and t+2, t+4, t+6 record the same 10,000 ops in different orders.
                const int k = (i * (2 * t + 1)) % 10000;
                fresh += rec.record(op("MatMulV2", k % 5000, t % 2 + 1)) ? 1 : 0;
            }
        });
    for (auto& th : threads) th.join();
    CHECK(fresh == 10000);
    CHECK(rec.size() == 10000);
    const skc::OpSet set = rec.snapshot();
    CHECK(set.size() == 10000);
}

TEST_CASE("stop writes <pid>_debug, <pid> and <pid>_opcompile in the order ops were first seen") {
    skc_test::TempDir dir;
    const skc::RunLayout run = skc::Layout(dir.path()).create_run();
    skc::OpRecorder<> rec;
    skc::OpRecord with_bin = op("MatMulV2", 2, 3);
    with_bin.bin_type = 1;
    with_bin.bin_info = skc::Value("matmul_dynamic.o");
    CHECK(rec.record(with_bin));
    CHECK(rec.record(op("ReduceSum", 2, 3)));  // unsupported, not a target
    CHECK(rec.record(op("Add", 2, 3)));        // supported, not a target
    CHECK_FALSE(rec.record(op("Add", 2, 3)));  // same content
    skc::OpRecord same_but_bin = op("MatMulV2", 2, 3);
    same_but_bin.bin_type = 0;  // the same op after reselect: not a new op
    CHECK_FALSE(rec.record(same_but_bin));

    const skc::RecordingResult res = rec.stop(run);
    CHECK(res.recorded == 3);
    CHECK(res.targets == 1);
    CHECK(res.supported == 2);
    const auto debug = skc::read_op_info_dir(run.debug());
    const auto targets = skc::read_op_info_dir(run.targets());
    const auto opcompile = skc::read_op_info_dir(run.opcompile());
    REQUIRE(debug.ops.size() == 3);
    REQUIRE(targets.ops.size() == 1);
    REQUIRE(opcompile.ops.size() == 2);
    CHECK(targets.ops[0].record.bin_type == 1);  // <pid> and <pid>_debug keep bin fields
    for (const auto& o : opcompile.ops) CHECK_FALSE(o.record.bin_type.has_value());
    std::vector<std::string> types;
    for (const auto& o : opcompile.ops) types.push_back(o.record.op_type);
    std::sort(types.begin(), types.end());
    CHECK(types == std::vector<std::string>{"Add", "MatMulV2"});
}

TEST_CASE("an invalid record is refused with its fault and not recorded") {
    skc::OpRecorder<> rec;
    skc::OpRecord bad = op("Add", 2, 3);
    bad.op_type = "Add; rm -rf /";
    CHECK_THROWS_WITH_AS(rec.record(bad),
                         "op_type: op type \"Add; rm -rf /\" cannot be used in a file name: accepted are 1 to 128 "
                         "letters, digits and '_'",
                         skc::Error);
    CHECK(rec.size() == 0);
}

TEST_CASE("recording with a compile-time digest builds the record only for a new op") {
    using Relu =
        skc::OpDesc<"Relu",
                    skc::desc::Inputs<skc::desc::Tensor<"x", skc::DType::float32, skc::Format::ND, skc::Shape<4, 8>>>,
                    skc::desc::Outputs<skc::desc::Tensor<"y", skc::DType::float32, skc::Format::ND, skc::Shape<4, 8>>>>;
    skc::OpRecorder<> rec;
    int built = 0;
    auto make = [&] {
        ++built;
        return Relu::record();
    };
    CHECK(rec.record(Relu::digest, make));
    CHECK_FALSE(rec.record(Relu::digest, make));
    CHECK_FALSE(rec.record(Relu::record()));  // the run-time path agrees it is the same op
    CHECK(built == 1);
    CHECK(rec.size() == 1);
}

TEST_CASE("custom target and support policies") {
    skc_test::TempDir dir;
    const skc::RunLayout run = skc::Layout(dir.path()).create_run();
    using List = skc::OpTypeList;
    skc::OpRecorder<List, List> rec(List(List::Mode::only_these, {"Add"}), List(List::Mode::all_but_these, {"Add"}));
    rec.record(op("Add", 1, 1));
    rec.record(op("Mul", 1, 1));
    const auto res = rec.stop(run);
    CHECK(res.targets == 1);
    CHECK(res.supported == 1);
    CHECK(skc::read_op_info_dir(run.targets()).ops[0].record.op_type == "Add");
    CHECK(skc::read_op_info_dir(run.opcompile()).ops[0].record.op_type == "Mul");
}

TEST_CASE("stop ends the session: the process may record again, this recorder may not") {
    skc_test::TempDir dir;
    const skc::Layout layout(dir.path());
    skc::OpRecorder<> rec;
    rec.record(op("Add", 1, 2));
    rec.stop(layout.create_run());
    CHECK_FALSE(rec.active());
    CHECK_FALSE(skc::recording_session_active());
    CHECK_THROWS_WITH_AS(rec.record(op("Add", 3, 4)),
                         "the recording session was stopped; start a new OpRecorder to record again", skc::Error);
    CHECK_THROWS_WITH_AS(rec.stop(layout.create_run()), "the recording session was already stopped", skc::Error);
    skc::OpRecorder<> next;  // the process's session is free again
    CHECK(next.record(op("Add", 1, 2)));
}

TEST_CASE("a compile-time digest that does not match the record is refused") {
    skc::OpRecorder<> rec;
    const skc::Digest wrong = skc::digest(op("Mul", 1, 1));
    try {
        rec.record(wrong, [] { return op("Add", 1, 1); });
        FAIL("no error");
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::invalid_argument);
        CHECK(e.message() == "the digest given to record() (" + wrong.hex() + ") is not the digest of the record (" +
                                 skc::digest(op("Add", 1, 1)).hex() + ")");
    }
    CHECK(rec.size() == 0);
}

TEST_CASE("discard ends the session without writing: the process may record again, this recorder may not") {
    skc_test::TempDir dir;
    const skc::Layout layout(dir.path());
    skc::OpRecorder<> rec;
    rec.record(op("Add", 1, 2));
    rec.discard();
    CHECK_FALSE(rec.active());
    CHECK_FALSE(skc::recording_session_active());
    CHECK_THROWS_WITH_AS(rec.record(op("Add", 3, 4)),
                         "the recording session was stopped; start a new OpRecorder to record again", skc::Error);
    CHECK_THROWS_WITH_AS(rec.record(skc::digest(op("Add", 5, 6)), [] { return op("Add", 5, 6); }),
                         "the recording session was stopped; start a new OpRecorder to record again", skc::Error);
    CHECK_THROWS_WITH_AS(rec.stop(layout.create_run()), "the recording session was already stopped", skc::Error);
    rec.discard();           // twice is harmless
    skc::OpRecorder<> next;  // the process's session is free again
    CHECK(next.record(op("Add", 1, 2)));
}

TEST_CASE("8 threads start a session at once: exactly one holds it, the others are told why") {
    std::atomic<bool> go{false};
    std::atomic<int> tried{0}, won{0}, refused{0}, other{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&] {
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            std::optional<skc::OpRecorder<>> rec;
            try {
                rec.emplace();
                ++won;
            } catch (const skc::Error& e) {
                ++(e.code() == skc::Errc::session_active ? refused : other);
            }
            ++tried;
            while (tried.load() < 8) std::this_thread::yield();  // the winner holds it until all tried
        });
    go.store(true, std::memory_order_release);
    for (auto& th : threads) th.join();
    CHECK(won.load() == 1);
    CHECK(refused.load() == 7);
    CHECK(other.load() == 0);
    CHECK_FALSE(skc::recording_session_active());
}

TEST_CASE("6 threads record the same ops, by record and by compile-time digest: each op once, built only when needed") {
    constexpr int ops = 2000;
    std::vector<skc::OpRecord> records;
    std::vector<skc::Digest> digests;
    for (int i = 0; i < ops; ++i) {
        records.push_back(op(i % 2 ? "Add" : "MatMulV2", i + 1, 7));
        digests.push_back(skc::digest(records.back()));
    }
    skc::OpRecorder<> rec;
    std::atomic<bool> go{false};
    std::atomic<int> fresh{0}, built{0}, errors{0};
    std::atomic<std::size_t> shrank{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t)
        threads.emplace_back([&, t] {
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            try {
                for (int n = 0; n < ops; ++n) {
                    const int i = (n * 7 + t * 331) % ops;  // every thread walks all ops, from another start
                    if (t % 2 == 0) {
                        fresh += rec.record(records[static_cast<std::size_t>(i)]) ? 1 : 0;
                    } else {
                        fresh += rec.record(digests[static_cast<std::size_t>(i)],
                                            [&] {
                                                ++built;
                                                return records[static_cast<std::size_t>(i)];
                                            })
                                     ? 1
                                     : 0;
                    }
                }
            } catch (const std::exception&) {
                ++errors;
            }
        });
    go.store(true, std::memory_order_release);
    std::size_t last = 0;
    for (int probe = 0; probe < 50; ++probe) {  // size() and snapshot() meanwhile: never shrinking
        const std::size_t now = rec.size();
        const std::size_t snap = rec.snapshot().size();
        if (now < last || snap < now) ++shrank;
        last = snap;
    }
    for (auto& th : threads) th.join();
    CHECK(errors.load() == 0);
    CHECK(shrank.load() == 0);
    CHECK(fresh.load() == ops);
    CHECK(rec.size() == static_cast<std::size_t>(ops));
    // A digest-path thread builds a record only when its op was not seen yet when it looked: at
    // most once per op for each of the 3 such threads. (How many it built depends on the schedule:
    // the record-path threads may have recorded every op first.)
    CHECK(built.load() <= 3 * ops);
    const skc::OpSet set = rec.snapshot();
    REQUIRE(set.size() == static_cast<std::size_t>(ops));
    for (int i = 0; i < ops; ++i) CHECK(set.find(digests[static_cast<std::size_t>(i)]) != nullptr);
    // Built only when needed: never for an op recorded before, once for a new one.
    const int before = built.load();
    CHECK_FALSE(rec.record(digests[0], [&] {
        ++built;
        return records[0];
    }));
    CHECK(built.load() == before);
    const skc::OpRecord extra = op("Gelu", 1, 9);
    CHECK(rec.record(skc::digest(extra), [&] {
        ++built;
        return extra;
    }));
    CHECK(built.load() == before + 1);
    CHECK(rec.size() == static_cast<std::size_t>(ops) + 1);
}

TEST_CASE("stop while 4 threads record: every op acknowledged as new is written once, every later call refused") {
    skc_test::TempDir dir;
    const skc::RunLayout run = skc::Layout(dir.path()).create_run();
    constexpr int per_thread = 250;
    skc::OpRecorder<> rec;
    std::atomic<int> running{0}, other_errors{0}, refused{0};
    std::vector<std::vector<skc::Digest>> accepted(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            ++running;
            try {
                // Each thread's own ops first, then the same ones again (not new) until refused.
                for (int n = 0;; ++n) {
                    const skc::OpRecord r = op("Mul", t + 1, n % per_thread + 1);
                    if (rec.record(r)) accepted[static_cast<std::size_t>(t)].push_back(skc::digest(r));
                }
            } catch (const skc::Error& e) {
                ++(e.code() == skc::Errc::no_session ? refused : other_errors);
            } catch (const std::exception&) {
                ++other_errors;
            }
        });
    while (running.load() < 4 || rec.size() < 100) std::this_thread::yield();
    const skc::RecordingResult res = rec.stop(run);
    for (auto& th : threads) th.join();
    CHECK(refused.load() == 4);
    CHECK(other_errors.load() == 0);
    std::set<std::string> acknowledged;
    for (const auto& list : accepted)
        for (const skc::Digest& d : list) acknowledged.insert(d.hex());
    std::size_t acknowledged_calls = 0;
    for (const auto& list : accepted) acknowledged_calls += list.size();
    CHECK(acknowledged_calls == acknowledged.size());  // no op was new twice
    CHECK(res.recorded == acknowledged.size());
    std::set<std::string> written;
    for (const auto& o : skc::read_op_info_dir(run.debug()).ops) written.insert(skc::digest(o.record).hex());
    CHECK(written == acknowledged);
    CHECK(skc::read_op_info_dir(run.opcompile()).ops.size() == acknowledged.size());
}

TEST_CASE("take hands the records over in the order first seen; FileWriter writes plans submitted from 4 threads") {
    skc_test::TempDir tmp;
    const skc::Layout layout(tmp.path());
    skc::FileWriter writer;
    std::vector<std::thread> threads;
    std::vector<std::shared_ptr<const skc::SessionPlan>> plans(4);
    for (std::size_t t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            // Each thread a session of its own (one at a time per process), then a plan of its ops.
            std::vector<skc::RecordedOp> ops;
            {
                static std::mutex session;
                std::lock_guard lock(session);
                skc::OpRecorder<> rec;
                for (std::int64_t i = 0; i < 50; ++i)
                    rec.record(op(i % 2 ? "MatMulV2" : "ReduceSum", i + 1, static_cast<std::int64_t>(t) + 1));
                rec.record(op("MatMulV2", 2, static_cast<std::int64_t>(t) + 1));  // seen already
                ops = rec.take();
            }
            CHECK(ops.size() == 50);
            if (ops.size() == 50) {
                CHECK(ops[1].target);
                CHECK_FALSE(ops[0].supported);  // ReduceSum
            }
            const skc::RunLayout run(tmp / ("run" + std::to_string(t)), 4242);
            plans[t] = std::make_shared<const skc::SessionPlan>(
                skc::plan_session(run, std::make_shared<const std::vector<skc::RecordedOp>>(std::move(ops)),
                                  skc::SelectOptions{}, skc::CompiledSet{}));
            writer.submit(plans[t]);
            if (t % 2 == 0) writer.start();
        });
    for (std::thread& th : threads) th.join();
    std::thread waiter([&] { writer.wait(); });
    writer.wait();
    waiter.join();
    CHECK_FALSE(writer.pending());
    for (const auto& p : plans) {
        CHECK(skc::read_op_info_dir(p->run.debug()).ops.size() == 50);
        CHECK(skc::read_op_info_dir(p->run.targets()).ops.size() == 25);
        CHECK(skc::read_op_info_dir(p->run.opcompile()).ops.size() == 25);
        CHECK(skc::read_op_info_dir(p->run.selected()).ops.size() == 25);
        CHECK(p->selected.size() == 25);
    }
}

TEST_CASE(
    "FileWriter::defer runs jobs after what was queued before them, from start() on; wait() throws a job's error "
    "once") {
    skc::FileWriter writer;
    std::mutex mu;
    std::vector<int> order;
    for (int i = 0; i < 3; ++i)
        writer.defer([&, i] {
            std::lock_guard lock(mu);
            order.push_back(i);
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    {
        std::lock_guard lock(mu);
        CHECK(order.empty());  // not started
    }
    CHECK(writer.pending());
    writer.defer([] { throw skc::Error(skc::Errc::io_error, "the job failed"); });
    writer.defer([&] {
        std::lock_guard lock(mu);
        order.push_back(3);  // runs after a failed job too
    });
    CHECK_THROWS_WITH_AS(writer.wait(), "the job failed", skc::Error);
    CHECK(order == std::vector<int>{0, 1, 2, 3});
    CHECK_NOTHROW(writer.wait());  // reported once
    CHECK_FALSE(writer.pending());
}

TEST_CASE("write_planned_files: a plan of many ops, written by two threads, links each content under its names") {
    skc_test::TempDir tmp;
    const skc::RunLayout run(tmp / "run", 4242);
    std::vector<skc::RecordedOp> ops;
    for (std::int64_t i = 0; i < 600; ++i) {
        skc::OpRecord r = op(i % 3 ? "MatMulV2" : "Mul", i + 1, 8);
        if (i % 2) {  // `<pid>` and `_debug` keep bin_type and bin_info: a content of their own
            r.bin_type = 0;
            r.bin_info = skc::Value(std::string("kernel_") + std::to_string(i));
        }
        ops.push_back(recorded(std::move(r), i % 3 != 0));
    }
    const auto shared = std::make_shared<const std::vector<skc::RecordedOp>>(std::move(ops));
    const skc::SessionPlan plan = skc::plan_session(run, shared, skc::SelectOptions{}, skc::CompiledSet{});
    REQUIRE(plan.files.size() >= skc::detail::parallel_write_ops);
    skc::write_planned_files(plan);
    for (std::size_t i = 0; i < plan.files.size(); ++i) {
        const skc::OpRecord& r = (*shared)[i].record;
        const skc::SessionPlan::Files& f = plan.files[i];
        CAPTURE(f.debug);
        const std::string with_bin = skc::dump_json(skc::to_value(r, skc::ToValueOptions{true})) + "\n";
        const std::string without = skc::dump_json(skc::to_value(r, skc::ToValueOptions{false})) + "\n";
        const bool bin = r.bin_type.has_value();
        CHECK(skc_test::slurp(run.debug() / f.debug) == with_bin);
        CHECK(skc_test::slurp(run.opcompile() / f.opcompile) == without);
        CHECK(skc_test::slurp(run.selected() / f.opcompile) == without);
        // One file per content: `_debug` and `<pid>` share one, `_opcompile` and `_selected` another
        // (one file for all four when there are no bin fields), each also linked into the store.
        const std::uintmax_t debug_links = 1 + !f.target.empty() + (bin ? 0 : 2) + 1;
        CHECK(std::filesystem::hard_link_count(run.debug() / f.debug) == debug_links);
        CHECK(std::filesystem::hard_link_count(run.opcompile() / f.opcompile) == (bin ? 3 : debug_links));
        if (!f.target.empty()) CHECK(skc_test::slurp(run.targets() / f.target) == with_bin);
    }
    std::size_t files = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(tmp / "run")) {
        CHECK(e.path().filename().string().front() != '.');  // no temporary left
        files += e.is_regular_file();
    }
    CHECK(files == 600 + 400 + 600 + 600);
    std::size_t stored = 0;
    for (const auto& e : std::filesystem::directory_iterator(tmp / skc::detail::op_info_store)) {
        CHECK(e.path().filename().string() == skc::detail::hash_bytes(skc_test::slurp(e.path())).hex() + ".json");
        ++stored;
    }
    CHECK(stored == 600 + 300);  // a content per op, and a second for the 300 with bin fields
}

TEST_CASE(
    "write_planned_files: a later run's files of the same content are links to the store's; a changed one is not "
    "used") {
    skc_test::TempDir tmp;
    const auto shared = std::make_shared<const std::vector<skc::RecordedOp>>(matmuls(40));
    const skc::RunLayout first(tmp / "run1", 4242), second(tmp / "run2", 4242), third(tmp / "run3", 4242);
    const skc::SessionPlan p1 = skc::plan_session(first, shared, skc::SelectOptions{}, skc::CompiledSet{});
    skc::write_planned_files(p1);
    const std::filesystem::path store = tmp / skc::detail::op_info_store;
    // Changed in place behind the store's back (through a run folder's name, as an editor may do).
    const std::filesystem::path changed = first.opcompile() / p1.files[7].opcompile;
    const std::string original = skc_test::slurp(changed);
    {
        std::ofstream out(changed, std::ios::binary | std::ios::trunc);
        out << "{}\n";
    }
    const skc::SessionPlan p2 = skc::plan_session(second, shared, skc::SelectOptions{}, skc::CompiledSet{});
    skc::write_planned_files(p2);
    for (std::size_t i = 0; i < p2.files.size(); ++i) {
        CAPTURE(i);
        const std::filesystem::path a = first.debug() / p1.files[i].debug, b = second.debug() / p2.files[i].debug;
        CHECK(skc_test::slurp(b) == (i == 7 ? original : skc_test::slurp(a)));
        struct stat sa {
        }, sb{};
        REQUIRE(::stat(a.c_str(), &sa) == 0);
        REQUIRE(::stat(b.c_str(), &sb) == 0);
        CHECK((sa.st_ino == sb.st_ino) == (i != 7));  // no new file but for the changed content
    }
    CHECK(skc_test::slurp(store / (skc::detail::hash_bytes(original).hex() + ".json")) == original);
    CHECK(skc_test::slurp(changed) == "{}\n");  // the first run's file is left as it was made
    const skc::SessionPlan p3 = skc::plan_session(third, shared, skc::SelectOptions{}, skc::CompiledSet{});
    skc::write_planned_files(p3);  // the store's file for op 7 is the second run's now
    struct stat s2 {
    }, s3{};
    REQUIRE(::stat((second.debug() / p2.files[7].debug).c_str(), &s2) == 0);
    REQUIRE(::stat((third.debug() / p3.files[7].debug).c_str(), &s3) == 0);
    CHECK(s2.st_ino == s3.st_ino);
    CHECK(skc_test::slurp(third.debug() / p3.files[7].debug) == original);
}

TEST_CASE("write_planned_files: a name taken already is never replaced; the error of either thread is thrown") {
    skc_test::TempDir tmp;
    const skc::RunLayout run(tmp / "run", 4242);
    const skc::SessionPlan plan =
        skc::plan_session(run, std::make_shared<const std::vector<skc::RecordedOp>>(matmuls(600)), skc::SelectOptions{},
                          skc::CompiledSet{});
    for (const std::size_t taken : {std::size_t{10}, std::size_t{590}}) {  // in the first half, then in the second
        CAPTURE(taken);
        std::filesystem::remove_all(tmp / "run");
        std::filesystem::create_directories(run.debug());
        const std::filesystem::path blocker = run.debug() / plan.files[taken].debug;
        skc_test::spit(blocker, "not an op info file of this plan\n");
        CHECK_THROWS_WITH_AS(skc::write_planned_files(plan), doctest::Contains("cannot publish: File exists"),
                             skc::Error);
        CHECK(skc_test::slurp(blocker) == "not an op info file of this plan\n");
        for (const auto& e : std::filesystem::recursive_directory_iterator(tmp / "run")) {
            CHECK(e.path().filename().string().front() != '.');
            if (e.is_regular_file() && e.path() != blocker) CHECK_NOTHROW((void)skc::read_op_info(e.path()));
        }
    }
}

TEST_CASE("sweep_op_info_store: the store's files that no run folder links any more go, the others stay") {
    skc_test::TempDir tmp;
    const std::vector<skc::RecordedOp> ops = matmuls(10);
    const auto all = std::make_shared<const std::vector<skc::RecordedOp>>(ops);
    const auto some = std::make_shared<const std::vector<skc::RecordedOp>>(ops.begin(), ops.begin() + 4);
    const skc::RunLayout kept(tmp / "kept", 4242), removed(tmp / "removed", 4242);
    skc::write_planned_files(skc::plan_session(removed, all, skc::SelectOptions{}, skc::CompiledSet{}));
    skc::write_planned_files(skc::plan_session(kept, some, skc::SelectOptions{}, skc::CompiledSet{}));
    const std::filesystem::path store = tmp / skc::detail::op_info_store;
    skc_test::spit(store / "notes.txt", "not a content of the store\n");
    CHECK(skc::detail::sweep_op_info_store(store, std::chrono::seconds(0)) == 0);  // every file linked
    std::filesystem::remove_all(removed.dir());
    CHECK(skc::detail::sweep_op_info_store(store, std::chrono::hours(1)) == 0);  // unlinked just now
    CHECK(skc::detail::sweep_op_info_store(store, std::chrono::seconds(0)) == 6);
    std::size_t left = 0;
    for (const auto& e : std::filesystem::directory_iterator(store)) {
        if (e.path().extension() != ".json") continue;
        CHECK(std::filesystem::hard_link_count(e.path()) > 1);
        ++left;
    }
    CHECK(left == 4);
    CHECK(std::filesystem::exists(store / "notes.txt"));
}

TEST_CASE("FileWriter: threads that wait write chunks of the plan in progress; the folders are whole") {
    skc_test::TempDir tmp;
    std::vector<skc::RecordedOp> ops;
    for (std::int64_t i = 0; i < 1500; ++i) {
        skc::OpRecord r = op(i % 2 ? "MatMulV2" : "Mul", i + 1, 16);
        ops.push_back(recorded(std::move(r), i % 2 != 0));
    }
    const auto shared = std::make_shared<const std::vector<skc::RecordedOp>>(std::move(ops));
    skc::FileWriter writer;
    std::vector<std::shared_ptr<const skc::SessionPlan>> plans;
    for (int k = 0; k < 3; ++k) {
        const skc::RunLayout run(tmp / ("run" + std::to_string(k)), 4242);
        plans.push_back(std::make_shared<const skc::SessionPlan>(
            skc::plan_session(run, shared, skc::SelectOptions{}, skc::CompiledSet{})));
        writer.submit(plans.back());
    }
    std::vector<std::thread> waiters;
    for (int t = 0; t < 3; ++t) waiters.emplace_back([&] { writer.wait(); });
    writer.wait();
    for (std::thread& t : waiters) t.join();
    CHECK_FALSE(writer.pending());
    for (const auto& p : plans) {
        CHECK(skc::read_op_info_dir(p->run.debug()).ops.size() == 1500);
        CHECK(skc::read_op_info_dir(p->run.targets()).ops.size() == 750);
        CHECK(skc::read_op_info_dir(p->run.selected()).ops.size() == 1500);
    }
}

}  // namespace skc_recorder_test
