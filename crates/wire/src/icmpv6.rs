//! ICMPv6 (RFC 4443) and Neighbor Discovery (RFC 4861): a view of the message with its
//! checksum over the IPv6 pseudo-header, the ND options, and [`NdiscRepr`] for Router and
//! Neighbor Solicitations and Advertisements.

use crate::checksum;
use crate::error::{be16, be32, WireError};
use crate::ethernet::Mac;
use crate::ipv6::{next_header, pseudo_header_sum};
use std::net::Ipv6Addr;

/// Length of the part every message has: type, code, checksum and one 32-bit field (RFC 4443
/// §2.1 plus the first body word, present in every message RFC 4443 and RFC 4861 define).
pub const HEADER_LEN: usize = 8;

/// ICMPv6 message types.
pub mod kind {
    /// Destination unreachable (RFC 4443 §3.1).
    pub const DEST_UNREACH: u8 = 1;
    /// Packet too big (RFC 4443 §3.2).
    pub const PKT_TOO_BIG: u8 = 2;
    /// Time exceeded (RFC 4443 §3.3).
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem (RFC 4443 §3.4).
    pub const PARAM_PROBLEM: u8 = 4;
    /// Echo request (RFC 4443 §4.1).
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply (RFC 4443 §4.2).
    pub const ECHO_REPLY: u8 = 129;
    /// Router solicitation (RFC 4861 §4.1).
    pub const ROUTER_SOLICIT: u8 = 133;
    /// Router advertisement (RFC 4861 §4.2).
    pub const ROUTER_ADVERT: u8 = 134;
    /// Neighbor solicitation (RFC 4861 §4.3).
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbor advertisement (RFC 4861 §4.4).
    pub const NEIGHBOR_ADVERT: u8 = 136;
    /// Redirect (RFC 4861 §4.5).
    pub const REDIRECT: u8 = 137;

    /// Whether `k` is an error message (RFC 4443 §2.1: the high-order bit of the type is 0).
    pub const fn is_error(k: u8) -> bool {
        k & 0x80 == 0
    }

    /// VPP's name for the type (`echo_request`, `neighbor_solicitation`, ...), if known.
    pub fn name(k: u8) -> Option<&'static str> {
        Some(match k {
            DEST_UNREACH => "destination_unreachable",
            PKT_TOO_BIG => "packet_too_big",
            TIME_EXCEEDED => "time_exceeded",
            PARAM_PROBLEM => "parameter_problem",
            ECHO_REQUEST => "echo_request",
            ECHO_REPLY => "echo_reply",
            ROUTER_SOLICIT => "router_solicitation",
            ROUTER_ADVERT => "router_advertisement",
            NEIGHBOR_SOLICIT => "neighbor_solicitation",
            NEIGHBOR_ADVERT => "neighbor_advertisement",
            REDIRECT => "redirect",
            _ => return None,
        })
    }
}

/// Destination unreachable codes (RFC 4443 §3.1).
pub mod unreach {
    /// No route to destination.
    pub const NO_ROUTE: u8 = 0;
    /// Port unreachable.
    pub const PORT: u8 = 4;
}

