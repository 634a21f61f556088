// skc/ext/mpi_round.hpp: one coordinate() round of MpiGather (ext/mpi.hpp describes it): the messages
// on the node communicator, the ops each follower sends and the leader's outcome, and the barriers.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/gather_round.hpp"
#include "../error.hpp"
#include "../op_info_io.hpp"
#include "../policy/gather.hpp"
#include "../value.hpp"
#include "mpi.hpp"

namespace skc {

// ---- messages ------------------------------------------------------------------------------------

inline void MpiGather::send(int local, int tag, std::string text) {
    if (text.size() > static_cast<std::size_t>(INT_MAX))
        throw Error(Errc::limit_exceeded,
                    "a gather message of " + std::to_string(text.size()) + " bytes is too large for one MPI message");
    Pending p;
    p.buffer = std::make_shared<std::string>(std::move(text));
    detail::check_mpi(
        MPI_Isend(p.buffer->data(), static_cast<int>(p.buffer->size()), MPI_CHAR, local, tag, node_comm_, &p.request),
        "MPI_Isend");
    pending_.push_back(std::move(p));
}

inline std::optional<std::string> MpiGather::try_receive(int local, int tag, clock::time_point deadline) {
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status status;
    detail::check_mpi(MPI_Improbe(local, tag, node_comm_, &flag, &msg, &status), "MPI_Improbe");
    if (!flag) return std::nullopt;
    int count = 0;
    detail::check_mpi(MPI_Get_count(&status, MPI_CHAR, &count), "MPI_Get_count");
    Pending p;
    p.buffer = std::make_shared<std::string>(static_cast<std::size_t>(std::max(count, 0)), '\0');
    detail::check_mpi(MPI_Imrecv(p.buffer->data(), count, MPI_CHAR, &msg, &p.request), "MPI_Imrecv");
    Backoff wait;
    for (;;) {
        int done = 0;
        detail::check_mpi(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) return std::move(*p.buffer);
        if (clock::now() >= deadline) {
            pending_.push_back(std::move(p));
            throw Error(Errc::timeout, "a message of " + std::to_string(count) + " bytes from " + local_name(local) +
                                           " did not finish arriving in time");
        }
        wait();
    }
}

// ---- the ops and the outcome ---------------------------------------------------------------------

inline void MpiGather::send_ops(const GatherRequest& req, int tag) {
    std::string text(k_ops_magic);
    try {
        if (req.await_files) req.await_files();
        for (const SelectedOp& e : req.selected) {
            const std::string content = read_file(req.compile_dir / e.name, ReadLimits{}.max_file_bytes);
            text += e.digest.hex();
            text += ' ' + std::to_string(e.name.size()) + ' ' + std::to_string(content.size()) + '\n';
            text += e.name;
            text += content;
        }
    } catch (const std::exception& e) {
        send(0, tag, std::string(k_ops_error_magic) + e.what());
        throw;
    }
    send(0, tag, std::move(text));
}

inline void MpiGather::add_ops(detail::OpUnion& u, int local, std::string_view text) const {
    auto bad = [&](const std::string& why) {
        return Error(Errc::corrupt, local_name(local) + " sent an unreadable op list: " + why);
    };
    if (!text.starts_with(k_ops_magic)) throw bad("unknown format");
    std::size_t pos = k_ops_magic.size();
    auto number = [&](char end) -> std::size_t {
        std::size_t v = 0, digits = 0;
        while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && digits < 12) {
            v = v * 10 + static_cast<std::size_t>(text[pos++] - '0');
            ++digits;
        }
        if (digits == 0 || pos >= text.size() || text[pos] != end) throw bad("bad op header");
        ++pos;
        return v;
    };
    while (pos < text.size()) {
        if (text.size() - pos < 33) throw bad("truncated op header");
        const std::optional<Digest> d = Digest::from_hex(text.substr(pos, 32));
        if (!d || text[pos + 32] != ' ') throw bad("bad digest");
        pos += 33;
        const std::size_t name_size = number(' ');
        const std::size_t text_size = number('\n');
        if (name_size > text.size() - pos || text_size > text.size() - pos - name_size) throw bad("truncated op");
        const std::string name(text.substr(pos, name_size));
        pos += name_size;
        const std::string_view content = text.substr(pos, text_size);
        pos += text_size;
        if (!detail::is_plain_file_name(name))
            throw bad("op file name " + detail::quote(name) + " is not a plain file name");
        if (content.empty()) throw bad("op " + detail::quote(name) + " has no content");
        u.add(*d, name, {}, content);
    }
}

inline std::map<int, std::string> MpiGather::await_ops(int tag) {
    const auto deadline = deadline_after(timeout_);
    std::map<int, std::string> got;
    Backoff wait;
    for (;;) {
        std::vector<int> missing;
        for (int k = 1; k < local_size_; ++k) {
            if (got.count(k)) continue;
            if (std::optional<std::string> m = try_receive(k, tag, deadline)) {
                if (m->starts_with(k_ops_error_magic))
                    throw Error(Errc::peer_failed, local_name(k) + " could not send its ops: " +
                                                       detail::utf8_or_replaced(m->substr(k_ops_error_magic.size())));
                got.emplace(k, std::move(*m));
            } else {
                missing.push_back(k);
            }
        }
        if (missing.empty()) return got;
        if (clock::now() >= deadline)
            throw Error(Errc::timeout, list_local(missing) + " of " + std::to_string(local_size_) + " on " + where() +
                                           (missing.size() == 1 ? " did not send its ops within "
                                                                : " did not send their ops within ") +
                                           detail::seconds_text(timeout_));
        reap();
        wait();
    }
}

