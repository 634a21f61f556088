// Fuzzes the leader's reader of a rank's op list in the rendezvous of LocalFsGather
// (include/skc/policy/local_fs_gather.hpp): the claim `r<k>-of-<n>.<nonce>.lock` of docs/file-formats.md
// (the pid, `skc-gather/1`, the world size, the rank's op folder, then `<32 hex digits> <file name>`
// lines); the input is what follows the pid.
// The input is the op list of local rank 1; `@ops` in it stands for a folder holding three op
// files (a.json, b.json, MatMulV2_float_ND_1_2048_0.json). This process is local rank 0, the
// leader, of a world of two: it lays out rank 1's claim (its lock held on a descriptor of its own)
// and barrier mark in a fresh round folder, and runs LocalFsGather::coordinate.
// Properties:
//   - an op list that is not in the format is refused with skc::Error (corrupt), and one in the
//     format is refused only when one of its op files can neither be linked nor read (an
//     skc::Error of the file reader, or the timeout of the wait for a file that is not there);
//     every refusal is published to the followers as an outcome
//     file holding its code;
//   - an accepted list gathers each distinct digest once, in the order of the list, each under a
//     distinct plain name (its own, or its own with `_<n>` before `.json`), holding its file's
//     content; the leader's result is what every rank gets, and the round folder is removed.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <skc/error.hpp>
#include <skc/layout.hpp>
#include <skc/op_info_io.hpp>
#include <skc/op_set.hpp>
#include <skc/policy/local_fs_gather.hpp>
#include <skc/value.hpp>

#include "fuzz_support.hpp"

