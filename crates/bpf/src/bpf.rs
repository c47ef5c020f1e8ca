//! A minimal eBPF loader for the af_xdp driver, in Rust over the `bpf(2)` syscall: no libbpf,
//! libxdp, clang or C shim at build or run time.
//!
//! It does exactly what the driver needs:
//! - create an `XSKMAP` (queue id -> AF_XDP socket) and put sockets into it;
//! - load the built-in redirect program, assembled here as raw instructions
//!   ([`redirect_program`]): `return bpf_redirect_map(&xsks_map, ctx->rx_queue_index,
//!   XDP_PASS)` — packets of a queue with a socket go to Sluice, the others (queues without a
//!   socket) to the Linux stack;
//! - or load a user's program from an object file (`prog <file>`, parsed by [`super::elf`]):
//!   its legacy maps are created, its `xsks_map` is the interface's XSKMAP, its map
//!   relocations are applied ([`load_object`]); a refused program's verifier verdict goes in
//!   the one-line error and the whole log in the daemon log;
//! - attach it to an interface with `BPF_LINK_CREATE` in native (driver) mode or generic
//!   (SKB) mode. A bpf_link detaches when its last fd closes: deleting the interface, or
//!   Sluice exiting or crashing, takes the program off the interface; nothing is pinned.
//!
//! Constants are those of `<linux/bpf.h>` and `<linux/if_link.h>` (stable kernel ABI).

use crate::elf::Object;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type` value of XDP.
const BPF_XDP: u32 = 37;
const BPF_PSEUDO_MAP_FD: u8 = 1;
/// `BPF_FUNC_redirect_map`.
const FUNC_REDIRECT_MAP: i32 = 51;
/// `XDP_PASS`: the action when the queue has no socket in the map.
pub const XDP_PASS: i32 = 2;
/// `offsetof(struct xdp_md, rx_queue_index)`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// `XDP_FLAGS_SKB_MODE`: generic XDP, after the kernel built an skb (any driver).
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP in the driver (veth, most NIC drivers).
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// One eBPF instruction (`struct bpf_insn`): opcode, dst/src registers (4 bits each), a
/// signed 16-bit offset and a signed 32-bit immediate.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high nibble.
    pub regs: u8,
    /// Offset.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (src << 4) | (dst & 0xf),
            off,
            imm,
        }
    }

    /// `dst = *(u32 *)(src + off)` (BPF_LDX | BPF_MEM | BPF_W).
    pub const fn ldx_w(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x61, dst, src, off, 0)
    }

    /// `dst = imm` (BPF_ALU64 | BPF_MOV | BPF_K).
    pub const fn mov64_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(0xb7, dst, 0, 0, imm)
    }

    /// `dst = map` (BPF_LD | BPF_IMM | BPF_DW with `src = BPF_PSEUDO_MAP_FD`): two slots,
    /// the kernel replaces the fd with the map's address.
    pub const fn ld_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
        [
            Insn::new(0x18, dst, BPF_PSEUDO_MAP_FD, 0, fd),
            Insn::new(0, 0, 0, 0, 0),
        ]
    }

    /// `call helper` (BPF_JMP | BPF_CALL).
    pub const fn call(helper: i32) -> Insn {
        Insn::new(0x85, 0, 0, 0, helper)
    }

    /// `exit` (BPF_JMP | BPF_EXIT): returns r0.
    pub const fn exit() -> Insn {
        Insn::new(0x95, 0, 0, 0, 0)
    }

    /// The 8 bytes the kernel reads (little-endian fields on the host ABI).
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }
}

/// The default program: `bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS)`.
///
/// ```text
/// r2 = *(u32 *)(r1 + 16)      ; ctx->rx_queue_index
/// r1 = map[xsks_map]          ; ld_imm64, pseudo map fd
/// r3 = XDP_PASS               ; flags: action when the key has no socket
/// call bpf_redirect_map       ; r0 = XDP_REDIRECT or XDP_PASS
/// exit
/// ```
pub fn redirect_program(map_fd: i32) -> Vec<Insn> {
    let [ld0, ld1] = Insn::ld_map_fd(1, map_fd);
    vec![
        Insn::ldx_w(2, 1, XDP_MD_RX_QUEUE_INDEX),
        ld0,
        ld1,
        Insn::mov64_imm(3, XDP_PASS),
        Insn::call(FUNC_REDIRECT_MAP),
        Insn::exit(),
    ]
}

