//! The reader library: map a segment read-only and take consistent snapshots of it.
//!
//! A reader never blocks the writer and never sees a torn or half-updated value: it follows
//! the sequence lock described in [`crate::layout`] and retries a read that overlapped a
//! write section (the daemon writes for tens of microseconds per update interval). Everything
//! read from shared memory is checked (offsets, sizes, kinds, UTF-8): a corrupt segment is an
//! error, never a panic or an unbounded allocation.

use crate::layout::{self, hdr, Kind, ENTRY_WORDS};
use crate::shm::{self, Mapping};
use crate::StatsError;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A value read from the segment.
#[derive(Clone, Debug, PartialEq)]
pub enum StatValue {
    /// A scalar.
    Scalar(f64),
    /// `[thread][item]` counters.
    Simple(Vec<Vec<u64>>),
    /// `[thread][item]` (packets, bytes).
    Combined(Vec<Vec<(u64, u64)>>),
    /// `[thread][item]` gauges.
    Gauges(Vec<Vec<f64>>),
    /// Names by item ("" for none).
    Names(Vec<String>),
}

impl StatValue {
    /// Sum over threads of item `i` (packets for combined counters).
    pub fn item_total(&self, i: usize) -> u64 {
        match self {
            StatValue::Simple(v) => v.iter().filter_map(|r| r.get(i)).sum(),
            StatValue::Combined(v) => v.iter().filter_map(|r| r.get(i)).map(|p| p.0).sum(),
            _ => 0,
        }
    }
    /// Sum over threads of item `i`'s bytes (combined counters).
    pub fn item_bytes(&self, i: usize) -> u64 {
        match self {
            StatValue::Combined(v) => v.iter().filter_map(|r| r.get(i)).map(|p| p.1).sum(),
            _ => 0,
        }
    }
}

/// One entry of a snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Stat {
    /// Path.
    pub name: String,
    /// Value (a symlink reads as a one-item vector of its target's kind).
    pub value: StatValue,
    /// Whether the entry is a symlink.
    pub symlink: bool,
}

/// A directory entry as the reader caches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Path.
    pub name: String,
    /// Kind.
    pub kind: Kind,
    rows: u64,
    cols: u64,
    data: u64,
}

/// Header fields (`sluicectl stats ls -l`, `show statistics segment`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderInfo {
    /// Segment size.
    pub size: u64,
    /// Bytes in use.
    pub used: u64,
    /// Directory generation.
    pub epoch: u64,
    /// Update sequence.
    pub seq: u64,
    /// Directory entries.
    pub entries: u64,
    /// Threads.
    pub n_threads: u64,
    /// The writer's pid.
    pub writer_pid: u64,
}

/// How long a read keeps retrying while the writer is busy before giving up.
const BUSY_LIMIT: Duration = Duration::from_secs(2);

/// A read-only view of a statistics segment.
pub struct StatClient {
    map: Mapping,
    dir: Option<(u64, Vec<DirEntry>)>,
    retries: u64,
}

/// Whether `name` matches `pattern`: the pattern occurs in the name, `*` stands for any run
/// of characters, a leading `^` anchors it at the start and a trailing `$` at the end
/// (`/if/rx`, `^/err/ip4-input/`, `/interfaces/pg*/rx$`). An empty pattern list matches
/// everything.
pub fn matches_any(name: &str, patterns: &[String]) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| matches(name, p))
}

/// One pattern (see [`matches_any`]).
pub fn matches(name: &str, pattern: &str) -> bool {
    let (start, p) = match pattern.strip_prefix('^') {
        Some(p) => (true, p),
        None => (false, pattern),
    };
    let (end, p) = match p.strip_suffix('$') {
        Some(p) => (true, p),
        None => (false, p),
    };
    let mut g = Vec::with_capacity(p.len() + 2);
    if !start {
        g.push(b'*');
    }
    g.extend_from_slice(p.as_bytes());
    if !end {
        g.push(b'*');
    }
    glob(name.as_bytes(), &g)
}

