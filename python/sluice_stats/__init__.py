"""Read a Sluice daemon's statistics segment from Python (like VPP's `vpp_papi.vpp_stats`).

    from sluice_stats import StatsClient
    with StatsClient("/run/sluice/stats.sock") as st:
        st.ls("/if/")                       # ['/if/names', '/if/rx', ...]
        rx = st["/if/rx"]                   # [thread][sw_if_index] -> (packets, bytes)
        rx.sum_packets(1), rx.sum_bytes(1)  # totals over threads of interface 1
        st["/err/ip4-input/bad_checksum"].sum(0)
        st["/sys/vector_rate"]              # a float
        st.dump("/interfaces/pg0/")         # {name: value} from one consistent snapshot

The daemon hands the segment's file descriptor over its stats socket (`statseg { socket-name }`,
default `stats.sock` beside the CLI socket); it is mapped read-only. Reads follow the segment's
sequence lock (see `crates/stats/src/layout.rs`, whose constants this module repeats): a read
that overlapped an update is retried, so every value of one `dump` comes from the same update
and none is torn. The daemon never waits for a reader.

Patterns: a name matches when it contains the pattern; `*` matches any run of characters, a
leading `^` anchors at the start and a trailing `$` at the end. No pattern matches all.

`python -m sluice_stats [-s <stats.sock>] ls|dump [<pattern>...]` prints like `sluicectl stats`.
"""

from __future__ import annotations

import fnmatch
import mmap
import os
import socket
import struct
import time

MAGIC = int.from_bytes(b"SLUICEST", "little")
VERSION = 1
HEADER_BYTES = 4096
ENTRY_WORDS = 8
MAX_NAME = 1024
MAX_THREADS = 4096

# Header word indices.
H_MAGIC, H_VERSION, H_SIZE, H_SEQ, H_EPOCH, H_DIR_OFFSET, H_DIR_COUNT, H_N_THREADS, \
    H_DATA_USED, H_WRITER_PID = range(10)

# Entry kinds.
SCALAR, SIMPLE, COMBINED, NAMES, SYMLINK, GAUGES = 1, 2, 3, 4, 5, 6
KIND_NAMES = {SCALAR: "scalar", SIMPLE: "counter", COMBINED: "combined", NAMES: "names",
              SYMLINK: "symlink", GAUGES: "gauges"}

BUSY_LIMIT = 2.0  # seconds a read keeps retrying while the writer updates


class StatsError(Exception):
    """The segment cannot be reached, is not a Sluice segment, is corrupt or stays busy."""


class SimpleCounter(list):
    """`[thread][item]` counters."""

    def sum(self, item: int) -> int:
        """Total of `item` over threads."""
        return sum(row[item] for row in self if item < len(row))


class CombinedCounter(list):
    """`[thread][item]` (packets, bytes) pairs."""

    def sum_packets(self, item: int) -> int:
        return sum(row[item][0] for row in self if item < len(row))

    def sum_bytes(self, item: int) -> int:
        return sum(row[item][1] for row in self if item < len(row))


class Gauges(list):
    """`[thread][item]` gauges."""


def matches(name: str, pattern: str) -> bool:
    """Whether `name` matches `pattern` (see the module doc)."""
    start = pattern.startswith("^")
    p = pattern[1:] if start else pattern
    end = p.endswith("$")
    p = p[:-1] if end else p
    # fnmatch's other specials ([, ?) are literal here.
    p = p.replace("[", "[[]").replace("?", "[?]")
    glob = ("" if start else "*") + p + ("" if end else "*")
    return fnmatch.fnmatchcase(name, glob)


def _match_any(name: str, patterns) -> bool:
    return not patterns or any(matches(name, p) for p in patterns)