/// `union bpf_attr`, as big as every command here needs (the kernel requires bytes beyond
/// what it knows to be zero; these are).
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn name(&mut self, off: usize, name: &str) -> &mut Self {
        let n = name.len().min(15);
        self.0[off..off + n].copy_from_slice(&name.as_bytes()[..n]);
        self
    }
}

fn bpf(cmd: libc::c_long, attr: &mut Attr, what: &str) -> io::Result<libc::c_long> {
    // SAFETY: bpf(2) with a pointer to a live, zero-padded attribute union of the size given;
    // any pointers inside it point to live buffers for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            std::mem::size_of::<Attr>() as libc::c_uint,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        let hint = if e.raw_os_error() == Some(libc::EPERM) {
            " (needs root or CAP_BPF + CAP_NET_ADMIN)"
        } else {
            ""
        };
        return Err(io::Error::new(e.kind(), format!("{what}: {e}{hint}")));
    }
    Ok(r)
}

fn fd_of(r: libc::c_long) -> OwnedFd {
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(r as i32) }
}

/// An `XSKMAP` with `entries` slots (one per device rx queue).
pub struct XskMap {
    fd: OwnedFd,
}

impl XskMap {
    /// Creates the map.
    pub fn create(entries: u32) -> io::Result<XskMap> {
        let mut a = Attr::new();
        // map_type, key_size, value_size, max_entries, map_flags, inner_map_fd, numa_node,
        // map_name[16] at 28.
        a.u32(0, BPF_MAP_TYPE_XSKMAP)
            .u32(4, 4)
            .u32(8, 4)
            .u32(12, entries.max(1))
            .name(28, "sluice_xsks");
        let r = bpf(BPF_MAP_CREATE, &mut a, "BPF_MAP_CREATE (XSKMAP)")?;
        Ok(XskMap { fd: fd_of(r) })
    }

    /// Points slot `queue` at the AF_XDP socket `xsk_fd`.
    pub fn set(&self, queue: u32, xsk_fd: i32) -> io::Result<()> {
        let key = queue;
        let value = xsk_fd as u32;
        let mut a = Attr::new();
        // map_fd, (pad), key ptr at 8, value ptr at 16, flags at 24 (BPF_ANY).
        a.u32(0, self.fd.as_raw_fd() as u32)
            .u64(8, &key as *const u32 as u64)
            .u64(16, &value as *const u32 as u64)
            .u64(24, 0);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a, "BPF_MAP_UPDATE_ELEM (XSKMAP)").map(|_| ())
    }

    /// The map's descriptor.
    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

/// A map created from an object file's legacy definition; closed after the program that
/// uses it is loaded (the program keeps it alive).
pub struct Map {
    fd: OwnedFd,
}

impl Map {
    /// Creates a map from `def` = (type, key_size, value_size, max_entries, map_flags).
    pub fn create(name: &str, def: [u32; 5]) -> io::Result<Map> {
        let mut a = Attr::new();
        a.u32(0, def[0])
            .u32(4, def[1])
            .u32(8, def[2])
            .u32(12, def[3])
            .u32(16, def[4])
            .name(28, &kernel_name(name));
        let r = bpf(
            BPF_MAP_CREATE,
            &mut a,
            &format!("BPF_MAP_CREATE (`{name}', type {})", def[0]),
        )?;
        Ok(Map { fd: fd_of(r) })
    }
}

/// `name` cut to what the kernel accepts in `map_name`/`prog_name`: 15 characters of
/// `[A-Za-z0-9_.]`.
fn kernel_name(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .take(15)
        .collect()
}

