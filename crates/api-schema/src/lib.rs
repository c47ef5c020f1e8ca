//! The `.api` schema language of Sluice's control API (a subset of VPP's `.api` syntax), its
//! content hashes and the Rust code generated from it.
//!
//! One `.api` file per subsystem describes its messages; the daemon's handlers are written
//! against the Rust types generated from it at build time ([`rust::generate`], called from a
//! `build.rs`), and the Python client (`python/sluice_papi`) parses the same files at run
//! time. Both compute every message's CRC from its [canonical form](Schema::canonical) and
//! compare them when a client connects, as VPP does. `docs/api.md` describes the language.
//!
//! ```text
//! option version = "1.0.0";
//! enum rx_mode : u8 { polling = 1, interrupt = 2, adaptive = 3, };
//! typedef fib_path { u32 sw_if_index; address next_hop; u32 weight; };
//! autoreply define sw_interface_set_flags { u32 sw_if_index; bool admin_up; };
//! define sw_interface_dump { u32 sw_if_index; };
//! define sw_interface_details { u32 sw_if_index; string name[64]; };
//! event define sw_interface_event { u32 sw_if_index; bool admin_up; bool link_up; };
//! ```

pub mod rust;

use std::collections::BTreeMap;

/// A fixed-size scalar.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scalar {
    /// `u8`.
    U8,
    /// `u16`.
    U16,
    /// `u32`.
    U32,
    /// `u64`.
    U64,
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `f64`.
    F64,
    /// `bool` (one byte, 0 or 1).
    Bool,
}

impl Scalar {
    /// Every scalar with its schema name.
    pub const ALL: [(Scalar, &'static str); 10] = [
        (Scalar::U8, "u8"),
        (Scalar::U16, "u16"),
        (Scalar::U32, "u32"),
        (Scalar::U64, "u64"),
        (Scalar::I8, "i8"),
        (Scalar::I16, "i16"),
        (Scalar::I32, "i32"),
        (Scalar::I64, "i64"),
        (Scalar::F64, "f64"),
        (Scalar::Bool, "bool"),
    ];

    /// The schema name (`u32`).
    pub fn name(self) -> &'static str {
        Scalar::ALL
            .iter()
            .find(|(s, _)| *s == self)
            .map(|(_, n)| *n)
            .unwrap_or("?")
    }

    fn parse(w: &str) -> Option<Scalar> {
        Scalar::ALL.iter().find(|(_, n)| *n == w).map(|(s, _)| *s)
    }
}

/// A field's type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldType {
    /// A scalar.
    Scalar(Scalar),
    /// `address`: an IPv4 or IPv6 address (1 byte family, 16 bytes).
    Address,
    /// `prefix`: an address and a prefix length (18 bytes).
    Prefix,
    /// `mac_address`: 6 bytes.
    MacAddress,
    /// `string name[N]` (at most N bytes of UTF-8; `[]`: up to the message limit).
    String(Option<u32>),
    /// An `enum` of this file.
    Enum(String),
    /// A `typedef` of this file.
    Struct(String),
}

/// One field of a message or typedef.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Name.
    pub name: String,
    /// Type.
    pub ty: FieldType,
    /// `T name[]`: a variable-length array (u32 count, then the elements).
    pub array: bool,
    /// `u32 name [default=0xffffffff]`: what a client sends when the caller omits the field
    /// (unsigned scalars only; None: zero). Not part of the canonical form or the CRC: it
    /// changes no encoding.
    pub default: Option<u64>,
}

/// An `enum name : u8 { a = 1, ... };`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnumDef {
    /// Name.
    pub name: String,
    /// Representation (an unsigned scalar).
    pub repr: Scalar,
    /// Members in order.
    pub values: Vec<(String, u64)>,
}

/// A `typedef name { ... };`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StructDef {
    /// Name.
    pub name: String,
    /// Fields in order.
    pub fields: Vec<Field>,
}

/// What a message is for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MsgKind {
    /// A request answered by `<name>_reply`.
    Request,
    /// The reply to a request.
    Reply,
    /// `<x>_dump`: answered by any number of `<x>_details`, then the end of the dump.
    Dump,
    /// One record of a dump.
    Details,
    /// `event define`: sent by the server to subscribed clients.
    Event,
}

/// A message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageDef {
    /// Name (`ip_route_add_del`).
    pub name: String,
    /// Kind.
    pub kind: MsgKind,
    /// Fields in order.
    pub fields: Vec<Field>,
    /// The `/** ... */` comment before it, if any.
    pub doc: String,
}

