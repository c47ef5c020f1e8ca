//! The 128-byte buffer header (VPP's `vlib_buffer_t` metadata).
//!
//! Hot fields sit in the first cache line; per-layer metadata is typed and owned by the layer
//! named in its doc comment (docs/architecture.md, "Buffers").

/// Index of a buffer in the arena. Buffers are never owned `Vec<u8>`s.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct BufIdx(pub u32);

/// Bits of [`BufferHeader::flags`].
pub mod flags {
    /// `next_buffer` is valid: this buffer is followed by another one in a chain.
    pub const NEXT_PRESENT: u32 = 1 << 0;
    /// `total_length_not_including_first_buffer` is valid (set on chain heads).
    pub const TOTAL_LENGTH_VALID: u32 = 1 << 1;
    /// The packet is being traced; `trace_index` is valid.
    pub const TRACED: u32 = 1 << 2;
    /// The packet was selected for rx pcap capture.
    pub const PCAP_RX: u32 = 1 << 3;
    /// The L4 checksum is known correct (e.g. offloaded by the driver).
    pub const L4_CHECKSUM_CORRECT: u32 = 1 << 4;
    /// The L4 checksum still has to be computed before transmit.
    pub const OFFLOAD_L4_CKSUM: u32 = 1 << 5;
    /// A bridge domain switched the frame to its BVI: `ethernet-input` processes it as L3 on
    /// `rx_if` (the BVI) instead of handing it back to the bridge.
    pub const L2_TO_BVI: u32 = 1 << 6;
    /// Built by this router (echo reply, ICMP error, CLI ping): `ip4-rewrite`/`ip6-rewrite`
    /// send it with the TTL/hop limit it was given instead of decrementing it.
    pub const LOCALLY_ORIGINATED: u32 = 1 << 7;
    /// `tx_sub_if` and `tx_sub_tags` are valid: `interface-output` sent the packet on a VLAN
    /// sub-interface (and pointed `tx_if` at the parent).
    pub const TX_SUB: u32 = 1 << 8;
    /// The packet is a GSO aggregate (a TCP/UDP super-packet a driver kept whole): the
    /// [`super::BufferHeader`] `gso_*` fields are valid, and the L4 checksum is partial
    /// (`OFFLOAD_L4_CKSUM`). Owned by `vnet`'s offload code (`sluice_vnet::offload`): nodes
    /// that send single segments cut it there.
    pub const GSO: u32 = 1 << 9;
    /// `rx_tsc` is valid: the input node stamped the receive time.
    pub const RX_TSC: u32 = 1 << 10;
}

/// Interface index as stored in buffer metadata (`sw_if_index` in VPP).
pub type IfIndex = u32;

/// L2 metadata, owned by `vnet` L2 nodes (bridge domain, learning, VLAN tags).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct L2Meta {
    /// Offset of the L2 header relative to the data start.
    pub l2_hdr_offset: i16,
    /// Number of VLAN tags seen by ethernet-input.
    pub vlan_tags: u8,
    /// Split-horizon group of the rx interface.
    pub shg: u8,
    /// Bridge domain index.
    pub bd_index: u16,
    /// Reserved for L2 features.
    pub feature_bitmap: u16,
}

/// IP metadata, owned by `vnet` IP nodes and the FIB.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct IpMeta {
    /// Reserved: the two bytes of the former `l3_hdr_offset`, kept so the layout does not
    /// move. Nothing set that field on the main path (`ethernet-input`), and with no
    /// validity flag (VPP's `L3_HDR_OFFSET_VALID`) a reader would have got the L2 header's
    /// offset without notice; the IP nodes find the L3 header at `current_data`. A node
    /// that needs an L3 offset kept across nodes must add a field and set it on every
    /// path into itself.
    _reserved0: i16,
    /// Offset of the L4 header relative to the data start.
    pub l4_hdr_offset: i16,
    /// FIB table index for the lookup.
    pub fib_index: u32,
    /// Adjacency (or load-balance) index resolved by the lookup.
    pub adj_index: u32,
    /// 5-tuple flow hash, 0 when not computed.
    pub flow_hash: u32,
}

/// The per-buffer metadata header: exactly 128 bytes, two cache lines.
///
/// `current_data` is the offset of the first packet byte relative to the start of the data
/// area; it may be negative down to `-(headroom)` after headers were pushed into the headroom.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct BufferHeader {
    // ---- cache line 0: hot ----
    /// Packet start relative to the data area (may point into headroom).
    pub current_data: i16,
    /// Bytes of packet in this buffer from `current_data`.
    pub current_length: u16,
    /// [`flags`] bits.
    pub flags: u32,
    /// Next buffer of a chain, valid when `flags::NEXT_PRESENT` is set.
    pub next_buffer: u32,
    /// Error code (graph-wide error index) set by a node before sending the packet to `error-drop`.
    pub error: u16,
    /// Feature-arc cursor: position of the next feature on the current arc.
    pub feature_cursor: u8,
    /// Buffer pool this buffer belongs to.
    pub pool_index: u8,
    /// Interface the packet arrived on.
    pub rx_if: IfIndex,
    /// Interface to send the packet out of (set by rewrite / l2 nodes).
    pub tx_if: IfIndex,
    /// Bytes in the rest of the chain, valid when `flags::TOTAL_LENGTH_VALID` is set.
    pub total_length_not_including_first_buffer: u32,
    /// Index of the packet's trace record, valid when `flags::TRACED` is set.
    pub trace_index: u32,
    /// L2 layer metadata.
    pub l2: L2Meta,
    /// IP layer metadata.
    pub ip: IpMeta,
    /// Thread that owns a flow (handoff target), set by handoff nodes.
    pub handoff_thread: u16,
    /// GSO aggregate (`flags::GSO`): payload bytes per segment (the sender's MSS).
    pub gso_size: u16,
    /// GSO aggregate: the kind, as `virtio_net_hdr.gso_type` (`sluice_vnet::offload::gso_type`).
    pub gso_type: u8,
    /// GSO aggregate: offset of the L4 header from the L3 header (IP header bytes), so the
    /// offsets survive L2 rewrites.
    pub gso_l4_offset: u8,
    /// GSO aggregate: L4 header bytes of each segment (TCP with options, or 8 for UDP).
    pub gso_l4_hdr_len: u8,
    // Free (the L4 checksum position is parsed from the packet where it is needed).
    _pad0: u8,
    // 64 bytes so far.
    // ---- cache line 1: colder, not reset on allocation ([`BufferHeader::reset`]) ----
    /// Opaque words for features (ACL, NAT, policer) — each feature documents its use.
    pub feature_meta: [u64; 6],
    /// Timestamp (TSC) set by input nodes that know the receive time, valid with
    /// `flags::RX_TSC`.
    pub rx_tsc: u64,
    /// The VLAN sub-interface the packet was counted as sent on, valid with
    /// `flags::TX_SUB` (owned by `vnet`'s `interface-output`): a tx node that cannot send the
    /// packet corrects that interface's tx counters too.
    pub tx_sub_if: IfIndex,
    /// Bytes of VLAN tags `interface-output` pushed for that sub-interface (4 or 8).
    pub tx_sub_tags: u8,
    _pad1: [u8; 3],
}

