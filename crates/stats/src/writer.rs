//! The writer side: one process (the daemon's main thread) owns the segment and is its only
//! writer. [`Segment::write`] opens a write section (the sequence word goes odd), in which the
//! directory may be laid out again ([`Writer::layout`]) and values are stored; dropping the
//! [`Writer`] closes it (sequence even again, the directory epoch bumped if it changed).
//! Readers never block the writer: they retry when a section overlapped their read.

use crate::layout::{self, hdr, Kind, ENTRY_WORDS, HEADER_BYTES};
use crate::shm::{self, Mapping};
use crate::StatsError;
use std::os::fd::OwnedFd;
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// What an entry holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// One f64.
    Scalar,
    /// u64 per thread (`rows`) and item (`cols`).
    Simple {
        /// Threads.
        rows: u32,
        /// Items.
        cols: u32,
    },
    /// (packets, bytes) per thread and item.
    Combined {
        /// Threads.
        rows: u32,
        /// Items.
        cols: u32,
    },
    /// f64 per thread and item.
    Gauges {
        /// Threads.
        rows: u32,
        /// Items.
        cols: u32,
    },
    /// A name per item ("" for none).
    Names(Vec<String>),
    /// Item `item` of entry `target` (an index into the same spec list).
    Symlink {
        /// Target entry.
        target: usize,
        /// Item of the target.
        item: u32,
    },
}

/// One directory entry to lay out.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// Path (`/if/rx`).
    pub name: String,
    /// Contents.
    pub shape: Shape,
}

impl Spec {
    /// A new entry.
    pub fn new(name: impl Into<String>, shape: Shape) -> Spec {
        Spec {
            name: name.into(),
            shape,
        }
    }
}

/// Where an entry's values are.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Kind.
    pub kind: Kind,
    /// Threads.
    pub rows: u32,
    /// Items.
    pub cols: u32,
    /// First data word.
    pub word: usize,
}

/// The segment, owned by its single writer.
pub struct Segment {
    fd: OwnedFd,
    map: Mapping,
    placed: Vec<Placed>,
    seq: u64,
    epoch: u64,
    used: usize,
}

impl Segment {
    /// Creates a segment of `size` bytes (rounded up to a 4 KiB page) for `n_threads` threads,
    /// with an empty directory.
    pub fn create(size: usize, n_threads: usize) -> Result<Segment, StatsError> {
        let size = size.max(HEADER_BYTES * 2).next_multiple_of(4096);
        let (fd, map) = shm::create("sluice-stats", size)
            .map_err(|e| StatsError::Io("cannot create the statistics segment".into(), e))?;
        let w = map.words();
        w[hdr::VERSION].store(layout::VERSION, Ordering::Relaxed);
        w[hdr::SIZE].store(size as u64, Ordering::Relaxed);
        w[hdr::DIR_OFFSET].store(HEADER_BYTES as u64, Ordering::Relaxed);
        w[hdr::N_THREADS].store(n_threads as u64, Ordering::Relaxed);
        w[hdr::DATA_USED].store(HEADER_BYTES as u64, Ordering::Relaxed);
        w[hdr::WRITER_PID].store(std::process::id() as u64, Ordering::Relaxed);
        w[hdr::MAGIC].store(layout::MAGIC, Ordering::Release);
        Ok(Segment {
            fd,
            map,
            placed: Vec::new(),
            seq: 0,
            epoch: 0,
            used: HEADER_BYTES,
        })
    }

    /// The memfd (to hand to readers: see [`crate::shm::readonly_fd`]).
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.map.len()
    }

    /// Bytes in use (header, directory, names and values).
    pub fn used(&self) -> usize {
        self.used
    }

    /// Directory entries.
    pub fn entries(&self) -> usize {
        self.placed.len()
    }

    /// Directory generation.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Write sections closed so far.
    pub fn updates(&self) -> u64 {
        self.seq / 2
    }

    /// The raw words (tests corrupt them).
    #[cfg(test)]
    pub(crate) fn words_for_test(&self) -> &[AtomicU64] {
        self.map.words()
    }

    /// Opens a write section: readers that overlap it retry.
    pub fn write(&mut self) -> Writer<'_> {
        self.seq += 1;
        let w = self.map.words();
        w[hdr::SEQ].store(self.seq, Ordering::Relaxed);
        // Orders the odd sequence before every store of the section (the writer half of a
        // sequence lock).
        fence(Ordering::Release);
        Writer {
            seg: self,
            relaid: false,
        }
    }
}

