//! ACL rules, the packet fields they match, and the classifier: tuple-space search.
//!
//! Rules of an interface's ACL list are numbered in the order they apply (the first match
//! wins). The classifier groups them by *mask type* — address family, source and
//! destination prefix lengths, whether the protocol is given, whether each port is one exact
//! value — and keeps one hash table per mask type from the masked fields to the rules having
//! them, in order. A lookup visits the mask types in the order of their first rule and stops
//! as soon as no remaining type can hold a rule earlier than the best match so far; in a
//! table hit, port ranges (and ICMP type/code ranges) and TCP flags are checked rule by
//! rule. The cost grows with the number of distinct mask types (small in practice: a few
//! prefix lengths), not with the number of rules. A type with a single key (a wildcard type
//! such as a final `permit any`) is compared directly instead of hashed. The tables are
//! std's `HashMap` with [`FoldHash`], a keyed multiply-fold hash of the masked fields (a few
//! instructions, where SipHash cost about 250 per probe). Its keys are random per process;
//! and the keys *stored* are the administrator's rules, not packet fields, so a packet
//! cannot build a long collision chain, it can only probe one. Before any table is probed a
//! pre-filter (`Prefilter`, six 256-entry bitmaps: the first two bytes of the source and of the
//! destination address, the protocol, the destination port's high byte) removes the mask
//! types that cannot hold a match. Each table keeps its masks precomputed, so a probe's key
//! is three ANDs. A list's first rule matching every packet of a family (any source,
//! destination and protocol: a final `permit`/`deny`) is where a lookup of that family
//! starts as its best match, so only tables holding earlier rules are probed.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

/// What a matching rule does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Drop.
    Deny,
    /// Pass.
    Permit,
    /// Pass and create a session admitting the flow's return traffic (`permit+reflect`).
    PermitReflect,
}

/// One rule.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Action.
    pub action: Action,
    /// IPv6 (prefixes are IPv6).
    pub v6: bool,
    /// Source prefix (IPv4 in the low 32 bits) and length.
    pub src: (u128, u8),
    /// Destination prefix and length.
    pub dst: (u128, u8),
    /// Protocol (None: any).
    pub proto: Option<u8>,
    /// Source port range (ICMP: type range), inclusive.
    pub sport: (u16, u16),
    /// Destination port range (ICMP: code range), inclusive.
    pub dport: (u16, u16),
    /// TCP flags value and mask (`tcpflags <v> mask <m>`; mask 0: any).
    pub tcp_flags: (u8, u8),
}

impl Rule {
    /// A rule matching every packet of a family.
    pub fn any(action: Action, v6: bool) -> Rule {
        Rule {
            action,
            v6,
            src: (0, 0),
            dst: (0, 0),
            proto: None,
            sport: (0, 65535),
            dport: (0, 65535),
            tcp_flags: (0, 0),
        }
    }

    /// Whether the rule matches every packet of its family.
    fn matches_all(&self) -> bool {
        self.src == (0, 0) && self.dst == (0, 0) && self.proto.is_none() && self.ports_any()
    }

    fn ports_any(&self) -> bool {
        self.sport == (0, 65535) && self.dport == (0, 65535) && self.tcp_flags.1 == 0
    }

    /// Whether the rule matches `k` (the reference semantics the classifier follows).
    pub fn matches(&self, k: &Key) -> bool {
        self.v6 == k.v6
            && mask(k.src, self.src.1, self.v6) == self.src.0
            && mask(k.dst, self.dst.1, self.v6) == self.dst.0
            && self.proto.is_none_or(|p| p == k.proto)
            && self.l4_matches(k)
    }

    /// The checks the hash tables do not cover: port ranges and TCP flags. A packet without
    /// an L4 header (a non-first fragment, a truncated header) matches only rules that do
    /// not look at L4.
    #[inline(always)]
    fn l4_matches(&self, k: &Key) -> bool {
        if !k.l4 {
            return self.ports_any();
        }
        if self.proto.is_none() {
            return true;
        }
        (self.sport.0..=self.sport.1).contains(&k.sport)
            && (self.dport.0..=self.dport.1).contains(&k.dport)
            && (k.tcp_flags & self.tcp_flags.1) == self.tcp_flags.0 & self.tcp_flags.1
    }
}

