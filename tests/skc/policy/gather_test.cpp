// The gather policies (docs/spec.md section 10): local_ranks_from_env with an injected environment,
// detail::OpUnion, and LocalFsGather with real processes: the ranks of one node are
// tests/workers/gather_worker.cpp programs on one base directory, compiling with a real script
// compiler that packs real makeself packages, killed by the test at chosen moments. SingleRank
// through StaticKernelCompiler is compiler_test's.
//
// The test process makes itself a child subreaper, so that a process orphaned by a killed rank
// (the kernel compiler, an extraction) becomes its child: after every scenario it checks that no
// such process is left, reaps every worker, and kills with SIGKILL whatever is still running.
#include <doctest/doctest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <skc/op_info_io.hpp>
#include <skc/policy/local_fs_gather.hpp>
#include <skc/select.hpp>

#include "run_packages.hpp"
#include "run_tool.hpp"
#include "test_support.hpp"

namespace skc_policy_gather_test {

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using skc_test::slurp;
using skc_test::spit;
using skc_test::TempDir;

const std::string worker_program = SKC_GATHER_WORKER;

// ---- local_ranks_from_env ------------------------------------------------------------------------

using Vars = std::map<std::string, std::string>;

std::function<const char*(const char*)> getenv_of(const Vars& vars) {
    return [&vars](const char* name) -> const char* {
        const auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
    };
}

/// The error local_ranks_from_env throws for `vars` (a failed check when it throws none).
skc::Error env_error(const Vars& vars, std::string_view fallback = {}) {
    try {
        (void)skc::local_ranks_from_env(fallback, getenv_of(vars));
    } catch (const skc::Error& e) {
        return e;
    }
    FAIL("local_ranks_from_env threw nothing");
    return skc::Error(skc::Errc::invalid_argument, "unreachable");
}

/// Checks an invalid_option error: its message, and that the option it names is `option`.
void check_option_error(const skc::Error& e, const std::string& option, const std::string& message) {
    CHECK(e.code() == skc::Errc::invalid_option);
    CHECK(e.option() == option);
    CHECK(e.message() == message);
    CHECK(std::string(e.what()) == "option '" + option + "': " + message);
}

}  // namespace

TEST_CASE("local_ranks_from_env: neither LOCAL_WORLD_SIZE nor LOCAL_RANK is a single-rank job") {
    CHECK_FALSE(skc::local_ranks_from_env("fallback", getenv_of({})).has_value());
    CHECK_FALSE(skc::local_ranks_from_env("", getenv_of({{"SKC_RUN_ID", "job"}})).has_value());
}

TEST_CASE("local_ranks_from_env: one of the two variables without the other") {
    check_option_error(env_error({{"LOCAL_RANK", "1"}, {"SKC_RUN_ID", "job"}}), "LOCAL_WORLD_SIZE",
                       "LOCAL_WORLD_SIZE is not set, but LOCAL_RANK is (1): a multi-rank job needs both");
    check_option_error(env_error({{"LOCAL_WORLD_SIZE", "4"}, {"SKC_RUN_ID", "job"}}), "LOCAL_RANK",
                       "LOCAL_RANK is not set, but LOCAL_WORLD_SIZE is (4): a multi-rank job needs both");
    // A bad LOCAL_WORLD_SIZE is reported before the missing LOCAL_RANK.
    check_option_error(env_error({{"LOCAL_WORLD_SIZE", "abc"}}), "LOCAL_WORLD_SIZE",
                       "LOCAL_WORLD_SIZE=\"abc\" is not a positive integer");
}

TEST_CASE("local_ranks_from_env: LOCAL_WORLD_SIZE must be a positive integer") {
    for (const std::string bad : {"abc", "0", "-1", "4x", "", " 4", "+4", "1e3", "99999999999", "1000000000"}) {
        CAPTURE(bad);
        check_option_error(env_error({{"LOCAL_WORLD_SIZE", bad}, {"LOCAL_RANK", "0"}, {"SKC_RUN_ID", "job"}}),
                           "LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE=\"" + bad + "\" is not a positive integer");
    }
    // A control character in the value is quoted, not printed.
    check_option_error(env_error({{"LOCAL_WORLD_SIZE", "4\n"}, {"LOCAL_RANK", "0"}}), "LOCAL_WORLD_SIZE",
                       "LOCAL_WORLD_SIZE=\"4\\x0a\" is not a positive integer");
    // The largest accepted: nine digits.
    const auto big = skc::local_ranks_from_env(
        "", getenv_of({{"LOCAL_WORLD_SIZE", "999999999"}, {"LOCAL_RANK", "0"}, {"SKC_RUN_ID", "job"}}));
    REQUIRE(big.has_value());
    CHECK(big->local_world_size == 999999999u);
}

TEST_CASE("local_ranks_from_env: LOCAL_RANK must be a non-negative integer below LOCAL_WORLD_SIZE") {
    for (const std::string bad : {"abc", "-1", "1x", "", "99999999999"}) {
        CAPTURE(bad);
        check_option_error(env_error({{"LOCAL_WORLD_SIZE", "4"}, {"LOCAL_RANK", bad}, {"SKC_RUN_ID", "job"}}),
                           "LOCAL_RANK", "LOCAL_RANK=\"" + bad + "\" is not a non-negative integer");
    }
    check_option_error(env_error({{"LOCAL_WORLD_SIZE", "4"}, {"LOCAL_RANK", "4"}, {"SKC_RUN_ID", "job"}}), "LOCAL_RANK",
                       "LOCAL_RANK=4 is out of range for LOCAL_WORLD_SIZE=4 (0 to 3)");
    check_option_error(env_error({{"LOCAL_WORLD_SIZE", "1"}, {"LOCAL_RANK", "7"}, {"SKC_RUN_ID", "job"}}), "LOCAL_RANK",
                       "LOCAL_RANK=7 is out of range for LOCAL_WORLD_SIZE=1 (0 to 0)");
    const auto r = skc::local_ranks_from_env(
        "", getenv_of({{"LOCAL_WORLD_SIZE", "08"}, {"LOCAL_RANK", "007"}, {"SKC_RUN_ID", "job"}}));
    REQUIRE(r.has_value());
    CHECK(r->local_world_size == 8);
    CHECK(r->local_rank == 7);
}

