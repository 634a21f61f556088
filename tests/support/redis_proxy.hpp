// Test fixture: a TCP proxy on 127.0.0.1 in front of a redis-server that stops a client at a chosen
// point of what it sends: once the bytes of one connection hold the given strings in that order (a
// key's name in a command, a record's text), what came before the last one's start is passed on and
// nothing from there on. The server then holds half a command, as when a client dies while sending
// it; stalled() says the point was reached, and the test kills the client there. Not part of skc;
// needs only the standard library and POSIX.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace skc_test {

class RedisProxy {
public:
    /// Forwards to the server on 127.0.0.1:`server_port`; each connection stops at `stop_at`.
    RedisProxy(int server_port, std::vector<std::string> stop_at)
        : server_port_(server_port), stop_at_(std::move(stop_at)) {
        if (stop_at_.empty()) throw std::invalid_argument("RedisProxy: no point to stop at");
        if (::pipe(wake_) != 0) throw std::runtime_error("RedisProxy: pipe failed");
        listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a = loopback(0);
        socklen_t len = sizeof a;
        if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::listen(listener_, 16) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
            close_all();
            throw std::runtime_error("RedisProxy: cannot listen on 127.0.0.1");
        }
        port_ = ntohs(a.sin_port);
        acceptor_ = std::thread([this] { accept_loop(); });
    }
    RedisProxy(const RedisProxy&) = delete;
    RedisProxy& operator=(const RedisProxy&) = delete;
    ~RedisProxy() {
        (void)!::write(wake_[1], "x", 1);  // every loop polls the pipe: it stays readable
        acceptor_.join();
        for (std::thread& t : relays_) t.join();
        close_all();
    }

    [[nodiscard]] int port() const noexcept { return port_; }
    [[nodiscard]] std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
    /// Whether a connection reached the point, waiting for it up to `limit`.
    [[nodiscard]] bool stalled(std::chrono::milliseconds limit) {
        std::unique_lock lock(mu_);
        return cv_.wait_for(lock, limit, [this] { return stalled_; });
    }

private:
    static sockaddr_in loopback(int port) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        return a;
    }
    static bool write_all(int fd, std::string_view bytes) {
        while (!bytes.empty()) {
            const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false;
            bytes.remove_prefix(static_cast<std::size_t>(n));
        }
        return true;
    }

    void accept_loop() {
        for (;;) {
            pollfd p[2] = {{listener_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
            if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
            if (p[1].revents != 0) return;
            if ((p[0].revents & POLLIN) == 0) continue;
            const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
            if (client < 0) continue;
            const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            const sockaddr_in a = loopback(server_port_);
            if (server < 0 || ::connect(server, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
                if (server >= 0) ::close(server);
                ::close(client);
                continue;
            }
            relays_.emplace_back([this, client, server] { relay(client, server); });
        }
    }

    /// One connection: the client's bytes to the server until the point, the server's to the
    /// client always; ends (closing both) when either side closes or the proxy ends.
    void relay(int client, int server) {
        std::string sent;                      // every byte the client sent
        std::size_t forwarded = 0;             // of which passed on
        std::size_t next = 0;                  // the string of stop_at_ looked for
        std::size_t from = 0;                  // where it is looked for
        std::size_t stop = std::string::npos;  // where the connection stops
        char buf[65536];
        for (bool open = true; open;) {
            pollfd p[3] = {{client, POLLIN, 0}, {server, POLLIN, 0}, {wake_[0], POLLIN, 0}};
            if (::poll(p, 3, -1) < 0 && errno != EINTR) break;
            if (p[2].revents != 0) break;
            if (p[0].revents != 0) {
                const ssize_t n = ::recv(client, buf, sizeof buf, 0);
                // The client gone, its connection to the server goes too; once stopped, nothing
                // more is passed on.
                if (n <= 0) break;
                if (stop != std::string::npos) continue;
                sent.append(buf, static_cast<std::size_t>(n));
                while (next < stop_at_.size()) {
                    const std::size_t at = sent.find(stop_at_[next], from);
                    if (at == std::string::npos) break;
                    from = at + stop_at_[next].size();
                    if (++next == stop_at_.size()) stop = at;
                }
                const std::size_t upto = std::min(stop, sent.size());
                open = write_all(server, std::string_view(sent).substr(forwarded, upto - forwarded));
                forwarded = upto;
                if (stop != std::string::npos) {
                    std::lock_guard lock(mu_);
                    stalled_ = true;
                    cv_.notify_all();
                }
            }
            if (open && p[1].revents != 0) {
                const ssize_t n = ::recv(server, buf, sizeof buf, 0);
                open = n > 0 && write_all(client, std::string_view(buf, static_cast<std::size_t>(n)));
            }
        }
        ::close(client);
        ::close(server);
    }

    void close_all() {
        if (listener_ >= 0) ::close(listener_);
        for (int fd : wake_)
            if (fd >= 0) ::close(fd);
    }

    int server_port_;
    std::vector<std::string> stop_at_;
    int port_ = 0;
    int listener_ = -1;
    int wake_[2] = {-1, -1};
    std::thread acceptor_;
    std::vector<std::thread> relays_;  // the acceptor's until it ends
    std::mutex mu_;
    std::condition_variable cv_;
    bool stalled_ = false;
};

}  // namespace skc_test
