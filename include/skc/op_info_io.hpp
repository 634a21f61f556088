// skc/op_info_io.hpp: reading and writing op info files, and their names.
//
// The only header that includes nlohmann/json. Parsing goes through its SAX interface straight
// into skc::Value, with limits checked as the text streams by (nesting depth) or before it is read
// (file size), so hostile files are rejected early with an error that names the file and the
// fault. Files are written to a temporary name and then linked to their final name, so a reader
// never sees a half-written op info file; they are created with O_EXCL | O_NOFOLLOW and link()
// never replaces a file, so nothing existing is overwritten and no symlink is followed.
//
// File names follow docs/spec.md section 5: `<op_type>_<dtype>_<format>_<d0>_..._<counter>.json`, from the
// first input (its first element when it is a list); a rank-0 tensor adds no dims; a record with no
// present input is named `<op_type>_<counter>.json`. The counter is process-wide and never repeats.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "detail/atomic_file.hpp"
#include "detail/names.hpp"
#include "detail/posix.hpp"
#include "detail/text.hpp"
#include "detail/unique_fd.hpp"
#include "error.hpp"
#include "op_record.hpp"
#include "value.hpp"

namespace skc {

/// Limits applied while reading untrusted JSON.
struct ReadLimits {
    std::size_t max_file_bytes = 64u << 20;  // 64 MiB
    std::size_t max_depth = 512;             // nesting of arrays and objects
};

namespace detail {

/// Refuses a path with a NUL byte: the system call would silently use only the part before it.
inline void reject_nul(const std::filesystem::path& p) {
    const std::string& s = p.native();
    if (const auto nul = s.find('\0'); nul != std::string::npos)
        throw Error(Errc::unsafe_path, "the path contains a NUL byte", ErrorContext{s.substr(0, nul), {}, {}});
}

/// nlohmann's parse error text, made safe for a one-line message: the quoted "last read" token is
/// cut to a few dozen bytes (an unterminated string would otherwise be quoted whole), bytes outside
/// printable ASCII are shown as \xNN, and the whole is capped at 400 bytes.
inline std::string tidy_parse_message(std::string msg) {
    // nlohmann prefixes "[json.exception.parse_error.101] parse error at line 1, column 1: ".
    if (auto pos = msg.find("] "); pos != std::string::npos) msg.erase(0, pos + 2);
    static constexpr std::string_view last_read = "last read: '";
    if (auto pos = msg.find(last_read); pos != std::string::npos) {
        const std::size_t token = pos + last_read.size();
        if (msg.size() - token > 48) msg = msg.substr(0, token + 40) + "...'";
    }
    std::string out;
    for (char c : msg) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u >= 0x7f) append_hex_escape(out, c);
        else out += c;
        if (out.size() >= 400) {
            out += "...";
            break;
        }
    }
    return out;
}

/// nlohmann SAX handler that builds a skc::Value, enforcing the depth limit, rejecting duplicate
/// keys (the identity of an object with two values for one key would be ambiguous) and integers
/// outside the 64-bit range (they would be rounded to a double, and two different ops could get
/// one identity). Errors carry the JSON path of the fault.
class ValueBuilder final : public nlohmann::json_sax<nlohmann::json> {
public:
    explicit ValueBuilder(std::size_t max_depth) : max_depth_(max_depth) {}

