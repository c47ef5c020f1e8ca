//! What NAT44 reads from and writes to a packet: the 5-tuple of TCP, UDP and ICMP echo
//! packets, the packet an ICMP error quotes, and in-place rewrites with incrementally
//! updated checksums (RFC 1624, `sluice_wire::checksum::update_*`).
//!
//! Everything here works on the bytes of an IPv4 packet (`data[0]` is the IPv4 header) with
//! bounds-checked accesses: a short or malformed packet is reported as [`Bad`], never a
//! panic. ICMP echo requests carry their identifier in the source-port position of the
//! tuple (destination port 0), echo replies in the destination-port position, so that a
//! request and its reply have mirrored tuples like TCP and UDP.

use sluice_wire::checksum::{update_u16, update_u32};
use sluice_wire::ipv4::proto;

/// ICMP echo reply.
pub const ICMP_ECHO_REPLY: u8 = 0;
/// ICMP echo request.
pub const ICMP_ECHO_REQUEST: u8 = 8;

/// TCP flags NAT looks at.
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// A 5-tuple, host byte order.
#[derive(Copy, Clone, Debug, Default, Eq)]
pub struct Tuple {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// Source port (ICMP echo request: identifier).
    pub sport: u16,
    /// Destination port (ICMP echo reply: identifier).
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
}

/// Every field compared without a branch per field (a session's match tuple is compared
/// with each packet's): xor/or of the fields instead of the derived `&&` chain saved 4.2
/// instructions per packet in `nat44-ed-in2out` and 1.8 in `nat44-ed-out2in` (callgrind,
/// 1k sessions, docs/nat.md).
impl PartialEq for Tuple {
    #[inline(always)]
    fn eq(&self, o: &Tuple) -> bool {
        (self.src ^ o.src)
            | (self.dst ^ o.dst)
            | (self.sport ^ o.sport) as u32
            | (self.dport ^ o.dport) as u32
            | (self.proto ^ o.proto) as u32
            == 0
    }
}

impl Tuple {
    /// The tuple of a packet going the other way.
    #[inline(always)]
    pub fn reversed(self) -> Tuple {
        Tuple {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
        }
    }

    /// The port (or ICMP identifier) that names the destination side's session: the
    /// destination port, or the identifier of an ICMP echo.
    #[inline(always)]
    pub fn dst_port_or_id(self) -> u16 {
        if self.proto == proto::ICMP {
            self.sport | self.dport
        } else {
            self.dport
        }
    }

    /// The source side's port or ICMP identifier.
    #[inline(always)]
    pub fn src_port_or_id(self) -> u16 {
        if self.proto == proto::ICMP {
            self.sport | self.dport
        } else {
            self.sport
        }
    }
}

/// What a packet's L4 header is (the default, UDP, only fills unused slots).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum L4 {
    /// TCP, with its flags.
    Tcp(u8),
    /// UDP.
    #[default]
    Udp,
    /// ICMP echo request.
    EchoRequest,
    /// ICMP echo reply.
    EchoReply,
}

/// A packet NAT can translate.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// TCP, UDP or ICMP echo.
    Flow {
        /// Its tuple.
        t: Tuple,
        /// Offset of the L4 header.
        l4: usize,
        /// What the L4 header is.
        kind: L4,
    },
    /// An ICMP error quoting a TCP, UDP or ICMP echo packet.
    IcmpError {
        /// Outer source address.
        src: u32,
        /// Outer destination address.
        dst: u32,
        /// Offset of the ICMP header.
        icmp: usize,
        /// Offset of the quoted IPv4 header.
        inner_ip: usize,
        /// Offset of the quoted L4 header.
        inner_l4: usize,
        /// The quoted packet's tuple, as quoted.
        inner: Tuple,
        /// The quoted packet's L4 kind (TCP flags are 0: they may not be quoted).
        inner_kind: L4,
    },
}

/// Why a packet cannot be translated (each is a drop counter of the NAT nodes).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Bad {
    /// A fragment other than the first: it has no L4 header (see docs/nat.md).
    NonFirstFragment,
    /// The L4 header is shorter than its protocol's minimum.
    Truncated,
    /// An ICMP error whose quoted packet is truncated or not TCP/UDP/ICMP echo.
    BadIcmpError,
    /// ICMP other than echo and the error types.
    UnsupportedIcmp,
    /// An IP protocol other than TCP, UDP and ICMP.
    UnsupportedProto,
}

#[inline(always)]
fn be16(d: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(o)?, *d.get(o + 1)?]))
}

