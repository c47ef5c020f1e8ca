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
//! Entries live in a slab (`entries`, reused ids, control plane only). What a hit runs is an
//! action record ([`ActRec`], in `recs`): the action index and its parameters inline (PVPP's
//! pre-resolved rule) and, for the non-optimised mode, a table-local action slot and an
//! offset into a separate parameter pool (one place per record slot, reused with the slot).
//! The index maps a key to a record id:
//!
//! - a table with direct counters, or ternary/range keys, has one record per entry (record
//!   id = entry id, which `direct` is indexed by);
//! - any other table interns its records: entries with the same action and parameters share
//!   one (reference counted), so a large table's index stays as dense as a FIB's and a hit
//!   reads one of a few cache-hot records (100k routes to a few next hops: a few records,
//!   not 100k lines), as the native path's adjacencies are.

use crate::exact::{Direct, OpenHash};
use crate::ir::{mask, EntrySpec, Match, MatchKind, Table, PARAMS_MAX};
use sluice_fib::ip4::{Ip4Lpm, Ip4Table, LpmError};
use sluice_infra::bihash::{Bihash, BihashError};
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
    /// The index refused the entry (a keyless table takes none).
    #[error("index: {0}")]
    Index(String),
    /// The index ran out of room (LPM second-level groups or record values, hash table
    /// size or memory): a resource, not a bad entry.
    #[error("index full: {0}")]
    Capacity(String),
}

impl From<LpmError> for TableError {
    fn from(e: LpmError) -> Self {
        match e {
            LpmError::BadLength(_) => TableError::Index(e.to_string()),
            // The value is the record's number: too many records.
            LpmError::BadValue(_) | LpmError::Full => TableError::Capacity(e.to_string()),
        }
    }
}

impl From<BihashError> for TableError {
    fn from(e: BihashError) -> Self {
        TableError::Capacity(e.to_string())
    }
}

/// A range field of a linear entry: shift in the key, width mask, low, high.
pub type RangeField = (u8, u64, u64, u64);

/// Memo slots per action record ([`ActRec::memo`]).
pub const CHAIN: usize = 2;

/// A later table's lookup remembered in an action record ([`ActRec::memo`]): that table's
/// result for `key` while its version was `ver` (0: never valid, versions start at 1).
#[derive(Clone, Copy, Debug, Default)]
pub struct Memo {
    pub key: u64,
    pub ver: u64,
    pub id: Option<u32>,
}

/// What a hit runs. The action and its first seven parameters are the first cache line
/// (records are line-aligned), which [`TableRt::prefetch_rec`] starts loading; the eighth
/// parameter and the memos are on the second line (the memos fill what was its padding, no
/// memory of their own). So a hit reads one line, unless its action has eight parameters or
/// the table is a chain's first (the generated code then reads the memos too: two lines).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
pub struct ActRec {
    /// Global action index.
    pub action: u16,
    /// Index in the table's action list (non-resolved mode).
    pub slot: u8,
    pub nparams: u8,
    /// Offset of the parameters in `TableRt::pool` (non-resolved mode).
    pub pool_off: u32,
    pub params: [u64; PARAMS_MAX],
    /// Later tables' lookups the generated code remembers in this record
    /// (`gen::rt::chained`), so a packet whose first table hit it finds its next hop
    /// without hashing again: read with the record the packet has in hand already. Per
    /// thread, as the records; valid only for its key and the version of the table looked
    /// up. Used in the records of a table that shares them (only its records are a
    /// chain's first, `gen::chain_tables`).
    pub memo: [Memo; CHAIN],
}

// Two cache lines: the action and seven parameters on the first, the memos in what was the
// second line's padding.
const _: () = assert!(std::mem::size_of::<ActRec>() == 128);
const _: () = assert!(std::mem::offset_of!(ActRec, params) + 7 * 8 <= 64);
const _: () = assert!(std::mem::offset_of!(ActRec, memo) >= 64);

/// One entry (slab slot, control plane).
#[derive(Clone, Debug, Default)]
pub struct EntryRt {
    /// Its action record (`TableRt::recs`).
    pub rec: u32,
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
    /// Keys of at most `exact::DIRECT_BITS` bits: the array is [`TableRt::by_key`].
    Direct,
    Exact(OpenHash),
    ExactWide(Vec<(u128, u32)>),
    Lpm32(Box<Ip4Lpm>, Epochs),
    /// (prefix length, key mask, key -> id), longest first.
    LpmLen(Vec<(u8, u128, Bihash)>, Epochs),
    /// Entry ids, highest priority first.
    Linear(Vec<u32>),
}