/// A parsed `.api` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    /// Module name (the file stem: `ip` for `ip.api`).
    pub module: String,
    /// `option version = "x.y.z";`.
    pub version: String,
    /// Enums by name.
    pub enums: BTreeMap<String, EnumDef>,
    /// Typedefs by name.
    pub typedefs: BTreeMap<String, StructDef>,
    /// Messages in file order.
    pub messages: Vec<MessageDef>,
}

/// A schema error: `file:line: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {msg}")]
pub struct SchemaError {
    /// File name as given.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong, quoting the token.
    pub msg: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(String),
    Str(String),
    Num(u64),
    Punct(char),
    Doc(String),
}

fn tokenize(text: &str, file: &str) -> Result<Vec<(Tok, usize)>, SchemaError> {
    let err = |line, msg: String| SchemaError {
        file: file.to_string(),
        line,
        msg,
    };
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        let c = b[i] as char;
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c == '#' || text[i..].starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if text[i..].starts_with("/*") {
            let start = line;
            let end = text[i + 2..]
                .find("*/")
                .ok_or_else(|| err(start, "unterminated comment".into()))?;
            let body = &text[i + 2..i + 2 + end];
            line += body.matches('\n').count();
            if let Some(d) = body.strip_prefix('*') {
                let doc: Vec<&str> = d
                    .lines()
                    .map(|l| l.trim().trim_start_matches('*').trim())
                    .filter(|l| !l.is_empty())
                    .collect();
                out.push((Tok::Doc(doc.join(" ")), start));
            }
            i += end + 4;
        } else if c == '"' {
            let end = text[i + 1..]
                .find(['"', '\n'])
                .filter(|&e| b[i + 1 + e] == b'"')
                .ok_or_else(|| err(line, "unterminated string".into()))?;
            out.push((Tok::Str(text[i + 1..i + 1 + end].to_string()), line));
            i += end + 2;
        } else if c.is_ascii_digit() {
            let s = i;
            while i < b.len() && (b[i] as char).is_ascii_alphanumeric() {
                i += 1;
            }
            let w = &text[s..i];
            let v = match w.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => w.parse(),
            }
            .map_err(|_| err(line, format!("bad number `{w}'")))?;
            out.push((Tok::Num(v), line));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let s = i;
            while i < b.len() && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Word(text[s..i].to_string()), line));
        } else if "{}[];:=,".contains(c) {
            out.push((Tok::Punct(c), line));
            i += 1;
        } else {
            let ch = text[i..].chars().next().unwrap_or('?');
            return Err(err(line, format!("unexpected character `{ch}'")));
        }
    }
    Ok(out)
}

struct Parser<'a> {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    file: &'a str,
}

