//! UMEM = the buffer arena's data array ("zero-copy into graph buffers"): the address
//! arithmetic between UMEM addresses and buffer indices, and the bookkeeping of which
//! buffers the kernel holds.
//!
//! The data array of the buffer pool ([`BufferPool::region`]) is registered once as the UMEM
//! with `XDP_UMEM_UNALIGNED_CHUNK_FLAG` (the stride, 256 + 2048 = 2304 bytes, is not a power
//! of two), chunk size = a buffer's headroom + data (`HEADROOM + data_size`) and no UMEM
//! headroom; every other socket shares it (`XDP_SHARED_UMEM`, own fill/completion rings).
//!
//! - rx: a fill address is a buffer's headroom start (`idx * stride`). The kernel writes the
//!   packet `XDP_PACKET_HEADROOM` (256 = Sluice's `HEADROOM`) bytes further, i.e. at the
//!   buffer's data start, and returns, in unaligned mode, the fill address in the low 48
//!   bits of the descriptor and the packet's offset in it (256) in the high 16
//!   (`xp_get_handle`, include/net/xsk_buff_pool.h). So `current_data` = offset - 256.
//! - tx: a descriptor's address is the packet start (`idx * stride + 256 + current_data`)
//!   with a zero offset field; the completion ring returns it unchanged.
//!
//! Ownership ([`Held`]): a buffer given to the kernel (fill ring, tx ring) is marked in a
//! per-ring bitmap until the kernel gives it back (rx ring, completion ring). A descriptor
//! naming a buffer that is not marked is not ours to take: it is counted and ignored, never
//! trusted. Buffers still marked when a socket goes are parked ([`Parking`]) and freed only
//! after the socket is closed, when the kernel can no longer write them.

use sluice_buffer::{BufIdx, BufferPool, HEADROOM};
use std::sync::{Arc, Mutex};

/// `XDP_UMEM_UNALIGNED_CHUNK_FLAG` (`struct xdp_umem_reg.flags`).
pub const UNALIGNED_CHUNK_FLAG: u32 = 1;
/// Unaligned mode: the offset of the data in a chunk is in the descriptor's top 16 bits.
pub const OFFSET_SHIFT: u32 = 48;
const ADDR_MASK: u64 = (1 << OFFSET_SHIFT) - 1;
/// The kernel's smallest and (on kernels before 6.6, and for unaligned chunks without
/// hugepages) largest chunk.
pub const MIN_CHUNK: usize = 2048;
/// See [`MIN_CHUNK`].
pub const MAX_CHUNK: usize = 4096;

/// Where the buffers are in the UMEM (a copy of the pool's geometry).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ArenaGeo {
    /// Buffers in the pool.
    pub n: u32,
    /// Distance between two buffers.
    pub stride: u64,
    /// Headroom + data bytes of one buffer (the UMEM chunk size).
    pub chunk: u32,
}

/// What a received descriptor turned out to be.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RxDesc {
    /// Buffer `idx`, packet at `current_data`, `len` bytes.
    Packet {
        /// The buffer.
        idx: BufIdx,
        /// Offset of the packet from the data start (`BufferHeader::current_data`).
        current_data: i16,
        /// Packet length.
        len: u16,
    },
    /// Not a packet that fits the buffer it names (empty, too long, offset outside the
    /// buffer); `Some` when it names the start of a buffer at all.
    Bad(Option<BufIdx>),
}

impl ArenaGeo {
    /// The geometry of `pool`.
    pub fn of(pool: &BufferPool) -> ArenaGeo {
        ArenaGeo {
            n: pool.len(),
            stride: pool.stride() as u64,
            chunk: (HEADROOM + pool.data_size()) as u32,
        }
    }

    /// Why `pool`'s data array cannot be a UMEM chunked per buffer, if it cannot.
    pub fn unfit(&self) -> Option<String> {
        let c = self.chunk as usize;
        (!(MIN_CHUNK..=MAX_CHUNK).contains(&c)).then(|| {
            format!(
                "a buffer's headroom + data ({c} B) is not a UMEM chunk size ({MIN_CHUNK}..{MAX_CHUNK} B)"
            )
        })
    }

