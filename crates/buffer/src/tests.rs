use super::*;
use std::sync::Arc;

fn pool(n: u32) -> Arc<BufferPool> {
    BufferPool::new(&PoolConfig {
        buffers: n,
        data_size: 2048,
        page_size: PageSize::Small,
        shared: false,
    })
    .expect("pool")
}

#[test]
fn header_is_two_cache_lines() {
    assert_eq!(core::mem::size_of::<BufferHeader>(), 128);
}

#[test]
fn alloc_free_accounting() {
    let p = pool(1024);
    let mut c = p.cache();
    let mut idx = [BufIdx(0); 100];
    assert_eq!(c.alloc(&mut idx), 100);
    let s = p.stats();
    assert_eq!(s.total, 1024);
    assert_eq!(s.in_use, 100);
    assert_eq!(s.free + s.cached, 924);
    // All indices distinct.
    let mut v: Vec<u32> = idx.iter().map(|b| b.0).collect();
    v.sort();
    v.dedup();
    assert_eq!(v.len(), 100);
    c.free(&idx);
    assert_eq!(p.stats().in_use, 0);
    c.flush();
    assert_eq!(p.stats().free, 1024);
    assert_eq!(p.stats().cached, 0);
}

#[test]
fn exhaustion_is_counted_not_a_panic() {
    let p = pool(10);
    let mut c = p.cache();
    let mut idx = [BufIdx(0); 16];
    assert_eq!(c.alloc(&mut idx), 10);
    assert_eq!(p.stats().alloc_failures, 1);
    assert_eq!(c.alloc_one(), None);
    c.free(&idx[..10]);
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn two_caches_share_the_pool() {
    let p = pool(2048);
    let mut a = p.cache();
    let mut b = p.cache();
    let mut x = [BufIdx(0); 300];
    let mut y = [BufIdx(0); 300];
    assert_eq!(a.alloc(&mut x), 300);
    assert_eq!(b.alloc(&mut y), 300);
    assert_eq!(p.stats().in_use, 600);
    // Free on the other cache: buffers can cross threads.
    b.free(&x);
    a.free(&y);
    assert_eq!(p.stats().in_use, 0);
    drop(a);
    drop(b);
    assert_eq!(p.stats().free, 2048);
}

#[test]
fn headers_reset_on_alloc() {
    let p = pool(4);
    let mut c = p.cache();
    let b = c.alloc_one().unwrap();
    // SAFETY: the test owns this buffer (allocated above); no other view is alive.
    unsafe {
        let v = p.buffer(b);
        v.hdr.flags = flags::TRACED | flags::RX_TSC;
        v.hdr.error = 7;
        v.hdr.rx_tsc = 5;
    }
    c.free(&[b]);
    let b2 = c.alloc_one().unwrap();
    assert_eq!(b2, b, "LIFO reuse keeps buffers hot");
    // SAFETY: the test owns this buffer (allocated above); no other view is alive.
    let h = unsafe { p.header(b2) };
    // The first line is the template's; the second keeps its stale rx_tsc, which nothing
    // reads: RX_TSC is clear.
    let mut want = BufferHeader::TEMPLATE;
    want.rx_tsc = 5;
    assert_eq!(*h, want);
    c.free_no_next(&[b2]);
    assert_eq!(
        c.alloc_one(),
        Some(b2),
        "free_no_next returns it to the cache"
    );
    c.free(&[b2]);
}

/// `alloc_raw` hands out the same buffers as `alloc` (LIFO, counted alike) but leaves the
/// header as its last user left it; `reset_from` then makes the first line the given
/// template's and keeps the second.
#[test]
fn alloc_raw_leaves_the_header_to_reset_from() {
    let p = pool(4);
    let mut c = p.cache();
    let mut two = [BufIdx(0); 2];
    assert_eq!(c.alloc(&mut two), 2);
    for &b in &two {
        // SAFETY: the test owns this buffer (allocated above); no other view is alive.
        let h = unsafe { p.buffer(b) }.hdr;
        (h.current_data, h.current_length, h.error, h.rx_if) = (-3, 99, 7, 4);
        h.rx_tsc = 5;
    }
    c.free(&two);
    let mut again = [BufIdx(0); 3];
    // SAFETY: every header is written with reset_from below before any other use.
    assert_eq!(unsafe { c.alloc_raw(&mut again) }, 3);
    assert_eq!(again[..2], [two[1], two[0]], "LIFO reuse, as alloc");
    assert_eq!(p.stats().in_use, 3);
    let mut tmpl = BufferHeader::TEMPLATE;
    tmpl.rx_if = 9;
    for &b in &again[..2] {
        // SAFETY: the test owns this buffer (allocated above); no other view is alive.
        let h = unsafe { p.buffer(b) }.hdr;
        assert_eq!(
            (h.current_data, h.current_length, h.error, h.rx_if),
            (-3, 99, 7, 4),
            "not reset"
        );
        h.reset_from(&tmpl);
        let mut want = tmpl;
        want.rx_tsc = 5;
        assert_eq!(*h, want, "first line from the template, second kept");
    }
    // SAFETY: the test owns this buffer (allocated above); no other view is alive.
    unsafe { p.buffer(again[2]) }.hdr.reset_from(&tmpl);
    c.free(&again);
    assert_eq!(p.stats().in_use, 0);
    // An exhausted pool: as many as there are, counted as a failure.
    let mut five = [BufIdx(0); 5];
    // SAFETY: as above.
    assert_eq!(unsafe { c.alloc_raw(&mut five) }, 4);
    assert_eq!(p.stats().alloc_failures, 1);
    for &b in &five[..4] {
        // SAFETY: the test owns this buffer (allocated above); no other view is alive.
        unsafe { p.buffer(b) }.hdr.reset();
    }
    c.free(&five[..4]);
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn views_keep_bounds() {
    let p = pool(2);
    let mut c = p.cache();
    let b = c.alloc_one().unwrap();
    // SAFETY: the test owns this buffer (allocated above); no other view is alive.
    let mut v = unsafe { p.buffer(b) };
    assert_eq!(v.write_packet(&[1, 2, 3, 4, 5, 6]), 6);
    assert_eq!(v.data(), &[1, 2, 3, 4, 5, 6]);
    assert!(v.advance(2));
    assert_eq!(v.data(), &[3, 4, 5, 6]);
    assert!(!v.advance(5));
    let front = v.push_front(4).unwrap();
    front.copy_from_slice(&[9, 9, 9, 9]);
    assert_eq!(v.data(), &[9, 9, 9, 9, 3, 4, 5, 6]);
    assert_eq!(v.headroom(), HEADROOM - 2);
    assert!(v.push_front(HEADROOM).is_none());
    assert!(!v.set_len(3000));
    assert!(v.set_len(2));
    assert_eq!(v.data(), &[9, 9]);
    let big = vec![0xabu8; 5000];
    assert_eq!(v.write_packet(&big), 2048);
    c.free(&[b]);
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn fixed_size_views_keep_bounds() {
    let p = pool(2);
    let mut c = p.cache();
    let b = c.alloc_one().unwrap();
    // SAFETY: the test owns this buffer (allocated above); no other view is alive.
    let mut v = unsafe { p.buffer(b) };
    v.write_packet(&[1, 2, 3, 4, 5, 6]);
    assert_eq!(v.head::<6>(), Some(&[1, 2, 3, 4, 5, 6]));
    assert_eq!(v.head::<7>(), None, "past current_length");
    v.head_mut::<2>().unwrap().copy_from_slice(&[7, 8]);
    assert_eq!(v.data(), &[7, 8, 3, 4, 5, 6]);
    *v.prepend::<3>().unwrap() = [9, 9, 9];
    assert_eq!(v.data(), &[9, 9, 9, 7, 8, 3, 4, 5, 6]);
    assert_eq!(v.headroom(), HEADROOM - 3);
    assert!(v.prepend::<HEADROOM>().is_none(), "headroom short");
    assert_eq!(v.data(), &[9, 9, 9, 7, 8, 3, 4, 5, 6], "unchanged");
    // Two bytes pushed in front, the window reaching three packet bytes behind them.
    let w = v.prepend_head::<2, 5>().unwrap();
    assert_eq!(w[2..], [9, 9, 9]);
    w[..2].copy_from_slice(&[5, 5]);
    assert_eq!(v.data(), &[5, 5, 9, 9, 9, 7, 8, 3, 4, 5, 6]);
    assert_eq!(v.headroom(), HEADROOM - 5);
    assert!(v.prepend_head::<2, 14>().is_none(), "past current_length");
    assert!(
        v.prepend_head::<HEADROOM, { HEADROOM + 1 }>().is_none(),
        "headroom short"
    );
    assert_eq!(v.data(), &[5, 5, 9, 9, 9, 7, 8, 3, 4, 5, 6], "unchanged");
    // A current_data pushed past the buffer (hdr is public) gives no view, never a panic.
    v.hdr.current_data = i16::MAX;
    v.hdr.current_length = 20;
    assert_eq!(v.head::<4>(), None);
    assert_eq!(v.head_mut::<4>(), None);
    v.hdr.current_data = -(HEADROOM as i16) - 10;
    assert_eq!(v.head::<4>(), None);
    assert!(v.prepend::<4>().is_none());
    assert!(v.prepend_head::<4, 8>().is_none());
    v.hdr.current_data = i16::MAX;
    assert!(v.prepend_head::<4, 8>().is_none());
    v.hdr.current_data = 0;
    c.free(&[b]);
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn head_windows_end_at_the_buffer_end() {
    // `head`'s bound as a window end: a start below it fits, one at it does not, and a
    // buffer shorter than the window has none.
    assert_eq!(Buffer::window_end::<4>(10), 7);
    assert_eq!(Buffer::window_end::<4>(4), 1);
    assert_eq!(Buffer::window_end::<4>(3), 0);
    assert_eq!(Buffer::window_end::<4>(0), 0);
    let p = pool(2);
    let mut c = p.cache();
    let b = c.alloc_one().unwrap();
    // SAFETY: the test owns this buffer (allocated above); no other view is alive.
    let mut v = unsafe { p.buffer(b) };
    let size = v.data_size() as i16;
    v.hdr.current_length = 4;
    // The last four bytes of the data area: the window ends at the buffer's end.
    v.hdr.current_data = size - 4;
    v.data_mut().copy_from_slice(&[1, 2, 3, 4]);
    assert_eq!(v.head::<4>(), Some(&[1, 2, 3, 4]));
    assert_eq!(v.head_mut::<4>(), Some(&mut [1, 2, 3, 4]));
    // One byte later the window would pass the end.
    v.hdr.current_data = size - 3;
    assert_eq!(v.head::<4>(), None);
    assert_eq!(v.head_mut::<4>(), None);
    assert_eq!(v.head::<3>(), Some(&[2, 3, 4]));
    v.hdr.current_data = 0;
    c.free(&[b]);
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn prepend_head_in_boundaries() {
    type L = HeadLen<4, 10>;
    // Lengths: from N - P = 6 to the maximum, never above u16::MAX - P.
    assert!(!L::up_to(100).contains(5));
    assert!(L::up_to(100).contains(6));
    assert!(L::up_to(100).contains(100));
    assert!(!L::up_to(100).contains(101));
    assert!(L::up_to(usize::MAX).contains(u16::MAX as usize - 4));
    assert!(!L::up_to(usize::MAX).contains(u16::MAX as usize - 3));
    assert!(!L::up_to(5).contains(5), "a maximum below N - P takes none");
    assert!(!L::up_to(5).contains(6));
    assert!(L::up_to(6).contains(6));
    assert!(!L::up_to(0).contains(0));

    let p = pool(2);
    let mut c = p.cache();
    let b = c.alloc_one().unwrap();
    // SAFETY: the test owns this buffer (allocated above); no other view is alive.
    let mut v = unsafe { p.buffer(b) };
    v.write_packet(&[1, 2, 3, 4, 5, 6, 7, 8]);
    // Over the maximum, or shorter than the window: nothing changes.
    assert!(v.prepend_head_in(HeadLen::<4, 10>::up_to(7)).is_none());
    assert!(v.prepend_head_in(HeadLen::<4, 13>::up_to(100)).is_none());
    assert_eq!(
        (v.headroom(), v.data()),
        (HEADROOM, &[1, 2, 3, 4, 5, 6, 7, 8][..])
    );
    // The headroom exactly P: taken; one byte less: refused.
    v.hdr.current_data = 4 - HEADROOM as i16;
    v.hdr.current_length = 8;
    assert!(v.prepend_head_in(HeadLen::<5, 10>::up_to(100)).is_none());
    assert_eq!(v.hdr.current_data, 4 - HEADROOM as i16, "unchanged");
    let w = v.prepend_head_in(HeadLen::<4, 10>::up_to(8)).unwrap();
    w[..4].copy_from_slice(&[9, 9, 9, 9]);
    assert_eq!((v.headroom(), v.len()), (0, 12));
    // The window's end at the buffer's end: taken; one byte past it: refused.
    let end = v.data_size() as i16;
    v.hdr.current_data = end - 5;
    v.hdr.current_length = 6;
    assert!(v.prepend_head_in(HeadLen::<4, 10>::up_to(100)).is_none());
    v.hdr.current_data = end - 6;
    assert!(v.prepend_head_in(HeadLen::<4, 10>::up_to(100)).is_some());
    assert_eq!((v.hdr.current_data, v.len()), (end - 10, 10));
    // Widened by two bytes of headroom: the headroom must hold them too.
    v.hdr.current_data = 5 - HEADROOM as i16;
    v.hdr.current_length = 6;
    assert!(v
        .prepend_head_wide::<2, 4, 10, 12>(HeadLen::up_to(100))
        .is_none());
    assert_eq!((v.headroom(), v.len()), (5, 6), "unchanged");
    v.hdr.current_data = 6 - HEADROOM as i16;
    let w = v
        .prepend_head_wide::<2, 4, 10, 12>(HeadLen::up_to(100))
        .unwrap();
    w.copy_from_slice(&[0, 0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5]);
    assert_eq!((v.headroom(), v.len()), (2, 10));
    assert_eq!(v.data(), &[1, 2, 3, 4, 5, 5, 5, 5, 5, 5]);
    // A current_data outside the buffer (hdr is public) gives no view, never a panic.
    for cd in [i16::MIN, -(HEADROOM as i16) - 1, end + 1, i16::MAX] {
        v.hdr.current_data = cd;
        v.hdr.current_length = 6;
        assert!(
            v.prepend_head_in(HeadLen::<4, 10>::up_to(100)).is_none(),
            "{cd}"
        );
    }
    v.hdr.current_data = 0;
    c.free(&[b]);
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn data_array_holds_no_headers() {
    let p = pool(3);
    assert_eq!(p.stride(), HEADROOM + 2048, "no header in the data stride");
    let (base, len) = p.region();
    assert!(len >= 3 * p.stride());
    let mut c = p.cache();
    let mut idx = [BufIdx(0); 3];
    assert_eq!(c.alloc(&mut idx), 3);
    // Fill the whole headroom + data of the middle buffer: no header (its own or a
    // neighbour's) may change.
    let mid = idx[1];
    let off = p.data_offset(mid).unwrap();
    assert_eq!(off, mid.0 as usize * p.stride());
    // SAFETY: the test owns every buffer; the range is the middle buffer's data slot.
    unsafe { core::ptr::write_bytes(base.add(off), 0xee, p.stride()) };
    for &b in &idx {
        // SAFETY: the test owns this buffer (allocated above); no other view is alive.
        assert_eq!(*unsafe { p.header(b) }, BufferHeader::TEMPLATE);
    }
    // SAFETY: the test owns this buffer (allocated above); no other view is alive.
    let mut v = unsafe { p.buffer(mid) };
    assert!(v.set_len(4));
    assert_eq!(
        v.data(),
        &[0xee; 4],
        "the view's data area is at data_offset + HEADROOM"
    );
    assert_eq!(p.data_offset(BufIdx(3)), None);
    assert!(p.shared_fd().is_none(), "private by default");
    c.free(&idx);
}

#[test]
fn arena_resolves_like_the_pool() {
    // An odd data size: the stride is rounded to a cache line, the view is not.
    let p = BufferPool::new(&PoolConfig {
        buffers: 4,
        data_size: 1000,
        page_size: PageSize::Small,
        shared: false,
    })
    .expect("pool");
    assert_eq!(p.stride(), (HEADROOM + 1000).div_ceil(64) * 64);
    let mut c = p.cache();
    let mut idx = [BufIdx(0); 4];
    assert_eq!(c.alloc(&mut idx), 4);
    let a = p.arena();
    let (base, _) = p.region();
    for (k, &b) in idx.iter().enumerate() {
        // Prefetching any index, in range or not, is harmless.
        a.prefetch(b);
        a.prefetch(BufIdx(u32::MAX - k as u32));
        a.prefetch_header(BufIdx(1 << 30));
        // SAFETY: the test owns every buffer; one view at a time.
        let mut v = unsafe { a.buffer(b) };
        assert_eq!(v.data_size(), 1000);
        assert_eq!(
            v.write_packet(&[k as u8; 1200]),
            1000,
            "view ends at data_size"
        );
        let start = v.data().as_ptr() as usize;
        assert_eq!(start, base as usize + p.data_offset(b).unwrap() + HEADROOM);
        // SAFETY: as above, the view is no longer used.
        let h = unsafe { a.header_mut(b) };
        h.tx_if = 7 + k as u32;
        // SAFETY: the test owns this buffer (allocated above); no other view is alive.
        assert_eq!(unsafe { p.header(b) }.tx_if, 7 + k as u32);
        // SAFETY: the test owns this buffer (allocated above); no other view is alive.
        assert_eq!(unsafe { p.header(b) }.total_len(), 1000);
    }
    for (k, &b) in idx.iter().enumerate() {
        // SAFETY: as above.
        assert_eq!(unsafe { p.buffer(b) }.data()[999], k as u8, "no overlap");
    }
    c.free(&idx);
    assert_eq!(p.stats().in_use, 0);
}

#[test]
#[should_panic(expected = "out of range")]
fn arena_checks_the_index() {
    let p = pool(2);
    // SAFETY: never returns: the index is out of range.
    let _ = unsafe { p.arena().header_mut(BufIdx(2)) };
}

#[test]
fn arena_holds_exactly_the_frames_inside_it() {
    for n in [1u32, 2, 3, 12, 1000, 16384, 1 << 26] {
        let a = Arena::empty_of_len(n);
        assert!(a.holds(&[]));
        let inside: Vec<BufIdx> = (0..n.min(300)).chain([n - 1]).map(BufIdx).collect();
        assert!(a.holds(&inside), "n={n}");
        for bad in [
            n,
            n + 1,
            2 * n,
            1 << 31,
            (1 << 31) + n - 1,
            (1 << 31) + n,
            u32::MAX,
        ] {
            for at in [0, inside.len() / 2, inside.len() - 1] {
                let mut f = inside.clone();
                f[at] = BufIdx(bad);
                assert!(!a.holds(&f), "n={n} index {bad} at {at}");
            }
        }
    }
}

#[test]
fn resolved_frames_view_the_same_buffers() {
    let p = pool(8);
    let mut c = p.cache();
    let mut idx = [BufIdx(0); 5];
    assert_eq!(c.alloc(&mut idx), 5);
    idx.reverse();
    let a = p.arena();
    let mut addrs = FrameAddrs::<8>::default();
    a.resolve(&idx, 3, &mut addrs);
    // The 3 entries after the frame repeat its last packet's addresses (what the loop's
    // prefetch 3 ahead reads past the end).
    assert_eq!(addrs.len(), 5);
    for k in 5..8 {
        assert_eq!(addrs.entry(k), addrs.entry(4), "entry {k}");
    }
    for (k, &b) in idx.iter().enumerate() {
        addrs.prefetch(k + 3, true);
        // SAFETY: the test owns every buffer; `addrs` was resolved from `idx`; one view at
        // a time.
        unsafe { a.buffer_at(&addrs, k, b) }.write_packet(&[k as u8; 60]);
    }
    for (k, &b) in idx.iter().enumerate() {
        // SAFETY: as above.
        let v = unsafe { a.buffer(b) };
        assert_eq!((v.len(), v.data()[59]), (60, k as u8), "buffer {k}");
    }
    // An empty frame resolves to nothing; an index outside the arena or a frame longer
    // than the addresses is refused.
    let before: Vec<_> = (0..8).map(|k| addrs.entry(k)).collect();
    a.resolve(&[], 8, &mut addrs);
    assert_eq!((0..8).map(|k| addrs.entry(k)).collect::<Vec<_>>(), before);
    assert_eq!(addrs.len(), 0);
    let bad = [BufIdx(8)];
    let refused = |f: &[BufIdx], ahead| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            a.resolve(f, ahead, &mut FrameAddrs::<8>::default())
        }))
        .is_err()
    };
    assert!(refused(&bad, 0));
    assert!(refused(&idx, 4));
    assert!(!refused(&idx, 3));
    // A distance that overflows `len + ahead` is refused by the fit check itself, not by
    // an overflow or a slice index.
    let msg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        a.resolve(&idx, usize::MAX, &mut FrameAddrs::<8>::default())
    }))
    .expect_err("usize::MAX ahead resolved");
    let msg = msg.downcast_ref::<String>().map_or("", |s| s.as_str());
    assert!(msg.contains("does not fit 8 addresses"), "{msg}");
    c.free(&idx);
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn unchecked_views_match_the_checked_ones() {
    let p = pool(4);
    let mut c = p.cache();
    let mut idx = [BufIdx(0); 4];
    assert_eq!(c.alloc(&mut idx), 4);
    let a = p.arena();
    assert!(a.holds(&idx));
    for (k, &b) in idx.iter().enumerate() {
        // SAFETY: the test owns every buffer, in the arena (holds); one view at a time.
        let mut v = unsafe { a.buffer_unchecked(b) };
        v.write_packet(&[k as u8; 60]);
        // A reborrowed view writes the same buffer.
        let mut r = v.reborrow();
        r.data_mut()[1] = 0xee;
        assert!(r.advance(1));
        assert_eq!(v.len(), 59);
        assert_eq!(v.data()[0], 0xee);
        // SAFETY: as above, the view is no longer used.
        let h = unsafe { a.header_mut_unchecked(b) };
        assert_eq!(h.current_length, 59);
    }
    c.free(&idx);
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn shared_data_array_is_visible_through_its_fd() {
    let p = BufferPool::new(&PoolConfig {
        buffers: 64,
        data_size: 2048,
        page_size: PageSize::Small,
        shared: true,
    })
    .expect("shared pool");
    let fd = p.shared_fd().expect("memfd");
    let (_, len) = p.region();
    // A second, independent mapping of the fd sees what the pool writes (as a peer would).
    // SAFETY: mapping our own memfd; checked; unmapped below.
    let peer = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    assert_ne!(peer, libc::MAP_FAILED);
    let mut c = p.cache();
    let b = c.alloc_one().unwrap();
    // SAFETY: the test owns this buffer (allocated above); no other view is alive.
    let mut v = unsafe { p.buffer(b) };
    v.write_packet(b"zero-copy");
    let off = p.data_offset(b).unwrap() + HEADROOM;
    // SAFETY: off + 9 <= len (inside the peer mapping).
    let seen = unsafe { core::slice::from_raw_parts((peer as *const u8).add(off), 9) };
    assert_eq!(seen, b"zero-copy");
    // SAFETY: unmapping what we mapped above.
    unsafe { libc::munmap(peer, len) };
    c.free(&[b]);
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn chains_append_copy_and_free() {
    let p = pool(64);
    let mut c = p.cache();
    let bytes: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    let head = c.alloc_with(&bytes).unwrap();
    assert_eq!(p.stats().in_use, 3);
    assert_eq!(c.chain_len(head), 5000);
    let mut out = Vec::new();
    c.copy_chain(head, &mut out, usize::MAX);
    assert_eq!(out, bytes);
    let mut trunc = Vec::new();
    c.copy_chain(head, &mut trunc, 100);
    assert_eq!(trunc.len(), 100);
    let tail = c.alloc_with(&[7u8; 10]).unwrap();
    c.chain_append(head, tail);
    assert_eq!(c.chain_len(head), 5010);
    // SAFETY: the test owns this buffer (allocated above); no other view is alive.
    assert_eq!(unsafe { p.buffer(head) }.total_len(), 5010);
    c.free(&[head]);
    assert_eq!(p.stats().in_use, 0, "freeing the head frees the chain");
}

#[test]
fn alloc_with_exhaustion_leaks_nothing() {
    let p = pool(2);
    let mut c = p.cache();
    assert!(c.alloc_with(&[0u8; 5000]).is_none());
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn bad_config_is_an_error() {
    assert!(BufferPool::new(&PoolConfig {
        buffers: 0,
        ..Default::default()
    })
    .is_err());
    assert!(BufferPool::new(&PoolConfig {
        data_size: 100,
        ..Default::default()
    })
    .is_err());
}

proptest::proptest! {
    #[test]
    fn random_alloc_free_never_leaks(ops in proptest::collection::vec((0usize..300, proptest::bool::ANY), 1..60)) {
        let p = pool(2048);
        let mut c = p.cache();
        let mut held: Vec<BufIdx> = Vec::new();
        for (n, free) in ops {
            if free {
                let k = n.min(held.len());
                let rest = held.split_off(held.len() - k);
                c.free(&rest);
            } else {
                let mut v = vec![BufIdx(0); n];
                let got = c.alloc(&mut v);
                held.extend_from_slice(&v[..got]);
            }
            proptest::prop_assert_eq!(p.stats().in_use as usize, held.len());
        }
        c.free(&held);
        proptest::prop_assert_eq!(p.stats().in_use, 0);
    }
}

/// `resolve` keeps what a `FrameAddrs` holds only for the same frame (every index, not
/// only the first and last), of an arena of the same layout, with as many entries after it;
/// anything else is resolved (and checked) again.
#[test]
fn resolve_keeps_only_the_same_frame() {
    let p = pool(8);
    let mut c = p.cache();
    let mut idx = [BufIdx(0); 5];
    assert_eq!(c.alloc(&mut idx), 5);
    let a = p.arena();
    let fresh = |a: Arena<'_>, f: &[BufIdx], ahead| {
        let mut out = FrameAddrs::<16>::default();
        a.resolve(f, ahead, &mut out);
        (0..f.len() + ahead)
            .map(|k| out.entry(k))
            .collect::<Vec<_>>()
    };
    let entries = |out: &FrameAddrs<16>, m: usize| (0..m).map(|k| out.entry(k)).collect::<Vec<_>>();
    let mut addrs = FrameAddrs::<16>::default();
    a.resolve(&idx, 3, &mut addrs);
    assert_eq!(entries(&addrs, 8), fresh(a, &idx, 3));
    // The same frame again: the same addresses.
    a.resolve(&idx, 3, &mut addrs);
    assert_eq!(entries(&addrs, 8), fresh(a, &idx, 3));
    // Two middle packets swapped (first and last the same): resolved again.
    let mut swapped = idx;
    swapped.swap(1, 3);
    a.resolve(&swapped, 3, &mut addrs);
    assert_eq!(entries(&addrs, 8), fresh(a, &swapped, 3));
    // More entries after the frame than the last resolve wrote: resolved again.
    a.resolve(&swapped, 8, &mut addrs);
    assert_eq!(entries(&addrs, 13), fresh(a, &swapped, 8));
    // The same frame of another pool's arena: its addresses.
    let p2 = pool(8);
    let mut c2 = p2.cache();
    let mut idx2 = [BufIdx(0); 5];
    assert_eq!(c2.alloc(&mut idx2), 5);
    let a2 = p2.arena();
    a2.resolve(&swapped, 3, &mut addrs);
    assert_eq!(entries(&addrs, 8), fresh(a2, &swapped, 3));
    assert_ne!(fresh(a2, &swapped, 3), fresh(a, &swapped, 3));
    // A frame that differs from the one held only by an index outside the arena is
    // checked (and refused), not taken for the one held.
    let mut bad = swapped;
    bad[2] = BufIdx(8);
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        a2.resolve(&bad, 3, &mut addrs)
    }))
    .is_err();
    assert!(refused, "a frame with buffer 8 of 8 resolved");
    c.free(&idx);
    c2.free(&idx2);
    assert_eq!((p.stats().in_use, p2.stats().in_use), (0, 0));
}

