"""The `.api` schema language (crates/api-schema/src/lib.rs is the reference): parser,
canonical form and CRC, kept byte-for-byte identical to the Rust side so that the CRCs the
client sends in `api_hello` match the daemon's for identical definitions."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

SCALARS = {"u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64", "f64", "bool"}
BUILTINS = {"address", "prefix", "mac_address", "string"}


class SchemaError(Exception):
    """`file:line: message`."""


@dataclass
class Field:
    name: str
    type: str            # scalar, builtin, enum name or typedef name
    kind: str            # "scalar", "address", "prefix", "mac_address", "string", "enum", "struct"
    array: bool = False
    limit: int | None = None   # string limit
    default: int | None = None  # `[default=<n>]`: sent when the caller omits the field


@dataclass
class Enum:
    name: str
    repr: str
    values: list[tuple[str, int]]


@dataclass
class Struct:
    name: str
    fields: list[Field]


@dataclass
class Message:
    name: str
    kind: str            # "request", "reply", "dump", "details", "event"
    fields: list[Field]
    doc: str = ""
    module: str = ""
    crc: int = 0


@dataclass
class Schema:
    module: str
    version: str = ""
    enums: dict[str, Enum] = field(default_factory=dict)
    typedefs: dict[str, Struct] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)

    # -- canonical form (must match the Rust implementation exactly) -------------------
    def _canon_type(self, f: Field) -> str:
        if f.kind == "scalar" or f.kind in ("address", "prefix", "mac_address"):
            return f.type
        if f.kind == "string":
            return "string" if f.limit is None else f"string<{f.limit}>"
        if f.kind == "enum":
            e = self.enums[f.type]
            vals = "".join(f"{m}={v}," for m, v in e.values)
            return f"enum {e.name}:{e.repr}{{{vals}}}"
        s = self.typedefs[f.type]
        return s.name + self._canon_fields(s.fields)

    def _canon_fields(self, fields: list[Field]) -> str:
        out = "{"
        for f in fields:
            out += self._canon_type(f) + " " + f.name + ("[]" if f.array else "") + ";"
        return out + "}"

    def canonical(self, m: Message) -> str:
        return m.name + self._canon_fields(m.fields)

    def crc(self, m: Message) -> int:
        return zlib.crc32(self.canonical(m).encode())

    def module_crc(self) -> int:
        s = self.version + "".join("\n" + self.canonical(m) for m in self.messages)
        return zlib.crc32(s.encode())


_TOKEN = re.compile(r"""
    (?P<nl>\n) | (?P<ws>[ \t\r]+) | (?P<lc>(\#|//)[^\n]*) | (?P<bc>/\*.*?\*/) |
    (?P<str>"[^"\n]*") | (?P<num>0x[0-9a-fA-F]+|[0-9][0-9a-zA-Z]*) |
    (?P<word>[A-Za-z_][A-Za-z0-9_]*) | (?P<punct>[{}\[\];:=,])
""", re.X | re.S)

_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def _tokenize(text: str, file: str):
    toks, pos, line = [], 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            if text.startswith("/*", pos):
                raise SchemaError(f"{file}:{line}: unterminated comment")
            raise SchemaError(f"{file}:{line}: unexpected character `{text[pos]}'")
        kind, val = m.lastgroup, m.group()
        if kind == "nl":
            line += 1
        elif kind == "bc":
            if val.startswith("/**"):
                body = val[3:-2]
                doc = " ".join(x.strip().lstrip("*").strip() for x in body.splitlines())
                toks.append(("doc", " ".join(doc.split()), line))
            line += val.count("\n")
        elif kind == "str":
            toks.append(("str", val[1:-1], line))
        elif kind == "num":
            try:
                toks.append(("num", int(val, 0), line))
            except ValueError:
                raise SchemaError(f"{file}:{line}: bad number `{val}'") from None
        elif kind in ("word", "punct"):
            toks.append((kind, val, line))
        pos = m.end()
    return toks


def parse(module: str, text: str, file: str = "<api>") -> Schema:
    toks = _tokenize(text, file)
    i = 0
    s = Schema(module)

    def err(msg, at=None):
        ln = toks[min(at if at is not None else i, len(toks) - 1)][2] if toks else 1
        return SchemaError(f"{file}:{ln}: {msg}")

    def peek():
        return toks[i] if i < len(toks) else (None, None, 0)

    def expect(p):
        nonlocal i
        k, v, _ = peek()
        if k == "punct" and v == p:
            i += 1
            return
        raise err(f"expected `{p}', got `{v}'")

    def eat(p):
        nonlocal i
        k, v, _ = peek()
        if k == "punct" and v == p:
            i += 1
            return True
        return False

    def word(what):
        nonlocal i
        k, v, _ = peek()
        if k != "word":
            raise err(f"expected {what}, got `{v}'")
        i += 1
        return v

    def name(what):
        v = word(what)
        if not _NAME.match(v):
            raise err(f"bad {what} `{v}'", i - 1)
        return v

    def default_option(t):
        """`[default=<n>]` after a field name (unsigned scalars; not in the CRC)."""
        nonlocal i
        k1, v1, _ = toks[i + 1] if i + 1 < len(toks) else (None, None, 0)
        if peek()[:2] != ("punct", "[") or (k1, v1) != ("word", "default"):
            return None
        i += 2
        expect("=")
        bits = {"u8": 8, "u16": 16, "u32": 32, "u64": 64}.get(t)
        if bits is None:
            raise err(f"`default' needs an unsigned scalar, not `{t}'")
        k, v, _ = peek()
        if k != "num":
            raise err(f"expected a number, got `{v}'")
        if v >> bits:
            raise err(f"default {v} does not fit {t}")
        i += 1
        expect("]")
        return v

    def fields():
        nonlocal i
        expect("{")
        out: list[Field] = []
        while not eat("}"):
            t = word("a field type")
            n = name("field name")
            if any(f.name == n for f in out):
                raise err(f"duplicate field `{n}'", i - 1)
            array, limit = False, None
            default = default_option(t)
            if default is None and eat("["):
                k, v, _ = peek()
                if k == "num" and t == "string":
                    limit = v
                    i += 1
                elif not (k == "punct" and v == "]"):
                    raise err(f"expected `]', got `{v}'")
                elif t != "string":
                    array = True
                expect("]")
            if t in SCALARS:
                kind = "scalar"
            elif t in BUILTINS:
                kind = t
            elif t in s.enums:
                kind = "enum"
            elif t in s.typedefs:
                kind = "struct"
            else:
                raise err(f"unknown type `{t}'", i - 2)
            expect(";")
            out.append(Field(n, t, kind, array, limit, default))
        expect(";")
        return out

    doc = ""
    while i < len(toks):
        k, w, _ = toks[i]
        i += 1
        if k == "doc":
            doc = w
            continue
        if k != "word":
            raise err(f"expected a definition, got `{w}'", i - 1)
        if w == "option":
            key = word("option name")
            expect("=")
            k2, v, _ = peek()
            if k2 != "str":
                raise err("expected a quoted value")
            i += 1
            expect(";")
            if key != "version":
                raise err(f"unknown option `{key}'")
            s.version = v
        elif w == "enum":
            n = name("enum name")
            rep = "u32"
            if eat(":"):
                rep = word("u8, u16 or u32")
            expect("{")
            vals: list[tuple[str, int]] = []
            while not eat("}"):
                m = name("enum member")
                if eat("="):
                    k2, v, _ = peek()
                    if k2 != "num":
                        raise err("expected a number")
                    i += 1
                else:
                    v = vals[-1][1] + 1 if vals else 0
                vals.append((m, v))
                if not eat(","):
                    expect("}")
                    break
            expect(";")
            s.enums[n] = Enum(n, rep, vals)
        elif w == "typedef":
            n = name("typedef name")
            s.typedefs[n] = Struct(n, fields())
        elif w in ("define", "autoreply", "event"):
            auto, event = w == "autoreply", w == "event"
            if auto or event:
                if word("`define'") != "define":
                    raise err("expected `define'", i - 1)
            n = name("message name")
            fs = fields()
            if event:
                kind = "event"
            elif n.endswith("_reply"):
                kind = "reply"
            elif n.endswith("_details"):
                kind = "details"
            elif n.endswith("_dump"):
                kind = "dump"
            else:
                kind = "request"
            s.messages.append(Message(n, kind, fs, doc, module))
            doc = ""
            if auto:
                s.messages.append(Message(n + "_reply", "reply", [], "", module))
        else:
            raise err(f"expected option, enum, typedef, define, autoreply define or event "
                      f"define, got `{w}'", i - 1)
    if not s.version:
        raise SchemaError(f"{file}:1: missing `option version = \"x.y.z\";'")
    for m in s.messages:
        m.crc = s.crc(m)
    return s


def load(path: Path) -> Schema:
    path = Path(path)
    return parse(path.stem, path.read_text(), str(path))


def default_api_dirs() -> list[Path]:
    """The repository's schema directories: crates/*/api and plugins/*/api."""
    root = Path(__file__).resolve().parents[2]
    dirs = sorted(root.glob("crates/*/api")) + sorted(root.glob("plugins/*/api"))
    return [d for d in dirs if d.is_dir()]