    /// Fill-ring address of buffer `idx`: its headroom start.
    #[inline(always)]
    pub fn fill_addr(&self, idx: BufIdx) -> u64 {
        idx.0 as u64 * self.stride
    }

    /// The buffer whose headroom starts at `base`, if one does.
    #[inline(always)]
    fn at(&self, base: u64) -> Option<BufIdx> {
        let i = base / self.stride;
        (base % self.stride == 0 && i < self.n as u64).then_some(BufIdx(i as u32))
    }

    /// Decodes a received descriptor, bounds-checked against the buffer it names.
    #[inline(always)]
    pub fn rx_desc(&self, addr: u64, len: u32) -> RxDesc {
        let Some(idx) = self.at(addr & ADDR_MASK) else {
            return RxDesc::Bad(None);
        };
        let off = addr >> OFFSET_SHIFT;
        if len == 0 || off + len as u64 > self.chunk as u64 {
            return RxDesc::Bad(Some(idx));
        }
        RxDesc::Packet {
            idx,
            current_data: (off as i64 - HEADROOM as i64) as i16,
            len: len as u16,
        }
    }

    /// Tx address of a packet at `current_data` in buffer `idx`.
    #[inline(always)]
    pub fn tx_addr(&self, idx: BufIdx, current_data: i16) -> u64 {
        (idx.0 as u64 * self.stride).wrapping_add_signed(HEADROOM as i64 + current_data as i64)
    }

    /// The buffer a completed tx address is in.
    #[inline(always)]
    pub fn tx_buffer(&self, addr: u64) -> Option<BufIdx> {
        let i = (addr & ADDR_MASK) / self.stride;
        (i < self.n as u64).then_some(BufIdx(i as u32))
    }
}

/// The buffers one ring has given to the kernel: a bitmap over the pool and a count.
pub struct Held {
    bits: Vec<u64>,
    n: u32,
    count: u32,
}

impl Held {
    /// Nothing held, for a pool of `n` buffers.
    pub fn new(n: u32) -> Held {
        Held {
            bits: vec![0; (n as usize).div_ceil(64)],
            n,
            count: 0,
        }
    }

    /// Buffers held.
    #[inline(always)]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Marks `b` as given to the kernel. False (nothing changes) if it already was or is
    /// outside the pool.
    #[inline(always)]
    pub fn give(&mut self, b: BufIdx) -> bool {
        if b.0 >= self.n {
            return false;
        }
        let (w, m) = (b.0 as usize / 64, 1u64 << (b.0 % 64));
        match self.bits.get_mut(w) {
            Some(x) if *x & m == 0 => {
                *x |= m;
                self.count += 1;
                true
            }
            _ => false,
        }
    }

    /// Takes `b` back from the kernel. False if it was not given (not ours to take).
    #[inline(always)]
    pub fn take(&mut self, b: BufIdx) -> bool {
        let (w, m) = (b.0 as usize / 64, 1u64 << (b.0 % 64));
        match self.bits.get_mut(w) {
            Some(x) if *x & m != 0 => {
                *x &= !m;
                self.count -= 1;
                true
            }
            _ => false,
        }
    }

    /// Takes every held buffer, appending it to `out`.
    pub fn drain(&mut self, out: &mut Vec<BufIdx>) {
        for (w, x) in self.bits.iter_mut().enumerate() {
            while *x != 0 {
                let b = x.trailing_zeros();
                *x &= *x - 1;
                out.push(BufIdx(w as u32 * 64 + b));
            }
        }
        self.count = 0;
    }
}

/// Buffers waiting for their socket to close before they are freed. The socket keeps an
/// `Arc` in a field dropped after its fd, and every ring holding buffers keeps one too, so
/// the last `Arc` goes — and the buffers are freed — only once the socket is closed.
pub struct Parking {
    pool: Arc<BufferPool>,
    bufs: Mutex<Vec<BufIdx>>,
}

impl Parking {
    /// Nothing parked yet.
    pub fn new(pool: Arc<BufferPool>) -> Arc<Parking> {
        Arc::new(Parking {
            pool,
            bufs: Mutex::new(Vec::new()),
        })
    }

    /// Parks every buffer `h` holds.
    pub fn park(&self, h: &mut Held) {
        let mut v = match self.bufs.lock() {
            Ok(v) => v,
            Err(p) => p.into_inner(),
        };
        h.drain(&mut v);
    }