TEST_CASE("local_ranks_from_env: the run id is SKC_RUN_ID, else TORCHELASTIC_RUN_ID, else the fallback") {
    const Vars ranks{{"LOCAL_WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}};
    auto run_id = [&](Vars extra, std::string_view fallback) {
        extra.insert(ranks.begin(), ranks.end());
        const auto r = skc::local_ranks_from_env(fallback, getenv_of(extra));
        REQUIRE(r.has_value());
        CHECK(r->local_rank == 2);
        CHECK(r->local_world_size == 4);
        return r->run_id;
    };
    CHECK(run_id({{"SKC_RUN_ID", "skc-job"}, {"TORCHELASTIC_RUN_ID", "torch-job"}}, "fb") == "skc-job");
    CHECK(run_id({{"TORCHELASTIC_RUN_ID", "torch-job"}}, "fb") == "torch-job");
    CHECK(run_id({{"SKC_RUN_ID", ""}, {"TORCHELASTIC_RUN_ID", "torch-job"}}, "fb") == "torch-job");  // empty is unset
    CHECK(run_id({{"SKC_RUN_ID", ""}, {"TORCHELASTIC_RUN_ID", ""}}, "fb") == "fb");
    CHECK(run_id({}, "fb") == "fb");

    const std::string none =
        "local rank 2: no run id: set SKC_RUN_ID (or TORCHELASTIC_RUN_ID, as torchrun does) to the "
        "same value on every rank of the job";
    check_option_error(env_error(ranks), "SKC_RUN_ID", none);
    check_option_error(
        env_error({{"LOCAL_WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"SKC_RUN_ID", ""}, {"TORCHELASTIC_RUN_ID", ""}}),
        "SKC_RUN_ID", none);
}

TEST_CASE("LocalFsGather refuses an impossible rank, an empty run id and a zero timeout") {
    auto error_of = [](skc::LocalRanks r, std::chrono::nanoseconds t) -> skc::Error {
        try {
            skc::LocalFsGather g(std::move(r), t);
        } catch (const skc::Error& e) {
            return e;
        }
        FAIL("no error");
        return skc::Error(skc::Errc::invalid_argument, "unreachable");
    };
    check_option_error(error_of({0, 0, "job"}, 1s), "LOCAL_WORLD_SIZE", "the local world size must be positive");
    check_option_error(error_of({3, 3, "job"}, 1s), "LOCAL_RANK",
                       "local rank 3 is out of range for a local world size of 3");
    check_option_error(error_of({0, 2, ""}, 1s), "SKC_RUN_ID", "the run id is empty");
    const skc::Error t = error_of({0, 2, "job"}, 0s);
    CHECK(t.code() == skc::Errc::invalid_argument);
    CHECK(t.message() == "the gather timeout must be positive");

    const skc::LocalFsGather g({1, 2, "job/../x"}, 2s);
    CHECK(g.local_rank() == 1);
    CHECK(g.local_world_size() == 2);
    CHECK(g.timeout() == 2s);
    // A run id that is not a plain name cannot climb out of the rendezvous folder.
    const skc::Layout layout("/base");
    const fs::path round = g.next_round_dir(layout);
    CHECK(round.filename() == "round-1");
    CHECK(round.parent_path().parent_path().parent_path() == layout.outputs() / "rendezvous");
    CHECK(round.parent_path().parent_path().filename().string().rfind("id-", 0) == 0);
}

// ---- detail::OpUnion -----------------------------------------------------------------------------

namespace {

skc::Digest digest_n(int i) { return *skc::Digest::from_hex(skc_test::digest_of(i)); }

struct stat stat_of(const fs::path& p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st;
}

}  // namespace

TEST_CASE("LocalFsGather: a selected op whose name is not a plain file name is refused before anything is published") {
    TempDir tmp;
    const skc::Layout layout(tmp.path());
    const skc::RunLayout run(tmp / "run", static_cast<long>(::getpid()));
    skc::LocalFsGather g({0, 2, "job"}, 1s);
    const fs::path rounds = g.next_round_dir(layout).parent_path();
    for (const std::string& bad : std::vector<std::string>{"a/b.json", "..", "line\nbreak.json"}) {
        CAPTURE(bad);
        const std::vector<skc::SelectedOp> selected{skc::SelectedOp{skc::Digest{}, bad}};
        const skc::GatherRequest req{layout, run, selected, tmp / "ops", 1s, {}, {}, {}};
        bool led = false;
        bool shared = false;
        try {
            g.coordinate(
                req,
                [&](const skc::GatheredSet&) {
                    led = true;
                    return skc::Value();
                },
                [&](const skc::Value&) { shared = true; });
            FAIL("no error");
        } catch (const skc::Error& e) {
            CHECK(e.code() == skc::Errc::invalid_argument);
            CHECK(e.message() == "a selected op has no plain file name: " + skc::detail::quote(bad));
        }
        CHECK_FALSE(led);
        CHECK_FALSE(shared);
    }
    // No claim of rank 0 was ever named in any round: the other ranks never saw it arrive.
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(rounds, ec); it != fs::recursive_directory_iterator(); ++it)
        CHECK_FALSE(it->path().filename().string().starts_with("r0-of-2"));
}

TEST_CASE("OpUnion: the first file of a content wins, other content under a taken name gets _1, _2") {
    TempDir tmp;
    fs::create_directories(tmp / "r0");
    fs::create_directories(tmp / "r1");
    spit(tmp / "r0/Add.json", "add of rank 0");
    spit(tmp / "r0/Mul.json", "mul");
    spit(tmp / "r1/Add.json", "add of rank 1");  // same name, other content
    spit(tmp / "r1/Mul.json", "mul");            // same content (digest 2) under the same name
    spit(tmp / "r1/Add_1.json", "a file already named like a suffix");

    skc::detail::OpUnion u(tmp / "gathered");
    u.add(digest_n(1), "Add.json", tmp / "r0/Add.json");
    u.add(digest_n(2), "Mul.json", tmp / "r0/Mul.json");
    u.add(digest_n(2), "Mul.json", tmp / "r1/Mul.json");    // dropped: the digest is known
    u.add(digest_n(1), "Other.json", tmp / "r1/Add.json");  // dropped too, whatever its name
    u.add(digest_n(3), "Add_1.json", tmp / "r1/Add_1.json");
    u.add(digest_n(4), "Add.json", tmp / "r1/Add.json");  // Add.json and Add_1.json are taken
    u.add(digest_n(5), "Add.json", {}, "add of rank 2");
    u.add(digest_n(6), "noext", {}, "first");
    u.add(digest_n(7), "noext", {}, "second");
    CHECK_FALSE(fs::exists(tmp / "gathered"));  // decided in memory: nothing is written yet

    const skc::GatheredSet g = u.take(2);
    CHECK(g.dir == tmp / "gathered");
    CHECK(g.ranks == 2);
    CHECK(g.digests == std::vector<skc::Digest>{digest_n(1), digest_n(2), digest_n(3), digest_n(4), digest_n(5),
                                                digest_n(6), digest_n(7)});
    CHECK(g.names == std::vector<std::string>{"Add.json", "Mul.json", "Add_1.json", "Add_2.json", "Add_3.json", "noext",
                                              "noext_1.json"});
    CHECK_FALSE(fs::exists(tmp / "gathered"));
    REQUIRE(g.materialize);
    g.materialize();

    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp / "gathered")) names.insert(e.path().filename().string());
    CHECK(names == std::set<std::string>{"Add.json", "Mul.json", "Add_1.json", "Add_2.json", "Add_3.json", "noext",
                                         "noext_1.json"});
    CHECK(slurp(tmp / "gathered/Add.json") == "add of rank 0");
    CHECK(slurp(tmp / "gathered/Mul.json") == "mul");
    CHECK(slurp(tmp / "gathered/Add_1.json") == "a file already named like a suffix");
    CHECK(slurp(tmp / "gathered/Add_2.json") == "add of rank 1");
    CHECK(slurp(tmp / "gathered/Add_3.json") == "add of rank 2");
    CHECK(slurp(tmp / "gathered/noext") == "first");
    CHECK(slurp(tmp / "gathered/noext_1.json") == "second");
}

TEST_CASE("OpUnion: a name read from another rank's file that is not a plain file name writes nothing anywhere") {
    TempDir tmp;
    fs::create_directories(tmp / "deep/er/r0");
    spit(tmp / "deep/er/r0/Add.json", "add");
    skc::detail::OpUnion u(tmp / "deep/er/gathered");
    for (const std::string& bad :
         std::vector<std::string>{"../../../victim.json", "../victim.json", "..", ".", "", "a/b.json",
                                  std::string("nul\0.json", 9), "line\nbreak.json"}) {
        CAPTURE(bad);
        CHECK_THROWS_WITH_AS(u.add(digest_n(1), bad, tmp / "deep/er/r0/Add.json"),
                             doctest::Contains("is not a plain file name"), skc::Error);
    }
    CHECK_FALSE(fs::exists(tmp / "victim.json"));
    CHECK_FALSE(fs::exists(tmp / "deep/victim.json"));
    CHECK_FALSE(fs::exists(tmp / "deep/er/gathered"));
    u.add(digest_n(1), "Add.json", tmp / "deep/er/r0/Add.json");  // a plain name still works, digest unused before
    u.take(1).materialize();
    CHECK(fs::exists(tmp / "deep/er/gathered/Add.json"));
}

TEST_CASE("OpUnion: a rank's file is hard-linked; without a file, or when linking fails, the content is copied") {
    TempDir tmp;
    fs::create_directories(tmp / "r0");
    spit(tmp / "r0/Add.json", "linked");
    spit(tmp / "r0/Gone.json", "from the file");

    skc::detail::OpUnion u(tmp / "gathered");
    u.add(digest_n(1), "Add.json", tmp / "r0/Add.json");
    u.add(digest_n(2), "Text.json", {}, "written");
    u.add(digest_n(3), "Missing.json", tmp / "r0/missing.json", "fallback text");
    u.take(1).materialize();
    const struct stat src = stat_of(tmp / "r0/Add.json");
    const struct stat dst = stat_of(tmp / "gathered/Add.json");
    CHECK(dst.st_ino == src.st_ino);  // the same file: a hard link
    CHECK(dst.st_dev == src.st_dev);
    CHECK(dst.st_nlink == 2);
    // No file: the text is written.
    CHECK(slurp(tmp / "gathered/Text.json") == "written");
    CHECK(stat_of(tmp / "gathered/Text.json").st_nlink == 1);
    // A file that cannot be linked (it does not exist) with text: the text is written.
    CHECK(slurp(tmp / "gathered/Missing.json") == "fallback text");

    // A source that can be neither linked nor read (a folder): the read error.
    fs::create_directories(tmp / "r0/Dir.json");
    skc::detail::OpUnion dir_union(tmp / "g2");
    dir_union.add(digest_n(4), "Dir.json", tmp / "r0/Dir.json");
    CHECK_THROWS_AS(dir_union.take(1).materialize(), skc::Error);

    // A file on another file system cannot be hard-linked: copied.
    if (fs::is_directory("/dev/shm") && stat_of("/dev/shm").st_dev != stat_of(tmp.path()).st_dev) {
        const fs::path other = "/dev/shm/skc-gather-test-" + std::to_string(::getpid()) + ".json";
        spit(other, "across devices");
        skc::detail::OpUnion across(tmp / "g3");
        across.add(digest_n(5), "Across.json", other);
        across.take(1).materialize();
        const struct stat copy = stat_of(tmp / "g3/Across.json");
        CHECK(copy.st_ino != stat_of(other).st_ino);
        CHECK(copy.st_nlink == 1);
        CHECK(slurp(tmp / "g3/Across.json") == "across devices");
        fs::remove(other);
    } else {
        MESSAGE("no second file system at /dev/shm: the cross-device copy is not exercised");
    }

    // Neither a file nor content: refused at once.
    try {
        u.add(digest_n(6), "Empty.json", {}, "");
        FAIL("no error");
    } catch (const skc::Error& e) {
        CHECK(e.code() == skc::Errc::invalid_argument);
        CHECK(e.message() == "gathered op \"Empty.json\" has neither a file nor content");
    }
    // A missing file and no text: the read error.
    skc::detail::OpUnion lost(tmp / "g4");
    lost.add(digest_n(7), "Lost.json", tmp / "r0/lost.json");
    CHECK_THROWS_AS(lost.take(1).materialize(), skc::Error);
    CHECK_FALSE(fs::exists(tmp / "g4/Lost.json"));
}

TEST_CASE("OpUnion: nothing added, no folder and an empty set") {
    TempDir tmp;
    skc::detail::OpUnion u(tmp / "gathered");
    const skc::GatheredSet g = u.take(3);
    CHECK(g.dir.empty());
    CHECK_FALSE(g.materialize);
    CHECK(g.digests.empty());
    CHECK(g.ranks == 3);
    CHECK_FALSE(fs::exists(tmp / "gathered"));
}

// ---- ranks as processes ----------------------------------------------------------------------------

namespace {

/// The stand-in kernel compiler, a shell script with op_compiler's command line: one kernel per op
/// info file (digest: the file's md5), packed into a real makeself package as docs/run-package.md
/// describes. Each run appends "compile <its pid>" to $SKC_TEST_COUNTER first; then it sleeps
/// $SKC_TEST_COMPILE_SLEEP seconds when set, and fails (status 1) when $SKC_TEST_COMPILE_FAIL is set.
constexpr const char* compiler_script = R"sh(#!/bin/sh
set -e
while [ $# -gt 0 ]; do
  case "$1" in
    -p) ops=$2; shift 2 ;;
    -v) device=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    *) shift ;;
  esac
done
echo "compile $$" >> "$SKC_TEST_COUNTER"
echo "compiling the ops of $ops for $device"
if [ -n "$SKC_TEST_COMPILE_SLEEP" ]; then sleep "$SKC_TEST_COMPILE_SLEEP"; fi
if [ -n "$SKC_TEST_COMPILE_FAIL" ]; then echo "error: no kernel for you"; exit 1; fi
src="$out/payload.$$"
mkdir -p "$src/kernels"
index="$src/binary_info_config.json"
printf '{"format": "skc-run-package", "version": 1, "backend": "host", "device": "%s", "kernels": [' \
  "$device" > "$index"
i=0
sep=""
for f in "$ops"/*.json; do
  d=$(md5sum < "$f" | cut -c1-32)
  t=$(sed -n 's/^ *"op_type": *"\([A-Za-z0-9_]*\)".*/\1/p' "$f" | head -n 1)
  printf 'kernel %s\n' "$d" > "$src/kernels/k$i.so"
  printf '%s{"digest": "%s", "op_type": "%s", "file": "kernels/k%s.so", "symbol": "sym_%s"}' \
    "$sep" "$d" "${t:-Op}" "$i" "$i" >> "$index"
  sep=", "
  i=$((i + 1))
done
printf ']}\n' >> "$index"
printf '#!/bin/sh\nexit 0\n' > "$src/setup.sh"
chmod +x "$src/setup.sh"
makeself --quiet --nox11 --nocomp --nomd5 --nocrc "$src" "$out/static_kernel_$(date +%Y%m%d%H%M%S)_$$.run" \
  "skc gather test" ./setup.sh
rm -rf "$src"
echo "packed $i kernels"
)sh";

