"""Python client of Sluice's control API, built at run time from the `.api` schema files
(vpp_papi style)::

    from sluice_papi import Client
    with Client("/run/sluice/api.sock") as c:
        lo = c.create_loopback().sw_if_index
        c.sw_interface_add_del_address(sw_if_index=lo, is_add=True, prefix="10.0.0.1/24")
        c.ip_route_add_del(is_add=True, prefix="10.1.0.0/16",
                           paths=[{"next_hop": "10.0.0.2"}])
        for r in c.ip_route_dump(table_id=0):
            print(r.prefix, r.paths)

Requests return the reply record, dumps a list of detail records, failures raise
`ApiError` (with `retval` and the daemon's one-line `message`). Events: subscribe with the
`want_*` message and read them with `c.events()` (an iterator) or `c.on_event(callback)`.
Wire format and codes: docs/api.md.
"""

from __future__ import annotations

import collections
import enum
import ipaddress
import socket
import struct
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from . import schema as _schema
from .schema import Schema, SchemaError, default_api_dirs, load  # noqa: F401

__all__ = ["Client", "ApiError", "SchemaError", "Retval", "load_schemas"]

#: Largest frame either side sends (crates/api/src/lib.rs MAX_MESSAGE).
MAX_MESSAGE = 256 * 1024
HEADER = struct.Struct("<IHI")
PROTOCOL_VERSION = 1
NO_SUCH_MESSAGE = 0xFFFF


class Retval(enum.IntEnum):
    """Stable result codes (crates/api/src/lib.rs `Retval`)."""
    OK = 0
    UNSPECIFIED = -1
    INVALID_VALUE = -2
    NO_SUCH_INTERFACE = -3
    NO_SUCH_ENTRY = -4
    ALREADY_EXISTS = -5
    NO_SUCH_TABLE = -6
    IN_USE = -7
    NO_RESOURCES = -8
    NOT_SUPPORTED = -9
    SYSTEM_ERROR = -10
    UNKNOWN_MESSAGE = -100
    SCHEMA_MISMATCH = -101
    MALFORMED = -102
    TOO_BIG = -103
    NO_HELLO = -104
    NOT_A_REQUEST = -105


class ApiError(Exception):
    """A request the daemon refused: `retval` (a `Retval` when known) and `message`."""

    def __init__(self, retval: int, message: str, msg_name: str | None = None):
        try:
            rv: int = Retval(retval)
        except ValueError:
            rv = retval
        self.retval = rv
        self.message = message
        self.msg_name = msg_name
        name = rv.name if isinstance(rv, Retval) else str(rv)
        super().__init__(f"{msg_name + ': ' if msg_name else ''}{message} ({name})")


def load_schemas(dirs: Iterable[Path] | None = None) -> list[Schema]:
    """Every `*.api` in `dirs` (default: the repository's), plus the control messages."""
    dirs = list(dirs) if dirs is not None else default_api_dirs()
    files: list[Path] = []
    for d in dirs:
        files += sorted(Path(d).glob("*.api"))
    return [load(f) for f in files]


# ---- codec -----------------------------------------------------------------------------------

_SCALAR = {
    "u8": struct.Struct("<B"), "u16": struct.Struct("<H"), "u32": struct.Struct("<I"),
    "u64": struct.Struct("<Q"), "i8": struct.Struct("<b"), "i16": struct.Struct("<h"),
    "i32": struct.Struct("<i"), "i64": struct.Struct("<q"), "f64": struct.Struct("<d"),
}
_U32 = _SCALAR["u32"]


class DecodeError(Exception):
    pass


def _mac_bytes(v) -> bytes:
    if isinstance(v, (bytes, bytearray)) and len(v) == 6:
        return bytes(v)
    if isinstance(v, str):
        parts = v.replace("-", ":").split(":")
        if len(parts) == 6:
            try:
                return bytes(int(p, 16) for p in parts)
            except ValueError:
                pass
    raise ValueError(f"bad MAC address {v!r}")