/// `*`-only glob match, linear backtracking (no exponential blow-up).
fn glob(s: &[u8], p: &[u8]) -> bool {
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if j < p.len() && p[j] == b'*' {
            star = Some((j, i));
            j += 1;
        } else if j < p.len() && p[j] == s[i] {
            i += 1;
            j += 1;
        } else if let Some((sj, si)) = star {
            j = sj + 1;
            i = si + 1;
            star = Some((sj, si + 1));
        } else {
            return false;
        }
    }
    p[j..].iter().all(|&c| c == b'*')
}

fn corrupt(what: impl Into<String>) -> StatsError {
    StatsError::Corrupt(what.into())
}

impl StatClient {
    /// Connects to a daemon's stats socket (`statseg { socket-name }`) and maps the segment
    /// it hands over. The socket is checked first as `sluicectl` checks the CLI socket (a
    /// socket owned by the caller or root, in a directory others cannot write).
    pub fn connect(path: &Path) -> Result<StatClient, StatsError> {
        sluice_infra::unix_socket::check_before_connect(path).map_err(|e| {
            StatsError::Socket(format!("cannot connect to {}: {e}", path.display()))
        })?;
        let s = UnixStream::connect(path)
            .map_err(|e| StatsError::Io(format!("cannot connect to {}", path.display()), e))?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let fd = shm::recv_fd(&s).map_err(|e| StatsError::Io(format!("{}", path.display()), e))?;
        StatClient::from_fd(&fd)
    }

    /// Maps a segment from its fd (read-only).
    pub fn from_fd(fd: &OwnedFd) -> Result<StatClient, StatsError> {
        let map = shm::map_readonly(fd)
            .map_err(|e| StatsError::Io("cannot map the statistics segment".into(), e))?;
        StatClient::from_mapping(map)
    }

    fn from_mapping(map: Mapping) -> Result<StatClient, StatsError> {
        let w = map.words();
        if w[hdr::MAGIC].load(Ordering::Acquire) != layout::MAGIC {
            return Err(StatsError::NotSegment("bad magic".into()));
        }
        let v = w[hdr::VERSION].load(Ordering::Relaxed);
        if v != layout::VERSION {
            return Err(StatsError::NotSegment(format!(
                "layout version {v}, this reader knows {}",
                layout::VERSION
            )));
        }
        Ok(StatClient {
            map,
            dir: None,
            retries: 0,
        })
    }

    /// Reads that had to be retried because the writer was updating (diagnostics).
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// The header, read consistently.
    pub fn header(&mut self) -> Result<HeaderInfo, StatsError> {
        self.read(|w, _| {
            Ok(HeaderInfo {
                size: w[hdr::SIZE].load(Ordering::Relaxed),
                used: w[hdr::DATA_USED].load(Ordering::Relaxed),
                epoch: w[hdr::EPOCH].load(Ordering::Relaxed),
                seq: w[hdr::SEQ].load(Ordering::Relaxed),
                entries: w[hdr::DIR_COUNT].load(Ordering::Relaxed),
                n_threads: w[hdr::N_THREADS].load(Ordering::Relaxed),
                writer_pid: w[hdr::WRITER_PID].load(Ordering::Relaxed),
            })
        })
    }

    /// Entry names matching `patterns` (see [`matches_any`]), in directory order.
    pub fn ls(&mut self, patterns: &[String]) -> Result<Vec<DirEntry>, StatsError> {
        self.read(|_, dir| {
            Ok(dir
                .iter()
                .filter(|e| matches_any(&e.name, patterns))
                .cloned()
                .collect())
        })
    }

    /// A consistent snapshot of the entries matching `patterns` (every value from the same
    /// update).
    pub fn dump(&mut self, patterns: &[String]) -> Result<Vec<Stat>, StatsError> {
        self.dump_where(|e| matches_any(&e.name, patterns))
    }

    /// A consistent snapshot of the entries `keep` selects.
    pub fn dump_where(
        &mut self,
        keep: impl Fn(&DirEntry) -> bool,
    ) -> Result<Vec<Stat>, StatsError> {
        self.read(|w, dir| {
            let mut out = Vec::new();
            for e in dir.iter().filter(|e| keep(e)) {
                out.push(Stat {
                    name: e.name.clone(),
                    value: read_value(w, dir, e)?,
                    symlink: e.kind == Kind::Symlink,
                });
            }
            Ok(out)
        })
    }

