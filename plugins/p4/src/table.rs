//! Run-time match tables (one copy per worker thread, see `node`).
//!
//! The key is the table's key fields concatenated (first field most significant, at most
//! 128 bits). The index depends on the match kinds:
//!
//! | keys | index | lookup |
//! |---|---|---|
//! | none | — | always the default action |
//! | exact, <= 16 bits | direct array (`exact`) | one load |
//! | exact, <= 64 bits | open addressing, random-seeded multiplicative hash (`exact`) | ~1 probe |
//! | exact, > 64 bits | sorted array | binary search |
//! | one 32-bit lpm key | `fib::ip4::Ip4Lpm` (DIR-24-8) | 1-2 loads |
//! | lpm (+ exact), <= 64 bits | one bihash per prefix length in use, longest first | <= 1 hash per length |
//! | any ternary or range | entries by priority (highest first) | linear scan, first match |
//!
//! Entries live in a slab (`entries`, reused ids); an entry holds its action index and its
//! parameters inline (PVPP's pre-resolved rule) and, for the non-optimised mode, a
//! table-local action slot and an offset into a separate parameter pool.

use crate::exact::ExactIndex;
use crate::ir::{mask, EntrySpec, Match, MatchKind, Table, PARAMS_MAX};
use sluice_fib::ip4::Ip4Lpm;
use sluice_infra::bihash::Bihash;
use sluice_infra::epoch::Epochs;
use std::collections::HashMap;

/// Why a table operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("entry already exists")]
    Exists,
    #[error("no such entry")]
    NotFound,
    #[error("table is full ({0} entries)")]
    Full(u64),
    #[error("table has const entries")]
    Const,
    #[error("expected {0} key values, got {1}")]
    KeyCount(usize, usize),
    #[error("key {0}: {1}")]
    Key(String, String),
    #[error("action `{0}' is not an action of this table")]
    Action(String),
    #[error("action takes {0} parameters, got {1}")]
    ParamCount(usize, usize),
    #[error("parameter `{0}': value {1:#x} does not fit in bit<{2}>")]
    ParamWidth(String, u64, u16),
    #[error("index: {0}")]
    Index(String),
}

/// A range field of a linear entry: shift in the key, width mask, low, high.
pub type RangeField = (u8, u64, u64, u64);

/// One entry (slab slot). What a hit reads — the action and its first seven parameters —
/// is the first cache line (entries are line-aligned), so a large table's lookup costs
/// one miss for the entry, and [`TableRt::prefetch_entry`] can hide it.
#[derive(Clone, Debug, Default)]
#[repr(C, align(64))]
pub struct EntryRt {
    /// Global action index.
    pub action: u16,
    /// Index in the table's action list (non-resolved mode).
    pub slot: u8,
    pub nparams: u8,
    /// Offset of the parameters in `TableRt::pool` (non-resolved mode).
    pub pool_off: u32,
    pub params: [u64; PARAMS_MAX],
    pub priority: u32,
    pub matches: Vec<Match>,
    /// For linear tables: the masked value/mask over the whole key, and range fields
    /// (shift, width mask, lo, hi).
    pub value: u128,
    pub mask: u128,
    pub ranges: Vec<RangeField>,
    pub live: bool,
}

impl EntryRt {
    #[inline(always)]
    fn matches_key(&self, k: u128) -> bool {
        (k & self.mask) == self.value
            && self.ranges.iter().all(|&(sh, m, lo, hi)| {
                let v = ((k >> sh) as u64) & m;
                v >= lo && v <= hi
            })
    }
}

enum Index {
    None,
    Exact(ExactIndex),
    ExactWide(Vec<(u128, u32)>),
    Lpm32(Box<Ip4Lpm>, Epochs),
    /// (prefix length, key mask, key -> id), longest first.
    LpmLen(Vec<(u8, u128, Bihash)>, Epochs),
    /// Entry ids, highest priority first.
    Linear(Vec<u32>),
}