/// A zero-copy view of an ICMPv6 message: the buffer is the whole message (the IPv6 payload
/// after any extension headers), since the checksum covers all of it.
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Wraps `buf` without any check; accessors panic if it is shorter than 8 bytes.
    pub const fn new_unchecked(buf: T) -> Self {
        Icmpv6Packet { buf }
    }

    /// Wraps `buf` after checking it holds the 8-byte header. Never panics.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Icmpv6Packet { buf })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Message type (see [`kind`]).
    #[inline]
    pub fn kind(&self) -> u8 {
        self.buf.as_ref()[0]
    }

    /// Code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.buf.as_ref()[1]
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }

    /// Echo identifier (bytes 4..6 of an echo request or reply).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(self.buf.as_ref(), 4)
    }

    /// Echo sequence number (bytes 6..8 of an echo request or reply).
    #[inline]
    pub fn echo_seq(&self) -> u16 {
        be16(self.buf.as_ref(), 6)
    }

    /// The MTU of a packet-too-big message (RFC 4443 §3.2).
    #[inline]
    pub fn mtu(&self) -> u32 {
        be32(self.buf.as_ref(), 4)
    }

    /// The pointer of a parameter-problem message (RFC 4443 §3.4).
    #[inline]
    pub fn pointer(&self) -> u32 {
        be32(self.buf.as_ref(), 4)
    }

    /// The bytes after the 8-byte header: echo data, or the invoking packet of an error.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..]
    }

    /// The checksum the message should carry between `src` and `dst` (RFC 4443 §2.3), the
    /// checksum field taken as zero.
    pub fn compute_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> u16 {
        let b = self.buf.as_ref();
        let ph = pseudo_header_sum(src, dst, next_header::ICMPV6, b.len() as u32);
        // Subtracting the stored field is the same as summing with it zeroed.
        !checksum::combine(checksum::combine(ph, checksum::sum(b)), !self.checksum())
    }

    /// Whether the checksum over the IPv6 pseudo-header and the message is correct (RFC 4443
    /// §2.3; unlike UDP over IPv4 there is no "no checksum" value).
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let b = self.buf.as_ref();
        let ph = pseudo_header_sum(src, dst, next_header::ICMPV6, b.len() as u32);
        checksum::combine(ph, checksum::sum(b)) == 0xffff
    }

    /// The Neighbor Discovery options of an RS, RA, NS, NA or Redirect message (RFC 4861
    /// §4.6); an empty iterator for other types or a message too short for its fixed part.
    pub fn ndisc_options(&self) -> NdiscOptions<'_> {
        let start = match self.kind() {
            kind::ROUTER_SOLICIT => 8,
            kind::ROUTER_ADVERT => 16,
            kind::NEIGHBOR_SOLICIT | kind::NEIGHBOR_ADVERT => 24,
            kind::REDIRECT => 40,
            _ => return NdiscOptions::new(&[]),
        };
        NdiscOptions::new(self.buf.as_ref().get(start..).unwrap_or(&[]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Sets type and code.
    #[inline]
    pub fn set_kind_code(&mut self, kind: u8, code: u8) {
        let b = self.buf.as_mut();
        b[0] = kind;
        b[1] = code;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        self.buf.as_mut()[2..4].copy_from_slice(&c.to_be_bytes());
    }

    /// Sets the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, v: u16) {
        self.buf.as_mut()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the echo sequence number.
    #[inline]
    pub fn set_echo_seq(&mut self, v: u16) {
        self.buf.as_mut()[6..8].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the 32-bit field after the checksum: the MTU of a packet-too-big, the pointer of
    /// a parameter-problem, the unused word (zero) of the other errors.
    #[inline]
    pub fn set_word(&mut self, v: u32) {
        self.buf.as_mut()[4..8].copy_from_slice(&v.to_be_bytes());
    }

    /// The bytes after the 8-byte header, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[HEADER_LEN..]
    }

    /// Computes and stores the checksum over the IPv6 pseudo-header and the whole buffer.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = self.compute_checksum(src, dst);
        self.set_checksum(c);
    }
}

macro_rules! flag_byte {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $flag:ident = $bit:expr,)+ }) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name(pub u8);

        impl $name {
            $($(#[$fdoc])* pub const $flag: $name = $name($bit);)+
            /// The bits this type defines; the others are reserved.
            pub const ALL: $name = $name(0 $(| $bit)+);

            /// Whether every bit of `other` is set.
            #[inline]
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }

            /// The defined bits of `b`; reserved bits "MUST be ignored by the receiver"
            /// (RFC 4861 §4.2, §4.4, §4.6.2).
            #[inline]
            pub const fn from_wire(b: u8) -> $name {
                $name(b & Self::ALL.0)
            }
        }

        impl std::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                $name(self.0 | rhs.0)
            }
        }
    };
}

flag_byte!(
    /// Router Advertisement flags (RFC 4861 §4.2).
    RaFlags {
        /// M: addresses are available via DHCPv6.
        MANAGED = 0x80,
        /// O: other configuration is available via DHCPv6.
        OTHER = 0x40,
    }
);

flag_byte!(
    /// Neighbor Advertisement flags (RFC 4861 §4.4).
    NaFlags {
        /// R: the sender is a router.
        ROUTER = 0x80,
        /// S: sent in response to a Neighbor Solicitation.
        SOLICITED = 0x40,
        /// O: override an existing cache entry.
        OVERRIDE = 0x20,
    }
);

flag_byte!(
    /// Prefix Information option flags (RFC 4861 §4.6.2).
    PrefixFlags {
        /// L: the prefix is on-link.
        ON_LINK = 0x80,
        /// A: usable for stateless address autoconfiguration (RFC 4862).
        AUTONOMOUS = 0x40,
    }
);

/// Neighbor Discovery option types (RFC 4861 §4.6).
pub mod ndisc_option {
    /// Source link-layer address.
    pub const SOURCE_LL_ADDR: u8 = 1;
    /// Target link-layer address.
    pub const TARGET_LL_ADDR: u8 = 2;
    /// Prefix information.
    pub const PREFIX_INFO: u8 = 3;
    /// Redirected header.
    pub const REDIRECTED_HEADER: u8 = 4;
    /// MTU.
    pub const MTU: u8 = 5;
}

/// A Prefix Information option (RFC 4861 §4.6.2).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PrefixInfo {
    /// Prefix length in bits (0..=128).
    pub prefix_len: u8,
    /// L and A flags.
    pub flags: PrefixFlags,
    /// Valid lifetime in seconds (`0xffffffff`: infinity).
    pub valid_lifetime: u32,
    /// Preferred lifetime in seconds (`0xffffffff`: infinity).
    pub preferred_lifetime: u32,
    /// The prefix (bits past `prefix_len` are sent as given).
    pub prefix: Ipv6Addr,
}

