//! memif control messages (protocol version 2.0), wire-compatible with VPP, libmemif and
//! DPDK's net_memif.
//!
//! Every message is exactly [`MSG_SIZE`] (128) bytes: a little-endian `u16` type at offset 0
//! followed by a packed union. Layouts (offsets from the start of the message):
//!
//! | type | fields |
//! |---|---|
//! | HELLO (2) | name\[32\]@2, min_version u16@34, max_version u16@36, max_region u16@38, max_m2s_ring u16@40, max_s2m_ring u16@42, max_log2_ring_size u8@44 |
//! | INIT (3) | version u16@2, id u32@4, mode u8@8, secret\[24\]@9, name\[32\]@33 |
//! | ADD_REGION (4) | index u16@2, size u64@4 (+ the region fd via SCM_RIGHTS) |
//! | ADD_RING (5) | flags u16@2 (bit 0: S2M), index u16@4, region u16@6, offset u32@8, log2_ring_size u8@12, private_hdr_size u16@13 (+ the ring's eventfd) |
//! | CONNECT (6) / CONNECTED (7) | if_name\[32\]@2 |
//! | DISCONNECT (8) | code u32@2, string\[96\]@6 |
//!
//! Sluice extension (not in memif.h): INIT and CONNECTED may carry [`EXT_MAGIC`] at
//! [`EXT_AT`] followed by a `u32` of [`feature`] bits, in bytes that the message's union
//! leaves unused. VPP, libmemif and DPDK read only their fields and send zeros there, so to
//! them nothing changes; Sluice reads features only behind the magic (see `gso.rs`).
//!
//! The decoder never panics, whatever the 128 (or any other number of) bytes it is given.

/// Size of every control message.
pub const MSG_SIZE: usize = sluice_infra::seqpacket::MSG_SIZE;
/// Ring header cookie.
pub const COOKIE: u32 = 0x3E31F20;
/// Protocol version 2.0 = (2 << 8) | 0.
pub const VERSION: u16 = 2 << 8;
/// Length of name fields.
pub const NAME_SZ: usize = 32;
/// Length of the secret field.
pub const SECRET_SZ: usize = 24;
/// Length of the disconnect reason string.
pub const DISC_SZ: usize = 96;
/// ADD_RING flag: the ring carries packets slave -> master.
pub const RING_FLAG_S2M: u16 = 1;
/// Largest ring VPP accepts (log2).
pub const MAX_LOG2_RING_SIZE: u8 = 14;
/// Offset of the Sluice extension in INIT and CONNECTED (past every field of both).
pub const EXT_AT: usize = 120;
/// The extension's marker: "SLcx" little-endian, then the feature bits.
pub const EXT_MAGIC: u32 = u32::from_le_bytes(*b"SLcx");

/// Sluice extension feature bits (INIT: what the slave offers; CONNECTED: what the master
/// agreed to, a subset of the offer).
pub mod feature {
    /// GSO aggregates whole, described in descriptor metadata (`gso.rs`).
    pub const GSO: u32 = 1;
}

/// Message type codes.
pub mod ty {
    /// NONE.
    pub const NONE: u16 = 0;
    /// ACK.
    pub const ACK: u16 = 1;
    /// HELLO (master -> slave).
    pub const HELLO: u16 = 2;
    /// INIT (slave -> master).
    pub const INIT: u16 = 3;
    /// ADD_REGION (slave -> master, with fd).
    pub const ADD_REGION: u16 = 4;
    /// ADD_RING (slave -> master, with fd).
    pub const ADD_RING: u16 = 5;
    /// CONNECT (slave -> master).
    pub const CONNECT: u16 = 6;
    /// CONNECTED (master -> slave).
    pub const CONNECTED: u16 = 7;
    /// DISCONNECT (either way).
    pub const DISCONNECT: u16 = 8;
}

/// Interface mode carried in INIT.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Ethernet frames.
    Ethernet,
    /// IP packets (no L2 header).
    Ip,
    /// Punt/inject (not supported by Sluice; decoded for error messages).
    PuntInject,
}

impl Mode {
    /// Wire value.
    pub fn code(self) -> u8 {
        match self {
            Mode::Ethernet => 0,
            Mode::Ip => 1,
            Mode::PuntInject => 2,
        }
    }
    /// From the wire value.
    pub fn from_code(c: u8) -> Option<Mode> {
        match c {
            0 => Some(Mode::Ethernet),
            1 => Some(Mode::Ip),
            2 => Some(Mode::PuntInject),
            _ => None,
        }
    }
    /// Name as VPP prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Ethernet => "ethernet",
            Mode::Ip => "ip",
            Mode::PuntInject => "punt-inject",
        }
    }
}

