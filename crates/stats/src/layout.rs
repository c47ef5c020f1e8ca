//! The segment's binary layout, shared by the writer, the Rust reader and the Python reader
//! (`python/sluice_stats`, which repeats these constants).
//!
//! Everything is little-endian 64-bit words; every offset is in bytes from the start of the
//! segment and a multiple of 8.
//!
//! ```text
//! header (HEADER_BYTES)
//!   word 0  MAGIC                  "SLUICEST"
//!   word 1  VERSION                layout version (this file: 1)
//!   word 2  SIZE                   segment size in bytes
//!   word 3  SEQ                    update sequence: odd while the writer changes anything
//!   word 4  EPOCH                  directory generation: bumped when entries change
//!   word 5  DIR_OFFSET             directory: DIR_COUNT entries of ENTRY_WORDS words
//!   word 6  DIR_COUNT
//!   word 7  N_THREADS              rows of every per-thread vector
//!   word 8  DATA_USED              bytes in use (header + directory + data)
//!   word 9  WRITER_PID
//! entry (ENTRY_WORDS words)
//!   word 0  kind                   Kind
//!   word 1  rows                   threads (per-thread kinds), else 1
//!   word 2  cols                   items;  symlink: target entry index
//!   word 3  data offset            symlink: item index in the target
//!   word 4  name offset            UTF-8 bytes
//!   word 5  name length
//!   word 6-7 reserved (0)
//! data
//!   Scalar   1 word, f64 bits
//!   Simple   rows*cols words, u64, row-major ([thread][item])
//!   Combined rows*cols*2 words: [thread][item] = (packets, bytes)
//!   Gauges   rows*cols words, f64 bits, row-major
//!   Names    cols pairs (string offset, length); length 0 = no name (deleted item)
//! ```
//!
//! Readers follow a sequence lock: read SEQ (acquire), retry while odd; read what they need
//! (every word with an atomic load); read SEQ again and retry if it changed. A directory cached
//! from an earlier read stays valid while EPOCH is unchanged. The writer never waits for them.

/// "SLUICEST" as a little-endian word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SLUICEST");
/// Layout version.
pub const VERSION: u64 = 1;
/// Bytes reserved for the header (the directory starts here).
pub const HEADER_BYTES: usize = 4096;
/// Words per directory entry.
pub const ENTRY_WORDS: usize = 8;

/// Header word indices.
pub mod hdr {
    /// Magic.
    pub const MAGIC: usize = 0;
    /// Layout version.
    pub const VERSION: usize = 1;
    /// Segment size in bytes.
    pub const SIZE: usize = 2;
    /// Update sequence (odd: write in progress).
    pub const SEQ: usize = 3;
    /// Directory generation.
    pub const EPOCH: usize = 4;
    /// Directory offset (bytes).
    pub const DIR_OFFSET: usize = 5;
    /// Directory entries.
    pub const DIR_COUNT: usize = 6;
    /// Thread count.
    pub const N_THREADS: usize = 7;
    /// Bytes in use.
    pub const DATA_USED: usize = 8;
    /// Writer's process id.
    pub const WRITER_PID: usize = 9;
}

/// Entry kinds (VPP's `stat_directory_type_t` where VPP has one).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum Kind {
    /// One f64 (VPP's SCALAR_INDEX).
    Scalar = 1,
    /// u64 per thread and item (VPP's COUNTER_VECTOR_SIMPLE).
    Simple = 2,
    /// (packets, bytes) per thread and item (VPP's COUNTER_VECTOR_COMBINED).
    Combined = 3,
    /// A name per item (VPP's NAME_VECTOR).
    Names = 4,
    /// One item of another entry (VPP's SYMLINK): `/interfaces/pg0/rx` is `/if/rx` item 1.
    Symlink = 5,
    /// f64 per thread and item (a gauge per thread: vector rates, loops per second).
    Gauges = 6,
}

impl Kind {
    /// The kind of a directory word, if valid.
    pub fn from_word(w: u64) -> Option<Kind> {
        Some(match w {
            1 => Kind::Scalar,
            2 => Kind::Simple,
            3 => Kind::Combined,
            4 => Kind::Names,
            5 => Kind::Symlink,
            6 => Kind::Gauges,
            _ => return None,
        })
    }

    /// Name as `sluicectl stats ls -l` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Scalar => "scalar",
            Kind::Simple => "counter",
            Kind::Combined => "combined",
            Kind::Names => "names",
            Kind::Symlink => "symlink",
            Kind::Gauges => "gauges",
        }
    }
}

/// Longest entry or item name the writer stores (bytes); readers refuse longer ones.
pub const MAX_NAME: usize = 1024;
/// Most threads a reader accepts (a sanity bound on data read from shared memory).
pub const MAX_THREADS: u64 = 4096;

/// Words needed for `bytes` bytes.
pub const fn words_for(bytes: usize) -> usize {
    bytes.div_ceil(8)
}