namespace {

namespace fs = std::filesystem;

constexpr std::string_view rank1_nonce = "0123456789abcdef01234567";

/// The op list as the format describes it.
struct Reference {
    bool format_ok = true;
    std::vector<std::pair<skc::Digest, std::string>> firsts;  // each digest's first line, up to a fault
    bool source_unreadable = false;                           // one of them names a file the file reader refuses
};

bool readable(const fs::path& p) {
    try {
        (void)skc::read_file(p, skc::ReadLimits{}.max_file_bytes);
        return true;
    } catch (const skc::Error&) {
        return false;
    }
}

Reference reference(std::string_view text) {
    Reference r;
    std::vector<std::string_view> lines = skc::detail::split(text, '\n');
    if (!text.empty() && !text.ends_with('\n')) {
        r.format_ok = false;  // no final newline: every line before the last can still be read
    }
    lines.pop_back();  // after the last '\n' (empty), or the unterminated line
    if (lines.size() < 3 || lines[0] != "skc-gather/1") {
        r.format_ok = false;
        return r;
    }
    const fs::path dir{std::string(lines[2])};
    std::set<skc::Digest> seen;
    for (std::size_t i = 3; i < lines.size(); ++i) {
        const std::string_view l = lines[i];
        const std::optional<skc::Digest> d = skc::Digest::from_hex(l.substr(0, 32));
        const std::string name(l.size() > 33 ? l.substr(33) : std::string_view());
        if (!d || l.size() < 34 || l[32] != ' ' || name.size() > 255 || name == "." || name == ".." ||
            name.find_first_of(std::string_view("/\0", 2)) != std::string::npos) {
            r.format_ok = false;
            return r;
        }
        if (!seen.insert(*d).second) continue;
        r.firsts.emplace_back(*d, name);
        if (!readable(dir / name)) r.source_unreadable = true;
    }
    return r;
}

std::string stem_of(const std::string& name) {
    return name.size() > 5 && name.ends_with(".json") ? name.substr(0, name.size() - 5) : name;
}

struct Scene {
    fs::path base, ops, run_dir;
    Scene() : base(fuzz::scratch() / "base"), ops(fuzz::scratch() / "ops"), run_dir(fuzz::scratch() / "run") {
        fuzz::fresh_dir(ops);
        fuzz::fresh_dir(run_dir);
        fuzz::write_file(ops / "a.json", "{\"a\": 1}\n");
        fuzz::write_file(ops / "b.json", "{\"b\": 2}\n");
        fuzz::write_file(ops / "MatMulV2_float_ND_1_2048_0.json",
                         "{\"op_type\": \"MatMulV2\", \"inputs\": [], \"outputs\": []}\n");
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const Scene scene;
    const std::string text = fuzz::replace_all(fuzz::as_text(data, size), "@ops", scene.ops.string());

    const skc::Layout layout(scene.base);
    const skc::RunLayout run(scene.run_dir, static_cast<long>(::getpid()));
    std::error_code ec;
    fs::remove_all(run.gathered(), ec);
    // A short timeout: on a refusal the leader waits that long for rank 1 (whose claim stays held)
    // to leave; on success nothing waits.
    skc::LocalFsGather gather(skc::LocalRanks{0, 2, "fuzz"}, std::chrono::milliseconds(1));
    const fs::path round = gather.next_round_dir(layout);
    fuzz::fresh_dir(round);

    // Rank 1: its claim (its pid and op list, locked), its barrier mark.
    const std::string nonce(rank1_nonce);
    const fs::path claim = round / ("r1-of-2." + nonce + ".lock");
    fuzz::write_file(claim, std::to_string(::getpid()) + "\n" + text);
    int claim_fd = ::open(claim.c_str(), O_RDWR | O_CLOEXEC);
    FUZZ_CHECK(claim_fd >= 0);
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    FUZZ_CHECK(::fcntl(claim_fd, F_OFD_SETLK, &fl) == 0);
    fuzz::write_file(round / "passed", nonce + "\n");

    const Reference ref = reference(text);
    const std::vector<skc::SelectedOp> none;
    const skc::GatherRequest req{layout, run, none, {}, std::chrono::seconds(1), {}, {}, {}};
    std::optional<skc::GatheredSet> gathered;
    std::optional<skc::Value> shared;
    const auto lead = [&](const skc::GatheredSet& set) {
        if (set.materialize) set.materialize();  // as on a miss: the folder is written
        gathered = set;
        return skc::Value(skc::Object{{"ops", skc::Value(static_cast<std::int64_t>(set.digests.size()))}});
    };
    const auto share = [&](const skc::Value& v) {
        shared = v;
        ::close(std::exchange(claim_fd, -1));  // rank 1 leaves after the outcome
    };
    try {
        const skc::Value result = gather.coordinate(req, lead, share);
        // (An op file the file reader refuses may still be gathered: a hard link to it works.)
        FUZZ_CHECK(ref.format_ok);
        FUZZ_CHECK(gathered && shared && *shared == result);
        FUZZ_CHECK(result ==
                   skc::Value(skc::Object{{"ops", skc::Value(static_cast<std::int64_t>(ref.firsts.size()))}}));
        const skc::GatheredSet& set = *gathered;
        FUZZ_CHECK(set.ranks == 2);
        FUZZ_CHECK(set.digests.size() == ref.firsts.size() && set.names.size() == ref.firsts.size());
        FUZZ_CHECK(set.dir == (ref.firsts.empty() ? fs::path() : run.gathered()));
        std::set<std::string> names;
        for (std::size_t i = 0; i < set.digests.size(); ++i) {
            const auto& [digest, own] = ref.firsts[i];
            const std::string& name = set.names[i];
            FUZZ_CHECK(set.digests[i] == digest);
            FUZZ_CHECK(names.insert(name).second);
            FUZZ_CHECK(name == own || (name.starts_with(stem_of(own) + "_") && name.ends_with(".json")));
            FUZZ_CHECK(name.find('/') == std::string::npos);
            // Its content is the rank's file (a symbolic link is linked as it is, not read).
            const fs::path source = fs::path(std::string(skc::detail::split(text, '\n')[2])) / own;
            if (readable(source))
                FUZZ_CHECK(skc::read_file(set.dir / name, 1u << 30) == skc::read_file(source, 1u << 30));
        }
        FUZZ_CHECK(!fs::exists(round));
    } catch (const skc::Error& e) {
        if (e.code() == skc::Errc::corrupt) FUZZ_CHECK(!ref.format_ok);
        else FUZZ_CHECK(ref.source_unreadable);
        FUZZ_CHECK(!gathered && !shared);
        // The followers learn the error from the outcome file.
        bool found = false;
        for (const auto& entry : fs::directory_iterator(round)) {
            const std::string n = entry.path().filename().string();
            if (!n.starts_with("outcome.") || !n.ends_with(".json")) continue;
            found = true;
            const skc::Value doc = skc::parse_json(skc::read_file(entry.path(), 1u << 20));
            const skc::Value* outcome = doc.find("outcome");
            FUZZ_CHECK(outcome && outcome->find("ok") && *outcome->find("ok") == skc::Value(false));
            FUZZ_CHECK(outcome->find("code") && *outcome->find("code") == skc::Value(skc::to_string(e.code())));
            const skc::Value* members = doc.find("members");
            FUZZ_CHECK(members && members->find("1") && *members->find("1") == skc::Value(nonce));
        }
        FUZZ_CHECK(found);  // every error reaches the followers, whatever bytes it quotes
    }
    if (claim_fd >= 0) ::close(claim_fd);
    return 0;
}