def _addr(v):
    if isinstance(v, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return v
    return ipaddress.ip_address(v)


def _prefix(v):
    if isinstance(v, (ipaddress.IPv4Interface, ipaddress.IPv6Interface)):
        return v.ip, v.network.prefixlen
    if isinstance(v, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return v.network_address, v.prefixlen
    if isinstance(v, tuple) and len(v) == 2:
        return _addr(v[0]), int(v[1])
    if isinstance(v, str):
        i = ipaddress.ip_interface(v)
        return i.ip, i.network.prefixlen
    raise TypeError(f"expected a prefix (\"10.0.0.0/24\"), got {v!r}")


class _Codec:
    def __init__(self, s: Schema, enums: dict[str, type]):
        self.s = s
        self.enums = enums
        self.records: dict[str, type] = {}

    def record(self, name: str, fields) -> type:
        r = self.records.get(name)
        if r is None:
            r = collections.namedtuple(name, [f.name for f in fields])
            self.records[name] = r
        return r

    # -- encode --------------------------------------------------------------------------
    def enc_one(self, f, v, out: bytearray, where: str):
        k = f.kind
        try:
            if k == "scalar":
                if f.type == "bool":
                    if not isinstance(v, (bool, int)) or v not in (0, 1):
                        raise TypeError(f"expected a bool, got {v!r}")
                    out.append(1 if v else 0)
                elif f.type == "f64":
                    out += _SCALAR["f64"].pack(float(v))
                else:
                    if isinstance(v, bool) or not isinstance(v, int):
                        raise TypeError(f"expected an integer ({f.type}), got {v!r}")
                    out += _SCALAR[f.type].pack(v)
            elif k == "address":
                a = _addr(v)
                out.append(0 if a.version == 4 else 1)
                out += a.packed.ljust(16, b"\0")
            elif k == "prefix":
                a, ln = _prefix(v)
                a = _addr(a)
                out.append(0 if a.version == 4 else 1)
                out += a.packed.ljust(16, b"\0")
                out.append(ln)
            elif k == "mac_address":
                out += _mac_bytes(v)
            elif k == "string":
                if not isinstance(v, str):
                    raise TypeError(f"expected a string, got {v!r}")
                b = v.encode()
                if f.limit is not None and len(b) > f.limit:
                    raise ValueError(f"string of {len(b)} bytes exceeds its limit of {f.limit}")
                out += _U32.pack(len(b)) + b
            elif k == "enum":
                e = self.enums[f.type]
                if isinstance(v, str):
                    v = e[v]
                out += _SCALAR[self.s.enums[f.type].repr].pack(int(e(v)))
            else:
                self.enc_fields(self.s.typedefs[f.type].fields, v, out, where)
        except (struct.error, ValueError, TypeError, KeyError, OverflowError) as ex:
            raise TypeError(f"{where}.{f.name}: {ex}") from None

    def enc_fields(self, fields, values, out: bytearray, where: str):
        if values is None:
            values = {}
        elif not isinstance(values, dict):
            values = values._asdict() if hasattr(values, "_asdict") else dict(values)
        unknown = set(values) - {f.name for f in fields}
        if unknown:
            raise TypeError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        for f in fields:
            v = values.get(f.name, self.default(f))
            if f.array:
                if isinstance(v, (str, bytes, dict)) or not hasattr(v, "__iter__"):
                    raise TypeError(f"{where}.{f.name}: expected a list, got {v!r}")
                v = list(v)
                out += _U32.pack(len(v))
                for x in v:
                    self.enc_one(f, x, out, where)
            else:
                self.enc_one(f, v, out, where)

    def default(self, f):
        """An omitted field: the schema's `[default=<n>]` (an interface index that means
        "none" or "every" is 0xffffffff, never interface 0), else zero / empty."""
        if f.array:
            return []
        if f.default is not None:
            return f.default
        return {
            "scalar": False if f.type == "bool" else (0.0 if f.type == "f64" else 0),
            "address": "0.0.0.0", "prefix": "0.0.0.0/0", "mac_address": b"\0" * 6,
            "string": "", "struct": {},
        }.get(f.kind, 0) if f.kind != "enum" else self.s.enums[f.type].values[0][1]

    # -- decode --------------------------------------------------------------------------
    def dec_one(self, f, b: bytes, pos: int):
        k = f.kind
        if k == "scalar":
            if f.type == "bool":
                if pos >= len(b):
                    raise DecodeError("truncated")
                return b[pos] != 0, pos + 1
            st = _SCALAR[f.type]
            if pos + st.size > len(b):
                raise DecodeError("truncated")
            return st.unpack_from(b, pos)[0], pos + st.size
        if k in ("address", "prefix"):
            if pos + 17 > len(b):
                raise DecodeError("truncated")
            fam, raw = b[pos], b[pos + 1:pos + 17]
            a = ipaddress.IPv4Address(raw[:4]) if fam == 0 else ipaddress.IPv6Address(raw)
            pos += 17
            if k == "address":
                return a, pos
            if pos >= len(b):
                raise DecodeError("truncated")
            return ipaddress.ip_interface(f"{a}/{b[pos]}"), pos + 1
        if k == "mac_address":
            if pos + 6 > len(b):
                raise DecodeError("truncated")
            return ":".join(f"{x:02x}" for x in b[pos:pos + 6]), pos + 6
        if k == "string":
            if pos + 4 > len(b):
                raise DecodeError("truncated")
            (n,) = _U32.unpack_from(b, pos)
            pos += 4
            if pos + n > len(b):
                raise DecodeError("truncated")
            return b[pos:pos + n].decode(), pos + n
        if k == "enum":
            st = _SCALAR[self.s.enums[f.type].repr]
            (v,) = st.unpack_from(b, pos)
            try:
                v = self.enums[f.type](v)
            except ValueError:
                pass
            return v, pos + st.size
        t = self.s.typedefs[f.type]
        return self.dec_fields(t.name, t.fields, b, pos)

    def dec_fields(self, name, fields, b: bytes, pos: int):
        vals = []
        for f in fields:
            if f.array:
                if pos + 4 > len(b):
                    raise DecodeError("truncated")
                (n,) = _U32.unpack_from(b, pos)
                pos += 4
                lst = []
                for _ in range(n):
                    v, pos = self.dec_one(f, b, pos)
                    lst.append(v)
                vals.append(lst)
            else:
                v, pos = self.dec_one(f, b, pos)
                vals.append(v)
        return self.record(name, fields)(*vals), pos


# ---- client ----------------------------------------------------------------------------------

class _Msg:
    __slots__ = ("m", "codec", "id", "server_crc")

    def __init__(self, m, codec):
        self.m, self.codec, self.id, self.server_crc = m, codec, None, None


class Client:
    """A session with the daemon's API socket (see the module docstring)."""

    def __init__(self, path: str | Path, api_dirs: Iterable[Path] | None = None,
                 name: str = "sluice_papi", timeout: float = 30.0,
                 schemas: list[Schema] | None = None):
        self.path = str(path)
        self.name = name
        self.timeout = timeout
        self.schemas = schemas if schemas is not None else load_schemas(api_dirs)
        self.msgs: dict[str, _Msg] = {}
        self.by_id: dict[int, _Msg] = {}
        self.enums: dict[str, type] = {}
        for s in self.schemas:
            enums = {n: enum.IntEnum(n, [(m, v) for m, v in e.values])
                     for n, e in s.enums.items()}
            self.enums.update(enums)
            c = _Codec(s, enums)
            for m in s.messages:
                if m.name in self.msgs:
                    raise SchemaError(f"message `{m.name}' defined by two schema files")
                self.msgs[m.name] = _Msg(m, c)
        if "api_hello" not in self.msgs:
            raise SchemaError("control.api (api_hello) not found in the schema directories")
        self.sock: socket.socket | None = None
        self._buf = bytearray()
        self._pos = 0  # bytes of _buf already consumed
        self._context = 0
        self._events: collections.deque = collections.deque()
        self._callbacks: list[Callable[[str, Any], None]] = []
        self.server_version = ""
        self.modules: dict[str, tuple[str, int]] = {}

    # -- connection ----------------------------------------------------------------------
    def connect(self) -> "Client":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
        except OSError:
            s.close()
            raise
        self.sock = s
        # Fixed ids of the control messages.
        for i, n in enumerate(("api_hello", "api_hello_reply", "api_error", "api_dump_end")):
            self.msgs[n].id = i
            self.by_id[i] = self.msgs[n]
        names = [{"name": n, "crc": m.m.crc} for n, m in self.msgs.items()]
        r = self._call("api_hello", {"client_name": self.name, "messages": names})
        self.server_version = r.server_version
        self.modules = {m.name: (m.version, m.crc) for m in r.modules}
        for e in r.messages:
            m = self.msgs[e.name]
            if e.id != NO_SUCH_MESSAGE:
                m.id, m.server_crc = e.id, e.crc
                self.by_id[e.id] = m
        return self

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self) -> "Client":
        return self.connect()

    def __exit__(self, *exc) -> None:
        self.close()

    def mismatched(self) -> list[str]:
        """Messages whose CRC differs from the daemon's (the daemon refuses them)."""
        return sorted(n for n, m in self.msgs.items()
                      if m.server_crc is not None and m.server_crc != m.m.crc)

    # -- frames --------------------------------------------------------------------------
    def encode(self, name: str, kw: dict) -> bytes:
        m = self._msg(name)
        out = bytearray()
        m.codec.enc_fields(m.m.fields, kw, out, name)
        return bytes(out)

    def _msg(self, name: str) -> _Msg:
        m = self.msgs.get(name)
        if m is None:
            raise AttributeError(f"no API message `{name}' in the schema files")
        return m

    def send_raw(self, msg_id: int, body: bytes, context: int | None = None,
                 length: int | None = None) -> int:
        """Sends a frame as given (tests of bad input); returns its context."""
        if context is None:
            self._context = (self._context + 1) & 0xFFFFFFFF or 1
            context = self._context
        n = 6 + len(body) if length is None else length
        self.sock.sendall(HEADER.pack(n, msg_id, context) + body)
        return context

    def _recv_frame(self):
        while True:
            p = self._pos
            if len(self._buf) - p >= 4:
                (n,) = _U32.unpack_from(self._buf, p)
                if n > MAX_MESSAGE or n < 6:
                    raise ConnectionError(f"bad frame length {n} from the daemon")
                if len(self._buf) - p >= 4 + n:
                    _, mid, ctx = HEADER.unpack_from(self._buf, p)
                    body = bytes(self._buf[p + 10:p + 4 + n])
                    self._pos = p + 4 + n
                    return mid, ctx, body
            if self._pos:
                del self._buf[:self._pos]
                self._pos = 0
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the daemon closed the API connection")
            self._buf += chunk

    def _decode(self, mid: int, body: bytes):
        m = self.by_id.get(mid)
        if m is None:
            raise ConnectionError(f"unknown message id {mid} from the daemon")
        rec, pos = m.codec.dec_fields(m.m.name, m.m.fields, body, 0)
        if pos != len(body):
            raise DecodeError(f"{m.m.name}: {len(body) - pos} trailing bytes")
        return m.m.name, rec

    def _next(self, ctx: int):
        """The next frame for context `ctx` (events met on the way are queued)."""
        while True:
            mid, c, body = self._recv_frame()
            name, rec = self._decode(mid, body)
            if c == 0 and self.msgs[name].m.kind == "event" and name != "api_error":
                self._event(name, rec)
                continue
            if c != ctx:
                continue  # a reply to a request someone gave up on
            return name, rec

    def _event(self, name, rec):
        if self._callbacks:
            for cb in self._callbacks:
                cb(name, rec)
        else:
            self._events.append((name, rec))

    def _send(self, name: str, kw: dict) -> int:
        m = self._msg(name)
        if m.id is None:
            raise ApiError(Retval.UNKNOWN_MESSAGE,
                           f"the daemon does not have message `{name}'", name)
        return self.send_raw(m.id, self.encode(name, kw))

    def _call(self, name: str, kw: dict):
        m = self._msg(name)
        if m.m.kind not in ("request", "dump"):
            raise TypeError(f"`{name}' is a {m.m.kind}, not a request")
        ctx = self._send(name, kw)
        if m.m.kind == "dump":
            out = []
            while True:
                n, rec = self._next(ctx)
                if n == "api_error":
                    raise ApiError(rec.retval, rec.message, name)
                if n == "api_dump_end":
                    return out
                out.append(rec)
        n, rec = self._next(ctx)
        if n == "api_error":
            raise ApiError(rec.retval, rec.message, name)
        return rec

    def call(self, name: str, **kw):
        """Sends request or dump `name` and returns its reply (a list for a dump)."""
        return self._call(name, kw)

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in self.__dict__.get("msgs", {}):
            raise AttributeError(name)
        return lambda **kw: self._call(name, kw)

    def pipeline(self, name: str, requests: Iterable[dict], window: int = 4096) -> int:
        """Sends `requests` of message `name` without waiting for each reply (at most
        `window` in flight) and reads every reply; returns how many succeeded. The first
        failure is raised once every reply was read."""
        m = self._msg(name)
        if m.m.kind != "request" or m.id is None:
            raise TypeError(f"`{name}' is not a request the daemon has")
        pending: collections.deque = collections.deque()
        first_err, ok = None, 0
        out = bytearray()

        def drain(limit):
            nonlocal first_err, ok, out
            if out:
                self.sock.sendall(out)
                out = bytearray()
            while len(pending) > limit:
                ctx = pending.popleft()
                n, rec = self._next(ctx)
                if n == "api_error":
                    first_err = first_err or ApiError(rec.retval, rec.message, name)
                else:
                    ok += 1
        for kw in requests:
            self._context = (self._context + 1) & 0xFFFFFFFF or 1
            body = self.encode(name, kw)
            out += HEADER.pack(6 + len(body), m.id, self._context) + body
            pending.append(self._context)
            if len(pending) >= window:
                drain(window // 2)
        drain(0)
        if first_err:
            raise first_err
        return ok

    # -- events --------------------------------------------------------------------------
    def on_event(self, cb: Callable[[str, Any], None]) -> None:
        """Calls `cb(name, record)` for every event, as it is read (queued ones first)."""
        self._callbacks.append(cb)
        while self._events:
            cb(*self._events.popleft())

    def events(self, timeout: float | None = 1.0) -> Iterator[tuple[str, Any]]:
        """Yields (name, record) of events until none arrives within `timeout` seconds."""
        while True:
            if self._events:
                yield self._events.popleft()
                continue
            self.sock.settimeout(timeout)
            try:
                mid, c, body = self._recv_frame()
            except (socket.timeout, TimeoutError):
                return
            finally:
                self.sock.settimeout(self.timeout)
            name, rec = self._decode(mid, body)
            if c == 0:
                yield name, rec

    def wait_event(self, name: str, pred: Callable[[Any], bool] = lambda r: True,
                   timeout: float = 5.0):
        """The first event `name` matching `pred` (others are dropped), or None."""
        import time
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for n, rec in self.events(timeout=max(0.01, end - time.monotonic())):
                if n == name and pred(rec):
                    return rec
                if time.monotonic() >= end:
                    break
        return None