    bool null() override { return add(Value(nullptr)); }
    bool boolean(bool b) override { return add(Value(b)); }
    bool number_integer(number_integer_t v) override { return add(Value(static_cast<std::int64_t>(v))); }
    bool number_unsigned(number_unsigned_t v) override { return add(Value(static_cast<std::uint64_t>(v))); }
    bool number_float(number_float_t v, const string_t& raw) override {
        if (raw.find_first_of(".eE") == string_t::npos)
            return fail_with(Errc::limit_exceeded,
                             "integer " + raw.substr(0, 40) + (raw.size() > 40 ? "..." : "") +
                                 " is outside the 64-bit range; skc keeps integers exact",
                             pending_path());
        return add(Value(static_cast<double>(v)));
    }
    bool string(string_t& s) override { return add(Value(std::move(s))); }
    bool binary(binary_t&) override {
        return fail_with(Errc::invalid_json, "binary values are not JSON", pending_path());
    }
    bool start_object(std::size_t) override { return open(Value(Object{})); }
    bool key(string_t& k) override {
        stack_.back().key = std::move(k);
        return true;
    }
    bool end_object() override {
        Object& o = stack_.back().value.as_object();
        if (o.size() > 1) {
            std::vector<std::string_view> keys;
            keys.reserve(o.size());
            for (const Member& m : o) keys.emplace_back(m.key);
            std::sort(keys.begin(), keys.end());
            if (auto it = std::adjacent_find(keys.begin(), keys.end()); it != keys.end())
                return fail_with(Errc::invalid_json, "duplicate key " + quote(*it) + " in one object", frame_path());
        }
        return close();
    }
    bool start_array(std::size_t) override { return open(Value(Array{})); }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
        return fail_with(Errc::invalid_json, "not valid JSON: " + tidy_parse_message(ex.what()), {});
    }

    Value take_root() { return std::move(root_); }
    bool failed() const { return failed_; }
    Error error() const { return Error(code_, message_, ErrorContext{{}, path_, {}}); }

private:
    struct Frame {
        Value value;
        std::string key;      // the key of the member being read (objects)
        std::string segment;  // where this container sits in its parent: ".key" or "[i]"
    };

    /// The position the next value goes to, as a path segment of the top frame.
    std::string next_segment() const {
        if (stack_.empty()) return {};
        const Frame& top = stack_.back();
        if (top.value.is_object()) return "." + top.key;
        return "[" + std::to_string(top.value.as_array().size()) + "]";
    }
    static std::string strip_dot(std::string p) {
        if (!p.empty() && p.front() == '.') p.erase(0, 1);
        return p;
    }
    std::string frame_path() const {
        std::string p;
        for (const Frame& f : stack_) p += f.segment;
        return strip_dot(std::move(p));
    }
    std::string pending_path() const {
        std::string p;
        for (const Frame& f : stack_) p += f.segment;
        return strip_dot(p + next_segment());
    }

    bool add(Value v) {
        if (stack_.empty()) {
            root_ = std::move(v);
            return true;
        }
        Frame& top = stack_.back();
        if (top.value.is_object()) top.value.as_object().push_back(Member{std::move(top.key), std::move(v)});
        else top.value.as_array().push_back(std::move(v));
        return true;
    }
    bool open(Value container) {
        if (stack_.size() >= max_depth_)
            return fail_with(Errc::limit_exceeded,
                             "nesting deeper than " + std::to_string(max_depth_) + " levels of arrays and objects", {});
        std::string segment = next_segment();
        stack_.push_back(Frame{std::move(container), {}, std::move(segment)});
        return true;
    }
    bool close() {
        Value v = std::move(stack_.back().value);
        stack_.pop_back();
        return add(std::move(v));
    }
    bool fail_with(Errc code, std::string message, std::string path) {
        failed_ = true;
        code_ = code;
        message_ = std::move(message);
        path_ = std::move(path);
        return false;
    }

    std::size_t max_depth_;
    std::vector<Frame> stack_;
    Value root_;
    bool failed_ = false;
    Errc code_ = Errc::invalid_json;
    std::string message_;
    std::string path_;
};

inline nlohmann::ordered_json to_nlohmann(const Value& v) {
    switch (v.kind()) {
    case Kind::null: return nullptr;
    case Kind::boolean: return v.as_bool();
    case Kind::integer: return v.as_int();
    case Kind::unsigned_integer: return v.as_uint();
    case Kind::number: return v.as_double();
    case Kind::string: return v.as_string();
    case Kind::array: {
        nlohmann::ordered_json a = nlohmann::ordered_json::array();
        for (const Value& e : v.as_array()) a.push_back(to_nlohmann(e));
        return a;
    }
    case Kind::object: {
        nlohmann::ordered_json o = nlohmann::ordered_json::object();
        for (const Member& m : v.as_object()) o[m.key] = to_nlohmann(m.value);
        return o;
    }
    }
    return nullptr;
}

}  // namespace detail

