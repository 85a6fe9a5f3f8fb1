#!/usr/bin/env bash
# The "Speed" benchmark: builds uroce_bench (Release) and runs it on one core. Prints Markdown tables:
# parse / ICRC-verify throughput against memcpy of the same bytes, the CRC-32 library candidates, the
# transport over an in-memory wire; then uroced between two processes in its three setups (loopback,
# veth in two network namespaces, memif) beside memcpy; then Debian's unmodified perftest through the verbs
# shim in the same three setups, beside the kernel's TCP on loopback (qperf, iperf3) and memcpy; then the
# control path (verbs calls that go to uroced's socket) beside a bare Unix-socket request and reply.
#
#   scripts/bench.sh [uroce_bench options: --quick, --rounds N, --sample-ms MS, --cpu N, --dram-mib MIB]
#
# Exit status: non-zero if the build fails or the benchmark itself fails (a frame that does not verify,
# CRC libraries that disagree). A missed speed target is not a failure: the table says "no" under "met".
# The results are also written to <build dir>/bench-results.md. UROCE_BENCH_BUILD_DIR overrides the build
# directory (default build/bench).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

build_dir="${UROCE_BENCH_BUILD_DIR:-build/bench}"

scripts/deps.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" --target uroce_bench uroced uroce-rdma-test uroce uroce_verbs_shim

echo
"$build_dir/bench/uroce_bench" "$@" | tee "$build_dir/bench-results.md"
# The daemon: throughput between two processes through uroced in its three setups, beside memcpy.
scale=1
for a in "$@"; do [ "$a" = "--quick" ] && scale=0.1; done
python3 tests/integration/bench_daemon.py "$build_dir" --scale "$scale" | tee -a "$build_dir/bench-results.md"
# The verbs shim: perftest through uroce-run, beside TCP (issue 5's speed table and its targets).
python3 tests/verbs_shim/bench_verbs.py "$build_dir" --scale "$scale" | tee -a "$build_dir/bench-results.md"
# The control path: verbs calls that go to uroced, beside a bare request/reply over a Unix socket pair.
python3 tests/verbs_shim/bench_control.py "$build_dir" --scale "$scale" | tee -a "$build_dir/bench-results.md"
