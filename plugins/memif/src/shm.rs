//! Shared memory: ring views over regions (`sluice_infra::shm`: memfd + `mmap(MAP_SHARED)`,
//! eventfds).
//!
//! Ring layout (memif.h, 64-byte cache lines): `cookie: u32` at 0, `flags: u16` at 4,
//! `head: u16` at 6, `tail: u16` at 64, descriptors (16 bytes each) from 128. The producer of a
//! ring advances `head`, its consumer advances `tail`; for M2S rings the slave also hands out
//! empty buffers by advancing `head`, and the master fills them by advancing `tail`.
//!
//! All accesses to peer-writable memory go through raw pointers (atomics for head/tail/flags,
//! volatile reads/writes for descriptors, byte copies for payloads) after a bounds check
//! against the mapped region size, so a hostile peer can corrupt packets but never make
//! Sluice touch memory outside its mappings.

use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};

pub use sluice_infra::shm::{eventfd, signal, Region, MAX_REGION_SIZE};

/// Ring header size (descriptors start here).
pub const RING_HDR: usize = 128;
/// Descriptor size.
pub const DESC_SIZE: usize = 16;
/// Descriptor flag: the packet continues in the next descriptor.
pub const DESC_FLAG_NEXT: u16 = 1;
/// Ring flag: the receiver polls, do not signal its eventfd.
pub const RING_FLAG_MASK_INT: u16 = 1;

/// Bytes one ring of `2^log2` descriptors occupies.
pub fn ring_bytes(log2: u8) -> usize {
    RING_HDR + (DESC_SIZE << log2)
}

/// A descriptor (16 bytes, little-endian on every platform memif runs on).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Desc {
    /// [`DESC_FLAG_NEXT`].
    pub flags: u16,
    /// Region of the buffer.
    pub region: u16,
    /// Bytes of packet (or, for M2S rings handed out by the slave, buffer capacity).
    pub length: u32,
    /// Offset of the buffer in its region.
    pub offset: u32,
    /// Unused metadata.
    pub metadata: u32,
}

const _: () = assert!(std::mem::size_of::<Desc>() == DESC_SIZE);

/// A view of one ring inside a region (kept alive by whoever owns the region).
#[derive(Copy, Clone, Debug)]
pub struct Ring {
    base: *mut u8,
    log2: u8,
}

