//! AF_PACKET sockets and their PACKET_MMAP rings: the only `unsafe` code of the driver.
//!
//! - rx: one socket per rx queue, `TPACKET_V3` block ring (default). The kernel fills a block
//!   with packets and hands it to user space by setting `TP_STATUS_USER` in the block header
//!   (when the block is full or when the retire timer fires); user space gives it back with
//!   `TP_STATUS_KERNEL`. Or (`v2`) a `TPACKET_V2` frame ring: one packet per frame, each
//!   handed over on its own (`TP_STATUS_USER` in the frame header, and a socket wake-up per
//!   packet), so no packet waits for a block timer; a frame too small for its packet (a GSO
//!   aggregate) carries `TP_STATUS_COPY` and the whole packet waits in the socket's receive
//!   queue (`PACKET_COPY_THRESH`), read with `recv`. A block or frame owned by user space is
//!   exposed as one byte slice ([`UserBlock::bytes`]) and parsed with safe, bounds-checked
//!   code: a corrupt header can make the parser skip packets, never read outside the ring.
//! - tx: one socket per tx queue, `TPACKET_V2` frame ring, bound with protocol 0 so it
//!   receives nothing. A frame whose status is `TP_STATUS_AVAILABLE` belongs to user space;
//!   we copy a packet in, set `TP_STATUS_SEND_REQUEST`, and one `sendto(fd, NULL, 0,
//!   MSG_DONTWAIT)` per batch makes the kernel send every requested frame. The kernel walks
//!   the ring from its own head, which follows ours: it stops at the first frame it cannot
//!   send (device or qdisc full: ENOBUFS, that frame stays requested; send buffer full:
//!   EAGAIN or a short count), so the frames left are the contiguous run just before our
//!   head. A kick that leaves frames makes the queue pending ([`sluice_vnet::devices::linux::KickState`]);
//!   given up frames go back to `TP_STATUS_AVAILABLE` and our head back to the first of
//!   them, where the kernel's head stands.
//!
//! - GSO aggregates (buffer flag `GSO`): one more socket per tx queue, without a ring, with
//!   `PACKET_VNET_HDR`; each aggregate is one `sendmsg` of its `virtio_net_hdr` and its
//!   buffers, and the kernel (or the NIC) cuts it.
//!
//! Constants and header layouts are those of `<linux/if_packet.h>` (stable kernel ABI).

use sluice_vnet::devices::linux::{
    os_err, setsockopt, KickRing, KickState, Mmap, SpinGuard, SpinLock, TxKick,
};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

const SOL_PACKET: libc::c_int = 263;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_COPY_THRESH: libc::c_int = 7;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_LOSS: libc::c_int = 14;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V2: libc::c_int = 1;
const TPACKET_V3: libc::c_int = 2;
const PACKET_FANOUT_HASH: u32 = 0;
const PACKET_FANOUT_FLAG_DEFRAG: u32 = 0x8000;
const ETH_P_ALL: u16 = 0x0003;

/// `sll_pkttype` of a packet this host sent (seen by taps when the qdisc is not bypassed).
pub const PACKET_OUTGOING: u8 = 4;

/// Status bits (`tp_status`, `block_status`).
pub mod status {
    /// rx: owned by the kernel.
    pub const KERNEL: u32 = 0;
    /// rx: owned by user space.
    pub const USER: u32 = 1 << 0;
    /// rx (V2): the frame holds only the head of the packet; the whole packet is the next
    /// one in the socket's receive queue.
    pub const COPY: u32 = 1 << 1;
    /// rx: the kernel dropped packets since the last stats read.
    pub const LOSING: u32 = 1 << 2;
    /// rx: the L4 checksum is partial (`CHECKSUM_PARTIAL`, e.g. from a veth peer).
    pub const CSUMNOTREADY: u32 = 1 << 3;
    /// rx: `tp_vlan_tci` holds a VLAN tag the kernel stripped.
    pub const VLAN_VALID: u32 = 1 << 4;
    /// rx: `tp_vlan_tpid` is valid.
    pub const VLAN_TPID_VALID: u32 = 1 << 6;
    /// tx: owned by user space.
    pub const AVAILABLE: u32 = 0;
    /// tx: to be sent by the kernel.
    pub const SEND_REQUEST: u32 = 1 << 0;
    /// tx: being sent.
    pub const SENDING: u32 = 1 << 1;
    /// tx: the kernel rejected the frame.
    pub const WRONG_FORMAT: u32 = 1 << 2;
}