/// One Neighbor Discovery option.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NdiscOption<'a> {
    /// Source link-layer address (an Ethernet MAC, RFC 2464 §8).
    SourceLinkLayerAddr(Mac),
    /// Target link-layer address (an Ethernet MAC, RFC 2464 §8).
    TargetLinkLayerAddr(Mac),
    /// Prefix information.
    PrefixInformation(PrefixInfo),
    /// Link MTU.
    Mtu(u32),
    /// Any other option (Redirected Header, RDNSS, ...), kept as raw bytes after type and
    /// length; receivers ignore options they do not know (RFC 4861 §4.6).
    Other {
        /// Option type.
        kind: u8,
        /// The `8 * length - 2` bytes after the type and length bytes.
        data: &'a [u8],
    },
}

impl NdiscOption<'_> {
    /// Bytes the option takes when emitted (a multiple of 8 for the known options; `Other`
    /// data is padded with zeros up to one).
    pub fn buffer_len(&self) -> usize {
        match self {
            Self::SourceLinkLayerAddr(_) | Self::TargetLinkLayerAddr(_) | Self::Mtu(_) => 8,
            Self::PrefixInformation(_) => 32,
            Self::Other { data, .. } => (data.len() + 2).div_ceil(8) * 8,
        }
    }

    /// Writes the option at the start of `b` and returns its length.
    ///
    /// # Panics
    /// If `b` is shorter than [`buffer_len`](Self::buffer_len), or an `Other` option is longer
    /// than 2040 bytes (the length byte counts 8-byte units).
    pub fn emit(&self, b: &mut [u8]) -> usize {
        let len = self.buffer_len();
        let b = &mut b[..len];
        b.fill(0);
        b[1] = u8::try_from(len / 8).expect("ND option over 2040 bytes");
        match self {
            Self::SourceLinkLayerAddr(m) | Self::TargetLinkLayerAddr(m) => {
                b[0] = if matches!(self, Self::SourceLinkLayerAddr(_)) {
                    ndisc_option::SOURCE_LL_ADDR
                } else {
                    ndisc_option::TARGET_LL_ADDR
                };
                b[2..8].copy_from_slice(&m.0);
            }
            Self::PrefixInformation(p) => {
                b[0] = ndisc_option::PREFIX_INFO;
                b[2] = p.prefix_len;
                b[3] = p.flags.0;
                b[4..8].copy_from_slice(&p.valid_lifetime.to_be_bytes());
                b[8..12].copy_from_slice(&p.preferred_lifetime.to_be_bytes());
                b[16..32].copy_from_slice(&p.prefix.octets());
            }
            Self::Mtu(m) => {
                b[0] = ndisc_option::MTU;
                b[4..8].copy_from_slice(&m.to_be_bytes());
            }
            Self::Other { kind, data } => {
                b[0] = *kind;
                b[2..2 + data.len()].copy_from_slice(data);
            }
        }
        len
    }
}

/// An iterator over Neighbor Discovery options. Yields an error and then stops at the first
/// malformed option: a length of 0 (RFC 4861 §4.6: "Nodes MUST silently discard an ND packet
/// that contains an option with length zero"), an option running past the message, or a
/// known option with the wrong length for Ethernet.
#[derive(Debug, Clone)]
pub struct NdiscOptions<'a> {
    rest: &'a [u8],
}

impl<'a> NdiscOptions<'a> {
    /// Iterates over the options in `b` (the bytes after a message's fixed part).
    pub fn new(b: &'a [u8]) -> Self {
        NdiscOptions { rest: b }
    }

    fn parse_one(&mut self) -> Result<NdiscOption<'a>, WireError> {
        let b = self.rest;
        if b.len() < 2 {
            return Err(WireError::Truncated);
        }
        let len = b[1] as usize * 8;
        if len == 0 {
            return Err(WireError::Malformed("ndisc option length"));
        }
        if len > b.len() {
            return Err(WireError::Truncated);
        }
        let o = &b[..len];
        self.rest = &b[len..];
        Ok(match o[0] {
            k @ (ndisc_option::SOURCE_LL_ADDR | ndisc_option::TARGET_LL_ADDR) => {
                // RFC 2464 §8: over Ethernet the option is exactly 8 bytes.
                if len != 8 {
                    return Err(WireError::Malformed("link-layer address option"));
                }
                let m = Mac([o[2], o[3], o[4], o[5], o[6], o[7]]);
                if k == ndisc_option::SOURCE_LL_ADDR {
                    NdiscOption::SourceLinkLayerAddr(m)
                } else {
                    NdiscOption::TargetLinkLayerAddr(m)
                }
            }
            ndisc_option::PREFIX_INFO => {
                if len != 32 {
                    return Err(WireError::Malformed("prefix information option"));
                }
                if o[2] > 128 {
                    return Err(WireError::Malformed("prefix length"));
                }
                let mut a = [0u8; 16];
                a.copy_from_slice(&o[16..32]);
                NdiscOption::PrefixInformation(PrefixInfo {
                    prefix_len: o[2],
                    flags: PrefixFlags::from_wire(o[3]),
                    valid_lifetime: be32(o, 4),
                    preferred_lifetime: be32(o, 8),
                    prefix: Ipv6Addr::from(a),
                })
            }
            ndisc_option::MTU => {
                if len != 8 {
                    return Err(WireError::Malformed("mtu option"));
                }
                NdiscOption::Mtu(be32(o, 4))
            }
            kind => NdiscOption::Other {
                kind,
                data: &o[2..],
            },
        })
    }
}

