// The measuring harness of uroce_bench: one pinned core, steady_clock, fixed-time samples, interleaved
// rounds, medians. A measurement is one pass over a frame pool that returns a check value; every pass's
// check is compared with the value known in advance, so the work cannot be optimised away and a wrong
// result (a frame that does not verify, CRC libraries that disagree) fails the benchmark.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace uroce::bench {

// Makes `value` observable to the compiler (it must assume the value is read), and after clobber() it
// must assume any memory was read or written. The usual benchmark barriers; they emit no instruction.
template <class T>
inline void keep(const T& value) {
  __asm__ __volatile__("" : : "r,m"(value) : "memory");
}
inline void clobber() { __asm__ __volatile__("" : : : "memory"); }

struct Measurement {
  std::string name;  // the row label
  size_t frames_per_pass = 0;
  size_t frame_size = 0;           // bytes per frame (every frame of a pool has the same size)
  std::function<uint64_t()> pass;  // one pass over the pool; returns the check value
  uint64_t expected = 0;           // what every pass must return
  std::function<void()> prepare;   // optional, before each sample (e.g. selecting a DPDK algorithm)
  std::function<std::string()> verify_after;  // optional, after the samples; returns an error or ""

  // Results.
  std::vector<double> pps;  // packets per second, one per sample (warm-up excluded)
  uint64_t passes = 0;      // over all samples, for the record
  std::string error;        // non-empty: the benchmark failed

  double median_pps() const;
  double median_gbps() const { return median_pps() * double(frame_size) / 1e9; }
  double spread() const;  // (max - min) / median of the samples
};

struct RunConfig {
  int rounds = 7;  // samples per measurement; the median is reported
  double sample_seconds = 0.1;
  double warmup_seconds = 0.05;
};

// Runs `group` in interleaved rounds (round r runs every measurement once), after one warm-up sample each,
// so that a measurement and its reference see the same machine conditions.
void run_group(std::vector<Measurement*> group, const RunConfig& cfg);

// Pins the calling thread to `cpu` (-1: the last CPU it may run on). Returns the CPU, or -1 on failure.
int pin_to_cpu(int cpu);

// "AMD EPYC ... (2 CPUs), L2 1 MiB, L3 32 MiB, Linux 6.1, gcc 12.2, glibc 2.36" and the like.
std::string machine_description();
std::string load_average();
size_t anon_huge_bytes();  // AnonHugePages of this process (transparent huge pages in use)

std::string format_bytes(size_t bytes);  // "256 KiB", "64 MiB"

// A Markdown table.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string fixed(double v, int decimals);

}  // namespace uroce::bench