fn valid_name(w: &str) -> bool {
    w.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && w.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl Parser<'_> {
    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or(self.toks.last())
            .map_or(1, |t| t.1)
    }

    fn err(&self, msg: impl Into<String>) -> SchemaError {
        SchemaError {
            file: self.file.to_string(),
            line: self.line(),
            msg: msg.into(),
        }
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|t| t.0.clone());
        self.pos += 1;
        t
    }

    fn describe(t: Option<&Tok>) -> String {
        match t {
            None => "end of file".into(),
            Some(Tok::Word(w)) => format!("`{w}'"),
            Some(Tok::Str(s)) => format!("`\"{s}\"'"),
            Some(Tok::Num(n)) => format!("`{n}'"),
            Some(Tok::Punct(c)) => format!("`{c}'"),
            Some(Tok::Doc(_)) => "a doc comment".into(),
        }
    }

    fn expect_punct(&mut self, c: char) -> Result<(), SchemaError> {
        if self.peek() == Some(&Tok::Punct(c)) {
            self.pos += 1;
            return Ok(());
        }
        Err(self.err(format!(
            "expected `{c}', got {}",
            Self::describe(self.peek())
        )))
    }

    fn eat_punct(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Punct(c)) {
            self.pos += 1;
            return true;
        }
        false
    }

    fn word(&mut self, what: &str) -> Result<String, SchemaError> {
        match self.peek() {
            Some(Tok::Word(w)) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            t => Err(self.err(format!("expected {what}, got {}", Self::describe(t)))),
        }
    }

    fn name(&mut self, what: &str) -> Result<String, SchemaError> {
        let w = self.word(what)?;
        if !valid_name(&w) {
            self.pos -= 1;
            return Err(self.err(format!(
                "bad {what} `{w}' (lower case letters, digits and `_')"
            )));
        }
        Ok(w)
    }

    fn fields(&mut self, s: &Schema) -> Result<Vec<Field>, SchemaError> {
        self.expect_punct('{')?;
        let mut out: Vec<Field> = Vec::new();
        while !self.eat_punct('}') {
            let tw = self.word("a field type")?;
            let name = self.name("field name")?;
            if out.iter().any(|f| f.name == name) {
                self.pos -= 1;
                return Err(self.err(format!("duplicate field `{name}'")));
            }
            let mut array = false;
            let mut limit = None;
            let default = self.default_option(&tw)?;
            if default.is_none() && self.eat_punct('[') {
                match self.peek() {
                    Some(Tok::Num(n)) if tw == "string" => {
                        let n =
                            u32::try_from(*n).map_err(|_| self.err("string limit too large"))?;
                        limit = Some(n);
                        self.pos += 1;
                    }
                    Some(Tok::Punct(']')) => array = tw != "string",
                    t => {
                        return Err(self.err(format!(
                            "expected `]'{}, got {}",
                            if tw == "string" { " or a length" } else { "" },
                            Self::describe(t)
                        )))
                    }
                }
                self.expect_punct(']')?;
            }
            let ty = match tw.as_str() {
                "address" => FieldType::Address,
                "prefix" => FieldType::Prefix,
                "mac_address" => FieldType::MacAddress,
                "string" => FieldType::String(limit),
                w => match Scalar::parse(w) {
                    Some(sc) => FieldType::Scalar(sc),
                    None if s.enums.contains_key(w) => FieldType::Enum(w.to_string()),
                    None if s.typedefs.contains_key(w) => FieldType::Struct(w.to_string()),
                    None => {
                        self.pos -= 2;
                        return Err(self.err(format!(
                            "unknown type `{w}' (scalars, address, prefix, mac_address, string, or an enum/typedef defined above)"
                        )));
                    }
                },
            };
            self.expect_punct(';')?;
            out.push(Field {
                name,
                ty,
                array,
                default,
            });
        }
        self.expect_punct(';')?;
        Ok(out)
    }

    /// `[default=<n>]` after a field name (VPP's field option), for an unsigned scalar of
    /// type `tw` that `n` fits.
    fn default_option(&mut self, tw: &str) -> Result<Option<u64>, SchemaError> {
        let is_default =
            |t: Option<&(Tok, usize)>| matches!(t, Some((Tok::Word(w), _)) if w == "default");
        if self.peek() != Some(&Tok::Punct('[')) || !is_default(self.toks.get(self.pos + 1)) {
            return Ok(None);
        }
        self.pos += 2;
        self.expect_punct('=')?;
        let bits = match Scalar::parse(tw) {
            Some(Scalar::U8) => 8,
            Some(Scalar::U16) => 16,
            Some(Scalar::U32) => 32,
            Some(Scalar::U64) => 64,
            _ => return Err(self.err(format!("`default' needs an unsigned scalar, not `{tw}'"))),
        };
        let v = match self.next() {
            Some(Tok::Num(n)) if bits == 64 || n >> bits == 0 => n,
            Some(Tok::Num(n)) => {
                self.pos -= 1;
                return Err(self.err(format!("default {n} does not fit {tw}")));
            }
            t => {
                self.pos -= 1;
                return Err(self.err(format!(
                    "expected a number, got {}",
                    Self::describe(t.as_ref())
                )));
            }
        };
        self.expect_punct(']')?;
        Ok(Some(v))
    }

    fn enum_def(&mut self, s: &Schema) -> Result<EnumDef, SchemaError> {
        let name = self.name("enum name")?;
        if s.enums.contains_key(&name) || s.typedefs.contains_key(&name) {
            self.pos -= 1;
            return Err(self.err(format!("`{name}' is defined twice")));
        }
        let repr = if self.eat_punct(':') {
            let w = self.word("u8, u16 or u32")?;
            match Scalar::parse(&w) {
                Some(r @ (Scalar::U8 | Scalar::U16 | Scalar::U32)) => r,
                _ => {
                    self.pos -= 1;
                    return Err(self.err(format!("enum type must be u8, u16 or u32, got `{w}'")));
                }
            }
        } else {
            Scalar::U32
        };
        self.expect_punct('{')?;
        let mut values: Vec<(String, u64)> = Vec::new();
        let max = match repr {
            Scalar::U8 => u8::MAX as u64,
            Scalar::U16 => u16::MAX as u64,
            _ => u32::MAX as u64,
        };
        while !self.eat_punct('}') {
            let m = self.name("enum member")?;
            let v = if self.eat_punct('=') {
                match self.next() {
                    Some(Tok::Num(n)) => n,
                    t => {
                        self.pos -= 1;
                        return Err(self.err(format!(
                            "expected a number, got {}",
                            Self::describe(t.as_ref())
                        )));
                    }
                }
            } else {
                values.last().map_or(0, |l| l.1 + 1)
            };
            if v > max {
                return Err(self.err(format!("value {v} of `{m}' does not fit {}", repr.name())));
            }
            if values.iter().any(|x| x.0 == m || x.1 == v) {
                return Err(self.err(format!("duplicate enum member or value `{m}'")));
            }
            values.push((m, v));
            if !self.eat_punct(',') {
                self.expect_punct('}')?;
                break;
            }
        }
        self.expect_punct(';')?;
        if values.is_empty() {
            return Err(self.err(format!("enum `{name}' has no members")));
        }
        Ok(EnumDef { name, repr, values })
    }
}

