//! Reads an XDP program from an eBPF ELF object (what `clang -target bpf -c` or
//! `llc -march=bpf -filetype=obj` write) for `create interface af_xdp ... prog <file>`:
//! a hand-written ELF64 little-endian reader, bounds-checked everywhere, no syscalls (the
//! kernel side is [`crate::bpf::load_object`]).
//!
//! What it understands, as libbpf does for the same objects:
//! - the program: the first executable section named `xdp`, `xdp/<anything>` (not
//!   `xdp/devmap`, `xdp/cpumap`) or `xdp_sock`, else the only executable section with code;
//!   the instructions of its first function (the whole section when the symbol has no size);
//! - `license` (a NUL-terminated string, GPL-only helpers need a GPL-compatible one);
//! - legacy map definitions in `maps` (`struct bpf_map_def {type, key_size, value_size,
//!   max_entries, map_flags}`, one per symbol; longer definitions are accepted when the extra
//!   fields are zero) and, in the BTF-defined `.maps` section, `xsks_map` by symbol name;
//! - the relocations of the program section: `R_BPF_64_64` on `ld_imm64` instructions that
//!   load a map's address.
//!
//! Refused with a reason (never a panic): not ELF / not 64-bit little-endian / not BPF,
//! truncated or inconsistent headers, no XDP section, no `xsks_map`, relocations to anything
//! else (global variables, functions in other sections — BPF-to-BPF calls —, externs), BTF
//! maps other than `xsks_map`, CO-RE relocations (`.BTF.ext`).

use crate::bpf::Insn;

/// The map every program must have: Sluice creates it as the interface's XSKMAP.
pub const XSKS_MAP: &str = "xsks_map";

/// `EM_BPF`.
const EM_BPF: u16 = 247;
const SHT_SYMTAB: u32 = 2;
const SHT_REL: u32 = 9;
const SHF_EXECINSTR: u64 = 4;
const STT_FUNC: u8 = 2;
/// `R_BPF_64_64`: the 64-bit immediate of an `ld_imm64`.
const R_BPF_64_64: u32 = 1;
/// `R_BPF_64_32`: the target of a `call` (BPF-to-BPF call).
const R_BPF_64_32: u32 = 10;
/// Size of the legacy `struct bpf_map_def`.
const MAP_DEF_SIZE: usize = 20;
/// Opcode of `ld_imm64` (BPF_LD | BPF_IMM | BPF_DW).
const LD_IMM64: u8 = 0x18;

/// A map the program refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapDef {
    /// Symbol name.
    pub name: String,
    /// `None` for `xsks_map` (Sluice's XSKMAP, whatever the object declares); else the
    /// legacy definition: (type, key_size, value_size, max_entries, map_flags).
    pub def: Option<[u32; 5]>,
}

/// An `ld_imm64` that must load the address of map `map` (an index into [`Object::maps`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MapReloc {
    /// Instruction index (the first of the two slots).
    pub insn: usize,
    /// Index into [`Object::maps`].
    pub map: usize,
}

/// An XDP program read from an object file, ready for [`crate::bpf::load_object`].
#[derive(Clone, Debug)]
pub struct Object {
    /// Section the program came from.
    pub section: String,
    /// Its function symbol, if the object names one.
    pub function: Option<String>,
    /// Other XDP sections (not loaded).
    pub others: Vec<String>,
    /// Instructions, relocations not applied yet.
    pub insns: Vec<Insn>,
    /// License string (without the NUL).
    pub license: String,
    /// Maps referenced by the program (only those), `xsks_map` among them.
    pub maps: Vec<MapDef>,
    /// Map relocations.
    pub relocs: Vec<MapReloc>,
}

impl Object {
    /// `section` or `section` (function) for messages.
    pub fn describe(&self) -> String {
        match &self.function {
            Some(f) => format!("section `{}' (function `{f}')", self.section),
            None => format!("section `{}'", self.section),
        }
    }
}

