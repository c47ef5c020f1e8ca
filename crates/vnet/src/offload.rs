//! Packet fix-ups the Linux drivers do while copying frames out of the ring: re-inserting
//! the VLAN tag the kernel stripped into `tp_vlan_tci`, completing partial L4 checksums
//! (`TP_STATUS_CSUMNOTREADY`), and GSO: describing an aggregate the kernel handed over
//! whole in its buffer metadata ([`Gso::set_meta`], flag `GSO`) and cutting it into
//! segments where it must be ([`segment_chain`], the `gso-segment` node). Safe code on byte
//! slices and buffer views; nothing here panics on any input.

use sluice_buffer::{flags, BufIdx, BufferCache, BufferHeader, BufferPool};
use sluice_wire::checksum;
use std::net::{Ipv4Addr, Ipv6Addr};

const ET_VLAN: u16 = 0x8100;
const ET_QINQ: u16 = 0x88a8;
const ET_IPV4: u16 = 0x0800;
const ET_IPV6: u16 = 0x86dd;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

/// The 4-byte 802.1Q header (TPID, TCI) for a tag the kernel reported.
pub fn vlan_header(tpid: Option<u16>, tci: u16) -> [u8; 4] {
    let t = tpid.filter(|&t| t != 0).unwrap_or(ET_VLAN).to_be_bytes();
    let c = tci.to_be_bytes();
    [t[0], t[1], c[0], c[1]]
}

/// Copies `pkt` into `dst`, inserting `tag` after the two MAC addresses when given (and the
/// frame has them). Returns the bytes written, at most `dst.len()`.
pub fn copy_frame(dst: &mut [u8], pkt: &[u8], tag: Option<[u8; 4]>) -> usize {
    match tag {
        Some(t) if pkt.len() >= 12 => {
            let total = (pkt.len() + 4).min(dst.len());
            let mut w = 0;
            for piece in [&pkt[..12], &t[..], &pkt[12..]] {
                let n = piece.len().min(total - w);
                dst[w..w + n].copy_from_slice(&piece[..n]);
                w += n;
            }
            w
        }
        _ => {
            let n = pkt.len().min(dst.len());
            dst[..n].copy_from_slice(&pkt[..n]);
            n
        }
    }
}

/// Like [`copy_frame`] for a frame that may not fit `dst` (at least 16 bytes): returns the
/// bytes written and the part of `pkt` left to copy after them (empty when it fitted), so
/// a driver copies a large frame into a buffer chain without assembling it first.
pub fn copy_frame_head<'p>(
    dst: &mut [u8],
    pkt: &'p [u8],
    tag: Option<[u8; 4]>,
) -> (usize, &'p [u8]) {
    debug_assert!(dst.len() >= 16, "the head must hold the tag's bytes");
    let n = copy_frame(dst, pkt, tag);
    let inserted = if tag.is_some() && pkt.len() >= 12 {
        n.saturating_sub(12).min(4)
    } else {
        0
    };
    (n, pkt.get(n - inserted..).unwrap_or_default())
}

fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]))
}

/// Completes the TCP or UDP checksum of an Ethernet frame (up to two VLAN tags, IPv4 or
/// IPv6 with hop-by-hop / routing / destination-options headers) whose checksum the sender
/// left to "hardware" (`CHECKSUM_PARTIAL`): the field is recomputed from scratch over the
/// pseudo-header and the L4 segment (RFC 768, RFC 793 §3.1, RFC 8200 §8.1). Returns whether
/// the frame was a TCP/UDP packet it could complete; other frames are left unchanged.
pub fn complete_l4_checksum(f: &mut [u8]) -> bool {
    let mut off = 12;
    let mut et = match be16(f, off) {
        Some(e) => e,
        None => return false,
    };
    for _ in 0..2 {
        if et != ET_VLAN && et != ET_QINQ {
            break;
        }
        off += 4;
        et = match be16(f, off) {
            Some(e) => e,
            None => return false,
        };
    }
    let l3 = off + 2;
    match et {
        ET_IPV4 => complete_v4(f, l3),
        ET_IPV6 => complete_v6(f, l3),
        _ => false,
    }
}