/// A stamp names one resolve: kept by a resolve that finds the frame already there,
/// changed by one that computes the addresses, never the same in two `FrameAddrs`; and
/// `holds_stamped` wants the stamp and the frame's length, ends and entries after it.
#[test]
fn stamps_name_one_resolve() {
    let p = pool(8);
    let mut c = p.cache();
    let mut idx = [BufIdx(0); 5];
    assert_eq!(c.alloc(&mut idx), 5);
    let a = p.arena();
    let (mut x, mut y) = (FrameAddrs::<16>::default(), FrameAddrs::<16>::default());
    assert!(x.stamp().is_none());
    a.resolve(&idx, 3, &mut x);
    a.resolve(&idx, 3, &mut y);
    let s = x.stamp();
    assert!(!s.is_none());
    assert_ne!(s, y.stamp(), "two FrameAddrs, one resolve each");
    assert!(a.holds_stamped(&idx, 3, &x, s));
    assert!(!a.holds_stamped(&idx, 3, &y, s));
    assert!(!a.holds_stamped(&idx, 3, &x, Stamp::NONE));
    assert!(!a.holds_stamped(&idx[..4], 3, &x, s), "another length");
    assert!(!a.holds_stamped(&idx, 4, &x, s), "more entries after it");
    a.resolve(&idx, 3, &mut x);
    assert_eq!(x.stamp(), s, "the same frame found there");
    let mut swapped = idx;
    swapped.swap(0, 4);
    a.resolve(&swapped, 3, &mut x);
    assert_ne!(x.stamp(), s, "another frame resolved");
    assert!(!a.holds_stamped(&idx, 3, &x, s));
    c.free(&idx);
    assert_eq!(p.stats().in_use, 0);
}

