// A process's mappings, in address order, from a given address on: what /proc/PID/maps lists, asked the
// cheap way where the kernel can answer it. The client reads its own (pid 0: /proc/self/maps), uroced a
// client's.
//
// Registering memory looks at the mappings under each region, in the client (emulator/client/
// shared_pages.cpp) and in uroced (emulator/daemon/shared_mappings.cpp), and every region the client moves
// onto a memfd becomes a mapping of its own. Reading the maps file from its start made each registration
// cost time in proportion to the regions registered before it: 1000 registrations of 8 KiB took 1.6 s, the
// last ones 2 ms each. Linux 6.11 answers for one address at a time (the PROCMAP_QUERY ioctl on the same
// file), in time that does not grow with the mappings below it; older kernels get the text, with the lines
// below the address skipped before they are parsed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

namespace uroce::emulator {

struct Mapping {
  uint64_t lo = 0, hi = 0;
  uint64_t offset = 0;  // where `lo` lies in the mapped file (0 for anonymous memory)
  std::string perms;    // as /proc/PID/maps writes them: "rw-p", "r--s", ...
  std::string inode;    // "0" for anonymous memory
  std::string path;     // a file's path, "[heap]", "[stack]", ..., or empty
};

using MappingVisitor = std::function<bool(const Mapping&)>;

// Calls `visit(mapping)` for each mapping of process `pid` (0: the calling process) that ends above `from`,
// in address order, until it returns false. Nothing is visited when the process's maps cannot be read.
void each_mapping_from(pid_t pid, uint64_t from, const MappingVisitor& visit);

// The same from one source (the tests compare them): the kernel's query, which returns false having
// visited nothing where the kernel has no such query, and the text.
bool each_mapping_by_query(pid_t pid, uint64_t from, const MappingVisitor& visit);
void each_mapping_in_text(pid_t pid, uint64_t from, const MappingVisitor& visit);

}  // namespace uroce::emulator