impl Rule {
    /// `<action> src <prefix> dst <prefix>`.
    fn head(&self) -> String {
        let a = match self.action {
            Action::Deny => "deny",
            Action::Permit => "permit",
            Action::PermitReflect => "permit+reflect",
        };
        let p = |(x, l): (u128, u8)| {
            if self.v6 {
                format!("{}/{l}", std::net::Ipv6Addr::from(x))
            } else {
                format!("{}/{l}", std::net::Ipv4Addr::from(x as u32))
            }
        };
        format!("{a} src {} dst {}", p(self.src), p(self.dst))
    }

    /// The rule as `set acl-plugin acl` takes it (`show running-config`): fields at their
    /// default left out.
    pub fn cli(&self) -> String {
        let range = |(a, b): (u16, u16)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        };
        let mut s = self.head();
        if let Some(proto) = self.proto {
            s.push_str(&format!(" proto {proto}"));
            if self.sport != (0, 65535) {
                s.push_str(&format!(" sport {}", range(self.sport)));
            }
            if self.dport != (0, 65535) {
                s.push_str(&format!(" dport {}", range(self.dport)));
            }
            if self.tcp_flags.1 != 0 {
                s.push_str(&format!(
                    " tcpflags {} mask {}",
                    self.tcp_flags.0, self.tcp_flags.1
                ));
            }
        }
        s
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} proto {} sport {}-{} dport {}-{}",
            self.head(),
            self.proto.unwrap_or(0),
            self.sport.0,
            self.sport.1,
            self.dport.0,
            self.dport.1
        )?;
        if self.tcp_flags.1 != 0 {
            write!(
                f,
                " tcpflags {} mask {}",
                self.tcp_flags.0, self.tcp_flags.1
            )?;
        }
        Ok(())
    }
}

/// The fields of a packet ACLs match.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Key {
    /// IPv6.
    pub v6: bool,
    /// Source address (IPv4 in the low 32 bits).
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Protocol (IPv6: the upper-layer header after the extension headers).
    pub proto: u8,
    /// Source port (ICMP: type).
    pub sport: u16,
    /// Destination port (ICMP: code).
    pub dport: u16,
    /// TCP flags.
    pub tcp_flags: u8,
    /// ICMP echo identifier (0 for other packets).
    pub icmp_id: u16,
    /// Whether the L4 fields are valid.
    pub l4: bool,
}

/// `a` with only its first `len` bits (of 32 or 128).
#[inline(always)]
pub fn mask(a: u128, len: u8, v6: bool) -> u128 {
    let bits = if v6 { 128 } else { 32 };
    let len = len.min(bits) as u32;
    if len == 0 {
        return 0;
    }
    let m = if v6 {
        u128::MAX << (128 - len)
    } else {
        ((u32::MAX << (32 - len)) as u128) & 0xffff_ffff
    };
    a & m
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
struct MaskType {
    v6: bool,
    src_len: u8,
    dst_len: u8,
    proto: bool,
    sport: bool,
    dport: bool,
}

/// A mask type's masked fields: source, destination, protocol and ports
/// (`proto << 32 | sport << 16 | dport`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct HashKey(u128, u128, u64);

impl Hash for HashKey {
    #[inline(always)]
    fn hash<H: Hasher>(&self, h: &mut H) {
        // Three words (a hash need not be injective: equality decides).
        let fold = |a: u128| (a as u64) ^ ((a >> 64) as u64).rotate_left(23);
        h.write_u64(fold(self.0));
        h.write_u64(fold(self.1));
        h.write_u64(self.2);
    }
}

/// A keyed multiply-fold hash (each word: `h = fold(h ^ w, k)` with `fold(a, b)` the xor
/// of the two halves of the 128-bit product), keys random per process.
#[derive(Copy, Clone, Debug)]
pub struct FoldHash {
    k0: u64,
    k1: u64,
}

impl Default for FoldHash {
    fn default() -> Self {
        let s = std::collections::hash_map::RandomState::new();
        FoldHash {
            k0: s.hash_one(0x6163_6c30_u64),
            // Odd and with high bits set, so the product mixes every bit.
            k1: s.hash_one(0x6163_6c31_u64) | (1 << 63) | 1,
        }
    }
}

/// [`FoldHash`]'s state.
pub struct FoldHasher {
    h: u64,
    k: u64,
}

#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = a as u128 * b as u128;
    (p as u64) ^ ((p >> 64) as u64)
}