impl<'a> Iterator for NdiscOptions<'a> {
    type Item = Result<NdiscOption<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let r = self.parse_one();
        if r.is_err() {
            self.rest = &[];
        }
        Some(r)
    }
}

/// A Neighbor Discovery message (RFC 4861 §4.1-4.4) with the options Sluice uses. Options
/// that do not apply to the message type, and unknown options, are skipped when parsing;
/// when an option appears twice the first is kept (prefixes are all kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NdiscRepr {
    /// Router Solicitation (RFC 4861 §4.1).
    RouterSolicit {
        /// Source link-layer address option.
        lladdr: Option<Mac>,
    },
    /// Router Advertisement (RFC 4861 §4.2).
    RouterAdvert {
        /// Cur Hop Limit (0: unspecified).
        hop_limit: u8,
        /// M and O flags.
        flags: RaFlags,
        /// Router lifetime in seconds (0: not a default router).
        router_lifetime: u16,
        /// Reachable time in milliseconds (0: unspecified).
        reachable_time: u32,
        /// Retrans timer in milliseconds (0: unspecified).
        retrans_time: u32,
        /// Source link-layer address option.
        lladdr: Option<Mac>,
        /// MTU option.
        mtu: Option<u32>,
        /// Prefix Information options, in order.
        prefixes: Vec<PrefixInfo>,
    },
    /// Neighbor Solicitation (RFC 4861 §4.3).
    NeighborSolicit {
        /// Target address.
        target: Ipv6Addr,
        /// Source link-layer address option.
        lladdr: Option<Mac>,
    },
    /// Neighbor Advertisement (RFC 4861 §4.4).
    NeighborAdvert {
        /// R, S and O flags.
        flags: NaFlags,
        /// Target address.
        target: Ipv6Addr,
        /// Target link-layer address option.
        lladdr: Option<Mac>,
    },
}

