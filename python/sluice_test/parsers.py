"""Parsers for the daemon's `show` commands. Each raises ValueError on output it does not
understand, so a format change fails the tests loudly instead of reading as zero."""

from __future__ import annotations

import re

from dataclasses import dataclass, field


def _table_rows(text: str, first_header_word: str) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines[0].split()[0] != first_header_word:
        raise ValueError(f"unexpected table header (want `{first_header_word}'): {text!r}")
    return lines[1:]


def parse_errors(text: str) -> dict[tuple[str, str], int]:
    """`show errors [verbose]` -> {(node, reason): count}.

    Columns: Count Node Reason Severity; reasons contain spaces, node names and severities
    do not."""
    out: dict[tuple[str, str], int] = {}
    for line in _table_rows(text, "Count"):
        tok = line.split()
        if len(tok) < 4 or not tok[0].isdigit():
            raise ValueError(f"bad `show errors' row: {line!r}")
        key = (tok[1], " ".join(tok[2:-1]))
        out[key] = out.get(key, 0) + int(tok[0])
    return out


def parse_interfaces(text: str) -> dict[str, dict[str, int]]:
    """`show interface` -> {name: {counter: count}} with an entry (maybe empty) per interface.

    An interface's first row is `Name Idx State MTU [Counter Count]`; further counters are on
    indented rows `Counter Count`. Counter names contain spaces (`rx packets`)."""
    out: dict[str, dict[str, int]] = {}
    cur: str | None = None
    for line in _table_rows(text, "Name"):
        tok = line.split()
        if not line[0].isspace():
            if len(tok) < 4:
                raise ValueError(f"bad `show interface' row: {line!r}")
            cur = tok[0]
            out[cur] = {}
            rest = tok[4:]
        else:
            if cur is None:
                raise ValueError(f"counter row before any interface: {line!r}")
            rest = tok
        if rest:
            if len(rest) < 2 or not rest[-1].isdigit():
                raise ValueError(f"bad `show interface' counter: {line!r}")
            out[cur][" ".join(rest[:-1])] = int(rest[-1])
    return out


def parse_buffers_used(text: str) -> int:
    """`show buffers` -> the `Used` column of the `default-numa-0` pool."""
    for line in text.splitlines():
        if line.startswith("default-numa-0"):
            tok = line.split()
            # name index numa size data-size total free cached used alloc-fail lent
            if len(tok) < 9 or not tok[8].isdigit():
                raise ValueError(f"bad `show buffers' pool row: {line!r}")
            return int(tok[8])
    raise ValueError(f"no default-numa-0 pool in `show buffers':\n{text}")


@dataclass
class PgStream:
    name: str
    enabled: bool
    count: int
    parameters: str


def parse_pg_streams(text: str) -> dict[str, PgStream]:
    """`show packet-generator` -> {name: PgStream} (columns Name Enabled Count Parameters)."""
    out = {}
    for line in _table_rows(text, "Name"):
        tok = line.split(None, 3)
        if len(tok) < 3 or tok[1] not in ("Yes", "No") or not tok[2].isdigit():
            raise ValueError(f"bad `show packet-generator' row: {line!r}")
        out[tok[0]] = PgStream(tok[0], tok[1] == "Yes", int(tok[2]),
                               tok[3] if len(tok) > 3 else "")
    return out


@dataclass
class FibEntry:
    prefix: str
    #: Sources that contributed the route (`static`, `connected`, `local`, `adjacency`;
    #: `special` for VPP's default entries); only with `detail` or a prefix asked for.
    sources: list[str] = field(default_factory=list)
    #: The lines under the prefix as VPP prints them: `unicast-ip4-chain`,
    #: `[@0]: dpo-load-balance: [proto:ip4 index:9 buckets:1 uRPF:9 to:[0:0]]`,
    #: `[0] [@5]: ipv4 via 10.0.1.2 pg1: mtu:1500 next:2 flags:[] ...`; with `detail`, also
    #: `via 10.9.0.1 recursive` for a recursive next hop.
    paths: list[str] = field(default_factory=list)
    #: The DPO of each load-balance bucket (`[@5]: ipv4 via ...`, `[@0]: dpo-drop ip4`).
    buckets: list[str] = field(default_factory=list)