    /// Runs `f` on the words and the current directory inside one sequence-lock window,
    /// retrying until no write section overlapped it.
    fn read<T>(
        &mut self,
        mut f: impl FnMut(&[AtomicU64], &[DirEntry]) -> Result<T, StatsError>,
    ) -> Result<T, StatsError> {
        let t0 = Instant::now();
        let mut spins = 0u32;
        loop {
            let w = self.map.words();
            let s1 = w[hdr::SEQ].load(Ordering::Acquire);
            let r = if s1 & 1 == 1 {
                None
            } else {
                let epoch = w[hdr::EPOCH].load(Ordering::Relaxed);
                // The cached directory, if still of this epoch (moved out, not cloned).
                let cached = match self.dir.take() {
                    Some((e, d)) if e == epoch => Some(d),
                    _ => None,
                };
                let fresh = cached.is_none();
                let dir = match cached {
                    Some(d) => Ok(d),
                    None => read_dir(w),
                };
                let (r, dir) = match dir {
                    Ok(d) => (f(w, &d), Some(d)),
                    Err(e) => (Err(e), None),
                };
                // The reader half of the sequence lock: every load above happens before the
                // second read of the sequence.
                fence(Ordering::Acquire);
                let s2 = w[hdr::SEQ].load(Ordering::Relaxed);
                // A directory read in an overlapped window may be garbage: keep only one
                // read cleanly, or the cached one (its epoch is checked again next time).
                if s1 == s2 || !fresh {
                    self.dir = dir.map(|d| (epoch, d));
                }
                (s1 == s2).then_some(r)
            };
            match r {
                Some(r) => return r,
                None => {
                    self.retries += 1;
                    spins += 1;
                    if t0.elapsed() > BUSY_LIMIT {
                        return Err(StatsError::Busy);
                    }
                    if spins < 64 {
                        std::hint::spin_loop();
                    } else if spins < 128 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            }
        }
    }
}

/// Reads `len` bytes at byte offset `off` as a string.
fn read_str(w: &[AtomicU64], off: u64, len: u64) -> Result<String, StatsError> {
    if len as usize > layout::MAX_NAME || off % 8 != 0 {
        return Err(corrupt(format!("string at {off} of {len} bytes")));
    }
    let first = (off / 8) as usize;
    let n = layout::words_for(len as usize);
    let words = w
        .get(first..first.saturating_add(n))
        .ok_or_else(|| corrupt(format!("string at {off} past the end")))?;
    let mut b = Vec::with_capacity(n * 8);
    for x in words {
        b.extend_from_slice(&x.load(Ordering::Relaxed).to_le_bytes());
    }
    b.truncate(len as usize);
    String::from_utf8(b).map_err(|_| corrupt(format!("string at {off} is not UTF-8")))
}

fn read_dir(w: &[AtomicU64]) -> Result<Vec<DirEntry>, StatsError> {
    let off = w[hdr::DIR_OFFSET].load(Ordering::Relaxed);
    let count = w[hdr::DIR_COUNT].load(Ordering::Relaxed);
    if off % 8 != 0 {
        return Err(corrupt("directory offset"));
    }
    let first = (off / 8) as usize;
    let end = (count as usize)
        .checked_mul(ENTRY_WORDS)
        .and_then(|n| n.checked_add(first))
        .filter(|&e| e <= w.len())
        .ok_or_else(|| corrupt(format!("directory of {count} entries past the end")))?;
    let mut out = Vec::with_capacity(count as usize);
    for e in w[first..end].chunks_exact(ENTRY_WORDS) {
        let f = |k: usize| e[k].load(Ordering::Relaxed);
        let kind = Kind::from_word(f(0)).ok_or_else(|| corrupt(format!("kind {}", f(0))))?;
        out.push(DirEntry {
            name: read_str(w, f(4), f(5))?,
            kind,
            rows: f(1),
            cols: f(2),
            data: f(3),
        });
    }
    Ok(out)
}

/// The words of a `rows * cols * per` array at byte offset `off`.
fn cells<'a>(w: &'a [AtomicU64], e: &DirEntry, per: u64) -> Result<&'a [AtomicU64], StatsError> {
    if e.rows > layout::MAX_THREADS || e.data % 8 != 0 {
        return Err(corrupt(format!("`{}': shape", e.name)));
    }
    let n = e
        .rows
        .checked_mul(e.cols)
        .and_then(|n| n.checked_mul(per))
        .ok_or_else(|| corrupt(format!("`{}': size", e.name)))?;
    let first = (e.data / 8) as usize;
    w.get(first..first.saturating_add(n as usize))
        .filter(|s| s.len() == n as usize)
        .ok_or_else(|| corrupt(format!("`{}': data past the end", e.name)))
}