/// The example op info files, in name order.
std::vector<std::string> example_files() {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(skc_test::example_ops_dir()))
        if (e.path().extension() == ".json") out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

/// Content digests (hex) of the ops in `files` that StaticKernelCompiler selects (DefaultSupport).
std::set<std::string> supported_digests(const std::vector<std::string>& files) {
    std::set<std::string> out;
    for (const std::string& f : files) {
        const skc::OpRecord r = skc::read_op_info(skc_test::example_ops_dir() / f);
        if (skc::DefaultSupport{}.supports(r.op_type)) out.insert(skc::digest(r).hex());
    }
    return out;
}

std::size_t lines_in(const fs::path& p) {
    const std::string s = slurp(p);
    return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

std::size_t run_packages_in(const fs::path& dir) {
    std::size_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) n += e.path().extension() == ".run";
    return n;
}

/// Whether `pid` is a process that has not ended (a zombie has ended).
bool running(pid_t pid) {
    const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    const std::size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

/// The test's own children (with the subreaper, also the orphans of its children), as pid -> the
/// command name and state (R, S, Z, ...).
std::map<pid_t, std::string> children_of_test() {
    std::map<pid_t, std::string> out;
    for (const auto& e : fs::directory_iterator("/proc")) {
        const std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        const std::string stat = slurp(e.path() / "stat");
        const std::size_t open = stat.find('('), close = stat.rfind(')');
        if (open == std::string::npos || close == std::string::npos || close + 4 > stat.size()) continue;
        const std::size_t ppid_at = stat.find(' ', close + 2);  // after the state
        if (ppid_at == std::string::npos) continue;
        if (std::atol(stat.c_str() + ppid_at + 1) == static_cast<long>(::getpid()))
            out.emplace(static_cast<pid_t>(std::stol(name)),
                        stat.substr(open + 1, close - open - 1) + ", state " + stat.substr(close + 2, 1));
    }
    return out;
}

/// Kills process group `pgid` (a compiler: the shell and its sleep) and reaps its members, which
/// are the test's children once their parents are gone.
void kill_group(pid_t pgid) {
    ::kill(-pgid, SIGKILL);
    int status = 0;
    while (::waitpid(-pgid, &status, 0) > 0 || errno == EINTR) {}
}

/// Kills and reaps every child the test still has (the last line of defence after a scenario).
void kill_children() {
    for (const auto& [pid, name] : children_of_test()) {
        ::kill(pid, SIGKILL);
        int status = 0;
        ::waitpid(pid, &status, 0);
    }
}

/// One rank: a started worker, and how it ended.
struct Rank {
    std::size_t rank = 0;
    pid_t pid = -1;
    fs::path io;
    fs::path report;
    Clock::time_point started, ended;
    int status = -1;  // exit status, or 128 + signal
    bool reaped = false;
    bool killed_by_test = false;  // still running at the scenario's deadline
    skc::Value doc;

    [[nodiscard]] const skc::Value* error() const { return doc.find("error"); }
    [[nodiscard]] std::string error_field(std::string_view k) const {
        const skc::Value* e = error();
        const skc::Value* v = e ? e->find(k) : nullptr;
        return v && v->is_string() ? v->as_string() : std::string("<no error " + std::string(k) + ">");
    }
    [[nodiscard]] std::string code() const { return error_field("code"); }
    [[nodiscard]] std::string message() const { return error_field("message"); }
    [[nodiscard]] std::string what() const { return error_field("what"); }
    [[nodiscard]] const skc::Value& rep() const {
        static const skc::Value none;
        const skc::Value* r = doc.find("report");
        return r ? *r : none;
    }
    [[nodiscard]] std::string text(std::string_view k) const {
        const skc::Value* v = rep().find(k);
        return v && v->is_string() ? v->as_string() : std::string("<no " + std::string(k) + ">");
    }
    [[nodiscard]] bool flag(std::string_view k) const {
        const skc::Value* v = rep().find(k);
        return v && v->is_bool() && v->as_bool();
    }
    [[nodiscard]] double count(std::string_view k) const {
        const skc::Value* c = rep().find("counts");
        const skc::Value* v = c ? c->find(k) : nullptr;
        return v && v->is_number() ? v->as_double() : -1;
    }
    [[nodiscard]] const skc::Value& reselect() const {
        static const skc::Value none;
        const skc::Value* r = doc.find("reselect");
        return r ? *r : none;
    }
    [[nodiscard]] std::string log() const {
        return "local rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ", status " +
               std::to_string(status) + "):\n" + slurp(io / "stderr") + slurp(report);
    }
    /// Time from the start to the end.
    [[nodiscard]] std::chrono::milliseconds took() const {
        return std::chrono::duration_cast<std::chrono::milliseconds>(ended - started);
    }
};

/// A node: a base directory, an op library and the script compiler, shared by the ranks it starts.
class Node {
public:
    Node() {
        static const bool subreaper = ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
        REQUIRE(subreaper);
        fs::create_directories(base);
        compiler = tmp / "op_compiler.sh";
        spit(compiler, compiler_script);
        fs::permissions(compiler, fs::perms::owner_all);
    }
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;
    ~Node() { kill_children(); }

    /// A folder with the example op info files `files`.
    fs::path ops(const std::string& name, const std::vector<std::string>& files) {
        const fs::path dir = tmp / ("ops-" + name);
        fs::create_directories(dir);
        for (const std::string& f : files) fs::copy_file(skc_test::example_ops_dir() / f, dir / f);
        return dir;
    }

    /// Starts local rank `rank` of `world` ranks in job `run_id`; `env` adds or replaces variables
    /// (a value "" removes one).
    Rank start(std::size_t rank, std::size_t world, const std::string& run_id, const fs::path& ops_dir,
               const Vars& env = {}) {
        Rank r;
        r.rank = rank;
        r.io = tmp / ("io-" + std::to_string(serial_++));
        fs::create_directories(r.io);
        r.report = r.io / "report.json";
        Vars vars{{"LOCAL_WORLD_SIZE", std::to_string(world)},
                  {"LOCAL_RANK", std::to_string(rank)},
                  {"SKC_RUN_ID", run_id},
                  {"TORCHELASTIC_RUN_ID", ""},
                  {"SKC_TEST_COUNTER", counter.string()},
                  {"SKC_TEST_COMPILE_SLEEP", ""},
                  {"SKC_TEST_COMPILE_FAIL", ""},
                  {"SKC_TEST_DIE_BEFORE_COMPILE", ""}};
        for (const auto& [k, v] : env) vars[k] = v;
        std::vector<std::string> e;
        for (const auto& [k, v] : vars) e.push_back(k + "=" + v);
        r.started = Clock::now();
        r.pid = skc_test::start_program(worker_program, tmp.path(), args(ops_dir, r.report), e, r.io).pid;
        return r;
    }

    [[nodiscard]] std::vector<std::string> args(const fs::path& ops_dir, const fs::path& report) const {
        return {"--base",     base.string(),     "--ops",     ops_dir.string(),          "--lib",    lib.string(),
                "--compiler", compiler.string(), "--timeout", std::to_string(timeout_s), "--report", report.string()};
    }

    /// Reaps every rank, waiting at most until `deadline`; a rank still running then is killed
    /// (SIGKILL) and marked. Then reads the reports.
    static void wait_all(std::vector<Rank*> ranks, Clock::time_point deadline) {
        for (;;) {
            bool all = true;
            for (Rank* r : ranks) {
                if (r->reaped) continue;
                int status = 0;
                const pid_t w = ::waitpid(r->pid, &status, WNOHANG);
                if (w == r->pid) {
                    r->ended = Clock::now();
                    r->reaped = true;
                    r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                } else {
                    all = false;
                }
            }
            if (all) break;
            if (Clock::now() >= deadline) {
                for (Rank* r : ranks) {
                    if (r->reaped) continue;
                    ::kill(r->pid, SIGKILL);
                    int status = 0;
                    ::waitpid(r->pid, &status, 0);
                    r->ended = Clock::now();
                    r->reaped = true;
                    r->killed_by_test = true;
                    r->status = 128 + SIGKILL;
                }
                break;
            }
            std::this_thread::sleep_for(2ms);
        }
        for (Rank* r : ranks) {
            CHECK_MESSAGE(!r->killed_by_test, "still running at the deadline, killed: " << r->log());
            CHECK(::kill(r->pid, 0) == -1);                   // reaped: the pid is gone
            const std::string err = slurp(r->io / "stderr");  // clean under the sanitizers
            CHECK_MESSAGE(err.find("runtime error:") == std::string::npos, err);
            CHECK_MESSAGE(err.find("Sanitizer") == std::string::npos, err);
            if (fs::exists(r->report)) r->doc = skc::parse_json(slurp(r->report));
        }
    }
    static void wait_all(std::vector<Rank>& ranks, Clock::time_point deadline) {
        std::vector<Rank*> p;
        for (Rank& r : ranks) p.push_back(&r);
        wait_all(p, deadline);
    }

    /// Kills a rank now (SIGKILL) and reaps it.
    static Clock::time_point kill_rank(Rank& r) {
        REQUIRE(::kill(r.pid, SIGKILL) == 0);
        const auto at = Clock::now();
        wait_all({&r}, at + 5s);
        CHECK(r.status == 128 + SIGKILL);
        return at;
    }

    /// Waits until the compiler has started `n` times; returns the pid of the last one.
    [[nodiscard]] pid_t await_compile(std::size_t n) const {
        const auto deadline = Clock::now() + 20s;
        while (lines_in(counter) < n && Clock::now() < deadline) std::this_thread::sleep_for(2ms);
        REQUIRE(lines_in(counter) >= n);
        const std::string s = slurp(counter);
        const std::size_t at = s.rfind("compile ", s.size() - 2);
        return static_cast<pid_t>(std::atol(s.c_str() + at + 8));
    }

    /// How long a failing rank may take: the gather timeout and 1 s.
    [[nodiscard]] std::chrono::milliseconds limit() const { return std::chrono::seconds(timeout_s) + 1s; }

    [[nodiscard]] std::size_t compiles() const { return lines_in(counter); }
    [[nodiscard]] fs::path rendezvous(const std::string& run_id) const {
        return skc::Layout(base).outputs() / "rendezvous" / run_id;
    }
    /// Waits (at most 10 s) until a file named `prefix*` is in the job's rendezvous; whether one is.
    [[nodiscard]] bool await_file(const std::string& run_id, const std::string& prefix) const {
        const auto there = [&] {
            std::error_code ec;
            for (auto it = fs::recursive_directory_iterator(rendezvous(run_id), ec);
                 !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
                if (it->path().filename().string().rfind(prefix, 0) == 0) return true;
            return false;
        };
        for (const auto deadline = Clock::now() + 10s; Clock::now() < deadline; std::this_thread::sleep_for(2ms))
            if (there()) return true;
        return there();
    }

    /// No process may be left: neither a worker nor anything it started. An orphan being reparented
    /// can take a moment to show up, and a killed leader's guard up to 2 s to end the compiler's
    /// group and itself: orphans that ended are reaped, for at most 3 s.
    static void check_nothing_left() {
        std::string names;
        for (const auto deadline = Clock::now() + 3s;;) {
            std::this_thread::sleep_for(20ms);
            while (::waitpid(-1, nullptr, WNOHANG) > 0) {}
            names.clear();
            for (const auto& [pid, name] : children_of_test()) names += " " + std::to_string(pid) + " (" + name + ")";
            if (names.empty() || Clock::now() >= deadline) break;
        }
        CHECK_MESSAGE(names.empty(), "processes left:" << names);
        kill_children();
    }

    TempDir tmp;
    fs::path base = tmp / "base";
    fs::path lib = tmp / "lib";
    fs::path counter = tmp / "compiles.log";
    fs::path compiler;
    long timeout_s = 3;

private:
    int serial_ = 0;
};

/// Checks that `r` ended with exit status `status` and error `code`, within `limit` of `since`.
void check_failed(const Rank& r, int status, const std::string& code, Clock::time_point since,
                  std::chrono::milliseconds limit) {
    INFO(r.log());
    CHECK(r.status == status);
    CHECK(r.code() == code);
    CHECK(r.ended - since <= limit);
}

}  // namespace

TEST_CASE(
    "eight ranks with different ops: one compile, one package, one extraction, the union, reselect after "
    "the install; a second job hits the cache") {
    Node node;
    const std::vector<std::string> files = example_files();
    REQUIRE(files.size() == 15);
    // Rank k selects files k, k + 1 and k + 7: overlapping sets whose union is every file.
    std::vector<fs::path> ops;
    std::vector<std::string> all;
    for (std::size_t k = 0; k < 8; ++k) {
        std::vector<std::string> mine{files[k], files[k + 1]};
        if (k + 7 < files.size() && k + 7 != k + 1) mine.push_back(files[k + 7]);
        ops.push_back(node.ops(std::to_string(k), mine));
        all.insert(all.end(), mine.begin(), mine.end());
    }
    const std::set<std::string> want = supported_digests(all);
    REQUIRE(want.size() == 12);  // 15 files, two with the same op, ReduceSum and GatherV2 unsupported

    std::string key;
    for (const std::string run_id : {"job-a", "job-a2"}) {
        CAPTURE(run_id);
        const bool first = run_id == std::string("job-a");
        // A finished round whose removal its process did not live to run (renamed, then killed):
        // the next round's removal takes it too.
        const fs::path leftover =
            skc::LocalFsGather(skc::LocalRanks{0, 8, run_id}, 1s).next_round_dir(skc::Layout(node.base)).parent_path() /
            ".gone.0123456789abcdef01234567";
        fs::create_directories(leftover / "round-1");
        skc_test::spit(leftover / "round-1" / "passed", "x\n");
        std::vector<Rank> ranks;
        for (std::size_t k = 0; k < 8; ++k) ranks.push_back(node.start(k, 8, run_id, ops[k]));
        Node::wait_all(ranks, Clock::now() + 30s);

        CHECK(node.compiles() == 1);  // the first job's only: the second hits the cache
        std::size_t extracted = 0, packages = 0;
        for (const Rank& r : ranks) {
            INFO(r.log());
            REQUIRE(r.status == 0);
            CHECK(r.text("outcome") == (first ? "compiled" : "hit"));
            CHECK(r.rep().find("local_rank")->as_double() == static_cast<double>(r.rank));
            CHECK(r.rep().find("local_world_size")->as_double() == 8);
            CHECK(r.count("gathered") == static_cast<double>(want.size()));
            // Every rank reports the leader's work: all compiled the first time, all reused after.
            CHECK(r.count("compiled") == static_cast<double>(first ? want.size() : 0));
            CHECK(r.count("reused") == static_cast<double>(first ? 0 : want.size()));
            if (key.empty()) key = r.text("key");
            CHECK(r.text("key") == key);
            CHECK(r.text("package") == ranks[0].text("package"));
            CHECK(r.text("installed") == key);
            REQUIRE(r.rep().find("packages")->as_array().size() == 1);
            CHECK(r.rep().find("packages")->as_array()[0].as_string() == key);
            extracted += r.flag("extracted");
            packages += run_packages_in(r.text("run_dir"));
            // Reselect ran once, after the node's install: the global index was there and named it.
            CHECK(r.reselect().find("calls")->as_double() == 1);
            CHECK(r.reselect().find("index_existed")->as_bool());
            CHECK(r.reselect().find("index_names_package")->as_bool());
            CHECK(r.reselect().find("package")->as_string() == key);
        }
        CHECK(key.size() == 32);
        // The leader installs: it extracts the first time; the second job reuses the extraction the
        // first one kept when its last rank ended.
        CHECK(extracted == (first ? 1u : 0u));
        CHECK(ranks[0].flag("extracted") == first);
        CHECK(ranks[0].flag("reused") == !first);
        CHECK(fs::is_regular_file(ranks[0].text("package")));
        // The compiler's own package, in the leader's run folder, the first time only.
        CHECK(packages == (first ? 1u : 0u));
        CHECK(run_packages_in(ranks[0].text("run_dir")) == (first ? 1u : 0u));

        // On the miss, the leader's gathered folder holds the union, once per op; on the hit it
        // is never made (nothing is linked when nothing is compiled).
        const fs::path leader_run = ranks[0].text("run_dir");
        const fs::path gathered = leader_run / (std::to_string(ranks[0].pid) + "_opcompile_gathered");
        if (first) {
            REQUIRE(fs::is_directory(gathered));
            std::set<std::string> got;
            std::size_t files_in = 0;
            for (const skc::LoadedOp& op : skc::read_op_info_dir(gathered).ops) {
                got.insert(skc::digest(op.record).hex());
                ++files_in;
            }
            CHECK(files_in == want.size());
            CHECK(got == want);
        } else {
            CHECK_FALSE(fs::exists(gathered));
        }
        for (std::size_t k = 1; k < 8; ++k)  // only the leader gathers
            CHECK_FALSE(fs::exists(fs::path(ranks[k].text("run_dir")) /
                                   (std::to_string(ranks[k].pid) + "_opcompile_gathered")));
        // The last rank out removed the rendezvous (in the background, before it exited), and the
        // leftover with it.
        CHECK_FALSE(fs::exists(leftover));
        CHECK_FALSE(fs::exists(node.rendezvous(run_id)));
        // The installs were process-scoped: the last rank to exit removed the package.
        CHECK_FALSE(fs::exists(node.lib / "static_kernel/host" / key));
        Node::check_nothing_left();
    }
}

TEST_CASE("four ranks whose union grows: the leader compiles only the new ops, every rank installs both packages") {
    Node node;
    const std::vector<std::string> files{"Add_float_ND_32_64_9.json",        "Gelu_float_ND_32_256_8.json",
                                         "LayerNorm_float_ND_32_64_7.json",  "MatMulV2_float_ND_32_64_0.json",
                                         "Mul_float_ND_2_16_16_10.json",     "SoftmaxV2_float_ND_2_16_16_6.json",
                                         "Transpose_float_ND_2_16_64_5.json"};
    std::string first_key;
    for (const std::string run_id : {"job-a", "job-b"}) {
        CAPTURE(run_id);
        const bool first = run_id == std::string("job-a");
        std::vector<Rank> ranks;
        for (std::size_t k = 0; k < 4; ++k) {  // job-a: files 0..3, one a rank; job-b: also 4..6
            std::vector<std::string> mine{files[k]};
            if (!first && k + 4 < files.size()) mine.push_back(files[k + 4]);
            ranks.push_back(node.start(k, 4, run_id, node.ops(run_id + std::to_string(k), mine)));
        }
        Node::wait_all(ranks, Clock::now() + 30s);
        CHECK(node.compiles() == (first ? 1u : 2u));
        for (const Rank& r : ranks) {
            INFO(r.log());
            REQUIRE(r.status == 0);
            CHECK(r.count("gathered") == (first ? 4 : 7));
            CHECK(r.count("compiled") == (first ? 4 : 3));
            CHECK(r.count("reused") == (first ? 0 : 4));
            const skc::Array& packages = r.rep().find("packages")->as_array();
            REQUIRE(packages.size() == (first ? 1u : 2u));
            if (first) first_key = r.text("key");
            CHECK(packages[0].as_string() == first_key);
            CHECK(r.reselect().find("calls")->as_double() == 1);
        }
        Node::check_nothing_left();
    }
}

TEST_CASE("a rank that never arrives: every rank ends with a timeout naming it, within the timeout + 1 s") {
    Node node;
    const fs::path ops = node.ops("a", {"Add_float_ND_32_64_9.json"});
    SUBCASE("the rank is never started") {
        std::vector<Rank> ranks;
        for (std::size_t k = 0; k < 3; ++k) ranks.push_back(node.start(k, 4, "job-b", ops));
        Node::wait_all(ranks, Clock::now() + 10s);
        const std::string m = "local rank 3 of 4 did not arrive within 3 s (run id \"job-b\")";
        for (const Rank& r : ranks) check_failed(r, 3, "timeout", r.started, node.limit());
        CHECK(ranks[0].message() == m);
        CHECK(ranks[0].what().ends_with(": " + m));
        for (std::size_t k = 1; k < 3; ++k)
            CHECK(ranks[k].what() == ranks[0].what());  // the leader's error, where found
    }
    SUBCASE("the rank starts and dies before it claims its local rank") {
        std::vector<Rank> ranks;
        for (std::size_t k = 0; k < 3; ++k) ranks.push_back(node.start(k, 4, "job-b", ops));
        ranks.push_back(node.start(3, 4, "job-b", ops, {{"SKC_TEST_DIE_BEFORE_COMPILE", "1"}}));
        Node::wait_all(ranks, Clock::now() + 10s);
        CHECK(ranks[3].status == 9);
        for (std::size_t k = 0; k < 3; ++k) check_failed(ranks[k], 3, "timeout", ranks[k].started, node.limit());
        CHECK(ranks[0].message() == "local rank 3 of 4 did not arrive within 3 s (run id \"job-b\")");
        for (std::size_t k = 1; k < 3; ++k) CHECK(ranks[k].what() == ranks[0].what());
    }
    CHECK(node.compiles() == 0);
    Node::check_nothing_left();
}

TEST_CASE("a follower killed during the leader's compile: the others end with peer_failed naming it") {
    Node node;
    const fs::path ops = node.ops("a", {"Add_float_ND_32_64_9.json", "Gelu_float_ND_32_256_8.json"});
    std::vector<Rank> ranks;
    ranks.push_back(node.start(0, 4, "job-c", ops, {{"SKC_TEST_COMPILE_SLEEP", "2"}}));
    for (std::size_t k = 1; k < 4; ++k) ranks.push_back(node.start(k, 4, "job-c", ops));
    (void)node.await_compile(1);
    const auto killed = Node::kill_rank(ranks[2]);
    std::vector<Rank*> rest{&ranks[0], &ranks[1], &ranks[3]};
    Node::wait_all(rest, Clock::now() + 15s);
    const std::string m = "local rank 2 (pid " + std::to_string(ranks[2].pid) + ") died before the second barrier";
    for (Rank* r : rest) {
        // The compile (2 s) goes on after the kill; then the leader installs and publishes the outcome
        // (the first barrier), and the second barrier finds the dead rank at once, on every rank.
        check_failed(*r, 4, "peer_failed", killed, 2s + node.limit());
        CHECK(r->message() == m);
        CHECK(r->ended - ranks[0].ended <= 1s);
        CHECK(ranks[0].ended - r->ended <= 1s);
    }
    CHECK(node.compiles() == 1);
    Node::check_nothing_left();
}

TEST_CASE("the leader killed while compiling: the followers end with peer_failed naming it") {
    Node node;
    const fs::path ops = node.ops("a", {"Add_float_ND_32_64_9.json"});
    std::vector<Rank> ranks;
    ranks.push_back(node.start(0, 3, "job-d", ops, {{"SKC_TEST_COMPILE_SLEEP", "2"}}));
    for (std::size_t k = 1; k < 3; ++k) ranks.push_back(node.start(k, 3, "job-d", ops));
    const pid_t compiler = node.await_compile(1);
    const auto killed = Node::kill_rank(ranks[0]);
    std::vector<Rank*> followers{&ranks[1], &ranks[2]};
    Node::wait_all(followers, Clock::now() + 15s);
    for (Rank* r : followers) {
        check_failed(*r, 4, "peer_failed", killed, node.limit());
        CHECK(r->message() ==
              "local rank 0 (the leader, pid " + std::to_string(ranks[0].pid) + ") died before publishing the outcome");
    }

    // The compiler runs in a process group of its own; the invoker's guard process (a fork of the
    // leader that outlives it) ends that group when the leader dies, within 2 s of its SIGTERM.
    for (const auto deadline = Clock::now() + 3s; running(compiler) && Clock::now() < deadline;)
        std::this_thread::sleep_for(20ms);
    CHECK_MESSAGE(!running(compiler),
                  "the compiler (pid " << compiler << ") outlived its SIGKILLed leader (pid " << ranks[0].pid << ")");
    kill_group(compiler);
    Node::check_nothing_left();
}

// Which rank sees the odd claim first is a race: the first to see it leaves a note, so that the
// others name LOCAL_WORLD_SIZE too, rather than wait for a rank that will not come.
TEST_CASE("ranks that disagree on LOCAL_WORLD_SIZE: every rank's error names it and both values") {
    Node node;
    const fs::path ops = node.ops("a", {"Add_float_ND_32_64_9.json"});
    std::vector<Rank> ranks;
    ranks.push_back(node.start(3, 8, "job-e", ops));  // first, so that it sees the others arrive
    for (std::size_t k = 0; k < 3; ++k) ranks.push_back(node.start(k, 4, "job-e", ops));
    Node::wait_all(ranks, Clock::now() + 10s);
    // Every rank names the variable and both values: in its own words when it saw the odd claim
    // ("local rank 1 has 4, local rank 3 (pid N) has 8"), or in the words of the rank that saw it.
    // Which rank sees it first is a race; the outcome must not depend on it.
    const std::string odd_pid = std::to_string(ranks[0].pid);
    for (const Rank& r : ranks) {
        check_failed(r, 2, "invalid_option", r.started, node.limit());
        CHECK(r.what().find("LOCAL_WORLD_SIZE differs between ranks: local rank ") != std::string::npos);
        CHECK(r.what().find(" has 4") != std::string::npos);
        CHECK(r.what().find(" has 8") != std::string::npos);
    }
    // The odd rank says it in its own words, or (when another rank saw the odd claim first and left
    // a note) in that rank's words.
    const std::string odd = ranks[0].message();
    const bool own_words =
        odd.rfind("LOCAL_WORLD_SIZE differs between ranks: local rank 3 has 8, local rank ", 0) == 0 &&
        odd.ends_with(") has 4");
    const bool relayed = odd.rfind("LOCAL_WORLD_SIZE differs between ranks: local rank ", 0) == 0 &&
                         odd.ends_with(" has 4, local rank 3 (pid " + odd_pid + ") has 8");
    CHECK_MESSAGE((own_words || relayed), odd);
    for (std::size_t i = 1; i < 4; ++i) {
        const std::string own = "LOCAL_WORLD_SIZE differs between ranks: local rank " + std::to_string(ranks[i].rank) +
                                " has 4, local rank 3 (pid " + odd_pid + ") has 8";
        if (ranks[i].message() == own) CHECK(ranks[i].error_field("option") == "LOCAL_WORLD_SIZE");
    }
    CHECK(node.compiles() == 0);
    Node::check_nothing_left();
}

// The same, made deterministic: the odd rank meets two followers, fails and leaves before the leader
// starts. Its claim is then free; only its note tells the leader why local rank 3 of 4 never comes.
TEST_CASE("an odd LOCAL_WORLD_SIZE rank that has already failed and left: the others still name LOCAL_WORLD_SIZE") {
    Node node;
    node.timeout_s = 5;  // the followers must still be waiting for the leader when the odd rank arrives
    const fs::path ops = node.ops("a", {"Add_float_ND_32_64_9.json"});
    std::vector<Rank> ranks;
    for (std::size_t k = 1; k < 3; ++k) ranks.push_back(node.start(k, 4, "job-e2", ops));
    REQUIRE(node.await_file("job-e2", "r1-of-4."));
    REQUIRE(node.await_file("job-e2", "r2-of-4."));
    Rank odd = node.start(3, 8, "job-e2", ops);
    Node::wait_all({&odd}, Clock::now() + 10s);
    check_failed(odd, 2, "invalid_option", odd.started, node.limit());
    // Its own finding, or the note of a follower that noticed first (followers wake on its claim).
    CAPTURE(odd.message());
    CHECK(odd.message().rfind("LOCAL_WORLD_SIZE differs between ranks: local rank ", 0) == 0);
    CHECK(odd.message().find("local rank 3") != std::string::npos);
    CHECK(odd.message().find("has 8") != std::string::npos);
    ranks.push_back(node.start(0, 4, "job-e2", ops));
    Node::wait_all(ranks, Clock::now() + 10s);
    for (const Rank& r : ranks) {
        check_failed(r, 2, "invalid_option", r.started, node.limit());
        CHECK(r.what().find("LOCAL_WORLD_SIZE") != std::string::npos);
        CHECK(r.what().find(" has 8") != std::string::npos);
    }
    CHECK(node.compiles() == 0);
    Node::check_nothing_left();
}

TEST_CASE("a rank without LOCAL_WORLD_SIZE or without a run id stops with the exact message and writes nothing") {
    Node node;
    const fs::path ops = node.ops("a", {"Add_float_ND_32_64_9.json"});
    struct Case {
        Vars env;
        std::string option, message;
    };
    const std::vector<Case> cases{
        {{{"LOCAL_WORLD_SIZE", ""}, {"LOCAL_RANK", "1"}},
         "LOCAL_WORLD_SIZE",
         "LOCAL_WORLD_SIZE is not set, but LOCAL_RANK is (1): a multi-rank job needs both"},
        {{{"LOCAL_WORLD_SIZE", ""}, {"LOCAL_RANK", ""}},
         "LOCAL_WORLD_SIZE",
         "LOCAL_WORLD_SIZE and LOCAL_RANK are not set"},
        {{{"SKC_RUN_ID", ""}},
         "SKC_RUN_ID",
         "local rank 1: no run id: set SKC_RUN_ID (or TORCHELASTIC_RUN_ID, as torchrun does) to the same value on "
         "every "
         "rank of the job"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.message);
        Rank r = node.start(1, 2, "job-f", ops, c.env);
        Node::wait_all({&r}, Clock::now() + 10s);
        INFO(r.log());
        CHECK(r.status == 2);
        CHECK(r.code() == "invalid_option");
        CHECK(r.message() == c.message);
        CHECK(r.error_field("option") == c.option);
        CHECK(slurp(r.io / "stderr") == "gather_worker " + std::to_string(r.pid) + ": invalid_option: option '" +
                                            c.option + "': " + c.message + "\n");
        CHECK(fs::is_empty(node.base));
        CHECK_FALSE(fs::exists(node.lib));
    }
    Node::check_nothing_left();
}

TEST_CASE("a rendezvous left by a crashed job with the same run id does not confuse the next job") {
    Node node;
    const fs::path ops = node.ops("a", {"Add_float_ND_32_64_9.json", "Mul_float_ND_2_16_16_10.json"});
    std::vector<Rank> crashed;
    {
        crashed.push_back(node.start(0, 2, "job-g", ops, {{"SKC_TEST_COMPILE_SLEEP", "2"}}));
        crashed.push_back(node.start(1, 2, "job-g", ops));
        const pid_t compiler = node.await_compile(1);  // both ranks claimed and published
        Node::kill_rank(crashed[1]);
        Node::kill_rank(crashed[0]);
        kill_group(compiler);  // orphaned by the leader (see the leader-killed test)
    }
    // What the crash left: both claims (their locks free), each with its pid and op list.
    std::size_t claims = 0;
    for (const auto& e : fs::recursive_directory_iterator(node.rendezvous("job-g"))) {
        const std::string n = e.path().filename().string();
        if (!n.ends_with(".lock")) continue;
        ++claims;
        const std::string text = slurp(e.path());
        const std::string pid = std::to_string(crashed[n.starts_with("r0-") ? 0 : 1].pid);
        CHECK(text.rfind(pid + "\nskc-gather/1\n2\n", 0) == 0);
        CHECK(std::count(text.begin(), text.end(), '\n') == 4 + 2);  // pid, format, size, folder; two ops
    }
    CHECK(claims == 2);

    std::vector<Rank> ranks;
    for (std::size_t k = 0; k < 2; ++k) ranks.push_back(node.start(k, 2, "job-g", ops));
    Node::wait_all(ranks, Clock::now() + 20s);
    for (const Rank& r : ranks) {
        INFO(r.log());
        CHECK(r.status == 0);
        CHECK(r.text("outcome") == "compiled");  // the crashed job stored nothing
        CHECK(r.count("gathered") == 2);
        CHECK(r.text("key") == ranks[0].text("key"));
    }
    CHECK(node.compiles() == 2);
    CHECK_FALSE(fs::exists(node.rendezvous("job-g")));  // the stale round went with the new one
    Node::check_nothing_left();
}

TEST_CASE("the leader's compile fails: the leader ends with compile_failed, every follower with peer_failed") {
    Node node;
    const fs::path ops = node.ops("a", {"Add_float_ND_32_64_9.json"});
    std::vector<Rank> ranks;
    for (std::size_t k = 0; k < 3; ++k)
        ranks.push_back(node.start(k, 3, "job-h", ops, {{"SKC_TEST_COMPILE_FAIL", "1"}}));
    Node::wait_all(ranks, Clock::now() + 15s);
    check_failed(ranks[0], 5, "compile_failed", ranks[0].started, node.limit());
    CHECK(ranks[0].message().rfind("the compiler exited with status 1. Last lines of its log:\n", 0) == 0);
    CHECK(ranks[0].message().find("error: no kernel for you") != std::string::npos);
    for (std::size_t k = 1; k < 3; ++k) {
        check_failed(ranks[k], 4, "peer_failed", ranks[k].started, node.limit());
        CHECK(ranks[k].message() == "local rank 0 (the leader) failed (compile_failed): " + ranks[0].what());
    }
    CHECK(node.compiles() == 1);
    // After a failure the round's folder stays, with the leader's outcome for a rank that comes late.
    bool outcome_kept = false;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(node.rendezvous("job-h"), ec))
        outcome_kept |= e.path().filename().string().starts_with("outcome.");
    CHECK(outcome_kept);
    Node::check_nothing_left();
}