#[inline(always)]
fn be32(d: &[u8], o: usize) -> Option<u32> {
    let b = d.get(o..o + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Whether an ICMP type is an error message that quotes a packet (RFC 792: destination
/// unreachable, source quench, redirect, time exceeded, parameter problem).
#[inline(always)]
pub fn icmp_is_error(ty: u8) -> bool {
    matches!(ty, 3 | 4 | 5 | 11 | 12)
}

/// The IPv4 header's source and destination and whether the packet is a non-first
/// fragment. `None` if shorter than an IPv4 header (ip4-input checked it; kept safe).
#[inline(always)]
pub fn ip4_addrs(d: &[u8]) -> Option<(u32, u32)> {
    Some((be32(d, 12)?, be32(d, 16)?))
}

/// The first `N` bytes of the L4 header at `l4` (`Truncated` if the packet is shorter).
#[inline(always)]
fn l4_header<const N: usize>(d: &[u8], l4: usize) -> Result<&[u8; N], Bad> {
    d.get(l4..)
        .and_then(|r| r.first_chunk::<N>())
        .ok_or(Bad::Truncated)
}

/// What [`parse_flow`] leaves to [`parse`]: an ICMP error (its outer addresses and ICMP
/// offset), or why the packet cannot be translated.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NotFlow {
    /// An ICMP error message: [`parse`] reads the packet it quotes.
    IcmpError {
        /// Outer source address.
        src: u32,
        /// Outer destination address.
        dst: u32,
        /// Offset of the ICMP header.
        icmp: usize,
    },
    /// Not translatable.
    Bad(Bad),
}

impl From<Bad> for NotFlow {
    #[inline(always)]
    fn from(b: Bad) -> NotFlow {
        NotFlow::Bad(b)
    }
}

/// Parses a TCP, UDP or ICMP echo packet (`d[0]` is the IPv4 header): its tuple, L4 offset
/// and kind — the nodes' per-frame pass, which writes them straight into its candidate
/// list. Everything else is left to [`parse`].
#[inline(always)]
pub fn parse_flow(d: &[u8]) -> Result<(Tuple, usize, L4), NotFlow> {
    // The fixed IPv4 header as one array (ip4-input checked its length; kept safe): one
    // bounds check for every field.
    let h = d.first_chunk::<20>().ok_or(Bad::Truncated)?;
    let ihl = (h[0] as usize & 0x0f) * 4;
    if u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0 {
        return Err(Bad::NonFirstFragment.into());
    }
    let p = h[9];
    // Both addresses as one big-endian word, the ports (below) too: the flow digest's words
    // are these words (`session::Key`), which the compiler then takes as they are.
    let addrs = u64::from_be_bytes([h[12], h[13], h[14], h[15], h[16], h[17], h[18], h[19]]);
    let (src, dst) = ((addrs >> 32) as u32, addrs as u32);
    let l4 = ihl;
    if ihl < 20 {
        return Err(Bad::Truncated.into());
    }
    match p {
        // One bounds check per L4 header: its minimum length as a fixed array, every field
        // read from that.
        proto::TCP | proto::UDP => {
            let (l, kind) = if p == proto::TCP {
                let l = l4_header::<20>(d, l4)?;
                ([l[0], l[1], l[2], l[3]], L4::Tcp(l[13]))
            } else {
                let l = l4_header::<8>(d, l4)?;
                ([l[0], l[1], l[2], l[3]], L4::Udp)
            };
            let ports = u32::from_be_bytes(l);
            let t = Tuple {
                src,
                dst,
                sport: (ports >> 16) as u16,
                dport: ports as u16,
                proto: p,
            };
            Ok((t, l4, kind))
        }
        proto::ICMP => {
            let l = l4_header::<8>(d, l4)?;
            let ty = l[0];
            match ty {
                ICMP_ECHO_REQUEST | ICMP_ECHO_REPLY => {
                    let id = u16::from_be_bytes([l[4], l[5]]);
                    let req = ty == ICMP_ECHO_REQUEST;
                    let t = Tuple {
                        src,
                        dst,
                        sport: if req { id } else { 0 },
                        dport: if req { 0 } else { id },
                        proto: p,
                    };
                    let kind = if req { L4::EchoRequest } else { L4::EchoReply };
                    Ok((t, l4, kind))
                }
                t if icmp_is_error(t) => Err(NotFlow::IcmpError { src, dst, icmp: l4 }),
                _ => Err(Bad::UnsupportedIcmp.into()),
            }
        }
        _ => Err(Bad::UnsupportedProto.into()),
    }
}

/// Parses the L4 part of an IPv4 packet (`d[0]` is the IPv4 header).
pub fn parse(d: &[u8]) -> Result<Parsed, Bad> {
    match parse_flow(d) {
        Ok((t, l4, kind)) => Ok(Parsed::Flow { t, l4, kind }),
        Err(NotFlow::IcmpError { src, dst, icmp }) => parse_icmp_error(d, src, dst, icmp),
        Err(NotFlow::Bad(e)) => Err(e),
    }
}

fn parse_icmp_error(d: &[u8], src: u32, dst: u32, icmp: usize) -> Result<Parsed, Bad> {
    let inner_ip = icmp + 8;
    let vihl = *d.get(inner_ip).ok_or(Bad::BadIcmpError)?;
    let ihl = (vihl as usize & 0x0f) * 4;
    if vihl >> 4 != 4 || ihl < 20 {
        return Err(Bad::BadIcmpError);
    }
    let inner_l4 = inner_ip + ihl;
    // RFC 792: the quoted packet's header and at least 8 bytes of its payload.
    if d.len() < inner_l4 + 8 {
        return Err(Bad::BadIcmpError);
    }
    let frag = be16(d, inner_ip + 6).ok_or(Bad::BadIcmpError)?;
    if frag & 0x1fff != 0 {
        return Err(Bad::BadIcmpError);
    }
    let p = d[inner_ip + 9];
    let (isrc, idst) = ip4_addrs(&d[inner_ip..]).ok_or(Bad::BadIcmpError)?;
    let (sport, dport, kind) = match p {
        proto::TCP => (be16(d, inner_l4), be16(d, inner_l4 + 2), L4::Tcp(0)),
        proto::UDP => (be16(d, inner_l4), be16(d, inner_l4 + 2), L4::Udp),
        proto::ICMP => {
            let id = be16(d, inner_l4 + 4);
            match d[inner_l4] {
                ICMP_ECHO_REQUEST => (id, Some(0), L4::EchoRequest),
                ICMP_ECHO_REPLY => (Some(0), id, L4::EchoReply),
                _ => return Err(Bad::BadIcmpError),
            }
        }
        _ => return Err(Bad::BadIcmpError),
    };
    Ok(Parsed::IcmpError {
        src,
        dst,
        icmp,
        inner_ip,
        inner_l4,
        inner: Tuple {
            src: isrc,
            dst: idst,
            sport: sport.ok_or(Bad::BadIcmpError)?,
            dport: dport.ok_or(Bad::BadIcmpError)?,
            proto: p,
        },
        inner_kind: kind,
    })
}

#[inline(always)]
fn get16(d: &[u8], o: usize) -> u16 {
    be16(d, o).unwrap_or(0)
}

#[inline(always)]
fn put16(d: &mut [u8], o: usize, v: u16) {
    if let Some(b) = d.get_mut(o..o + 2) {
        b.copy_from_slice(&v.to_be_bytes());
    }
}

#[inline(always)]
fn put32(d: &mut [u8], o: usize, v: u32) {
    if let Some(b) = d.get_mut(o..o + 4) {
        b.copy_from_slice(&v.to_be_bytes());
    }
}

/// Rewrites the IPv4 header at `ip` to `src`/`dst` and updates its checksum; returns the
/// ones'-complement delta as (old, new) pairs applied, for callers that must carry it into
/// an enclosing checksum.
#[inline(always)]
fn rewrite_ip(d: &mut [u8], ip: usize, src: u32, dst: u32) -> (u32, u32, u16, u16) {
    let (os, od) = (be32(d, ip + 12).unwrap_or(0), be32(d, ip + 16).unwrap_or(0));
    let oc = get16(d, ip + 10);
    let mut c = oc;
    if os != src {
        c = update_u32(c, os, src);
        put32(d, ip + 12, src);
    }
    if od != dst {
        c = update_u32(c, od, dst);
        put32(d, ip + 16, dst);
    }
    put16(d, ip + 10, c);
    (os, od, oc, c)
}

/// The checksum changes of rewriting a packet with tuple `old` to tuple `new`: the RFC 1624
/// eqn. 3 terms of the changed words, summed and folded once per flow (a session keeps one
/// per flow), so a packet's translation only adds them.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Deltas {
    /// The IPv4 header checksum's (the addresses).
    ip: u16,
    /// The TCP/UDP checksum's (addresses of the pseudo-header and ports).
    l4: u16,
    /// Whether an address changes (the IPv4 header is left alone otherwise).
    addrs: bool,
}

impl Deltas {
    /// No change.
    pub const ZERO: Deltas = Deltas {
        ip: 0,
        l4: 0,
        addrs: false,
    };

    /// The deltas of rewriting `old` to `new`.
    pub fn new(old: Tuple, new: Tuple) -> Deltas {
        let ip = delta32(old.src, new.src) + delta32(old.dst, new.dst);
        let l4 = ip + delta16(old.sport, new.sport) + delta16(old.dport, new.dport);
        Deltas {
            ip: fold(ip),
            l4: fold(l4),
            addrs: old.src != new.src || old.dst != new.dst,
        }
    }
}

/// Folds a sum of 16-bit terms (less than 2^32) into 16 bits, ones' complement.
#[inline(always)]
fn fold(a: u64) -> u16 {
    let a = (a & 0xffff) + (a >> 16);
    let a = (a & 0xffff) + (a >> 16);
    a as u16
}

/// Rewrites a TCP, UDP or ICMP echo packet from tuple `old` to tuple `new` (addresses,
/// ports or identifier) and updates the IPv4, TCP/UDP or ICMP checksums incrementally. `dl`
/// must be `Deltas::new(old, new)` (TCP and UDP add it instead of summing the changes). The
/// L4 checksum of a first fragment covers the whole datagram; the incremental update is
/// still right because only the changed words enter it. The TCP/UDP rewrite is inlined
/// into the nodes (no call, no tuple passed through memory); echo is a plain function
/// (`translate_echo`), inlined or not as the compiler chooses.
#[inline(always)]
pub fn translate(d: &mut [u8], l4: usize, kind: L4, old: Tuple, new: Tuple, dl: Deltas) {
    translate_lazy(d, l4, kind, || old, || new, dl)
}

/// [`translate`] as a call (the lookup pass's rarer hit, through the session: its copy of
/// the rewrite is not inlined beside the common one's).
#[inline(never)]
pub fn translate_out_of_line(
    d: &mut [u8],
    l4: usize,
    kind: L4,
    old: Tuple,
    new: Tuple,
    dl: Deltas,
) {
    translate(d, l4, kind, old, new, dl)
}

/// [`translate`] with the old tuple made only when it is needed (ICMP echo; TCP and UDP
/// add the deltas alone) and the new one's fields taken where they are written (the node
/// reads them from the flow's record: kept in registers across the dispatch, they were
/// spilled to the stack).
#[inline(always)]
pub fn translate_lazy(
    d: &mut [u8],
    l4: usize,
    kind: L4,
    old: impl Fn() -> Tuple,
    new: impl Fn() -> Tuple,
    dl: Deltas,
) {
    debug_assert_eq!(dl, Deltas::new(old(), new()));
    match kind {
        L4::Tcp(_) => translate_l4::<16>(d, l4, false, new, dl),
        L4::Udp => translate_l4::<6>(d, l4, true, new, dl),
        L4::EchoRequest | L4::EchoReply => translate_echo(d, l4, kind, old(), new()),
    }
}

/// The TCP (`CO` 16) or UDP (`CO` 6) rewrite: the L4 checksum at `CO`.
#[inline(always)]
fn translate_l4<const CO: usize>(
    d: &mut [u8],
    l4: usize,
    udp: bool,
    new: impl Fn() -> Tuple,
    dl: Deltas,
) {
    // The IPv4 header and the L4 header up to its checksum as fixed-size arrays (parse
    // checked both lengths): one length check for both, one for the IHL, none per field.
    let Some((hdr, l)) = d
        .get_mut(..l4.saturating_add(CO + 2))
        .and_then(|p| p.split_at_mut_checked(l4))
    else {
        return;
    };
    let Some(ip) = hdr.first_chunk_mut::<20>() else {
        return;
    };
    // One delta per checksum, summed when the flow was made (RFC 1624 eqn. 3 over all the
    // changed words at once: the same sum as applying them one by one).
    if dl.addrs {
        ip[12..16].copy_from_slice(&new().src.to_be_bytes());
        ip[16..20].copy_from_slice(&new().dst.to_be_bytes());
        let c = u16::from_be_bytes([ip[10], ip[11]]);
        ip[10..12].copy_from_slice(&apply_delta(c, dl.ip).to_be_bytes());
    }
    l[0..2].copy_from_slice(&new().sport.to_be_bytes());
    l[2..4].copy_from_slice(&new().dport.to_be_bytes());
    let c0 = u16::from_be_bytes([l[CO], l[CO + 1]]);
    if udp && c0 == 0 {
        // RFC 768: no checksum.
        return;
    }
    let mut c = apply_delta(c0, dl.l4);
    if udp && c == 0 {
        c = 0xffff;
    }
    l[CO..CO + 2].copy_from_slice(&c.to_be_bytes());
}

/// The ICMP echo rewrite: addresses and identifier.
fn translate_echo(d: &mut [u8], l4: usize, kind: L4, old: Tuple, new: Tuple) {
    rewrite_ip(d, 0, new.src, new.dst);
    let (o, n) = if kind == L4::EchoRequest {
        (old.sport, new.sport)
    } else {
        (old.dport, new.dport)
    };
    if o != n {
        let c = update_u16(get16(d, l4 + 2), o, n);
        put16(d, l4 + 4, n);
        put16(d, l4 + 2, c);
    }
}

/// `~old + new` over the two 16-bit halves of a 32-bit field (an RFC 1624 eqn. 3 term).
#[inline(always)]
fn delta32(old: u32, new: u32) -> u64 {
    let o = !old;
    (o >> 16) as u64 + (o & 0xffff) as u64 + (new >> 16) as u64 + (new & 0xffff) as u64
}

/// `~old + new` of a 16-bit field.
#[inline(always)]
fn delta16(old: u16, new: u16) -> u64 {
    (!old) as u64 + new as u64
}

/// RFC 1624 eqn. 3 with a flow's folded delta `dl` (the sum of its terms, [`Deltas`]):
/// `~(~HC + dl)`, one ones'-complement addition (end-around carry).
#[inline(always)]
fn apply_delta(c: u16, dl: u16) -> u16 {
    let (s, carry) = (!c).overflowing_add(dl);
    !s.wrapping_add(carry as u16)
}

/// Writes a 16-bit word of an ICMP message's payload and carries the change into the ICMP
/// checksum `c`.
#[inline(always)]
fn icmp_put16(d: &mut [u8], o: usize, v: u16, c: &mut u16) {
    let old = get16(d, o);
    if old != v {
        *c = update_u16(*c, old, v);
        put16(d, o, v);
    }
}

/// Translates an ICMP error: the outer header's addresses become `outer_src`/`outer_dst`,
/// the quoted packet's tuple becomes `inner` (its IPv4 checksum, its TCP/UDP checksum when
/// quoted, or its ICMP echo checksum updated), and the ICMP checksum follows every word
/// that changed. `p` must be what [`parse`] returned for these bytes.
pub fn translate_icmp_error(
    d: &mut [u8],
    p: &Parsed,
    outer_src: u32,
    outer_dst: u32,
    inner: Tuple,
) {
    let Parsed::IcmpError {
        icmp,
        inner_ip,
        inner_l4,
        inner: old,
        inner_kind,
        ..
    } = *p
    else {
        return;
    };
    let mut c = get16(d, icmp + 2);
    // The quoted IPv4 header: addresses and checksum (each word is in the ICMP payload).
    let ic_old = get16(d, inner_ip + 10);
    let mut ic = ic_old;
    ic = update_u32(ic, old.src, inner.src);
    ic = update_u32(ic, old.dst, inner.dst);
    icmp_put16(d, inner_ip + 12, (inner.src >> 16) as u16, &mut c);
    icmp_put16(d, inner_ip + 14, inner.src as u16, &mut c);
    icmp_put16(d, inner_ip + 16, (inner.dst >> 16) as u16, &mut c);
    icmp_put16(d, inner_ip + 18, inner.dst as u16, &mut c);
    icmp_put16(d, inner_ip + 10, ic, &mut c);
    match inner_kind {
        L4::Tcp(_) | L4::Udp => {
            let co = if inner_kind == L4::Udp {
                inner_l4 + 6
            } else {
                inner_l4 + 16
            };
            // The quoted L4 checksum, when it is quoted (RFC 792 promises 8 bytes: UDP's
            // is in them, TCP's only if the quote is longer) and in use.
            if co + 2 <= d.len() {
                let l0 = get16(d, co);
                if !(inner_kind == L4::Udp && l0 == 0) {
                    let mut l = l0;
                    l = update_u32(l, old.src, inner.src);
                    l = update_u32(l, old.dst, inner.dst);
                    l = update_u16(l, old.sport, inner.sport);
                    l = update_u16(l, old.dport, inner.dport);
                    if inner_kind == L4::Udp && l == 0 {
                        l = 0xffff;
                    }
                    icmp_put16(d, co, l, &mut c);
                }
            }
            icmp_put16(d, inner_l4, inner.sport, &mut c);
            icmp_put16(d, inner_l4 + 2, inner.dport, &mut c);
        }
        L4::EchoRequest | L4::EchoReply => {
            let (o, n) = if inner_kind == L4::EchoRequest {
                (old.sport, inner.sport)
            } else {
                (old.dport, inner.dport)
            };
            if o != n {
                let ec = update_u16(get16(d, inner_l4 + 2), o, n);
                icmp_put16(d, inner_l4 + 4, n, &mut c);
                icmp_put16(d, inner_l4 + 2, ec, &mut c);
            }
        }
    }
    put16(d, icmp + 2, c);
    rewrite_ip(d, 0, outer_src, outer_dst);
}

/// The TCP flags of a packet parsed as TCP (0 otherwise).
#[inline(always)]
pub fn flags_of(kind: L4) -> u8 {
    match kind {
        L4::Tcp(f) => f,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::checksum::internet_checksum;

    fn ip4(p: u8, src: [u8; 4], dst: [u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0x45, 0, 0, 0, 0x12, 0x34, 0, 0, 64, p, 0, 0];
        v.extend_from_slice(&src);
        v.extend_from_slice(&dst);
        v.extend_from_slice(payload);
        let len = v.len() as u16;
        v[2..4].copy_from_slice(&len.to_be_bytes());
        let c = internet_checksum(&v[..20]);
        v[10..12].copy_from_slice(&c.to_be_bytes());
        v
    }

    /// The L4 checksum over the pseudo-header and the segment (0 when valid).
    fn l4_sum(d: &[u8]) -> u16 {
        let mut ph = Vec::new();
        ph.extend_from_slice(&d[12..20]);
        ph.push(0);
        ph.push(d[9]);
        ph.extend_from_slice(&((d.len() - 20) as u16).to_be_bytes());
        ph.extend_from_slice(&d[20..]);
        internet_checksum(&ph)
    }

    fn with_l4_checksum(mut d: Vec<u8>, off: usize) -> Vec<u8> {
        let c = l4_sum(&d);
        d[20 + off..22 + off].copy_from_slice(&c.to_be_bytes());
        d
    }

    fn udp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
        let mut u = Vec::new();
        u.extend_from_slice(&sp.to_be_bytes());
        u.extend_from_slice(&dp.to_be_bytes());
        u.extend_from_slice(&12u16.to_be_bytes());
        u.extend_from_slice(&[0, 0, b'a', b'b', b'c', b'd']);
        with_l4_checksum(ip4(17, src, dst, &u), 6)
    }

    fn tcp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, flags: u8) -> Vec<u8> {
        let mut t = Vec::new();
        t.extend_from_slice(&sp.to_be_bytes());
        t.extend_from_slice(&dp.to_be_bytes());
        t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        t.extend_from_slice(b"hello");
        with_l4_checksum(ip4(6, src, dst, &t), 16)
    }

    fn echo(src: [u8; 4], dst: [u8; 4], ty: u8, id: u16) -> Vec<u8> {
        let mut m = vec![ty, 0, 0, 0];
        m.extend_from_slice(&id.to_be_bytes());
        m.extend_from_slice(&[0, 7, 1, 2, 3, 4]);
        let c = internet_checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        ip4(1, src, dst, &m)
    }

    fn a(x: [u8; 4]) -> u32 {
        u32::from_be_bytes(x)
    }

    /// A packet of `kind` (0 UDP, 1 UDP without checksum, 2 TCP ACK, 3 echo request, 4
    /// echo reply) with tuple `t` (echo: the identifier is `t`'s source or destination
    /// port), its checksums computed from scratch.
    fn from_scratch(kind: u8, t: Tuple) -> Vec<u8> {
        let (s, d) = (t.src.to_be_bytes(), t.dst.to_be_bytes());
        match kind {
            0 | 1 => {
                let mut v = udp(s, d, t.sport, t.dport);
                let c = u16::from_be_bytes([v[26], v[27]]);
                // RFC 768: a computed zero is sent as 0xffff; kind 1 sends none.
                let c = if kind == 1 {
                    0
                } else if c == 0 {
                    0xffff
                } else {
                    c
                };
                v[26..28].copy_from_slice(&c.to_be_bytes());
                v
            }
            2 => tcp(s, d, t.sport, t.dport, tcp_flags::ACK),
            3 => echo(s, d, ICMP_ECHO_REQUEST, t.sport),
            _ => echo(s, d, ICMP_ECHO_REPLY, t.dport),
        }
    }

    proptest::proptest! {
        /// A session's hot path (its flow's rewrite and deltas, summed when the session was
        /// made, read from the flow's hot record by `Table::hit_flow`) gives, byte for byte,
        /// the packet built from scratch with the translated tuple, and so does the session
        /// path (`Table::hit_session`): both directions, TCP, UDP (with and without
        /// checksum) and ICMP echo, random tuples, an address rewrite or a ports-only one
        /// (the pool address the source's), FIB 0 or another. A flow's first packet of a
        /// second must be declined by `hit_flow` and the next one in that second taken by it.
        #[test]
        fn hot_path_translation_is_the_packet_built_from_scratch(
            kind in 0u8..5,
            (src, dst, sp, dp) in (proptest::prelude::any::<u32>(), proptest::prelude::any::<u32>(),
                                   proptest::prelude::any::<u16>(), proptest::prelude::any::<u16>()),
            (pool, port, same_addr) in (proptest::prelude::any::<u32>(),
                                        proptest::prelude::any::<u16>(),
                                        proptest::prelude::any::<bool>()),
            fib in proptest::prop_oneof![proptest::strategy::Just(0u32), 1u32..1024],
            second in 1u32..5,
        ) {
            use crate::config::Timeouts;
            use crate::session::{Flow, Hit, Key, Session, Side, Table};
            let proto = match kind { 0 | 1 => 17, 2 => 6, _ => 1 };
            // The inside packet's tuple (echo: the identifier in the port of its direction).
            let (sp, dp) = match kind { 3 => (sp, 0), 4 => (0, dp), _ => (sp, dp) };
            let t = Tuple { src, dst, sport: sp, dport: dp, proto };
            let new = Tuple {
                src: if same_addr { src } else { pool },
                sport: if kind == 4 { 0 } else { port },
                dport: if kind == 4 { port } else { t.dport },
                ..t
            };
            let rev = |x: Tuple| Tuple { src: x.dst, dst: x.src, sport: x.dport, dport: x.sport, proto };
            let s = Session::new(
                Flow { key: t, rw: new, side: Side::In },
                Flow { key: rev(new), rw: rev(t), side: Side::Out },
                fib, 0, None,
            );
            let to = Timeouts::default();
            let mut tb = Table::new(4, 7);
            let i = tb.create(s, 0.5, &to).expect("created");
            // The outside packet of an echo request is a reply, and the reverse.
            let back = match kind { 3 => 4, 4 => 3, k => k };
            // The outside flow's key is looked up in FIB 0.
            for (side, kind, old, want, which, kfib) in
                [(Side::In, kind, t, new, 0u8, fib), (Side::Out, back, rev(new), rev(t), 1, 0)]
            {
                let mut d = from_scratch(kind, old);
                let Ok(Parsed::Flow { t: pt, l4, kind: k }) = parse(&d) else { panic!("parses") };
                proptest::prop_assert_eq!(pt, old);
                let key = Key::new(side, &old, kfib);
                // Twice in a second: the first packet takes the session (a new second for the
                // flow), the second the hot record alone.
                for n in 0..2 {
                    let now = second as f64 + 0.25 * n as f64;
                    let (found, _, _) = tb.lookup_live(side, &old, kfib, now, &to).expect("found");
                    let v = (found as u64) << 1 | which as u64;
                    let hot = tb.hit_flow(key, v, now, d.len(), flags_of(k)).map(|h| (h.rw(), h.deltas()));
                    let (rw, deltas) = if n == 0 {
                        proptest::prop_assert!(hot.is_none(), "a new second takes the session");
                        let Hit::Live { i: hi, rw, deltas, .. } =
                            tb.hit_session(key, v, now, &to, d.len(), flags_of(k))
                        else { panic!("live") };
                        proptest::prop_assert_eq!(hi, i);
                        (rw, deltas)
                    } else {
                        hot.expect("the same second's next packet takes the hot record")
                    };
                    proptest::prop_assert_eq!(rw, want);
                    let mut p = d.clone();
                    translate(&mut p, l4, k, old, rw, deltas);
                    proptest::prop_assert_eq!(&p, &from_scratch(kind, want));
                    if n == 1 {
                        d = p;
                    }
                }
                proptest::prop_assert_eq!(&d, &from_scratch(kind, want));
            }
            proptest::prop_assert_eq!(tb.activity(i).pkts, 4);
        }
    }

    #[test]
    fn udp_tcp_and_echo_translate_with_valid_checksums() {
        for (mut d, off) in [
            (udp([10, 0, 0, 2], [8, 8, 8, 8], 1234, 53), 6),
            (tcp([10, 0, 0, 2], [8, 8, 8, 8], 40000, 80, 0x02), 16),
        ] {
            let Ok(Parsed::Flow { t, l4, kind }) = parse(&d) else {
                panic!("parses")
            };
            assert_eq!(
                (t.sport, t.dport),
                (
                    u16::from_be_bytes([d[20], d[21]]),
                    u16::from_be_bytes([d[22], d[23]])
                )
            );
            let new = Tuple {
                src: a([192, 0, 2, 1]),
                sport: 1025,
                ..t
            };
            translate(&mut d, l4, kind, t, new, Deltas::new(t, new));
            assert_eq!(internet_checksum(&d[..20]), 0, "ip checksum");
            assert_eq!(l4_sum(&d), 0, "l4 checksum at {off}");
            let Ok(Parsed::Flow { t: t2, .. }) = parse(&d) else {
                panic!()
            };
            assert_eq!(t2, new);
        }
        let mut d = echo([10, 0, 0, 2], [8, 8, 8, 8], ICMP_ECHO_REQUEST, 77);
        let Ok(Parsed::Flow { t, l4, kind }) = parse(&d) else {
            panic!()
        };
        assert_eq!((t.sport, t.dport, kind), (77, 0, L4::EchoRequest));
        let new = Tuple {
            src: a([192, 0, 2, 1]),
            sport: 4000,
            ..t
        };
        translate(&mut d, l4, kind, t, new, Deltas::new(t, new));
        assert_eq!(internet_checksum(&d[20..]), 0);
        assert_eq!(u16::from_be_bytes([d[24], d[25]]), 4000);
        let r = echo([8, 8, 8, 8], [192, 0, 2, 1], ICMP_ECHO_REPLY, 4000);
        let Ok(Parsed::Flow { t, .. }) = parse(&r) else {
            panic!()
        };
        assert_eq!((t.sport, t.dport), (0, 4000));
    }

    /// Every checksum stays valid over many rewrites of random TCP and UDP tuples (the end-
    /// around carry of the ones'-complement addition included), and each field of a tuple
    /// counts in its compare.
    #[test]
    fn translations_of_random_tuples_keep_valid_checksums() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut checked = 0;
        for i in 0..4000 {
            let (r, r2, r3) = (next(), next(), next());
            let (src, dst) = ((r >> 32) as u32, r as u32);
            let (sp, dp) = ((r2 >> 48) as u16, (r2 >> 32) as u16);
            let mut d = if i % 2 == 0 {
                udp(src.to_be_bytes(), dst.to_be_bytes(), sp, dp)
            } else {
                tcp(src.to_be_bytes(), dst.to_be_bytes(), sp, dp, 0x10)
            };
            let Ok(Parsed::Flow { t, l4, kind }) = parse(&d) else {
                panic!("parses")
            };
            if kind == L4::Udp && d[26..28] == [0, 0] {
                continue; // a datagram without a checksum (covered below)
            }
            // Source rewrites (in2out) and, every third, both ends (hairpinning).
            let new = Tuple {
                src: (r3 >> 32) as u32,
                sport: r3 as u16,
                dst: if i % 3 == 0 { (r3 >> 7) as u32 } else { t.dst },
                dport: if i % 3 == 0 {
                    (r3 >> 16) as u16
                } else {
                    t.dport
                },
                ..t
            };
            translate(&mut d, l4, kind, t, new, Deltas::new(t, new));
            assert_eq!(
                internet_checksum(&d[..20]),
                0,
                "ip checksum, {t:?} -> {new:?}"
            );
            assert_eq!(l4_sum(&d), 0, "l4 checksum, {t:?} -> {new:?}");
            let Ok(Parsed::Flow { t: t2, .. }) = parse(&d) else {
                panic!("parses")
            };
            assert_eq!(t2, new);
            checked += 1;
        }
        assert!(checked > 3900);
        let t = Tuple {
            src: 1,
            dst: 2,
            sport: 3,
            dport: 4,
            proto: 17,
        };
        for u in [
            Tuple { src: 9, ..t },
            Tuple { dst: 9, ..t },
            Tuple { sport: 9, ..t },
            Tuple { dport: 9, ..t },
            Tuple { proto: 6, ..t },
        ] {
            assert_ne!(t, u);
        }
        // Equal field by field, built apart (not a copy of `t`): the compare must say so.
        let same = Tuple {
            proto: 17,
            dport: 4,
            sport: 3,
            dst: 2,
            src: 1,
        };
        assert_eq!(t, same);
    }

    #[test]
    fn udp_without_checksum_stays_without() {
        let mut d = udp([10, 0, 0, 2], [8, 8, 8, 8], 1, 2);
        d[26] = 0;
        d[27] = 0;
        let Ok(Parsed::Flow { t, l4, kind }) = parse(&d) else {
            panic!()
        };
        let new = Tuple { sport: 9, ..t };
        translate(&mut d, l4, kind, t, new, Deltas::new(t, new));
        assert_eq!(&d[26..28], &[0, 0]);
        assert_eq!(&d[20..22], &9u16.to_be_bytes());
    }

    /// RFC 768: a UDP checksum that computes to 0 is sent as 0xffff (0 means "none"). The
    /// new source port is searched (all 65,536) for the one whose datagram's checksum computes
    /// to 0, for a ports-only rewrite (`Deltas::addrs` false: the IPv4 header untouched) and
    /// one with a new source address; and a datagram sent with 0xffff translates too.
    #[test]
    fn udp_checksum_computing_to_zero_is_sent_as_ffff() {
        let (src, dst) = ([10, 0, 0, 2], [8, 8, 8, 8]);
        for nsrc in [src, [192, 0, 2, 1]] {
            let d0 = udp(src, dst, 1234, 53);
            let Ok(Parsed::Flow { t, l4, kind }) = parse(&d0) else {
                panic!("parses")
            };
            // `udp` writes the checksum it computes: 0 for the port wanted.
            let zero: Vec<u16> = (0..=u16::MAX)
                .filter(|&p| udp(nsrc, dst, p, 53)[26..28] == [0, 0])
                .collect();
            assert_eq!(zero.len(), 1, "one port makes the sum 0xffff: {zero:?}");
            let new = Tuple {
                src: a(nsrc),
                sport: zero[0],
                ..t
            };
            let dl = Deltas::new(t, new);
            assert_eq!(dl.addrs, nsrc != src);
            let mut d = d0.clone();
            translate(&mut d, l4, kind, t, new, dl);
            assert_eq!(&d[26..28], &[0xff, 0xff], "{t:?} -> {new:?}");
            assert_eq!(l4_sum(&d), 0);
            assert_eq!(internet_checksum(&d[..20]), 0);
            if !dl.addrs {
                assert_eq!(&d[..20], &d0[..20], "ports only: IPv4 header untouched");
            }
            // That datagram as its sender sends it (0xffff), translated back and unchanged.
            let Ok(Parsed::Flow { t: t2, l4, kind }) = parse(&d) else {
                panic!("parses")
            };
            let mut e = d.clone();
            translate(&mut e, l4, kind, t2, t2, Deltas::new(t2, t2));
            assert_eq!(e, d, "an unchanged tuple keeps 0xffff");
            translate(&mut e, l4, kind, t2, t, Deltas::new(t2, t));
            assert_eq!(e, d0, "back to the original, checksum included");
        }
    }

    /// A ports-only TCP and UDP rewrite (`Deltas::addrs` false) leaves the IPv4 header alone
    /// and keeps the L4 checksum valid.
    #[test]
    fn ports_only_rewrite_leaves_the_ip_header_alone() {
        for d0 in [
            udp([10, 0, 0, 2], [8, 8, 8, 8], 1234, 53),
            tcp([10, 0, 0, 2], [8, 8, 8, 8], 40000, 80, 0x10),
        ] {
            let Ok(Parsed::Flow { t, l4, kind }) = parse(&d0) else {
                panic!("parses")
            };
            let new = Tuple {
                sport: 1025,
                dport: 8080,
                ..t
            };
            let dl = Deltas::new(t, new);
            assert!(!dl.addrs);
            let mut d = d0.clone();
            translate(&mut d, l4, kind, t, new, dl);
            assert_eq!(&d[..20], &d0[..20]);
            assert_eq!(l4_sum(&d), 0, "{kind:?}");
            let Ok(Parsed::Flow { t: t2, .. }) = parse(&d) else {
                panic!("parses")
            };
            assert_eq!(t2, new);
        }
    }

    #[test]
    fn icmp_error_translates_quoted_packet() {
        // The outside host answers E:1025 -> R:53 with port unreachable.
        let quoted = udp([192, 0, 2, 1], [8, 8, 8, 8], 1025, 53);
        let mut m = vec![3, 3, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&quoted);
        let c = internet_checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        let mut d = ip4(1, [8, 8, 8, 8], [192, 0, 2, 1], &m);
        let p = parse(&d).expect("parses");
        let Parsed::IcmpError { inner, .. } = p else {
            panic!("{p:?}")
        };
        assert_eq!((inner.sport, inner.dport), (1025, 53));
        let new_inner = Tuple {
            src: a([10, 0, 0, 2]),
            sport: 1234,
            ..inner
        };
        translate_icmp_error(&mut d, &p, a([8, 8, 8, 8]), a([10, 0, 0, 2]), new_inner);
        assert_eq!(internet_checksum(&d[..20]), 0, "outer ip");
        assert_eq!(internet_checksum(&d[20..]), 0, "icmp");
        assert_eq!(internet_checksum(&d[28..48]), 0, "quoted ip");
        assert_eq!(l4_sum(&d[28..]), 0, "quoted udp");
        assert_eq!(&d[16..20], &[10, 0, 0, 2]);
        assert_eq!(&d[40..44], &[10, 0, 0, 2]);
    }

    /// Each L4 header's minimum, byte for byte: one short is `Truncated`, the minimum parses.
    #[test]
    fn l4_headers_are_truncated_below_their_minimum_exactly() {
        let cases = [
            (tcp([10, 0, 0, 2], [8, 8, 8, 8], 1025, 80, 2), 40),
            (udp([10, 0, 0, 2], [8, 8, 8, 8], 1, 2), 28),
            (echo([10, 0, 0, 2], [8, 8, 8, 8], ICMP_ECHO_REQUEST, 7), 28),
        ];
        for (d, min) in cases {
            for n in 0..min {
                assert_eq!(parse(&d[..n]).err(), Some(Bad::Truncated), "{n} of {min}");
            }
            assert!(parse(&d[..min]).is_ok(), "{min}");
        }
    }

    #[test]
    fn bad_input_is_reported_never_panics() {
        let d = udp([10, 0, 0, 2], [8, 8, 8, 8], 1, 2);
        // Every truncation of a UDP packet and of an ICMP error.
        for n in 0..d.len() {
            let r = parse(&d[..n]);
            assert!(r.is_err() || n >= 28, "{n}: {r:?}");
        }
        let quoted = tcp([192, 0, 2, 1], [8, 8, 8, 8], 1025, 80, 2);
        let mut m = vec![11, 0, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&quoted);
        let e = ip4(1, [9, 9, 9, 9], [192, 0, 2, 1], &m);
        for n in 0..e.len() {
            match parse(&e[..n]) {
                Ok(p) => {
                    assert!(n >= 20 + 8 + 20 + 8, "{n}");
                    let mut x = e[..n].to_vec();
                    translate_icmp_error(&mut x, &p, 1, 2, Tuple::default());
                }
                Err(b) => assert!(
                    matches!(b, Bad::Truncated | Bad::BadIcmpError),
                    "{n}: {b:?}"
                ),
            }
        }
        // Non-first fragments and other protocols.
        let mut f = d.clone();
        f[6] = 0;
        f[7] = 10;
        assert_eq!(parse(&f), Err(Bad::NonFirstFragment));
        let g = ip4(47, [1, 1, 1, 1], [2, 2, 2, 2], &[0; 8]);
        assert_eq!(parse(&g), Err(Bad::UnsupportedProto));
        let r = ip4(1, [1, 1, 1, 1], [2, 2, 2, 2], &[10, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(parse(&r), Err(Bad::UnsupportedIcmp));
        // A first fragment (MF set, offset 0) parses.
        let mut ff = d.clone();
        ff[6] = 0x20;
        assert!(parse(&ff).is_ok());
    }
}