/// Debug builds stop `buffer_at` with an index that is not the resolved frame's `i`-th.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "entry 0 is not buffer")]
fn buffer_at_checks_the_index() {
    let p = pool(8);
    let mut c = p.cache();
    let mut idx = [BufIdx(0); 2];
    assert_eq!(c.alloc(&mut idx), 2);
    let a = p.arena();
    let mut addrs = FrameAddrs::<4>::default();
    a.resolve(&idx, 2, &mut addrs);
    // SAFETY: deliberately wrong: entry 0 is idx[0]; the debug check stops before any access.
    let _ = unsafe { a.buffer_at(&addrs, 0, idx[1]) };
}

/// Debug builds stop `buffer_at` past the frame last resolved, even where a stale or
/// repeated entry holds the buffer's address.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "packet 2 of a frame of 2")]
fn buffer_at_checks_the_frame_length() {
    let p = pool(8);
    let mut c = p.cache();
    let mut idx = [BufIdx(0); 2];
    assert_eq!(c.alloc(&mut idx), 2);
    let a = p.arena();
    let mut addrs = FrameAddrs::<4>::default();
    a.resolve(&idx, 2, &mut addrs);
    assert_eq!(addrs.entry(2), addrs.entry(1));
    // SAFETY: deliberately wrong: entry 2 is past the frame (it repeats idx[1] for the
    // prefetch); the debug check stops before any access.
    let _ = unsafe { a.buffer_at(&addrs, 2, idx[1]) };
}