/// A table on one thread.
pub struct TableRt {
    entries: Vec<EntryRt>,
    free: Vec<u32>,
    /// Action records, indexed by what [`TableRt::lookup`] returns.
    pub recs: Vec<ActRec>,
    /// Interned records (`shared`): (action, parameters) -> record id, and per record the
    /// number of entries using it; free record ids.
    interned: HashMap<(u16, [u64; PARAMS_MAX]), u32>,
    refs: Vec<u32>,
    free_recs: Vec<u32>,
    /// Entries share records (no direct counters, no ternary/range keys).
    shared: bool,
    /// Match + priority -> entry id (control plane only; never on the packet path).
    by_match: HashMap<(Vec<Match>, u32), u32>,
    index: Index,
    pub default: ActRec,
    /// Parameters of all records (non-resolved mode): the default's at 0, record slot `x`'s
    /// at `(x + 1) * pool_w`, so a reused slot reuses its parameters' place.
    pub pool: Vec<u64>,
    /// Parameters of the widest action of the table; 0 in resolved mode, which reads the
    /// parameters from the records (no pool).
    pool_w: usize,
    /// The direct array of a table whose index is [`Index::Direct`] (empty otherwise):
    /// outside the enum, so [`TableRt::lookup_direct`] is one bounds check and one load.
    by_key: Direct,
    /// The shared read side of a table whose index is [`Index::Lpm32`] (None otherwise):
    /// outside the enum, so [`TableRt::lookup_lpm32`] reaches the first level without
    /// matching on the index kind or going through the writer's box.
    lpm: Option<std::sync::Arc<Ip4Table>>,
    /// Bumped by every change of the entries: memos of an older version are stale.
    ver: u64,
    /// Per entry id: (packets, bytes) for the direct counter (tables that do not share
    /// records, where a hit's id is the entry's).
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
    /// An empty table for `t` (its const entries added); `resolved` (`ir::Opts::resolved`):
    /// hits read their parameters from the records only, so the table keeps no parameter
    /// pool.
    pub fn new(
        t: &Table,
        actions: &[crate::ir::Action],
        resolved: bool,
    ) -> Result<TableRt, TableError> {
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
        } else if t.lpm32() {
            // The generator's test too (`ir::Table::lookup64_fn`).
            Index::Lpm32(Box::new(Ip4Lpm::new()), Epochs::new(1))
        } else if has_lpm && total <= 64 {
            Index::LpmLen(Vec::new(), Epochs::new(1))
        } else if has_lpm {
            Index::Linear(Vec::new())
        } else if t.direct_exact() {
            // The generator's test too (`gen.rs`): one decision for both.
            Index::Direct
        } else if total <= 64 {
            Index::Exact(OpenHash::new())
        } else {
            Index::ExactWide(Vec::new())
        };
        let by_key = if matches!(index, Index::Direct) {
            Direct::new(total as u16)
        } else {
            Direct::empty()
        };
        let lpm = match &index {
            Index::Lpm32(l, _) => Some(l.table().clone()),
            _ => None,
        };
        let shared = t.shares_records();
        let (da, ref dp) = t.default;
        let mut me = TableRt {
            entries: Vec::new(),
            free: Vec::new(),
            recs: Vec::new(),
            interned: HashMap::new(),
            refs: Vec::new(),
            free_recs: Vec::new(),
            shared,
            by_match: HashMap::new(),
            index,
            lpm,
            default: ActRec::default(),
            pool: Vec::new(),
            pool_w: if resolved {
                0
            } else {
                t.actions
                    .iter()
                    .chain([&da])
                    .map(|&a| actions.get(a as usize).map_or(0, |a| a.params.len()))
                    .max()
                    .unwrap_or(0)
            },
            direct: Vec::new(),
            miss: [0; 2],
            widths,
            kinds,
            shifts,
            n_live: 0,
            limit: t.size.unwrap_or(DEFAULT_LIMIT).clamp(1, DEFAULT_LIMIT),
            read_only: false,
            by_key,
            ver: 1,
        };
        let mut d = me.make_rec(t, actions, da, dp)?;
        me.pool_params(None, &mut d);
        me.default = d;
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

    /// Whether entries with the same action and parameters share one record.
    pub fn shares_records(&self) -> bool {
        self.shared
    }

    /// Action records in use.
    #[inline]
    pub fn recs_in_use(&self) -> usize {
        if self.shared {
            self.interned.len()
        } else {
            self.n_live
        }
    }

    /// The action record of an entry (for `show`).
    pub fn rec_of(&self, e: &EntryRt) -> &ActRec {
        &self.recs[e.rec as usize]
    }

