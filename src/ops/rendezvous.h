// How the ranks of a multi-process job find each other: rank 0 listens on a
// TCP port and sends a small payload (NCCL's 128-byte unique id) to every
// other rank that connects. Works across machines (`host` is any address the
// other ranks can reach); NCCL then makes its own connections.
//
//   rank 0:   rendezvous({.rank = 0, .size = 2, .master = "0.0.0.0:29500", .payload = id})
//   rank 1:   id = rendezvous({.rank = 1, .size = 2, .master = "node0:29500"})
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace brioche::ops {

struct RendezvousOptions {
  int rank = 0;
  int size = 1;
  std::string master;            // "HOST:PORT": where rank 0 listens (rank 0 binds PORT on all interfaces)
  std::vector<uint8_t> payload;  // rank 0: what every rank receives
  int timeout_s = 120;           // how long to wait for the other side
};

// Rank 0 waits until all size−1 other ranks have connected and returns its
// own payload; other ranks connect (retrying while rank 0 is not listening
// yet) and return the payload rank 0 sent. Errors name the master address,
// the rank and what went wrong (timeout, duplicate rank, short read).
std::vector<uint8_t> rendezvous(const RendezvousOptions& options);

// "HOST:PORT" split; an error names the string when it is not of that form.
struct HostPort {
  std::string host;
  int port = 0;
};
HostPort parse_host_port(const std::string& address);

// A TCP port free on this machine right now (the kernel's pick), for a
// rendezvous of ranks that all run here.
int free_tcp_port();

}  // namespace brioche::ops
