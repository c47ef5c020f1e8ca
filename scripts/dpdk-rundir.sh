# Runtime directories of DPDK applications that the scripts start (dpdk-testpmd), sourced by
# scripts/dpdk-bench.sh and scripts/testpmd-memif.sh (POSIX sh). EAL creates one directory per
# --file-prefix and never removes it, so a script that starts one removes it at the end.
# (Sluice's own EAL removes its `sluice-<pid>' directory itself: plugins/dpdk/src/eal.rs.)

# dpdk_runtime_dir PREFIX: where EAL (22.11) puts PREFIX's runtime directory: under
# $RUNTIME_DIRECTORY (systemd) if set, else /var/run for root, else $XDG_RUNTIME_DIR or /tmp,
# in dpdk/PREFIX.
dpdk_runtime_dir() {
  if [ -n "${RUNTIME_DIRECTORY:-}" ]; then
    printf '%s/dpdk/%s\n' "$RUNTIME_DIRECTORY" "$1"
  elif [ "$(id -ru)" = 0 ]; then
    printf '/var/run/dpdk/%s\n' "$1"
  else
    printf '%s/dpdk/%s\n' "${XDG_RUNTIME_DIR:-/tmp}" "$1"
  fi
}

# dpdk_remove_runtime_dir_after PID PREFIX: removes PREFIX's runtime directory once process
# PID has ended, from a watcher in the background (no trap can do it for a script that execs
# the application, nor survive a SIGKILL).
dpdk_remove_runtime_dir_after() {
  set -- "$1" "$(dpdk_runtime_dir "$2")"
  (tail --pid="$1" -f /dev/null; rm -rf "$2") </dev/null >/dev/null 2>&1 &
}

# dpdk_remove_stale_runtime_dirs NAME: removes the runtime directories NAME-<pid> whose
# process has ended (left by a watcher that was killed with its process group).
dpdk_remove_stale_runtime_dirs() {
  for d in "$(dpdk_runtime_dir "$1")"-*; do
    p=${d##*-}
    case $p in
      '' | *[!0-9]*) continue ;;
    esac
    # /proc/<n> also answers for thread n of another process: a process is its own Tgid.
    [ -d "$d" ] && ! grep -qs "^Tgid:[[:space:]]*$p\$" "/proc/$p/status" && rm -rf "$d"
  done
  return 0
}
