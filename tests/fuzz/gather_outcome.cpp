// Fuzzes a follower's reader of the leader's outcome file in the rendezvous of LocalFsGather
// (include/skc/policy/local_fs_gather.hpp): `outcome.<nonce>.json` of docs/file-formats.md,
// `{"outcome": {"ok": true, "result": ...} or {"ok": false, "code", "message", "own", ...},
// "members": {"<rank>": "<nonce>", ...}}`. The input is that file. This process is local rank 1 of
// a world of two: it lays out the leader's claim (its lock held on a descriptor of its own), the
// outcome and the leader's barrier mark in a fresh round folder, and runs
// LocalFsGather::coordinate. Properties, against what the format says:
//   - text that is not JSON, or a member that is not a rank number with a nonce of 24 hexadecimal
//     digits, is refused with skc::Error (corrupt);
//   - a failed outcome raises the leader's error: with its code (timeout, invalid_option, else
//     peer_failed), message, file and option when the gather itself failed, as peer_failed naming
//     the leader when its own work did;
//   - a successful outcome gives every rank its result, once every member has passed the second
//     barrier; a member that has not (every one but the leader here) fails the follower with
//     peer_failed.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <skc/detail/text.hpp>
#include <skc/error.hpp>
#include <skc/layout.hpp>
#include <skc/op_info_io.hpp>
#include <skc/op_set.hpp>
#include <skc/policy/local_fs_gather.hpp>
#include <skc/value.hpp>

#include "fuzz_support.hpp"

namespace {

namespace fs = std::filesystem;

constexpr std::string_view leader_nonce = "feedfacefeedface00000000";

/// What the format says the follower does with `text`: the result, or the error it raises.
struct Expected {
    std::optional<skc::Value> result;
    skc::Errc code = skc::Errc::corrupt;
    std::optional<std::string> message, file, option;  // checked when set
};

std::string text_member(const skc::Value& o, std::string_view k) {
    const skc::Value* v = o.find(k);
    return v && v->is_string() ? v->as_string() : std::string();
}

Expected expected(std::string_view text) {
    Expected x;
    skc::Value doc;
    try {
        doc = skc::parse_json(text);
    } catch (const skc::Error&) {
        return x;  // corrupt
    }
    std::map<std::uint64_t, std::string> members;
    if (const skc::Value* m = doc.find("members"); m && m->is_object())
        for (const skc::Member& mem : m->as_object()) {
            std::uint64_t rank = 0;
            if (!skc::detail::parse_u64(mem.key, rank) || rank > 1000000) return x;  // corrupt
            const bool hex = mem.value.is_string() && mem.value.as_string().size() == 24 &&
                             mem.value.as_string().find_first_not_of("0123456789abcdef") == std::string::npos;
            if (!hex) return x;  // corrupt: a nonce is 24 hexadecimal digits
            members[rank] = mem.value.as_string();
        }
    const skc::Value* found = doc.find("outcome");
    const skc::Value outcome = found ? *found : skc::Value();
    const skc::Value* ok = outcome.find("ok");
    if (ok && ok->is_bool() && ok->as_bool()) {
        // Every member must have passed the second barrier: only the leader has (its nonce is in
        // `passed`). Any other member's claim is not there, so it is taken for a rank that died.
        for (const auto& [rank, nonce] : members)
            if (nonce != leader_nonce) {
                x.code = skc::Errc::peer_failed;
                return x;
            }
        const skc::Value* r = outcome.find("result");
        x.result = r ? *r : skc::Value();
        return x;
    }
    const std::string code = text_member(outcome, "code").empty() ? "unknown" : text_member(outcome, "code");
    const skc::Value* own = outcome.find("own");
    if (own && own->is_bool() && own->as_bool()) {
        x.code = skc::Errc::peer_failed;
        x.message = "local rank 0 (the leader) failed (" + code + "): " + text_member(outcome, "what");
        return x;
    }
    x.code = code == "timeout"          ? skc::Errc::timeout
             : code == "invalid_option" ? skc::Errc::invalid_option
                                        : skc::Errc::peer_failed;
    x.message = text_member(outcome, "message");
    x.file = text_member(outcome, "file");
    x.option = text_member(outcome, "option");
    return x;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = fuzz::as_text(data, size);
    static const fs::path base = fuzz::scratch() / "base";
    static const fs::path run_dir = fuzz::scratch() / "run";
    const skc::Layout layout(base);
    const skc::RunLayout run(run_dir, static_cast<long>(::getpid()));

    skc::LocalFsGather gather(skc::LocalRanks{1, 2, "fuzz"}, std::chrono::milliseconds(100));
    const fs::path round = gather.next_round_dir(layout);
    fuzz::fresh_dir(round);

    // The leader: its claim (locked), its outcome, its barrier mark.
    const std::string nonce(leader_nonce);
    const fs::path claim = round / ("r0-of-2." + nonce + ".lock");
    fuzz::write_file(claim, std::to_string(::getpid()) + "\nskc-gather/1\n2\n\n");
    const int claim_fd = ::open(claim.c_str(), O_RDWR | O_CLOEXEC);
    FUZZ_CHECK(claim_fd >= 0);
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    FUZZ_CHECK(::fcntl(claim_fd, F_OFD_SETLK, &fl) == 0);
    fuzz::write_file(round / ("outcome." + nonce + ".json"), text);
    fuzz::write_file(round / "passed", nonce + "\n");

    const Expected want = expected(text);
    const std::vector<skc::SelectedOp> none;
    const skc::GatherRequest req{layout, run, none, {}, std::chrono::seconds(1), {}, {}, {}};
    bool led = false;
    std::optional<skc::Value> shared;
    const auto lead = [&](const skc::GatheredSet&) {
        led = true;
        return skc::Value();
    };
    const auto share = [&](const skc::Value& v) { shared = v; };
    try {
        const skc::Value result = gather.coordinate(req, lead, share);
        FUZZ_CHECK(want.result && result == *want.result);
        FUZZ_CHECK(shared && *shared == result);
    } catch (const skc::Error& e) {
        FUZZ_CHECK(!want.result);
        FUZZ_CHECK(e.code() == want.code);
        if (want.message) FUZZ_CHECK(e.message() == *want.message);
        if (want.file) FUZZ_CHECK(e.file() == *want.file);
        if (want.option) FUZZ_CHECK(e.option() == *want.option);
        if (e.code() == skc::Errc::corrupt)
            FUZZ_CHECK(e.message().starts_with("the leader's outcome file is unreadable: "));
    }
    FUZZ_CHECK(!led);  // a follower never leads
    ::close(claim_fd);
    return 0;
}