/// A table on one thread.
pub struct TableRt {
    pub entries: Vec<EntryRt>,
    free: Vec<u32>,
    /// Match + priority -> entry id (control plane only; never on the packet path).
    by_match: HashMap<(Vec<Match>, u32), u32>,
    index: Index,
    pub default: EntryRt,
    /// Parameters of all entries (non-resolved mode).
    pub pool: Vec<u64>,
    /// Per entry id: (packets, bytes) for the direct counter.
    pub direct: Vec<[u64; 2]>,
    /// Misses (default action runs), packets and bytes.
    pub miss: [u64; 2],
    widths: Vec<u16>,
    kinds: Vec<MatchKind>,
    /// Bits of the key after field i (its shift in the concatenated key).
    shifts: Vec<u32>,
    n_live: usize,
    limit: u64,
    read_only: bool,
}

/// Most entries a table may hold when it does not say `size` (and the LPM value limit).
pub const DEFAULT_LIMIT: u64 = 1 << 24;

impl TableRt {
    /// An empty table for `t` (its const entries added).
    pub fn new(t: &Table, actions: &[crate::ir::Action]) -> Result<TableRt, TableError> {
        let widths: Vec<u16> = t.keys.iter().map(|k| k.width).collect();
        let kinds: Vec<MatchKind> = t.keys.iter().map(|k| k.kind).collect();
        let mut shifts = vec![0u32; widths.len()];
        let mut acc = 0u32;
        for i in (0..widths.len()).rev() {
            shifts[i] = acc;
            acc += widths[i] as u32;
        }
        let total = acc;
        let linear = kinds
            .iter()
            .any(|k| matches!(k, MatchKind::Ternary | MatchKind::Range));
        let has_lpm = kinds.contains(&MatchKind::Lpm);
        let index = if kinds.is_empty() {
            Index::None
        } else if linear {
            Index::Linear(Vec::new())
        } else if has_lpm && kinds.len() == 1 && widths[0] == 32 {
            Index::Lpm32(Box::new(Ip4Lpm::new()), Epochs::new(1))
        } else if has_lpm && total <= 64 {
            Index::LpmLen(Vec::new(), Epochs::new(1))
        } else if has_lpm {
            Index::Linear(Vec::new())
        } else if total <= 64 {
            Index::Exact(ExactIndex::new(total as u16))
        } else {
            Index::ExactWide(Vec::new())
        };
        let (da, ref dp) = t.default;
        let mut me = TableRt {
            entries: Vec::new(),
            free: Vec::new(),
            by_match: HashMap::new(),
            index,
            default: EntryRt::default(),
            pool: Vec::new(),
            direct: Vec::new(),
            miss: [0; 2],
            widths,
            kinds,
            shifts,
            n_live: 0,
            limit: t.size.unwrap_or(DEFAULT_LIMIT).clamp(1, DEFAULT_LIMIT),
            read_only: false,
        };
        me.default = me.make_entry(t, actions, Vec::new(), da, dp, 0)?;
        if let Some(es) = &t.const_entries {
            me.limit = me.limit.max(es.len() as u64);
            for e in es {
                me.add(t, actions, e)?;
            }
            me.read_only = true;
        }
        Ok(me)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n_live
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.n_live == 0
    }