/// `struct tpacket_block_desc` offsets (V3 block header).
pub mod block {
    /// `hdr.bh1.block_status` (u32).
    pub const STATUS: usize = 8;
    /// `hdr.bh1.num_pkts` (u32).
    pub const NUM_PKTS: usize = 12;
    /// `hdr.bh1.offset_to_first_pkt` (u32).
    pub const FIRST: usize = 16;
    /// Size of the block header.
    pub const HDR_LEN: usize = 48;
}

/// `struct tpacket3_hdr` offsets (V3 packet header) and the `sockaddr_ll` behind it.
pub mod pkt3 {
    /// `tp_next_offset` (u32).
    pub const NEXT: usize = 0;
    /// `tp_sec` (u32): kernel receive time, `CLOCK_REALTIME` seconds.
    pub const SEC: usize = 4;
    /// `tp_nsec` (u32): its nanoseconds.
    pub const NSEC: usize = 8;
    /// `tp_snaplen` (u32).
    pub const SNAPLEN: usize = 12;
    /// `tp_len` (u32).
    pub const LEN: usize = 16;
    /// `tp_status` (u32).
    pub const STATUS: usize = 20;
    /// `tp_mac` (u16): offset of the frame from the header.
    pub const MAC: usize = 24;
    /// `hv1.tp_vlan_tci` (u32).
    pub const VLAN_TCI: usize = 32;
    /// `hv1.tp_vlan_tpid` (u16).
    pub const VLAN_TPID: usize = 36;
    /// `sockaddr_ll.sll_pkttype` (u8), after the 48-byte aligned header.
    pub const PKTTYPE: usize = 48 + 10;
    /// Header plus `sockaddr_ll` (`TPACKET3_HDRLEN`).
    pub const HDR_LEN: usize = 48 + 20;
}

/// `struct tpacket2_hdr`: data of a tx frame starts at `TPACKET2_HDRLEN - sizeof(sockaddr_ll)`.
pub mod pkt2 {
    /// `tp_status` (u32).
    pub const STATUS: usize = 0;
    /// `tp_len` (u32).
    pub const LEN: usize = 4;
    /// `tp_snaplen` (u32).
    pub const SNAPLEN: usize = 8;
    /// `tp_mac` (u16): offset of the frame from the header.
    pub const MAC: usize = 12;
    /// `tp_sec` (u32): kernel receive time, `CLOCK_REALTIME` seconds.
    pub const SEC: usize = 16;
    /// `tp_nsec` (u32).
    pub const NSEC: usize = 20;
    /// `tp_vlan_tci` (u16).
    pub const VLAN_TCI: usize = 24;
    /// `tp_vlan_tpid` (u16).
    pub const VLAN_TPID: usize = 26;
    /// `sockaddr_ll.sll_pkttype` (u8), after the 32-byte aligned header.
    pub const PKTTYPE: usize = 32 + 10;
    /// Header plus `sockaddr_ll` (`TPACKET2_HDRLEN`).
    pub const HDR_LEN: usize = 32 + 20;
    /// Offset of the frame data in a tx ring frame.
    pub const DATA: usize = 32;
}

fn packet_socket() -> io::Result<OwnedFd> {
    // Protocol 0: nothing is received until `bind` names a protocol (the rings are set up
    // first, so no packet is queued to a ring-less socket).
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        let hint = if e.kind() == io::ErrorKind::PermissionDenied {
            " (needs root or CAP_NET_RAW)"
        } else {
            ""
        };
        return Err(io::Error::new(
            e.kind(),
            format!("cannot open AF_PACKET socket: {e}{hint}"),
        ));
    }
    // SAFETY: `fd` is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn bind(fd: RawFd, ifindex: u32, protocol: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
    let r = unsafe {
        libc::bind(
            fd,
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(os_err("bind"));
    }
    Ok(())
}

/// rx ring geometry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RxGeometry {
    /// Bytes per block (a multiple of the page size).
    pub block_size: usize,
    /// Number of blocks.
    pub block_nr: usize,
    /// V3: frame size used for the kernel's frame accounting. V2: bytes per frame (header
    /// included; a packet that does not fit is read from the socket, see [`status::COPY`]).
    pub frame_size: usize,
    /// V3: block retire timeout (ms), the longest a packet waits in a partly filled block.
    pub retire_ms: u32,
    /// A `TPACKET_V2` frame ring instead of V3 blocks.
    pub v2: bool,
}

