// Test fixture: a real redis-server process on a free port of 127.0.0.1, with its own temporary
// folder (its log, no persistence), that a test can stop, kill, pause, restart and send commands to.
// Not part of skc; needs only hiredis, the standard library and POSIX.
#pragma once

#include <hiredis/hiredis.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SKC_REDIS_SERVER
#define SKC_REDIS_SERVER "redis-server"
#endif

namespace skc_test {

class RedisServer {
public:
    /// Starts redis-server with `extra_args` after the fixture's own (a `--requirepass P` among them
    /// makes command() and the start-up check authenticate with P).
    explicit RedisServer(std::vector<std::string> extra_args = {}) : extra_(std::move(extra_args)) {
        for (std::size_t i = 0; i + 1 < extra_.size(); ++i)
            if (extra_[i] == "--requirepass") password_ = extra_[i + 1];
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/skc-redis-XXXXXX";
        if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("RedisServer: mkdtemp failed");
        dir_ = tmpl;
        std::string last;
        for (int attempt = 0; attempt < 5; ++attempt) {
            port_ = free_port();
            try {
                start();
                return;
            } catch (const std::exception& e) {
                last = e.what();
            }
        }
        cleanup_dir();
        throw std::runtime_error("RedisServer: cannot start redis-server: " + last);
    }
    RedisServer(const RedisServer&) = delete;
    RedisServer& operator=(const RedisServer&) = delete;
    ~RedisServer() {
        if (pid_ > 0) {
            ::kill(pid_, SIGTERM);
            ::kill(pid_, SIGCONT);  // a paused server takes the SIGTERM only once resumed
            if (!wait_exit(std::chrono::seconds(2))) {
                ::kill(pid_, SIGKILL);
                reap();
            }
        }
        cleanup_dir();
    }

    [[nodiscard]] int port() const noexcept { return port_; }
    [[nodiscard]] std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
    [[nodiscard]] pid_t pid() const noexcept { return pid_; }
    [[nodiscard]] bool running() const noexcept { return pid_ > 0; }
    [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }
    /// What the server wrote (its log) so far.
    [[nodiscard]] std::string log() const {
        std::ifstream in(dir_ / "redis.log", std::ios::binary);
        return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    }

    /// Starts the server (again) on port(); throws when it does not answer PING within 5 s.
    void start() {
        if (pid_ > 0) throw std::runtime_error("RedisServer: already running");
        const std::string port = std::to_string(port_);
        std::vector<std::string> args = {
            SKC_REDIS_SERVER, "--port", port,    "--bind",      "127.0.0.1",        "--save", "",
            "--appendonly",   "no",     "--dir", dir_.string(), "--protected-mode", "no"};
        args.insert(args.end(), extra_.begin(), extra_.end());
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        const std::string log_path = (dir_ / "redis.log").string();
        const pid_t parent = ::getpid();
        const pid_t pid = ::fork();
        if (pid < 0) throw std::runtime_error("RedisServer: fork failed");
        if (pid == 0) {
            // Only async-signal-safe calls here. The server dies with the test.
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) ::_exit(127);
            const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (fd >= 0) {
                ::dup2(fd, 1);
                ::dup2(fd, 2);
            }
            const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (null_fd >= 0) ::dup2(null_fd, 0);
            ::execvp(argv[0], argv.data());
            ::_exit(127);
        }
        pid_ = pid;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (std::chrono::steady_clock::now() < deadline) {
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                throw std::runtime_error("RedisServer: redis-server on port " + port + " exited at start: " + log());
            }
            if (ping()) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        ::kill(pid_, SIGKILL);
        reap();
        throw std::runtime_error("RedisServer: redis-server on port " + port + " did not answer within 5 s: " + log());
    }