/// Bounds-checked little-endian reads over the file.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn slice(&self, off: u64, len: u64, what: &str) -> Result<&'a [u8], String> {
        let end = off.checked_add(len);
        match end {
            Some(end) if end <= self.0.len() as u64 => Ok(&self.0[off as usize..end as usize]),
            _ => Err(format!("truncated or corrupt ELF ({what} out of the file)")),
        }
    }
    fn u8(&self, off: u64, what: &str) -> Result<u8, String> {
        Ok(self.slice(off, 1, what)?[0])
    }
    fn u16(&self, off: u64, what: &str) -> Result<u16, String> {
        let b = self.slice(off, 2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&self, off: u64, what: &str) -> Result<u32, String> {
        let b = self.slice(off, 4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&self, off: u64, what: &str) -> Result<u64, String> {
        let b = self.slice(off, 8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

#[derive(Clone, Debug)]
struct Section {
    name: String,
    kind: u32,
    flags: u64,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
}

#[derive(Clone, Debug)]
struct Symbol {
    name: String,
    kind: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

fn cstr(table: &[u8], off: u32) -> String {
    let s = table.get(off as usize..).unwrap_or(&[]);
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    String::from_utf8_lossy(&s[..end]).into_owned()
}

fn is_xdp_section(name: &str) -> bool {
    name == "xdp"
        || name == "xdp_sock"
        || (name.starts_with("xdp/")
            && !name.starts_with("xdp/devmap")
            && !name.starts_with("xdp/cpumap"))
}

fn sections(f: &Bytes) -> Result<Vec<Section>, String> {
    let shoff = f.u64(40, "ELF header")?;
    let shentsize = f.u16(58, "ELF header")? as u64;
    let shnum = f.u16(60, "ELF header")? as u64;
    let shstrndx = f.u16(62, "ELF header")? as u64;
    if shnum == 0 || shentsize < 64 {
        return Err("no section headers (or extended numbering, not supported)".into());
    }
    f.slice(shoff, shnum * shentsize, "section header table")?;
    let mut raw = Vec::new();
    for i in 0..shnum {
        let at = shoff
            .checked_add(i * shentsize)
            .ok_or("corrupt section header offset")?;
        let what = "section header";
        raw.push((
            f.u32(at, what)?,
            Section {
                name: String::new(),
                kind: f.u32(at + 4, what)?,
                flags: f.u64(at + 8, what)?,
                offset: f.u64(at + 24, what)?,
                size: f.u64(at + 32, what)?,
                link: f.u32(at + 40, what)?,
                info: f.u32(at + 44, what)?,
            },
        ));
    }
    let names = raw
        .get(shstrndx as usize)
        .map(|(_, s)| f.slice(s.offset, s.size, "section name table"))
        .ok_or("section name table index out of range")??;
    Ok(raw
        .into_iter()
        .map(|(n, mut s)| {
            s.name = cstr(names, n);
            s
        })
        .collect())
}

fn symbols(f: &Bytes, secs: &[Section]) -> Result<Vec<Symbol>, String> {
    let Some(tab) = secs.iter().find(|s| s.kind == SHT_SYMTAB) else {
        return Err("no symbol table".into());
    };
    let strtab = secs
        .get(tab.link as usize)
        .ok_or("symbol string table index out of range")?;
    let names = f.slice(strtab.offset, strtab.size, "symbol string table")?;
    let data = f.slice(tab.offset, tab.size, "symbol table")?;
    let b = Bytes(data);
    (0..data.len() as u64 / 24)
        .map(|i| {
            let at = i * 24;
            Ok(Symbol {
                name: cstr(names, b.u32(at, "symbol")?),
                kind: b.u8(at + 4, "symbol")? & 0xf,
                shndx: b.u16(at + 6, "symbol")?,
                value: b.u64(at + 8, "symbol")?,
                size: b.u64(at + 16, "symbol")?,
            })
        })
        .collect()
}

/// Parses an eBPF object and extracts its XDP program (see the module comment).
pub fn parse(data: &[u8]) -> Result<Object, String> {
    let f = Bytes(data);
    if data.len() < 64 || data[..4] != *b"\x7fELF" {
        return Err("not an ELF object".into());
    }
    if data[4] != 2 || data[5] != 1 {
        return Err("not a 64-bit little-endian ELF object".into());
    }
    let machine = f.u16(18, "ELF header")?;
    if machine != EM_BPF {
        return Err(format!(
            "not an eBPF object (ELF machine {machine}, eBPF is {EM_BPF})"
        ));
    }
    let secs = sections(&f)?;
    let syms = symbols(&f, &secs)?;

    // The program section.
    let code: Vec<usize> = (0..secs.len())
        .filter(|&i| secs[i].flags & SHF_EXECINSTR != 0 && secs[i].size > 0)
        .collect();
    let xdp: Vec<usize> = code
        .iter()
        .copied()
        .filter(|&i| is_xdp_section(&secs[i].name))
        .collect();
    let prog = match (xdp.first(), code.as_slice()) {
        (Some(&i), _) => i,
        (None, [only]) => *only,
        (None, []) => return Err("no program section (no executable code)".into()),
        (None, _) => {
            let names: Vec<&str> = code.iter().map(|&i| secs[i].name.as_str()).collect();
            return Err(format!(
                "no XDP section (`xdp', `xdp/...', `xdp_sock') among {}",
                names.join(", ")
            ));
        }
    };
    let others = xdp
        .iter()
        .filter(|&&i| i != prog)
        .map(|&i| secs[i].name.clone())
        .collect();
    let psec = &secs[prog];
    let function = syms
        .iter()
        .filter(|s| s.shndx as usize == prog && s.kind == STT_FUNC && s.value == 0)
        .max_by_key(|s| s.size)
        .cloned();
    let len = match &function {
        Some(s) if s.size > 0 && s.size <= psec.size => s.size,
        _ => psec.size,
    };
    if len % 8 != 0 {
        return Err(format!(
            "section `{}' is {len} bytes, not a whole number of instructions",
            psec.name
        ));
    }
    let code = f.slice(psec.offset, len, "program section")?;
    let insns: Vec<Insn> = code
        .chunks_exact(8)
        .map(|c| Insn {
            code: c[0],
            regs: c[1],
            off: i16::from_le_bytes([c[2], c[3]]),
            imm: i32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();

    let license = secs
        .iter()
        .find(|s| s.name == "license")
        .map(|s| f.slice(s.offset, s.size, "license section"))
        .transpose()?
        .map(|b| cstr(b, 0))
        .unwrap_or_default();

    // CO-RE relocations live in .BTF.ext: header magic, version, flags, hdr_len, then
    // func_info off/len, line_info off/len and, from hdr_len 32, core_relo off/len.
    if let Some(ext) = secs.iter().find(|s| s.name == ".BTF.ext") {
        let b = Bytes(f.slice(ext.offset, ext.size, ".BTF.ext")?);
        let hdr_len = b.u32(4, ".BTF.ext header")?;
        if hdr_len >= 32 && b.u32(28, ".BTF.ext header")? > 0 {
            return Err("CO-RE relocations (.BTF.ext core_relo) are not supported".into());
        }
    }

    // Relocations of the program section.
    let mut maps: Vec<MapDef> = Vec::new();
    let mut relocs = Vec::new();
    for rs in secs
        .iter()
        .filter(|s| s.kind == SHT_REL && s.info as usize == prog)
    {
        let data = f.slice(rs.offset, rs.size, "relocation section")?;
        let b = Bytes(data);
        for i in 0..data.len() as u64 / 16 {
            let off = b.u64(i * 16, "relocation")?;
            let info = b.u64(i * 16 + 8, "relocation")?;
            let (sym_i, kind) = ((info >> 32) as usize, info as u32);
            if off >= len {
                continue; // in another function of the section: not loaded
            }
            let sym = syms
                .get(sym_i)
                .ok_or_else(|| format!("relocation at {off:#x}: bad symbol index {sym_i}"))?;
            let at = off as usize / 8;
            if kind == R_BPF_64_32 {
                return Err(format!(
                    "BPF-to-BPF call to `{}' (relocation at instruction {at}) is not supported",
                    sym.name
                ));
            }
            if kind != R_BPF_64_64 || off % 8 != 0 {
                return Err(format!(
                    "unsupported relocation type {kind} at {off:#x} (symbol `{}')",
                    sym.name
                ));
            }
            if insns.get(at).map(|i| i.code) != Some(LD_IMM64) || at + 1 >= insns.len() {
                return Err(format!(
                    "relocation at instruction {at} (symbol `{}') is not on an ld_imm64",
                    sym.name
                ));
            }
            let target = secs.get(sym.shndx as usize);
            let tname = target.map(|s| s.name.as_str()).unwrap_or("");
            let map = if tname == "maps" || tname.starts_with("maps/") {
                let t = target.ok_or("corrupt maps section")?;
                legacy_map(&f, t, sym.shndx, &syms, sym, insns[at].imm)?
            } else if tname == ".maps" {
                if sym.name != XSKS_MAP {
                    return Err(format!(
                        "BTF-defined map `{}' is not supported (only `{XSKS_MAP}' in `.maps'; \
                         declare other maps in the legacy `maps' section)",
                        sym.name
                    ));
                }
                MapDef {
                    name: XSKS_MAP.into(),
                    def: None,
                }
            } else if sym.shndx == 0 {
                return Err(format!(
                    "relocation against extern symbol `{}' is not supported",
                    sym.name
                ));
            } else if target.is_some_and(|t| t.flags & SHF_EXECINSTR != 0) {
                return Err(format!(
                    "relocation at instruction {at} against code in `{tname}' (function \
                     pointer or BPF-to-BPF call) is not supported"
                ));
            } else {
                return Err(format!(
                    "relocation against `{}' in section `{tname}' (global variables) is not \
                     supported",
                    sym.name
                ));
            };
            let idx = match maps.iter().position(|m| m.name == map.name) {
                Some(i) => i,
                None => {
                    maps.push(map);
                    maps.len() - 1
                }
            };
            relocs.push(MapReloc { insn: at, map: idx });
        }
    }
    if !maps.iter().any(|m| m.name == XSKS_MAP) {
        return Err(format!(
            "the program does not use a map named `{XSKS_MAP}' (the XSKMAP Sluice fills with its \
             AF_XDP sockets)"
        ));
    }
    Ok(Object {
        section: psec.name.clone(),
        function: function.map(|s| s.name),
        others,
        insns,
        license,
        maps,
        relocs,
    })
}

/// The legacy map definition a relocation against `sym` (+ `addend`, the ld_imm64's
/// immediate, for section-symbol relocations) points at.
fn legacy_map(
    f: &Bytes,
    sec: &Section,
    shndx: u16,
    syms: &[Symbol],
    sym: &Symbol,
    addend: i32,
) -> Result<MapDef, String> {
    let defs: Vec<&Symbol> = syms
        .iter()
        .filter(|s| s.shndx == shndx && !s.name.is_empty() && s.kind != 3)
        .collect();
    if defs.is_empty() {
        return Err(format!("section `{}' has no map symbols", sec.name));
    }
    let def_size = sec.size / defs.len() as u64;
    if (def_size as usize) < MAP_DEF_SIZE - 4 || sec.size % defs.len() as u64 != 0 {
        return Err(format!(
            "section `{}': {} bytes for {} maps is not a bpf_map_def array",
            sec.name,
            sec.size,
            defs.len()
        ));
    }
    let off = sym.value.wrapping_add(addend as i64 as u64);
    let Some(m) = defs.iter().find(|s| s.value == off) else {
        return Err(format!(
            "relocation against `{}' +{addend}: no map at offset {off} of `{}'",
            sym.name, sec.name
        ));
    };
    let b = Bytes(f.slice(sec.offset, sec.size, "maps section")?);
    let mut def = [0u32; 5];
    for (i, v) in def.iter_mut().enumerate() {
        if (i as u64 + 1) * 4 <= def_size {
            *v = b.u32(off + i as u64 * 4, "map definition")?;
        }
    }
    let extra = b.slice(
        off + (MAP_DEF_SIZE as u64).min(def_size),
        def_size.saturating_sub(MAP_DEF_SIZE as u64),
        "map definition",
    )?;
    if extra.iter().any(|&c| c != 0) {
        return Err(format!(
            "map `{}': bpf_map_def fields beyond map_flags (pinning, inner maps, ...) are not \
             supported",
            m.name
        ));
    }
    Ok(MapDef {
        name: m.name.clone(),
        def: (m.name != XSKS_MAP).then_some(def),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &[u8] = include_bytes!("../tests/data/xdp_drop_icmp.o");

    #[test]
    fn fixture_program_maps_and_relocations() {
        let o = parse(FIXTURE).unwrap();
        assert_eq!(o.section, "xdp");
        assert_eq!(o.function.as_deref(), Some("xdp_drop_icmp"));
        assert_eq!(o.license, "GPL");
        assert!(o.others.is_empty());
        assert_eq!(o.insns.len(), 30);
        assert_eq!(o.insns.last().unwrap().code, 0x95, "ends with exit");
        assert_eq!(o.maps.len(), 2);
        let drops = o.maps.iter().position(|m| m.name == "icmp_drops").unwrap();
        let xsks = o.maps.iter().position(|m| m.name == XSKS_MAP).unwrap();
        // BPF_MAP_TYPE_ARRAY, u32 key, u64 value, 1 entry; xsks_map is Sluice's.
        assert_eq!(o.maps[drops].def, Some([2, 4, 8, 1, 0]));
        assert_eq!(o.maps[xsks].def, None);
        let mut r = o.relocs.clone();
        r.sort_by_key(|r| r.insn);
        assert_eq!(
            r,
            vec![
                MapReloc {
                    insn: 16,
                    map: drops
                },
                MapReloc {
                    insn: 25,
                    map: xsks
                }
            ]
        );
        for r in &r {
            assert_eq!(o.insns[r.insn].code, LD_IMM64);
        }
        assert_eq!(o.describe(), "section `xdp' (function `xdp_drop_icmp')");
    }

    /// Every prefix of the fixture and every single-byte corruption of its headers is
    /// refused or parsed, never a panic.
    #[test]
    fn truncated_and_corrupted_objects_never_panic() {
        for n in 0..FIXTURE.len() {
            assert!(parse(&FIXTURE[..n]).is_err(), "prefix {n} parsed");
        }
        for i in 0..FIXTURE.len() {
            for v in [0u8, 0x7f, 0xff] {
                let mut b = FIXTURE.to_vec();
                b[i] = v;
                let _ = parse(&b);
            }
        }
        assert!(parse(&FIXTURE[..100]).unwrap_err().contains("truncated"));
    }

    #[test]
    fn wrong_format_and_machine() {
        assert_eq!(parse(b"hello").unwrap_err(), "not an ELF object");
        let mut b = FIXTURE.to_vec();
        b[18] = 62; // EM_X86_64
        assert!(parse(&b)
            .unwrap_err()
            .contains("not an eBPF object (ELF machine 62"));
        let mut b = FIXTURE.to_vec();
        b[5] = 2; // big endian
        assert!(parse(&b).unwrap_err().contains("64-bit little-endian"));
    }

    fn rename(from: &str, to: &str) -> Vec<u8> {
        assert_eq!(from.len(), to.len());
        let mut b = FIXTURE.to_vec();
        let at = b
            .windows(from.len() + 1)
            .position(|w| w[..from.len()] == *from.as_bytes() && w[from.len()] == 0)
            .unwrap();
        b[at..at + to.len()].copy_from_slice(to.as_bytes());
        b
    }

    #[test]
    fn refusals_name_the_reason() {
        // The XSKMAP under another name.
        let e = parse(&rename("xsks_map", "xsks_maq")).unwrap_err();
        assert!(e.contains("does not use a map named `xsks_map'"), "{e}");
        // No XDP section, but the only code section is still taken.
        let o = parse(&rename("xdp", "tc0")).unwrap();
        assert_eq!(o.section, "tc0");
        // The maps in `.maps' (BTF-defined): xsks_map is recognised, others are not.
        let e = parse(&rename("maps", "data")).unwrap_err();
        assert!(e.contains("global variables"), "{e}");
    }

    #[test]
    fn btf_style_xsks_map_is_recognised_by_name() {
        let b = include_bytes!("../tests/data/xdp_btf_xsks.o");
        let o = parse(b).unwrap();
        assert_eq!(o.function.as_deref(), Some("xdp_redirect_all"));
        assert_eq!(
            o.maps,
            vec![MapDef {
                name: XSKS_MAP.into(),
                def: None
            }]
        );
        assert_eq!(o.relocs, vec![MapReloc { insn: 1, map: 0 }]);
        let mut other = b.to_vec();
        let at = other.windows(9).position(|w| w == b"xsks_map\0").unwrap();
        other[at + 7] = b'q';
        let e = parse(&other).unwrap_err();
        assert!(
            e.contains("BTF-defined map `xsks_maq' is not supported"),
            "{e}"
        );
    }

    #[test]
    fn system_xdp_objects_without_xsks_map_are_refused() {
        // xdp-tools' filter programs (BTF maps, no xsks_map), when installed.
        let dir = std::path::Path::new("/usr/lib/x86_64-linux-gnu/bpf");
        for f in ["xdpfilt_alw_ip.o", "xsk_def_xdp_prog.o", "xdp-dispatcher.o"] {
            let Ok(b) = std::fs::read(dir.join(f)) else {
                continue;
            };
            let e = parse(&b).unwrap_err();
            assert!(!e.is_empty() && !e.contains('\n'), "{f}: {e}");
        }
    }
}