TEST_CASE(
    "on a miss, a follower whose op info files never come: the leader times out naming it, or names it as "
    "ended when it dies") {
    for (const bool kill : {false, true}) {
        CAPTURE(kill);
        Node node;
        const fs::path mine = node.ops("a", {"Add_float_ND_32_64_9.json"});
        const fs::path theirs = node.ops("b", {"Add_float_ND_32_64_9.json", "Gelu_float_ND_32_256_8.json"});
        const std::string job = kill ? "job-k" : "job-j";
        // The follower first, alone, so that its hook finds its own run folder (gather_worker.cpp).
        std::vector<Rank> ranks;
        ranks.push_back(node.start(1, 2, job, theirs, {{"SKC_TEST_BLOCK_FILES", "1"}}));
        REQUIRE(node.await_file(job, "r1-of-2."));
        ranks.insert(ranks.begin(), node.start(0, 2, job, mine));
        Rank& leader = ranks[0];
        Rank& follower = ranks[1];
        if (!kill) {
            Node::wait_all(ranks, Clock::now() + 15s);
            check_failed(leader, 3, "timeout", leader.started, 2 * node.limit());
            CHECK(leader.message() == "local rank 1 did not write its op info file within 3 s");
            check_failed(follower, 4, "peer_failed", follower.started, 2 * node.limit());
            CHECK(follower.message() == "local rank 0 (the leader) failed (timeout): " + leader.what());
        } else {
            // The leader has asked for the files and waits for them: then the follower dies.
            REQUIRE(node.await_file(job, "files-needed"));
            const auto killed = Node::kill_rank(follower);
            Node::wait_all({&leader}, Clock::now() + 15s);
            check_failed(leader, 4, "peer_failed", killed, node.limit());
            CHECK(leader.message() ==
                  "local rank 1 (pid " + std::to_string(follower.pid) + ") ended before writing its op info file");
        }
        CHECK(node.compiles() == 0);  // the compiler never started without every file
        Node::check_nothing_left();
    }
}

}  // namespace skc_policy_gather_test