/// Debug builds stop a double free at the second `free`, naming the buffer.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "freed twice (double free)")]
fn double_free_is_detected() {
    let p = pool(64);
    let mut c = p.cache();
    let b = c.alloc_one().unwrap();
    c.free(&[b]);
    c.free(&[b]);
}

/// Debug builds stop a view of a freed buffer (use after free).
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "used while free (use after free, or never allocated)")]
fn use_after_free_is_detected() {
    let p = pool(64);
    let mut c = p.cache();
    let b = c.alloc_one().unwrap();
    c.free(&[b]);
    // SAFETY: deliberately wrong: the buffer was freed; the debug check stops before any access.
    let _ = unsafe { p.buffer(b) };
}

/// Freeing a chain frees (and marks) every member once; they can be allocated again.
#[test]
fn chains_free_every_member_once() {
    let p = pool(64);
    let mut c = p.cache();
    let head = c.alloc_with(&[7u8; 5000]).unwrap();
    assert!(c.chain_len(head) == 5000);
    c.free(&[head]);
    c.flush();
    assert_eq!(p.stats().in_use, 0);
    let mut again = [BufIdx(0); 64];
    assert_eq!(c.alloc(&mut again), 64);
    c.free(&again);
}

#[test]
fn a_frame_of_singles_and_chains_frees_every_buffer() {
    let p = pool(64);
    let mut c = p.cache();
    let mut singles = [BufIdx(0); 5];
    assert_eq!(c.alloc(&mut singles), 5);
    let chain = c.alloc_with(&[1u8; 5000]).unwrap();
    let last_chain = c.alloc_with(&[2u8; 3000]).unwrap();
    assert_eq!(p.stats().in_use, 5 + 3 + 2);
    let frame = [
        singles[0], singles[1], chain, singles[2], singles[3], singles[4], last_chain,
    ];
    c.free(&frame);
    assert_eq!(p.stats().in_use, 0);
    c.flush();
    assert_eq!(p.stats().free, 64);
}

