//! Sluice packet buffers.
//!
//! Buffers are `u32` indices ([`BufIdx`]) into one preallocated arena ([`BufferPool`]). Each
//! buffer is a 128-byte [`BufferHeader`] in a private header array plus [`HEADROOM`] bytes of
//! headroom and the data area in a separate data array. Nodes resolve indices through an
//! [`Arena`] taken once per frame. Threads allocate and free in batches through a [`BufferCache`]; the pool tracks free,
//! cached and in-use counts so tests can assert that nothing leaked.
//!
//! `unsafe` is confined to this crate: turning an index into a view ([`BufferPool::buffer`]) is
//! sound only for the current owner of the index, which the graph runtime guarantees by moving
//! indices linearly through frames.

mod copy;
mod header;
mod pool;

// The header windows ([`Buffer::prepend_head_wide`], `Buffer::start`) take their start
// through `u32` and add the window's length in `usize`: a short headroom wraps the start
// to near 2^32, which a 64-bit `usize` holds with room to spare, so the end lands past any
// buffer and the one bound check refuses it. With a 32-bit `usize` that addition would
// overflow (a panic in debug builds, on packet input): such targets are not supported.
#[cfg(not(target_pointer_width = "64"))]
compile_error!("sluice-buffer needs a 64-bit usize (its header windows compute through u32)");

pub use copy::{copy_small, COPY_SMALL_MAX};
pub use header::{flags, BufIdx, BufferHeader, IfIndex, IpMeta, L2Meta};
pub use pool::{
    Arena, Backing, BufferCache, BufferPool, FrameAddrs, PageSize, PoolConfig, PoolError,
    PoolStats, Stamp, ALLOC_WITH_MAX_BUFFERS, CACHE_BATCH, DEFAULT_BUFFERS, DEFAULT_DATA_SIZE,
    HEADROOM, MAX_DATA_SIZE,
};

/// A mutable view of one buffer: its header and its headroom + data bytes.
///
/// All accessors keep `current_data`/`current_length` inside the buffer, so packet bytes can be
/// sliced without further checks and without `unsafe`.
pub struct Buffer<'a> {
    /// The metadata header.
    pub hdr: &'a mut BufferHeader,
    /// Headroom followed by the data area.
    mem: &'a mut [u8],
}

impl<'a> Buffer<'a> {
    pub(crate) fn from_parts(hdr: &'a mut BufferHeader, mem: &'a mut [u8]) -> Self {
        Buffer { hdr, mem }
    }