impl Hasher for FoldHasher {
    #[inline(always)]
    fn write_u64(&mut self, w: u64) {
        self.h = fold_mul(self.h ^ w, self.k);
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    #[inline(always)]
    fn finish(&self) -> u64 {
        fold_mul(self.h, self.k.rotate_left(32) | 1)
    }
}

impl BuildHasher for FoldHash {
    type Hasher = FoldHasher;
    #[inline(always)]
    fn build_hasher(&self) -> FoldHasher {
        FoldHasher {
            h: self.k0,
            k: self.k1,
        }
    }
}

struct Table {
    mt: MaskType,
    masks: Masks,
    first: u32,
    map: HashMap<HashKey, Vec<u32>, FoldHash>,
    /// The only key of `map` when it has one (a wildcard type such as `permit any`, or a
    /// single rule): compared directly, no hashing.
    single: Option<(HashKey, Vec<u32>)>,
}

impl MaskType {
    fn of(r: &Rule) -> MaskType {
        let exact = |p: (u16, u16)| r.proto.is_some() && p.0 == p.1;
        MaskType {
            v6: r.v6,
            src_len: r.src.1,
            dst_len: r.dst.1,
            proto: r.proto.is_some(),
            sport: exact(r.sport),
            dport: exact(r.dport),
        }
    }

    /// The masks [`Masks::key`] applies: source, destination, L4 word.
    fn masks(&self) -> Masks {
        Masks(
            mask(u128::MAX, self.src_len, self.v6),
            mask(u128::MAX, self.dst_len, self.v6),
            l4_word(
                if self.proto { 0xff } else { 0 },
                if self.sport { 0xffff } else { 0 },
                if self.dport { 0xffff } else { 0 },
            ),
        )
    }

    fn rule_key(&self, r: &Rule) -> HashKey {
        HashKey(
            r.src.0,
            r.dst.0,
            l4_word(
                r.proto.unwrap_or(0),
                if self.sport { r.sport.0 } else { 0 },
                if self.dport { r.dport.0 } else { 0 },
            ),
        )
    }
}

/// A mask type's masks, computed once: a packet's key in the type's table is its fields
/// ANDed with them (no per-probe shifts or branches on the prefix lengths).
#[derive(Copy, Clone, Debug)]
struct Masks(u128, u128, u64);

impl Masks {
    #[inline(always)]
    fn key(&self, k: &Key) -> HashKey {
        HashKey(
            k.src & self.0,
            k.dst & self.1,
            l4_word(k.proto, k.sport, k.dport) & self.2,
        )
    }
}

#[inline(always)]
fn l4_word(proto: u8, sport: u16, dport: u16) -> u64 {
    (proto as u64) << 32 | (sport as u64) << 16 | dport as u64
}

/// Mask types a pre-filter can tell apart (one bit each; later ones are always probed).
const PRE_TYPES: usize = 64;

/// Up to this many mask types, a lookup probes them all (the pre-filter costs more).
const FEW_TYPES: usize = 2;

/// A pre-filter over the mask types of one family: per value of the first and of the second
/// byte of the source and of the destination address (each byte on its own), of the
/// protocol and of the destination port's high byte, the set of mask types holding a rule
/// that can match it. A lookup ANDs six words and
/// probes only the types left — packets whose addresses are far from most rules' prefixes
/// (the common case of many specific rules) skip their tables without hashing. It never
/// removes a type that could match: every rule marks every value it covers.
struct Prefilter {
    src: [u64; 256],
    dst: [u64; 256],
    /// The second byte of the source and of the destination address.
    src2: [u64; 256],
    dst2: [u64; 256],
    proto: [u64; 256],
    dport_hi: [u64; 256],
}

/// Byte `i` (0: the top one) of an address of the family.
#[inline(always)]
fn addr_byte(a: u128, v6: bool, i: u32) -> u8 {
    let top = if v6 { 120 } else { 24 };
    (a >> (top - 8 * i)) as u8
}

/// The values of byte `i` of the addresses the prefix `(a, len)` covers.
fn byte_range(a: u128, len: u8, v6: bool, i: u32) -> (u8, u8) {
    let lo = addr_byte(a, v6, i);
    let fixed = (len as u32).saturating_sub(8 * i).min(8);
    (lo, lo | (0xffu16 >> fixed) as u8)
}

impl Prefilter {
    fn new() -> Box<Prefilter> {
        Box::new(Prefilter {
            src: [0; 256],
            dst: [0; 256],
            src2: [0; 256],
            dst2: [0; 256],
            proto: [0; 256],
            dport_hi: [0; 256],
        })
    }