    /// Which index the table uses (for `show`).
    pub fn index_kind(&self) -> &'static str {
        match &self.index {
            Index::None => "none (keyless)",
            Index::Direct => "exact direct array",
            Index::Exact(_) => "exact hash (open addressing)",
            Index::ExactWide(_) => "exact sorted array",
            Index::Lpm32(..) => "lpm DIR-24-8 (fib ip4)",
            Index::LpmLen(..) => "lpm hash per prefix length",
            Index::Linear(_) => "priority list",
        }
    }

    fn make_rec(
        &mut self,
        t: &Table,
        actions: &[crate::ir::Action],
        action: u16,
        params: &[u64],
    ) -> Result<ActRec, TableError> {
        let slot = t
            .actions
            .iter()
            .position(|&a| a == action)
            .ok_or_else(|| TableError::Action(actions[action as usize].name.clone()))?;
        let ps = &actions[action as usize].params;
        if ps.len() != params.len() {
            return Err(TableError::ParamCount(ps.len(), params.len()));
        }
        let mut e = ActRec {
            action,
            slot: slot as u8,
            nparams: params.len() as u8,
            ..Default::default()
        };
        for (i, (&v, (n, w))) in params.iter().zip(ps).enumerate() {
            if v > mask(*w) {
                return Err(TableError::ParamWidth(n.clone(), v, *w));
            }
            e.params[i] = v;
        }
        Ok(e)
    }

    /// Stores the parameters of a record about to be stored in record slot `slot` (the
    /// default: `None`) in that slot's place in the pool (its `pool_off`): only for a
    /// record made, not one an entry shares.
    fn pool_params(&mut self, slot: Option<u32>, r: &mut ActRec) {
        if self.pool_w == 0 {
            // Resolved mode (or no action takes parameters): nothing pooled.
            return;
        }
        let off = slot.map_or(0, |x| (x as usize + 1) * self.pool_w);
        let n = r.nparams as usize;
        if self.pool.len() < off + self.pool_w {
            self.pool.resize(off + self.pool_w, 0);
        }
        self.pool[off..off + n].copy_from_slice(&r.params[..n]);
        r.pool_off = off as u32;
    }

    /// The record id for `r` of entry `id`: an interned one (its count raised) when the
    /// table shares records, else `id`'s own slot.
    fn take_rec(&mut self, id: u32, mut r: ActRec) -> u32 {
        if !self.shared {
            self.pool_params(Some(id), &mut r);
            if self.recs.len() <= id as usize {
                self.recs.resize(id as usize + 1, ActRec::default());
            }
            self.recs[id as usize] = r;
            return id;
        }
        let key = (r.action, r.params);
        if let Some(&x) = self.interned.get(&key) {
            self.refs[x as usize] += 1;
            return x;
        }
        let x = match self.free_recs.pop() {
            Some(x) => {
                self.refs[x as usize] = 1;
                x
            }
            None => {
                self.recs.push(r);
                self.refs.push(1);
                self.recs.len() as u32 - 1
            }
        };
        self.pool_params(Some(x), &mut r);
        self.recs[x as usize] = r;
        self.interned.insert(key, x);
        x
    }

    /// Drops one use of record `x` (freed at none, shared tables).
    fn put_rec(&mut self, x: u32) {
        if !self.shared {
            return;
        }
        let r = &mut self.refs[x as usize];
        *r -= 1;
        if *r == 0 {
            let a = &self.recs[x as usize];
            self.interned.remove(&(a.action, a.params));
            self.free_recs.push(x);
        }
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
        let r = self.make_rec(t, actions, spec.action, &spec.params)?;
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.entries.push(EntryRt::default());
                self.direct.push([0; 2]);
                self.entries.len() as u32 - 1
            }
        };
        let rec = self.take_rec(id, r);
        let e = EntryRt {
            rec,
            priority: prio,
            matches: spec.matches.clone(),
            value,
            mask: msk,
            ranges,
            live: true,
        };
        // Index first (may fail), then publish the entry. The index maps to the record.
        let lpm_len = spec.matches.iter().find_map(|m| match m {
            Match::Lpm(_, l) => Some(*l),
            _ => None,
        });
        let r: Result<(), TableError> = match &mut self.index {
            Index::None => Err(TableError::Index("a keyless table takes no entries".into())),
            Index::Direct => {
                self.by_key.insert(value as u64, rec);
                Ok(())
            }
            Index::Exact(h) => {
                h.insert(value as u64, rec);
                Ok(())
            }
            Index::ExactWide(v) => {
                let p = v.partition_point(|x| x.0 < value);
                v.insert(p, (value, rec));
                Ok(())
            }
            Index::Lpm32(l, ep) => {
                ep.quiesce(0);
                l.insert(ep, value as u32, lpm_len.unwrap_or(32), rec)
                    .map_err(TableError::from)
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
                    .insert(ep, value as u64, rec as u64)
                    .map(|_| ())
                    .map_err(TableError::from)
            }
            Index::Linear(v) => {
                let ents = &self.entries;
                let p = v.partition_point(|&x| ents[x as usize].priority >= prio);
                v.insert(p, id);
                Ok(())
            }
        };
        if let Err(err) = r {
            self.put_rec(rec);
            self.free.push(id);
            return Err(err);
        }
        self.entries[id as usize] = e;
        self.direct[id as usize] = [0; 2];
        self.by_match.insert(key, id);
        self.n_live += 1;
        self.ver += 1;
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
        let (value, rec, lpm_len) = (
            e.value,
            e.rec,
            matches.iter().find_map(|m| match m {
                Match::Lpm(_, l) => Some(*l),
                _ => None,
            }),
        );
        match &mut self.index {
            Index::None => {}
            Index::Direct => self.by_key.remove(value as u64),
            Index::Exact(h) => h.remove(value as u64),
            Index::ExactWide(v) => v.retain(|x| x.0 != value),
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
        self.put_rec(rec);
        self.free.push(id);
        self.n_live -= 1;
        self.ver += 1;
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
        // `del` ran in hash order, which differs between the threads' copies: put the free
        // lists in one order so every copy hands the same ids out again (the CLI reads
        // `direct` of every thread by the master's entry id).
        self.free = (0..self.entries.len() as u32).rev().collect();
        if self.shared {
            self.free_recs = (0..self.recs.len() as u32).rev().collect();
        }
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

    /// The record id (`recs`) matching `k`; for a table that does not share records (see
    /// the module doc) also the entry's id (`direct`).
    #[inline(always)]
    pub fn lookup(&self, k: u128) -> Option<u32> {
        match &self.index {
            Index::None => None,
            Index::Direct => self.by_key.get(k as u64),
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
            // (Linear tables do not share records: the entry id is the record id.)
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

    /// Starts loading the record `id` a lookup returned (a batched lookup prefetches its
    /// frame's records before running their actions).
    #[inline(always)]
    pub fn prefetch_rec(&self, id: Option<u32>) {
        if let Some(e) = id.and_then(|i| self.recs.get(i as usize)) {
            sluice_infra::prefetch(e);
        }
    }

    /// The version of the entries (changes with every add and delete).
    #[inline(always)]
    pub fn ver(&self) -> u64 {
        self.ver
    }

    /// Memo `slot` of record `x` (`None`: the default's): for the tests; the generated code
    /// reads `ActRec::memo` in the record it has.
    #[cfg(test)]
    fn memo(&self, x: Option<u32>, slot: usize) -> Option<&Memo> {
        match x {
            Some(x) => self.recs.get(x as usize),
            None => Some(&self.default),
        }
        .and_then(|r| r.memo.get(slot))
    }

    /// Sets memo `slot` of record `x` (`None`: the default's; nothing when there is no
    /// such record).
    #[inline(always)]
    pub fn set_memo(&mut self, x: Option<u32>, slot: usize, m: Memo) {
        let r = match x {
            Some(x) => self.recs.get_mut(x as usize),
            None => Some(&mut self.default),
        };
        if let Some(v) = r.and_then(|r| r.memo.get_mut(slot)) {
            *v = m;
        }
    }

    /// [`TableRt::lookup`] of a table whose keys fit a direct array
    /// (`ir::Table::direct_exact`): one bounds check and one load, no match on the index
    /// kind (any other table misses every key here).
    #[inline(always)]
    pub fn lookup_direct(&self, k: u64) -> Option<u32> {
        self.by_key.get(k)
    }

    /// [`TableRt::lookup`] of a table whose index is a DIR-24-8 (`ir::Table::lpm32`),
    /// through its read side outside the enum: no match on the index kind (any other
    /// table through [`TableRt::lookup`]). The generated code picks it
    /// (`Table::lookup64_fn`) rather than `lookup64` testing for it before every lookup of
    /// every table: that test cost the L2 switch's node 8 instructions a packet (148.9 to
    /// 156.9). Any other table is looked up through the index rather than missing every
    /// key: a DIR-24-8 gets the same answers, and with the miss the router's node compiled
    /// to more instructions a packet (210.1 against 209.1 at 1 route, 225.4 against 223.0
    /// at 100k routes).
    #[inline(always)]
    pub fn lookup_lpm32(&self, k: u64) -> Option<u32> {
        match &self.lpm {
            Some(l) => l.lookup(k as u32),
            None => self.lookup(k as u128),
        }
    }

    /// [`TableRt::lookup`] for keys of at most 64 bits.
    #[inline(always)]
    pub fn lookup64(&self, k: u64) -> Option<u32> {
        match &self.index {
            Index::Direct => self.by_key.get(k),
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

    #[test]
    fn a_full_index_is_a_resource_error() {
        for e in [
            TableError::from(LpmError::Full),
            TableError::from(LpmError::BadValue(1 << 24)),
            TableError::from(BihashError::EntryLimit(8)),
            TableError::from(BihashError::OutOfMemory),
        ] {
            assert!(matches!(e, TableError::Capacity(_)), "{e:?}");
            let p = crate::error::P4Error::Table("t".into(), e);
            assert_eq!(crate::api::retval(&p), sluice_api::Retval::NoResources);
        }
        let e = TableError::from(LpmError::BadLength(33));
        assert_eq!(e, TableError::Index("prefix length 33 > 32".into()));
        let p = crate::error::P4Error::Table("t".into(), e);
        assert_eq!(crate::api::retval(&p), sluice_api::Retval::InvalidValue);
    }
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
            direct_meter: None,
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

    /// The record a lookup of entry `id`'s key returns.
    fn rec(r: &TableRt, id: u32) -> Option<u32> {
        Some(r.entries[id as usize].rec)
    }

    /// `Table::shares_records`, `Table::direct_exact` and `Table::lpm32` (what the generator
    /// decides on) say what the run-time table does, for every index; a keyless table (no
    /// entries) shares nothing.
    #[test]
    fn table_helpers_agree_with_the_index() {
        use MatchKind::*;
        let cases: [&[(MatchKind, u16)]; 10] = [
            &[],
            &[(Exact, 1)],
            &[(Exact, 16)],
            &[(Exact, 17)],
            &[(Exact, 64), (Exact, 64)],
            &[(Lpm, 32)],
            &[(Exact, 8), (Lpm, 16)],
            &[(Exact, 64), (Lpm, 32)],
            &[(Ternary, 8)],
            &[(Exact, 8), (Range, 16)],
        ];
        for keys in cases {
            for direct in [false, true] {
                let (mut t, a) = table(keys);
                t.direct_counter = direct.then(|| "c".to_string());
                let r = TableRt::new(&t, &a, false).unwrap();
                assert_eq!(r.shares_records(), t.shares_records(), "{keys:?} {direct}");
                assert_eq!(
                    r.index_kind() == "exact direct array",
                    t.direct_exact(),
                    "{keys:?}"
                );
                assert_eq!(r.lpm32().is_some(), t.lpm32(), "{keys:?}");
            }
        }
        let (t, _) = table(&[]);
        assert!(!t.shares_records() && !t.direct_exact() && !t.lpm32());
    }

    #[test]
    fn direct_arrays_are_read_without_the_index_kind() {
        let e8 = (MatchKind::Exact, 8);
        for keys in [
            vec![(MatchKind::Exact, 9)],
            vec![(MatchKind::Exact, 16)],
            vec![(MatchKind::Exact, 17)],
            vec![(MatchKind::Exact, 32)],
            vec![e8, e8],
            vec![(MatchKind::Lpm, 32)],
        ] {
            let (t, a) = table(&keys);
            let mut r = TableRt::new(&t, &a, true).unwrap();
            let lpm = keys[0].0 == MatchKind::Lpm;
            // Entry `i`'s key: `i` in every byte key, `i` in a wider one, a /24 for lpm.
            let key = |i: u64| match (lpm, keys.len()) {
                (true, _) => i << 8,
                (false, 2) => i << 8 | i,
                _ => i,
            };
            // The key split over the keys.
            let m = |i: u64| -> Vec<Match> {
                if lpm {
                    return vec![Match::Lpm(i << 8, 24)];
                }
                let mut shift = t.key_bits();
                let mut v = Vec::new();
                for &(_, w) in &keys {
                    shift -= w as u32;
                    v.push(Match::Exact(key(i) >> shift & ((1u64 << w) - 1)));
                }
                v
            };
            let direct = t.direct_exact();
            let bits = t.key_bits();
            assert_eq!(direct, !lpm && bits <= 16, "{keys:?}");
            assert_eq!(r.index_kind() == "exact direct array", direct, "{keys:?}");
            for i in 0..5 {
                r.add(&t, &a, &spec(m(i), i, 0)).unwrap();
            }
            r.del(&m(2), 0).unwrap();
            for i in 0..8u64 {
                let k = key(i);
                let want = r.lookup(k as u128);
                assert_eq!(r.lookup64(k), want, "{keys:?}");
                assert_eq!(want.is_some(), i < 5 && i != 2, "{keys:?} {i}");
                // Only a direct table answers `lookup_direct`; any other misses there.
                // `lookup_lpm32` answers every table (through the index but a DIR-24-8).
                assert_eq!(r.lookup_direct(k), if direct { want } else { None });
                assert_eq!(r.lookup_lpm32(k), want, "{keys:?}");
            }
        }
    }

    /// `lookup_lpm32` reads a DIR-24-8 through its read side kept outside the index enum
    /// (`TableRt::lpm`): the same table, so it sees every add, delete and clear as
    /// `lookup` does, longer prefixes inside shorter ones included.
    #[test]
    fn lpm32_read_side_follows_the_index() {
        let (t, a) = table(&[(MatchKind::Lpm, 32)]);
        let mut r = TableRt::new(&t, &a, true).unwrap();
        assert!(r.lpm.is_some());
        let routes = [(0x1400_0000, 8), (0x1401_0200, 24), (0x1401_0203, 32)];
        for (i, &(p, l)) in routes.iter().enumerate() {
            r.add(&t, &a, &spec(vec![Match::Lpm(p, l)], i as u64, 0))
                .unwrap();
        }
        let keys = [0x1400_0001u64, 0x1401_0201, 0x1401_0203, 0x1501_0203, 0];
        let check = |r: &TableRt, want: [bool; 5]| {
            for (&k, w) in keys.iter().zip(want) {
                assert_eq!(r.lookup_lpm32(k), r.lookup(k as u128), "{k:#x}");
                assert_eq!(r.lookup64(k), r.lookup(k as u128), "{k:#x}");
                assert_eq!(r.lookup_lpm32(k).is_some(), w, "{k:#x}");
            }
        };
        check(&r, [true, true, true, false, false]);
        assert_ne!(r.lookup_lpm32(keys[1]), r.lookup_lpm32(keys[2]));
        r.del(&[Match::Lpm(0x1401_0203, 32)], 0).unwrap();
        check(&r, [true, true, true, false, false]);
        assert_eq!(r.lookup_lpm32(keys[1]), r.lookup_lpm32(keys[2]));
        r.clear().unwrap();
        check(&r, [false; 5]);
        // Any other index has none.
        let (t, a) = table(&[(MatchKind::Exact, 32)]);
        assert!(TableRt::new(&t, &a, true).unwrap().lpm.is_none());
    }

    /// A record's memos are its own (the default's too) and made blank with the record.
    #[test]
    fn memos_live_in_the_records() {
        let (t, a) = table(&[(MatchKind::Lpm, 32)]);
        let mut r = TableRt::new(&t, &a, true).unwrap();
        let id = r
            .add(&t, &a, &spec(vec![Match::Lpm(1 << 8, 24)], 1, 0))
            .unwrap();
        let x = rec(&r, id).unwrap();
        let m = Memo {
            key: 7,
            ver: 3,
            id: Some(9),
        };
        r.set_memo(Some(x), 1, m);
        assert_eq!(r.recs[x as usize].memo[1].id, Some(9));
        assert_eq!(r.memo(Some(x), 1).map(|m| m.key), Some(7));
        assert!(r.memo(Some(1000), 0).is_none());
        assert_eq!(r.recs[x as usize].memo[0].ver, 0);
        assert_eq!(r.default.memo[1].ver, 0);
        r.set_memo(None, 0, m);
        assert_eq!(r.default.memo[0].key, 7);
        // Out of range: nothing.
        r.set_memo(Some(1000), 0, m);
        r.set_memo(Some(x), CHAIN, m);
        // The record freed and made again: blank memos.
        r.del(&[Match::Lpm(1 << 8, 24)], 0).unwrap();
        let id = r
            .add(&t, &a, &spec(vec![Match::Lpm(2 << 8, 24)], 1, 0))
            .unwrap();
        assert_eq!(rec(&r, id), Some(x));
        assert_eq!(r.recs[x as usize].memo[1].ver, 0);
    }

    #[test]
    fn entries_share_records_unless_direct_counted() {
        for (kind, width) in [(MatchKind::Lpm, 32), (MatchKind::Exact, 32)] {
            let (mut t, a) = table(&[(kind, width)]);
            let m = |i: u64| match kind {
                MatchKind::Lpm => Match::Lpm(i << 8, 24),
                _ => Match::Exact(i),
            };
            for direct in [false, true] {
                t.direct_counter = direct.then(|| "c".to_string());
                let mut r = TableRt::new(&t, &a, false).unwrap();
                assert_eq!(r.shares_records(), !direct);
                let ids: Vec<u32> = (0..100)
                    .map(|i| r.add(&t, &a, &spec(vec![m(i)], i % 3, 0)).unwrap())
                    .collect();
                assert_eq!(r.recs_in_use(), if direct { 100 } else { 3 });
                // Parameters pooled once per record made, not per entry (the default's
                // place first, one parameter per record).
                assert_eq!(r.pool.len(), if direct { 101 } else { 4 });
                // Resolved mode reads the records only: no pool at all.
                let mut q = TableRt::new(&t, &a, true).unwrap();
                for i in 0..100 {
                    q.add(&t, &a, &spec(vec![m(i)], i % 3, 0)).unwrap();
                }
                assert!(q.pool.is_empty());
                for (i, &id) in ids.iter().enumerate() {
                    let k = r.key_of(&[(i as u64) << if kind == MatchKind::Lpm { 8 } else { 0 }]);
                    let h = r.lookup(k).unwrap();
                    assert_eq!(Some(h), rec(&r, id));
                    assert_eq!(r.recs[h as usize].params[0], i as u64 % 3);
                    if direct {
                        assert_eq!(h, id);
                    }
                }
                // Every entry of parameter 1 gone: its record is freed, then reused.
                for i in (1..100).step_by(3) {
                    r.del(&[m(i)], 0).unwrap();
                }
                assert_eq!(r.recs_in_use(), if direct { 67 } else { 2 });
                assert_eq!(
                    r.lookup(r.key_of(&[if kind == MatchKind::Lpm { 1 << 8 } else { 1 }])),
                    None
                );
                let id = r.add(&t, &a, &spec(vec![m(1)], 7, 0)).unwrap();
                let h = r.lookup(r.key_of(&[if kind == MatchKind::Lpm { 1 << 8 } else { 1 }]));
                assert_eq!(h, rec(&r, id));
                assert_eq!(r.recs[h.unwrap() as usize].params[0], 7);
                if !direct {
                    // The freed record's slot was reused, not a fourth one made.
                    assert_eq!(r.recs.len(), 3);
                }
                assert_eq!(
                    r.lookup(r.key_of(&[0]))
                        .map(|h| r.recs[h as usize].params[0]),
                    Some(0)
                );
                // Part of a shared group gone: its record stays for the rest.
                for i in [0, 3, 6] {
                    r.del(&[m(i)], 0).unwrap();
                }
                r.add(&t, &a, &spec(vec![m(100)], 9, 0)).unwrap();
                assert_eq!(r.recs_in_use(), if direct { 66 } else { 4 });
                if !direct {
                    assert_eq!(r.recs.len(), 4);
                }
                let kx = |i: u64| r.key_of(&[i << if kind == MatchKind::Lpm { 8 } else { 0 }]);
                let param = |i: u64| r.lookup(kx(i)).map(|h| r.recs[h as usize].params[0]);
                for i in [0, 3, 6] {
                    assert_eq!(param(i), None);
                }
                for i in (9..100).step_by(3) {
                    assert_eq!(param(i), Some(0), "key {i}");
                }
                assert_eq!(param(100), Some(9));
                assert_eq!(param(1), Some(7));
                r.clear().unwrap();
                assert_eq!(r.recs_in_use(), 0);
            }
        }
    }

    #[test]
    fn reused_record_slots_reuse_their_parameters_place() {
        // Churn of distinct next hops: each add makes a new record in the slot the last
        // delete freed; the pool must not grow by one parameter set per record made.
        for direct in [false, true] {
            let (mut t, a) = table(&[(MatchKind::Lpm, 32)]);
            t.direct_counter = direct.then(|| "c".to_string());
            let mut r = TableRt::new(&t, &a, false).unwrap();
            r.add(&t, &a, &spec(vec![Match::Lpm(0x0a00_0000, 8)], 1, 0))
                .unwrap();
            let before = r.pool.len();
            let m = vec![Match::Lpm(0x0b00_0000, 8)];
            for p in 2..500 {
                r.add(&t, &a, &spec(m.clone(), p, 0)).unwrap();
                let h = r.lookup(r.key_of(&[0x0b01_0203])).unwrap();
                let e = r.recs[h as usize];
                assert_eq!(r.pool[e.pool_off as usize], p);
                r.del(&m, 0).unwrap();
            }
            assert!(
                r.pool.len() <= before + 1,
                "pool {} from {before}",
                r.pool.len()
            );
            // The other record's and the default's parameters are untouched.
            let h = r.lookup(r.key_of(&[0x0a01_0203])).unwrap();
            assert_eq!(r.pool[r.recs[h as usize].pool_off as usize], 1);
            assert_eq!(r.default.nparams, 0);
            r.clear().unwrap();
            r.add(&t, &a, &spec(m.clone(), 3, 0)).unwrap();
            let h = r.lookup(r.key_of(&[0x0b01_0203])).unwrap();
            assert_eq!(r.pool[r.recs[h as usize].pool_off as usize], 3);
        }
    }

    #[test]
    fn clear_leaves_copies_handing_out_the_same_ids() {
        let (mut t, a) = table(&[(MatchKind::Exact, 32)]);
        for direct in [false, true] {
            t.direct_counter = direct.then(|| "c".to_string());
            // Two threads' copies (each map its own hash seed).
            let mut cs: Vec<TableRt> = (0..2)
                .map(|_| TableRt::new(&t, &a, false).unwrap())
                .collect();
            let ids: Vec<Vec<(u32, Option<u32>)>> = cs
                .iter_mut()
                .map(|r| {
                    for i in 0..64 {
                        r.add(&t, &a, &spec(vec![Match::Exact(i)], i, 0)).unwrap();
                    }
                    r.clear().unwrap();
                    (0..64)
                        .map(|i| {
                            let id = r
                                .add(&t, &a, &spec(vec![Match::Exact(i + 100)], i / 2, 0))
                                .unwrap();
                            (id, rec(r, id))
                        })
                        .collect()
                })
                .collect();
            assert_eq!(ids[0], ids[1], "direct {direct}");
        }
    }

    #[test]
    fn ternary_and_range_entries_do_not_share_records() {
        for kind in [MatchKind::Ternary, MatchKind::Range] {
            let (t, a) = table(&[(kind, 16)]);
            let mut r = TableRt::new(&t, &a, false).unwrap();
            assert!(!r.shares_records());
            let m = |i: u64| match kind {
                MatchKind::Ternary => Match::Ternary(i, 0xffff),
                _ => Match::Range(i, i),
            };
            // Same action and parameters: still one record each, its id the entry's.
            let x = r.add(&t, &a, &spec(vec![m(1)], 5, 1)).unwrap();
            let y = r.add(&t, &a, &spec(vec![m(2)], 5, 2)).unwrap();
            assert_ne!(rec(&r, x), rec(&r, y));
            assert_eq!(rec(&r, x), Some(x));
            assert_eq!(rec(&r, y), Some(y));
            assert_eq!(r.lookup(r.key_of(&[1])), Some(x));
            assert_eq!(r.lookup(r.key_of(&[2])), Some(y));
            assert_eq!(r.recs_in_use(), 2);
        }
    }

    #[test]
    fn exact_lpm_ternary_range() {
        let (t, a) = table(&[(MatchKind::Exact, 48)]);
        let mut r = TableRt::new(&t, &a, false).unwrap();
        let id = r
            .add(&t, &a, &spec(vec![Match::Exact(0x0200_0000_0001)], 3, 0))
            .unwrap();
        assert_eq!(r.lookup(r.key_of(&[0x0200_0000_0001])), rec(&r, id));
        assert_eq!(r.lookup(r.key_of(&[0x0200_0000_0002])), None);
        assert_eq!(
            r.add(&t, &a, &spec(vec![Match::Exact(0x0200_0000_0001)], 3, 0)),
            Err(TableError::Exists)
        );
        r.del(&[Match::Exact(0x0200_0000_0001)], 0).unwrap();
        assert_eq!(r.lookup(r.key_of(&[0x0200_0000_0001])), None);

        let (t, a) = table(&[(MatchKind::Lpm, 32)]);
        let mut r = TableRt::new(&t, &a, false).unwrap();
        assert_eq!(r.index_kind(), "lpm DIR-24-8 (fib ip4)");
        let a8 = r
            .add(&t, &a, &spec(vec![Match::Lpm(0x0a00_0000, 8)], 1, 0))
            .unwrap();
        let a24 = r
            .add(&t, &a, &spec(vec![Match::Lpm(0x0a01_0200, 24)], 2, 0))
            .unwrap();
        assert_eq!(r.lookup(0x0a01_0203), rec(&r, a24));
        assert_eq!(r.lookup(0x0a01_0303), rec(&r, a8));
        assert_eq!(r.lookup(0x0b01_0303), None);
        assert!(matches!(
            r.add(&t, &a, &spec(vec![Match::Lpm(0x0a01_0201, 24)], 2, 0)),
            Err(TableError::Key(..))
        ));

        // lpm + exact: hash per prefix length.
        let (t, a) = table(&[(MatchKind::Exact, 8), (MatchKind::Lpm, 16)]);
        let mut r = TableRt::new(&t, &a, false).unwrap();
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
                &spec(vec![Match::Exact(1), Match::Lpm(0xabc0, 12)], 2, 0),
            )
            .unwrap();
        assert_eq!(r.lookup(r.key_of(&[1, 0xabcd])), rec(&r, y));
        assert_eq!(r.lookup(r.key_of(&[1, 0xab0d])), rec(&r, x));
        assert_eq!(r.lookup(r.key_of(&[2, 0xabcd])), None);

        let (t, a) = table(&[(MatchKind::Ternary, 8), (MatchKind::Range, 16)]);
        let mut r = TableRt::new(&t, &a, false).unwrap();
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
        assert_eq!(r.lookup(r.key_of(&[6, 80])), rec(&r, hi));
        assert_eq!(r.lookup(r.key_of(&[6, 81])), rec(&r, lo));
        assert_eq!(r.lookup(r.key_of(&[17, 80])), rec(&r, lo));
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
        let mut r = TableRt::new(&t, &a, false).unwrap();
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
        let mut r = TableRt::new(&t2, &a, false).unwrap();
        r.add(&t2, &a, &spec(vec![Match::Exact(1)], 1, 0)).unwrap();
        assert_eq!(
            r.add(&t2, &a, &spec(vec![Match::Exact(2)], 1, 0)),
            Err(TableError::Full(1))
        );
    }

    #[test]
    fn wide_exact_keys() {
        let (t, a) = table(&[(MatchKind::Exact, 64), (MatchKind::Exact, 40)]);
        let mut r = TableRt::new(&t, &a, false).unwrap();
        assert_eq!(r.index_kind(), "exact sorted array");
        let id = r
            .add(
                &t,
                &a,
                &spec(vec![Match::Exact(u64::MAX), Match::Exact(5)], 1, 0),
            )
            .unwrap();
        assert_eq!(r.lookup(r.key_of(&[u64::MAX, 5])), rec(&r, id));
        assert_eq!(r.lookup(r.key_of(&[u64::MAX, 4])), None);
        r.del(&[Match::Exact(u64::MAX), Match::Exact(5)], 0)
            .unwrap();
        assert_eq!(r.lookup(r.key_of(&[u64::MAX, 5])), None);
        assert_eq!(r.recs_in_use(), 0);
    }
}