    /// SIGTERM, and waits for it to exit (SIGKILL after 5 s).
    void stop() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        ::kill(pid_, SIGCONT);
        if (!wait_exit(std::chrono::seconds(5))) {
            ::kill(pid_, SIGKILL);
            reap();
        }
    }
    /// SIGKILL, and waits for it to exit.
    void kill() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGCONT);
        ::kill(pid_, SIGKILL);
        reap();
    }
    /// SIGSTOP: the server keeps its port (the kernel still accepts connections) but answers nothing.
    void pause() {
        if (pid_ > 0) ::kill(pid_, SIGSTOP);
    }
    /// SIGCONT after pause().
    void resume() {
        if (pid_ > 0) ::kill(pid_, SIGCONT);
    }

    /// Runs one command on a fresh connection (AUTH first when the server has a password) and returns
    /// its reply as text: a string or status as it is, an integer in decimal, nil as "(nil)", an array
    /// as its elements joined by '\n'. Throws on an error reply or a connection failure.
    std::string command(const std::vector<std::string>& argv,
                        std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
        redisContext* c = connect(timeout);
        if (c == nullptr) throw std::runtime_error("RedisServer: cannot connect to port " + std::to_string(port_));
        try {
            if (!password_.empty()) (void)run(c, {"AUTH", password_});
            std::string out = run(c, argv);
            redisFree(c);
            return out;
        } catch (...) {
            redisFree(c);
            throw;
        }
    }

private:
    static int free_port() {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) throw std::runtime_error("RedisServer: socket failed");
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = 0;
        socklen_t len = sizeof a;
        if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
            ::close(fd);
            throw std::runtime_error("RedisServer: cannot find a free port");
        }
        ::close(fd);
        return ntohs(a.sin_port);
    }

    redisContext* connect(std::chrono::milliseconds timeout) const {
        timeval tv{};
        tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
        tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
        redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
        if (c == nullptr) return nullptr;
        if (c->err != 0 || redisSetTimeout(c, tv) != REDIS_OK) {
            redisFree(c);
            return nullptr;
        }
        return c;
    }

    static std::string text(const redisReply* r) {
        switch (r->type) {
        case REDIS_REPLY_STRING:
        case REDIS_REPLY_STATUS: return std::string(r->str, r->len);
        case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
        case REDIS_REPLY_NIL: return "(nil)";
        case REDIS_REPLY_ARRAY: {
            std::string out;
            for (std::size_t i = 0; i < r->elements; ++i) {
                if (i > 0) out += '\n';
                out += text(r->element[i]);
            }
            return out;
        }
        default: return "(reply type " + std::to_string(r->type) + ")";
        }
    }

    static std::string run(redisContext* c, const std::vector<std::string>& argv) {
        std::vector<const char*> args;
        std::vector<std::size_t> lens;
        for (const std::string& a : argv) {
            args.push_back(a.data());
            lens.push_back(a.size());
        }
        auto* r =
            static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data()));
        if (r == nullptr) throw std::runtime_error(std::string("RedisServer: command failed: ") + c->errstr);
        if (r->type == REDIS_REPLY_ERROR) {
            const std::string e(r->str, r->len);
            freeReplyObject(r);
            throw std::runtime_error("RedisServer: " + (argv.empty() ? std::string() : argv[0]) + ": " + e);
        }
        std::string out = text(r);
        freeReplyObject(r);
        return out;
    }

    // True when the server answers PING (with PONG, or with NOAUTH when it has a password).
    [[nodiscard]] bool ping() const {
        redisContext* c = connect(std::chrono::milliseconds(200));
        if (c == nullptr) return false;
        const char* argv[] = {"PING"};
        const std::size_t lens[] = {4};
        auto* r = static_cast<redisReply*>(redisCommandArgv(c, 1, argv, lens));
        bool ok = false;
        if (r != nullptr) {
            const std::string_view s(r->str ? r->str : "", r->str ? r->len : 0);
            ok = (r->type == REDIS_REPLY_STATUS && s == "PONG") ||
                 (r->type == REDIS_REPLY_ERROR && s.starts_with("NOAUTH"));
            freeReplyObject(r);
        }
        redisFree(c);
        return ok;
    }

    // Waits up to `limit` for the server to exit; true when it did (and was reaped).
    bool wait_exit(std::chrono::milliseconds limit) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        for (;;) {
            int status = 0;
            const pid_t r = ::waitpid(pid_, &status, WNOHANG);
            if (r == pid_ || (r < 0 && errno != EINTR)) {
                pid_ = -1;
                return true;
            }
            if (std::chrono::steady_clock::now() >= deadline) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    void reap() {
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
        pid_ = -1;
    }
    void cleanup_dir() {
        std::error_code ec;
        if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
    }

    std::vector<std::string> extra_;
    std::string password_;
    std::filesystem::path dir_;
    int port_ = 0;
    pid_t pid_ = -1;
};

}  // namespace skc_test