const _: () = assert!(core::mem::size_of::<BufferHeader>() == 128);
const _: () = assert!(core::mem::align_of::<BufferHeader>() == 64);
/// Bytes [`BufferHeader::reset`] writes: the first cache line.
const HOT_BYTES: usize = core::mem::offset_of!(BufferHeader, feature_meta);
const _: () = assert!(HOT_BYTES == 64);

impl BufferHeader {
    /// A freshly allocated buffer's header.
    pub const TEMPLATE: BufferHeader = BufferHeader {
        current_data: 0,
        current_length: 0,
        flags: 0,
        next_buffer: 0,
        error: 0,
        feature_cursor: 0,
        pool_index: 0,
        rx_if: 0,
        tx_if: 0,
        total_length_not_including_first_buffer: 0,
        trace_index: 0,
        l2: L2Meta {
            l2_hdr_offset: 0,
            vlan_tags: 0,
            shg: 0,
            bd_index: 0,
            feature_bitmap: 0,
        },
        ip: IpMeta {
            _reserved0: 0,
            l4_hdr_offset: 0,
            fib_index: 0,
            adj_index: 0,
            flow_hash: 0,
        },
        handoff_thread: 0,
        gso_size: 0,
        gso_type: 0,
        gso_l4_offset: 0,
        gso_l4_hdr_len: 0,
        _pad0: 0,
        feature_meta: [0; 6],
        rx_tsc: 0,
        tx_sub_if: 0,
        tx_sub_tags: 0,
        _pad1: [0; 3],
    };

    /// Makes a freshly allocated buffer's header [`Self::TEMPLATE`] as far as anyone can tell:
    /// writes the first cache line only. The second one keeps what its last user left, which
    /// is never read: each of its fields is either valid only under a flag of the first line
    /// (`tx_sub_*`: `TX_SUB`, `rx_tsc`: `RX_TSC`) or written before it is read by the node
    /// that owns it (`feature_meta`). So an allocation neither writes nor fetches a second
    /// line (VPP's buffer template likewise covers the first line only). A field added to
    /// the second line must follow the same rule.
    #[inline(always)]
    pub fn reset(&mut self) {
        self.reset_from(&Self::TEMPLATE)
    }

    /// Makes the header `template` as far as anyone can tell, as [`Self::reset`] does with
    /// [`Self::TEMPLATE`]: copies the first cache line only (one 64-byte copy). An input
    /// node initialises the buffers of [`crate::BufferCache::alloc_raw`] with it from a
    /// template that already carries what every packet of the burst shares (VPP's
    /// `vlib_buffer_copy_template`), e.g. `TEMPLATE` with its `rx_if`.
    #[inline(always)]
    pub fn reset_from(&mut self, template: &BufferHeader) {
        // SAFETY: both point to live headers (`self` exclusively borrowed, so distinct from
        // `template`) and the first HOT_BYTES bytes are plain integers with no invariant;
        // an untyped byte copy also carries the template's padding as it is.
        unsafe {
            core::ptr::copy_nonoverlapping(
                template as *const Self as *const u8,
                self as *mut Self as *mut u8,
                HOT_BYTES,
            )
        }
    }

    /// The next buffer of the chain, if any.
    #[inline(always)]
    pub fn next(&self) -> Option<BufIdx> {
        if self.flags & flags::NEXT_PRESENT != 0 {
            Some(BufIdx(self.next_buffer))
        } else {
            None
        }
    }

    /// Bytes in the rest of the chain (0 for a single buffer).
    #[inline(always)]
    pub fn chain_rest_len(&self) -> u32 {
        if self.flags & flags::TOTAL_LENGTH_VALID != 0 {
            self.total_length_not_including_first_buffer
        } else {
            0
        }
    }

    /// Total packet length including chained buffers.
    #[inline(always)]
    pub fn total_len(&self) -> usize {
        self.current_length as usize + self.chain_rest_len() as usize
    }

    /// Whether the packet is traced.
    #[inline(always)]
    pub fn is_traced(&self) -> bool {
        self.flags & flags::TRACED != 0
    }
}

impl Default for BufferHeader {
    fn default() -> Self {
        Self::TEMPLATE
    }
}