// SAFETY: see Region; the ring's pointer is into a region kept alive by the owner.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    /// The ring at `offset` in `region`, if it fits and is aligned.
    pub fn new(region: &Region, offset: u64, log2: u8) -> Option<Ring> {
        if offset % 8 != 0 || log2 == 0 || log2 > 15 {
            return None;
        }
        let base = region.range(offset, ring_bytes(log2) as u64)?;
        Some(Ring { base, log2 })
    }

    /// Number of descriptors.
    #[inline(always)]
    pub fn size(&self) -> u16 {
        (1u32 << self.log2) as u16
    }

    /// Address of the ring header (to compute its offset in a region we created).
    pub fn base_addr(&self) -> usize {
        self.base as usize
    }

    /// log2 of the size.
    pub fn log2(&self) -> u8 {
        self.log2
    }

    #[inline(always)]
    fn a16(&self, off: usize) -> &AtomicU16 {
        // SAFETY: off is 4, 6 or 64, inside the 128-byte header of a ring that lies in a
        // live mapping; the base is 8-byte aligned, so the u16 is aligned.
        unsafe { &*(self.base.add(off) as *const AtomicU16) }
    }

    /// Cookie.
    pub fn cookie(&self) -> u32 {
        // SAFETY: offset 0, aligned (base is 8-aligned), inside the header.
        unsafe { &*(self.base as *const AtomicU32) }.load(Ordering::Relaxed)
    }
    /// Writes the cookie.
    pub fn set_cookie(&self, c: u32) {
        // SAFETY: as in `cookie`.
        unsafe { &*(self.base as *const AtomicU32) }.store(c, Ordering::Relaxed)
    }
    /// Flags.
    #[inline(always)]
    pub fn flags(&self) -> u16 {
        self.a16(4).load(Ordering::Relaxed)
    }
    /// Writes the flags.
    pub fn set_flags(&self, f: u16) {
        self.a16(4).store(f, Ordering::Relaxed)
    }
    /// Head (acquire).
    #[inline(always)]
    pub fn head(&self) -> u16 {
        self.a16(6).load(Ordering::Acquire)
    }
    /// Publishes head (release).
    #[inline(always)]
    pub fn set_head(&self, v: u16) {
        self.a16(6).store(v, Ordering::Release)
    }
    /// Tail (acquire).
    #[inline(always)]
    pub fn tail(&self) -> u16 {
        self.a16(64).load(Ordering::Acquire)
    }
    /// Publishes tail (release).
    #[inline(always)]
    pub fn set_tail(&self, v: u16) {
        self.a16(64).store(v, Ordering::Release)
    }

    #[inline(always)]
    fn desc_ptr(&self, slot: u16) -> *mut Desc {
        let i = (slot & (self.size() - 1)) as usize;
        // SAFETY: i < size, and the ring (header + size descriptors) lies in the mapping.
        unsafe { self.base.add(RING_HDR + i * DESC_SIZE) as *mut Desc }
    }
    /// Reads descriptor `slot` (masked).
    #[inline(always)]
    pub fn desc(&self, slot: u16) -> Desc {
        // Two 8-byte loads (a volatile struct read is done field by field); little-endian
        // layout as in `set_desc`.
        let p = self.desc_ptr(slot) as *const u64;
        // SAFETY: in bounds (desc_ptr) and 8-aligned; volatile because the peer writes it.
        let (lo, hi) = unsafe {
            (
                u64::from_le(std::ptr::read_volatile(p)),
                u64::from_le(std::ptr::read_volatile(p.add(1))),
            )
        };
        Desc {
            flags: lo as u16,
            region: (lo >> 16) as u16,
            length: (lo >> 32) as u32,
            offset: hi as u32,
            metadata: (hi >> 32) as u32,
        }
    }
    /// Hints the CPU to fetch the line holding descriptor `slot` (masked).
    #[inline(always)]
    pub fn prefetch_desc(&self, slot: u16) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: prefetch never faults and has no architectural effect; the address is in
        // the ring anyway (desc_ptr masks the slot).
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.desc_ptr(slot) as *const i8);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }
    /// Writes descriptor `slot` (masked).
    #[inline(always)]
    pub fn set_desc(&self, slot: u16, d: Desc) {
        // Two 8-byte stores (the layout is little-endian on every platform memif runs on);
        // a volatile struct write is done field by field.
        let lo = d.flags as u64 | (d.region as u64) << 16 | (d.length as u64) << 32;
        let hi = d.offset as u64 | (d.metadata as u64) << 32;
        let p = self.desc_ptr(slot) as *mut u64;
        // SAFETY: as in `desc`: the 16-byte descriptor is in bounds and 8-aligned.
        unsafe {
            std::ptr::write_volatile(p, lo.to_le());
            std::ptr::write_volatile(p.add(1), hi.to_le());
        }
    }
    /// Writes the first half of descriptor `slot` (`flags`, `region`, `length`), leaving
    /// `offset` and `metadata` as they are (a master filling a slot the slave handed out).
    #[inline(always)]
    pub fn set_desc_head(&self, slot: u16, flags: u16, region: u16, length: u32) {
        let lo = flags as u64 | (region as u64) << 16 | (length as u64) << 32;
        // SAFETY: as in `desc`: the descriptor is in bounds and 8-aligned.
        unsafe { std::ptr::write_volatile(self.desc_ptr(slot) as *mut u64, lo.to_le()) }
    }
    /// Writes only the length of descriptor `slot`.
    #[inline(always)]
    pub fn set_desc_length(&self, slot: u16, len: u32) {
        // SAFETY: as in `desc`; `length` is a field of the in-bounds descriptor.
        unsafe { std::ptr::write_volatile(&raw mut (*self.desc_ptr(slot)).length, len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_layout_and_bounds() {
        let r = Region::create("t", 4096).unwrap();
        assert!(Ring::new(&r, 0, 7).is_some());
        assert!(Ring::new(&r, 0, 8).is_none(), "128 + 16 * 256 > 4096");
        assert!(Ring::new(&r, 4, 2).is_none(), "misaligned");
        assert!(
            Ring::new(&r, 4096 - 128, 1).is_none(),
            "descriptors past the end"
        );
        let ring = Ring::new(&r, 0, 2).unwrap();
        ring.set_cookie(crate::proto::COOKIE);
        ring.set_head(5);
        ring.set_tail(3);
        ring.set_desc(
            6,
            Desc {
                flags: 1,
                region: 2,
                length: 3,
                offset: 4,
                metadata: 0,
            },
        );
        let p = r.range(0, 4096).unwrap();
        // SAFETY: the test reads its own mapping.
        let bytes = unsafe { std::slice::from_raw_parts(p, 4096) };
        assert_eq!(&bytes[0..4], &0x3E31F20u32.to_le_bytes());
        assert_eq!(&bytes[6..8], &[5, 0]);
        assert_eq!(&bytes[64..66], &[3, 0]);
        // slot 6 & 3 = 2 -> 128 + 32
        assert_eq!(&bytes[160..170], &[1, 0, 2, 0, 3, 0, 0, 0, 4, 0]);
        assert_eq!(r.range(4000, 97), None);
        assert_eq!(r.range(u64::MAX, 2), None);
    }
}