/// Why `BPF_PROG_LOAD` failed: the error with the verifier's verdict for one line, and the
/// whole verifier log.
#[derive(Debug)]
pub struct LoadError {
    /// One line: the syscall error and the verifier's last relevant lines.
    pub message: String,
    /// The complete verifier log (empty when the kernel wrote none).
    pub log: String,
}

/// The lines of a verifier log that say why it refused: those after the last instruction
/// trace line (`12: (61) r2 = ...`), without the statistics (`processed N insns`, ...),
/// at most the last two, joined with `; `.
pub fn verifier_verdict(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let is_insn = |l: &str| {
        let d = l.chars().take_while(char::is_ascii_digit).count();
        d > 0 && l[d..].starts_with(':')
    };
    let is_stat = |l: &str| {
        l.starts_with("processed ")
            || l.starts_with("verification time")
            || l.starts_with("stack depth")
            || l.starts_with("-- END PROG LOAD LOG --")
    };
    let start = lines.iter().rposition(|l| is_insn(l)).map_or(0, |i| i + 1);
    let mut why: Vec<&str> = lines[start..]
        .iter()
        .copied()
        .filter(|l| !is_stat(l))
        .collect();
    if why.is_empty() {
        why = lines
            .iter()
            .rev()
            .copied()
            .filter(|l| !is_stat(l))
            .take(1)
            .collect();
    }
    let n = why.len();
    why[n.saturating_sub(2)..].join("; ")
}

/// A loaded XDP program.
pub struct Program {
    fd: OwnedFd,
}

impl Program {
    /// Loads the built-in redirect program for `map`.
    pub fn load_redirect(map: &XskMap) -> io::Result<Program> {
        // bpf_redirect_map is not a GPL-only helper: any license string is accepted.
        Program::load(
            &redirect_program(map.fd()),
            c"Apache-2.0 OR MIT",
            "sluice_xsk",
        )
        .map_err(|e| io::Error::other(e.message))
    }

    /// Loads `insns` as an XDP program. Without a log first (a verifier log can be larger
    /// than any buffer for a program that is fine); when that fails, again with a log for
    /// the reason.
    pub fn load(insns: &[Insn], license: &CStr, name: &str) -> Result<Program, LoadError> {
        let bytes: Vec<u8> = insns.iter().flat_map(|i| i.to_bytes()).collect();
        let name = kernel_name(name);
        let attempt = |log: &mut [u8]| {
            let mut a = Attr::new();
            // prog_type, insn_cnt, insns at 8, license at 16, log_level at 24, log_size at
            // 28, log_buf at 32, kern_version at 40, prog_flags at 44, prog_name[16] at 48,
            // prog_ifindex at 64, expected_attach_type at 68.
            a.u32(0, BPF_PROG_TYPE_XDP)
                .u32(4, insns.len() as u32)
                .u64(8, bytes.as_ptr() as u64)
                .u64(16, license.as_ptr() as u64)
                .name(48, &name)
                .u32(68, BPF_XDP);
            if !log.is_empty() {
                a.u32(24, 1)
                    .u32(28, log.len() as u32)
                    .u64(32, log.as_mut_ptr() as u64);
            }
            bpf(BPF_PROG_LOAD, &mut a, "BPF_PROG_LOAD")
        };
        let first = match attempt(&mut []) {
            Ok(r) => return Ok(Program { fd: fd_of(r) }),
            Err(e) => e,
        };
        let mut log = vec![0u8; 1 << 20];
        if let Ok(r) = attempt(&mut log) {
            return Ok(Program { fd: fd_of(r) });
        }
        let end = log.iter().position(|&c| c == 0).unwrap_or(log.len());
        let log = String::from_utf8_lossy(&log[..end]).into_owned();
        let verdict = verifier_verdict(&log);
        Err(LoadError {
            message: if verdict.is_empty() {
                first.to_string()
            } else {
                format!("{first}; verifier: {verdict}")
            },
            log,
        })
    }

