//! GSO aggregates across memif "where peers agree": two Sluice peers pass TCP/UDP
//! aggregates (flag `GSO`, `sluice_vnet::offload`) whole, as one descriptor chain, instead
//! of cutting them into MSS-sized segments before `memif-tx`.
//!
//! Agreement (control plane, [`offer`] / [`agree`]): an interface created with `gso` offers
//! it in the Sluice extension of INIT (slave) and accepts it in the extension of CONNECTED
//! (master) only when the slave offered it and the master has `gso` too
//! (`proto::feature::GSO`). Both sides then mark the connection (`DataConn::gso`), and the
//! interface takes aggregates (`sluice_vnet::output::set_gso`, applied on the main loop by
//! [`follow`] whenever a connection is published or withdrawn). VPP, libmemif and DPDK
//! never send the extension and ignore the bytes it lives in, so with them nothing changes:
//! no agreement, aggregates are cut by `gso-segment` before `memif-tx` as for any interface.
//!
//! Wire (data path, only on an agreed connection): the first descriptor of an aggregate has
//! [`DESC_FLAG_GSO`] in `flags` and its segment size and kind in `metadata`
//! ([`tx_desc`]); nothing is added to the packet's bytes, and its partial L4 checksum (the
//! pseudo-header seed) travels as it is. The receiver parses the headers from the packet
//! itself and sets the buffer's GSO metadata ([`rx_mark`]); an aggregate whose headers do not
//! match is dropped and counted (`memif-input bad_gso`). The flag is ignored on a connection
//! that did not agree (the packet is received as a plain frame, as before).

use super::DataConn;
use sluice_buffer::{flags, Buffer, BufferHeader};
use sluice_graph::MainPoster;
use sluice_vnet::offload::Gso;
use sluice_vnet::SwIfIndex;

/// Descriptor flag (first descriptor of a packet): a GSO aggregate, described in
/// `metadata`. Far from `MEMIF_DESC_FLAG_NEXT` (bit 0), the only flag memif.h defines.
pub const DESC_FLAG_GSO: u16 = 1 << 15;

/// Largest aggregate accepted from a ring: an IP packet of 64 KiB behind up to two VLAN
/// tags (plain packets: 65535 bytes).
pub const MAX_LEN: u64 = 65535 + 14 + 8;

/// Smallest `buffer-size` of a `gso` slave: its largest aggregate must fit the descriptors
/// `memif-input` takes for one packet (`MAX_SEGS`), on either side.
pub const MIN_BUFFER_SIZE: u32 = MAX_LEN.div_ceil(crate::node::MAX_SEGS as u64) as u32;

/// Whether a ring of `slots` slots of `buffer_size` bytes holds two of the largest
/// aggregates ([`MAX_LEN`]): with less, an aggregate would wait for slots the peer frees
/// only behind it, or never fit at all. A `gso` slave offers GSO only on rings that do.
pub fn ring_fits(slots: u64, buffer_size: u32) -> bool {
    slots * buffer_size as u64 >= 2 * MAX_LEN
}

/// [`ring_fits`] for the rings of a connection (a slave's: every ring has its size and
/// `buffer_size` slots).
pub fn conn_fits(conn: &DataConn) -> bool {
    let slots = conn
        .tx
        .iter()
        .chain(&conn.rx)
        .map(|q| q.ring.size() as u64)
        .min();
    ring_fits(slots.unwrap_or(0), conn.buffer_size)
}

/// The feature bits an interface offers (slave, INIT) or may accept (master).
pub fn offer(gso: bool) -> u32 {
    if gso {
        super::proto::feature::GSO
    } else {
        0
    }
}

/// Whether a connection carries aggregates: this side has `gso` and the peer's extension
/// (INIT's offer, or CONNECTED's answer) says GSO.
pub fn agree(own: bool, peer_features: u32) -> bool {
    own && peer_features & super::proto::feature::GSO != 0
}