impl Default for RxGeometry {
    /// V3: 32 blocks of 256 KiB. A block must hold a whole 64 KiB GSO aggregate plus its
    /// headers, so blocks cannot be made small enough to fill within the 1 ms retire timeout
    /// at moderate rates (a 128 KiB block holds ~800 64-byte frames); the `v2` ring is the
    /// low-latency choice (docs/interfaces.md, "rx latency").
    fn default() -> Self {
        RxGeometry {
            block_size: 256 << 10,
            block_nr: 32,
            frame_size: 2048,
            retire_ms: 1,
            v2: false,
        }
    }
}

impl RxGeometry {
    /// V2: frames large enough for an Ethernet frame of `mtu` bytes of payload, two VLAN
    /// tags, the `virtio_net_hdr` and the frame header (2 KiB at 1500), 8 MiB in all (4096
    /// frames at 2 KiB), 64 KiB blocks.
    pub fn v2_for_mtu(mtu: u32) -> RxGeometry {
        let need = mtu as usize + 14 + 8 + 10 + 96;
        let frame_size = need.next_power_of_two().clamp(2048, 64 << 10);
        let block_size = frame_size.max(64 << 10);
        RxGeometry {
            block_size,
            block_nr: (8 << 20) / block_size,
            frame_size,
            retire_ms: 0,
            v2: true,
        }
    }

    /// Frames per block (V2).
    fn frames_per_block(&self) -> usize {
        self.block_size / self.frame_size
    }

    /// Ring slots user space walks: blocks (V3) or frames (V2).
    pub fn slots(&self) -> usize {
        if self.v2 {
            self.block_nr * self.frames_per_block()
        } else {
            self.block_nr
        }
    }

    /// Bytes of one slot.
    pub fn slot_size(&self) -> usize {
        if self.v2 {
            self.frame_size
        } else {
            self.block_size
        }
    }

    /// Offset of the status word of slot `i` (V3: `block_status`; V2: `tp_status`).
    fn status_at(&self, i: usize) -> usize {
        if self.v2 {
            i * self.frame_size + pkt2::STATUS
        } else {
            i * self.block_size + block::STATUS
        }
    }
}

/// Kernel statistics of an rx socket, accumulated (the kernel resets them on each read).
#[derive(Default, Debug)]
pub struct RxStats {
    /// Packets the kernel queued to the ring.
    pub packets: AtomicU64,
    /// Packets the kernel dropped because the ring was full.
    pub drops: AtomicU64,
}

/// One rx queue: a TPACKET_V3 socket and its mapped block ring, or a TPACKET_V2 socket and
/// its frame ring.
pub struct RxRing {
    map: Mmap,
    fd: OwnedFd,
    geo: RxGeometry,
    vnet: bool,
    /// Kernel counters read so far.
    pub stats: RxStats,
}

/// A block (V3) or frame (V2) owned by user space. Dropping it keeps it (to resume parsing
/// later); [`UserBlock::release`] hands it back to the kernel.
pub struct UserBlock<'a> {
    ring: &'a RxRing,
    index: usize,
    bytes: &'a [u8],
}

impl<'a> UserBlock<'a> {
    /// The whole block or frame (header included): `slot_size` bytes.
    pub fn bytes(&self) -> &[u8] {
        self.bytes
    }

    /// Gives the block back to the kernel.
    pub fn release(self) {
        let UserBlock { ring, index, bytes } = self;
        let _ = bytes; // no reference into the block survives past this point
        if let Some(s) = ring.map.atomic_u32(ring.geo.status_at(index)) {
            s.store(status::KERNEL, Ordering::Release);
        }
    }
}

