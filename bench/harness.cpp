#include "bench/harness.hpp"

#include <gnu/libc-version.h>
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace uroce::bench {

namespace {

using Clock = std::chrono::steady_clock;

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One fixed-time sample: whole passes until `seconds` have elapsed; returns packets per second.
double sample(Measurement& m, double seconds) {
  if (m.prepare) m.prepare();
  const auto limit = std::chrono::duration<double>(seconds);
  // Read the clock every ~4096 frames at most, so that small pools do not measure the clock.
  const uint64_t batch = std::max<uint64_t>(1, 4096 / std::max<size_t>(1, m.frames_per_pass));
  uint64_t passes = 0;
  const auto t0 = Clock::now();
  auto t = t0;
  do {
    for (uint64_t b = 0; b < batch; ++b) {
      const uint64_t check = m.pass();
      if (check != m.expected) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "pass %llu returned check 0x%llx, expected 0x%llx",
                      (unsigned long long)passes, (unsigned long long)check, (unsigned long long)m.expected);
        m.error = buf;
        return 0;
      }
      ++passes;
    }
    t = Clock::now();
  } while (t - t0 < limit);
  m.passes += passes;
  const double elapsed = std::chrono::duration<double>(t - t0).count();
  return double(passes) * double(m.frames_per_pass) / elapsed;
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

bool cpu_flag(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  }
  return false;
}

}  // namespace

double Measurement::median_pps() const { return median_of(pps); }

double Measurement::spread() const {
  if (pps.empty()) return 0;
  const auto [lo, hi] = std::minmax_element(pps.begin(), pps.end());
  const double med = median_pps();
  return med > 0 ? (*hi - *lo) / med : 0;
}

void run_group(std::vector<Measurement*> group, const RunConfig& cfg) {
  for (Measurement* m : group) {
    if (m->error.empty()) sample(*m, cfg.warmup_seconds);
  }
  for (int r = 0; r < cfg.rounds; ++r) {
    for (Measurement* m : group) {
      if (!m->error.empty()) continue;
      const double pps = sample(*m, cfg.sample_seconds);
      if (m->error.empty()) m->pps.push_back(pps);
    }
  }
  for (Measurement* m : group) {
    if (m->error.empty() && m->verify_after) m->error = m->verify_after();
  }
}

int pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  if (cpu < 0) {
    for (int c = CPU_SETSIZE - 1; c >= 0; --c) {
      if (CPU_ISSET(c, &set)) {
        cpu = c;
        break;
      }
    }
  }
  if (cpu < 0) return -1;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0 ? cpu : -1;
}

std::string machine_description() {
  std::ostringstream out;
  utsname u{};
  uname(&u);
  const std::string l2 = read_first_line("/sys/devices/system/cpu/cpu0/cache/index2/size");
  const std::string l3 = read_first_line("/sys/devices/system/cpu/cpu0/cache/index3/size");
  out << cpu_model() << "; " << sysconf(_SC_NPROCESSORS_ONLN) << " online CPUs"
      << "; L2 " << (l2.empty() ? "?" : l2) << " per core, L3 " << (l3.empty() ? "?" : l3) << "; AVX-512F "
      << (cpu_flag("avx512f") ? "yes" : "no") << ", VPCLMULQDQ " << (cpu_flag("vpclmulqdq") ? "yes" : "no")
      << (cpu_flag("hypervisor") ? "; virtual machine" : "") << "; " << u.sysname << " " << u.release
      << "; gcc " << __VERSION__ << "; glibc " << gnu_get_libc_version();
  return out.str();
}

std::string load_average() { return read_first_line("/proc/loadavg"); }

size_t anon_huge_bytes() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("AnonHugePages:", 0) == 0) return size_t(std::atoll(line.c_str() + 14)) * 1024;
  }
  return 0;
}

std::string format_bytes(size_t bytes) {
  char buf[32];
  if (bytes >= (size_t(1) << 20) && bytes % (size_t(1) << 20) == 0) {
    std::snprintf(buf, sizeof buf, "%zu MiB", bytes >> 20);
  } else if (bytes >= (size_t(1) << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof buf, "%zu KiB", (bytes + 512) >> 10);
  } else {
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  }
  return buf;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string Table::render() const {
  // Display width: count UTF-8 code points, not bytes ("—" is three bytes, one column).
  auto columns = [](const std::string& s) {
    return size_t(std::count_if(s.begin(), s.end(), [](char c) { return (uint8_t(c) & 0xc0) != 0x80; }));
  };
  std::vector<size_t> width(header_.size(), 3);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], columns(row[i]));
  };
  widen(header_);
  for (const auto& row : rows_) widen(row);
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& row) {
    out << "|";
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      out << " " << cell << std::string(width[i] - columns(cell), ' ') << " |";
    }
    out << "\n";
  };
  line(header_);
  out << "|";
  for (size_t w : width) out << std::string(w + 2, '-') << "|";
  out << "\n";
  for (const auto& row : rows_) line(row);
  return out.str();
}

}  // namespace uroce::bench