    /// A second view of the same buffer for as long as this one is borrowed, by value: for
    /// a node's out-of-line slow path. Handing it `&mut Buffer` makes the fast path keep
    /// the view in memory (three stores per packet); a reborrowed view is built only where
    /// the slow path is called.
    #[inline(always)]
    pub fn reborrow(&mut self) -> Buffer<'_> {
        Buffer {
            hdr: self.hdr,
            mem: self.mem,
        }
    }

    #[inline(always)]
    fn start(&self) -> usize {
        // current_data is kept within [-HEADROOM, data_size] by every setter below. Taken
        // through u32, the result is below 2^32 whatever the field holds, so `start() + N`
        // cannot overflow and a header window costs one bound check.
        (HEADROOM as i32 + self.hdr.current_data as i32) as u32 as usize
    }

    /// Capacity of the data area (not counting headroom).
    pub fn data_size(&self) -> usize {
        self.mem.len() - HEADROOM
    }

    /// The packet bytes in this buffer.
    #[inline(always)]
    pub fn data(&self) -> &[u8] {
        let s = self.start();
        let e = (s + self.hdr.current_length as usize).min(self.mem.len());
        &self.mem[s.min(e)..e]
    }

    /// The packet bytes in this buffer, writable.
    #[inline(always)]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let s = self.start();
        let e = (s + self.hdr.current_length as usize).min(self.mem.len());
        &mut self.mem[s.min(e)..e]
    }

    /// Where an `N`-byte window may start in `len` bytes: below `len + 1 - N`, 0 when
    /// `len < N` (no start). `s < window_end` rather than `s + N <= len`: the bound is the
    /// same for every buffer of the arena and computed without a branch, so a node's loop
    /// computes it once (one instruction a packet less).
    #[inline(always)]
    fn window_end<const N: usize>(len: usize) -> usize {
        (len + 1).saturating_sub(N)
    }

    /// The first `N` packet bytes, when this buffer holds at least `N`: what
    /// `data().first_chunk::<N>()` gives, with two compares instead of clamping a slice
    /// (fast paths parsing a fixed-size header).
    #[inline(always)]
    pub fn head<const N: usize>(&self) -> Option<&[u8; N]> {
        if (self.hdr.current_length as usize) < N {
            return None;
        }
        let s = self.start();
        if s >= Self::window_end::<N>(self.mem.len()) {
            return None;
        }
        // SAFETY: `s + N <= self.mem.len()` (just checked), so the `N` bytes from `s` lie in
        // `mem`, borrowed from `self` as the array is.
        Some(unsafe { &*self.mem.as_ptr().add(s).cast::<[u8; N]>() })
    }

    /// The first `N` packet bytes, writable (see [`Buffer::head`]).
    #[inline(always)]
    pub fn head_mut<const N: usize>(&mut self) -> Option<&mut [u8; N]> {
        if (self.hdr.current_length as usize) < N {
            return None;
        }
        let s = self.start();
        if s >= Self::window_end::<N>(self.mem.len()) {
            return None;
        }
        // SAFETY: `s + N <= self.mem.len()` (just checked), so the `N` bytes from `s` lie in
        // `mem`, borrowed mutably from `self` as the array is.
        Some(unsafe { &mut *self.mem.as_mut_ptr().add(s).cast::<[u8; N]>() })
    }

    /// [`Buffer::prepend`] of `P` bytes and [`Buffer::head_mut`] of `N` after it, in one
    /// window with one set of checks: the first `N` bytes of the packet once `P` are pushed
    /// in front (the `P` new ones, then `N - P` that were there). `None`, changing nothing,
    /// if the headroom is short or the buffer holds fewer than `N - P` bytes (a rewrite
    /// writing an L2 header in front of the L3 header it edits).
    #[inline(always)]
    pub fn prepend_head<const P: usize, const N: usize>(&mut self) -> Option<&mut [u8; N]> {
        self.prepend_head_in(HeadLen::<P, N>::up_to(usize::MAX))
    }

    /// [`Buffer::prepend_head`] of a packet whose length is in `len` (a rewrite's MTU as
    /// well): two compares in all. The length is one compare ([`HeadLen`]); the window is
    /// one more, on its end: its start is computed through `u32`, so a headroom shorter
    /// than `P` puts it above 2^31 and its end past any buffer.
    #[inline(always)]
    pub fn prepend_head_in<const P: usize, const N: usize>(
        &mut self,
        len: HeadLen<P, N>,
    ) -> Option<&mut [u8; N]> {
        self.prepend_head_wide::<0, P, N, N>(len)
    }

    /// [`Buffer::prepend_head_in`] with the window widened by `L` bytes of headroom in front
    /// of the `P` pushed ones (`W = L + N` bytes in all; the headroom must hold `L + P`): a
    /// header written with one wider store, the `L` bytes in front overwritten with whatever
    /// the caller stores there (an Ethernet header in one 16-byte store, `L` = 2). The
    /// packet starts at `L` in the window.
    #[inline(always)]
    pub fn prepend_head_wide<const L: usize, const P: usize, const N: usize, const W: usize>(
        &mut self,
        len: HeadLen<P, N>,
    ) -> Option<&mut [u8; W]> {
        const { assert!(W == L + N && L + P <= HEADROOM) };
        let l = self.hdr.current_length as usize;
        if !len.contains(l) {
            return None;
        }
        let w = (HEADROOM as i32 - (L + P) as i32 + self.hdr.current_data as i32) as u32;
        let w = w as usize;
        let h = self.mem.get_mut(w..w + W)?.first_chunk_mut::<W>()?;
        self.hdr.current_data -= P as i16;
        self.hdr.current_length = (l + P) as u16;
        Some(h)
    }

    /// [`Buffer::push_front`] of `N` bytes, returned as an array (a fixed-size header
    /// written in one store). `None`, changing nothing, if the headroom is short.
    #[inline(always)]
    pub fn prepend<const N: usize>(&mut self) -> Option<&mut [u8; N]> {
        let s = self.start();
        let l = self.hdr.current_length as usize;
        if s < N || l + N > u16::MAX as usize {
            return None;
        }
        let h = self.mem.get_mut(s - N..)?.first_chunk_mut::<N>()?;
        self.hdr.current_data -= N as i16;
        self.hdr.current_length = (l + N) as u16;
        Some(h)
    }

    /// Everything from the packet start to the end of the buffer, writable (to build a packet
    /// in place before [`Buffer::set_len`]).
    #[inline(always)]
    pub fn raw_data_mut(&mut self) -> &mut [u8] {
        let s = self.start();
        &mut self.mem[s..]
    }

    /// Packet length in this buffer.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.hdr.current_length as usize
    }

    /// Whether this buffer holds no packet bytes.
    pub fn is_empty(&self) -> bool {
        self.hdr.current_length == 0
    }

    /// Bytes in the rest of the chain (0 for a single buffer).
    #[inline(always)]
    pub fn chain_rest_len(&self) -> u32 {
        self.hdr.chain_rest_len()
    }

    /// Total packet length including chained buffers.
    #[inline(always)]
    pub fn total_len(&self) -> usize {
        self.hdr.total_len()
    }

    /// Bytes available in front of the packet.
    pub fn headroom(&self) -> usize {
        self.start()
    }

    /// Bytes available behind the packet in this buffer.
    pub fn tailroom(&self) -> usize {
        self.mem.len() - self.start() - self.len()
    }

    /// Moves the packet start forward by `n` bytes (strips a header). Returns false, changing
    /// nothing, if the buffer holds fewer than `n` bytes.
    #[inline(always)]
    pub fn advance(&mut self, n: usize) -> bool {
        if n > self.len() {
            return false;
        }
        self.hdr.current_data += n as i16;
        self.hdr.current_length -= n as u16;
        true
    }

    /// Moves the packet start back by `n` bytes into the headroom and returns the new front
    /// bytes to be written (encapsulation). `None`, changing nothing, if the headroom is short.
    #[inline(always)]
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.headroom() || self.len() + n > u16::MAX as usize {
            return None;
        }
        self.hdr.current_data -= n as i16;
        self.hdr.current_length += n as u16;
        let s = self.start();
        Some(&mut self.mem[s..s + n])
    }

    /// Sets the packet length in this buffer. Returns false, changing nothing, when it would run
    /// past the end of the buffer.
    #[inline(always)]
    pub fn set_len(&mut self, len: usize) -> bool {
        if self.start() + len > self.mem.len() || len > u16::MAX as usize {
            return false;
        }
        self.hdr.current_length = len as u16;
        true
    }

    /// Resets the packet to start at the data area and copies `bytes` in (truncated to the
    /// data area). Returns the number of bytes copied.
    #[inline(always)]
    pub fn write_packet(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.data_size());
        self.hdr.current_data = 0;
        self.mem[HEADROOM..HEADROOM + n].copy_from_slice(&bytes[..n]);
        self.hdr.current_length = n as u16;
        n
    }
}

/// The packet lengths [`Buffer::prepend_head_in`] accepts, in the form one compare tests:
/// from `N - P` (the `N - P` bytes of the window behind the `P` pushed ones must be packet
/// bytes) to a maximum (a rewrite's MTU), and never above `u16::MAX - P` (the length once
/// `P` bytes are pushed). Built once per adjacency, not per packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadLen<const P: usize, const N: usize> {
    /// How many lengths are accepted: `len - (N - P) < span` (wrapping: shorter lengths
    /// are above every span). A `usize`: the compare needs no widening.
    span: usize,
}

impl<const P: usize, const N: usize> HeadLen<P, N> {
    /// Lengths from `N - P` to `max` (none when `max < N - P`).
    #[inline(always)]
    pub const fn up_to(max: usize) -> Self {
        const { assert!(N >= P && P <= u16::MAX as usize) };
        let top = u16::MAX as usize - P;
        let max = if max < top { max } else { top };
        HeadLen {
            span: (max + 1).saturating_sub(N - P),
        }
    }

    /// Whether `len` is one of these lengths.
    #[inline(always)]
    pub const fn contains(self, len: usize) -> bool {
        len.wrapping_sub(N - P) < self.span
    }
}

#[cfg(test)]
mod tests;