    /// Attaches the program to `ifindex` in mode `flags` (`XDP_FLAGS_DRV_MODE` or
    /// `XDP_FLAGS_SKB_MODE`). The program stays attached while the returned link is open.
    pub fn attach(&self, ifindex: u32, flags: u32) -> io::Result<Link> {
        let mut a = Attr::new();
        // link_create: prog_fd, target_ifindex, attach_type, flags.
        a.u32(0, self.fd.as_raw_fd() as u32)
            .u32(4, ifindex)
            .u32(8, BPF_XDP)
            .u32(12, flags);
        let r = bpf(BPF_LINK_CREATE, &mut a, "BPF_LINK_CREATE (XDP)")?;
        Ok(Link {
            _fd: fd_of(r),
            flags,
        })
    }
}

/// An XDP program attached to an interface; dropping it detaches the program.
pub struct Link {
    _fd: OwnedFd,
    /// Attach mode flags.
    pub flags: u32,
}

impl Link {
    /// Whether the program runs in the driver (native XDP).
    pub fn native(&self) -> bool {
        self.flags & XDP_FLAGS_DRV_MODE != 0
    }
}

/// Loads the program of an object file ([`super::elf`]) for the interface whose XSKMAP is
/// `xsk`: its `xsks_map` is `xsk` whatever the object declares, its other maps are created
/// as declared (and closed once the program holds them), its `ld_imm64` map relocations get
/// `src_reg = BPF_PSEUDO_MAP_FD` and the map's descriptor.
pub fn load_object(obj: &Object, xsk: &XskMap) -> Result<Program, LoadError> {
    let mut owned = Vec::new();
    let mut fds = Vec::new();
    for m in &obj.maps {
        match m.def {
            None => fds.push(xsk.fd()),
            Some(def) => {
                let map = Map::create(&m.name, def).map_err(|e| LoadError {
                    message: e.to_string(),
                    log: String::new(),
                })?;
                fds.push(map.fd.as_raw_fd());
                owned.push(map);
            }
        }
    }
    let mut insns = obj.insns.clone();
    for r in &obj.relocs {
        let (Some(&fd), true) = (fds.get(r.map), r.insn + 1 < insns.len()) else {
            return Err(LoadError {
                message: format!("bad relocation at instruction {}", r.insn),
                log: String::new(),
            });
        };
        let i = &mut insns[r.insn];
        i.regs = (BPF_PSEUDO_MAP_FD << 4) | (i.regs & 0xf);
        i.imm = fd;
        insns[r.insn + 1].imm = 0;
    }
    let license = CString::new(obj.license.as_str()).unwrap_or_default();
    let name = obj.function.as_deref().unwrap_or(&obj.section);
    Program::load(&insns, &license, name)
}