    fn mark(m: &mut [u64; 256], lo: u8, hi: u8, bit: u64) {
        for x in &mut m[lo as usize..=hi as usize] {
            *x |= bit;
        }
    }

    /// Marks what rule `r` of mask type `t` covers.
    fn add(&mut self, t: usize, r: &Rule) {
        let bit = 1u64 << t;
        for (m, (a, len), i) in [
            (&mut self.src, r.src, 0),
            (&mut self.dst, r.dst, 0),
            (&mut self.src2, r.src, 1),
            (&mut self.dst2, r.dst, 1),
        ] {
            let (lo, hi) = byte_range(a, len, r.v6, i);
            Self::mark(m, lo, hi, bit);
        }
        match r.proto {
            Some(p) => {
                self.proto[p as usize] |= bit;
                Self::mark(
                    &mut self.dport_hi,
                    (r.dport.0 >> 8) as u8,
                    (r.dport.1 >> 8) as u8,
                    bit,
                );
            }
            None => {
                Self::mark(&mut self.proto, 0, 255, bit);
                Self::mark(&mut self.dport_hi, 0, 255, bit);
            }
        }
    }

    /// The mask types that may hold a rule matching `k`.
    #[inline(always)]
    fn candidates(&self, k: &Key) -> u64 {
        let ports = if k.l4 {
            self.dport_hi[(k.dport >> 8) as usize]
        } else {
            u64::MAX
        };
        // The first two bytes of each address (constant shifts: a variable u128 shift
        // costs several instructions).
        let (s, d) = if k.v6 {
            ((k.src >> 112) as u16, (k.dst >> 112) as u16)
        } else {
            ((k.src >> 16) as u16, (k.dst >> 16) as u16)
        };
        self.src[(s >> 8) as usize]
            & self.dst[(d >> 8) as usize]
            & self.src2[(s & 0xff) as usize]
            & self.dst2[(d & 0xff) as usize]
            & self.proto[k.proto as usize]
            & ports
    }
}

/// A compiled list of rules (an interface's ACLs in order).
pub struct Classifier {
    rules: Vec<Rule>,
    tables: Vec<Table>,
    /// Pre-filters of the IPv4 and IPv6 mask types (None: the family has no rule).
    pre: [Option<Box<Prefilter>>; 2],
    /// Per family (IPv4, IPv6), the first rule every packet of the family matches (any
    /// source, destination and protocol, such as a list's final `permit`): a lookup starts
    /// with it as its best match, so tables holding only later rules are never probed.
    all: [Option<u32>; 2],
}

impl Classifier {
    /// Compiles `rules` (index = priority, 0 first).
    pub fn new(rules: Vec<Rule>) -> Classifier {
        let mut by: HashMap<MaskType, usize> = HashMap::new();
        let mut tables: Vec<Table> = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let mt = MaskType::of(r);
            let t = *by.entry(mt).or_insert_with(|| {
                tables.push(Table {
                    mt,
                    masks: mt.masks(),
                    first: i as u32,
                    map: HashMap::with_hasher(FoldHash::default()),
                    single: None,
                });
                tables.len() - 1
            });
            // A key whose ports cannot match (exact port of a fragment-only rule) is still
            // stored: rules are normalised by the CLI.
            let key = mt.rule_key(r);
            tables[t].map.entry(key).or_default().push(i as u32);
        }
        for t in &mut tables {
            if t.map.len() == 1 {
                t.single = t.map.drain().next();
            }
        }
        let mut pre: [Option<Box<Prefilter>>; 2] = [None, None];
        for (ti, t) in tables.iter().enumerate().take(PRE_TYPES) {
            let f = pre[t.mt.v6 as usize].get_or_insert_with(Prefilter::new);
            let rules_of = t.single.iter().map(|(_, c)| c).chain(t.map.values());
            for &r in rules_of.flatten() {
                f.add(ti, &rules[r as usize]);
            }
        }
        let all = [false, true].map(|v6| {
            rules
                .iter()
                .position(|r| r.v6 == v6 && r.matches_all())
                .map(|i| i as u32)
        });
        // Tables are created in order of their first rule already.
        Classifier {
            rules,
            tables,
            pre,
            all,
        }
    }