/// The descriptor flags and metadata of a packet's first descriptor: for an aggregate
/// [`DESC_FLAG_GSO`] and `gso_size | gso_type << 16`; `(0, 0)` for any other packet.
#[inline]
pub fn tx_desc(h: &BufferHeader) -> (u16, u32) {
    if h.flags & flags::GSO == 0 {
        return (0, 0);
    }
    (DESC_FLAG_GSO, h.gso_size as u32 | (h.gso_type as u32) << 16)
}

/// Largest segment (headers included) an aggregate received from a ring may be cut into:
/// the largest MTU behind an Ethernet header and two VLAN tags.
pub const MAX_SEGMENT_LEN: usize = *sluice_vnet::interface::MTU_RANGE.end() as usize + 14 + 8;

/// Marks a received packet of `total` bytes (its first buffer `v`, from its Ethernet
/// header) as the aggregate that descriptor `metadata` describes. False (to be dropped) when
/// its headers are not TCP/UDP over IPv4/IPv6 of that kind within the first buffer, when
/// `metadata` has bits other than the segment size and kind, or when the segment size
/// makes fewer than 2 segments, more than `offload::MAX_TOTAL_SEGMENTS`, or segments
/// larger than [`MAX_SEGMENT_LEN`]: a peer's metadata is not trusted further than a
/// packet's bytes.
pub fn rx_mark(v: &mut Buffer<'_>, metadata: u32, total: usize) -> bool {
    if metadata >> 24 != 0 {
        return false;
    }
    let size = metadata as u16;
    let kind = (metadata >> 16) as u8;
    let sane = |g: &Gso| {
        (2..=sluice_vnet::offload::MAX_TOTAL_SEGMENTS).contains(&g.segments())
            && g.segment_len(0) <= MAX_SEGMENT_LEN
    };
    match Gso::parse_head(v.data(), total, kind, size).filter(sane) {
        Some(g) => {
            g.set_meta(v.hdr);
            true
        }
        None => false,
    }
}

/// Whether the aggregate in descriptor flags `f` is to be marked on connection `conn`.
#[inline]
pub fn rx_flagged(conn: &DataConn, f: u16) -> bool {
    conn.gso && f & DESC_FLAG_GSO != 0
}