impl Schema {
    /// Parses the text of `<module>.api` (`file` names it in errors).
    pub fn parse(module: &str, text: &str, file: &str) -> Result<Schema, SchemaError> {
        let mut p = Parser {
            toks: tokenize(text, file)?,
            pos: 0,
            file,
        };
        let mut s = Schema {
            module: module.to_string(),
            version: String::new(),
            enums: BTreeMap::new(),
            typedefs: BTreeMap::new(),
            messages: Vec::new(),
        };
        let mut doc = String::new();
        while let Some(t) = p.next() {
            let w = match t {
                Tok::Doc(d) => {
                    doc = d;
                    continue;
                }
                Tok::Word(w) => w,
                t => {
                    p.pos -= 1;
                    return Err(p.err(format!(
                        "expected a definition, got {}",
                        Parser::describe(Some(&t))
                    )));
                }
            };
            match w.as_str() {
                "option" => {
                    let k = p.word("option name")?;
                    p.expect_punct('=')?;
                    let v = match p.next() {
                        Some(Tok::Str(v)) => v,
                        t => {
                            p.pos -= 1;
                            return Err(p.err(format!(
                                "expected a quoted value, got {}",
                                Parser::describe(t.as_ref())
                            )));
                        }
                    };
                    p.expect_punct(';')?;
                    if k != "version" {
                        return Err(p.err(format!("unknown option `{k}'")));
                    }
                    s.version = v;
                }
                "enum" => {
                    let e = p.enum_def(&s)?;
                    s.enums.insert(e.name.clone(), e);
                }
                "typedef" => {
                    let name = p.name("typedef name")?;
                    if s.enums.contains_key(&name) || s.typedefs.contains_key(&name) {
                        p.pos -= 1;
                        return Err(p.err(format!("`{name}' is defined twice")));
                    }
                    let fields = p.fields(&s)?;
                    s.typedefs.insert(name.clone(), StructDef { name, fields });
                }
                "define" | "autoreply" | "event" => {
                    let auto = w == "autoreply";
                    let event = w == "event";
                    if auto || event {
                        let d = p.word("`define'")?;
                        if d != "define" {
                            p.pos -= 1;
                            return Err(p.err(format!("expected `define', got `{d}'")));
                        }
                    }
                    let name = p.name("message name")?;
                    if s.messages.iter().any(|m| m.name == name) {
                        p.pos -= 1;
                        return Err(p.err(format!("message `{name}' is defined twice")));
                    }
                    let fields = p.fields(&s)?;
                    let kind = if event {
                        MsgKind::Event
                    } else if name.ends_with("_reply") {
                        MsgKind::Reply
                    } else if name.ends_with("_details") {
                        MsgKind::Details
                    } else if name.ends_with("_dump") {
                        MsgKind::Dump
                    } else {
                        MsgKind::Request
                    };
                    if auto && kind != MsgKind::Request {
                        return Err(
                            p.err(format!("`autoreply' on `{name}', which is not a request"))
                        );
                    }
                    s.messages.push(MessageDef {
                        name: name.clone(),
                        kind,
                        fields,
                        doc: std::mem::take(&mut doc),
                    });
                    if auto {
                        s.messages.push(MessageDef {
                            name: format!("{name}_reply"),
                            kind: MsgKind::Reply,
                            fields: Vec::new(),
                            doc: String::new(),
                        });
                    }
                }
                _ => {
                    p.pos -= 1;
                    return Err(p.err(format!(
                        "expected option, enum, typedef, define, autoreply define or event define, got `{w}'"
                    )));
                }
            }
        }
        if s.version.is_empty() {
            return Err(SchemaError {
                file: file.to_string(),
                line: 1,
                msg: "missing `option version = \"x.y.z\";'".into(),
            });
        }
        // Every request has its reply, every dump its details.
        for m in &s.messages {
            let want = match m.kind {
                MsgKind::Request => Some(format!("{}_reply", m.name)),
                MsgKind::Dump => Some(format!("{}_details", m.name.trim_end_matches("_dump"))),
                _ => None,
            };
            if let Some(w) = want {
                if !s.messages.iter().any(|x| x.name == w) {
                    return Err(SchemaError {
                        file: file.to_string(),
                        line: 1,
                        msg: format!("`{}' has no `{w}'", m.name),
                    });
                }
            }
        }
        Ok(s)
    }

