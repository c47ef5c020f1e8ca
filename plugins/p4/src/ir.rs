//! The pre-resolved, specialised form a P4 program is lowered to and the executor runs.
//!
//! Every name is resolved at compile time: header fields are byte offsets and shift/mask
//! pairs into one header area (`Ctx::hdr`, wire format), metadata fields (the program's
//! metadata struct, `standard_metadata`, locals) are slots of one `u64` array (`Ctx::meta`),
//! tables and actions are indices. With [`Opts::flat`] off, every field access goes through
//! a per-instance base table instead (what a program pays when its metadata is spread over
//! separate structures, PVPP's baseline).

/// Bytes of header storage per packet (all header instances of the program).
pub const HDR_MAX: usize = 256;
/// 64-bit metadata slots per packet (metadata struct + standard_metadata + locals).
pub const META_MAX: usize = 128;
/// Header instances per program (one validity bit each).
pub const INST_MAX: usize = 64;
/// Parameters per action.
pub const PARAMS_MAX: usize = 8;
/// Parser steps allowed when the state graph has a cycle (then the packet is dropped).
pub const PARSER_STEPS_MAX: u32 = 64;
/// v1model's drop port (`mark_to_drop` sets `egress_spec` to it).
pub const DROP_PORT: u64 = 511;
/// Sluice's CPU port: packets sent to it go to `punt`.
pub const CPU_PORT: u64 = 510;

/// The four PVPP optimisations, each switchable so its effect can be measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opts {
    /// Flattened metadata: fields at constant offsets (off: through a per-instance base).
    pub flat: bool,
    /// Table entries hold the action index and its parameters (off: a table-local action
    /// slot and parameters in a separate pool, resolved per lookup).
    pub resolved: bool,
    /// Keyless tables become direct action calls (off: p4c-style: kept as tables, and bare
    /// action calls in apply blocks become synthetic keyless tables).
    pub no_redundant: bool,
    /// Two packets per loop iteration, prefetching the next pair (off: one at a time, no
    /// prefetch).
    pub dual: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            flat: true,
            resolved: true,
            no_redundant: true,
            dual: true,
        }
    }
}

/// How a header field is read from the header area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HKind {
    /// One aligned byte.
    B8,
    /// Two aligned bytes, big-endian.
    B16,
    /// Four aligned bytes, big-endian.
    B32,
    /// `n` bytes big-endian (n <= 8), shifted right by `shift`, masked.
    Bits { n: u8, shift: u8, mask: u64 },
}

/// A header field access: byte offset (absolute, or relative to an instance base).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HAcc {
    pub off: u16,
    pub kind: HKind,
}

/// Unary operators (results masked to the width).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Un {
    Not,
    BitNot,
    Neg,
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    AddSat,
    SubSat,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LAnd,
    LOr,
}

/// An expression; values are `u64` (bool is 0/1), results masked to their width.
#[derive(Clone, Debug, PartialEq)]
pub enum E {
    Const(u64),
    /// Metadata slot.
    M(u16),
    /// Metadata slot relative to the base of instance `.0` (non-flat mode).
    MI(u8, u16),
    /// Header field.
    H(HAcc),
    /// Header field relative to the base of header instance `.0` (non-flat mode).
    HI(u8, HAcc),
    /// Validity bit of a header instance.
    Valid(u8),
    /// Action parameter.
    Param(u8),
    Un(Un, Box<E>, u64),
    Bin(Bin, Box<E>, Box<E>, u64),
    /// `(e >> shift) & mask`.
    Slice(Box<E>, u8, u64),
    /// `(a << wb) | b`.
    Concat(Box<E>, Box<E>, u8),
    Mux(Box<E>, Box<E>, Box<E>),
}

impl E {
    /// Calls `f` on this expression and then on each of its sub-expressions, depth first.
    pub fn walk(&self, f: &mut impl FnMut(&E)) {
        f(self);
        match self {
            E::Const(_) | E::M(_) | E::MI(..) | E::H(_) | E::HI(..) | E::Valid(_) | E::Param(_) => {
            }
            E::Un(_, a, _) | E::Slice(a, ..) => a.walk(f),
            E::Bin(_, a, b, _) | E::Concat(a, b, _) => {
                a.walk(f);
                b.walk(f);
            }
            E::Mux(k, a, b) => {
                k.walk(f);
                a.walk(f);
                b.walk(f);
            }
        }
    }
}

/// An assignable place.
#[derive(Clone, Debug, PartialEq)]
pub enum Lv {
    /// Metadata slot, with the mask of its width.
    M(u16, u64),
    MI(u8, u16, u64),
    H(HAcc),
    HI(u8, HAcc),
    /// Bits `[lo, lo+width)` of a place (read-modify-write).
    Slice(Box<Lv>, u8, u64),
}