/// Makes interface `sw` take aggregates exactly while connection `conn` agreed to GSO, on
/// every thread (`output::set_gso`, on the main loop: the control plane runs inside a
/// process node). Until the job runs, aggregates are cut before `memif-tx` (the old
/// setting) or, right after a reconnect to a peer that did not agree, dropped by `memif-tx`
/// as `gso_refused`.
pub fn follow(poster: &MainPoster, sw: u32, conn: Option<&DataConn>) {
    let on = conn.is_some_and(|c| c.gso);
    poster.post(Box::new(move |vm| {
        // The interface may have been deleted meanwhile: `get` skips deleted interfaces,
        // and indices are never reused (`Interface::deleted`), so a late job cannot reach
        // another interface; the driver check guards that invariant.
        let still = vm
            .ext_mut::<sluice_vnet::Interfaces>()
            .get(SwIfIndex(sw))
            .is_some_and(|i| i.driver == "memif");
        if still {
            sluice_vnet::output::set_gso(vm, SwIfIndex(sw), on)
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::tests::pool;
    use crate::shm::{Region, Ring};
    use sluice_buffer::BufferPool;
    use sluice_vnet::offload::gso_type;

    /// A `gso` slave's rings must hold two 64 KiB aggregates: 2^k slots × buffer-size
    /// as built (the master may shrink the ring), never less.
    #[test]
    fn a_ring_too_small_for_two_aggregates_offers_nothing() {
        assert!(ring_fits(1024, 2048));
        assert!(ring_fits(128, 1025));
        assert!(!ring_fits(64, 2048), "131072 bytes < 2 * MAX_LEN");
        assert!(!ring_fits(2, 65535));
        let region = Region::create("gso-fits", 4096).unwrap();
        let mut conn = DataConn::for_test(Vec::new(), Vec::new(), Vec::new(), true);
        assert!(!conn_fits(&conn), "no rings");
        for (log2, rx) in [(7u8, false), (6, true)] {
            let ring = Ring::new(&region, 0, log2).unwrap();
            let q = crate::Queue::new(ring, crate::shm::eventfd().unwrap(), 0, 0);
            if rx {
                conn.rx.push(q)
            } else {
                conn.tx.push(q)
            }
        }
        assert!(!conn_fits(&conn), "the 64-slot rx ring");
        conn.rx.clear();
        assert!(conn_fits(&conn), "128 slots of 2048 bytes");
    }

    #[test]
    fn agreement_needs_both_sides() {
        assert!(agree(true, offer(true)));
        assert!(!agree(false, offer(true)));
        assert!(!agree(true, offer(false)));
        assert!(!agree(true, 0x8000_0000), "unknown bits only");
    }

    /// An Ethernet + IPv4 + TCP aggregate of `payload` bytes (headers 54 bytes).
    fn tcp4(payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 54 + payload];
        f[12] = 0x08;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[46] = 0x50;
        f
    }

    /// memif-tx on an agreed connection: a plain packet takes the fast path (one descriptor,
    /// no flag), an aggregate (one Sluice buffer, 1454 bytes) the general path: three
    /// chained 512-byte slots, the first with `DESC_FLAG_GSO` and the metadata, or one
    /// 2048-byte slot with the flag (the fast path would have sent it unflagged); the bytes
    /// unchanged. On a connection that did not agree the aggregate is refused, counted.
    #[test]
    fn an_aggregate_is_one_flagged_descriptor_chain_only_when_agreed() {
        use crate::node::{tx_ring, TxCounter};
        use crate::proto::Mode;
        use crate::shm::DESC_FLAG_NEXT;
        let pool = BufferPool::new(&pool(8)).unwrap();
        let mut c = pool.cache();
        let f = tcp4(1400);
        let g = Gso::parse(&f, gso_type::TCPV4, 700).unwrap();
        let tx = 3;
        for (agreed, bs) in [(true, 512), (true, 2048), (false, 512)] {
            let plain = c.alloc_with(&f[..100]).unwrap();
            let agg = c.alloc_with(&f).unwrap();
            for b in [plain, agg] {
                // SAFETY: the test owns the buffers; one view at a time.
                unsafe { pool.arena().header_mut(b) }.tx_if = tx;
            }
            // SAFETY: as above.
            g.set_meta(unsafe { pool.buffer(agg) }.hdr);
            let region = Region::create("gso-tx", 40960).unwrap();
            let ring = Ring::new(&region, 0, 4).unwrap();
            let base = crate::shm::ring_bytes(4) as u64;
            let q = crate::Queue::new(ring, crate::shm::eventfd().unwrap(), 0, base);
            let mut conn = DataConn::for_test(vec![region], Vec::new(), vec![q], true);
            conn.buffer_size = bs;
            conn.gso = agreed;
            let r = tx_ring(&pool, &conn, &conn.tx[0], Mode::Ethernet, tx, &[plain, agg]);
            assert_eq!(r.consumed, 2);
            let d: Vec<_> = (0..4).map(|s| ring.desc(s)).collect();
            assert_eq!((d[0].flags, d[0].metadata, d[0].length), (0, 0, 100));
            let meta = 700 | (gso_type::TCPV4 as u32) << 16;
            if bs == 2048 {
                assert_eq!(r.sent, 2);
                assert_eq!(
                    (d[1].flags, d[1].metadata, d[1].length),
                    (DESC_FLAG_GSO, meta, 1454)
                );
                assert_eq!(ring.head(), 2);
            } else if agreed {
                assert_eq!(r.sent, 2);
                assert_eq!(
                    (d[1].flags, d[1].metadata),
                    (DESC_FLAG_NEXT | DESC_FLAG_GSO, meta)
                );
                assert_eq!((d[2].flags, d[2].metadata), (DESC_FLAG_NEXT, 0));
                assert_eq!((d[3].flags, d[3].metadata), (0, 0));
                let mut got = Vec::new();
                for x in &d[1..] {
                    let p = conn.regions[0]
                        .range(x.offset as u64, x.length as u64)
                        .unwrap();
                    // SAFETY: inside the mapped region (checked by `range`).
                    got.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(p, x.length as usize)
                    });
                }
                assert_eq!(got, f, "the aggregate's bytes, unchanged");
                assert_eq!(ring.head(), 4);
            } else {
                assert_eq!(r.sent, 1);
                assert_eq!(r.fails[TxCounter::GsoRefused as usize], 1);
                assert_eq!(ring.head(), 1, "only the plain packet published");
            }
            c.free(&[plain, agg]);
        }
        drop(c);
        assert_eq!(pool.stats().in_use, 0, "buffers leaked");
    }

    /// memif-tx refuses (`too_long`) an agreed aggregate the peer's memif-input would drop:
    /// one longer than [`MAX_LEN`] (a chain of 33 full 2048-byte buffers), or one needing
    /// more than `MAX_SEGS` slots (1454 bytes in 16-byte slots); nothing is published.
    #[test]
    fn an_aggregate_the_peer_would_drop_is_not_sent() {
        use crate::node::{tx_ring, TxCounter};
        use crate::proto::Mode;
        let pool = BufferPool::new(&pool(40)).unwrap();
        let mut c = pool.cache();
        let f = tcp4(1400);
        let g = Gso::parse(&f, gso_type::TCPV4, 700).unwrap();
        let tx = 3;
        let long = c.alloc_with(&tcp4(2048 - 54)).unwrap();
        for _ in 0..32 {
            let t = c.alloc_with(&[0u8; 2048]).unwrap();
            c.chain_append(long, t);
        }
        let small = c.alloc_with(&f).unwrap();
        for (b, bs) in [(long, 4096u32), (small, 16)] {
            // SAFETY: the test owns the buffers; one view at a time.
            let h = unsafe { pool.arena().header_mut(b) };
            h.tx_if = tx;
            g.set_meta(h);
            let log2 = 8;
            let base = crate::shm::ring_bytes(log2);
            let region = Region::create("gso-tx-long", base + ((bs as usize) << log2)).unwrap();
            let ring = Ring::new(&region, 0, log2).unwrap();
            let q = crate::Queue::new(ring, crate::shm::eventfd().unwrap(), 0, base as u64);
            let mut conn = DataConn::for_test(vec![region], Vec::new(), vec![q], true);
            conn.buffer_size = bs;
            conn.gso = true;
            let r = tx_ring(&pool, &conn, &conn.tx[0], Mode::Ethernet, tx, &[b]);
            assert_eq!((r.consumed, r.sent), (1, 0), "buffer-size {bs}");
            assert_eq!(r.fails[TxCounter::TooLong as usize], 1, "buffer-size {bs}");
            assert_eq!(ring.head(), 0, "nothing published");
        }
        c.free(&[long, small]);
        drop(c);
        assert_eq!(pool.stats().in_use, 0, "buffers leaked");
    }

    /// memif-input facing a malicious peer: a master `gso` interface whose published rx ring
    /// holds, flagged and not, on an agreed connection and not: a good aggregate, junk
    /// headers, an absurd segment size, metadata with unknown bits, a 65-descriptor chain
    /// and an aggregate over `MAX_LEN`. Each is counted (`gso`, `bad_gso`, `bad_desc`) or
    /// received as a plain frame, nothing panics, and no buffer stays taken.
    #[test]
    fn a_malicious_peer_is_counted_and_leaks_nothing() {
        use crate::node::RxCounter;
        use crate::shm::DESC_FLAG_NEXT;
        use sluice_graph::Vlib;
        let (mut vm, t) = crate::node::tests::runtime(512);
        let sock = format!("@sluice-gsofix7-{}", std::process::id());
        for c in [
            format!("create memif socket id 1 filename {sock}"),
            "create interface memif id 0 socket-id 1 master gso".into(),
            "set interface state memif1/0 up".into(),
        ] {
            t.execute(&mut vm, &c)
                .unwrap_or_else(|e| panic!("`{c}': {e}"));
        }
        let sw = {
            let ifs = vm.ext::<sluice_vnet::Interfaces>().unwrap();
            ifs.find("memif1/0").unwrap()
        };
        let (sh, _) = crate::rx_iface(&mut vm, sw, 0).unwrap();
        let node = vm.registry.find("memif-input").unwrap();
        let count =
            |vm: &Vlib, c: RxCounter| vm.registry.node(node).stats.counter_total(c as usize);
        let tcp = (gso_type::TCPV4 as u32) << 16;
        let good = tcp4(1400);
        for agreed in [true, false] {
            let log2 = 8;
            let bufs = 8192usize;
            let region = Region::create("gso-evil", bufs + 256 * 2048).unwrap();
            let ring = Ring::new(&region, 0, log2).unwrap();
            // (flags, metadata, bytes) per descriptor, written to consecutive slots.
            let mut descs: Vec<(u16, u32, Vec<u8>)> = vec![
                (DESC_FLAG_GSO, 700 | tcp, good.clone()),
                (DESC_FLAG_GSO, 700 | tcp, vec![0u8; 1454]),
                (DESC_FLAG_GSO, 1 | tcp, good.clone()),
                (DESC_FLAG_GSO, 700 | tcp | 0x5a << 24, good.clone()),
                (0, 700 | tcp, good.clone()),
            ];
            for i in 0..65 {
                let f = if i == 0 { DESC_FLAG_GSO } else { 0 };
                let n = if i < 64 { DESC_FLAG_NEXT } else { 0 };
                descs.push((f | n, 700 | tcp, good[..64].to_vec()));
            }
            let mut long = tcp4(2048 - 54);
            long.resize(2048, 0);
            for i in 0..33 {
                let f = if i == 0 { DESC_FLAG_GSO } else { 0 };
                let n = if i < 32 { DESC_FLAG_NEXT } else { 0 };
                descs.push((f | n, 700 | tcp, long.clone()));
            }
            assert!(descs.len() <= 256);
            for (s, (flags, metadata, bytes)) in descs.iter().enumerate() {
                let off = bufs + s * 2048;
                let p = region.range(off as u64, bytes.len() as u64).unwrap();
                // SAFETY: inside the mapped region (checked by `range`); no reader yet.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
                ring.set_desc(
                    s as u16,
                    crate::shm::Desc {
                        flags: *flags,
                        region: 0,
                        length: bytes.len() as u32,
                        offset: off as u32,
                        metadata: *metadata,
                    },
                );
            }
            ring.set_head(descs.len() as u16);
            let q = crate::Queue::new(ring, crate::shm::eventfd().unwrap(), 0, bufs as u64);
            let mut conn = DataConn::for_test(vec![region], vec![q], Vec::new(), false);
            conn.gso = agreed;
            let rx = || {
                sh.counters
                    .total(sluice_vnet::interface::counter::RX_PACKETS)
            };
            let rx0 = rx();
            let before =
                [RxCounter::Gso, RxCounter::BadGso, RxCounter::BadDesc].map(|c| count(&vm, c));
            sh.publish(Some(std::sync::Arc::new(conn)));
            for _ in 0..8 {
                vm.run_main_once();
            }
            let got =
                [RxCounter::Gso, RxCounter::BadGso, RxCounter::BadDesc].map(|c| count(&vm, c));
            let d: Vec<u64> = got.iter().zip(before).map(|(g, b)| g - b).collect();
            if agreed {
                assert_eq!(d, [1, 3, 2], "gso, bad_gso, bad_desc");
                assert_eq!(rx() - rx0, 2, "the good aggregate and the unflagged frame");
            } else {
                // Flags ignored: 5 plain frames, the long aggregate over 65535 bytes.
                assert_eq!(d, [0, 0, 2], "gso, bad_gso, bad_desc");
                assert_eq!(rx() - rx0, 5, "every short packet, as a plain frame");
            }
            sh.publish(None);
            for _ in 0..4 {
                vm.run_main_once();
            }
        }
        let pool = vm.pool.clone();
        drop(vm);
        assert_eq!(pool.stats().in_use, 0, "buffers leaked");
    }

    #[test]
    fn metadata_round_trips_and_bad_headers_are_refused() {
        let pool = BufferPool::new(&pool(8)).unwrap();
        let mut c = pool.cache();
        let b = c.alloc_one().unwrap();
        let f = tcp4(1400);
        {
            // SAFETY: owned, one view.
            let mut v = unsafe { pool.buffer(b) };
            v.set_len(f.len());
            v.data_mut().copy_from_slice(&f);
            v.hdr.flags &= !flags::GSO;
            assert_eq!(tx_desc(v.hdr), (0, 0), "plain packets carry nothing");
            let meta = 700 | (gso_type::TCPV4 as u32 | gso_type::ECN as u32) << 16;
            assert!(rx_mark(&mut v, meta, f.len()));
            assert_ne!(v.hdr.flags & flags::GSO, 0);
            assert_ne!(v.hdr.flags & flags::OFFLOAD_L4_CKSUM, 0);
            assert_eq!(
                (v.hdr.gso_size, v.hdr.gso_l4_offset, v.hdr.gso_l4_hdr_len),
                (700, 20, 20)
            );
            assert_eq!(tx_desc(v.hdr), (DESC_FLAG_GSO, meta), "sent as received");
            // UDP_L4 on a TCP packet, a zero MSS: refused.
            v.hdr.flags &= !(flags::GSO | flags::OFFLOAD_L4_CKSUM);
            assert!(!rx_mark(
                &mut v,
                700 | (gso_type::UDP_L4 as u32) << 16,
                f.len()
            ));
            assert!(!rx_mark(&mut v, (gso_type::TCPV4 as u32) << 16, f.len()));
            // Bits past the kind; one segment (MSS >= payload); more than 1024 segments;
            // segments larger than any MTU: refused.
            let tcp = (gso_type::TCPV4 as u32) << 16;
            assert!(!rx_mark(&mut v, 700 | tcp | 1 << 24, f.len()));
            assert!(!rx_mark(&mut v, 1400 | tcp, f.len()));
            assert!(rx_mark(&mut v, 1399 | tcp, f.len()), "two segments");
            v.hdr.flags &= !(flags::GSO | flags::OFFLOAD_L4_CKSUM);
            let total = 54 + 1025;
            assert!(!rx_mark(&mut v, 1 | tcp, total), "1025 segments");
            assert!(rx_mark(&mut v, 2 | tcp, total), "513 segments");
            v.hdr.flags &= !(flags::GSO | flags::OFFLOAD_L4_CKSUM);
            let total = 54 + 2 * 9200;
            assert!(
                !rx_mark(&mut v, 9200 | tcp, total),
                "segments of 9254 bytes"
            );
            assert!(rx_mark(&mut v, 9184 | tcp, total), "segments of 9238 bytes");
            v.hdr.flags &= !(flags::GSO | flags::OFFLOAD_L4_CKSUM);
            assert_eq!(v.hdr.flags & flags::GSO, 0);
        }
        c.free(&[b]);
        drop(c);
        assert_eq!(pool.stats().in_use, 0, "buffers leaked");
    }
}