fn read_value(w: &[AtomicU64], dir: &[DirEntry], e: &DirEntry) -> Result<StatValue, StatsError> {
    let load = |x: &AtomicU64| x.load(Ordering::Relaxed);
    Ok(match e.kind {
        Kind::Scalar => StatValue::Scalar(f64::from_bits(load(
            cells(w, e, 1)?
                .first()
                .ok_or_else(|| corrupt(format!("`{}': empty scalar", e.name)))?,
        ))),
        Kind::Simple => {
            let c = cells(w, e, 1)?;
            StatValue::Simple(rows(c, e, 1, |x| load(&x[0])))
        }
        Kind::Gauges => {
            let c = cells(w, e, 1)?;
            StatValue::Gauges(rows(c, e, 1, |x| f64::from_bits(load(&x[0]))))
        }
        Kind::Combined => {
            let c = cells(w, e, 2)?;
            StatValue::Combined(rows(c, e, 2, |x| (load(&x[0]), load(&x[1]))))
        }
        Kind::Names => {
            let t = cells(w, e, 2)?;
            let mut v = Vec::with_capacity(e.cols as usize);
            for p in t.chunks_exact(2) {
                v.push(read_str(w, load(&p[0]), load(&p[1]))?);
            }
            StatValue::Names(v)
        }
        Kind::Symlink => {
            let t = dir
                .get(e.cols as usize)
                .filter(|t| t.kind != Kind::Symlink && t.kind != Kind::Names)
                .ok_or_else(|| corrupt(format!("`{}': bad symlink target", e.name)))?;
            let item = e.data as usize;
            if e.data >= t.cols {
                return Err(corrupt(format!("`{}': bad symlink item", e.name)));
            }
            // Read the target's one column only (not its whole vector).
            let one = DirEntry {
                name: t.name.clone(),
                kind: t.kind,
                rows: t.rows,
                cols: t.cols,
                data: t.data,
            };
            match t.kind {
                Kind::Scalar => read_value(w, dir, &one)?,
                _ => {
                    let per = if t.kind == Kind::Combined { 2 } else { 1 };
                    let c = cells(w, &one, per)?;
                    let cols = t.cols as usize;
                    let per = per as usize;
                    if cols == 0 {
                        return Err(corrupt(format!("`{}': empty symlink target", e.name)));
                    }
                    let sub: Vec<&[AtomicU64]> = c
                        .chunks_exact(cols * per)
                        .map(|r| &r[item * per..item * per + per])
                        .collect();
                    match t.kind {
                        Kind::Simple => {
                            StatValue::Simple(sub.iter().map(|x| vec![load(&x[0])]).collect())
                        }
                        Kind::Gauges => StatValue::Gauges(
                            sub.iter()
                                .map(|x| vec![f64::from_bits(load(&x[0]))])
                                .collect(),
                        ),
                        _ => StatValue::Combined(
                            sub.iter()
                                .map(|x| vec![(load(&x[0]), load(&x[1]))])
                                .collect(),
                        ),
                    }
                }
            }
        }
    })
}

fn rows<T>(
    c: &[AtomicU64],
    e: &DirEntry,
    per: usize,
    f: impl Fn(&[AtomicU64]) -> T,
) -> Vec<Vec<T>> {
    let cols = e.cols as usize;
    if cols == 0 {
        return (0..e.rows).map(|_| Vec::new()).collect();
    }
    c.chunks_exact(cols * per)
        .map(|r| r.chunks_exact(per).map(&f).collect())
        .collect()
}
