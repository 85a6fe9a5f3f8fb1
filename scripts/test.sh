#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what it needs, then
#   1. a release build (gcc): unit tests, and integration tests of the tools against real captures and tshark;
#   2. an AddressSanitizer + UBSan build (clang): the same tests again, plus the libFuzzer target for a
#      bounded time (UROCE_FUZZ_SECONDS, default 60).
# --long adds, after 1., the full matrix of unmodified verbs programs through the verbs shim: every program
# (pingpongs, perftest, qperf) with every option in every setup (loopback, veth, memif), and ibv_rc_pingpong
# at every size from 1 B to 64 KiB at every MTU (tests/verbs_shim/program_matrix.py; ctest runs a subset).
# Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

long=0
for arg in "$@"; do
  case "$arg" in
    --long) long=1 ;;
    *) echo "usage: $0 [--long]" >&2; exit 2 ;;
  esac
done

scripts/deps.sh
jobs=$(nproc)
fuzz_seconds=${UROCE_FUZZ_SECONDS:-60}

echo "== release build (gcc)"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/release -j"$jobs"
ctest --test-dir build/release --output-on-failure -j"$jobs"
if ((long)); then
  echo "== the full matrix of verbs programs through the shim (--long)"
  python3 tests/verbs_shim/test_setups.py --long --uroced build/release/emulator/uroced \
    --uroce-run build/release/verbs_shim/uroce-run --ucp-sockaddr-check build/release/verbs_shim/ucp_sockaddr_check
fi

echo "== AddressSanitizer + UBSan build (clang), with fuzzing"
CC=clang CXX=clang++ cmake -S . -B build/sanitize -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
  -DUROCE_SANITIZE=ON -DUROCE_FUZZ=ON -DUROCE_FUZZ_SECONDS="$fuzz_seconds" >/dev/null
cmake --build build/sanitize -j"$jobs"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The release build above ran the full 10,000-seed property sweep; under the sanitizers 2,000 seeds cover
# the same code paths at a fraction of the time.
UROCE_PROPERTY_SEEDS=${UROCE_SANITIZE_PROPERTY_SEEDS:-2000} ctest --test-dir build/sanitize --output-on-failure -j"$jobs"