impl Lv {
    /// The place as an expression (to read it).
    pub fn as_e(&self) -> E {
        match self {
            Lv::M(s, _) => E::M(*s),
            Lv::MI(i, s, _) => E::MI(*i, *s),
            Lv::H(a) => E::H(*a),
            Lv::HI(i, a) => E::HI(*i, *a),
            Lv::Slice(x, sh, m) => E::Slice(Box::new(x.as_e()), *sh, *m),
        }
    }
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum S {
    Set(Lv, E),
    /// Parser only: copy the header's bytes from the packet and mark it valid.
    Extract(u8),
    SetValid(u8),
    SetInvalid(u8),
    If(E, Vec<S>, Vec<S>),
    Apply(Apply),
    /// Direct action call with argument expressions.
    Call(u16, Vec<E>),
    /// `mark_to_drop`: egress_spec := 511.
    Drop,
    Exit,
    Return,
    /// `counter.count(index)`.
    Count(u16, E),
    /// `register.read(dst, index)`.
    RegRead(u16, Lv, E),
    /// `register.write(index, value)`.
    RegWrite(u16, E, E),
    /// `meter.execute_meter(index, dst)`.
    Meter(u16, E, Lv),
    Csum(Box<Csum>),
}

/// A table application and what follows from its result.
#[derive(Clone, Debug, PartialEq)]
pub struct Apply {
    pub table: u16,
    pub arms: Arms,
}

/// Branches on a table's result.
#[derive(Clone, Debug, PartialEq)]
pub enum Arms {
    None,
    /// `if (t.apply().hit) {..} else {..}` (miss: swapped).
    Hit(Vec<S>, Vec<S>),
    /// `switch (t.apply().action_run)`: body index per action (by action index), default.
    Switch {
        by_action: Vec<Option<u16>>,
        bodies: Vec<Vec<S>>,
        default: Option<u16>,
    },
}

/// `update_checksum`/`verify_checksum` with csum16.
#[derive(Clone, Debug, PartialEq)]
pub struct Csum {
    pub cond: E,
    pub src: CsumSrc,
    pub dst: Lv,
    /// The destination field as an expression (for verify).
    pub dst_e: E,
    pub verify: bool,
    /// standard_metadata.checksum_error slot (verify).
    pub err_slot: u16,
}

/// The data a checksum covers.
#[derive(Clone, Debug, PartialEq)]
pub enum CsumSrc {
    /// All fields of one header in order except the destination (16-bit, even offset):
    /// the header's bytes with the destination read as zero.
    Header { inst: u8, dst_off: u16 },
    /// Any field list: (value, width) concatenated, padded to 16 bits.
    Fields(Vec<(E, u16)>),
}

/// A header instance.
#[derive(Clone, Debug, PartialEq)]
pub struct HdrInst {
    /// Path below the headers struct (`ipv4`, `outer.eth`).
    pub name: String,
    /// Byte offset in the header area.
    pub off: u16,
    /// Size in bytes.
    pub len: u16,
    /// Fields: name, bit offset from the header start, width.
    pub fields: Vec<(String, u16, u16)>,
}

/// Where a parser transition goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    State(u16),
    Accept,
    Reject,
}

/// One key set of a select case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaseKey {
    /// (key & mask) == value; mask 0 matches anything.
    Mask(u64, u64),
    Range(u64, u64),
}

impl CaseKey {
    /// Whether key value `v` falls in this key set.
    #[inline]
    pub fn matches(self, v: u64) -> bool {
        match self {
            CaseKey::Mask(x, m) => v & m == x,
            CaseKey::Range(a, b) => v >= a && v <= b,
        }
    }
}

/// A parser state's transition.
#[derive(Clone, Debug, PartialEq)]
pub enum Trans {
    Goto(Target),
    /// Cases in order; no match is the `NoMatch` error.
    Select {
        keys: Vec<E>,
        cases: Vec<(Vec<CaseKey>, Target)>,
    },
}

/// A parser state.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    pub name: String,
    pub body: Vec<S>,
    pub trans: Trans,
}

/// Match kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchKind {
    Exact,
    Lpm,
    Ternary,
    Range,
}

impl MatchKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MatchKind::Exact => "exact",
            MatchKind::Lpm => "lpm",
            MatchKind::Ternary => "ternary",
            MatchKind::Range => "range",
        }
    }
}