/// Parses JSON text into a Value. Throws skc::Error: invalid_json (empty, not JSON, duplicate key)
/// or limit_exceeded (nesting deeper than limits.max_depth).
inline Value parse_json(std::string_view text, const ReadLimits& limits = {}) {
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
        throw Error(Errc::invalid_json, "empty input: expected a JSON object");
    // nlohmann stops at a NUL byte as if the input ended there; what follows must not be ignored.
    if (const auto nul = text.find('\0'); nul != std::string_view::npos)
        throw Error(Errc::invalid_json, "not valid JSON: NUL byte at byte offset " + std::to_string(nul));
    detail::ValueBuilder builder(limits.max_depth);
    const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
    if (!ok || builder.failed()) throw builder.error();
    return builder.take_root();
}

/// JSON text of a Value; indent < 0 gives one line.
/// Throws Error(invalid_argument) for a string that is not valid UTF-8 (JSON text must be).
inline std::string dump_json(const Value& v, int indent = 4) {
    try {
        return detail::to_nlohmann(v).dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
    } catch (const nlohmann::json::exception& e) {
        throw Error(Errc::invalid_argument, std::string("cannot write JSON: ") + detail::tidy_parse_message(e.what()));
    }
}

/// The whole content of a regular file, refusing files above `max_bytes` before reading them and
/// refusing to follow a symlink in the last component.
inline std::string read_file(const std::filesystem::path& p, std::size_t max_bytes) {
    detail::reject_nul(p);
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused as not regular).
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        const int err = errno;
        struct stat lst {};
        if (err == ELOOP && ::lstat(p.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
            throw Error(Errc::unsafe_path, "is a symbolic link; op info files are not read through symbolic links",
                        ErrorContext{p.string(), {}, {}});
        detail::throw_errno("cannot open for reading", p, err);
    }
    const detail::UniqueFd owner(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) detail::throw_errno("cannot stat", p, errno);
    if (!S_ISREG(st.st_mode)) throw Error(Errc::io_error, "not a regular file", ErrorContext{p.string(), {}, {}});
    const auto size = static_cast<std::size_t>(st.st_size);
    if (size > max_bytes)
        throw Error(Errc::limit_exceeded,
                    "file is " + std::to_string(size) + " bytes; files above " + std::to_string(max_bytes) +
                        " bytes are rejected",
                    ErrorContext{p.string(), {}, {}});
    std::string data(size, '\0');
    std::size_t done = 0;
    while (done < size) {
        const ssize_t n = ::read(fd, data.data() + done, size - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            detail::throw_errno("cannot read", p, errno);
        }
        if (n == 0) break;  // the file shrank while we read it
        done += static_cast<std::size_t>(n);
    }
    data.resize(done);
    return data;
}

/// Reads one op info file. Every error names the file and, for content faults, the JSON path.
inline OpRecord read_op_info(const std::filesystem::path& p, const ReadLimits& limits = {}) {
    const std::string text = read_file(p, limits.max_file_bytes);
    try {
        return record_from_value(parse_json(text, limits));
    } catch (const Error& e) {
        throw e.in_file(p.string());
    }
}

/// Parses the text of one op info file (no file involved).
inline OpRecord parse_op_info(std::string_view text, const ReadLimits& limits = {}) {
    return record_from_value(parse_json(text, limits));
}

// ---- file names ------------------------------------------------------------------------------------

/// `<op_type>_<dtype>_<format>_<d0>_..._<dn>` (no counter, no extension). Validates the parts.
inline std::string op_info_stem(const OpRecord& r) {
    detail::validate_name(r.op_type, "op_type", "op type");
    std::string out = r.op_type;
    if (const auto [t, path] = r.naming_tensor_at(); t != nullptr) {
        detail::validate_name(t->dtype, detail::path_join(path, "dtype"), "dtype");
        detail::validate_name(t->format, detail::path_join(path, "format"), "format");
        out += '_';
        out += t->dtype;
        out += '_';
        out += t->format;
        for (std::int64_t d : t->shape) {
            out += '_';
            out += std::to_string(d);
        }
    }
    return out;
}