impl RxRing {
    /// Opens an rx queue on `ifindex`: TPACKET_V3 ring (V2 with `geo.v2`), bound to all
    /// protocols, outgoing packets ignored, joined to fanout group `fanout` (hash, with
    /// defragmentation) if given.
    /// With `vnet_hdr`, each frame is preceded by a `virtio_net_hdr` describing GSO
    /// aggregates (kernels without ring support for it: silently off, see
    /// [`RxRing::vnet_hdr`]).
    pub fn open(
        ifindex: u32,
        geo: RxGeometry,
        fanout: Option<u16>,
        vnet_hdr: bool,
    ) -> io::Result<RxRing> {
        let fd = packet_socket()?;
        let raw = fd.as_raw_fd();
        let (version, what) = if geo.v2 {
            (TPACKET_V2, "PACKET_VERSION V2")
        } else {
            (TPACKET_V3, "PACKET_VERSION V3")
        };
        setsockopt(raw, SOL_PACKET, PACKET_VERSION, &version, what)?;
        let vnet = vnet_hdr
            && setsockopt(raw, SOL_PACKET, PACKET_VNET_HDR, &1i32, "PACKET_VNET_HDR").is_ok();
        let frame_nr = (geo.block_size / geo.frame_size * geo.block_nr) as u32;
        let req: [u32; 7] = [
            geo.block_size as u32,
            geo.block_nr as u32,
            geo.frame_size as u32,
            frame_nr,
            geo.retire_ms,
            0, // tp_sizeof_priv
            0, // tp_feature_req_word
        ];
        if geo.v2 {
            // struct tpacket_req: the first four words.
            let req2: [u32; 4] = [req[0], req[1], req[2], req[3]];
            setsockopt(raw, SOL_PACKET, PACKET_RX_RING, &req2, "PACKET_RX_RING")?;
            // Packets larger than a frame (GSO aggregates) are also queued whole to the
            // socket; room for a few dozen 64 KiB aggregates.
            setsockopt(
                raw,
                SOL_PACKET,
                PACKET_COPY_THRESH,
                &1i32,
                "PACKET_COPY_THRESH",
            )?;
            sluice_vnet::devices::linux::set_rcvbuf(raw, 4 << 20);
        } else {
            setsockopt(raw, SOL_PACKET, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
        }
        let map = Mmap::new(
            raw,
            geo.block_size * geo.block_nr,
            0,
            "mmap of the packet ring",
        )?;
        // Packets this host sends on the interface are not input (Linux >= 4.20; older
        // kernels: the input node also filters on sll_pkttype).
        let _ = setsockopt(
            raw,
            SOL_PACKET,
            PACKET_IGNORE_OUTGOING,
            &1i32,
            "ignore outgoing",
        );
        bind(raw, ifindex, ETH_P_ALL)?;
        if let Some(id) = fanout {
            let arg: u32 = id as u32 | ((PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_DEFRAG) << 16);
            setsockopt(raw, SOL_PACKET, PACKET_FANOUT, &arg, "PACKET_FANOUT")?;
        }
        Ok(RxRing {
            map,
            fd,
            geo,
            vnet,
            stats: RxStats::default(),
        })
    }

    /// Puts the interface in promiscuous mode for as long as this socket is open.
    pub fn set_promiscuous(&self, ifindex: u32) -> io::Result<()> {
        sluice_vnet::devices::linux::add_promiscuous(self.fd.as_raw_fd(), ifindex)
    }

    /// Whether frames are preceded by a `virtio_net_hdr`.
    pub fn vnet_hdr(&self) -> bool {
        self.vnet
    }

    /// Ring geometry.
    pub fn geometry(&self) -> RxGeometry {
        self.geo
    }

    /// The socket.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Whether slot `b` (block, or V2 frame) is owned by user space (packets ready).
    #[inline(always)]
    pub fn ready(&self, b: usize) -> bool {
        self.map
            .atomic_u32(self.geo.status_at(b))
            .is_some_and(|s| s.load(Ordering::Acquire) & status::USER != 0)
    }

    /// Slot `b` (block, or V2 frame) if user space owns it.
    #[inline]
    pub fn user_block(&self, b: usize) -> Option<UserBlock<'_>> {
        if b >= self.geo.slots() {
            return None;
        }
        let size = self.geo.slot_size();
        let off = b * size;
        let st = self.map.atomic_u32(self.geo.status_at(b))?;
        if st.load(Ordering::Acquire) & status::USER == 0 {
            return None;
        }
        // SAFETY: `off + size <= map.len` (b < slots; V2 blocks are a whole number of
        // frames, so frame b starts at b * frame_size). The kernel does not write a block or
        // frame while its status says user space owns it (the Acquire load above orders our
        // reads after the kernel's writes), and we hand it back only through
        // `UserBlock::release`, which consumes the slice's owner.
        let bytes = unsafe { std::slice::from_raw_parts(self.map.ptr().add(off), size) };
        Some(UserBlock {
            ring: self,
            index: b,
            bytes,
        })
    }