/// An open write section.
pub struct Writer<'a> {
    seg: &'a mut Segment,
    relaid: bool,
}

/// Words an entry's data takes.
fn data_words(shape: &Shape) -> Option<usize> {
    let cells = |r: u32, c: u32| (r as usize).checked_mul(c as usize);
    Some(match shape {
        Shape::Scalar => 1,
        Shape::Simple { rows, cols } | Shape::Gauges { rows, cols } => cells(*rows, *cols)?,
        Shape::Combined { rows, cols } => cells(*rows, *cols)?.checked_mul(2)?,
        Shape::Names(v) => v.iter().try_fold(v.len() * 2, |acc, s| {
            acc.checked_add(layout::words_for(s.len().min(layout::MAX_NAME)))
        })?,
        Shape::Symlink { .. } => 0,
    })
}

impl Writer<'_> {
    /// Lays the directory out again for `specs` (values start at zero). Fails, changing
    /// nothing, when they do not fit in the segment, a name is too long or a symlink points
    /// at something that is not a counter vector.
    pub fn layout(&mut self, specs: &[Spec]) -> Result<(), StatsError> {
        let size = self.seg.map.len();
        let dir_words = specs.len() * ENTRY_WORDS;
        let mut need = HEADER_BYTES / 8 + dir_words;
        for (i, s) in specs.iter().enumerate() {
            if s.name.len() > layout::MAX_NAME {
                return Err(StatsError::Layout(format!(
                    "name too long ({} bytes): {}…",
                    s.name.len(),
                    truncate(&s.name, 64)
                )));
            }
            if let Shape::Symlink { target, item } = s.shape {
                let ok = specs.get(target).is_some_and(|t| match t.shape {
                    Shape::Simple { cols, .. }
                    | Shape::Combined { cols, .. }
                    | Shape::Gauges { cols, .. } => item < cols,
                    _ => false,
                });
                if !ok {
                    return Err(StatsError::Layout(format!(
                        "symlink `{}' (entry {i}) points at entry {target} item {item}",
                        s.name
                    )));
                }
            }
            let d = data_words(&s.shape)
                .ok_or_else(|| StatsError::Layout(format!("`{}' is too large", s.name)))?;
            need = need
                .checked_add(layout::words_for(s.name.len()))
                .and_then(|n| n.checked_add(d))
                .ok_or_else(|| StatsError::Layout(format!("`{}' is too large", s.name)))?;
        }
        if need.saturating_mul(8) > size {
            return Err(StatsError::Full {
                need: need.saturating_mul(8),
                size,
            });
        }
        let w = self.seg.map.words();
        let dir = HEADER_BYTES / 8;
        let mut cur = dir + dir_words;
        let start = cur;
        // Zero the data area first: values of the new layout start at 0.
        for x in &w[start..need] {
            x.store(0, Ordering::Relaxed);
        }
        let mut placed = Vec::with_capacity(specs.len());
        for (i, s) in specs.iter().enumerate() {
            let name_off = cur;
            cur = put_str(w, cur, &s.name);
            let (kind, rows, cols, data) = match &s.shape {
                Shape::Scalar => (Kind::Scalar, 1, 1, cur),
                Shape::Simple { rows, cols } => (Kind::Simple, *rows, *cols, cur),
                Shape::Combined { rows, cols } => (Kind::Combined, *rows, *cols, cur),
                Shape::Gauges { rows, cols } => (Kind::Gauges, *rows, *cols, cur),
                Shape::Names(v) => {
                    let table = cur;
                    let mut s_cur = table + v.len() * 2;
                    for (k, n) in v.iter().enumerate() {
                        let n = truncate(n, layout::MAX_NAME);
                        w[table + 2 * k].store((s_cur * 8) as u64, Ordering::Relaxed);
                        w[table + 2 * k + 1].store(n.len() as u64, Ordering::Relaxed);
                        s_cur = put_str(w, s_cur, n);
                    }
                    (Kind::Names, 1, v.len() as u32, table)
                }
                Shape::Symlink { target, item } => {
                    (Kind::Symlink, 1, *target as u32, *item as usize)
                }
            };
            let e = dir + i * ENTRY_WORDS;
            let data_field = if kind == Kind::Symlink {
                data as u64
            } else {
                (data * 8) as u64
            };
            for (k, v) in [
                kind as u64,
                rows as u64,
                cols as u64,
                data_field,
                (name_off * 8) as u64,
                s.name.len() as u64,
                0,
                0,
            ]
            .into_iter()
            .enumerate()
            {
                w[e + k].store(v, Ordering::Relaxed);
            }
            cur += data_words(&s.shape).unwrap_or(0);
            placed.push(Placed {
                kind,
                rows,
                cols,
                word: data,
            });
        }
        debug_assert_eq!(cur, need);
        w[hdr::DIR_OFFSET].store((dir * 8) as u64, Ordering::Relaxed);
        w[hdr::DIR_COUNT].store(specs.len() as u64, Ordering::Relaxed);
        w[hdr::DATA_USED].store((need * 8) as u64, Ordering::Relaxed);
        self.seg.placed = placed;
        self.seg.used = need * 8;
        self.relaid = true;
        Ok(())
    }

    /// This section's number: 1 for the first.
    pub fn update_number(&self) -> u64 {
        self.seg.seq.div_ceil(2)
    }

    /// Where entry `e` is (as laid out).
    pub fn placed(&self, e: usize) -> Option<Placed> {
        self.seg.placed.get(e).copied()
    }

    #[inline]
    fn cell(&self, e: usize, row: usize, col: usize, kind: Kind) -> Option<(&[AtomicU64], usize)> {
        let p = self.seg.placed.get(e)?;
        if p.kind != kind || row >= p.rows as usize || col >= p.cols as usize {
            debug_assert!(false, "bad stats cell {e} {row} {col} {kind:?} vs {p:?}");
            return None;
        }
        Some((self.seg.map.words(), p.word + row * p.cols as usize + col))
    }

    /// Sets a simple counter.
    #[inline]
    pub fn set_simple(&self, e: usize, row: usize, col: usize, v: u64) {
        if let Some((w, i)) = self.cell(e, row, col, Kind::Simple) {
            w[i].store(v, Ordering::Relaxed);
        }
    }

    /// Sets a combined counter.
    #[inline]
    pub fn set_combined(&self, e: usize, row: usize, col: usize, packets: u64, bytes: u64) {
        if let Some(p) = self.seg.placed.get(e) {
            if p.kind == Kind::Combined && row < p.rows as usize && col < p.cols as usize {
                let w = self.seg.map.words();
                let i = p.word + 2 * (row * p.cols as usize + col);
                w[i].store(packets, Ordering::Relaxed);
                w[i + 1].store(bytes, Ordering::Relaxed);
            }
        }
    }

    /// Sets a per-thread gauge.
    #[inline]
    pub fn set_gauge(&self, e: usize, row: usize, col: usize, v: f64) {
        if let Some((w, i)) = self.cell(e, row, col, Kind::Gauges) {
            w[i].store(v.to_bits(), Ordering::Relaxed);
        }
    }

    /// Sets a scalar.
    #[inline]
    pub fn set_scalar(&self, e: usize, v: f64) {
        if let Some((w, i)) = self.cell(e, 0, 0, Kind::Scalar) {
            w[i].store(v.to_bits(), Ordering::Relaxed);
        }
    }
}

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        let w = self.seg.map.words();
        if self.relaid {
            self.seg.epoch += 1;
            w[hdr::EPOCH].store(self.seg.epoch, Ordering::Relaxed);
        }
        self.seg.seq += 1;
        // Release: every store of the section happens before the even sequence a reader
        // acquires.
        w[hdr::SEQ].store(self.seg.seq, Ordering::Release);
    }
}

/// Writes `s` at word `at` (zero-padded to a word); returns the next free word.
fn put_str(w: &[AtomicU64], at: usize, s: &str) -> usize {
    let mut cur = at;
    for chunk in s.as_bytes().chunks(8) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        w[cur].store(u64::from_le_bytes(b), Ordering::Relaxed);
        cur += 1;
    }
    cur
}

/// The longest prefix of `s` of at most `n` bytes that ends on a character boundary.
pub(crate) fn truncate(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