    /// The message called `name`.
    pub fn message(&self, name: &str) -> Option<&MessageDef> {
        self.messages.iter().find(|m| m.name == name)
    }

    fn canon_type(&self, f: &Field, out: &mut String) {
        match &f.ty {
            FieldType::Scalar(s) => out.push_str(s.name()),
            FieldType::Address => out.push_str("address"),
            FieldType::Prefix => out.push_str("prefix"),
            FieldType::MacAddress => out.push_str("mac_address"),
            FieldType::String(None) => out.push_str("string"),
            FieldType::String(Some(n)) => {
                out.push_str("string<");
                out.push_str(&n.to_string());
                out.push('>');
            }
            FieldType::Enum(e) => {
                if let Some(d) = self.enums.get(e) {
                    out.push_str("enum ");
                    out.push_str(&d.name);
                    out.push(':');
                    out.push_str(d.repr.name());
                    out.push('{');
                    for (m, v) in &d.values {
                        out.push_str(m);
                        out.push('=');
                        out.push_str(&v.to_string());
                        out.push(',');
                    }
                    out.push('}');
                }
            }
            FieldType::Struct(t) => {
                if let Some(d) = self.typedefs.get(t) {
                    out.push_str(&d.name);
                    self.canon_fields(&d.fields, out);
                }
            }
        }
    }

    fn canon_fields(&self, fields: &[Field], out: &mut String) {
        out.push('{');
        for f in fields {
            self.canon_type(f, out);
            out.push(' ');
            out.push_str(&f.name);
            if f.array {
                out.push_str("[]");
            }
            out.push(';');
        }
        out.push('}');
    }

    /// The canonical form of a message: its name and its fields with every enum and typedef
    /// expanded, e.g. `ip_route_add_del{bool is_add;u32 table_id;prefix prefix;...}`. Its
    /// CRC is the message's content hash: anything that changes the encoding changes it.
    pub fn canonical(&self, m: &MessageDef) -> String {
        let mut out = m.name.clone();
        self.canon_fields(&m.fields, &mut out);
        out
    }

    /// The CRC-32 (IEEE) of a message's canonical form.
    pub fn crc(&self, m: &MessageDef) -> u32 {
        crc32(self.canonical(m).as_bytes())
    }

    /// The module's content hash: CRC-32 of its version and of every message's canonical
    /// form, one per line, in file order.
    pub fn module_crc(&self) -> u32 {
        let mut s = self.version.clone();
        for m in &self.messages {
            s.push('\n');
            s.push_str(&self.canonical(m));
        }
        crc32(s.as_bytes())
    }
}