    /// Parks buffers already taken from the kernel but not yet freed.
    pub fn park_list(&self, l: &mut Vec<BufIdx>) {
        let mut v = match self.bufs.lock() {
            Ok(v) => v,
            Err(p) => p.into_inner(),
        };
        v.append(l);
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        let v = match self.bufs.get_mut() {
            Ok(v) => std::mem::take(v),
            Err(p) => std::mem::take(p.into_inner()),
        };
        if !v.is_empty() {
            // Single buffers (fill-ring buffers fresh from the pool, tx buffers without a
            // chain): the free does not follow any chain.
            let mut c = self.pool.cache();
            c.free(&v);
        }
    }
}

/// A ring's share of the arena: what it holds and where it parks it when it goes.
pub struct RingArena {
    /// Buffers given to the kernel through this ring.
    pub held: Held,
    /// Buffers taken back (tx completions) and not yet freed by a node.
    pub done: Vec<BufIdx>,
    /// The geometry.
    pub geo: ArenaGeo,
    park: Arc<Parking>,
}

impl RingArena {
    /// A ring holding nothing yet.
    pub fn new(geo: ArenaGeo, park: Arc<Parking>) -> RingArena {
        RingArena {
            held: Held::new(geo.n),
            done: Vec::new(),
            geo,
            park,
        }
    }
}

impl Drop for RingArena {
    fn drop(&mut self) {
        self.park.park(&mut self.held);
        self.park.park_list(&mut self.done);
    }
}