/// One field of a table entry's match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Match {
    Exact(u64),
    /// Value and prefix length.
    Lpm(u64, u8),
    /// Value and mask.
    Ternary(u64, u64),
    /// Low and high, inclusive.
    Range(u64, u64),
}

/// A table key.
#[derive(Clone, Debug, PartialEq)]
pub struct Key {
    /// As written (`hdr.ipv4.dstAddr`), for `show`.
    pub name: String,
    pub e: E,
    pub kind: MatchKind,
    pub width: u16,
}

/// An entry as given by the program or the CLI (before it is placed in a table).
#[derive(Clone, Debug, PartialEq)]
pub struct EntrySpec {
    pub matches: Vec<Match>,
    pub action: u16,
    pub params: Vec<u64>,
    /// Higher wins (ternary/range); P4Runtime's convention.
    pub priority: u32,
}

/// A table.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    pub name: String,
    /// Control it belongs to.
    pub control: String,
    pub keys: Vec<Key>,
    /// Actions allowed (indices into `Program::actions`).
    pub actions: Vec<u16>,
    pub default: (u16, Vec<u64>),
    pub default_const: bool,
    /// `const entries` (the table is then read-only).
    pub const_entries: Option<Vec<EntrySpec>>,
    pub size: Option<u64>,
    /// Direct counter instance name.
    pub direct_counter: Option<String>,
    /// The `direct_meter` (`meters = <m>`; an index into `Program::meters`).
    pub direct_meter: Option<u16>,
    /// Synthetic (a bare action call wrapped by the compiler in non-optimised mode).
    pub synthetic: bool,
}

impl Table {
    /// `control.table`: the name that finds this table whatever the other controls hold.
    pub fn qualified(&self) -> String {
        qualified(&self.control, &self.name)
    }

    /// Whether entries carry a priority (a ternary or range key, P4Runtime's rule).
    pub fn prioritised(&self) -> bool {
        self.keys
            .iter()
            .any(|k| matches!(k.kind, MatchKind::Ternary | MatchKind::Range))
    }

    /// Bits of the key (its fields concatenated).
    pub fn key_bits(&self) -> u32 {
        self.keys.iter().map(|k| k.width as u32).sum()
    }

    /// Whether entries with the same action and parameters share one action record
    /// (`table::TableRt`): a keyed table without direct counters or meters whose index
    /// maps keys to records (exact, or lpm of at most 64 bits), not one with a record per
    /// entry (the direct counters' index; ternary/range and wider lpm keys, scanned by
    /// priority). A
    /// keyless table has no entries, hence no records to share.
    pub fn shares_records(&self) -> bool {
        let lpm = self.keys.iter().any(|k| k.kind == MatchKind::Lpm);
        self.direct_counter.is_none()
            && self.direct_meter.is_none()
            && !self.keys.is_empty()
            && self
                .keys
                .iter()
                .all(|k| matches!(k.kind, MatchKind::Exact | MatchKind::Lpm))
            && (!lpm || self.key_bits() <= 64)
    }

    /// Whether the table's index is a direct array indexed by the key (one load): exact
    /// keys of at most `exact::DIRECT_BITS` bits in all (`exact::Direct`, read by
    /// `table::TableRt::lookup_direct`). Both `table::TableRt::new` and the generator
    /// decide by it.
    pub fn direct_exact(&self) -> bool {
        !self.keys.is_empty()
            && self.keys.iter().all(|k| k.kind == MatchKind::Exact)
            && crate::exact::is_direct(self.key_bits())
    }

    /// Whether the table's index is a DIR-24-8 (`fib::ip4::Ip4Lpm`): one lpm key of 32
    /// bits, read by `table::TableRt::lookup_lpm32`. Both `table::TableRt::new` and the
    /// generator decide by it.
    pub fn lpm32(&self) -> bool {
        matches!(self.keys.as_slice(), [k] if k.kind == MatchKind::Lpm && k.width == 32)
    }

    /// The `table::TableRt` method the generated code looks a key of at most 64 bits up
    /// with: `lookup_direct` for a direct array ([`Table::direct_exact`]), `lookup_lpm32`
    /// for a DIR-24-8 ([`Table::lpm32`]), `lookup64` (which matches on the index kind)
    /// for the others. The one rule of the generator's lookup sites.
    pub fn lookup64_fn(&self) -> &'static str {
        if self.direct_exact() {
            "lookup_direct"
        } else if self.lpm32() {
            "lookup_lpm32"
        } else {
            "lookup64"
        }
    }
}

/// An action.
#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    pub name: String,
    pub control: String,
    /// Parameter names and widths.
    pub params: Vec<(String, u16)>,
    pub body: Vec<S>,
}