/// The next value of the process-wide file counter. Never repeats within a process.
inline std::uint64_t next_op_info_counter() noexcept {
    static std::atomic<std::uint64_t> counter{0};
    return counter.fetch_add(1, std::memory_order_relaxed);
}

/// The file name for `r` with the given counter: `<stem>_<counter>.json`.
inline std::string op_info_file_name(const OpRecord& r, std::uint64_t counter) {
    return op_info_stem(r) + "_" + std::to_string(counter) + ".json";
}

namespace detail {

/// Writes `content` to `dir/name` atomically: an AtomicFile (a temporary beside it, created with
/// O_EXCL | O_NOFOLLOW), fsync'd when asked, then linked to its final name (the link fails rather
/// than replace an existing file), then the temporary name is removed.
inline void write_new_file(const std::filesystem::path& dir, const std::string& name, std::string_view content,
                           bool sync) {
    if (!is_plain_file_name(name))
        throw Error(Errc::invalid_name, "file name " + quote(name) + " is not a plain file name",
                    ErrorContext{dir.string(), {}, {}});
    reject_nul(dir);
    AtomicFile f(dir / name);
    f.write(content);
    f.commit_new(sync ? Durability::file : Durability::none);
}

}  // namespace detail

struct WriteOptions {
    bool with_bin_fields = true;  // keep bin_type/bin_info (only for `<pid>` and `<pid>_debug`)
    bool sync = false;            // fsync each file before publishing it
};

/// Writes `r` into `dir` under a fresh name from the process-wide counter; returns the path.
/// Validates the record first: nothing is written for an invalid one.
inline std::filesystem::path write_op_info(const std::filesystem::path& dir, const OpRecord& r, WriteOptions opt = {}) {
    validate(r);
    const std::string name = op_info_file_name(r, next_op_info_counter());
    const std::string text = dump_json(to_value(r, ToValueOptions{opt.with_bin_fields})) + "\n";
    detail::write_new_file(dir, name, text, opt.sync);
    return dir / name;
}

/// Writes `r` into `dir` under the given plain file name (used to copy a file under its own name).
inline std::filesystem::path write_op_info_as(const std::filesystem::path& dir, const std::string& name,
                                              const OpRecord& r, WriteOptions opt = {}) {
    validate(r);
    const std::string text = dump_json(to_value(r, ToValueOptions{opt.with_bin_fields})) + "\n";
    detail::write_new_file(dir, name, text, opt.sync);
    return dir / name;
}

// ---- directories -----------------------------------------------------------------------------------

/// One op info file read from a directory.
struct LoadedOp {
    std::filesystem::path path;
    OpRecord record;
};

struct DirReadResult {
    std::vector<LoadedOp> ops;  // sorted by file name
    std::vector<Error> errors;  // files that could not be read (only when collecting errors)
};

enum class OnBadFile { fail, collect };

/// Reads every `*.json` file directly in `dir` (hidden and temporary files are skipped), sorted by
/// name. With OnBadFile::fail the first bad file throws; with collect, bad files are reported in
/// `errors` and the rest are still read.
inline DirReadResult read_op_info_dir(const std::filesystem::path& dir, OnBadFile on_bad = OnBadFile::fail,
                                      const ReadLimits& limits = {}) {
    std::error_code ec;
    std::filesystem::directory_iterator it(dir, ec);
    if (ec) throw Error(Errc::io_error, "cannot list directory: " + ec.message(), ErrorContext{dir.string(), {}, {}});
    std::vector<std::filesystem::path> files;
    for (const auto& entry : it) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || name.front() == '.' || entry.path().extension() != ".json") continue;
        std::error_code st_ec;
        if (std::filesystem::is_directory(entry.symlink_status(st_ec))) continue;  // a folder named *.json
        files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    DirReadResult out;
    out.ops.reserve(files.size());
    for (const auto& f : files) {
        try {
            out.ops.push_back(LoadedOp{f, read_op_info(f, limits)});
        } catch (const Error& e) {
            if (on_bad == OnBadFile::fail) throw;
            out.errors.push_back(e);
        }
    }
    return out;
}

}  // namespace skc