#[test]
#[should_panic(expected = "out of range")]
fn freeing_an_index_out_of_range_panics() {
    let p = pool(4);
    let mut c = p.cache();
    c.free(&[BufIdx(4)]);
}

/// `free_at` frees a resolved frame through its addresses: every head, and the chain
/// behind a head that has one (its flags read through the address), none twice.
#[test]
fn free_at_frees_heads_and_their_chains_through_the_addresses() {
    let p = pool(16);
    let mut c = p.cache();
    let mut idx = [BufIdx(0); 6];
    assert_eq!(c.alloc(&mut idx), 6);
    // Packet 2 (not the first or the last) gets a chain of two behind it.
    let mut tail = [BufIdx(0); 2];
    assert_eq!(c.alloc(&mut tail), 2);
    c.chain_append(idx[2], tail[0]);
    c.chain_append(idx[2], tail[1]);
    assert_eq!(p.stats().in_use, 8);
    let mut addrs = FrameAddrs::<16>::default();
    p.arena().resolve(&idx, 3, &mut addrs);
    // SAFETY: `addrs` was just resolved from `idx` in this pool's arena; this test owns
    // every buffer and hands them over.
    unsafe { c.free_at(&idx, &addrs) };
    assert_eq!(p.stats().in_use, 0, "heads and the chain behind packet 2");
}