    /// V2: reads the next packet of the socket's receive queue (the whole packet of a
    /// [`status::COPY`] frame, behind its `virtio_net_hdr` when [`RxRing::vnet_hdr`]) into
    /// `buf`, without waiting. Returns its length (`buf` may have been too small: compare).
    pub fn recv_copy(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is writable for `buf.len()` bytes; MSG_TRUNC only changes the
        // returned length.
        let r = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if r < 0 {
            return Err(os_err("recv"));
        }
        Ok(r as usize)
    }

    /// Reads (and resets) the kernel counters, accumulating them into [`RxRing::stats`].
    pub fn update_stats(&self) -> io::Result<()> {
        // tpacket_stats_v3 (tp_packets, tp_drops, tp_freeze_q_cnt); a V2 ring gets the shorter
        // tpacket_stats, whose first two fields are the same.
        let mut st = [0u32; 3];
        let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
        // SAFETY: `st` is writable for `len` bytes; `len` is updated by the kernel.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                st.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            )
        };
        if r != 0 {
            return Err(os_err("PACKET_STATISTICS"));
        }
        self.stats
            .packets
            .fetch_add(st[0] as u64, Ordering::Relaxed);
        self.stats.drops.fetch_add(st[1] as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// tx ring geometry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TxGeometry {
    /// Bytes per frame (header + data), a power of two.
    pub frame_size: usize,
    /// Number of frames.
    pub frame_nr: usize,
}

impl TxGeometry {
    /// Frames large enough for an Ethernet frame of `mtu` bytes of payload plus two VLAN
    /// tags, 4096 of them: a sent frame stays held until the receiver frees its skb (on veth:
    /// when the peer's backlog, maybe on another CPU, got to it), so a burst of 16 vectors
    /// fits before packets are dropped as `tx ring full` (8 MiB at 1500 bytes MTU).
    pub fn for_mtu(mtu: u32) -> TxGeometry {
        let need = mtu as usize + 14 + 8 + pkt2::DATA;
        TxGeometry {
            frame_size: need.next_power_of_two().clamp(2048, 64 << 10),
            frame_nr: 4096,
        }
    }

    /// Largest packet a frame holds.
    pub fn capacity(&self) -> usize {
        self.frame_size - pkt2::DATA
    }

    fn block_size(&self) -> usize {
        self.frame_size.max(64 << 10)
    }
}

/// One tx queue: a TPACKET_V2 socket and its mapped frame ring, shared by the threads that
/// transmit on it (one lock acquisition per batch).
pub struct TxRing {
    map: Mmap,
    fd: OwnedFd,
    geo: TxGeometry,
    /// The next frame to fill, under the queue lock.
    head: SpinLock<usize>,
    /// Whether the socket bypasses the qdisc layer.
    pub qdisc_bypass: bool,
    /// Frames a refused kick left in the ring.
    pub kick: KickState,
    /// A ring-less `PACKET_VNET_HDR` socket for GSO aggregates, or why the kernel refused
    /// it (the interface then does not take aggregates).
    gso: io::Result<OwnedFd>,
}

/// Exclusive access to a tx ring (see [`TxRing::lock`]).
pub struct TxGuard<'a> {
    ring: &'a TxRing,
    head: SpinGuard<'a, usize>,
}

/// Why a packet could not be queued.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TxFull {
    /// Every frame is waiting to be sent.
    RingFull,
}

