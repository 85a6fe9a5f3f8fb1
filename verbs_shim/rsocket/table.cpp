// Descriptor -> rsocket, looked up on every call without a lock (rsend and rrecv are hot), and the
// defaults new rsockets start from.
#include <atomic>
#include <cstdio>
#include <memory>

#include "verbs_shim/rsocket/rsocket.hpp"

namespace uroce::rsocket {

namespace {

// librdmacm's index map holds descriptors below 65536 too.
constexpr int kMaxDescriptor = 1 << 16;
std::unique_ptr<std::atomic<Rsocket*>[]> table;
std::once_flag table_once;
std::mutex table_lock;  // insert and remove

std::atomic<Rsocket*>* slots() {
  std::call_once(table_once, [] { table.reset(new std::atomic<Rsocket*>[kMaxDescriptor]()); });
  return table.get();
}

template <class T>
void read_setting(const char* name, T& value) {
  // The same files, in the same place, as librdmacm's rs_configure (users tune both alike).
  const std::string path = std::string("/etc/rdma/rsocket/") + name;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    unsigned long v = 0;
    if (std::fscanf(f, "%lu", &v) == 1) value = T(v);
    std::fclose(f);
  }
}

}  // namespace

Rsocket* lookup(int fd) {
  if (fd < 0 || fd >= kMaxDescriptor || !table) return nullptr;
  return table[fd].load(std::memory_order_acquire);
}

int insert(Rsocket* rs, int fd) {
  if (fd < 0 || fd >= kMaxDescriptor) return fail(EMFILE);
  std::lock_guard g(table_lock);
  slots()[fd].store(rs, std::memory_order_release);
  rs->index = fd;
  return fd;
}

void remove(Rsocket* rs) {
  if (rs->index < 0) return;
  std::lock_guard g(table_lock);
  slots()[rs->index].store(nullptr, std::memory_order_release);
  rs->index = -1;
}

const Defaults& defaults() {
  static const Defaults d = [] {
    Defaults c;
    read_setting("polling_time", c.polling_time_us);
    read_setting("inline_default", c.inline_size);
    read_setting("sqsize_default", c.sq_size);
    read_setting("rqsize_default", c.rq_size);
    read_setting("mem_default", c.mem);
    if (c.mem < 1) c.mem = 1;
    read_setting("wmem_default", c.wmem);
    if (c.wmem < kSendLowWater) c.wmem = kSendLowWater << 1;
    read_setting("iomap_size", c.iomap_size);
    c.iomap_size = uint16_t(from_scale(to_scale(c.iomap_size, 8) & 0xFF, 8));  // a size the scale can say
    return c;
  }();
  return d;
}

}  // namespace uroce::rsocket