    /// Which index the table uses (for `show`).
    pub fn index_kind(&self) -> &'static str {
        match &self.index {
            Index::None => "none (keyless)",
            Index::Exact(x) => x.kind(),
            Index::ExactWide(_) => "exact sorted array",
            Index::Lpm32(..) => "lpm DIR-24-8 (fib ip4)",
            Index::LpmLen(..) => "lpm hash per prefix length",
            Index::Linear(_) => "priority list",
        }
    }

    fn make_entry(
        &mut self,
        t: &Table,
        actions: &[crate::ir::Action],
        matches: Vec<Match>,
        action: u16,
        params: &[u64],
        priority: u32,
    ) -> Result<EntryRt, TableError> {
        let slot = t
            .actions
            .iter()
            .position(|&a| a == action)
            .ok_or_else(|| TableError::Action(actions[action as usize].name.clone()))?;
        let ps = &actions[action as usize].params;
        if ps.len() != params.len() {
            return Err(TableError::ParamCount(ps.len(), params.len()));
        }
        let mut e = EntryRt {
            matches,
            priority,
            action,
            slot: slot as u8,
            nparams: params.len() as u8,
            pool_off: self.pool.len() as u32,
            live: true,
            ..Default::default()
        };
        for (i, (&v, (n, w))) in params.iter().zip(ps).enumerate() {
            if v > mask(*w) {
                return Err(TableError::ParamWidth(n.clone(), v, *w));
            }
            e.params[i] = v;
        }
        self.pool.extend_from_slice(params);
        Ok(e)
    }

    /// Validates a match against the key fields and computes the linear form.
    fn check_matches(
        &self,
        t: &Table,
        ms: &[Match],
    ) -> Result<(u128, u128, Vec<RangeField>), TableError> {
        if ms.len() != self.widths.len() {
            return Err(TableError::KeyCount(self.widths.len(), ms.len()));
        }
        let mut value = 0u128;
        let mut msk = 0u128;
        let mut ranges = Vec::new();
        for (i, m) in ms.iter().enumerate() {
            let w = self.widths[i];
            let full = mask(w);
            let kerr = |s: String| TableError::Key(t.keys[i].name.clone(), s);
            let fits = |v: u64| -> Result<(), TableError> {
                if v > full {
                    Err(kerr(format!("value {v:#x} does not fit in bit<{w}>")))
                } else {
                    Ok(())
                }
            };
            let (v, fm) = match (*m, self.kinds[i]) {
                (Match::Exact(v), MatchKind::Exact) => {
                    fits(v)?;
                    (v, full)
                }
                (Match::Lpm(v, l), MatchKind::Lpm) => {
                    fits(v)?;
                    if l as u16 > w {
                        return Err(kerr(format!("prefix length {l} > {w}")));
                    }
                    let pm = full & !mask(w - l as u16);
                    if v & !pm != 0 {
                        return Err(kerr(format!("value {v:#x} has bits set beyond /{l}")));
                    }
                    (v, pm)
                }
                (Match::Ternary(v, mm), MatchKind::Ternary) => {
                    fits(v)?;
                    fits(mm)?;
                    if v & !mm != 0 {
                        return Err(kerr(format!("value {v:#x} has bits outside mask {mm:#x}")));
                    }
                    (v, mm)
                }
                (Match::Range(lo, hi), MatchKind::Range) => {
                    fits(lo)?;
                    fits(hi)?;
                    if lo > hi {
                        return Err(kerr(format!("range {lo}..{hi} is empty")));
                    }
                    ranges.push((self.shifts[i] as u8, full, lo, hi));
                    (0, 0)
                }
                (_, k) => return Err(kerr(format!("expected a {} match", k.as_str()))),
            };
            value |= (v as u128) << self.shifts[i];
            msk |= (fm as u128) << self.shifts[i];
        }
        Ok((value, msk, ranges))
    }

    /// Adds an entry (P4Runtime semantics: an entry with the same match and priority exists
    /// -> error).
    pub fn add(
        &mut self,
        t: &Table,
        actions: &[crate::ir::Action],
        spec: &EntrySpec,
    ) -> Result<u32, TableError> {
        if self.read_only {
            return Err(TableError::Const);
        }
        let (value, msk, ranges) = self.check_matches(t, &spec.matches)?;
        let prio = if matches!(self.index, Index::Linear(_)) {
            spec.priority
        } else {
            0
        };
        let key = (spec.matches.clone(), prio);
        if self.by_match.contains_key(&key) {
            return Err(TableError::Exists);
        }
        if self.n_live as u64 >= self.limit {
            return Err(TableError::Full(self.limit));
        }
        let mut e = self.make_entry(
            t,
            actions,
            spec.matches.clone(),
            spec.action,
            &spec.params,
            prio,
        )?;
        e.value = value;
        e.mask = msk;
        e.ranges = ranges;
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.entries.push(EntryRt::default());
                self.direct.push([0; 2]);
                self.entries.len() as u32 - 1
            }
        };
        // Index first (may fail), then publish the entry.
        let lpm_len = spec.matches.iter().find_map(|m| match m {
            Match::Lpm(_, l) => Some(*l),
            _ => None,
        });
        let r: Result<(), TableError> = match &mut self.index {
            Index::None => Err(TableError::Index("a keyless table takes no entries".into())),
            Index::Exact(h) => {
                h.insert(value as u64, id);
                Ok(())
            }
            Index::ExactWide(v) => {
                let p = v.partition_point(|x| x.0 < value);
                v.insert(p, (value, id));
                Ok(())
            }
            Index::Lpm32(l, ep) => {
                ep.quiesce(0);
                l.insert(ep, value as u32, lpm_len.unwrap_or(32), id)
                    .map_err(|e| TableError::Index(e.to_string()))
            }
            Index::LpmLen(v, ep) => {
                ep.quiesce(0);
                let l = lpm_len.unwrap_or(0);
                let p = match v.iter().position(|x| x.0 == l) {
                    Some(p) => p,
                    None => {
                        let p = v.partition_point(|x| x.0 > l);
                        v.insert(p, (l, msk, Bihash::new()));
                        p
                    }
                };
                v[p].2
                    .insert(ep, value as u64, id as u64)
                    .map(|_| ())
                    .map_err(|e| TableError::Index(e.to_string()))
            }
            Index::Linear(v) => {
                let ents = &self.entries;
                let p = v.partition_point(|&x| ents[x as usize].priority >= prio);
                v.insert(p, id);
                Ok(())
            }
        };
        if let Err(err) = r {
            self.free.push(id);
            return Err(err);
        }
        self.entries[id as usize] = e;
        self.direct[id as usize] = [0; 2];
        self.by_match.insert(key, id);
        self.n_live += 1;
        Ok(id)
    }

    /// Deletes the entry with this match (and priority, for ternary/range tables).
    pub fn del(&mut self, matches: &[Match], priority: u32) -> Result<(), TableError> {
        if self.read_only {
            return Err(TableError::Const);
        }
        let prio = if matches!(self.index, Index::Linear(_)) {
            priority
        } else {
            0
        };
        let id = self
            .by_match
            .remove(&(matches.to_vec(), prio))
            .ok_or(TableError::NotFound)?;
        let e = &self.entries[id as usize];
        let (value, lpm_len) = (
            e.value,
            matches.iter().find_map(|m| match m {
                Match::Lpm(_, l) => Some(*l),
                _ => None,
            }),
        );
        match &mut self.index {
            Index::None => {}
            Index::Exact(h) => h.remove(value as u64),
            Index::ExactWide(v) => v.retain(|x| x.1 != id),
            Index::Lpm32(l, ep) => {
                ep.quiesce(0);
                l.remove(ep, value as u32, lpm_len.unwrap_or(32));
            }
            Index::LpmLen(v, ep) => {
                ep.quiesce(0);
                let l = lpm_len.unwrap_or(0);
                if let Some(p) = v.iter().position(|x| x.0 == l) {
                    v[p].2.remove(ep, value as u64);
                    if v[p].2.is_empty() {
                        v.remove(p);
                    }
                }
            }
            Index::Linear(v) => v.retain(|&x| x != id),
        }
        self.entries[id as usize].live = false;
        self.free.push(id);
        self.n_live -= 1;
        Ok(())
    }

    /// Removes every entry.
    pub fn clear(&mut self) -> Result<(), TableError> {
        if self.read_only {
            return Err(TableError::Const);
        }
        let keys: Vec<(Vec<Match>, u32)> = self.by_match.keys().cloned().collect();
        for (m, p) in keys {
            self.del(&m, p)?;
        }
        self.pool.clear();
        Ok(())
    }

    /// The concatenated key of a packet from its field values.
    #[inline(always)]
    pub fn key_of(&self, vals: &[u64]) -> u128 {
        let mut k = 0u128;
        for (i, &v) in vals.iter().enumerate() {
            k |= (v as u128) << self.shifts[i];
        }
        k
    }

    /// The entry id matching `k`.
    #[inline(always)]
    pub fn lookup(&self, k: u128) -> Option<u32> {
        match &self.index {
            Index::None => None,
            Index::Exact(h) => h.get(k as u64),
            Index::Lpm32(l, _) => l.lookup(k as u32),
            Index::ExactWide(v) => v.binary_search_by(|x| x.0.cmp(&k)).ok().map(|p| v[p].1),
            Index::LpmLen(v, _) => v
                .iter()
                .find_map(|(_, m, h)| h.get((k & m) as u64))
                .map(|x| x as u32),
            Index::Linear(v) => v
                .iter()
                .copied()
                .find(|&id| self.entries[id as usize].matches_key(k)),
        }
    }

    /// The DIR-24-8 index of a single 32-bit lpm key (batched lookups, `lookup_x4`).
    #[inline(always)]
    pub fn lpm32(&self) -> Option<&Ip4Lpm> {
        match &self.index {
            Index::Lpm32(l, _) => Some(l),
            _ => None,
        }
    }

    /// Starts loading the entry `id` a lookup returned (a batched lookup prefetches its
    /// frame's entries before running their actions).
    #[inline(always)]
    pub fn prefetch_entry(&self, id: Option<u32>) {
        if let Some(e) = id.and_then(|i| self.entries.get(i as usize)) {
            sluice_infra::prefetch(e);
        }
    }

    /// [`TableRt::lookup`] for keys of at most 64 bits.
    #[inline(always)]
    pub fn lookup64(&self, k: u64) -> Option<u32> {
        match &self.index {
            Index::Exact(h) => h.get(k),
            _ => self.lookup(k as u128),
        }
    }

    /// Live entries (id, entry), in priority/insertion order for `show`.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &EntryRt)> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.live)
            .map(|(i, e)| (i as u32, e))
    }

    /// The entry id of a match (for `show` of one entry and counters).
    pub fn find(&self, matches: &[Match], priority: u32) -> Option<u32> {
        let prio = if matches!(self.index, Index::Linear(_)) {
            priority
        } else {
            0
        };
        self.by_match.get(&(matches.to_vec(), prio)).copied()
    }

    /// Whether entries are fixed by the program.
    pub fn read_only(&self) -> bool {
        self.read_only
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Action, Key, E};

    fn table(kinds: &[(MatchKind, u16)]) -> (Table, Vec<Action>) {
        let actions = vec![
            Action {
                name: "NoAction".into(),
                control: String::new(),
                params: vec![],
                body: vec![],
            },
            Action {
                name: "fwd".into(),
                control: "I".into(),
                params: vec![("port".into(), 9)],
                body: vec![],
            },
        ];
        let t = Table {
            name: "t".into(),
            control: "I".into(),
            keys: kinds
                .iter()
                .enumerate()
                .map(|(i, &(kind, width))| Key {
                    name: format!("k{i}"),
                    e: E::Const(0),
                    kind,
                    width,
                })
                .collect(),
            actions: vec![0, 1],
            default: (0, vec![]),
            default_const: false,
            const_entries: None,
            size: None,
            direct_counter: None,
            synthetic: false,
        };
        (t, actions)
    }

    fn spec(m: Vec<Match>, p: u64, prio: u32) -> EntrySpec {
        EntrySpec {
            matches: m,
            action: 1,
            params: vec![p],
            priority: prio,
        }
    }

    #[test]
    fn exact_lpm_ternary_range() {
        let (t, a) = table(&[(MatchKind::Exact, 48)]);
        let mut r = TableRt::new(&t, &a).unwrap();
        let id = r
            .add(&t, &a, &spec(vec![Match::Exact(0x0200_0000_0001)], 3, 0))
            .unwrap();
        assert_eq!(r.lookup(r.key_of(&[0x0200_0000_0001])), Some(id));
        assert_eq!(r.lookup(r.key_of(&[0x0200_0000_0002])), None);
        assert_eq!(
            r.add(&t, &a, &spec(vec![Match::Exact(0x0200_0000_0001)], 3, 0)),
            Err(TableError::Exists)
        );
        r.del(&[Match::Exact(0x0200_0000_0001)], 0).unwrap();
        assert_eq!(r.lookup(r.key_of(&[0x0200_0000_0001])), None);

        let (t, a) = table(&[(MatchKind::Lpm, 32)]);
        let mut r = TableRt::new(&t, &a).unwrap();
        assert_eq!(r.index_kind(), "lpm DIR-24-8 (fib ip4)");
        let a8 = r
            .add(&t, &a, &spec(vec![Match::Lpm(0x0a00_0000, 8)], 1, 0))
            .unwrap();
        let a24 = r
            .add(&t, &a, &spec(vec![Match::Lpm(0x0a01_0200, 24)], 2, 0))
            .unwrap();
        assert_eq!(r.lookup(0x0a01_0203), Some(a24));
        assert_eq!(r.lookup(0x0a01_0303), Some(a8));
        assert_eq!(r.lookup(0x0b01_0303), None);
        assert!(matches!(
            r.add(&t, &a, &spec(vec![Match::Lpm(0x0a01_0201, 24)], 2, 0)),
            Err(TableError::Key(..))
        ));

        // lpm + exact: hash per prefix length.
        let (t, a) = table(&[(MatchKind::Exact, 8), (MatchKind::Lpm, 16)]);
        let mut r = TableRt::new(&t, &a).unwrap();
        let x = r
            .add(
                &t,
                &a,
                &spec(vec![Match::Exact(1), Match::Lpm(0xab00, 8)], 1, 0),
            )
            .unwrap();
        let y = r
            .add(
                &t,
                &a,
                &spec(vec![Match::Exact(1), Match::Lpm(0xabc0, 12)], 1, 0),
            )
            .unwrap();
        assert_eq!(r.lookup(r.key_of(&[1, 0xabcd])), Some(y));
        assert_eq!(r.lookup(r.key_of(&[1, 0xab0d])), Some(x));
        assert_eq!(r.lookup(r.key_of(&[2, 0xabcd])), None);

        let (t, a) = table(&[(MatchKind::Ternary, 8), (MatchKind::Range, 16)]);
        let mut r = TableRt::new(&t, &a).unwrap();
        let lo = r
            .add(
                &t,
                &a,
                &spec(vec![Match::Ternary(0, 0), Match::Range(0, 65535)], 1, 1),
            )
            .unwrap();
        let hi = r
            .add(
                &t,
                &a,
                &spec(vec![Match::Ternary(6, 0xff), Match::Range(80, 80)], 2, 10),
            )
            .unwrap();
        assert_eq!(r.lookup(r.key_of(&[6, 80])), Some(hi));
        assert_eq!(r.lookup(r.key_of(&[6, 81])), Some(lo));
        assert_eq!(r.lookup(r.key_of(&[17, 80])), Some(lo));
        // Same match, other priority: a different entry.
        assert!(r
            .add(
                &t,
                &a,
                &spec(vec![Match::Ternary(6, 0xff), Match::Range(80, 80)], 2, 11)
            )
            .is_ok());
        assert_eq!(r.len(), 3);
        r.clear().unwrap();
        assert_eq!(r.len(), 0);
        assert_eq!(r.lookup(r.key_of(&[6, 80])), None);
    }

    #[test]
    fn bad_entries_are_refused() {
        let (t, a) = table(&[(MatchKind::Exact, 8)]);
        let mut r = TableRt::new(&t, &a).unwrap();
        assert!(matches!(
            r.add(&t, &a, &spec(vec![Match::Exact(256)], 1, 0)),
            Err(TableError::Key(..))
        ));
        assert!(matches!(
            r.add(&t, &a, &spec(vec![Match::Exact(1)], 512, 0)),
            Err(TableError::ParamWidth(..))
        ));
        assert!(matches!(
            r.add(&t, &a, &spec(vec![], 1, 0)),
            Err(TableError::KeyCount(1, 0))
        ));
        assert!(matches!(
            r.add(&t, &a, &spec(vec![Match::Lpm(1, 8)], 1, 0)),
            Err(TableError::Key(..))
        ));
        assert_eq!(r.del(&[Match::Exact(1)], 0), Err(TableError::NotFound));
        let mut t2 = t.clone();
        t2.size = Some(1);
        let mut r = TableRt::new(&t2, &a).unwrap();
        r.add(&t2, &a, &spec(vec![Match::Exact(1)], 1, 0)).unwrap();
        assert_eq!(
            r.add(&t2, &a, &spec(vec![Match::Exact(2)], 1, 0)),
            Err(TableError::Full(1))
        );
    }

    #[test]
    fn wide_exact_keys() {
        let (t, a) = table(&[(MatchKind::Exact, 64), (MatchKind::Exact, 40)]);
        let mut r = TableRt::new(&t, &a).unwrap();
        assert_eq!(r.index_kind(), "exact sorted array");
        let id = r
            .add(
                &t,
                &a,
                &spec(vec![Match::Exact(u64::MAX), Match::Exact(5)], 1, 0),
            )
            .unwrap();
        assert_eq!(r.lookup(r.key_of(&[u64::MAX, 5])), Some(id));
        assert_eq!(r.lookup(r.key_of(&[u64::MAX, 4])), None);
    }
}