class StatsClient:
    """A read-only view of one daemon's statistics segment."""

    def __init__(self, socket_path: str | os.PathLike, timeout: float = 5.0):
        self.socket_path = os.fspath(socket_path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self.socket_path)
            msg, fds, _flags, _addr = socket.recv_fds(s, 1, 4)
        except OSError as e:
            raise StatsError(f"cannot get the statistics segment from {self.socket_path}: {e}")
        finally:
            s.close()
        if msg != b"S" or not fds:
            for fd in fds:
                os.close(fd)
            raise StatsError(f"{self.socket_path}: no statistics segment received "
                             "(not a Sluice stats socket?)")
        for fd in fds[1:]:
            os.close(fd)
        try:
            size = os.fstat(fds[0]).st_size
            if size < HEADER_BYTES:
                raise StatsError(f"segment is {size} bytes: not a Sluice statistics segment")
            self._mm = mmap.mmap(fds[0], size & ~7, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fds[0])
        self._words = len(self._mm) // 8
        if self._w(H_MAGIC) != MAGIC:
            self._mm.close()
            raise StatsError("not a Sluice statistics segment: bad magic")
        v = self._w(H_VERSION)
        if v != VERSION:
            self._mm.close()
            raise StatsError(f"segment layout version {v}, this reader knows {VERSION}")
        self._dir: tuple[int, list] | None = None
        self.retries = 0

    # -- plumbing ---------------------------------------------------------------------------

    def close(self) -> None:
        self._mm.close()

    def __enter__(self) -> "StatsClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _w(self, i: int) -> int:
        if not 0 <= i < self._words:
            raise _Corrupt(f"word {i} past the end")
        return struct.unpack_from("<Q", self._mm, i * 8)[0]

    def _ws(self, first: int, n: int) -> tuple:
        if n < 0 or first < 0 or first + n > self._words:
            raise _Corrupt(f"words {first}..{first + n} past the end")
        return struct.unpack_from(f"<{n}Q", self._mm, first * 8)

    def _str(self, off: int, length: int) -> str:
        if length > MAX_NAME or off % 8:
            raise _Corrupt(f"string at {off} of {length} bytes")
        n = (length + 7) // 8
        if off // 8 + n > self._words:
            raise _Corrupt(f"string at {off} past the end")
        b = self._mm[off:off + length]
        try:
            return b.decode()
        except UnicodeDecodeError:
            raise _Corrupt(f"string at {off} is not UTF-8")

    def _read_dir(self) -> list:
        off, count = self._w(H_DIR_OFFSET), self._w(H_DIR_COUNT)
        if off % 8 or off // 8 + count * ENTRY_WORDS > self._words:
            raise _Corrupt(f"directory of {count} entries")
        out = []
        words = self._ws(off // 8, count * ENTRY_WORDS)
        for k in range(count):
            kind, rows, cols, data, name_off, name_len, _, _ = \
                words[k * ENTRY_WORDS:(k + 1) * ENTRY_WORDS]
            if kind not in KIND_NAMES:
                raise _Corrupt(f"kind {kind}")
            out.append((self._str(name_off, name_len), kind, rows, cols, data))
        return out

    def _read(self, f):
        """Runs `f(directory)` inside one sequence-lock window, retrying on overlap."""
        t0 = time.monotonic()
        while True:
            s1 = self._w(H_SEQ)
            if s1 & 1 == 0:
                epoch = self._w(H_EPOCH)
                fresh = self._dir is None or self._dir[0] != epoch
                try:
                    d = self._read_dir() if fresh else self._dir[1]
                    r, err = f(d), None
                except (_Corrupt, struct.error, IndexError, ValueError, OverflowError) as e:
                    r, err = None, e
                if self._w(H_SEQ) == s1:
                    if err is not None:
                        raise StatsError(f"corrupt statistics segment: {err}")
                    if fresh:
                        self._dir = (epoch, d)
                    return r
            self.retries += 1
            if time.monotonic() - t0 > BUSY_LIMIT:
                raise StatsError("statistics segment busy (the writer kept updating it)")
            time.sleep(0.0001)

    def _cells(self, e, per: int):
        name, kind, rows, cols, data = e
        if rows > MAX_THREADS or data % 8:
            raise _Corrupt(f"{name}: shape")
        n = rows * cols * per
        return self._ws(data // 8, n)

    def _value(self, d, e):
        name, kind, rows, cols, data = e
        if kind == SCALAR:
            return struct.unpack("<d", struct.pack("<Q", self._cells(e, 1)[0]))[0]
        if kind == SIMPLE:
            c = self._cells(e, 1)
            return SimpleCounter(list(c[t * cols:(t + 1) * cols]) for t in range(rows))
        if kind == GAUGES:
            c = self._cells(e, 1)
            f = struct.unpack(f"<{len(c)}d", struct.pack(f"<{len(c)}Q", *c))
            return Gauges(list(f[t * cols:(t + 1) * cols]) for t in range(rows))
        if kind == COMBINED:
            c = self._cells(e, 2)
            return CombinedCounter(
                [(c[2 * (t * cols + i)], c[2 * (t * cols + i) + 1]) for i in range(cols)]
                for t in range(rows))
        if kind == NAMES:
            t = self._cells(e, 2)
            return [self._str(t[2 * i], t[2 * i + 1]) for i in range(cols)]
        if kind == SYMLINK:
            if cols >= len(d) or d[cols][1] not in (SIMPLE, COMBINED, GAUGES):
                raise _Corrupt(f"{name}: bad symlink target")
            target, item = d[cols], data
            if item >= target[3]:
                raise _Corrupt(f"{name}: bad symlink item")
            v = self._value(d, target)
            return type(v)([row[item]] for row in v)
        raise _Corrupt(f"{name}: kind {kind}")

    # -- API --------------------------------------------------------------------------------

    def header(self) -> dict:
        """Header fields: size, used, epoch, seq, entries, n_threads, writer_pid."""
        return self._read(lambda d: {
            "size": self._w(H_SIZE), "used": self._w(H_DATA_USED),
            "epoch": self._w(H_EPOCH), "seq": self._w(H_SEQ),
            "entries": self._w(H_DIR_COUNT), "n_threads": self._w(H_N_THREADS),
            "writer_pid": self._w(H_WRITER_PID)})

    def ls(self, *patterns: str) -> list[str]:
        """Names matching any pattern (all without), in directory order."""
        return self._read(lambda d: [e[0] for e in d if _match_any(e[0], patterns)])

    def kinds(self, *patterns: str) -> dict[str, str]:
        """Name -> kind (`scalar`, `counter`, `combined`, `names`, `symlink`, `gauges`)."""
        return self._read(lambda d: {e[0]: KIND_NAMES[e[1]] for e in d
                                     if _match_any(e[0], patterns)})

    def dump(self, *patterns: str) -> dict:
        """{name: value} of the entries matching, all from one update."""
        return self._read(lambda d: {e[0]: self._value(d, e) for e in d
                                     if _match_any(e[0], patterns)})

    def __getitem__(self, name: str):
        v = self._read(lambda d: [self._value(d, e) for e in d if e[0] == name])
        if not v:
            raise KeyError(name)
        return v[0]

    def __contains__(self, name: str) -> bool:
        return name in self.ls(f"^{name}$")


class _Corrupt(Exception):
    pass


def default_socket() -> str:
    """`stats.sock` beside the daemon's default CLI socket."""
    if os.geteuid() == 0:
        return "/run/sluice/stats.sock"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return os.path.join(xdg, "sluice", "stats.sock")
    return f"/tmp/sluice-{os.geteuid()}/stats.sock"
