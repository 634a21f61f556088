// skc/error.hpp: the one exception type of skc.
//
// Every failure a user can cause or meet is an skc::Error. It carries a machine-readable code, a
// message that says what was wrong and what is accepted, and where it applies: a file, a JSON path
// inside that file (such as `inputs[1].shape[2]`) and/or an option name. what() joins them into one
// line a person can act on:  `<file>: <json path>: option '<name>': <message>`.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace skc {

enum class Errc {
    invalid_json,       // the text is not JSON at all (or empty)
    invalid_op_info,    // JSON, but not a valid op info object (wrong type, missing field, bad value)
    limit_exceeded,     // a size, depth, rank or count limit was hit
    invalid_option,     // unknown option, wrongly typed or out-of-range option value
    invalid_name,       // an op type, dtype or format that cannot be used in a file name
    unsafe_path,        // NUL byte, `..` component, symlinked component, relative where absolute needed
    permission_denied,  // the process lacks a needed permission on a path
    io_error,           // an operating-system call failed
    session_active,     // a recording session is already active in this process
    no_session,         // an operation needs an active recording session
    invalid_argument,   // a precondition of a call was violated by its arguments
    timeout,            // a bounded wait ended before what it waited for happened
    corrupt,            // stored data failed its integrity check
    compile_failed,     // the kernel compiler failed (exit status, no package)
    peer_failed,        // another rank of the job failed or died, so this one cannot go on
    remote_failed,      // the remote cache tier failed: unreachable, too slow, or an unexpected answer
    compiler_killed,    // the kernel compiler was killed by a signal: no op's fault, never remembered as one
};

/// A short, stable name for each code (`invalid_json`, ...), used in logs and machine output.
constexpr std::string_view to_string(Errc c) noexcept {
    switch (c) {
    case Errc::invalid_json: return "invalid_json";
    case Errc::invalid_op_info: return "invalid_op_info";
    case Errc::limit_exceeded: return "limit_exceeded";
    case Errc::invalid_option: return "invalid_option";
    case Errc::invalid_name: return "invalid_name";
    case Errc::unsafe_path: return "unsafe_path";
    case Errc::permission_denied: return "permission_denied";
    case Errc::io_error: return "io_error";
    case Errc::session_active: return "session_active";
    case Errc::no_session: return "no_session";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::timeout: return "timeout";
    case Errc::corrupt: return "corrupt";
    case Errc::compile_failed: return "compile_failed";
    case Errc::peer_failed: return "peer_failed";
    case Errc::remote_failed: return "remote_failed";
    case Errc::compiler_killed: return "compiler_killed";
    }
    return "unknown";
}

/// Where an error applies. Every part is optional; empty means "not applicable".
struct ErrorContext {
    std::string file;       // a file or directory path
    std::string json_path;  // e.g. `inputs[1].shape[2]`; empty for the document root
    std::string option;     // an option name, e.g. `static_kernel_compile`
};

class Error : public std::runtime_error {
public:
    Error(Errc code, std::string message, ErrorContext where = {})
        : std::runtime_error(compose(message, where)),
          code_(code),
          message_(std::move(message)),
          where_(std::move(where)) {}

    [[nodiscard]] Errc code() const noexcept { return code_; }
    /// The message alone, without the location prefix.
    [[nodiscard]] const std::string& message() const noexcept { return message_; }
    [[nodiscard]] const std::string& file() const noexcept { return where_.file; }
    [[nodiscard]] const std::string& json_path() const noexcept { return where_.json_path; }
    [[nodiscard]] const std::string& option() const noexcept { return where_.option; }
    [[nodiscard]] const ErrorContext& where() const noexcept { return where_; }

    /// The same error, located in `file` (used when a parser that knows only JSON paths is run
    /// on a file). Keeps a file already set.
    [[nodiscard]] Error in_file(std::string file) const {
        ErrorContext w = where_;
        if (w.file.empty()) w.file = std::move(file);
        return Error(code_, message_, std::move(w));
    }

private:
    static std::string compose(const std::string& message, const ErrorContext& w) {
        std::string out;
        if (!w.file.empty()) out += w.file + ": ";
        if (!w.json_path.empty()) out += w.json_path + ": ";
        if (!w.option.empty()) out += "option '" + w.option + "': ";
        out += message;
        return out;
    }

    Errc code_;
    std::string message_;
    ErrorContext where_;
};

}  // namespace skc