impl TxRing {
    /// Opens a tx queue on `ifindex` (protocol 0: the socket receives nothing).
    pub fn open(ifindex: u32, geo: TxGeometry, qdisc_bypass: bool) -> io::Result<TxRing> {
        let fd = packet_socket()?;
        let raw = fd.as_raw_fd();
        setsockopt(
            raw,
            SOL_PACKET,
            PACKET_VERSION,
            &TPACKET_V2,
            "PACKET_VERSION V2",
        )?;
        // Malformed frames are skipped instead of stopping the ring.
        setsockopt(raw, SOL_PACKET, PACKET_LOSS, &1i32, "PACKET_LOSS")?;
        if qdisc_bypass {
            setsockopt(
                raw,
                SOL_PACKET,
                PACKET_QDISC_BYPASS,
                &1i32,
                "PACKET_QDISC_BYPASS",
            )?;
        }
        let bs = geo.block_size();
        let req: [u32; 4] = [
            bs as u32,
            (geo.frame_nr * geo.frame_size / bs).max(1) as u32,
            geo.frame_size as u32,
            geo.frame_nr as u32,
        ];
        setsockopt(raw, SOL_PACKET, PACKET_TX_RING, &req, "PACKET_TX_RING")?;
        let map = Mmap::new(
            raw,
            geo.frame_nr * geo.frame_size,
            0,
            "mmap of the packet ring",
        )?;
        bind(raw, ifindex, 0)?;
        // Every frame of the ring may be an skb in flight (a small skb's truesize is ~1 KiB
        // beyond its data).
        sluice_vnet::devices::linux::set_sndbuf(raw, geo.frame_nr * (geo.frame_size + 1024));
        let gso = Self::open_gso(ifindex);
        if let Err(e) = &gso {
            log::warn!(
                "af_packet ifindex {ifindex}: no PACKET_VNET_HDR socket ({e}): GSO aggregates \
                 are cut into segments before this interface's tx"
            );
        }
        Ok(TxRing {
            map,
            fd,
            geo,
            head: SpinLock::new(0),
            qdisc_bypass,
            kick: KickState::default(),
            gso,
        })
    }

    /// The socket aggregates are sent on: a frame ring holds fixed-size frames, too small
    /// for 64 KiB aggregates, so they go through `sendmsg` behind their `virtio_net_hdr`.
    /// Never with `PACKET_QDISC_BYPASS`, whatever the ring's setting: the direct xmit path
    /// (`__dev_direct_xmit`) drops (ENOBUFS) an skb that `validate_xmit_skb` has to cut or
    /// checksum in software, i.e. every aggregate on a device without TSO or TX checksum
    /// offload (or after `ethtool -K` turned them off). Through the qdisc the kernel cuts
    /// such an aggregate into checksummed segments; one 64 KiB aggregate pays the qdisc
    /// once, nothing next to the ~45 segments it carries.
    fn open_gso(ifindex: u32) -> io::Result<OwnedFd> {
        let fd = packet_socket()?;
        let raw = fd.as_raw_fd();
        setsockopt(raw, SOL_PACKET, PACKET_VNET_HDR, &1i32, "PACKET_VNET_HDR")?;
        bind(raw, ifindex, 0)?;
        sluice_vnet::devices::linux::set_sndbuf(raw, 16 << 20);
        Ok(fd)
    }

    /// Whether GSO aggregates can be sent ([`TxGuard::send_gso`]).
    pub fn takes_gso(&self) -> bool {
        self.gso.is_ok()
    }

    /// Why GSO aggregates cannot be sent (the kernel's error opening their socket).
    pub fn gso_error(&self) -> Option<&io::Error> {
        self.gso.as_ref().err()
    }

    /// Ring geometry.
    pub fn geometry(&self) -> TxGeometry {
        self.geo
    }

    /// Largest packet a frame holds.
    pub fn capacity(&self) -> usize {
        self.geo.capacity()
    }

    /// Takes the queue (spins while another thread holds it: only when threads share a
    /// queue, for the duration of one batch).
    pub fn lock(&self) -> TxGuard<'_> {
        TxGuard {
            ring: self,
            head: self.head.lock(),
        }
    }
}