/// Counter types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterKind {
    Packets,
    Bytes,
    Both,
}

/// An indexed counter.
#[derive(Clone, Debug, PartialEq)]
pub struct Counter {
    pub name: String,
    /// Control it belongs to (names are unique within a control only).
    pub control: String,
    pub size: u32,
    pub kind: CounterKind,
}

/// `control.name`: the name that finds a table, counter, register or meter whatever the
/// other controls declare.
pub fn qualified(control: &str, name: &str) -> String {
    format!("{control}.{name}")
}

/// Why no object answers to a name ([`find_named`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameError {
    /// None is called that.
    Unknown,
    /// A short name several controls declare: their `control.name`s.
    Ambiguous(Vec<String>),
}

/// The index of the object called `name` among `objs` (each one's control and short name):
/// the one whose `control.name` it is, else the only one whose short name it is. Tables,
/// counters, registers and meters are all found this way ([`Program::table`] ...).
pub fn find_named<'a>(
    objs: impl IntoIterator<Item = (&'a str, &'a str)>,
    name: &str,
) -> Result<usize, NameError> {
    let mut short = Vec::new();
    for (i, (c, n)) in objs.into_iter().enumerate() {
        let rest = name.strip_prefix(c).and_then(|r| r.strip_prefix('.'));
        if rest == Some(n) {
            return Ok(i);
        }
        if n == name {
            short.push((i, qualified(c, n)));
        }
    }
    match short.len() {
        0 => Err(NameError::Unknown),
        1 => Ok(short[0].0),
        _ => Err(NameError::Ambiguous(
            short.into_iter().map(|x| x.1).collect(),
        )),
    }
}

/// A register array.
#[derive(Clone, Debug, PartialEq)]
pub struct Register {
    pub name: String,
    /// Control it belongs to.
    pub control: String,
    pub size: u32,
    pub width: u16,
}

/// A meter array (two-rate three-colour, RFC 2698).
#[derive(Clone, Debug, PartialEq)]
pub struct Meter {
    pub name: String,
    /// Control it belongs to.
    pub control: String,
    pub size: u32,
    /// Bytes (true) or packets.
    pub bytes: bool,
    /// A `direct_meter`: its cells belong to its table's entries (configured by entry,
    /// `control::table_meter_set`, never by index).
    pub direct: bool,
}

/// Slots of `standard_metadata` the executor reads or writes itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StdSlots {
    pub ingress_port: u16,
    pub egress_spec: u16,
    pub egress_port: u16,
    pub packet_length: u16,
    pub parser_error: u16,
    pub checksum_error: u16,
}

/// P4 error codes (`error` values): the core ones, then the program's own.
pub const ERR_NO_ERROR: u64 = 0;
pub const ERR_PACKET_TOO_SHORT: u64 = 1;
pub const ERR_NO_MATCH: u64 = 2;
pub const ERR_STACK_OUT_OF_BOUNDS: u64 = 3;
pub const ERR_HEADER_TOO_SHORT: u64 = 4;
pub const ERR_PARSER_TIMEOUT: u64 = 5;
pub const ERR_PARSER_INVALID_ARGUMENT: u64 = 6;
/// Core error names, by code.
pub const CORE_ERRORS: [&str; 7] = [
    "NoError",
    "PacketTooShort",
    "NoMatch",
    "StackOutOfBounds",
    "HeaderTooShort",
    "ParserTimeout",
    "ParserInvalidArgument",
];

/// A compiled program.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub opts: Opts,
    pub headers: Vec<HdrInst>,
    pub hdr_bytes: usize,
    pub meta_slots: usize,
    /// Base of each header instance (non-flat mode reads it per access).
    pub hdr_bases: Vec<u16>,
    /// Base of each metadata instance: 0 user metadata, 1 standard_metadata, 2 locals.
    pub meta_bases: Vec<u16>,
    pub states: Vec<State>,
    pub start: u16,
    /// The state graph has a cycle: steps are counted and bounded.
    pub parser_loops: bool,
    pub verify: Vec<S>,
    pub ingress: Vec<S>,
    pub egress: Vec<S>,
    pub compute: Vec<S>,
    /// Header instances in `emit` order.
    pub deparse: Vec<u8>,
    pub actions: Vec<Action>,
    pub tables: Vec<Table>,
    pub counters: Vec<Counter>,
    pub registers: Vec<Register>,
    pub meters: Vec<Meter>,
    pub std: StdSlots,
    /// User metadata fields (path, slot, width) for `show`.
    pub meta_fields: Vec<(String, u16, u16)>,
    /// Error names by code.
    pub errors: Vec<String>,
    /// Tables removed or inlined by the redundant-table pass.
    pub inlined_tables: Vec<String>,
}