    /// The rules.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Mask types (hash tables a lookup may visit).
    pub fn mask_types(&self) -> usize {
        self.tables.len()
    }

    /// The first rule matching `k`: the mask types the pre-filter leaves, in order, then
    /// those past the pre-filter's first `PRE_TYPES` (64).
    #[inline(always)]
    pub fn lookup(&self, k: &Key) -> Option<u32> {
        let mut best = self.all[k.v6 as usize];
        if self.tables.len() <= FEW_TYPES {
            for t in &self.tables {
                if self.probe(t, k, &mut best) {
                    break;
                }
            }
            return best;
        }
        let Some(pre) = &self.pre[k.v6 as usize] else {
            return best;
        };
        let mut cand = pre.candidates(k);
        while cand != 0 {
            let i = cand.trailing_zeros() as usize;
            cand &= cand - 1;
            let Some(t) = self.tables.get(i) else { break };
            if self.probe(t, k, &mut best) {
                return best;
            }
        }
        for t in self.tables.iter().skip(PRE_TYPES) {
            if self.probe(t, k, &mut best) {
                break;
            }
        }
        best
    }

    /// Looks `k` up in table `t`, improving `best`; true when no later table can hold an
    /// earlier rule.
    #[inline(always)]
    fn probe(&self, t: &Table, k: &Key, best: &mut Option<u32>) -> bool {
        // The table's rules are `first` and later ones.
        if best.is_some_and(|b| b <= t.first) {
            return true;
        }
        if t.mt.v6 != k.v6 || (!k.l4 && (t.mt.sport || t.mt.dport)) {
            return false;
        }
        let key = t.masks.key(k);
        let c = match &t.single {
            Some((sk, c)) if *sk == key => c,
            Some(_) => return false,
            None => match t.map.get(&key) {
                Some(c) => c,
                None => return false,
            },
        };
        for &r in c {
            if best.is_some_and(|b| r >= b) {
                break;
            }
            if self.rules[r as usize].l4_matches(k) {
                *best = Some(r);
                break;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn random_rule(r: &mut Rng) -> Rule {
        let v6 = r.next() % 4 == 0;
        let lens: &[u8] = if v6 {
            &[0, 32, 48, 64, 128]
        } else {
            &[0, 8, 16, 24, 32]
        };
        let sl = lens[(r.next() % lens.len() as u64) as usize];
        let dl = lens[(r.next() % lens.len() as u64) as usize];
        // Few distinct addresses, so that packets hit rules.
        let addr = |r: &mut Rng| -> u128 {
            let b = (r.next() % 4) as u128;
            if v6 {
                (0xfd00u128 << 112) | (b << 64) | (b + 1)
            } else {
                0x0a00_0000 | (b << 16) | (b + 1)
            }
        };
        let proto = match r.next() % 4 {
            0 => None,
            1 => Some(6),
            2 => Some(17),
            _ => Some(if v6 { 58 } else { 1 }),
        };
        let port = |r: &mut Rng| -> (u16, u16) {
            match r.next() % 3 {
                0 => (0, 65535),
                1 => {
                    let p = (r.next() % 8) as u16 * 100;
                    (p, p)
                }
                _ => {
                    let a = (r.next() % 8) as u16 * 100;
                    (a, a + (r.next() % 300) as u16)
                }
            }
        };
        let (sport, dport) = if proto.is_some() {
            (port(r), port(r))
        } else {
            ((0, 65535), (0, 65535))
        };
        let tcp_flags = if proto == Some(6) && r.next() % 4 == 0 {
            (0x02, 0x12)
        } else {
            (0, 0)
        };
        Rule {
            action: if r.next() % 2 == 0 {
                Action::Permit
            } else {
                Action::Deny
            },
            v6,
            src: (mask(addr(r), sl, v6), sl),
            dst: (mask(addr(r), dl, v6), dl),
            proto,
            sport,
            dport,
            tcp_flags,
        }
    }

    fn random_key(r: &mut Rng) -> Key {
        let v6 = r.next() % 4 == 0;
        let addr = |r: &mut Rng| -> u128 {
            let b = (r.next() % 4) as u128;
            if v6 {
                (0xfd00u128 << 112) | (b << 64) | (b + (r.next() % 2) as u128)
            } else {
                0x0a00_0000 | (b << 16) | (b + (r.next() % 2) as u128)
            }
        };
        Key {
            v6,
            src: addr(r),
            dst: addr(r),
            proto: [6, 17, 1, 58][(r.next() % 4) as usize],
            sport: (r.next() % 900) as u16,
            dport: (r.next() % 900) as u16,
            tcp_flags: (r.next() % 64) as u8,
            icmp_id: 0,
            l4: r.next() % 8 != 0,
        }
    }

    #[test]
    fn classifier_agrees_with_first_match_linear_scan() {
        let mut r = Rng(0x1234_5678);
        // Lists where a rule matching every packet of a family comes before the end.
        let mut early_all = 0;
        for n in [1usize, 5, 50, 400] {
            let rules: Vec<Rule> = (0..n).map(|_| random_rule(&mut r)).collect();
            let c = Classifier::new(rules.clone());
            early_all += c.all.iter().flatten().any(|&i| i as usize + 1 < n) as usize;
            if n == 400 {
                assert!(
                    c.mask_types() > PRE_TYPES,
                    "types past the pre-filter are probed"
                );
            }
            let mut hits = 0;
            for _ in 0..5000 {
                let k = random_key(&mut r);
                let want = rules.iter().position(|x| x.matches(&k)).map(|i| i as u32);
                assert_eq!(c.lookup(&k), want, "{n} rules, key {k:?}");
                hits += want.is_some() as usize;
            }
            assert!(hits > 100, "the test exercises matches ({hits})");
        }
        assert!(
            early_all > 0,
            "the test exercises a match-all rule before others"
        );
    }

    /// Moves an address to one of three top bytes and three second bytes (so the pre-filter
    /// has work to do).
    fn spread(a: u128, v6: bool, r: &mut Rng) -> u128 {
        let t = [0u128, 0x60, 0xa2][(r.next() % 3) as usize];
        // And the second byte, so its bitmaps have work too.
        let t2 = [0u128, 0x35, 0x80][(r.next() % 3) as usize];
        a ^ (t << if v6 { 120 } else { 24 }) ^ (t2 << if v6 { 112 } else { 16 })
    }

    #[test]
    fn prefilter_agrees_with_first_match_linear_scan() {
        let mut r = Rng(0x9abc_def0);
        for n in [3usize, 30, 300] {
            let rules: Vec<Rule> = (0..n)
                .map(|_| {
                    let mut x = random_rule(&mut r);
                    x.src.0 = mask(spread(x.src.0, x.v6, &mut r), x.src.1, x.v6);
                    x.dst.0 = mask(spread(x.dst.0, x.v6, &mut r), x.dst.1, x.v6);
                    // High destination ports too.
                    if x.proto.is_some() && r.next() % 2 == 0 {
                        x.dport = (x.dport.0 | 0x4000, x.dport.1 | 0x4000);
                    }
                    x
                })
                .collect();
            let c = Classifier::new(rules.clone());
            let mut hits = 0;
            for _ in 0..20000 {
                let mut k = random_key(&mut r);
                k.src = spread(k.src, k.v6, &mut r);
                k.dst = spread(k.dst, k.v6, &mut r);
                if r.next() % 2 == 0 {
                    k.dport |= 0x4000;
                }
                let want = rules.iter().position(|x| x.matches(&k)).map(|i| i as u32);
                assert_eq!(c.lookup(&k), want, "{n} rules, key {k:?}");
                hits += want.is_some() as usize;
            }
            assert!(hits > 100, "the test exercises matches ({hits})");
        }
    }

    /// A rule matching every packet of its family answers for the rules after it, of its
    /// family only; earlier rules still win.
    #[test]
    fn a_match_all_rule_ends_its_familys_lookup() {
        let mut dns = Rule::any(Action::Deny, false);
        dns.proto = Some(17);
        dns.dport = (53, 53);
        let mut ten = Rule::any(Action::Deny, false);
        ten.src = (0x0a00_0000, 8);
        let mut v6_udp = Rule::any(Action::Deny, true);
        v6_udp.proto = Some(17);
        let rules = vec![
            dns,
            Rule::any(Action::Permit, false),
            ten,
            v6_udp,
            Rule::any(Action::Permit, true),
        ];
        let c = Classifier::new(rules);
        assert_eq!(c.all, [Some(1), Some(4)]);
        let k = |v6: bool, src: u128, proto: u8, dport: u16, l4: bool| Key {
            v6,
            src,
            dst: 2,
            proto,
            sport: 5,
            dport,
            tcp_flags: 0,
            icmp_id: 0,
            l4,
        };
        assert_eq!(c.lookup(&k(false, 0x0a00_0001, 17, 53, true)), Some(0));
        // The deny of 10/8 comes after the permit-all: never used.
        assert_eq!(c.lookup(&k(false, 0x0a00_0001, 17, 54, true)), Some(1));
        assert_eq!(c.lookup(&k(false, 0x0a00_0001, 17, 53, false)), Some(1));
        assert_eq!(c.lookup(&k(true, 1, 17, 53, true)), Some(3));
        assert_eq!(c.lookup(&k(true, 1, 6, 53, true)), Some(4));
        // A list without a rule of a family matches none of its packets.
        let c = Classifier::new(vec![Rule::any(Action::Permit, false)]);
        assert_eq!(c.lookup(&k(true, 1, 6, 53, true)), None);
        assert_eq!(c.lookup(&k(false, 1, 6, 53, false)), Some(0));
    }

    #[test]
    fn first_match_wins_and_ranges() {
        let mut deny = Rule::any(Action::Deny, false);
        deny.proto = Some(17);
        deny.dport = (1000, 2000);
        let permit = Rule::any(Action::Permit, false);
        let c = Classifier::new(vec![deny, permit]);
        let k = |dport, l4| Key {
            v6: false,
            src: 1,
            dst: 2,
            proto: 17,
            sport: 5,
            dport,
            tcp_flags: 0,
            icmp_id: 0,
            l4,
        };
        assert_eq!(c.lookup(&k(999, true)), Some(1));
        assert_eq!(c.lookup(&k(1000, true)), Some(0));
        assert_eq!(c.lookup(&k(2000, true)), Some(0));
        assert_eq!(c.lookup(&k(2001, true)), Some(1));
        // A non-first fragment has no ports: only the L3 rule matches.
        assert_eq!(c.lookup(&k(1500, false)), Some(1));
        // IPv6 packets do not match IPv4 rules.
        assert_eq!(
            c.lookup(&Key {
                v6: true,
                ..k(1500, true)
            }),
            None
        );
        assert_eq!(c.mask_types(), 2);
    }
}