impl TxGuard<'_> {
    /// Copies one packet into the next free frame with `fill` (given the frame's data area,
    /// returns the packet length) and marks it for sending.
    #[inline]
    pub fn push(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> Result<(), TxFull> {
        let r = self.ring;
        let head = *self.head;
        let off = head * r.geo.frame_size;
        let Some(st) = r.map.atomic_u32(off + pkt2::STATUS) else {
            return Err(TxFull::RingFull);
        };
        // WRONG_FORMAT cannot stay with PACKET_LOSS set; treat it as free either way.
        if st.load(Ordering::Acquire) & (status::SEND_REQUEST | status::SENDING) != 0 {
            return Err(TxFull::RingFull);
        }
        {
            // SAFETY: `off + frame_size <= map.len` (head < frame_nr). The frame is
            // AVAILABLE, so the kernel does not touch it, and we hold the queue lock, so no
            // other thread does; the slice is dropped before the status store below.
            let frame =
                unsafe { std::slice::from_raw_parts_mut(r.map.ptr().add(off), r.geo.frame_size) };
            let (hdr, data) = frame.split_at_mut(pkt2::DATA);
            let len = fill(data).min(data.len());
            hdr[pkt2::LEN..pkt2::LEN + 4].copy_from_slice(&(len as u32).to_ne_bytes());
        }
        st.store(status::SEND_REQUEST, Ordering::Release);
        *self.head = (head + 1) % r.geo.frame_nr;
        Ok(())
    }

    /// Asks the kernel to send every requested frame, without waiting, and records whether
    /// it left some in the ring (`now`: TSC). Returns what `sendto` answered, busy device
    /// (ENOBUFS) and full send buffer (EAGAIN) excepted: frames left for those reasons are
    /// retried ([`KickState`]).
    pub fn kick(&mut self, now: u64) -> io::Result<()> {
        let r = sluice_vnet::devices::linux::kick_tx(self.ring.fd.as_raw_fd());
        let left = self.requested(1);
        self.ring.kick.settle(now, left);
        match r {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) => {
                Ok(())
            }
            r => r,
        }
    }

    /// Sends one packet given as `iov` (its `virtio_net_hdr` first, then its bytes) on the
    /// GSO socket, without waiting; frames queued in the ring are kicked first, so the
    /// packets of a flow leave in order. EAGAIN/ENOBUFS: the send buffer or device is full.
    pub fn send_gso(&mut self, now: u64, iov: &[libc::iovec]) -> io::Result<()> {
        let Ok(fd) = self.ring.gso.as_ref().map(|f| f.as_raw_fd()) else {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        };
        if self.requested(1) {
            let _ = self.kick(now);
        }
        // SAFETY: msghdr is plain data; zeroed is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len();
        // SAFETY: `iov` describes live memory the kernel only reads during the call.
        let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT) };
        if r < 0 {
            return Err(os_err("sendmsg"));
        }
        Ok(())
    }

    /// The status word of the frame `back` frames before the head.
    fn status_back(&self, back: usize) -> Option<&std::sync::atomic::AtomicU32> {
        let nr = self.ring.geo.frame_nr;
        let i = (*self.head + nr - back % nr) % nr;
        self.ring
            .map
            .atomic_u32(i * self.ring.geo.frame_size + pkt2::STATUS)
    }

    /// Whether the frame `back` frames before the head is still requested (not taken by the
    /// kernel).
    fn requested(&self, back: usize) -> bool {
        self.status_back(back)
            .is_some_and(|s| s.load(Ordering::Acquire) & status::SEND_REQUEST != 0)
    }
}

impl KickRing for TxGuard<'_> {
    fn left(&mut self) -> u32 {
        let nr = self.ring.geo.frame_nr;
        (1..=nr).take_while(|&b| self.requested(b)).count() as u32
    }

    fn kick(&mut self) {
        let _ = sluice_vnet::devices::linux::kick_tx(self.ring.fd.as_raw_fd());
    }

    fn give_up(&mut self, n: u32) -> u64 {
        let r = self.ring;
        let nr = r.geo.frame_nr;
        let n = (n as usize).min(nr);
        let mut bytes = 0u64;
        for back in 1..=n {
            let i = (*self.head + nr - back) % nr;
            let off = i * r.geo.frame_size;
            if let Some(len) = r.map.atomic_u32(off + pkt2::LEN) {
                bytes += len.load(Ordering::Relaxed) as u64;
            }
            // The kernel touches a requested frame only inside a kick, and kicks happen
            // under the queue lock we hold: the frame is ours to take back.
            if let Some(st) = r.map.atomic_u32(off + pkt2::STATUS) {
                st.store(status::AVAILABLE, Ordering::Release);
            }
        }
        // The kernel's head stopped at the oldest of them: ours goes back there.
        *self.head = (*self.head + nr - n) % nr;
        bytes
    }
}

impl TxKick for TxRing {
    fn kick_state(&self) -> &KickState {
        &self.kick
    }

    fn retry(&self, now: u64, give_up: u64) -> (u64, u64) {
        let mut g = self.lock();
        self.kick.retry(&mut g, now, give_up)
    }
}
