//! The memif control plane's handshake state machines (`memif::ctl`), driven by a fuzzed peer
//! over a real `SOCK_SEQPACKET` socket (abstract name): a master interface receiving a slave's
//! messages, or a slave interface receiving a master's, each message optionally carrying an
//! eventfd or a memfd region (its size and whether it holds cookie-stamped ring headers come
//! from the input, so CONNECT can reach region mapping and ring validation). Whatever the
//! sequence, Sluice must answer, refuse with DISCONNECT or connect, and never panic; an
//! interface deleted at the end unmaps everything.
//!
//! Input: byte 0 bit 0 selects the role Sluice plays (0 master, 1 slave), bit 1 whether its
//! interface has `gso` (then with 16 KiB buffers, so a slave's rings fit two aggregates and
//! it offers GSO in INIT; a master answers an INIT's offer), then records of one
//! tag byte + one 128-byte message. Tag bits 0-1: no fd / an eventfd / a memfd of the size
//! the message claims at offset 4 (ADD_REGION's size, capped) / a memfd of (tag >> 4) pages;
//! bit 2: stamp ring headers (cookie, head = tail = 0) every 128 bytes of the memfd; bit 3:
//! let 6 s pass before the next step (handshake timeout).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_memif::ctl::{Ctl, IfCfg};
use sluice_memif::proto::{Mode, COOKIE, MSG_SIZE};
use sluice_memif::sock::{self, Recv};
use sluice_memif::{IfShared, MemifShared};
use sluice_vnet::interface::IfCounters;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const MAX_MSGS: usize = 24;
const MAX_MEMFD: u64 = 256 << 10;

fn memfd(size: u64, rings: bool) -> Option<OwnedFd> {
    let size = size.min(MAX_MEMFD) as usize;
    // SAFETY: plain syscalls on an fd we create and own; pwrite reads a local buffer.
    unsafe {
        let fd = libc::memfd_create(
            c"fuzz".as_ptr(),
            libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC,
        );
        if fd < 0 {
            return None;
        }
        let fd = OwnedFd::from_raw_fd(fd);
        if libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) != 0 {
            return None;
        }
        if rings {
            let mut b = vec![0u8; size];
            for o in (0..size.saturating_sub(3)).step_by(128) {
                b[o..o + 4].copy_from_slice(&COOKIE.to_le_bytes());
            }
            libc::pwrite(fd.as_raw_fd(), b.as_ptr() as *const libc::c_void, size, 0);
        }
        Some(fd)
    }
}

fn eventfd() -> Option<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    // SAFETY: fd just created (checked).
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads everything Sluice sent; false when it closed the connection.
fn drain(s: &OwnedFd) -> bool {
    loop {
        match sock::recv(s) {
            Ok(Recv::Msg { .. }) => continue,
            Ok(Recv::None) => return true,
            _ => return false,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&role, records)) = data.split_first() else {
        return;
    };
    let slave = role & 1 != 0;
    let gso = role & 2 != 0;
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let path = format!(
        "@sluice-fuzz-memif-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let mut ctl = Ctl::new(Arc::new(MemifShared::default()));
    ctl.add_socket(1, &path).unwrap();
    let cfg = IfCfg {
        id: 0,
        socket_id: 1,
        log2_ring: 4,
        buffer_size: if gso { 16384 } else { 256 },
        mac: [2, 0xfe, 0, 0, 0, 1],
        slave,
        rx_queues: 2,
        tx_queues: 2,
        mode: Mode::Ethernet,
        secret: String::new(),
        zero_copy: None,
        gso,
    };
    let counters = Arc::new(IfCounters::new(1));
    let link = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sh = Arc::new(IfShared::new(1, Mode::Ethernet, counters, None, link));
    ctl.add_iface("memif1/0".into(), cfg, sh);
    // Slave role: the fuzzer is the master and listens; Sluice connects at its first poll
    // (and again a second after each disconnect).
    let listener = if slave {
        sock::listen(&path).ok()
    } else {
        None
    };
    let mut now = 0.0;
    ctl.poll(now);
    let mut peer: Option<OwnedFd> = None;
    for rec in records.chunks_exact(1 + MSG_SIZE).take(MAX_MSGS) {
        let tag = rec[0];
        let msg: &[u8; MSG_SIZE] = rec[1..].try_into().unwrap();
        if peer.is_none() {
            peer = match &listener {
                Some(l) => sock::accept(l).ok().flatten(),
                None => sock::connect(&path).ok(),
            };
            ctl.poll(now);
        }
        let fd = match tag & 3 {
            1 => eventfd(),
            2 => memfd(
                u64::from_le_bytes(msg[4..12].try_into().unwrap()),
                tag & 4 != 0,
            ),
            3 => memfd(u64::from(tag >> 4) * 4096, tag & 4 != 0),
            _ => None,
        };
        if let Some(p) = &peer {
            if sock::send(p, msg, fd.as_ref().map(|f| f.as_raw_fd())).is_err() {
                peer = None;
            }
        }
        now += if tag & 8 != 0 { 6.0 } else { 0.001 };
        ctl.poll(now);
        if let Some(p) = &peer {
            if !drain(p) {
                peer = None;
                now += 1.5; // past the slave's reconnect delay
            }
        }
    }
    ctl.del_iface("memif1/0");
    ctl.del_socket(1).unwrap();
});