impl NdiscRepr {
    /// Parses an RS, RA, NS or NA message. The checksum is not verified here (it needs the
    /// addresses: [`Icmpv6Packet::verify_checksum`]), nor the IP-level rules (hop limit 255,
    /// source address checks) of RFC 4861 §6.1 and §7.1.
    ///
    /// Errors: `Malformed("not neighbor discovery")` for other types; `Malformed("ndisc
    /// code")` for a code other than 0 and `Truncated` for a message shorter than its fixed
    /// part (§6.1.1, §6.1.2, §7.1.1, §7.1.2); `Malformed("ndisc target")` for a multicast
    /// target (§7.1.1, §7.1.2); any option error of [`NdiscOptions`]. Never panics.
    pub fn parse<T: AsRef<[u8]>>(p: &Icmpv6Packet<T>) -> Result<NdiscRepr, WireError> {
        let b = p.buf.as_ref();
        let min = match p.kind() {
            kind::ROUTER_SOLICIT => 8,
            kind::ROUTER_ADVERT => 16,
            kind::NEIGHBOR_SOLICIT | kind::NEIGHBOR_ADVERT => 24,
            _ => return Err(WireError::Malformed("not neighbor discovery")),
        };
        if p.code() != 0 {
            return Err(WireError::Malformed("ndisc code"));
        }
        if b.len() < min {
            return Err(WireError::Truncated);
        }
        let (mut src_ll, mut tgt_ll, mut mtu, mut prefixes) = (None, None, None, Vec::new());
        for o in p.ndisc_options() {
            match o? {
                NdiscOption::SourceLinkLayerAddr(m) => {
                    src_ll.get_or_insert(m);
                }
                NdiscOption::TargetLinkLayerAddr(m) => {
                    tgt_ll.get_or_insert(m);
                }
                NdiscOption::Mtu(m) => {
                    mtu.get_or_insert(m);
                }
                NdiscOption::PrefixInformation(pi) => {
                    if p.kind() == kind::ROUTER_ADVERT {
                        prefixes.push(pi);
                    }
                }
                NdiscOption::Other { .. } => {}
            }
        }
        let target = || -> Result<Ipv6Addr, WireError> {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[8..24]);
            let a = Ipv6Addr::from(a);
            if a.is_multicast() {
                return Err(WireError::Malformed("ndisc target"));
            }
            Ok(a)
        };
        Ok(match p.kind() {
            kind::ROUTER_SOLICIT => NdiscRepr::RouterSolicit { lladdr: src_ll },
            kind::ROUTER_ADVERT => NdiscRepr::RouterAdvert {
                hop_limit: b[4],
                flags: RaFlags::from_wire(b[5]),
                router_lifetime: be16(b, 6),
                reachable_time: be32(b, 8),
                retrans_time: be32(b, 12),
                lladdr: src_ll,
                mtu,
                prefixes,
            },
            kind::NEIGHBOR_SOLICIT => NdiscRepr::NeighborSolicit {
                target: target()?,
                lladdr: src_ll,
            },
            _ => NdiscRepr::NeighborAdvert {
                flags: NaFlags::from_wire(b[4]),
                target: target()?,
                lladdr: tgt_ll,
            },
        })
    }

    /// The ICMPv6 type of the message.
    pub fn kind(&self) -> u8 {
        match self {
            Self::RouterSolicit { .. } => kind::ROUTER_SOLICIT,
            Self::RouterAdvert { .. } => kind::ROUTER_ADVERT,
            Self::NeighborSolicit { .. } => kind::NEIGHBOR_SOLICIT,
            Self::NeighborAdvert { .. } => kind::NEIGHBOR_ADVERT,
        }
    }

    /// Length of the emitted message, options included.
    pub fn buffer_len(&self) -> usize {
        let ll = |l: &Option<Mac>| if l.is_some() { 8 } else { 0 };
        match self {
            Self::RouterSolicit { lladdr } => 8 + ll(lladdr),
            Self::RouterAdvert {
                lladdr,
                mtu,
                prefixes,
                ..
            } => 16 + ll(lladdr) + mtu.map_or(0, |_| 8) + 32 * prefixes.len(),
            Self::NeighborSolicit { lladdr, .. } | Self::NeighborAdvert { lladdr, .. } => {
                24 + ll(lladdr)
            }
        }
    }

    /// Writes the message (code 0, reserved fields zero, checksum zero) and its options
    /// (link-layer address first, then MTU, then prefixes) into the first
    /// [`buffer_len`](Self::buffer_len) bytes of `p`. The checksum needs the addresses: call
    /// [`Icmpv6Packet::fill_checksum`] on a view of exactly the message afterwards.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Icmpv6Packet<T>) {
        let len = self.buffer_len();
        let b = &mut p.buf.as_mut()[..len];
        b.fill(0);
        b[0] = self.kind();
        let mut at = match self {
            Self::RouterSolicit { lladdr } => {
                if let Some(m) = lladdr {
                    NdiscOption::SourceLinkLayerAddr(*m).emit(&mut b[8..]);
                }
                return;
            }
            Self::RouterAdvert {
                hop_limit,
                flags,
                router_lifetime,
                reachable_time,
                retrans_time,
                lladdr,
                ..
            } => {
                b[4] = *hop_limit;
                b[5] = flags.0;
                b[6..8].copy_from_slice(&router_lifetime.to_be_bytes());
                b[8..12].copy_from_slice(&reachable_time.to_be_bytes());
                b[12..16].copy_from_slice(&retrans_time.to_be_bytes());
                let mut at = 16;
                if let Some(m) = lladdr {
                    at += NdiscOption::SourceLinkLayerAddr(*m).emit(&mut b[at..]);
                }
                at
            }
            Self::NeighborSolicit { target, lladdr } => {
                b[8..24].copy_from_slice(&target.octets());
                if let Some(m) = lladdr {
                    NdiscOption::SourceLinkLayerAddr(*m).emit(&mut b[24..]);
                }
                return;
            }
            Self::NeighborAdvert {
                flags,
                target,
                lladdr,
            } => {
                b[4] = flags.0;
                b[8..24].copy_from_slice(&target.octets());
                if let Some(m) = lladdr {
                    NdiscOption::TargetLinkLayerAddr(*m).emit(&mut b[24..]);
                }
                return;
            }
        };
        if let Self::RouterAdvert { mtu, prefixes, .. } = self {
            if let Some(m) = mtu {
                at += NdiscOption::Mtu(*m).emit(&mut b[at..]);
            }
            for pi in prefixes {
                at += NdiscOption::PrefixInformation(*pi).emit(&mut b[at..]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LL1: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
    const LL2: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);
    const MAC1: Mac = Mac([2, 0xfe, 0, 0, 0, 1]);
    const MAC2: Mac = Mac([2, 0xfe, 0, 0, 0, 2]);
    /// ff02::1:ff00:2, the solicited-node group of fe80::2 (RFC 4291 §2.7.1).
    const SOLICITED: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 2);
    const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

    // The checksums of these fixtures were computed independently of this crate.

    /// Echo request fe80::1 -> fe80::2, id 0x1234, seq 1, data "abcd".
    const ECHO: [u8; 12] = [
        0x80, 0x00, 0xab, 0xb8, 0x12, 0x34, 0x00, 0x01, 0x61, 0x62, 0x63, 0x64,
    ];
    /// NS fe80::1 -> ff02::1:ff00:2 for fe80::2, source link-layer address 02:fe:00:00:00:01.
    const NS: [u8; 32] = [
        0x87, 0x00, 0x79, 0x99, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x01, 0x01, 0x02, 0xfe, 0x00, 0x00,
        0x00, 0x01,
    ];
    /// NA fe80::2 -> fe80::1, solicited + override, target fe80::2 at 02:fe:00:00:00:02.
    const NA: [u8; 32] = [
        0x88, 0x00, 0x17, 0x1c, 0x60, 0x00, 0x00, 0x00, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x01, 0x02, 0xfe, 0x00, 0x00,
        0x00, 0x02,
    ];
    /// RS fe80::2 -> ff02::2 with source link-layer address 02:fe:00:00:00:02.
    const RS: [u8; 16] = [
        0x85, 0x00, 0x79, 0x2c, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0xfe, 0x00, 0x00, 0x00,
        0x02,
    ];
    /// RA fe80::1 -> ff02::1: hop limit 64, O flag, lifetime 1800 s, source link-layer
    /// address, MTU 1500, prefix 2001:db8:1::/64 L+A valid 30 days preferred 7 days.
    const RA: [u8; 64] = [
        0x86, 0x00, 0xec, 0xaa, 0x40, 0x40, 0x07, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x01, 0x02, 0xfe, 0x00, 0x00, 0x00, 0x01, 0x05, 0x01, 0x00, 0x00, 0x00, 0x00,
        0x05, 0xdc, 0x03, 0x04, 0x40, 0xc0, 0x00, 0x27, 0x8d, 0x00, 0x00, 0x09, 0x3a, 0x80, 0x00,
        0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
    ];

    fn ra_repr() -> NdiscRepr {
        NdiscRepr::RouterAdvert {
            hop_limit: 64,
            flags: RaFlags::OTHER,
            router_lifetime: 1800,
            reachable_time: 0,
            retrans_time: 0,
            lladdr: Some(MAC1),
            mtu: Some(1500),
            prefixes: vec![PrefixInfo {
                prefix_len: 64,
                flags: PrefixFlags::ON_LINK | PrefixFlags::AUTONOMOUS,
                valid_lifetime: 2_592_000,
                preferred_lifetime: 604_800,
                prefix: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0),
            }],
        }
    }

    /// Emits `r`, fills the checksum between `src` and `dst`, and returns the bytes.
    fn emit(r: &NdiscRepr, src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let mut b = vec![0xa5u8; r.buffer_len()];
        let mut p = Icmpv6Packet::new_unchecked(&mut b[..]);
        r.emit(&mut p);
        p.fill_checksum(src, dst);
        b
    }

    #[test]
    fn echo_request_fixture() {
        let p = Icmpv6Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!((p.kind(), p.code()), (kind::ECHO_REQUEST, 0));
        assert_eq!((p.echo_ident(), p.echo_seq()), (0x1234, 1));
        assert_eq!(p.data(), b"abcd");
        assert_eq!(p.checksum(), 0xabb8);
        assert!(p.verify_checksum(LL1, LL2));
        assert!(!p.verify_checksum(LL1, LL1));
        assert_eq!(p.compute_checksum(LL1, LL2), 0xabb8);
        assert!(!kind::is_error(p.kind()));
        assert_eq!(p.ndisc_options().count(), 0);
        assert_eq!(
            NdiscRepr::parse(&p),
            Err(WireError::Malformed("not neighbor discovery"))
        );

        // Turn it into the reply (RFC 4443 §4.2: same identifier, sequence and data).
        let mut m = ECHO;
        let mut p = Icmpv6Packet::new_checked(&mut m[..]).unwrap();
        p.set_kind_code(kind::ECHO_REPLY, 0);
        assert!(!p.verify_checksum(LL2, LL1));
        p.fill_checksum(LL2, LL1);
        assert!(p.verify_checksum(LL2, LL1));
        p.set_echo_ident(7);
        p.set_echo_seq(8);
        p.data_mut()[0] = b'z';
        assert_eq!((p.echo_ident(), p.echo_seq(), p.data()[0]), (7, 8, b'z'));
        assert!(Icmpv6Packet::new_checked(&ECHO[..7]).is_err());
    }

    #[test]
    fn error_message_fields() {
        // Packet too big with MTU 1280 (RFC 4443 §3.2) and a param problem pointer (§3.4).
        let mut m = [0u8; 48];
        let mut p = Icmpv6Packet::new_checked(&mut m[..]).unwrap();
        p.set_kind_code(kind::PKT_TOO_BIG, 0);
        p.set_word(1280);
        p.fill_checksum(LL1, LL2);
        assert_eq!(p.mtu(), 1280);
        assert!(kind::is_error(p.kind()));
        assert!(p.verify_checksum(LL1, LL2));
        p.set_kind_code(kind::PARAM_PROBLEM, 1);
        p.set_word(40);
        assert_eq!(p.pointer(), 40);
        assert_eq!(kind::name(kind::PARAM_PROBLEM), Some("parameter_problem"));
        assert_eq!(kind::name(200), None);
    }

    #[test]
    fn neighbor_solicit_fixture() {
        let p = Icmpv6Packet::new_checked(&NS[..]).unwrap();
        assert!(p.verify_checksum(LL1, SOLICITED));
        let r = NdiscRepr::NeighborSolicit {
            target: LL2,
            lladdr: Some(MAC1),
        };
        assert_eq!(NdiscRepr::parse(&p), Ok(r.clone()));
        assert_eq!(emit(&r, LL1, SOLICITED), NS);
    }

    #[test]
    fn neighbor_advert_fixture() {
        let p = Icmpv6Packet::new_checked(&NA[..]).unwrap();
        assert!(p.verify_checksum(LL2, LL1));
        let r = NdiscRepr::NeighborAdvert {
            flags: NaFlags::SOLICITED | NaFlags::OVERRIDE,
            target: LL2,
            lladdr: Some(MAC2),
        };
        assert_eq!(NdiscRepr::parse(&p), Ok(r.clone()));
        assert_eq!(emit(&r, LL2, LL1), NA);
        if let Ok(NdiscRepr::NeighborAdvert { flags, .. }) = NdiscRepr::parse(&p) {
            assert!(flags.contains(NaFlags::SOLICITED) && !flags.contains(NaFlags::ROUTER));
        }
        // Reserved bits are ignored by the receiver (RFC 4861 §4.4).
        let mut m = NA;
        m[4] |= 0x1f;
        m[7] = 0xff;
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(NdiscRepr::parse(&p), Ok(r));
    }

    #[test]
    fn router_solicit_and_advert_fixtures() {
        let p = Icmpv6Packet::new_checked(&RS[..]).unwrap();
        assert!(p.verify_checksum(LL2, ALL_ROUTERS));
        let rs = NdiscRepr::RouterSolicit { lladdr: Some(MAC2) };
        assert_eq!(NdiscRepr::parse(&p), Ok(rs.clone()));
        assert_eq!(emit(&rs, LL2, ALL_ROUTERS), RS);

        let p = Icmpv6Packet::new_checked(&RA[..]).unwrap();
        assert!(p.verify_checksum(LL1, ALL_NODES));
        assert_eq!(NdiscRepr::parse(&p), Ok(ra_repr()));
        assert_eq!(emit(&ra_repr(), LL1, ALL_NODES), RA);
        let kinds: Vec<u8> = p
            .ndisc_options()
            .map(|o| match o.unwrap() {
                NdiscOption::SourceLinkLayerAddr(_) => 1,
                NdiscOption::PrefixInformation(_) => 3,
                NdiscOption::Mtu(_) => 5,
                _ => 0,
            })
            .collect();
        assert_eq!(kinds, [1, 5, 3]);
    }

    #[test]
    fn minimal_messages_without_options() {
        for r in [
            NdiscRepr::RouterSolicit { lladdr: None },
            NdiscRepr::NeighborSolicit {
                target: LL2,
                lladdr: None,
            },
            NdiscRepr::NeighborAdvert {
                flags: NaFlags::ROUTER,
                target: LL1,
                lladdr: None,
            },
            NdiscRepr::RouterAdvert {
                hop_limit: 0,
                flags: RaFlags::MANAGED | RaFlags::OTHER,
                router_lifetime: 0,
                reachable_time: 30_000,
                retrans_time: 1_000,
                lladdr: None,
                mtu: None,
                prefixes: Vec::new(),
            },
        ] {
            let b = emit(&r, LL1, ALL_NODES);
            assert_eq!(b.len(), r.buffer_len());
            let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
            assert!(p.verify_checksum(LL1, ALL_NODES));
            assert_eq!(NdiscRepr::parse(&p), Ok(r));
        }
    }

    #[test]
    fn malformed_options_are_errors() {
        // RFC 4861 §4.6: an option with length zero invalidates the packet.
        let mut m = NS;
        m[25] = 0;
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(
            NdiscRepr::parse(&p),
            Err(WireError::Malformed("ndisc option length"))
        );
        let mut it = p.ndisc_options();
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none(), "the iterator stops after an error");
        // An option running past the message.
        let mut m = NS;
        m[25] = 2;
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(NdiscRepr::parse(&p), Err(WireError::Truncated));
        // A lone option type byte.
        let mut m = NS.to_vec();
        m.push(1);
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(NdiscRepr::parse(&p), Err(WireError::Truncated));
        // A prefix option of the wrong length, and one with a prefix length over 128.
        let mut m = RA;
        m[33] = 3;
        let p = Icmpv6Packet::new_checked(&m[..56]).unwrap();
        assert_eq!(
            NdiscRepr::parse(&p),
            Err(WireError::Malformed("prefix information option"))
        );
        let mut m = RA;
        m[34] = 129;
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(
            NdiscRepr::parse(&p),
            Err(WireError::Malformed("prefix length"))
        );
        // A 16-byte link-layer address option is not Ethernet (RFC 2464 §8).
        let mut m = NS.to_vec();
        m[25] = 2;
        m.extend([0; 8]);
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(
            NdiscRepr::parse(&p),
            Err(WireError::Malformed("link-layer address option"))
        );
        let mut m = RA;
        m[25] = 2;
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(
            NdiscRepr::parse(&p),
            Err(WireError::Malformed("mtu option"))
        );
    }

    #[test]
    fn message_validation() {
        // Code must be 0 (RFC 4861 §7.1.1).
        let mut m = NS;
        m[1] = 1;
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(
            NdiscRepr::parse(&p),
            Err(WireError::Malformed("ndisc code"))
        );
        // Target must not be multicast (§7.1.1).
        let mut m = NS;
        m[8] = 0xff;
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(
            NdiscRepr::parse(&p),
            Err(WireError::Malformed("ndisc target"))
        );
        // NS shorter than 24 bytes (§7.1.1), RA shorter than 16 (§6.1.2).
        let p = Icmpv6Packet::new_checked(&NS[..23]).unwrap();
        assert_eq!(NdiscRepr::parse(&p), Err(WireError::Truncated));
        let p = Icmpv6Packet::new_checked(&RA[..15]).unwrap();
        assert_eq!(NdiscRepr::parse(&p), Err(WireError::Truncated));
        // Unknown options are skipped (§4.6), as are options that do not apply.
        let mut m = NS.to_vec();
        m.extend([25, 1, 0, 0, 0, 0, 0, 0]); // RDNSS-like, ignored
        m.extend([2, 1, 9, 9, 9, 9, 9, 9]); // target LL in an NS, ignored
        m.extend([1, 1, 8, 8, 8, 8, 8, 8]); // a second source LL: the first wins
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(
            NdiscRepr::parse(&p),
            Ok(NdiscRepr::NeighborSolicit {
                target: LL2,
                lladdr: Some(MAC1)
            })
        );
        let other: Vec<_> = p.ndisc_options().collect();
        assert_eq!(
            other[1],
            Ok(NdiscOption::Other {
                kind: 25,
                data: &[0; 6]
            })
        );
    }

    #[test]
    fn other_option_emit_pads() {
        let o = NdiscOption::Other {
            kind: 25,
            data: &[1, 2, 3, 4, 5, 6, 7],
        };
        assert_eq!(o.buffer_len(), 16);
        let mut b = [0xffu8; 16];
        assert_eq!(o.emit(&mut b), 16);
        assert_eq!(b, [25, 2, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0]);
        let mut it = NdiscOptions::new(&b);
        assert_eq!(
            it.next(),
            Some(Ok(NdiscOption::Other {
                kind: 25,
                data: &[1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0]
            }))
        );
        assert_eq!(it.next(), None);
    }

    proptest! {
        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..96), s: u128, d: u128) {
            if let Ok(p) = Icmpv6Packet::new_checked(&b[..]) {
                let _ = (p.verify_checksum(s.into(), d.into()), p.mtu(), p.data().len());
                for o in p.ndisc_options() {
                    let _ = o;
                }
                let _ = NdiscRepr::parse(&p);
            }
            for o in NdiscOptions::new(&b) {
                let _ = o;
            }
        }

        #[test]
        fn mutated_ra_never_panics(i in 0usize..64, v: u8, cut in 0usize..=64) {
            let mut m = RA;
            m[i] = v;
            if let Ok(p) = Icmpv6Packet::new_checked(&m[..cut]) {
                if let Ok(r) = NdiscRepr::parse(&p) {
                    prop_assert!(r.buffer_len() <= cut);
                }
            }
        }

        #[test]
        fn ns_na_round_trip(t: u128, mac: [u8; 6], flags: u8, with_ll: bool, src: u128, dst: u128) {
            let target = Ipv6Addr::from(t);
            prop_assume!(!target.is_multicast());
            let lladdr = with_ll.then_some(Mac(mac));
            for r in [
                NdiscRepr::NeighborSolicit { target, lladdr },
                NdiscRepr::NeighborAdvert { flags: NaFlags::from_wire(flags), target, lladdr },
            ] {
                let b = emit(&r, src.into(), dst.into());
                let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
                prop_assert!(p.verify_checksum(src.into(), dst.into()));
                prop_assert_eq!(NdiscRepr::parse(&p), Ok(r));
            }
        }
    }
}