impl Program {
    /// The header instance holding header-area offset `off`, and the offset inside it.
    pub fn inst_of(&self, off: u16) -> Option<(usize, usize)> {
        self.headers
            .iter()
            .position(|h| off >= h.off && off < h.off + h.len.max(1))
            .map(|i| (i, (off - self.headers[i].off) as usize))
    }

    /// The index of table `name` (`control.table`, or a short name unique in the program;
    /// [`find_named`]).
    pub fn table(&self, name: &str) -> Result<usize, NameError> {
        find_named(self.tables.iter().map(|x| (&*x.control, &*x.name)), name)
    }

    /// The index of counter `name` (as [`Program::table`]).
    pub fn counter(&self, name: &str) -> Result<usize, NameError> {
        find_named(self.counters.iter().map(|x| (&*x.control, &*x.name)), name)
    }

    /// The index of register `name` (as [`Program::table`]).
    pub fn register(&self, name: &str) -> Result<usize, NameError> {
        find_named(self.registers.iter().map(|x| (&*x.control, &*x.name)), name)
    }

    /// The index of meter `name` (as [`Program::table`]).
    pub fn meter(&self, name: &str) -> Result<usize, NameError> {
        find_named(self.meters.iter().map(|x| (&*x.control, &*x.name)), name)
    }

    /// Whether the parser and the verify control touch no register or meter (read, write
    /// or execute), directly or through an action or a table they apply. Then parsing a
    /// frame's packets before the ingress of the first of them (multi mode's first
    /// segment, auto mode's split: `node::split_pays`) sees what parsing packet at a time
    /// does; a register or meter reached there could be one an earlier packet's ingress
    /// changes.
    pub fn parse_verify_stateless(&self) -> bool {
        // Nested actions deeper than this are taken to touch state.
        const DEPTH: u32 = 8;
        fn body(p: &Program, b: &[S], d: u32) -> bool {
            b.iter().all(|s| stmt(p, s, d))
        }
        fn action(p: &Program, a: u16, d: u32) -> bool {
            d > 0
                && p.actions
                    .get(a as usize)
                    .is_some_and(|a| body(p, &a.body, d - 1))
        }
        fn stmt(p: &Program, s: &S, d: u32) -> bool {
            match s {
                S::RegRead(..) | S::RegWrite(..) | S::Meter(..) => false,
                S::If(_, a, b) => body(p, a, d) && body(p, b, d),
                S::Call(a, _) => action(p, *a, d),
                S::Apply(ap) => {
                    let arms = match &ap.arms {
                        Arms::None => true,
                        Arms::Hit(a, b) => body(p, a, d) && body(p, b, d),
                        Arms::Switch { bodies, .. } => bodies.iter().all(|b| body(p, b, d)),
                    };
                    arms && p
                        .tables
                        .get(ap.table as usize)
                        .is_some_and(|t| t.actions.iter().all(|&a| action(p, a, d)))
                }
                S::Set(..)
                | S::Extract(_)
                | S::SetValid(_)
                | S::SetInvalid(_)
                | S::Drop
                | S::Exit
                | S::Return
                | S::Count(..)
                | S::Csum(_) => true,
            }
        }
        self.states.iter().all(|st| body(self, &st.body, DEPTH)) && body(self, &self.verify, DEPTH)
    }

    /// The index of an action by name, among `allowed` (`a` or `Control.a`).
    pub fn action_in(&self, name: &str, allowed: &[u16]) -> Option<u16> {
        allowed.iter().copied().find(|&a| {
            let x = &self.actions[a as usize];
            x.name == name || format!("{}.{}", x.control, x.name) == name
        })
    }
}

/// Mask of the low `w` bits (w <= 64).
#[inline(always)]
pub fn mask(w: u16) -> u64 {
    if w >= 64 {
        u64::MAX
    } else {
        (1u64 << w) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_found_by_control_or_unique_short_name() {
        let objs = [("I", "c"), ("E", "c"), ("E", "d")];
        let find = |n: &str| find_named(objs.iter().copied(), n);
        assert_eq!(find("I.c"), Ok(0));
        assert_eq!(find("E.c"), Ok(1));
        assert_eq!(find("d"), Ok(2));
        assert_eq!(
            find("c"),
            Err(NameError::Ambiguous(vec!["I.c".into(), "E.c".into()]))
        );
        assert_eq!(find("I.d"), Err(NameError::Unknown));
        assert_eq!(find(".c"), Err(NameError::Unknown));
        assert_eq!(find("Ic"), Err(NameError::Unknown));
    }
}