/// Attaches `prog` to `ifindex`: native mode first, generic mode when the driver refuses (the
/// reason is logged and returned with the link); generic mode only with `generic`.
pub fn attach_xdp(
    prog: &Program,
    ifindex: u32,
    generic: bool,
) -> io::Result<(Link, Option<String>)> {
    if generic {
        return Ok((prog.attach(ifindex, XDP_FLAGS_SKB_MODE)?, None));
    }
    match prog.attach(ifindex, XDP_FLAGS_DRV_MODE) {
        Ok(l) => Ok((l, None)),
        Err(native) => {
            let why = format!("native XDP refused ({native}), using generic XDP");
            let l = prog.attach(ifindex, XDP_FLAGS_SKB_MODE).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot attach XDP program: native: {native}; generic: {e}"),
                )
            })?;
            Ok((l, Some(why)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instruction_encoding_matches_the_kernel_abi() {
        // Reference bytes as clang/llvm emits them for the same C program (little endian).
        assert_eq!(
            Insn::ldx_w(2, 1, 16).to_bytes(),
            [0x61, 0x12, 0x10, 0x00, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::mov64_imm(3, 2).to_bytes(),
            [0xb7, 0x03, 0, 0, 2, 0, 0, 0]
        );
        assert_eq!(Insn::call(51).to_bytes(), [0x85, 0x00, 0, 0, 0x33, 0, 0, 0]);
        assert_eq!(Insn::exit().to_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        let [a, b] = Insn::ld_map_fd(1, 7);
        assert_eq!(a.to_bytes(), [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(b.to_bytes(), [0; 8]);
    }

    #[test]
    fn redirect_program_shape() {
        let p = redirect_program(9);
        assert_eq!(p.len(), 6);
        // r2 = ctx->rx_queue_index
        assert_eq!(
            (p[0].code, p[0].regs & 0xf, p[0].regs >> 4, p[0].off),
            (0x61, 2, 1, 16)
        );
        // r1 = map fd 9 (two-slot ld_imm64 with the pseudo-map-fd source)
        assert_eq!((p[1].code, p[1].regs, p[1].imm), (0x18, 0x11, 9));
        assert_eq!(p[2], Insn::new(0, 0, 0, 0, 0));
        // r3 = XDP_PASS, call bpf_redirect_map, exit
        assert_eq!((p[3].code, p[3].regs, p[3].imm), (0xb7, 3, XDP_PASS));
        assert_eq!((p[4].code, p[4].imm), (0x85, FUNC_REDIRECT_MAP));
        assert_eq!(p[5].code, 0x95);
    }
}

/// Against the kernel: needs root (CAP_BPF); skipped otherwise.
#[cfg(test)]
mod kernel_tests {
    use super::*;
    use crate::elf;

    const FIXTURE: &[u8] = include_bytes!("../tests/data/xdp_drop_icmp.o");

    fn map() -> Option<XskMap> {
        match XskMap::create(4) {
            Ok(m) => Some(m),
            Err(e) => {
                sluice_infra::testing::skip(&format!("cannot create an XSKMAP here: {e}"));
                None
            }
        }
    }

    #[test]
    fn fixture_loads_with_its_maps() {
        let Some(xsk) = map() else { return };
        let o = elf::parse(FIXTURE).unwrap();
        let p = load_object(&o, &xsk);
        assert!(p.is_ok(), "{:?}", p.err());
    }

    #[test]
    fn btf_style_fixture_loads() {
        let Some(xsk) = map() else { return };
        let o = elf::parse(include_bytes!("../tests/data/xdp_btf_xsks.o")).unwrap();
        let p = load_object(&o, &xsk);
        assert!(p.is_ok(), "{:?}", p.err());
    }

    #[test]
    fn verifier_refusal_is_one_line_with_the_whole_log_kept() {
        let Some(xsk) = map() else { return };
        let mut o = elf::parse(FIXTURE).unwrap();
        // `r4 += 34` -> `r4 += 14`: the bounds check no longer covers the IPv4 protocol byte.
        assert_eq!((o.insns[3].code, o.insns[3].imm), (0x07, 34));
        o.insns[3].imm = 14;
        let e = load_object(&o, &xsk)
            .err()
            .expect("the verifier accepted it");
        eprintln!("{}", e.message);
        assert!(!e.message.contains('\n'), "{}", e.message);
        assert!(e.message.contains("verifier:"), "{}", e.message);
        assert!(e.message.contains("outside of the packet"), "{}", e.message);
        assert!(e.log.lines().count() > 5, "{}", e.log);
    }

    #[test]
    fn verdict_lines() {
        let log = "func#0 @0\n0: R1=ctx() R10=fp0\n11: (71) r2 = *(u8 *)(r2 +23)\n\
                   invalid access to packet, off=23 size=1, R2(id=0,off=23,r=14)\n\
                   R2 offset is outside of the packet\n\
                   processed 12 insns (limit 1000000) max_states_per_insn 0\n";
        assert_eq!(
            verifier_verdict(log),
            "invalid access to packet, off=23 size=1, R2(id=0,off=23,r=14); R2 offset is outside of the packet"
        );
        assert_eq!(
            verifier_verdict("last insn is not an exit or jmp\nprocessed 0 insns\n"),
            "last insn is not an exit or jmp"
        );
        assert_eq!(verifier_verdict(""), "");
    }
}
