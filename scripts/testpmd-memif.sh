#!/bin/sh
# DPDK's dpdk-testpmd with one net_memif port and no hugepages: the independent memif peer
# that the interop test (bin/sluice/tests/memif.rs) and scripts/memif-bench.sh run against.
#
#   scripts/testpmd-memif.sh ROLE SOCKET [testpmd application options...]
#   scripts/testpmd-memif.sh --check        # exit 0 if dpdk-testpmd is installed, else 77
#
# ROLE is `server' (memif master: testpmd listens) or `client' (memif slave: testpmd connects
# and creates the shared memory); SOCKET is a filesystem path (DPDK 22.11 defaults to an
# abstract socket, VPP and Sluice to a path: hence socket-abstract=no). EAL lcores come from
# TESTPMD_LCORES (default `0-1': the main lcore and one forwarding lcore; the benchmark pins
# both to one CPU with `0@1,1@1'). Without hugepages testpmd needs `-m 512' and a smaller
# mbuf pool (--total-num-mbufs=32768). The process execs testpmd, so its pid is testpmd's;
# a watcher removes testpmd's EAL runtime directory (file prefix `sluice-memif-<pid>') when it
# has ended, however it ended, and directories of earlier runs whose process is gone are
# removed at start (scripts/dpdk-rundir.sh).
set -eu
BIN=
for b in /usr/bin/dpdk-testpmd /usr/local/bin/dpdk-testpmd; do
  [ -x "$b" ] && BIN=$b && break
done
if [ -z "$BIN" ]; then
  echo "SKIP: dpdk-testpmd not installed (apt-get install dpdk dpdk-dev)"
  exit 77
fi
[ "${1:-}" = --check ] && exit 0
if [ $# -lt 2 ]; then
  echo "usage: $0 server|client SOCKET [testpmd options...]" >&2
  exit 2
fi
ROLE=$1
SOCK=$2
shift 2
. "$(dirname "$0")/dpdk-rundir.sh"
dpdk_remove_stale_runtime_dirs sluice-memif
dpdk_remove_runtime_dir_after $$ "sluice-memif-$$"
# TESTPMD_EAL_EXTRA: more EAL options (the interop test sets the memif PMD's log level).
# shellcheck disable=SC2086
exec "$BIN" --no-huge -m 512 --no-pci --lcores "${TESTPMD_LCORES:-0-1}" ${TESTPMD_EAL_EXTRA:-} \
  --file-prefix "sluice-memif-$$" \
  --vdev="net_memif0,role=$ROLE,socket=$SOCK,socket-abstract=no" \
  -- --total-num-mbufs=32768 "$@"