/// HELLO: the master's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Application name.
    pub name: String,
    /// Lowest supported version.
    pub min_version: u16,
    /// Highest supported version.
    pub max_version: u16,
    /// Highest region index accepted.
    pub max_region: u16,
    /// Highest M2S ring index accepted.
    pub max_m2s_ring: u16,
    /// Highest S2M ring index accepted.
    pub max_s2m_ring: u16,
    /// Largest log2 ring size accepted.
    pub max_log2_ring_size: u8,
}

/// INIT: which interface the slave wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Init {
    /// Protocol version.
    pub version: u16,
    /// Interface id.
    pub id: u32,
    /// Mode (raw wire value: unknown values are reported, not rejected by the decoder).
    pub mode: u8,
    /// Secret (empty: none).
    pub secret: String,
    /// Slave's application name.
    pub name: String,
    /// Sluice extension: [`feature`] bits the slave offers (0 from other implementations).
    pub features: u32,
}

/// ADD_RING.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddRing {
    /// Raw flags ([`RING_FLAG_S2M`]).
    pub flags: u16,
    /// Ring index within its direction.
    pub index: u16,
    /// Region holding the ring.
    pub region: u16,
    /// Offset of the ring header in the region.
    pub offset: u32,
    /// log2 of the number of descriptors.
    pub log2_ring_size: u8,
    /// Private header size (unused, must be 0 for Sluice).
    pub private_hdr_size: u16,
}

impl AddRing {
    /// Whether the ring carries slave -> master packets.
    pub fn is_s2m(&self) -> bool {
        self.flags & RING_FLAG_S2M != 0
    }
}

/// A decoded control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// ACK.
    Ack,
    /// HELLO.
    Hello(Hello),
    /// INIT.
    Init(Init),
    /// ADD_REGION.
    AddRegion {
        /// Region index.
        index: u16,
        /// Region size in bytes.
        size: u64,
    },
    /// ADD_RING.
    AddRing(AddRing),
    /// CONNECT with the slave's interface name.
    Connect {
        /// Interface name.
        if_name: String,
    },
    /// CONNECTED with the master's interface name.
    Connected {
        /// Interface name.
        if_name: String,
        /// Sluice extension: [`feature`] bits the master agreed to (0 from others).
        features: u32,
    },
    /// DISCONNECT.
    Disconnect {
        /// Reason code.
        code: u32,
        /// Reason text.
        reason: String,
    },
}

/// Why a message could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// Not exactly 128 bytes.
    #[error("message of {0} bytes (expected 128)")]
    BadSize(usize),
    /// Type code unknown (or NONE).
    #[error("unknown message type {0}")]
    BadType(u16),
}

fn u16_at(b: &[u8; MSG_SIZE], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8; MSG_SIZE], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8; MSG_SIZE], o: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(x)
}
/// A fixed-size, possibly not NUL-terminated C string field.
fn str_at(b: &[u8; MSG_SIZE], o: usize, n: usize) -> String {
    let f = &b[o..o + n];
    let end = f.iter().position(|&c| c == 0).unwrap_or(n);
    String::from_utf8_lossy(&f[..end]).into_owned()
}
/// The Sluice extension's feature bits, 0 without its marker.
fn ext_at(b: &[u8; MSG_SIZE]) -> u32 {
    if u32_at(b, EXT_AT) == EXT_MAGIC {
        u32_at(b, EXT_AT + 4)
    } else {
        0
    }
}
/// Writes the extension when there are features to announce (else the bytes stay zero, as
/// every other implementation sends them).
fn put_ext(b: &mut [u8; MSG_SIZE], features: u32) {
    if features != 0 {
        b[EXT_AT..EXT_AT + 4].copy_from_slice(&EXT_MAGIC.to_le_bytes());
        b[EXT_AT + 4..EXT_AT + 8].copy_from_slice(&features.to_le_bytes());
    }
}
fn put_str(b: &mut [u8; MSG_SIZE], o: usize, n: usize, s: &str) {
    let bytes = s.as_bytes();
    let l = bytes.len().min(n);
    b[o..o + l].copy_from_slice(&bytes[..l]);
}

