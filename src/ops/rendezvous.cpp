// TCP rendezvous (see rendezvous.h). Protocol, all integers little-endian u32:
//   rank r -> rank 0 : magic, r, size
//   rank 0 -> rank r : payload length, payload bytes
#include "ops/rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace brioche::ops {

namespace {

constexpr uint32_t kMagic = 0x62726f63;  // "broc"

using Clock = std::chrono::steady_clock;

struct Socket {
  int fd = -1;
  explicit Socket(int f = -1) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

// Waits for `events` on fd until `deadline`; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{.fd = fd, .events = events, .revents = 0};
    int r = ::poll(&p, 1, int(std::min<long long>(left, 1000)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) fail("rendezvous: poll failed: ", std::strerror(errno));
  }
}

void send_all(int fd, const void* data, size_t n, const std::string& where) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("rendezvous: sending to ", where, " failed: ", std::strerror(errno));
    p += w;
    n -= size_t(w);
  }
}

void recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& where) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    if (!wait_for(fd, POLLIN, deadline)) fail("rendezvous: timed out reading from ", where);
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) fail("rendezvous: ", where, " closed the connection with ", n, " bytes still expected");
    if (r < 0) fail("rendezvous: reading from ", where, " failed: ", std::strerror(errno));
    p += r;
    n -= size_t(r);
  }
}

uint32_t read_u32(int fd, Clock::time_point deadline, const std::string& where) {
  uint8_t b[4];
  recv_all(fd, b, 4, deadline, where);
  return uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
}

void write_u32(int fd, uint32_t v, const std::string& where) {
  const uint8_t b[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
  send_all(fd, b, 4, where);
}

std::vector<uint8_t> serve(const RendezvousOptions& o, const HostPort& hp, Clock::time_point deadline) {
  Socket listener(::socket(AF_INET6, SOCK_STREAM, 0));
  bool v6 = listener.fd >= 0;
  if (!v6) listener = Socket(::socket(AF_INET, SOCK_STREAM, 0));
  BRIOCHE_CHECK(listener.fd >= 0, "rendezvous: socket() failed: ", std::strerror(errno));
  int one = 1, zero = 0;
  ::setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int bound;
  if (v6) {
    ::setsockopt(listener.fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // IPv4 clients too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(uint16_t(hp.port));
    bound = ::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(hp.port));
    bound = ::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  BRIOCHE_CHECK(bound == 0, "rendezvous: rank 0 cannot listen on port ", hp.port, " (", o.master,
                "): ", std::strerror(errno));
  BRIOCHE_CHECK(::listen(listener.fd, o.size) == 0, "rendezvous: listen on ", o.master,
                " failed: ", std::strerror(errno));
  std::vector<Socket> peers;
  std::vector<uint8_t> joined(size_t(o.size), 0);
  joined[0] = 1;
  while (int(peers.size()) < o.size - 1) {
    if (!wait_for(listener.fd, POLLIN, deadline))
      fail("rendezvous: rank 0 on ", o.master, " timed out after ", o.timeout_s, " s with ", peers.size() + 1, " of ",
           o.size, " ranks joined");
    Socket peer(::accept(listener.fd, nullptr, nullptr));
    if (peer.fd < 0) continue;
    const std::string where = "a rank connecting to " + o.master;
    const uint32_t magic = read_u32(peer.fd, deadline, where);
    BRIOCHE_CHECK(magic == kMagic, "rendezvous: ", where, " did not speak the brioche protocol");
    const uint32_t rank = read_u32(peer.fd, deadline, where), size = read_u32(peer.fd, deadline, where);
    BRIOCHE_CHECK(int(size) == o.size, "rendezvous: rank ", rank, " expects ", size, " ranks but rank 0 expects ",
                  o.size);
    BRIOCHE_CHECK(rank >= 1 && int(rank) < o.size, "rendezvous: a rank connected as rank ", rank, " (expected 1..",
                  o.size - 1, ")");
    BRIOCHE_CHECK(!joined[rank], "rendezvous: rank ", rank, " connected twice");
    joined[rank] = 1;
    peers.push_back(std::move(peer));
  }
  // Everyone is here: hand out the payload.
  for (Socket& p : peers) {
    write_u32(p.fd, uint32_t(o.payload.size()), "a rank");
    send_all(p.fd, o.payload.data(), o.payload.size(), "a rank");
  }
  return o.payload;
}

std::vector<uint8_t> join(const RendezvousOptions& o, const HostPort& hp, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  std::string last_error = "no attempt";
  for (;;) {
    addrinfo* found = nullptr;
    int gai = ::getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &found);
    if (gai != 0) fail("rendezvous: cannot resolve ", o.master, ": ", gai_strerror(gai));
    for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      Socket s(::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol));
      if (s.fd < 0) continue;
      if (::connect(s.fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        last_error = std::strerror(errno);
        continue;
      }
      ::freeaddrinfo(found);
      const std::string where = "rank 0 at " + o.master;
      write_u32(s.fd, kMagic, where);
      write_u32(s.fd, uint32_t(o.rank), where);
      write_u32(s.fd, uint32_t(o.size), where);
      const uint32_t n = read_u32(s.fd, deadline, where);
      BRIOCHE_CHECK(n <= (1u << 20), "rendezvous: ", where, " announced a payload of ", n, " bytes (at most 1 MiB)");
      std::vector<uint8_t> payload(n);
      recv_all(s.fd, payload.data(), n, deadline, where);
      return payload;
    }
    ::freeaddrinfo(found);
    if (Clock::now() >= deadline)
      fail("rendezvous: rank ", o.rank, " could not reach rank 0 at ", o.master, " within ", o.timeout_s,
           " s (last error: ", last_error, ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 may not listen yet
  }
}

}  // namespace

HostPort parse_host_port(const std::string& address) {
  const size_t colon = address.rfind(':');
  BRIOCHE_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < address.size(), "rendezvous address '", address,
                "' is not HOST:PORT");
  HostPort hp;
  hp.host = address.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']')
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  const std::string port = address.substr(colon + 1);
  BRIOCHE_CHECK(port.find_first_not_of("0123456789") == std::string::npos && port.size() <= 5, "rendezvous address '",
                address, "': port '", port, "' is not a number");
  hp.port = std::stoi(port);
  BRIOCHE_CHECK(hp.port > 0 && hp.port < 65536, "rendezvous address '", address, "': port ", hp.port,
                " outside 1..65535");
  return hp;
}

int free_tcp_port() {
  Socket s(::socket(AF_INET, SOCK_STREAM, 0));
  BRIOCHE_CHECK(s.fd >= 0, "free_tcp_port: socket() failed: ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  BRIOCHE_CHECK(::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                    ::getsockname(s.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0,
                "free_tcp_port: ", std::strerror(errno));
  return ntohs(a.sin_port);
}

std::vector<uint8_t> rendezvous(const RendezvousOptions& o) {
  BRIOCHE_CHECK(o.size >= 1 && o.rank >= 0 && o.rank < o.size, "rendezvous: rank ", o.rank, " of ", o.size,
                " (expected 0 <= rank < size)");
  if (o.size == 1) return o.payload;
  const HostPort hp = parse_host_port(o.master);
  const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  return o.rank == 0 ? serve(o, hp, deadline) : join(o, hp, deadline);
}

}  // namespace brioche::ops