/// CRC-32 (IEEE 802.3, reflected, as zlib's `crc32`).
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = r#"
        option version = "1.2.0";
        enum mode : u8 { polling = 1, interrupt, adaptive = 5, };
        typedef path { u32 sw_if_index; address nh; u32 weight; };
        /** Adds or deletes a route. */
        autoreply define route_add_del { bool is_add; prefix p; path paths[]; mode m; string tag[16]; };
        define route_dump { u32 table_id; };
        define route_details { prefix p; path paths[]; };
        event define route_event { prefix p; };
    "#;

    #[test]
    fn crc32_matches_zlib() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn parses_kinds_autoreply_and_canonical_form() {
        let s = Schema::parse("t", T, "t.api").unwrap();
        assert_eq!(s.version, "1.2.0");
        let kinds: Vec<(&str, MsgKind)> = s
            .messages
            .iter()
            .map(|m| (m.name.as_str(), m.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("route_add_del", MsgKind::Request),
                ("route_add_del_reply", MsgKind::Reply),
                ("route_dump", MsgKind::Dump),
                ("route_details", MsgKind::Details),
                ("route_event", MsgKind::Event),
            ]
        );
        assert_eq!(s.messages[0].doc, "Adds or deletes a route.");
        assert_eq!(s.enums["mode"].values[1], ("interrupt".to_string(), 2));
        assert_eq!(
            s.canonical(&s.messages[0]),
            "route_add_del{bool is_add;prefix p;path{u32 sw_if_index;address nh;u32 weight;} paths[];enum mode:u8{polling=1,interrupt=2,adaptive=5,} m;string<16> tag;}"
        );
    }

    #[test]
    fn default_option_is_kept_and_leaves_the_crc() {
        let with = "option version = \"1.0.0\";\nautoreply define d { u32 sw_if_index [default=0xffffffff]; u8 n [default=7]; u32 x; };";
        let s = Schema::parse("d", with, "d.api").unwrap();
        let f = &s.messages[0].fields;
        assert_eq!(
            (f[0].default, f[1].default, f[2].default),
            (Some(0xffff_ffff), Some(7), None)
        );
        let plain = Schema::parse(
            "d",
            &with
                .replace(" [default=0xffffffff]", "")
                .replace(" [default=7]", ""),
            "d.api",
        )
        .unwrap();
        assert_eq!(s.crc(&s.messages[0]), plain.crc(&plain.messages[0]));
        for (bad, want) in [
            (
                "string s [default=1];",
                "`default' needs an unsigned scalar, not `string'",
            ),
            ("u8 n [default=256];", "default 256 does not fit u8"),
            ("u32 n [default=x];", "expected a number, got `x'"),
            ("u32 n [default 1];", "expected `=', got `1'"),
        ] {
            let text = format!("option version = \"1.0.0\";\nautoreply define d {{ {bad} }};");
            let e = Schema::parse("d", &text, "d.api").unwrap_err().to_string();
            assert!(e.ends_with(want), "{bad}: {e}");
        }
    }

    #[test]
    fn any_change_to_the_encoding_changes_the_crc() {
        let s = Schema::parse("t", T, "t.api").unwrap();
        let c0 = s.crc(&s.messages[0]);
        for (from, to) in [
            ("u32 weight", "u16 weight"),
            ("adaptive = 5", "adaptive = 6"),
            ("string tag[16]", "string tag[17]"),
            ("path paths[]", "path paths"),
        ] {
            let t = T.replace(from, to);
            let s2 = Schema::parse("t", &t, "t.api").unwrap();
            assert_ne!(s2.crc(&s2.messages[0]), c0, "{from} -> {to}");
        }
        // Comments and layout do not.
        let t = T.replace("bool is_add;", "bool  is_add ; // add or delete\n");
        let s3 = Schema::parse("t", &t, "t.api").unwrap();
        assert_eq!(s3.crc(&s3.messages[0]), c0);
        assert_ne!(
            s3.module_crc(),
            Schema::parse("t", &T.replace("1.2.0", "1.3.0"), "x")
                .unwrap()
                .module_crc()
        );
    }

    #[test]
    fn errors_name_line_and_token() {
        let cases = [
            (
                "option version = \"1\";\ndefine x { u33 a; };",
                2,
                "unknown type `u33'",
            ),
            (
                "option version = \"1\";\ndefine x { u32 a; u32 a; };",
                2,
                "duplicate field `a'",
            ),
            (
                "option version = \"1\";\ndefine x { u32 a };",
                2,
                "expected `;', got `}'",
            ),
            (
                "option version = \"1\";\ndefine x { u32 a; };",
                1,
                "`x' has no `x_reply'",
            ),
            ("define x_reply { };", 1, "missing `option version"),
            (
                "option version = \"1\";\nenum e : u8 { a = 300 };",
                2,
                "does not fit u8",
            ),
            ("option version = \"1\";\nfrob x;", 2, "got `frob'"),
            (
                "option version = \"1\";\ndefine Bad_reply { };",
                2,
                "bad message name `Bad_reply'",
            ),
            ("/* open", 1, "unterminated comment"),
        ];
        for (text, line, msg) in cases {
            let e = Schema::parse("t", text, "t.api").unwrap_err();
            assert_eq!(e.line, line, "{text}: {e}");
            assert!(e.msg.contains(msg), "{text}: {e}");
        }
    }
}