/// Decodes one message.
pub fn decode(bytes: &[u8]) -> Result<Msg, ProtoError> {
    let b: &[u8; MSG_SIZE] = bytes
        .try_into()
        .map_err(|_| ProtoError::BadSize(bytes.len()))?;
    Ok(match u16_at(b, 0) {
        ty::ACK => Msg::Ack,
        ty::HELLO => Msg::Hello(Hello {
            name: str_at(b, 2, NAME_SZ),
            min_version: u16_at(b, 34),
            max_version: u16_at(b, 36),
            max_region: u16_at(b, 38),
            max_m2s_ring: u16_at(b, 40),
            max_s2m_ring: u16_at(b, 42),
            max_log2_ring_size: b[44],
        }),
        ty::INIT => Msg::Init(Init {
            version: u16_at(b, 2),
            id: u32_at(b, 4),
            mode: b[8],
            secret: str_at(b, 9, SECRET_SZ),
            name: str_at(b, 33, NAME_SZ),
            features: ext_at(b),
        }),
        ty::ADD_REGION => Msg::AddRegion {
            index: u16_at(b, 2),
            size: u64_at(b, 4),
        },
        ty::ADD_RING => Msg::AddRing(AddRing {
            flags: u16_at(b, 2),
            index: u16_at(b, 4),
            region: u16_at(b, 6),
            offset: u32_at(b, 8),
            log2_ring_size: b[12],
            private_hdr_size: u16_at(b, 13),
        }),
        ty::CONNECT => Msg::Connect {
            if_name: str_at(b, 2, NAME_SZ),
        },
        ty::CONNECTED => Msg::Connected {
            if_name: str_at(b, 2, NAME_SZ),
            features: ext_at(b),
        },
        ty::DISCONNECT => Msg::Disconnect {
            code: u32_at(b, 2),
            reason: str_at(b, 6, DISC_SZ),
        },
        t => return Err(ProtoError::BadType(t)),
    })
}