inline Value MpiGather::lead_round(const GatherRequest& req, const LeadFn& lead, int base) {
    Value outcome;
    std::string text;
    bool own = false;
    auto fail = [&](Errc code, const std::string& what) {
        outcome = detail::error_outcome(code, detail::utf8_or_replaced(what), own);
        send_outcome(dump_json(outcome, -1), base + k_outcome);
    };
    try {
        const std::map<int, std::string> ops = await_ops(base + k_ops);
        detail::OpUnion u(req.run.gathered());
        for (const SelectedOp& e : req.selected) u.add(e.digest, e.name, (req.compile_dir / e.name).string());
        for (const auto& [k, m] : ops) add_ops(u, k, m);
        const GatheredSet set = u.take(static_cast<std::size_t>(local_size_));
        own = true;
        outcome = detail::ok_outcome(lead(set));
        text = dump_json(outcome, -1);
    } catch (const Error& e) {
        fail(e.code(), e.what());
        throw;
    } catch (const std::exception& e) {
        fail(Errc::io_error, e.what());
        throw;
    }
    send_outcome(std::move(text), base + k_outcome);
    return outcome;
}

inline Value MpiGather::await_outcome(std::chrono::nanoseconds lead_budget, int tag) {
    const std::chrono::nanoseconds limit = sum(timeout_, lead_budget);
    const auto deadline = deadline_after(limit);
    Backoff wait;
    for (;;) {
        if (std::optional<std::string> m = try_receive(0, tag, deadline)) {
            try {
                return parse_json(*m);
            } catch (const Error& e) {
                throw Error(Errc::corrupt, leader_name() + " sent an unreadable outcome: " + e.what());
            }
        }
        if (clock::now() >= deadline)
            throw Error(Errc::timeout, local_name(local_rank_) + " on " + where() + ": " + leader_name() +
                                           " sent no outcome within " + detail::seconds_text(limit));
        reap();
        wait();
    }
}

// ---- barriers ------------------------------------------------------------------------------------

inline void MpiGather::barrier(int status_tag, int verdict_tag, const char* which, const std::string* failed) {
    const std::string what = failed ? detail::utf8_or_replaced(*failed) : std::string();
    if (local_rank_ != 0) {
        send(0, status_tag, failed ? "fail\n" + what : std::string("ok\n"));
        if (failed) return;
        const std::chrono::nanoseconds limit = sum(timeout_, timeout_);
        const auto deadline = deadline_after(limit);
        Backoff wait;
        for (;;) {
            if (std::optional<std::string> m = try_receive(0, verdict_tag, deadline)) {
                Value verdict;
                try {
                    verdict = parse_json(*m);
                } catch (const Error& e) {
                    throw Error(Errc::corrupt, leader_name() + " sent an unreadable verdict: " + e.what());
                }
                detail::result_or_throw(verdict, leader_name());
                return;
            }
            if (clock::now() >= deadline)
                throw Error(Errc::timeout, local_name(local_rank_) + " on " + where() + ": no word from " +
                                               leader_name() + " at the " + which + " barrier within " +
                                               detail::seconds_text(limit));
            reap();
            wait();
        }
    }

    // The leader.
    auto verdict_to = [&](const std::vector<int>& to, const Value& v) {
        const std::string text = dump_json(v, -1);
        for (int k : to) send(k, verdict_tag, text);
    };
    std::vector<int> everyone;
    for (int k = 1; k < local_size_; ++k) everyone.push_back(k);
    if (failed) {
        verdict_to(everyone, detail::error_outcome(Errc::peer_failed, leader_name() + " failed: " + what, false));
        return;
    }
    const auto deadline = deadline_after(timeout_);
    std::vector<bool> arrived(static_cast<std::size_t>(local_size_), false);
    Backoff wait;
    for (;;) {
        std::vector<int> missing;
        for (int k = 1; k < local_size_; ++k) {
            if (arrived[static_cast<std::size_t>(k)]) continue;
            std::optional<std::string> m = try_receive(k, status_tag, deadline);
            if (!m) {
                missing.push_back(k);
                continue;
            }
            if (m->starts_with("fail\n")) {
                const std::string msg = local_name(k) + " failed: " + detail::utf8_or_replaced(m->substr(5));
                std::vector<int> others;
                for (int j : everyone)
                    if (j != k) others.push_back(j);
                verdict_to(others, detail::error_outcome(Errc::peer_failed, msg, false));
                throw Error(Errc::peer_failed, msg);
            }
            arrived[static_cast<std::size_t>(k)] = true;
        }
        if (missing.empty()) break;
        if (clock::now() >= deadline) {
            const std::string msg = list_local(missing) + " on " + where() + " did not reach the " + which +
                                    " barrier within " + detail::seconds_text(timeout_);
            verdict_to(everyone, detail::error_outcome(Errc::timeout, msg, false));
            throw Error(Errc::timeout, msg);
        }
        reap();
        wait();
    }
    verdict_to(everyone, Value(Object{{"ok", Value(true)}}));
}

}  // namespace skc