/// Completes a partial checksum where the sender said it is (`virtio_net_hdr` with
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`): the one's-complement sum of the bytes from `start` to
/// the end of the frame, whose field at `start + offset` already holds the pseudo-header
/// seed, is folded and stored there. This is exact for encapsulated packets (the inner TCP
/// of a VXLAN packet), which [`complete_l4_checksum`] cannot know from the headers alone.
/// Returns false (frame unchanged) when the positions do not fit the frame.
pub fn complete_partial_checksum(f: &mut [u8], start: usize, offset: usize) -> bool {
    complete_partial_checksum_split(f, &mut [], start, offset)
}

/// [`complete_partial_checksum`] over a frame held in two pieces, `head` then `tail` (a
/// frame larger than one buffer, its rest still in a read buffer), without joining them:
/// the tail's sum is byte-swapped when it starts at an odd offset from `start` (RFC 1071
/// §2 (B)); the field may lie in either piece or across them. `start` is within `head`.
pub fn complete_partial_checksum_split(
    head: &mut [u8],
    tail: &mut [u8],
    start: usize,
    offset: usize,
) -> bool {
    let Some(at) = start.checked_add(offset) else {
        return false;
    };
    let len = head.len() + tail.len();
    if at.checked_add(2).is_none_or(|end| end > len) || start >= head.len() {
        return false;
    }
    let head_sum = checksum::sum(&head[start..]);
    let tail_sum = checksum::sum(tail);
    let tail_sum = if (head.len() - start) % 2 == 1 {
        tail_sum.swap_bytes()
    } else {
        tail_sum
    };
    let mut c = !checksum::combine(head_sum, tail_sum);
    if c == 0 {
        // A computed zero is sent as all ones (RFC 768; harmless for TCP, RFC 1624).
        c = 0xffff;
    }
    for (i, byte) in c.to_be_bytes().into_iter().enumerate() {
        match head.get_mut(at + i) {
            Some(h) => *h = byte,
            None => tail[at + i - head.len()] = byte,
        }
    }
    true
}

fn complete_v4(f: &mut [u8], l3: usize) -> bool {
    let Some(h) = f.get(l3..l3 + 20) else {
        return false;
    };
    if h[0] >> 4 != 4 {
        return false;
    }
    let ihl = (h[0] & 0xf) as usize * 4;
    let total = u16::from_be_bytes([h[2], h[3]]) as usize;
    let frag = u16::from_be_bytes([h[6], h[7]]);
    if ihl < 20 || total < ihl || frag & 0x3fff != 0 {
        return false; // malformed, or a fragment: no complete L4 segment here
    }
    let proto = h[9];
    let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
    let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
    let (l4, end) = (l3 + ihl, l3 + total);
    if end > f.len() {
        return false;
    }
    let l4len = end - l4;
    let Ok(len16) = u16::try_from(l4len) else {
        return false;
    };
    let pseudo = checksum::pseudo_header_v4(src, dst, proto, len16);
    complete_l4(&mut f[l4..end], proto, pseudo)
}

fn complete_v6(f: &mut [u8], l3: usize) -> bool {
    let Some(h) = f.get(l3..l3 + 40) else {
        return false;
    };
    if h[0] >> 4 != 6 {
        return false;
    }
    let payload = u16::from_be_bytes([h[4], h[5]]) as usize;
    let mut nh = h[6];
    let mut s = [0u8; 16];
    let mut d = [0u8; 16];
    s.copy_from_slice(&h[8..24]);
    d.copy_from_slice(&h[24..40]);
    let end = l3 + 40 + payload;
    if end > f.len() {
        return false;
    }
    let mut p = l3 + 40;
    for _ in 0..8 {
        match nh {
            0 | 43 | 60 => {
                let (Some(&next), Some(&len)) = (f.get(p), f.get(p + 1)) else {
                    return false;
                };
                nh = next;
                p += (len as usize + 1) * 8;
                if p > end {
                    return false;
                }
            }
            _ => break,
        }
    }
    let l4len = end - p;
    let pseudo = sluice_wire::ipv6::pseudo_header_sum(
        Ipv6Addr::from(s),
        Ipv6Addr::from(d),
        nh,
        l4len as u32,
    );
    complete_l4(&mut f[p..end], nh, pseudo)
}

fn complete_l4(seg: &mut [u8], proto: u8, pseudo: u16) -> bool {
    let at = match proto {
        PROTO_TCP if seg.len() >= 20 => 16,
        PROTO_UDP if seg.len() >= 8 => 6,
        _ => return false,
    };
    seg[at] = 0;
    seg[at + 1] = 0;
    let mut c = !checksum::combine(pseudo, checksum::sum(seg));
    if proto == PROTO_UDP && c == 0 {
        c = 0xffff; // RFC 768: a computed zero is sent as all ones
    }
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// `virtio_net_hdr.gso_type` values (the kernel's GSO kinds as packet sockets report them).
pub mod gso_type {
    /// Not a GSO packet.
    pub const NONE: u8 = 0;
    /// TCP over IPv4.
    pub const TCPV4: u8 = 1;
    /// TCP over IPv6.
    pub const TCPV6: u8 = 4;
    /// UDP segmentation (UDP_SEGMENT / USO).
    pub const UDP_L4: u8 = 5;
    /// Flag: ECN (CWR) on the first segment.
    pub const ECN: u8 = 0x80;
}

/// Where the headers of a GSO aggregate are, parsed from the packet itself (the lengths in
/// the virtio header are not trusted).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Gso {
    l3: usize,
    l4: usize,
    hdr_len: usize,
    mss: usize,
    v6: bool,
    tcp: bool,
    kind: u8,
    total: usize,
}

impl Gso {
    /// Parses an Ethernet frame that the kernel reported as a GSO aggregate of `kind`
    /// with segment size `mss`. `None` when it is not a TCP or UDP packet we can cut.
    pub fn parse(f: &[u8], kind: u8, mss: u16) -> Option<Gso> {
        Gso::parse_head(f, f.len(), kind, mss)
    }

    /// [`Gso::parse`] of a frame of `total` bytes of which `head` holds the first ones (at
    /// least every header: the first buffer of a chain).
    pub fn parse_head(head: &[u8], total: usize, kind: u8, mss: u16) -> Option<Gso> {
        let f = head;
        let ecn = kind & gso_type::ECN;
        let kind = kind & !gso_type::ECN;
        let mss = mss as usize;
        if mss == 0 {
            return None;
        }
        let mut et = be16(f, 12)?;
        let mut off = 12;
        for _ in 0..2 {
            if et != ET_VLAN && et != ET_QINQ {
                break;
            }
            off += 4;
            et = be16(f, off)?;
        }
        let l3 = off + 2;
        let (v6, proto, l4) = match et {
            ET_IPV4 => {
                let h = f.get(l3..l3 + 20)?;
                let ihl = (h[0] & 0xf) as usize * 4;
                if h[0] >> 4 != 4 || ihl < 20 || u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0 {
                    return None;
                }
                (false, h[9], l3 + ihl)
            }
            ET_IPV6 => {
                let h = f.get(l3..l3 + 40)?;
                if h[0] >> 4 != 6 {
                    return None;
                }
                (true, h[6], l3 + 40) // extension headers: not cut (rare on GSO)
            }
            _ => return None,
        };
        let tcp = match (kind, proto) {
            (gso_type::TCPV4, PROTO_TCP) if !v6 => true,
            (gso_type::TCPV6, PROTO_TCP) if v6 => true,
            (gso_type::UDP_L4, PROTO_UDP) => false,
            _ => return None,
        };
        let l4h = if tcp {
            let doff = (*f.get(l4 + 12)? >> 4) as usize * 4;
            if doff < 20 {
                return None;
            }
            doff
        } else {
            8
        };
        let hdr_len = l4 + l4h;
        if hdr_len > f.len() || hdr_len > total {
            return None;
        }
        Some(Gso {
            l3,
            l4,
            hdr_len,
            mss,
            v6,
            tcp,
            kind: kind | ecn,
            total,
        })
    }

    /// Number of segments the aggregate is cut into.
    pub fn segments(&self) -> usize {
        (self.total - self.hdr_len).div_ceil(self.mss).max(1)
    }

    /// Bytes segment `i` needs (headers + its payload).
    pub fn segment_len(&self, i: usize) -> usize {
        let payload = self.total - self.hdr_len;
        let start = (i * self.mss).min(payload);
        self.hdr_len + (payload - start).min(self.mss)
    }

    /// Bytes of headers (L2 to L4) in front of every segment.
    pub fn hdr_len(&self) -> usize {
        self.hdr_len
    }

    /// Offset of the L3 header in the frame.
    pub fn l3(&self) -> usize {
        self.l3
    }

    /// Offset of the L4 header in the frame.
    pub fn l4(&self) -> usize {
        self.l4
    }

    /// Offset of the L4 checksum field from the L4 header.
    pub fn csum_offset(&self) -> usize {
        if self.tcp {
            16
        } else {
            6
        }
    }

    /// Stores the aggregate's description in its buffer header (`flags::GSO` and
    /// `OFFLOAD_L4_CKSUM`, the `gso_*` fields), relative to the L3 header. The partial
    /// checksum's position is not stored: [`vnet_hdr`] and [`segment_chain`] parse it from
    /// the packet ([`Gso::csum_offset`]).
    pub fn set_meta(&self, h: &mut BufferHeader) {
        h.flags |= flags::GSO | flags::OFFLOAD_L4_CKSUM;
        h.gso_size = self.mss as u16;
        h.gso_type = self.kind;
        h.gso_l4_offset = (self.l4 - self.l3) as u8;
        h.gso_l4_hdr_len = (self.hdr_len - self.l4) as u8;
    }

    /// Writes segment `i` of the frame `f` into `dst` (see [`Gso::write_segment_from`]).
    pub fn write_segment(&self, f: &[u8], i: usize, dst: &mut [u8]) -> usize {
        if f.len() < self.total {
            return 0;
        }
        self.write_segment_from(f, i, dst, |at, d| d.copy_from_slice(&f[at..at + d.len()]))
    }

    /// Writes segment `i` into `dst` (at least [`Gso::segment_len`] bytes) from `head` (at
    /// least the headers) and `payload(at, dst)`, which fills `dst` with the frame's bytes
    /// from offset `at`. The segment gets its IP length, IPv4 id and header checksum, TCP
    /// sequence number and flags (FIN/PSH only on the last segment, CWR only on the first)
    /// or UDP length, and a full L4 checksum. Returns the segment's length, 0 if `dst` is
    /// too small.
    pub fn write_segment_from(
        &self,
        head: &[u8],
        i: usize,
        dst: &mut [u8],
        payload: impl FnOnce(usize, &mut [u8]),
    ) -> usize {
        let n = self.segment_len(i);
        let h = self.hdr_len;
        let (Some(d), Some(hdr)) = (dst.get_mut(..n), head.get(..h)) else {
            return 0;
        };
        d[..h].copy_from_slice(hdr);
        let start = h + (i * self.mss).min(self.total - h);
        payload(start, &mut d[h..]);
        let last = i + 1 == self.segments();
        let l4len = n - self.l4;
        if self.v6 {
            let pl = (n - self.l3 - 40) as u16;
            d[self.l3 + 4..self.l3 + 6].copy_from_slice(&pl.to_be_bytes());
        } else {
            let tot = (n - self.l3) as u16;
            d[self.l3 + 2..self.l3 + 4].copy_from_slice(&tot.to_be_bytes());
            let id = u16::from_be_bytes([d[self.l3 + 4], d[self.l3 + 5]]).wrapping_add(i as u16);
            d[self.l3 + 4..self.l3 + 6].copy_from_slice(&id.to_be_bytes());
            d[self.l3 + 10] = 0;
            d[self.l3 + 11] = 0;
            let ihl = self.l4 - self.l3;
            let c = checksum::internet_checksum(&d[self.l3..self.l3 + ihl]);
            d[self.l3 + 10..self.l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
        let t = self.l4;
        if self.tcp {
            let seq = u32::from_be_bytes([d[t + 4], d[t + 5], d[t + 6], d[t + 7]])
                .wrapping_add((i * self.mss) as u32);
            d[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
            if !last {
                d[t + 13] &= !0x09; // FIN, PSH
            }
            if i > 0 {
                d[t + 13] &= !0x80; // CWR
            }
        } else {
            d[t + 4..t + 6].copy_from_slice(&(l4len as u16).to_be_bytes());
        }
        let proto = if self.tcp { PROTO_TCP } else { PROTO_UDP };
        let pseudo = if self.v6 {
            let mut s = [0u8; 16];
            let mut ds = [0u8; 16];
            s.copy_from_slice(&d[self.l3 + 8..self.l3 + 24]);
            ds.copy_from_slice(&d[self.l3 + 24..self.l3 + 40]);
            sluice_wire::ipv6::pseudo_header_sum(
                Ipv6Addr::from(s),
                Ipv6Addr::from(ds),
                proto,
                l4len as u32,
            )
        } else {
            let a = &d[self.l3 + 12..self.l3 + 20];
            checksum::pseudo_header_v4(
                Ipv4Addr::new(a[0], a[1], a[2], a[3]),
                Ipv4Addr::new(a[4], a[5], a[6], a[7]),
                proto,
                l4len as u16,
            )
        };
        complete_l4(&mut d[t..n], proto, pseudo);
        n
    }
}

/// The length an MTU check at the L3 header applies to: `len`, or for a GSO aggregate
/// (flag `GSO`) the IP length of its largest segment, so a router decides ICMP
/// frag-needed / packet-too-big by segment size as if the segments had arrived one by one.
#[inline]
pub fn mtu_len(h: &BufferHeader, len: usize) -> usize {
    if h.flags & flags::GSO != 0 {
        h.gso_l4_offset as usize + h.gso_l4_hdr_len as usize + h.gso_size as usize
    } else {
        len
    }
}

/// Size of `struct virtio_net_hdr` (no `num_buffers`), in front of every frame a
/// `PACKET_VNET_HDR` socket or an `IFF_VNET_HDR` tap exchanges.
pub const VNET_HDR_LEN: usize = 10;

/// `virtio_net_hdr.flags`: the L4 checksum is partial, at `csum_start + csum_offset`.
pub const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;

/// The `virtio_net_hdr` (host byte order, as Linux's packet sockets and taps use it) that
/// hands the packet with header `h` and first bytes `head` (from its Ethernet header) to the
/// kernel: for a GSO aggregate its kind, segment size, header length and partial checksum
/// position, so the kernel (or the NIC) cuts it; all zero for other packets. `None` for an
/// aggregate whose headers do not parse as its metadata says (to be dropped).
pub fn vnet_hdr(h: &BufferHeader, head: &[u8]) -> Option<[u8; VNET_HDR_LEN]> {
    let mut v = [0u8; VNET_HDR_LEN];
    if h.flags & flags::GSO == 0 {
        return Some(v);
    }
    let g = Gso::parse_head(head, h.total_len(), h.gso_type, h.gso_size)?;
    v[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    v[1] = g.kind;
    v[2..4].copy_from_slice(&(g.hdr_len as u16).to_ne_bytes());
    v[4..6].copy_from_slice(&(g.mss as u16).to_ne_bytes());
    v[6..8].copy_from_slice(&(g.l4 as u16).to_ne_bytes());
    v[8..10].copy_from_slice(&(g.csum_offset() as u16).to_ne_bytes());
    Some(v)
}

/// The fields of a received `struct virtio_net_hdr` (host byte order) the drivers use.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `VIRTIO_NET_HDR_F_*`.
    pub flags: u8,
    /// [`gso_type`] (with its `ECN` bit).
    pub gso_type: u8,
    /// Segment size of an aggregate.
    pub gso_size: u16,
    /// Where the partially summed bytes start (from the Ethernet header).
    pub csum_start: u16,
    /// The checksum field's offset from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Reads the header from the first [`VNET_HDR_LEN`] bytes of `b` (missing bytes: 0).
    pub fn parse(b: &[u8]) -> VnetHdr {
        let u16_at = |at: usize| {
            u16::from_ne_bytes([
                b.get(at).copied().unwrap_or(0),
                b.get(at + 1).copied().unwrap_or(0),
            ])
        };
        VnetHdr {
            flags: b.first().copied().unwrap_or(0),
            gso_type: b.get(1).copied().unwrap_or(0),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        }
    }

    /// Whether it describes a GSO aggregate.
    pub fn is_gso(&self) -> bool {
        self.gso_type & !gso_type::ECN != gso_type::NONE
    }

    /// Where the kernel left a partial checksum (start of the summed bytes, offset of the
    /// field from there), when it says so.
    pub fn partial_csum(&self) -> Option<(usize, usize)> {
        (self.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0)
            .then_some((self.csum_start as usize, self.csum_offset as usize))
    }
}

/// Most segments [`segment_chain`] cuts in one call (64 KiB at an MSS of 512); an aggregate
/// of more is cut in rounds.
pub const MAX_SEGMENTS: usize = 128;

/// Most segments one GSO aggregate is cut into (64 KiB at an MSS of 64): bounds the
/// buffers one aggregate takes.
pub const MAX_TOTAL_SEGMENTS: usize = 1024;

/// One round of [`segment_chain`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Segments written to `out`.
    pub n: usize,
    /// The last round: the aggregate was freed.
    pub done: bool,
}

/// Why [`segment_chain`] did not cut an aggregate.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SegmentError {
    /// Not TCP/UDP over IPv4/IPv6 as its metadata says, or segments too large for a buffer
    /// or more than [`MAX_TOTAL_SEGMENTS`].
    NotCuttable,
    /// The pool has no buffers for the segments.
    NoBuffers,
}

/// Reads a buffer chain's bytes forward from any offset (segments are cut in order).
struct ChainReader<'a> {
    pool: &'a BufferPool,
    cur: Option<BufIdx>,
    /// Frame offset of the first byte of `cur`.
    base: usize,
}

impl ChainReader<'_> {
    /// Fills `dst` with the frame's bytes from offset `at` (never behind the last read);
    /// bytes past the chain's end are left as they are.
    fn read(&mut self, mut at: usize, dst: &mut [u8]) {
        let mut w = 0;
        while let (Some(b), true) = (self.cur, w < dst.len()) {
            // SAFETY: the caller owns the chain; one short-lived view at a time.
            let v = unsafe { self.pool.buffer(b) };
            let d = v.data();
            if at >= self.base + d.len() {
                self.base += d.len();
                self.cur = v.hdr.next();
                continue;
            }
            let from = at - self.base;
            let n = (d.len() - from).min(dst.len() - w);
            dst[w..w + n].copy_from_slice(&d[from..from + n]);
            w += n;
            at += n;
        }
    }
}

/// Cuts segments `first..` (at most [`MAX_SEGMENTS`]) of the GSO aggregate `b` (flag `GSO`,
/// any chain) into single-buffer segments written to `out`, each carrying the aggregate's metadata (interfaces, L2/IP/feature metadata; the
/// first one its trace) without the GSO and chain flags, with complete checksums. The
/// aggregate's Ethernet header is `rewind` bytes before its data (0: the data starts there;
/// the L3 header's offset from it for a packet past ethernet-input), and so are the
/// segments' (`l2_hdr_offset` 0, data at `rewind`). Returns how many were written and
/// whether they were the last ones: then `b` is freed; else the caller calls again with
/// `first` advanced by that many. On error nothing was allocated in this call (segments of
/// earlier calls stay the caller's) and `b` is left to the caller as it was (its data still
/// `rewind` bytes past the Ethernet header).
pub fn segment_chain(
    cache: &mut BufferCache,
    b: BufIdx,
    rewind: usize,
    first: usize,
    out: &mut [BufIdx; MAX_SEGMENTS],
) -> Result<Cut, SegmentError> {
    let pool = cache.pool().clone();
    let mut head = [0u8; 256];
    let (agg, hn) = {
        // SAFETY: the caller owns the chain; the view is dropped at the end of the block.
        let mut v = unsafe { pool.buffer(b) };
        if v.push_front(rewind).is_none() {
            return Err(SegmentError::NotCuttable);
        }
        let d = v.data();
        let n = d.len().min(head.len());
        head[..n].copy_from_slice(&d[..n]);
        (*v.hdr, n)
    };
    let Some(g) =
        Gso::parse_head(&head[..hn], agg.total_len(), agg.gso_type, agg.gso_size).filter(|g| {
            first < g.segments()
                && g.segments() <= MAX_TOTAL_SEGMENTS
                && g.segment_len(0) <= pool.data_size()
        })
    else {
        // SAFETY: as above; undoes the push_front.
        unsafe { pool.buffer(b) }.advance(rewind);
        return Err(SegmentError::NotCuttable);
    };
    let nseg = (g.segments() - first).min(MAX_SEGMENTS);
    let got = cache.alloc(&mut out[..nseg]);
    if got < nseg {
        cache.free(&out[..got]);
        // SAFETY: as above; undoes the push_front.
        unsafe { pool.buffer(b) }.advance(rewind);
        return Err(SegmentError::NoBuffers);
    }
    let mut rd = ChainReader {
        pool: &pool,
        cur: Some(b),
        base: 0,
    };
    let strip = flags::GSO
        | flags::OFFLOAD_L4_CKSUM
        | flags::NEXT_PRESENT
        | flags::TOTAL_LENGTH_VALID
        | flags::TRACED;
    for (k, &s) in out[..nseg].iter().enumerate() {
        let i = first + k;
        // SAFETY: freshly allocated here, not yet handed on; one view.
        let mut v = unsafe { pool.buffer(s) };
        let pool_index = v.hdr.pool_index;
        *v.hdr = agg;
        v.hdr.pool_index = pool_index;
        v.hdr.current_data = 0;
        v.hdr.next_buffer = 0;
        v.hdr.total_length_not_including_first_buffer = 0;
        v.hdr.flags &= !strip;
        if i == 0 {
            v.hdr.flags |= agg.flags & flags::TRACED;
        }
        v.hdr.gso_size = 0;
        let n = g.write_segment_from(&head[..hn], i, v.raw_data_mut(), |at, d| rd.read(at, d));
        v.set_len(n);
        if rewind > 0 {
            v.hdr.l2.l2_hdr_offset = 0;
            v.advance(rewind);
        }
    }
    let done = first + nseg == g.segments();
    if done {
        cache.free(&[b]);
    } else {
        // SAFETY: as above; undoes the push_front for the next round.
        unsafe { pool.buffer(b) }.advance(rewind);
    }
    Ok(Cut { n: nseg, done })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip4_udp(payload: &[u8], vlan: bool) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let total = 20 + 8 + payload.len();
        let mut ip = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0x40,
            0,
            64,
            17,
            0,
            0,
            10,
            0,
            0,
            1,
            10,
            0,
            0,
            2,
        ];
        let c = checksum::internet_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        let ul = 8 + payload.len();
        f.extend_from_slice(&[
            0x30,
            0x39,
            0x00,
            0x35,
            (ul >> 8) as u8,
            ul as u8,
            0xaa,
            0xbb,
        ]);
        f.extend_from_slice(payload);
        f
    }

    /// Verifies an L4 checksum by summing pseudo-header + segment: all ones when correct.
    fn udp4_ok(f: &[u8], l3: usize) -> bool {
        let seg = &f[l3 + 20..];
        let p = checksum::pseudo_header_v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            17,
            seg.len() as u16,
        );
        checksum::combine(p, checksum::sum(seg)) == 0xffff
    }

    #[test]
    fn completes_ipv4_udp_plain_and_tagged() {
        for vlan in [false, true] {
            let mut f = ip4_udp(b"hello, sluice", vlan);
            let l3 = if vlan { 18 } else { 14 };
            assert!(!udp4_ok(&f, l3));
            assert!(complete_l4_checksum(&mut f));
            assert!(udp4_ok(&f, l3), "vlan {vlan}");
        }
    }

    #[test]
    fn completes_ipv6_tcp_behind_hop_by_hop() {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xdd];
        let tcp_len = 20 + 5;
        let payload = 8 + tcp_len;
        f.extend_from_slice(&[0x60, 0, 0, 0, 0, payload as u8, 0, 64]);
        let src = [0xfdu8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let dst = [0xfdu8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop: next TCP, PadN
        let mut tcp = vec![0u8; 20];
        tcp[12] = 0x50;
        tcp[16] = 0x12; // garbage "partial" checksum
        tcp.extend_from_slice(b"abcde");
        f.extend_from_slice(&tcp);
        assert!(complete_l4_checksum(&mut f));
        let seg = &f[14 + 40 + 8..];
        let p = sluice_wire::ipv6::pseudo_header_sum(
            Ipv6Addr::from(src),
            Ipv6Addr::from(dst),
            6,
            seg.len() as u32,
        );
        assert_eq!(checksum::combine(p, checksum::sum(seg)), 0xffff);
    }

    #[test]
    fn leaves_other_frames_alone_and_never_panics() {
        let mut arp = vec![0xffu8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        let before = arp.clone();
        assert!(!complete_l4_checksum(&mut arp));
        assert_eq!(arp, before);
        // Every truncation of a valid frame, and lying length fields.
        let f = ip4_udp(b"payload", true);
        for n in 0..f.len() {
            let mut t = f[..n].to_vec();
            let _ = complete_l4_checksum(&mut t);
        }
        let mut lie = f.clone();
        lie[18 + 2] = 0xff; // IPv4 total length far beyond the frame
        assert!(!complete_l4_checksum(&mut lie));
        let mut frag = ip4_udp(b"x", false);
        frag[14 + 6] = 0x20; // MF set
        assert!(!complete_l4_checksum(&mut frag));
    }

    #[test]
    fn completes_the_inner_tcp_of_a_vxlan_packet_where_the_kernel_says() {
        // Outer Ethernet/IPv4/UDP (checksum 0, as Linux VXLAN sends) + VXLAN + inner
        // Ethernet/IPv4/TCP whose checksum field holds only the pseudo-header seed.
        let mut inner = vec![0x02, 0, 0, 0, 0, 3, 0x02, 0, 0, 0, 0, 4, 0x08, 0x00];
        let tcp_len = 20 + 6;
        let mut ip = vec![
            0x45,
            0,
            0,
            (20 + tcp_len) as u8,
            0,
            0,
            0x40,
            0,
            64,
            6,
            0,
            0,
            192,
            168,
            1,
            1,
            192,
            168,
            1,
            2,
        ];
        let c = checksum::internet_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        inner.extend_from_slice(&ip);
        let seed = checksum::pseudo_header_v4(
            Ipv4Addr::new(192, 168, 1, 1),
            Ipv4Addr::new(192, 168, 1, 2),
            6,
            tcp_len as u16,
        );
        let mut tcp = vec![0u8; 20];
        tcp[12] = 0x50;
        tcp[16..18].copy_from_slice(&seed.to_be_bytes());
        tcp.extend_from_slice(b"vxlan!");
        inner.extend_from_slice(&tcp);
        let mut vx = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
        vx.extend_from_slice(&inner);
        let mut f = ip4_udp(&vx, false);
        f[14 + 20 + 6] = 0; // outer UDP checksum 0
        f[14 + 20 + 7] = 0;
        let outer_before = f[..14 + 20 + 8].to_vec();
        let tcp_at = 14 + 20 + 8 + 8 + 14 + 20;
        assert!(complete_partial_checksum(&mut f, tcp_at, 16));
        assert_eq!(&f[..14 + 20 + 8], &outer_before[..], "outer UDP left alone");
        let seg = &f[tcp_at..];
        assert_eq!(checksum::combine(seed, checksum::sum(seg)), 0xffff);
        // Positions beyond the frame are refused, never a panic.
        let n = f.len();
        assert!(!complete_partial_checksum(&mut f, n, 0));
        assert!(!complete_partial_checksum(&mut f, n - 1, 16));
        assert!(!complete_partial_checksum(&mut f, usize::MAX, 16));
    }

    #[test]
    fn partial_checksum_over_two_pieces_equals_one_piece() {
        // Every split point (odd and even, the field in the head, across, in the tail) gives
        // the bytes the one-piece completion gives.
        let mut whole: Vec<u8> = (0..301u32).map(|i| (i * 7 + 3) as u8).collect();
        let (start, off) = (40, 16);
        whole[start + off..start + off + 2].copy_from_slice(&0x1234u16.to_be_bytes());
        let mut want = whole.clone();
        assert!(complete_partial_checksum(&mut want, start, off));
        for cut in start + 1..whole.len() {
            let mut f = whole.clone();
            let (h, t) = f.split_at_mut(cut);
            assert!(
                complete_partial_checksum_split(h, t, start, off),
                "cut {cut}"
            );
            assert_eq!(f, want, "cut {cut}");
        }
        // Positions beyond the frame, or a start in the tail, are refused unchanged.
        let mut f = whole.clone();
        let (h, t) = f.split_at_mut(100);
        assert!(!complete_partial_checksum_split(h, t, 100, 0));
        assert!(!complete_partial_checksum_split(h, t, 40, 260));
        assert!(!complete_partial_checksum_split(h, t, 40, usize::MAX));
        assert_eq!(f, whole);
    }

    #[test]
    fn vlan_reinsertion() {
        let pkt: Vec<u8> = (0u8..20).collect();
        let mut out = [0u8; 64];
        let n = copy_frame(&mut out, &pkt, Some(vlan_header(None, 0x0064)));
        assert_eq!(n, 24);
        assert_eq!(&out[..12], &pkt[..12]);
        assert_eq!(&out[12..16], &[0x81, 0x00, 0x00, 0x64]);
        assert_eq!(&out[16..24], &pkt[12..]);
        assert_eq!(vlan_header(Some(0x88a8), 5), [0x88, 0xa8, 0, 5]);
        // Destination too small: truncated, no panic.
        let mut small = [0u8; 14];
        assert_eq!(copy_frame(&mut small, &pkt, Some([1, 2, 3, 4])), 14);
        assert_eq!(copy_frame(&mut small, &pkt, None), 14);
        // Runt: no tag inserted.
        assert_eq!(copy_frame(&mut out, &pkt[..6], Some([1, 2, 3, 4])), 6);
    }

    #[test]
    fn frame_head_and_rest_make_the_frame() {
        let pkt: Vec<u8> = (0..100u8).collect();
        for tag in [None, Some(vlan_header(None, 0x0064))] {
            let mut want = vec![0u8; 104];
            let n = copy_frame(&mut want, &pkt, tag);
            want.truncate(n);
            for size in [16, 17, 40, n - 1, n, 200] {
                let mut head = vec![0u8; size];
                let (w, rest) = copy_frame_head(&mut head, &pkt, tag);
                assert_eq!(w, size.min(n), "{tag:?} {size}");
                let mut got = head[..w].to_vec();
                got.extend_from_slice(rest);
                assert_eq!(got, want, "{tag:?} {size}");
            }
        }
    }
    #[test]
    fn gso_tcp4_is_cut_into_valid_segments() {
        // 14 + 20 + 20 header bytes, 3000 bytes of payload, MSS 1400: 1400 + 1400 + 200.
        let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
        let total = 40 + payload.len();
        f.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0x12,
            0x34,
            0x40,
            0,
            64,
            6,
            0,
            0,
            10,
            0,
            0,
            1,
            10,
            0,
            0,
            2,
        ]);
        let mut tcp = vec![0u8; 20];
        tcp[0..4].copy_from_slice(&[0x30, 0x39, 0x14, 0x51]);
        tcp[4..8].copy_from_slice(&0xffff_fc00u32.to_be_bytes()); // wraps during the cut
        tcp[12] = 0x50;
        tcp[13] = 0x80 | 0x10 | 0x08 | 0x01; // CWR ACK PSH FIN
        f.extend_from_slice(&tcp);
        f.extend_from_slice(&payload);
        let g = Gso::parse(&f, gso_type::TCPV4 | gso_type::ECN, 1400).unwrap();
        assert_eq!(g.segments(), 3);
        let mut got = Vec::new();
        for i in 0..3 {
            let mut d = [0u8; 2048];
            let n = g.write_segment(&f, i, &mut d);
            assert_eq!(n, g.segment_len(i));
            let s = &d[..n];
            // IPv4 header valid, lengths right, id incremented.
            assert_eq!(checksum::sum(&s[14..34]), 0xffff);
            assert_eq!(u16::from_be_bytes([s[16], s[17]]) as usize, n - 14);
            assert_eq!(u16::from_be_bytes([s[18], s[19]]), 0x1234 + i as u16);
            // TCP checksum valid, sequence advanced, flags.
            let seg = &s[34..];
            let p = checksum::pseudo_header_v4(
                Ipv4Addr::new(10, 0, 0, 1),
                Ipv4Addr::new(10, 0, 0, 2),
                6,
                seg.len() as u16,
            );
            assert_eq!(checksum::combine(p, checksum::sum(seg)), 0xffff);
            let seq = u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]]);
            assert_eq!(seq, 0xffff_fc00u32.wrapping_add(1400 * i as u32));
            let fl = seg[13];
            assert_eq!(fl & 0x80 != 0, i == 0, "CWR only first");
            assert_eq!(fl & 0x09 != 0, i == 2, "FIN/PSH only last");
            got.extend_from_slice(&seg[20..]);
        }
        assert_eq!(got, payload);
        // Too small a destination: nothing written, no panic.
        assert_eq!(g.write_segment(&f, 0, &mut [0u8; 100]), 0);
        // Not TCP/IPv4 as claimed, or garbage: refused.
        assert!(Gso::parse(&f, gso_type::TCPV6, 1400).is_none());
        assert!(Gso::parse(&f, gso_type::TCPV4, 0).is_none());
        for n in 0..60 {
            let _ = Gso::parse(&f[..n], gso_type::TCPV4, 1400);
        }
    }

    /// An Ethernet (optionally 802.1Q) / IPv4 or IPv6 / TCP (20-byte header) frame.
    fn tcp_frame(v6: bool, vlan: bool, payload: usize) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a]);
        }
        let l4 = 20 + payload;
        if v6 {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, (l4 >> 8) as u8, l4 as u8, 6, 64]);
            f.extend_from_slice(&[0xfd; 32]);
        } else {
            let t = 20 + l4;
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0, (t >> 8) as u8, t as u8, 0, 1, 0x40, 0]);
            f.extend_from_slice(&[64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        }
        let mut tcp = [0u8; 20];
        tcp[12] = 0x50;
        f.extend_from_slice(&tcp);
        f.extend(std::iter::repeat_n(0x5a, payload));
        f
    }

    /// `vnet_hdr` in host byte order: flags, gso_type (ECN kept), hdr_len, gso_size,
    /// csum_start (after any VLAN tag), csum_offset; zeros for a plain packet, `None` for
    /// an aggregate whose headers do not match its metadata.
    #[test]
    fn vnet_hdr_describes_tcp4_tcp6_over_vlan_and_udp_aggregates() {
        let ne = |v: [u8; VNET_HDR_LEN]| {
            let w = |at: usize| u16::from_ne_bytes([v[at], v[at + 1]]);
            (v[0], v[1], w(2), w(4), w(6), w(8))
        };
        let cases = [
            (
                tcp_frame(false, false, 3000),
                gso_type::TCPV4 | gso_type::ECN,
                1448,
                (54, 34, 16),
            ),
            (
                tcp_frame(true, true, 3000),
                gso_type::TCPV6,
                1428,
                (78, 58, 16),
            ),
            (
                ip4_udp(&[7u8; 3000], false),
                gso_type::UDP_L4,
                1200,
                (42, 34, 6),
            ),
            (
                ip4_udp(&[7u8; 3000], true),
                gso_type::UDP_L4,
                1200,
                (46, 38, 6),
            ),
        ];
        for (f, kind, mss, (hdr_len, start, off)) in cases {
            let mut h = BufferHeader::TEMPLATE;
            h.current_length = f.len() as u16;
            Gso::parse(&f, kind, mss).expect("parses").set_meta(&mut h);
            let v = vnet_hdr(&h, &f).expect("an aggregate");
            assert_eq!(
                ne(v),
                (VIRTIO_NET_HDR_F_NEEDS_CSUM, kind, hdr_len, mss, start, off),
                "kind {kind:#x}"
            );
            // What a receiver reads back (VnetHdr, af_packet and tap rx).
            let r = VnetHdr::parse(&v);
            assert!(r.is_gso());
            assert_eq!((r.gso_type, r.gso_size), (kind, mss));
            assert_eq!(r.partial_csum(), Some((start as usize, off as usize)));
            // Head only (the first buffer of a chain), the total from the header.
            assert_eq!(vnet_hdr(&h, &f[..hdr_len as usize]), Some(v));
            // Metadata that lies about the kind: refused.
            h.gso_type = if kind & !gso_type::ECN == gso_type::TCPV6 {
                gso_type::TCPV4
            } else {
                gso_type::TCPV6
            };
            assert_eq!(vnet_hdr(&h, &f), None);
        }
        let f = tcp_frame(false, false, 100);
        let mut h = BufferHeader::TEMPLATE;
        h.current_length = f.len() as u16;
        assert_eq!(
            vnet_hdr(&h, &f),
            Some([0; VNET_HDR_LEN]),
            "not an aggregate"
        );
    }
}