/// Encodes one message (strings longer than their field are truncated).
pub fn encode(m: &Msg) -> [u8; MSG_SIZE] {
    let mut b = [0u8; MSG_SIZE];
    let put16 = |b: &mut [u8; MSG_SIZE], o: usize, v: u16| {
        b[o..o + 2].copy_from_slice(&v.to_le_bytes());
    };
    match m {
        Msg::Ack => put16(&mut b, 0, ty::ACK),
        Msg::Hello(h) => {
            put16(&mut b, 0, ty::HELLO);
            put_str(&mut b, 2, NAME_SZ, &h.name);
            put16(&mut b, 34, h.min_version);
            put16(&mut b, 36, h.max_version);
            put16(&mut b, 38, h.max_region);
            put16(&mut b, 40, h.max_m2s_ring);
            put16(&mut b, 42, h.max_s2m_ring);
            b[44] = h.max_log2_ring_size;
        }
        Msg::Init(i) => {
            put16(&mut b, 0, ty::INIT);
            put16(&mut b, 2, i.version);
            b[4..8].copy_from_slice(&i.id.to_le_bytes());
            b[8] = i.mode;
            put_str(&mut b, 9, SECRET_SZ, &i.secret);
            put_str(&mut b, 33, NAME_SZ, &i.name);
            put_ext(&mut b, i.features);
        }
        Msg::AddRegion { index, size } => {
            put16(&mut b, 0, ty::ADD_REGION);
            put16(&mut b, 2, *index);
            b[4..12].copy_from_slice(&size.to_le_bytes());
        }
        Msg::AddRing(r) => {
            put16(&mut b, 0, ty::ADD_RING);
            put16(&mut b, 2, r.flags);
            put16(&mut b, 4, r.index);
            put16(&mut b, 6, r.region);
            b[8..12].copy_from_slice(&r.offset.to_le_bytes());
            b[12] = r.log2_ring_size;
            put16(&mut b, 13, r.private_hdr_size);
        }
        Msg::Connect { if_name } => {
            put16(&mut b, 0, ty::CONNECT);
            put_str(&mut b, 2, NAME_SZ, if_name);
        }
        Msg::Connected { if_name, features } => {
            put16(&mut b, 0, ty::CONNECTED);
            put_str(&mut b, 2, NAME_SZ, if_name);
            put_ext(&mut b, *features);
        }
        Msg::Disconnect { code, reason } => {
            put16(&mut b, 0, ty::DISCONNECT);
            b[2..6].copy_from_slice(&code.to_le_bytes());
            put_str(&mut b, 6, DISC_SZ, reason);
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hello_layout_matches_memif_h() {
        let m = Msg::Hello(Hello {
            name: "VPP 24.02".into(),
            min_version: VERSION,
            max_version: VERSION,
            max_region: 255,
            max_m2s_ring: 255,
            max_s2m_ring: 255,
            max_log2_ring_size: 14,
        });
        let b = encode(&m);
        assert_eq!(&b[0..2], &[2, 0]);
        assert_eq!(&b[2..11], b"VPP 24.02");
        assert_eq!(&b[34..36], &[0, 2], "version 2.0 = 0x0200 little-endian");
        assert_eq!(&b[38..40], &[255, 0]);
        assert_eq!(b[44], 14);
        assert_eq!(decode(&b).unwrap(), m);
    }

    #[test]
    fn init_add_ring_disconnect_layouts() {
        let b = encode(&Msg::Init(Init {
            version: VERSION,
            id: 0x01020304,
            mode: 1,
            secret: "s3cret".into(),
            name: "sluice".into(),
            features: 0,
        }));
        assert_eq!(&b[0..2], &[3, 0]);
        assert!(
            b[65..].iter().all(|&x| x == 0),
            "no extension without features"
        );
        assert_eq!(&b[4..8], &[4, 3, 2, 1]);
        assert_eq!(b[8], 1);
        assert_eq!(&b[9..15], b"s3cret");
        assert_eq!(&b[33..39], b"sluice");
        let b = encode(&Msg::AddRing(AddRing {
            flags: RING_FLAG_S2M,
            index: 3,
            region: 0,
            offset: 0x1234,
            log2_ring_size: 10,
            private_hdr_size: 0,
        }));
        assert_eq!(
            &b[0..14],
            &[5, 0, 1, 0, 3, 0, 0, 0, 0x34, 0x12, 0, 0, 10, 0]
        );
        let b = encode(&Msg::Disconnect {
            code: 7,
            reason: "bye".into(),
        });
        assert_eq!(&b[0..9], &[8, 0, 7, 0, 0, 0, b'b', b'y', b'e']);
        let b = encode(&Msg::AddRegion {
            index: 1,
            size: 1 << 33,
        });
        assert_eq!(&b[0..12], &[4, 0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn bad_sizes_and_types_are_errors() {
        assert_eq!(decode(&[]), Err(ProtoError::BadSize(0)));
        assert_eq!(decode(&[1u8; 127]), Err(ProtoError::BadSize(127)));
        assert_eq!(decode(&[0u8; 128]), Err(ProtoError::BadType(0)));
        let mut b = [0u8; 128];
        b[0] = 9;
        assert_eq!(decode(&b), Err(ProtoError::BadType(9)));
        // Unterminated names take the whole field.
        let mut b = [b'x'; 128];
        b[0] = 6;
        b[1] = 0;
        assert_eq!(
            decode(&b),
            Ok(Msg::Connect {
                if_name: "x".repeat(32)
            })
        );
    }

    #[test]
    fn extension_sits_past_every_field_and_needs_its_marker() {
        // memif.h: INIT ends at 2 + 63 = 65, CONNECTED at 2 + 32 = 34.
        let init = Msg::Init(Init {
            version: VERSION,
            id: 7,
            mode: 0,
            secret: "x".repeat(24),
            name: "n".repeat(32),
            features: feature::GSO,
        });
        let b = encode(&init);
        assert!(b[65..EXT_AT].iter().all(|&x| x == 0));
        assert_eq!(&b[EXT_AT..EXT_AT + 8], b"SLcx\x01\0\0\0");
        assert_eq!(decode(&b).unwrap(), init);
        // A peer's garbage without the marker announces nothing.
        let mut b = encode(&Msg::Connected {
            if_name: "memif1/0".into(),
            features: 0,
        });
        b[EXT_AT + 4] = 1;
        assert_eq!(
            decode(&b).unwrap(),
            Msg::Connected {
                if_name: "memif1/0".into(),
                features: 0
            }
        );
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9/_.-]{0,32}"
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn decode_reencode_is_stable(bytes in proptest::array::uniform32(0u8..128), t in 0u16..10) {
            // ASCII names: non-UTF-8 names are decoded lossily, so they need not round-trip.
            let mut b = [0u8; 128];
            b[..32].copy_from_slice(&bytes);
            b[64..96].copy_from_slice(&bytes);
            b[0..2].copy_from_slice(&t.to_le_bytes());
            if let Ok(m) = decode(&b) {
                prop_assert_eq!(decode(&encode(&m)), Ok(m));
            }
        }

        #[test]
        fn roundtrip(n in name(), s in "[a-z0-9]{0,24}", id in any::<u32>(), mode in 0u8..3,
                     idx in any::<u16>(), off in any::<u32>(), l2 in any::<u8>(), size in any::<u64>(),
                     code in any::<u32>(), why in "[ -~]{0,96}") {
            let msgs = [
                Msg::Ack,
                Msg::Hello(Hello { name: n.clone(), min_version: idx, max_version: idx ^ 1, max_region: idx,
                    max_m2s_ring: idx, max_s2m_ring: !idx, max_log2_ring_size: l2 }),
                Msg::Init(Init { version: VERSION, id, mode, secret: s.clone(), name: n.clone(), features: off }),
                Msg::AddRegion { index: idx, size },
                Msg::AddRing(AddRing { flags: idx, index: idx, region: !idx, offset: off, log2_ring_size: l2, private_hdr_size: idx }),
                Msg::Connect { if_name: n.clone() },
                Msg::Connected { if_name: n.clone(), features: off },
                Msg::Disconnect { code, reason: why.clone() },
            ];
            for m in msgs {
                prop_assert_eq!(decode(&encode(&m)), Ok(m));
            }
        }
    }
}
