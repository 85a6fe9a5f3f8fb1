#!/bin/sh
# abi_diff.sh SHIM [REAL [NODES [SONAME]]]: the verbs shim must export exactly what rdma-core 44's
# libibverbs exports: every IBVERBS_* symbol under the same version node, default (@@) and compat (@)
# alike, and nothing else. Immediate-binding programs die at start-up on any missing symbol or version.
# The librdmacm shim is checked the same way: abi_diff.sh SHIM .../librdmacm.so.1 RDMACM librdmacm.so.1.
set -eu
shim=$1
real=${2:-/usr/lib/x86_64-linux-gnu/libibverbs.so.1}
nodes=${3:-IBVERBS}
want_soname=${4:-libibverbs.so.1}
[ -e "$real" ] || { echo "abi_diff: $real not installed"; exit 1; }

# "VERSION NAME" per defined dynamic symbol; a version in parentheses is a non-default (compat) one.
exports() {
  objdump -T "$1" | awk -v n="$nodes" '$0 ~ n && $0 !~ /\*UND\*/ { print $(NF-1), $NF }' | sort -u
}
# Anything else the shim exports would leak its internals (uroce_client, C++ runtime bits).
extra=$(objdump -T "$shim" | awk -v n="$nodes" 'NR > 4 && NF > 0 && $0 !~ /\*UND\*/ && $0 !~ n' || true)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
exports "$real" > "$tmp/real"
exports "$shim" > "$tmp/shim"
status=0
if ! diff -u "$tmp/real" "$tmp/shim"; then
  echo "abi_diff: the shim's $nodes exports differ from $real (- missing, + extra)"
  status=1
fi
if [ -n "$extra" ]; then
  echo "abi_diff: the shim exports symbols outside the $nodes version nodes:"
  echo "$extra"
  status=1
fi
soname=$(objdump -p "$shim" | awk '$1 == "SONAME" { print $2 }')
if [ "$soname" != "$want_soname" ]; then
  echo "abi_diff: SONAME is '$soname', not $want_soname"
  status=1
fi
defaults=$(grep -vc '^(' "$tmp/shim" || true)
echo "abi_diff: $(wc -l < "$tmp/shim") $nodes entries compared ($defaults default-versioned incl. version nodes)"
exit $status