def parse_fib(text: str) -> dict[str, FibEntry]:
    """`show ip fib [...]` or `show ip6 fib [...]` -> {prefix: FibEntry}. Output of several
    tables (no `table <id>`) merges them: ask for one table to tell them apart."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith(("ipv4-VRF", "ipv6-VRF")):
        raise ValueError(f"unexpected `show ip fib' output: {text!r}")
    out: dict[str, FibEntry] = {}
    cur: FibEntry | None = None
    for line in lines[1:]:
        if not line.strip():
            continue
        s = line.strip()
        if s.startswith(("ipv4-VRF", "ipv6-VRF")):
            cur = None
            continue
        if not line[0].isspace():
            pfx = s.split()[0]
            cur = out.setdefault(pfx, FibEntry(pfx))
        elif cur is None:
            raise ValueError(f"`show ip fib' row before any prefix: {line!r}")
        elif s.startswith("source:"):
            cur.sources += [x.strip() for x in s.split(":", 1)[1].split(",") if x.strip()]
        else:
            cur.paths.append(s)
            m = re.match(r"\[\d+\] (\[@\d+\]: .*)$", s)
            if m:
                cur.buckets.append(m.group(1))
    return out


@dataclass
class Neighbor:
    ip: str
    flags: str
    mac: str
    interface: str


def parse_neighbors(text: str) -> list[Neighbor]:
    """`show ip[4|6] neighbors` -> rows (VPP's columns Age IP Flags Ethernet Interface; the
    age of a static entry is `-`)."""
    out = []
    for line in _table_rows(text, "Age"):
        tok = line.split()
        if len(tok) == 5:
            out.append(Neighbor(*tok[1:]))
        else:
            raise ValueError(f"bad `show ip neighbors' row: {line!r}")
    return out


def _interface_address_lines(text: str):
    """`show interface address` -> (interface, None, None) for an interface's own line and
    (interface, line, tokens) for each indented line under it (interface None before the
    first one)."""
    cur = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            cur = line.split()[0]
            yield cur, None, None
        else:
            yield cur, line, line.split()


def parse_interface_addresses(text: str) -> dict[str, list[str]]:
    """`show interface address` -> {interface: [prefix, ...]} (the `ip4 table-id N
    fib-idx F` suffix of an interface in a VRF table is not kept)."""
    out: dict[str, list[str]] = {}
    for cur, line, tok in _interface_address_lines(text):
        if tok is None:
            out[cur] = []
            continue
        if cur is not None and len(tok) == 5 and tok[1] == "table-id":
            continue  # an interface in a table, without addresses
        if cur is None or len(tok) not in (2, 7) or tok[0] != "L3":
            raise ValueError(f"bad `show interface address' row: {line!r}")
        out[cur].append(tok[1])
    return out


def parse_interface_tables(text: str) -> dict[str, dict[str, int]]:
    """`show interface address` -> {interface: {"ip4"|"ip6": table id}} for interfaces in a
    table other than 0 (from the `ip4 table-id N fib-idx F` suffixes)."""
    out: dict[str, dict[str, int]] = {}
    for cur, _, tok in _interface_address_lines(text):
        if cur is not None and tok is not None and "table-id" in tok:
            k = tok.index("table-id")
            out.setdefault(cur, {})[tok[k - 1]] = int(tok[k + 1])
    return out


@dataclass
class ArcFeature:
    """One enabled feature of `show interface features`; a counter feature
    (`<arc>-count`) carries its packets/bytes."""
    name: str
    packets: int | None = None
    bytes: int | None = None


def parse_features(text: str) -> dict[str, list[ArcFeature]]:
    """`show interface features <if>` -> {arc: [enabled features in order]}."""
    out: dict[str, list[ArcFeature]] = {}
    arc = None
    for ln in text.splitlines():
        if not ln.strip() or ln.startswith("Feature paths"):
            continue
        if not ln.startswith(" "):
            if not ln.endswith(":"):
                raise ValueError(f"show interface features: unexpected line {ln!r}")
            arc = ln[:-1]
            out[arc] = []
            continue
        if arc is None:
            raise ValueError(f"show interface features: feature before an arc: {ln!r}")
        s = ln.strip()
        if s == "none configured":
            continue
        m = re.fullmatch(r"(\S+)(?: \(packets (\d+), bytes (\d+)\))?", s)
        if not m:
            raise ValueError(f"show interface features: unexpected line {ln!r}")
        f = ArcFeature(m.group(1))
        if m.group(2) is not None:
            f.packets, f.bytes = int(m.group(2)), int(m.group(3))
        out[arc].append(f)
    return out
