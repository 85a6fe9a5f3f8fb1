#include "emulator/protocol/process_mappings.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace uroce::emulator {

namespace {

// The PROCMAP_QUERY interface of Linux 6.11 (include/uapi/linux/fs.h), declared here because Debian 12's
// kernel headers (6.1) predate it. The layout is the kernel's ABI; `size` lets the kernel tell versions apart.
struct ProcmapQuery {
  uint64_t size = sizeof(ProcmapQuery);
  uint64_t query_flags = 0;    // in
  uint64_t query_addr = 0;     // in
  uint64_t vma_start = 0;      // out
  uint64_t vma_end = 0;        // out
  uint64_t vma_flags = 0;      // out: the permission flags below
  uint64_t vma_page_size = 0;  // out
  uint64_t vma_offset = 0;     // out
  uint64_t inode = 0;          // out
  uint32_t dev_major = 0;      // out
  uint32_t dev_minor = 0;      // out
  uint32_t vma_name_size = 0;  // in/out: the name buffer's size, then the name's with its NUL (0: none)
  uint32_t build_id_size = 0;  // in/out
  uint64_t vma_name_addr = 0;  // in
  uint64_t build_id_addr = 0;  // in
};
static_assert(sizeof(ProcmapQuery) == 104);

constexpr uint64_t vma_readable = 0x01, vma_writable = 0x02, vma_executable = 0x04, vma_shared = 0x08;
constexpr uint64_t covering_or_next_vma = 0x10;
constexpr unsigned long procmap_query = _IOWR('f', 17, ProcmapQuery);

enum class Answer { visited, stopped, unsupported };

std::string maps_path(pid_t pid) { return pid == 0 ? "/proc/self/maps" : "/proc/" + std::to_string(pid) + "/maps"; }

// The mappings from `from` on, one ioctl each. The file is opened for each walk: an open file stays bound
// to the process that opened it, so one kept open would describe the parent in a child after fork().
Answer walk_by_query(pid_t pid, uint64_t from, const MappingVisitor& visit) {
  const int fd = open(maps_path(pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Answer::unsupported;
  Answer answer = Answer::visited;
  char name[4096];
  Mapping m;
  for (uint64_t at = from;;) {
    ProcmapQuery q;
    q.query_flags = covering_or_next_vma;
    q.query_addr = at;
    q.vma_name_addr = reinterpret_cast<uint64_t>(name);
    q.vma_name_size = sizeof name;
    if (ioctl(fd, procmap_query, &q) != 0) {
      // ENOENT: no mapping at or above `at`. ENOTTY or EINVAL: a kernel before 6.11, which has no such query
      // (EINVAL too where the kernel cannot give a mapping's name, as the text would).
      if (errno != ENOENT) answer = at == from ? Answer::unsupported : Answer::stopped;
      break;
    }
    m.lo = q.vma_start;
    m.hi = q.vma_end;
    m.offset = q.vma_offset;
    m.perms = {(q.vma_flags & vma_readable) ? 'r' : '-', (q.vma_flags & vma_writable) ? 'w' : '-',
               (q.vma_flags & vma_executable) ? 'x' : '-', (q.vma_flags & vma_shared) ? 's' : 'p'};
    m.inode = std::to_string(q.inode);
    m.path.assign(name, q.vma_name_size > 0 ? q.vma_name_size - 1 : 0);
    if (!visit(m)) {
      answer = Answer::stopped;
      break;
    }
    at = q.vma_end;
  }
  close(fd);
  return answer;
}

}  // namespace

// The text: lines ending at or below `from` are skipped on their range alone, the others parsed whole.
void each_mapping_in_text(pid_t pid, uint64_t from, const MappingVisitor& visit) {
  std::ifstream maps(maps_path(pid));
  std::string line, range, offset, dev;
  Mapping m;
  while (std::getline(maps, line)) {
    const size_t at = line.find('-');
    if (at == std::string::npos) continue;
    const char* dash = line.c_str() + at;
    if (std::strtoull(dash + 1, nullptr, 16) <= from) continue;
    std::istringstream in(line);
    in >> range >> m.perms >> offset >> dev >> m.inode;
    std::getline(in, m.path);
    m.path.erase(0, m.path.find_first_not_of(' '));
    m.lo = std::strtoull(line.c_str(), nullptr, 16);
    m.hi = std::strtoull(dash + 1, nullptr, 16);
    m.offset = std::strtoull(offset.c_str(), nullptr, 16);
    if (m.perms.size() >= 4 && !visit(m)) return;
  }
}

bool each_mapping_by_query(pid_t pid, uint64_t from, const MappingVisitor& visit) {
  return walk_by_query(pid, from, visit) != Answer::unsupported;
}

void each_mapping_from(pid_t pid, uint64_t from, const MappingVisitor& visit) {
  // Whether the kernel answers the query, learnt once on the process's own maps: it does not change while
  // the process runs.
  static const bool kernel_answers = walk_by_query(0, ~uint64_t(0) - 1, [](const Mapping&) { return false; }) !=
                                     Answer::unsupported;
  if (!kernel_answers || walk_by_query(pid, from, visit) == Answer::unsupported) {
    each_mapping_in_text(pid, from, visit);
  }
}

}  // namespace uroce::emulator