/// Whether the arena may be the UMEM: `None` when it may, else why not.
///
/// `region`: bytes of the data array; `registered`: the arena is already a UMEM (another
/// live socket), so sharing it pins nothing more; `other_umems`: bytes of per-socket UMEMs;
/// `limit`: RLIMIT_MEMLOCK (`None`: unlimited).
pub fn arena_fits(
    geo: &ArenaGeo,
    region: usize,
    registered: bool,
    other_umems: usize,
    limit: Option<u64>,
) -> Option<String> {
    if let Some(why) = geo.unfit() {
        return Some(why);
    }
    if registered {
        return None;
    }
    match limit {
        Some(l) if (region + other_umems) as u64 > l => Some(format!(
            "the buffer data array ({} KiB = {} buffers x {} B){} exceeds the locked-memory limit \
             (RLIMIT_MEMLOCK {} KiB); a smaller `buffers {{ buffers-per-numa N }}' fits",
            region >> 10,
            geo.n,
            geo.stride,
            if other_umems > 0 {
                format!(" plus {} KiB of per-socket UMEMs", other_umems >> 10)
            } else {
                String::new()
            },
            l >> 10
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> ArenaGeo {
        ArenaGeo {
            n: 100,
            stride: 2304,
            chunk: 2304,
        }
    }

    #[test]
    fn rx_descriptors_are_bounds_checked() {
        let g = geo();
        let base = g.fill_addr(BufIdx(7));
        assert_eq!(base, 7 * 2304);
        // As the kernel returns it: fill address | (XDP_PACKET_HEADROOM << 48).
        let d = base | (256 << OFFSET_SHIFT);
        assert_eq!(
            g.rx_desc(d, 60),
            RxDesc::Packet {
                idx: BufIdx(7),
                current_data: 0,
                len: 60
            }
        );
        // The largest packet fills the data area exactly.
        assert!(matches!(
            g.rx_desc(d, 2048),
            RxDesc::Packet { len: 2048, .. }
        ));
        assert_eq!(g.rx_desc(d, 2049), RxDesc::Bad(Some(BufIdx(7))));
        assert_eq!(g.rx_desc(d, 0), RxDesc::Bad(Some(BufIdx(7))));
        // Not the start of a buffer, outside the pool, a silly offset.
        assert_eq!(g.rx_desc(base + 64 + (256 << 48), 60), RxDesc::Bad(None));
        assert_eq!(
            g.rx_desc(g.fill_addr(BufIdx(100)) | (256 << 48), 60),
            RxDesc::Bad(None)
        );
        assert_eq!(
            g.rx_desc(base | (4000 << 48), 60),
            RxDesc::Bad(Some(BufIdx(7)))
        );
        // An offset into the headroom (a UMEM headroom of a future kernel) still works.
        assert!(matches!(
            g.rx_desc(base | (192 << 48), 60),
            RxDesc::Packet {
                current_data: -64,
                ..
            }
        ));
    }

    #[test]
    fn tx_addresses_round_trip() {
        let g = geo();
        for (b, cd) in [(0u32, 0i16), (5, -14), (99, 100), (42, -256)] {
            let a = g.tx_addr(BufIdx(b), cd);
            assert_eq!(a, b as u64 * 2304 + (256 + cd as i64) as u64);
            assert_eq!(g.tx_buffer(a), Some(BufIdx(b)));
        }
        assert_eq!(g.tx_buffer(100 * 2304), None);
    }

    #[test]
    fn ownership_bookkeeping() {
        let mut h = Held::new(130);
        assert!(h.give(BufIdx(0)) && h.give(BufIdx(64)) && h.give(BufIdx(129)));
        assert!(!h.give(BufIdx(64)), "given twice");
        assert!(!h.give(BufIdx(130)), "outside the pool");
        assert_eq!(h.count(), 3);
        // The kernel returns one we gave: ours again. One we did not give, or twice: refused.
        assert!(h.take(BufIdx(64)));
        assert!(!h.take(BufIdx(64)));
        assert!(!h.take(BufIdx(5)));
        assert!(!h.take(BufIdx(1000)));
        assert_eq!(h.count(), 2);
        let mut out = Vec::new();
        h.drain(&mut out);
        assert_eq!(out, vec![BufIdx(0), BufIdx(129)]);
        assert_eq!(h.count(), 0);
        assert!(!h.take(BufIdx(0)));
    }

    #[test]
    fn parked_buffers_return_to_the_pool_when_the_last_holder_goes() {
        let pool = BufferPool::new(&sluice_buffer::PoolConfig {
            buffers: 64,
            page_size: sluice_buffer::PageSize::Small,
            ..Default::default()
        })
        .unwrap();
        let g = ArenaGeo::of(&pool);
        assert_eq!((g.n, g.stride, g.chunk), (64, 2304, 2304));
        let park = Parking::new(pool.clone());
        let mut c = pool.cache();
        let mut b = [BufIdx(0); 10];
        assert_eq!(c.alloc(&mut b), 10);
        c.flush();
        let (mut rx, mut tx) = (
            RingArena::new(g, park.clone()),
            RingArena::new(g, park.clone()),
        );
        for &x in &b[..6] {
            assert!(rx.held.give(x));
        }
        for &x in &b[6..9] {
            assert!(tx.held.give(x));
        }
        tx.done.push(b[9]);
        assert_eq!(pool.stats().in_use, 10);
        drop(rx);
        drop(tx);
        // The socket (its `Arc<Parking>`) is still there: nothing may be freed yet.
        assert_eq!(pool.stats().in_use, 10);
        drop(park);
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    fn the_arena_fits_or_says_why_not() {
        let g = ArenaGeo {
            n: 2048,
            stride: 2304,
            chunk: 2304,
        };
        let region = 2048 * 2304;
        assert_eq!(arena_fits(&g, region, false, 0, Some(8 << 20)), None);
        assert_eq!(arena_fits(&g, region, false, 0, None), None);
        let e = arena_fits(&g, region, false, 4 << 20, Some(8 << 20)).unwrap();
        assert!(e.contains("4608 KiB") && e.contains("plus 4096 KiB"), "{e}");
        // Already registered by another socket: sharing pins nothing more.
        assert_eq!(arena_fits(&g, region, true, 4 << 20, Some(8 << 20)), None);
        let big = ArenaGeo { n: 16384, ..g };
        let e = arena_fits(&big, 16384 * 2304, false, 0, Some(8 << 20)).unwrap();
        assert!(e.contains("RLIMIT_MEMLOCK 8192 KiB"), "{e}");
        let jumbo = ArenaGeo {
            chunk: 256 + 9216,
            ..g
        };
        assert!(arena_fits(&jumbo, region, true, 0, None)
            .unwrap()
            .contains("not a UMEM chunk size"));
    }
}
