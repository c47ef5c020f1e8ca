//! Type checking and lowering: [`crate::ast`] to [`crate::ir::Program`].
//!
//! Names are resolved once here; the result has no strings on the data path. The v1model
//! package `V1Switch(parser, verify, ingress, egress, compute, deparser) main;` ties the
//! blocks together. Anything outside the subset is refused with "not supported: <construct>".

use crate::ast::{self, BinOp, Decl, Expr, ExprKind, KeySet, Local, Stmt, TypeRef, UnOp};
use crate::error::{CompileError, Pos};
use crate::ir::*;
use std::collections::{HashMap, HashSet};

/// A value type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Bit(u16),
    Bool,
    /// An integer literal without width (adapts to the other operand).
    Int,
    Error,
}

fn ty_str(t: Ty) -> String {
    match t {
        Ty::Bit(w) => format!("bit<{w}>"),
        Ty::Bool => "bool".into(),
        Ty::Int => "int".into(),
        Ty::Error => "error".into(),
    }
}

/// What a type name denotes.
#[derive(Clone, Debug)]
enum TypeDef {
    Header(Vec<ast::Field>),
    Struct(Vec<ast::Field>),
    Alias(TypeRef),
}

/// A parameter of a parser/control bound to one of the program's roots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Root {
    Hdr,
    Meta,
    Std,
    PacketIn,
    PacketOut,
}

/// A place named by a path below a root.
#[derive(Clone, Debug)]
enum Place {
    /// A header instance.
    Header(u8),
    /// A struct of headers: the instances under it, in order.
    HdrStruct(Vec<u8>),
    /// Header field: instance, bit offset in the header, width.
    HField(u8, u16, u16),
    /// Metadata slot: instance (0 user, 1 std, 2 locals), slot, type.
    Meta(u8, u16, Ty),
    MetaStruct,
}

/// Extern instances of a control.
#[derive(Clone, Debug)]
enum Inst {
    Counter(u16),
    DirectCounter,
    Register(u16, u16),
    Meter(u16),
    /// A `direct_meter`: its meter array (one cell per entry of its table, plus one for
    /// the default action, never configured: green).
    DirectMeter(u16),
}

/// The name of the hidden last parameter of an action reading a `direct_meter`: the
/// entry's meter cell, filled by the control plane (`control::table_add`) and the compiler
/// (const entries, the default action).
pub fn direct_meter_param(meter: &str) -> String {
    format!("${meter}")
}

/// The direct meter (its name) whose cell an action's hidden last parameter is.
pub fn direct_meter_of(a: &crate::ir::Action) -> Option<&str> {
    a.params.last().and_then(|(n, _)| n.strip_prefix('$'))
}

/// Default number of entries of a table with a direct meter and no `size`.
pub const DIRECT_METER_DEFAULT_SIZE: u64 = 1024;

/// Names visible in a control.
#[derive(Default, Clone)]
struct ControlNames {
    name: String,
    actions: HashMap<String, u16>,
    tables: HashMap<String, u16>,
    insts: HashMap<String, Inst>,
    /// The control's `const`s: value and type (visible in it only, after the declaration).
    consts: HashMap<String, (u64, Ty)>,
}

/// The lexical scope of a statement.
#[derive(Clone, Default)]
struct Scope {
    roots: HashMap<String, Root>,
    /// Local variables and block constants, innermost block last.
    locals: Vec<HashMap<String, Named>>,
    /// Action parameters: name -> (index, width).
    params: HashMap<String, (u8, u16)>,
    control: Option<ControlNames>,
    in_parser: bool,
    in_action: bool,
}

/// A name declared in a block.
#[derive(Clone, Copy, Debug)]
enum Named {
    /// A local variable: its metadata slot and type.
    Var(u16, Ty),
    /// A `const` of the block: its value and type.
    Const(u64, Ty),
}

impl Scope {
    fn local(&self, n: &str) -> Option<Named> {
        self.locals.iter().rev().find_map(|m| m.get(n).copied())
    }

    /// A `const` of the enclosing control.
    fn control_const(&self, n: &str) -> Option<(u64, Ty)> {
        self.control.as_ref()?.consts.get(n).copied()
    }

    /// Declares `n` in the innermost block; a second declaration of a name in one block
    /// (a variable or a constant, or a control's `const`s and variables) is an error.
    fn declare(&mut self, n: &str, what: Named, pos: Pos) -> Result<(), CompileError> {
        // The control's own block is the first frame; its `const`s are kept beside it.
        let control_const = self.locals.len() == 1 && self.control_const(n).is_some();
        let frame = self.locals.last_mut().expect("scope");
        if control_const || frame.contains_key(n) {
            return Err(CompileError::ty(
                pos,
                &format!("duplicate declaration `{n}'"),
            ));
        }
        frame.insert(n.to_string(), what);
        Ok(())
    }
}

const STD_FIELDS: [(&str, u16); 16] = [
    ("ingress_port", 9),
    ("egress_spec", 9),
    ("egress_port", 9),
    ("instance_type", 32),
    ("packet_length", 32),
    ("enq_timestamp", 32),
    ("enq_qdepth", 19),
    ("deq_timedelta", 32),
    ("deq_qdepth", 19),
    ("ingress_global_timestamp", 48),
    ("egress_global_timestamp", 48),
    ("mcast_grp", 16),
    ("egress_rid", 16),
    ("checksum_error", 1),
    ("parser_error", 0), // error type
    ("priority", 3),
];

struct Compiler {
    opts: Opts,
    types: HashMap<String, TypeDef>,
    consts: HashMap<String, (u64, Ty)>,
    errors: Vec<String>,
    hdr_name: String,
    meta_name: String,
    /// Paths below the headers struct.
    hdr_paths: HashMap<String, Place>,
    meta_paths: HashMap<String, Place>,
    std_paths: HashMap<String, Place>,
    prog: Program,
    /// Next free local slot.
    next_slot: u16,
    /// Number of synthetic tables made so far.
    synth: usize,
    /// The direct meter read by the action being compiled, and where.
    direct_read: Option<(u16, Pos)>,
    /// Direct meters attached to a table.
    direct_attached: HashSet<u16>,
}

fn bin_ir(op: BinOp) -> Option<Bin> {
    Some(match op {
        BinOp::Add => Bin::Add,
        BinOp::Sub => Bin::Sub,
        BinOp::Mul => Bin::Mul,
        BinOp::AddSat => Bin::AddSat,
        BinOp::SubSat => Bin::SubSat,
        BinOp::BitAnd => Bin::And,
        BinOp::BitOr => Bin::Or,
        BinOp::BitXor => Bin::Xor,
        BinOp::Shl => Bin::Shl,
        BinOp::Shr => Bin::Shr,
        BinOp::Eq => Bin::Eq,
        BinOp::Ne => Bin::Ne,
        BinOp::Lt => Bin::Lt,
        BinOp::Le => Bin::Le,
        BinOp::Gt => Bin::Gt,
        BinOp::Ge => Bin::Ge,
        BinOp::And => Bin::LAnd,
        BinOp::Or => Bin::LOr,
        BinOp::Div | BinOp::Mod | BinOp::Concat => return None,
    })
}

fn op_str(op: BinOp) -> &'static str {
    match op {
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Mod => "%",
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::AddSat => "|+|",
        BinOp::SubSat => "|-|",
        BinOp::Shl => "<<",
        BinOp::Shr => ">>",
        BinOp::Lt => "<",
        BinOp::Le => "<=",
        BinOp::Gt => ">",
        BinOp::Ge => ">=",
        BinOp::Eq => "==",
        BinOp::Ne => "!=",
        BinOp::BitAnd => "&",
        BinOp::BitXor => "^",
        BinOp::BitOr => "|",
        BinOp::And => "&&",
        BinOp::Or => "||",
        BinOp::Concat => "++",
    }
}

/// Evaluates a binary operator on constants (the executor uses the same function).
#[inline(always)]
pub fn eval_bin(op: Bin, a: u64, b: u64, m: u64) -> u64 {
    match op {
        Bin::Add => a.wrapping_add(b) & m,
        Bin::Sub => a.wrapping_sub(b) & m,
        Bin::Mul => a.wrapping_mul(b) & m,
        Bin::AddSat => {
            let s = a.saturating_add(b);
            if s > m {
                m
            } else {
                s
            }
        }
        Bin::SubSat => a.saturating_sub(b),
        Bin::And => a & b,
        Bin::Or => a | b,
        Bin::Xor => a ^ b,
        Bin::Shl => {
            if b >= 64 {
                0
            } else {
                (a << b) & m
            }
        }
        Bin::Shr => {
            if b >= 64 {
                0
            } else {
                a >> b
            }
        }
        Bin::Eq => (a == b) as u64,
        Bin::Ne => (a != b) as u64,
        Bin::Lt => (a < b) as u64,
        Bin::Le => (a <= b) as u64,
        Bin::Gt => (a > b) as u64,
        Bin::Ge => (a >= b) as u64,
        Bin::LAnd => (a != 0 && b != 0) as u64,
        Bin::LOr => (a != 0 || b != 0) as u64,
    }
}

/// Compiles P4 source text. `file` names the source in error messages.
pub fn compile(src: &str, file: &str, opts: Opts) -> Result<Program, CompileError> {
    let decls = crate::parser::parse(src).map_err(|e| e.in_file(file))?;
    let mut c = Compiler {
        opts,
        types: HashMap::new(),
        consts: HashMap::new(),
        errors: CORE_ERRORS.iter().map(|s| s.to_string()).collect(),
        hdr_name: String::new(),
        meta_name: String::new(),
        hdr_paths: HashMap::new(),
        meta_paths: HashMap::new(),
        std_paths: HashMap::new(),
        prog: Program {
            opts,
            headers: Vec::new(),
            hdr_bytes: 0,
            meta_slots: 0,
            hdr_bases: Vec::new(),
            meta_bases: vec![0, 0, 0],
            states: Vec::new(),
            start: 0,
            parser_loops: false,
            verify: Vec::new(),
            ingress: Vec::new(),
            egress: Vec::new(),
            compute: Vec::new(),
            deparse: Vec::new(),
            actions: vec![Action {
                name: "NoAction".into(),
                control: String::new(),
                params: Vec::new(),
                body: Vec::new(),
            }],
            tables: Vec::new(),
            counters: Vec::new(),
            registers: Vec::new(),
            meters: Vec::new(),
            std: StdSlots {
                ingress_port: 0,
                egress_spec: 0,
                egress_port: 0,
                packet_length: 0,
                parser_error: 0,
                checksum_error: 0,
            },
            meta_fields: Vec::new(),
            errors: Vec::new(),
            inlined_tables: Vec::new(),
        },
        next_slot: 0,
        synth: 0,
        direct_read: None,
        direct_attached: HashSet::new(),
    };
    c.run(&decls).map_err(|e| e.in_file(file))?;
    c.prog.errors = c.errors.clone();
    Ok(c.prog)
}

impl Compiler {
    fn run(&mut self, decls: &[Decl]) -> Result<(), CompileError> {
        // Pass 1: types, constants, errors.
        for d in decls {
            match d {
                Decl::Header { name, fields, pos } | Decl::Struct { name, fields, pos } => {
                    if self.types.contains_key(name) {
                        return Err(CompileError::ty(*pos, &format!("duplicate type `{name}'")));
                    }
                    let mut seen = HashSet::new();
                    for f in fields {
                        if !seen.insert(&f.name) {
                            return Err(CompileError::ty(
                                f.pos,
                                &format!("duplicate field `{}'", f.name),
                            ));
                        }
                    }
                    let def = if matches!(d, Decl::Header { .. }) {
                        for f in fields {
                            match self.value_ty(&f.ty, f.pos)? {
                                Ty::Bit(_) => {}
                                t => {
                                    return Err(CompileError::unsupported(
                                        f.pos,
                                        &format!("header field of type {}", ty_str(t)),
                                    ))
                                }
                            }
                        }
                        TypeDef::Header(fields.clone())
                    } else {
                        TypeDef::Struct(fields.clone())
                    };
                    self.types.insert(name.clone(), def);
                }
                Decl::Typedef { name, ty, pos } => {
                    if self.types.contains_key(name) {
                        return Err(CompileError::ty(*pos, &format!("duplicate type `{name}'")));
                    }
                    self.types.insert(name.clone(), TypeDef::Alias(ty.clone()));
                }
                Decl::Const(k) => {
                    let c = self.const_value(&Scope::default(), k)?;
                    self.consts.insert(k.name.clone(), c);
                }
                Decl::Errors(names) => {
                    for (n, _) in names {
                        if !self.errors.contains(n) {
                            self.errors.push(n.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        // The package.
        let pkg = decls.iter().find_map(|d| match d {
            Decl::Package { ty, args, pos, .. } => Some((ty, args, *pos)),
            _ => None,
        });
        let Some((pty, args, ppos)) = pkg else {
            return Err(CompileError::program(
                Pos { line: 1, col: 1 },
                "no `V1Switch(...) main;' instantiation",
            ));
        };
        if pty != "V1Switch" {
            return Err(CompileError::unsupported(
                ppos,
                &format!("package `{pty}' (only V1Switch)"),
            ));
        }
        if args.len() != 6 {
            return Err(CompileError::ty(
                ppos,
                &format!("V1Switch takes 6 blocks, got {}", args.len()),
            ));
        }
        let find_parser = |n: &str| {
            decls.iter().find_map(|d| match d {
                Decl::Parser(p) if p.name == n => Some(p),
                _ => None,
            })
        };
        let find_control = |n: &str| {
            decls.iter().find_map(|d| match d {
                Decl::Control(c) if c.name == n => Some(c),
                _ => None,
            })
        };
        let parser = find_parser(&args[0].0)
            .ok_or_else(|| CompileError::ty(args[0].1, &format!("no parser `{}'", args[0].0)))?;
        let mut controls = Vec::new();
        for (n, p) in &args[1..] {
            controls.push(
                find_control(n)
                    .ok_or_else(|| CompileError::ty(*p, &format!("no control `{n}'")))?,
            );
        }
        // Layout from the parser's parameters: (packet_in, out H, inout M, inout std).
        if parser.params.len() != 4 {
            return Err(CompileError::ty(
                parser.pos,
                "the v1model parser takes (packet_in, out H, inout M, inout standard_metadata_t)",
            ));
        }
        let named = |t: &TypeRef, pos: Pos| match t {
            TypeRef::Named(n) => Ok(n.clone()),
            _ => Err(CompileError::ty(pos, "expected a struct type")),
        };
        self.hdr_name = named(&parser.params[1].ty, parser.params[1].pos)?;
        self.meta_name = named(&parser.params[2].ty, parser.params[2].pos)?;
        self.layout(parser.params[1].pos, parser.params[2].pos)?;
        self.parser(parser)?;
        let kinds = ["verify", "ingress", "egress", "compute", "deparser"];
        for (k, c) in kinds.iter().zip(&controls) {
            let body = self.control(c, k)?;
            match *k {
                "verify" => self.prog.verify = body,
                "ingress" => self.prog.ingress = body,
                "egress" => self.prog.egress = body,
                "compute" => self.prog.compute = body,
                _ => {}
            }
        }
        self.prog.meta_slots = self.next_slot as usize;
        if self.prog.meta_slots > META_MAX {
            return Err(CompileError::unsupported(
                ppos,
                &format!(
                    "program state of {} metadata slots (at most {META_MAX})",
                    self.prog.meta_slots
                ),
            ));
        }
        if self.opts.no_redundant {
            self.remove_redundant();
        }
        Ok(())
    }

    // ---- types and layout ----

    fn value_ty(&self, t: &TypeRef, pos: Pos) -> Result<Ty, CompileError> {
        self.value_ty_depth(t, pos, 0)
    }

    fn value_ty_depth(&self, t: &TypeRef, pos: Pos, d: usize) -> Result<Ty, CompileError> {
        match t {
            TypeRef::Bit(w) => Ok(Ty::Bit(*w)),
            TypeRef::Bool => Ok(Ty::Bool),
            TypeRef::Error => Ok(Ty::Error),
            TypeRef::Named(n) => match self.types.get(n) {
                Some(TypeDef::Alias(a)) if d < 32 => self.value_ty_depth(a, pos, d + 1),
                Some(_) => Err(CompileError::ty(
                    pos,
                    &format!("`{n}' is a header or struct, not a value type"),
                )),
                None => Err(CompileError::ty(pos, &format!("unknown type `{n}'"))),
            },
            TypeRef::Generic(n, _) => Err(CompileError::ty(
                pos,
                &format!("`{n}<...>' is not a value type"),
            )),
        }
    }

    /// Resolves aliases to a header/struct definition name.
    fn compound(&self, t: &TypeRef) -> Option<(String, TypeDef)> {
        let mut t = t.clone();
        for _ in 0..32 {
            match &t {
                TypeRef::Named(n) => match self.types.get(n)? {
                    TypeDef::Alias(a) => t = a.clone(),
                    d => return Some((n.clone(), d.clone())),
                },
                _ => return None,
            }
        }
        None
    }

    fn layout(&mut self, hpos: Pos, mpos: Pos) -> Result<(), CompileError> {
        let Some((_, TypeDef::Struct(hf))) = self.compound(&TypeRef::Named(self.hdr_name.clone()))
        else {
            return Err(CompileError::ty(
                hpos,
                &format!("`{}' is not a struct of headers", self.hdr_name),
            ));
        };
        self.layout_hdrs("", &hf, 0)?;
        let Some((_, TypeDef::Struct(mf))) = self.compound(&TypeRef::Named(self.meta_name.clone()))
        else {
            return Err(CompileError::ty(
                mpos,
                &format!("`{}' is not a struct", self.meta_name),
            ));
        };
        self.layout_meta("", &mf, 0)?;
        self.prog.meta_bases[1] = self.next_slot;
        for (n, w) in STD_FIELDS {
            let ty = if w == 0 { Ty::Error } else { Ty::Bit(w) };
            self.std_paths
                .insert(n.to_string(), Place::Meta(1, self.next_slot, ty));
            match n {
                "ingress_port" => self.prog.std.ingress_port = self.next_slot,
                "egress_spec" => self.prog.std.egress_spec = self.next_slot,
                "egress_port" => self.prog.std.egress_port = self.next_slot,
                "packet_length" => self.prog.std.packet_length = self.next_slot,
                "parser_error" => self.prog.std.parser_error = self.next_slot,
                "checksum_error" => self.prog.std.checksum_error = self.next_slot,
                _ => {}
            }
            self.next_slot += 1;
        }
        self.prog.meta_bases[2] = self.next_slot;
        Ok(())
    }

    fn layout_hdrs(
        &mut self,
        prefix: &str,
        fields: &[ast::Field],
        depth: usize,
    ) -> Result<Vec<u8>, CompileError> {
        let mut insts = Vec::new();
        for f in fields {
            let path = format!("{prefix}{}", f.name);
            match self.compound(&f.ty) {
                Some((_, TypeDef::Header(hf))) => {
                    let i = self.prog.headers.len();
                    if i >= INST_MAX {
                        return Err(CompileError::unsupported(
                            f.pos,
                            &format!("more than {INST_MAX} header instances"),
                        ));
                    }
                    let mut bit = 0u16;
                    let mut fl = Vec::new();
                    for x in &hf {
                        let Ty::Bit(w) = self.value_ty(&x.ty, x.pos)? else {
                            unreachable!("checked in pass 1")
                        };
                        fl.push((x.name.clone(), bit, w));
                        self.hdr_paths
                            .insert(format!("{path}.{}", x.name), Place::HField(i as u8, bit, w));
                        bit += w;
                    }
                    if bit % 8 != 0 {
                        return Err(CompileError::ty(
                            f.pos,
                            &format!("header `{path}' is {bit} bits, not a whole number of bytes"),
                        ));
                    }
                    let len = bit / 8;
                    let off = self.prog.hdr_bytes as u16;
                    self.prog.hdr_bytes += len as usize;
                    if self.prog.hdr_bytes > HDR_MAX {
                        return Err(CompileError::unsupported(
                            f.pos,
                            &format!("headers larger than {HDR_MAX} bytes in total"),
                        ));
                    }
                    self.prog.headers.push(HdrInst {
                        name: path.clone(),
                        off,
                        len,
                        fields: fl,
                    });
                    self.prog.hdr_bases.push(off);
                    self.hdr_paths.insert(path, Place::Header(i as u8));
                    insts.push(i as u8);
                }
                Some((_, TypeDef::Struct(sf))) if depth < 8 => {
                    let sub = self.layout_hdrs(&format!("{path}."), &sf, depth + 1)?;
                    self.hdr_paths.insert(path, Place::HdrStruct(sub.clone()));
                    insts.extend(sub);
                }
                _ => {
                    return Err(CompileError::unsupported(
                        f.pos,
                        &format!("field `{path}' of the headers struct that is not a header"),
                    ))
                }
            }
        }
        Ok(insts)
    }

    fn layout_meta(
        &mut self,
        prefix: &str,
        fields: &[ast::Field],
        depth: usize,
    ) -> Result<(), CompileError> {
        for f in fields {
            let path = format!("{prefix}{}", f.name);
            match self.compound(&f.ty) {
                Some((_, TypeDef::Struct(sf))) if depth < 8 => {
                    self.layout_meta(&format!("{path}."), &sf, depth + 1)?;
                    self.meta_paths.insert(path, Place::MetaStruct);
                }
                Some(_) => {
                    return Err(CompileError::unsupported(
                        f.pos,
                        &format!("header `{path}' in the metadata struct"),
                    ))
                }
                None => {
                    let ty = self.value_ty(&f.ty, f.pos)?;
                    let s = self.next_slot;
                    self.next_slot += 1;
                    if self.next_slot as usize > META_MAX {
                        return Err(CompileError::unsupported(
                            f.pos,
                            &format!("more than {META_MAX} metadata fields"),
                        ));
                    }
                    let w = match ty {
                        Ty::Bit(w) => w,
                        _ => 1,
                    };
                    self.prog.meta_fields.push((path.clone(), s, w));
                    self.meta_paths.insert(path, Place::Meta(0, s, ty));
                }
            }
        }
        Ok(())
    }

    fn new_local(&mut self, pos: Pos) -> Result<u16, CompileError> {
        let s = self.next_slot;
        self.next_slot += 1;
        if self.next_slot as usize > META_MAX {
            return Err(CompileError::unsupported(
                pos,
                &format!("more than {META_MAX} metadata fields and locals"),
            ));
        }
        Ok(s)
    }

    // ---- places ----

    /// The access to `width` bits at `bitoff`; `None` when they span more than the 8 bytes
    /// one load reads.
    fn hacc(bitoff: u16, width: u16) -> Option<HAcc> {
        let off = bitoff / 8;
        let b = bitoff % 8;
        let kind = match (b, width) {
            (0, 8) => HKind::B8,
            (0, 16) => HKind::B16,
            (0, 32) => HKind::B32,
            _ => {
                let n = (b + width).div_ceil(8);
                if n > 8 {
                    return None;
                }
                HKind::Bits {
                    n: n as u8,
                    shift: (n * 8 - b - width) as u8,
                    mask: mask(width),
                }
            }
        };
        Some(HAcc { off, kind })
    }

    /// A read of header field `e` (instance `inst`, `w` bits at `bit`). A field spanning 9
    /// bytes (58..=64 bits off a byte boundary) is refused here, where it is read or
    /// written: a header holding one may still be extracted and emitted (P4-16 allows it).
    fn hfield_e(&self, inst: u8, bit: u16, w: u16, e: &Expr) -> Result<E, CompileError> {
        let base = if self.opts.flat {
            self.prog.headers[inst as usize].off * 8
        } else {
            0
        };
        let Some(a) = Self::hacc(base + bit, w) else {
            let name = Self::path(e)
                .map(|(root, members)| [vec![root], members].concat().join("."))
                .unwrap_or_default();
            return Err(CompileError::unsupported(
                start(e),
                &format!(
                    "access to header field `{name}' (bit<{w}> at bit {bit} of its header) spanning more than 8 bytes"
                ),
            ));
        };
        Ok(if self.opts.flat {
            E::H(a)
        } else {
            E::HI(inst, a)
        })
    }

    fn hfield_lv(&self, inst: u8, bit: u16, w: u16, e: &Expr) -> Result<Lv, CompileError> {
        Ok(match self.hfield_e(inst, bit, w, e)? {
            E::H(a) => Lv::H(a),
            E::HI(i, a) => Lv::HI(i, a),
            _ => unreachable!(),
        })
    }

    fn meta_e(&self, inst: u8, slot: u16) -> E {
        if self.opts.flat {
            E::M(slot)
        } else {
            E::MI(inst, slot - self.prog.meta_bases[inst as usize])
        }
    }

    fn meta_lv(&self, inst: u8, slot: u16, m: u64) -> Lv {
        if self.opts.flat {
            Lv::M(slot, m)
        } else {
            Lv::MI(inst, slot - self.prog.meta_bases[inst as usize], m)
        }
    }

    /// `a.b.c` as (root name, [b, c]) if the expression is a plain member path.
    fn path(e: &Expr) -> Option<(String, Vec<String>)> {
        match &e.kind {
            ExprKind::Name(n) => Some((n.clone(), Vec::new())),
            ExprKind::Member(b, m) => {
                let (r, mut v) = Self::path(b)?;
                v.push(m.clone());
                Some((r, v))
            }
            _ => None,
        }
    }

    /// Resolves a path below a parameter root.
    fn place(&self, sc: &Scope, e: &Expr) -> Result<Option<Place>, CompileError> {
        let Some((root, members)) = Self::path(e) else {
            return Ok(None);
        };
        let Some(r) = sc.roots.get(&root) else {
            return Ok(None);
        };
        let key = members.join(".");
        let map = match r {
            Root::Hdr => &self.hdr_paths,
            Root::Meta => &self.meta_paths,
            Root::Std => &self.std_paths,
            Root::PacketIn | Root::PacketOut => {
                return Err(CompileError::ty(e.pos, &format!("`{root}' is a packet")))
            }
        };
        if members.is_empty() {
            return Ok(Some(match r {
                Root::Hdr => Place::HdrStruct((0..self.prog.headers.len() as u8).collect()),
                _ => Place::MetaStruct,
            }));
        }
        match map.get(&key) {
            Some(p) => Ok(Some(p.clone())),
            None => Err(CompileError::ty(
                e.pos,
                &format!("`{root}.{key}' does not exist"),
            )),
        }
    }

    fn header_of(&self, sc: &Scope, e: &Expr, what: &str) -> Result<u8, CompileError> {
        match self.place(sc, e)? {
            Some(Place::Header(i)) => Ok(i),
            _ => Err(CompileError::ty(e.pos, &format!("{what} needs a header"))),
        }
    }

    // ---- expressions ----

    fn coerce(&self, e: E, from: Ty, to: Ty, pos: Pos) -> Result<E, CompileError> {
        match (from, to) {
            (a, b) if a == b => Ok(e),
            (Ty::Int, Ty::Bit(w)) => {
                if let E::Const(v) = e {
                    if v > mask(w) {
                        return Err(CompileError::ty(
                            pos,
                            &format!("value {v} does not fit in bit<{w}>"),
                        ));
                    }
                }
                Ok(e)
            }
            _ => Err(CompileError::ty(
                pos,
                &format!("expected {}, found {}", ty_str(to), ty_str(from)),
            )),
        }
    }

    fn unify(&self, a: Ty, b: Ty, pos: Pos, op: &str) -> Result<Ty, CompileError> {
        match (a, b) {
            (x, y) if x == y => Ok(x),
            (Ty::Int, Ty::Bit(w)) | (Ty::Bit(w), Ty::Int) => Ok(Ty::Bit(w)),
            _ => Err(CompileError::ty(
                pos,
                &format!("operands of `{op}' differ: {} and {}", ty_str(a), ty_str(b)),
            )),
        }
    }

    fn const_u64(&self, sc: &Scope, e: &Expr) -> Result<(u64, Ty), CompileError> {
        match self.expr(sc, e)? {
            (E::Const(v), t) => Ok((v, t)),
            _ => Err(CompileError::ty(e.pos, "expected a compile-time constant")),
        }
    }

    fn expr(&self, sc: &Scope, e: &Expr) -> Result<(E, Ty), CompileError> {
        let pos = e.pos;
        match &e.kind {
            ExprKind::Int(v, w) => {
                let v = u64::try_from(*v)
                    .map_err(|_| CompileError::ty(pos, "integer literal wider than 64 bits"))?;
                match w {
                    Some(w) => {
                        if v > mask(*w) {
                            return Err(CompileError::ty(
                                pos,
                                &format!("value {v} does not fit in bit<{w}>"),
                            ));
                        }
                        Ok((E::Const(v), Ty::Bit(*w)))
                    }
                    None => Ok((E::Const(v), Ty::Int)),
                }
            }
            ExprKind::Bool(b) => Ok((E::Const(*b as u64), Ty::Bool)),
            ExprKind::Name(n) => {
                match sc.local(n) {
                    Some(Named::Var(s, t)) => return Ok((self.meta_e(2, s), t)),
                    Some(Named::Const(v, t)) => return Ok((E::Const(v), t)),
                    None => {}
                }
                if let Some(&(i, w)) = sc.params.get(n) {
                    return Ok((E::Param(i), Ty::Bit(w)));
                }
                if let Some((v, t)) = sc.control_const(n).or_else(|| self.consts.get(n).copied()) {
                    return Ok((E::Const(v), t));
                }
                if sc.roots.contains_key(n) {
                    return Err(CompileError::ty(pos, &format!("`{n}' is not a value")));
                }
                Err(CompileError::ty(pos, &format!("unknown name `{n}'")))
            }
            ExprKind::Member(base, m) => {
                if let ExprKind::Name(b) = &base.kind {
                    if b == "error" && !sc.roots.contains_key("error") {
                        let code = self.errors.iter().position(|x| x == m).ok_or_else(|| {
                            CompileError::ty(pos, &format!("unknown error `{m}'"))
                        })?;
                        return Ok((E::Const(code as u64), Ty::Error));
                    }
                }
                if let ExprKind::Call(..) = base.kind {
                    if m == "hit" || m == "miss" || m == "action_run" {
                        return Err(CompileError::unsupported(
                            pos,
                            &format!("`apply().{m}' outside `if (t.apply().hit)' or `switch (t.apply().action_run)'"),
                        ));
                    }
                }
                match self.place(sc, e)? {
                    Some(Place::HField(i, b, w)) => Ok((self.hfield_e(i, b, w, e)?, Ty::Bit(w))),
                    Some(Place::Meta(i, s, t)) => Ok((self.meta_e(i, s), t)),
                    Some(_) => Err(CompileError::ty(
                        pos,
                        "a header or struct is not a value here",
                    )),
                    None => Err(CompileError::ty(
                        pos,
                        &format!(
                            "unknown name `{}'",
                            Self::path(e)
                                .map(|p| format!("{}.{}", p.0, p.1.join(".")))
                                .unwrap_or_else(|| m.clone())
                        ),
                    )),
                }
            }
            ExprKind::Call(callee, args) => {
                if let ExprKind::Member(obj, m) = &callee.kind {
                    if m == "isValid" && args.is_empty() {
                        let i = self.header_of(sc, obj, "isValid()")?;
                        return Ok((E::Valid(i), Ty::Bool));
                    }
                    if m == "apply" {
                        return Err(CompileError::unsupported(
                            pos,
                            "table apply inside an expression",
                        ));
                    }
                }
                let name = Self::path(callee)
                    .map(|(r, v)| std::iter::once(r).chain(v).collect::<Vec<_>>().join("."))
                    .unwrap_or_else(|| "?".into());
                Err(CompileError::unsupported(
                    pos,
                    &format!("call of `{name}' in an expression"),
                ))
            }
            ExprKind::Index(..) => Err(CompileError::unsupported(pos, "header stack index")),
            ExprKind::List(_) => Err(CompileError::unsupported(
                pos,
                "list expression outside a checksum field list",
            )),
            ExprKind::Slice(x, hi, lo) => {
                let (ex, tx) = self.expr(sc, x)?;
                let Ty::Bit(w) = tx else {
                    return Err(CompileError::ty(pos, &format!("slice of {}", ty_str(tx))));
                };
                let (h, _) = self.const_u64(sc, hi)?;
                let (l, _) = self.const_u64(sc, lo)?;
                if h < l || h >= w as u64 {
                    return Err(CompileError::ty(
                        pos,
                        &format!("slice [{h}:{l}] out of bit<{w}>"),
                    ));
                }
                let nw = (h - l + 1) as u16;
                let m = mask(nw);
                if let E::Const(v) = ex {
                    return Ok((E::Const((v >> l) & m), Ty::Bit(nw)));
                }
                Ok((E::Slice(Box::new(ex), l as u8, m), Ty::Bit(nw)))
            }
            ExprKind::Unary(op, x) => {
                let (ex, tx) = self.expr(sc, x)?;
                match (op, tx) {
                    (UnOp::Not, Ty::Bool) => Ok((fold_un(Un::Not, ex, 1), Ty::Bool)),
                    (UnOp::BitNot, Ty::Bit(w)) => Ok((fold_un(Un::BitNot, ex, mask(w)), tx)),
                    (UnOp::Neg, Ty::Bit(w)) => Ok((fold_un(Un::Neg, ex, mask(w)), tx)),
                    (UnOp::BitNot | UnOp::Neg, Ty::Int) => Err(CompileError::unsupported(
                        pos,
                        "negated or complemented integer without a width (write bit<N>)",
                    )),
                    _ => Err(CompileError::ty(
                        pos,
                        &format!("operator {op:?} on {}", ty_str(tx)),
                    )),
                }
            }
            ExprKind::Binary(op, a, b) => self.binary(sc, *op, a, b, pos),
            ExprKind::Cast(t, x) => {
                let to = self.value_ty(t, pos)?;
                let (ex, tx) = self.expr(sc, x)?;
                match (tx, to) {
                    (Ty::Bit(a), Ty::Bit(b)) => {
                        if b < a {
                            Ok((fold_bin(Bin::And, ex, E::Const(mask(b)), u64::MAX), to))
                        } else {
                            Ok((ex, to))
                        }
                    }
                    (Ty::Int, Ty::Bit(b)) => match ex {
                        E::Const(v) => Ok((E::Const(v & mask(b)), to)),
                        _ => unreachable!("int-typed expressions are constants"),
                    },
                    (Ty::Bool, Ty::Bit(_)) | (Ty::Bit(1), Ty::Bool) => Ok((ex, to)),
                    (a, b) if a == b => Ok((ex, to)),
                    _ => Err(CompileError::ty(
                        pos,
                        &format!("cannot cast {} to {}", ty_str(tx), ty_str(to)),
                    )),
                }
            }
            ExprKind::Mux(c, a, b) => {
                let (ec, tc) = self.expr(sc, c)?;
                if tc != Ty::Bool {
                    return Err(CompileError::ty(c.pos, "condition is not bool"));
                }
                let (ea, ta) = self.expr(sc, a)?;
                let (eb, tb) = self.expr(sc, b)?;
                let t = self.unify(ta, tb, pos, "?:")?;
                let ea = self.coerce(ea, ta, t, a.pos)?;
                let eb = self.coerce(eb, tb, t, b.pos)?;
                if let E::Const(v) = ec {
                    return Ok((if v != 0 { ea } else { eb }, t));
                }
                Ok((E::Mux(Box::new(ec), Box::new(ea), Box::new(eb)), t))
            }
        }
    }

    fn binary(
        &self,
        sc: &Scope,
        op: BinOp,
        a: &Expr,
        b: &Expr,
        pos: Pos,
    ) -> Result<(E, Ty), CompileError> {
        let (ea, ta) = self.expr(sc, a)?;
        let (eb, tb) = self.expr(sc, b)?;
        let os = op_str(op);
        match op {
            BinOp::And | BinOp::Or => {
                if ta != Ty::Bool || tb != Ty::Bool {
                    return Err(CompileError::ty(
                        pos,
                        &format!(
                            "operands of `{os}' must be bool, found {} and {}",
                            ty_str(ta),
                            ty_str(tb)
                        ),
                    ));
                }
                Ok((fold_bin(bin_ir(op).unwrap(), ea, eb, 1), Ty::Bool))
            }
            BinOp::Eq | BinOp::Ne => {
                self.unify(ta, tb, pos, os)?;
                Ok((fold_bin(bin_ir(op).unwrap(), ea, eb, 1), Ty::Bool))
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let t = self.unify(ta, tb, pos, os)?;
                if !matches!(t, Ty::Bit(_) | Ty::Int) {
                    return Err(CompileError::ty(pos, &format!("`{os}' on {}", ty_str(t))));
                }
                Ok((fold_bin(bin_ir(op).unwrap(), ea, eb, 1), Ty::Bool))
            }
            BinOp::Shl | BinOp::Shr => {
                if !matches!(tb, Ty::Bit(_) | Ty::Int) {
                    return Err(CompileError::ty(pos, &format!("shift by {}", ty_str(tb))));
                }
                match ta {
                    Ty::Bit(w) => Ok((fold_bin(bin_ir(op).unwrap(), ea, eb, mask(w)), ta)),
                    Ty::Int => match (ea, eb) {
                        (E::Const(x), E::Const(y)) => Ok((
                            E::Const(eval_bin(bin_ir(op).unwrap(), x, y, u64::MAX)),
                            Ty::Int,
                        )),
                        _ => Err(CompileError::ty(
                            pos,
                            "shift of an integer without a width by a run-time value",
                        )),
                    },
                    _ => Err(CompileError::ty(pos, &format!("shift of {}", ty_str(ta)))),
                }
            }
            BinOp::Concat => {
                let (Ty::Bit(wa), Ty::Bit(wb)) = (ta, tb) else {
                    return Err(CompileError::ty(
                        pos,
                        &format!(
                            "`++' needs bit<N> operands, found {} and {}",
                            ty_str(ta),
                            ty_str(tb)
                        ),
                    ));
                };
                if wa + wb > 64 {
                    return Err(CompileError::unsupported(
                        pos,
                        &format!("concatenation wider than 64 bits (bit<{}>)", wa + wb),
                    ));
                }
                if let (E::Const(x), E::Const(y)) = (&ea, &eb) {
                    return Ok((E::Const((x << wb) | y), Ty::Bit(wa + wb)));
                }
                Ok((
                    E::Concat(Box::new(ea), Box::new(eb), wb as u8),
                    Ty::Bit(wa + wb),
                ))
            }
            BinOp::Div | BinOp::Mod => match (ea, eb) {
                (E::Const(x), E::Const(y)) => {
                    if y == 0 {
                        return Err(CompileError::ty(pos, "division by zero"));
                    }
                    let t = self.unify(ta, tb, pos, os)?;
                    Ok((E::Const(if op == BinOp::Div { x / y } else { x % y }), t))
                }
                _ => Err(CompileError::unsupported(
                    pos,
                    &format!("`{os}' on run-time values"),
                )),
            },
            _ => {
                let t = self.unify(ta, tb, pos, os)?;
                let m = match t {
                    Ty::Bit(w) => mask(w),
                    Ty::Int => u64::MAX,
                    _ => return Err(CompileError::ty(pos, &format!("`{os}' on {}", ty_str(t)))),
                };
                if matches!(op, BinOp::AddSat | BinOp::SubSat) && t == Ty::Int {
                    return Err(CompileError::ty(pos, "saturating operator needs a width"));
                }
                Ok((fold_bin(bin_ir(op).unwrap(), ea, eb, m), t))
            }
        }
    }

    /// An assignable expression.
    fn lvalue(&self, sc: &Scope, e: &Expr) -> Result<(Lv, Ty), CompileError> {
        let pos = e.pos;
        match &e.kind {
            ExprKind::Name(n) => {
                match sc.local(n) {
                    Some(Named::Var(s, t)) => {
                        let w = match t {
                            Ty::Bit(w) => w,
                            _ => 64,
                        };
                        return Ok((self.meta_lv(2, s, mask(w)), t));
                    }
                    Some(Named::Const(..)) => {
                        return Err(CompileError::ty(
                            pos,
                            &format!("cannot assign to constant `{n}'"),
                        ))
                    }
                    None => {}
                }
                if sc.params.contains_key(n) {
                    return Err(CompileError::ty(
                        pos,
                        &format!("cannot assign to action parameter `{n}'"),
                    ));
                }
                if sc.control_const(n).is_some() || self.consts.contains_key(n) {
                    return Err(CompileError::ty(
                        pos,
                        &format!("cannot assign to constant `{n}'"),
                    ));
                }
                Err(CompileError::ty(pos, &format!("unknown name `{n}'")))
            }
            ExprKind::Member(..) => match self.place(sc, e)? {
                Some(Place::HField(i, b, w)) => Ok((self.hfield_lv(i, b, w, e)?, Ty::Bit(w))),
                Some(Place::Meta(i, s, t)) => {
                    if i == 1 && s == self.std_slot("mcast_grp") {
                        return Err(CompileError::unsupported(
                            pos,
                            "multicast (standard_metadata.mcast_grp)",
                        ));
                    }
                    let w = match t {
                        Ty::Bit(w) => w,
                        _ => 64,
                    };
                    Ok((self.meta_lv(i, s, mask(w)), t))
                }
                Some(_) => Err(CompileError::unsupported(
                    pos,
                    "assignment of a whole header or struct",
                )),
                None => Err(CompileError::ty(pos, "not an assignable field")),
            },
            ExprKind::Slice(x, hi, lo) => {
                let (lx, tx) = self.lvalue(sc, x)?;
                let Ty::Bit(w) = tx else {
                    return Err(CompileError::ty(pos, &format!("slice of {}", ty_str(tx))));
                };
                let (h, _) = self.const_u64(sc, hi)?;
                let (l, _) = self.const_u64(sc, lo)?;
                if h < l || h >= w as u64 {
                    return Err(CompileError::ty(
                        pos,
                        &format!("slice [{h}:{l}] out of bit<{w}>"),
                    ));
                }
                let nw = (h - l + 1) as u16;
                Ok((Lv::Slice(Box::new(lx), l as u8, mask(nw)), Ty::Bit(nw)))
            }
            _ => Err(CompileError::ty(pos, "not an assignable expression")),
        }
    }

    fn std_slot(&self, n: &str) -> u16 {
        match self.std_paths.get(n) {
            Some(Place::Meta(_, s, _)) => *s,
            _ => u16::MAX,
        }
    }

    // ---- parser ----

    fn roots(&self, params: &[ast::Param]) -> Result<HashMap<String, Root>, CompileError> {
        let mut m = HashMap::new();
        for p in params {
            let r = match &p.ty {
                TypeRef::Named(n) if n == "packet_in" => Root::PacketIn,
                TypeRef::Named(n) if n == "packet_out" => Root::PacketOut,
                TypeRef::Named(n) if n == "standard_metadata_t" => Root::Std,
                TypeRef::Named(n) if *n == self.hdr_name => Root::Hdr,
                TypeRef::Named(n) if *n == self.meta_name => Root::Meta,
                t => {
                    return Err(CompileError::unsupported(
                        p.pos,
                        &format!(
                            "parameter `{}' of type {t:?} (v1model block parameters only)",
                            p.name
                        ),
                    ))
                }
            };
            m.insert(p.name.clone(), r);
        }
        Ok(m)
    }

    fn parser(&mut self, p: &ast::ParserDecl) -> Result<(), CompileError> {
        let mut sc = Scope {
            roots: self.roots(&p.params)?,
            in_parser: true,
            locals: vec![HashMap::new()],
            ..Default::default()
        };
        let mut idx = HashMap::new();
        for (i, s) in p.states.iter().enumerate() {
            if s.name == "accept" || s.name == "reject" {
                return Err(CompileError::ty(
                    s.pos,
                    &format!("state `{}' is reserved", s.name),
                ));
            }
            if idx.insert(s.name.clone(), i as u16).is_some() {
                return Err(CompileError::ty(
                    s.pos,
                    &format!("duplicate state `{}'", s.name),
                ));
            }
        }
        let Some(&start) = idx.get("start") else {
            return Err(CompileError::ty(p.pos, "parser has no `start' state"));
        };
        self.prog.start = start;
        let target = |n: &str, pos: Pos| -> Result<Target, CompileError> {
            match n {
                "accept" => Ok(Target::Accept),
                "reject" => Ok(Target::Reject),
                _ => idx
                    .get(n)
                    .map(|&i| Target::State(i))
                    .ok_or_else(|| CompileError::ty(pos, &format!("unknown state `{n}'"))),
            }
        };
        for s in &p.states {
            let body = self.stmts(&mut sc, &s.body)?;
            let trans = match &s.trans {
                ast::Transition::Goto(n, pos) => Trans::Goto(target(n, *pos)?),
                ast::Transition::Select { keys, cases, .. } => {
                    let mut ks = Vec::new();
                    let mut widths = Vec::new();
                    for k in keys {
                        let (e, t) = self.expr(&sc, k)?;
                        let w = match t {
                            Ty::Bit(w) => w,
                            Ty::Bool => 1,
                            _ => {
                                return Err(CompileError::ty(
                                    k.pos,
                                    &format!("select on {}", ty_str(t)),
                                ))
                            }
                        };
                        ks.push(e);
                        widths.push(w);
                    }
                    if ks.len() > 8 {
                        return Err(CompileError::unsupported(
                            keys[8].pos,
                            "select on more than 8 keys",
                        ));
                    }
                    let mut cs = Vec::new();
                    for c in cases {
                        let sets = if c.keysets.len() == 1 && matches!(c.keysets[0], KeySet::Any(_))
                        {
                            vec![CaseKey::Mask(0, 0); ks.len()]
                        } else {
                            if c.keysets.len() != ks.len() {
                                return Err(CompileError::ty(
                                    c.pos,
                                    &format!(
                                        "case has {} key sets, select has {} keys",
                                        c.keysets.len(),
                                        ks.len()
                                    ),
                                ));
                            }
                            let mut v = Vec::new();
                            for (k, &w) in c.keysets.iter().zip(&widths) {
                                v.push(match self.keyset(&sc, k, w)? {
                                    Match::Exact(x) => CaseKey::Mask(x, mask(w)),
                                    Match::Ternary(x, m) => CaseKey::Mask(x & m, m),
                                    Match::Range(a, b) => CaseKey::Range(a, b),
                                    Match::Lpm(..) => unreachable!(),
                                });
                            }
                            v
                        };
                        cs.push((sets, target(&c.target, c.pos)?));
                    }
                    Trans::Select {
                        keys: ks,
                        cases: cs,
                    }
                }
            };
            self.prog.states.push(State {
                name: s.name.clone(),
                body,
                trans,
            });
        }
        self.prog.parser_loops = self.has_cycle();
        Ok(())
    }

    /// A constant key set of width `w`.
    fn keyset(&self, sc: &Scope, k: &KeySet, w: u16) -> Result<Match, CompileError> {
        let val = |e: &Expr| -> Result<u64, CompileError> {
            let (v, t) = self.const_u64(sc, e)?;
            match t {
                Ty::Bit(x) if x != w => Err(CompileError::ty(
                    e.pos,
                    &format!("key set is bit<{x}>, key is bit<{w}>"),
                )),
                _ if v > mask(w) => Err(CompileError::ty(
                    e.pos,
                    &format!("value {v} does not fit in bit<{w}>"),
                )),
                _ => Ok(v),
            }
        };
        Ok(match k {
            KeySet::Any(_) => Match::Ternary(0, 0),
            KeySet::Value(e) => Match::Exact(val(e)?),
            KeySet::Mask(v, m) => Match::Ternary(val(v)?, val(m)?),
            KeySet::Range(a, b) => {
                let (a, b) = (val(a)?, val(b)?);
                Match::Range(a, b)
            }
        })
    }

    fn has_cycle(&self) -> bool {
        let n = self.prog.states.len();
        let succ = |i: usize| -> Vec<usize> {
            let ts: Vec<Target> = match &self.prog.states[i].trans {
                Trans::Goto(t) => vec![*t],
                Trans::Select { cases, .. } => cases.iter().map(|c| c.1).collect(),
            };
            ts.into_iter()
                .filter_map(|t| match t {
                    Target::State(s) => Some(s as usize),
                    _ => None,
                })
                .collect()
        };
        // Iterative DFS with colours.
        let mut colour = vec![0u8; n];
        for root in 0..n {
            if colour[root] != 0 {
                continue;
            }
            let mut stack = vec![(root, 0usize)];
            colour[root] = 1;
            while let Some(&mut (v, ref mut k)) = stack.last_mut() {
                let s = succ(v);
                if *k < s.len() {
                    let w = s[*k];
                    *k += 1;
                    if colour[w] == 1 {
                        return true;
                    }
                    if colour[w] == 0 {
                        colour[w] = 1;
                        stack.push((w, 0));
                    }
                } else {
                    colour[v] = 2;
                    stack.pop();
                }
            }
        }
        false
    }

    // ---- controls ----

    fn control(&mut self, c: &ast::ControlDecl, kind: &str) -> Result<Vec<S>, CompileError> {
        let mut sc = Scope {
            roots: self.roots(&c.params)?,
            locals: vec![HashMap::new()],
            control: Some(ControlNames {
                name: c.name.clone(),
                ..Default::default()
            }),
            ..Default::default()
        };
        if kind == "deparser" {
            if !c.locals.is_empty() {
                return Err(CompileError::unsupported(
                    c.pos,
                    "declarations in the deparser",
                ));
            }
            return self.deparser(&sc, &c.apply).map(|_| Vec::new());
        }
        let mut init = Vec::new();
        let mut direct_counters = HashSet::new();
        for l in &c.locals {
            match l {
                Local::Const(k) => {
                    let c = self.const_value(&sc, k)?;
                    if sc.local(&k.name).is_some() || sc.control_const(&k.name).is_some() {
                        return Err(CompileError::ty(
                            k.pos,
                            &format!("duplicate declaration `{}'", k.name),
                        ));
                    }
                    let cn = sc.control.as_mut().expect("control");
                    cn.consts.insert(k.name.clone(), c);
                }
                Local::Var(v) => {
                    init.extend(self.var_decl(&mut sc, v)?);
                }
                Local::Instance {
                    ty,
                    args,
                    name,
                    pos,
                } => {
                    let inst = self.instance(&sc, ty, args, name, *pos)?;
                    if matches!(inst, Inst::DirectCounter) {
                        direct_counters.insert(name.clone());
                    }
                    sc.control
                        .as_mut()
                        .unwrap()
                        .insts
                        .insert(name.clone(), inst);
                }
                Local::Action(a) => {
                    let cn = sc.control.as_ref().unwrap().clone();
                    if cn.actions.contains_key(&a.name) || a.name == "NoAction" {
                        return Err(CompileError::ty(
                            a.pos,
                            &format!("duplicate action `{}'", a.name),
                        ));
                    }
                    let mut asc = sc.clone();
                    asc.in_action = true;
                    asc.locals.push(HashMap::new());
                    let mut params = Vec::new();
                    for (i, p) in a.params.iter().enumerate() {
                        if p.dir.is_some() {
                            return Err(CompileError::unsupported(
                                p.pos,
                                "directional action parameter",
                            ));
                        }
                        let Ty::Bit(w) = self.value_ty(&p.ty, p.pos)? else {
                            return Err(CompileError::unsupported(
                                p.pos,
                                "action parameter that is not bit<N>",
                            ));
                        };
                        if i >= PARAMS_MAX {
                            return Err(CompileError::unsupported(
                                p.pos,
                                &format!("action with more than {PARAMS_MAX} parameters"),
                            ));
                        }
                        asc.params.insert(p.name.clone(), (i as u8, w));
                        params.push((p.name.clone(), w));
                    }
                    self.direct_read = None;
                    let body = self.stmts(&mut asc, &a.body)?;
                    if let Some((mi, pos)) = self.direct_read.take() {
                        if params.len() >= PARAMS_MAX {
                            return Err(CompileError::unsupported(
                                pos,
                                &format!(
                                    "direct_meter read in an action with {PARAMS_MAX} parameters"
                                ),
                            ));
                        }
                        params.push((direct_meter_param(&self.prog.meters[mi as usize].name), 32));
                    }
                    let id = self.prog.actions.len() as u16;
                    self.prog.actions.push(Action {
                        name: a.name.clone(),
                        control: c.name.clone(),
                        params,
                        body,
                    });
                    sc.control
                        .as_mut()
                        .unwrap()
                        .actions
                        .insert(a.name.clone(), id);
                }
                Local::Table(t) => {
                    let id = self.table(&sc, t, &direct_counters)?;
                    let cn = sc.control.as_mut().unwrap();
                    if cn.tables.insert(t.name.clone(), id).is_some() {
                        return Err(CompileError::ty(
                            t.pos,
                            &format!("duplicate table `{}'", t.name),
                        ));
                    }
                }
            }
        }
        let mut body = init;
        body.extend(self.stmts(&mut sc, &c.apply)?);
        Ok(body)
    }

    fn instance(
        &mut self,
        sc: &Scope,
        ty: &TypeRef,
        args: &[Expr],
        name: &str,
        pos: Pos,
    ) -> Result<Inst, CompileError> {
        let (tn, targs) = match ty {
            TypeRef::Named(n) => (n.as_str(), &[][..]),
            TypeRef::Generic(n, a) => (n.as_str(), &a[..]),
            _ => return Err(CompileError::ty(pos, "bad instance type")),
        };
        let size = |e: Option<&Expr>| -> Result<u32, CompileError> {
            let e = e.ok_or_else(|| CompileError::ty(pos, &format!("`{tn}' needs a size")))?;
            let (v, _) = self.const_u64(sc, e)?;
            if v == 0 || v > 1 << 24 {
                return Err(CompileError::unsupported(
                    e.pos,
                    &format!("{tn} size {v} (1..=16777216)"),
                ));
            }
            Ok(v as u32)
        };
        let enum_member = |e: Option<&Expr>, en: &str| -> Result<String, CompileError> {
            match e.map(|e| (&e.kind, e.pos)) {
                Some((ExprKind::Member(b, m), _)) if matches!(&b.kind, ExprKind::Name(x) if x == en) => {
                    Ok(m.clone())
                }
                Some((_, p)) => Err(CompileError::ty(p, &format!("expected {en}.<member>"))),
                None => Err(CompileError::ty(pos, &format!("`{tn}' needs a {en}"))),
            }
        };
        // Instances are declared by controls only.
        let control = sc
            .control
            .as_ref()
            .map(|c| c.name.clone())
            .unwrap_or_default();
        match tn {
            "counter" => {
                let n = size(args.first())?;
                let k = match enum_member(args.get(1), "CounterType")?.as_str() {
                    "packets" => CounterKind::Packets,
                    "bytes" => CounterKind::Bytes,
                    "packets_and_bytes" => CounterKind::Both,
                    m => return Err(CompileError::ty(pos, &format!("unknown CounterType.{m}"))),
                };
                self.prog.counters.push(Counter {
                    name: name.to_string(),
                    control,
                    size: n,
                    kind: k,
                });
                Ok(Inst::Counter(self.prog.counters.len() as u16 - 1))
            }
            "direct_counter" => {
                enum_member(args.first(), "CounterType")?;
                Ok(Inst::DirectCounter)
            }
            "register" => {
                let w = match targs.first() {
                    Some(t) => match self.value_ty(t, pos)? {
                        Ty::Bit(w) => w,
                        t => {
                            return Err(CompileError::unsupported(
                                pos,
                                &format!("register of {}", ty_str(t)),
                            ))
                        }
                    },
                    None => return Err(CompileError::ty(pos, "register needs a type argument")),
                };
                let n = size(args.first())?;
                self.prog.registers.push(Register {
                    name: name.to_string(),
                    control,
                    size: n,
                    width: w,
                });
                Ok(Inst::Register(self.prog.registers.len() as u16 - 1, w))
            }
            "meter" => {
                let n = size(args.first())?;
                let bytes = match enum_member(args.get(1), "MeterType")?.as_str() {
                    "packets" => false,
                    "bytes" => true,
                    m => return Err(CompileError::ty(pos, &format!("unknown MeterType.{m}"))),
                };
                self.prog.meters.push(Meter {
                    name: name.to_string(),
                    control,
                    size: n,
                    bytes,
                    direct: false,
                });
                Ok(Inst::Meter(self.prog.meters.len() as u16 - 1))
            }
            "direct_meter" => {
                if !matches!(targs.first().map(|t| self.value_ty(t, pos)).transpose()?, Some(Ty::Bit(w)) if w >= 2)
                {
                    return Err(CompileError::ty(
                        pos,
                        "direct_meter needs a bit<N> type argument, N >= 2",
                    ));
                }
                let bytes = match enum_member(args.first(), "MeterType")?.as_str() {
                    "packets" => false,
                    "bytes" => true,
                    m => return Err(CompileError::ty(pos, &format!("unknown MeterType.{m}"))),
                };
                // Sized by its table (`meters = <name>`).
                self.prog.meters.push(Meter {
                    name: name.to_string(),
                    control,
                    size: 1,
                    bytes,
                    direct: true,
                });
                Ok(Inst::DirectMeter(self.prog.meters.len() as u16 - 1))
            }
            other => Err(CompileError::unsupported(pos, &format!("extern `{other}'"))),
        }
    }

    fn table(
        &mut self,
        sc: &Scope,
        t: &ast::TableDecl,
        direct_counters: &HashSet<String>,
    ) -> Result<u16, CompileError> {
        let cn = sc.control.as_ref().unwrap();
        let mut keys = Vec::new();
        let mut total = 0u32;
        let mut lpms = 0;
        for k in &t.keys {
            let (e, ty) = self.expr(sc, &k.expr)?;
            let w = match ty {
                Ty::Bit(w) => w,
                Ty::Bool => 1,
                _ => {
                    return Err(CompileError::ty(
                        k.pos,
                        &format!("table key of {}", ty_str(ty)),
                    ))
                }
            };
            let kind = match k.kind.as_str() {
                "exact" => MatchKind::Exact,
                "lpm" => {
                    lpms += 1;
                    MatchKind::Lpm
                }
                "ternary" => MatchKind::Ternary,
                "range" => MatchKind::Range,
                other => {
                    return Err(CompileError::unsupported(
                        k.pos,
                        &format!("match kind `{other}'"),
                    ))
                }
            };
            if lpms > 1 {
                return Err(CompileError::ty(k.pos, "a table has at most one lpm key"));
            }
            total += w as u32;
            let name = Self::path(&k.expr)
                .map(|(r, v)| std::iter::once(r).chain(v).collect::<Vec<_>>().join("."))
                .unwrap_or_else(|| format!("key{}", keys.len()));
            keys.push(Key {
                name,
                e,
                kind,
                width: w,
            });
        }
        if total > 128 {
            return Err(CompileError::unsupported(
                t.pos,
                &format!("table key of {total} bits (at most 128)"),
            ));
        }
        let mut actions = Vec::new();
        for (a, pos) in &t.actions {
            let id = if a == "NoAction" {
                0
            } else {
                *cn.actions
                    .get(a)
                    .ok_or_else(|| CompileError::ty(*pos, &format!("unknown action `{a}'")))?
            };
            actions.push(id);
        }
        if actions.is_empty() {
            return Err(CompileError::ty(
                t.pos,
                &format!("table `{}' has no actions", t.name),
            ));
        }
        let mut default = match &t.default {
            Some((call, _)) => {
                let a = self.action_ref(sc, call, &actions)?;
                let p = self.const_args(sc, call, a)?;
                (a, p)
            }
            None => (0, Vec::new()),
        };
        let mut entries = match &t.entries {
            None => None,
            Some(es) => {
                let n = es.len() as u32;
                let mut v = Vec::new();
                for (i, e) in es.iter().enumerate() {
                    if e.keysets.len() != keys.len() {
                        return Err(CompileError::ty(
                            e.pos,
                            &format!(
                                "entry has {} key sets, table has {} keys",
                                e.keysets.len(),
                                keys.len()
                            ),
                        ));
                    }
                    let mut ms = Vec::new();
                    for (ks, k) in e.keysets.iter().zip(&keys) {
                        let m = self.keyset(sc, ks, k.width)?;
                        ms.push(entry_match(k, m, ks_pos(ks))?);
                    }
                    let a = self.action_ref(sc, &e.action, &actions)?;
                    let p = self.const_args(sc, &e.action, a)?;
                    let prio = match e.priority {
                        Some(p) => p.min(u32::MAX as u64) as u32,
                        None => n - i as u32,
                    };
                    v.push(EntrySpec {
                        matches: ms,
                        action: a,
                        params: p,
                        priority: prio,
                    });
                }
                Some(v)
            }
        };
        let direct_counter = match &t.counters {
            Some((n, pos)) => {
                if !direct_counters.contains(n) {
                    return Err(CompileError::ty(
                        *pos,
                        &format!("`{n}' is not a direct_counter"),
                    ));
                }
                Some(n.clone())
            }
            None => None,
        };
        let direct_meter =
            self.attach_direct_meter(sc, t, &actions, &mut default, entries.as_mut())?;
        self.prog.tables.push(Table {
            name: t.name.clone(),
            control: cn.name.clone(),
            keys,
            actions,
            default_const: t.default.as_ref().is_some_and(|d| d.1),
            default,
            const_entries: entries,
            size: t.size,
            direct_counter,
            direct_meter,
            synthetic: false,
        });
        Ok(self.prog.tables.len() as u16 - 1)
    }

    /// `meters = <direct_meter>`: sizes the meter by the table, gives the const entries
    /// cells 0.. and the default action the last cell (never configured: green), and checks
    /// that every action reading a direct meter reads this table's: the meter's index.
    fn attach_direct_meter(
        &mut self,
        sc: &Scope,
        t: &ast::TableDecl,
        actions: &[u16],
        default: &mut (u16, Vec<u64>),
        entries: Option<&mut Vec<EntrySpec>>,
    ) -> Result<Option<u16>, CompileError> {
        let meter = match &t.meters {
            None => None,
            Some((n, pos)) => match sc.control.as_ref().and_then(|c| c.insts.get(n)) {
                Some(Inst::DirectMeter(mi)) => {
                    if !self.direct_attached.insert(*mi) {
                        return Err(CompileError::unsupported(
                            *pos,
                            &format!("direct_meter `{n}' attached to two tables"),
                        ));
                    }
                    Some((*mi, n.as_str()))
                }
                _ => {
                    return Err(CompileError::ty(
                        *pos,
                        &format!("`{n}' is not a direct_meter"),
                    ))
                }
            },
        };
        for (&a, (an, pos)) in actions.iter().zip(&t.actions) {
            if let Some(m) = direct_meter_of(&self.prog.actions[a as usize]) {
                if meter.is_none_or(|(_, n)| n != m) {
                    return Err(CompileError::ty(
                        *pos,
                        &format!(
                            "action `{an}' reads direct_meter `{m}', which is not table `{}''s",
                            t.name
                        ),
                    ));
                }
            }
        }
        let Some((mi, _)) = meter else {
            return Ok(None);
        };
        let size = t.size.unwrap_or(DIRECT_METER_DEFAULT_SIZE);
        if size >= 1 << 24 {
            return Err(CompileError::unsupported(
                t.pos,
                &format!("table of {size} entries with a direct_meter (at most 16777215)"),
            ));
        }
        self.prog.meters[mi as usize].size = size as u32 + 1;
        let hidden =
            |this: &Self, a: u16| direct_meter_of(&this.prog.actions[a as usize]).is_some();
        if hidden(self, default.0) {
            default.1.push(size);
        }
        let entries = entries.map(|v| &mut v[..]).unwrap_or_default();
        if entries.len() as u64 > size {
            return Err(CompileError::program(
                t.pos,
                &format!(
                    "table `{}' has {} const entries, more than its size {size}",
                    t.name,
                    entries.len()
                ),
            ));
        }
        for (i, e) in entries.iter_mut().enumerate() {
            if hidden(self, e.action) {
                e.params.push(i as u64);
            }
        }
        Ok(Some(mi))
    }

    fn action_ref(
        &self,
        sc: &Scope,
        call: &ast::ActionCall,
        allowed: &[u16],
    ) -> Result<u16, CompileError> {
        let cn = sc.control.as_ref().unwrap();
        let id = if call.name == "NoAction" {
            0
        } else {
            *cn.actions.get(&call.name).ok_or_else(|| {
                CompileError::ty(call.pos, &format!("unknown action `{}'", call.name))
            })?
        };
        if !allowed.contains(&id) {
            return Err(CompileError::ty(
                call.pos,
                &format!("action `{}' is not in the table's actions", call.name),
            ));
        }
        Ok(id)
    }

    fn const_args(
        &self,
        sc: &Scope,
        call: &ast::ActionCall,
        a: u16,
    ) -> Result<Vec<u64>, CompileError> {
        let act = &self.prog.actions[a as usize];
        let ps = &act.params[..act.params.len() - direct_meter_of(act).is_some() as usize];
        if ps.len() != call.args.len() {
            return Err(CompileError::ty(
                call.pos,
                &format!(
                    "action `{}' takes {} arguments, got {}",
                    call.name,
                    ps.len(),
                    call.args.len()
                ),
            ));
        }
        let mut out = Vec::new();
        for (e, (_, w)) in call.args.iter().zip(ps) {
            let (v, t) = self.const_u64(sc, e)?;
            self.coerce(E::Const(v), t, Ty::Bit(*w), e.pos)?;
            out.push(v);
        }
        Ok(out)
    }

    fn deparser(&mut self, sc: &Scope, body: &[Stmt]) -> Result<(), CompileError> {
        for s in body {
            match s {
                Stmt::Call(e, pos) => {
                    let ExprKind::Call(callee, args) = &e.kind else {
                        unreachable!()
                    };
                    let ok = matches!(&callee.kind, ExprKind::Member(o, m)
                        if m == "emit" && matches!(&o.kind, ExprKind::Name(n) if sc.roots.get(n) == Some(&Root::PacketOut)));
                    if !ok || args.len() != 1 {
                        return Err(CompileError::unsupported(
                            *pos,
                            "deparser statement other than packet.emit(header)",
                        ));
                    }
                    match self.place(sc, &args[0])? {
                        Some(Place::Header(i)) => self.prog.deparse.push(i),
                        Some(Place::HdrStruct(v)) => self.prog.deparse.extend(v),
                        _ => {
                            return Err(CompileError::ty(
                                args[0].pos,
                                "emit needs a header or a struct of headers",
                            ))
                        }
                    }
                }
                Stmt::Block(b, _) => self.deparser(sc, b)?,
                Stmt::If(_, _, _, pos) | Stmt::Assign(_, _, pos) | Stmt::Switch(_, _, pos) => {
                    return Err(CompileError::unsupported(
                        *pos,
                        "deparser statement other than packet.emit(header)",
                    ))
                }
                Stmt::Var(ast::VarDecl { pos, .. }) | Stmt::Const(ast::ConstDecl { pos, .. }) => {
                    return Err(CompileError::unsupported(
                        *pos,
                        "deparser statement other than packet.emit(header)",
                    ))
                }
                Stmt::Exit(pos) | Stmt::Return(pos) => {
                    return Err(CompileError::unsupported(
                        *pos,
                        "deparser statement other than packet.emit(header)",
                    ))
                }
            }
        }
        Ok(())
    }

    // ---- statements ----

    fn var_decl(&mut self, sc: &mut Scope, v: &ast::VarDecl) -> Result<Vec<S>, CompileError> {
        let ty = self.value_ty(&v.ty, v.pos)?;
        let init = match &v.init {
            Some(e) => {
                let (x, t) = self.expr(sc, e)?;
                self.coerce(x, t, ty, e.pos)?
            }
            None => E::Const(0),
        };
        let slot = self.new_local(v.pos)?;
        let w = match ty {
            Ty::Bit(w) => w,
            _ => 64,
        };
        sc.declare(&v.name, Named::Var(slot, ty), v.pos)?;
        Ok(vec![S::Set(self.meta_lv(2, slot, mask(w)), init)])
    }

    /// A `const` declaration's value and type. Its initializer must be known at compile
    /// time (P4-16 §7.1.6); otherwise the error names the run-time part of it.
    fn const_value(&self, sc: &Scope, k: &ast::ConstDecl) -> Result<(u64, Ty), CompileError> {
        let ty = self.value_ty(&k.ty, k.pos)?;
        let (e, t) = self.expr(sc, &k.value)?;
        if let E::Const(v) = self.coerce(e, t, ty, k.value.pos)? {
            return Ok((v, ty));
        }
        let part = self.run_time_part(sc, &k.value);
        let what = match Self::path(part) {
            Some((root, members)) => format!(" `{}'", [vec![root], members].concat().join(".")),
            None => match &part.kind {
                ExprKind::Call(f, _) => Self::path(f)
                    .map(|(root, members)| {
                        format!(" `{}()'", [vec![root], members].concat().join("."))
                    })
                    .unwrap_or_default(),
                _ => String::new(),
            },
        };
        Err(CompileError::ty(
            start(part),
            &format!(
                "constant `{}' needs a compile-time value, found run-time value{what}",
                k.name
            ),
        ))
    }

    /// The innermost sub-expression of `e` that is not a compile-time constant, the
    /// leftmost when several are: a name, a field, a call (what a `const` is refused for).
    fn run_time_part<'e>(&self, sc: &Scope, e: &'e Expr) -> &'e Expr {
        let parts: Vec<&Expr> = match &e.kind {
            ExprKind::Slice(a, b, c) | ExprKind::Mux(a, b, c) => vec![a, b, c],
            ExprKind::Index(a, b) | ExprKind::Binary(_, a, b) => vec![a, b],
            ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => vec![a],
            ExprKind::List(v) => v.iter().collect(),
            ExprKind::Int(..)
            | ExprKind::Bool(_)
            | ExprKind::Name(_)
            | ExprKind::Member(..)
            | ExprKind::Call(..) => Vec::new(),
        };
        parts
            .into_iter()
            .find(|x| !matches!(self.expr(sc, x), Ok((E::Const(_), _))))
            .map_or(e, |x| self.run_time_part(sc, x))
    }

    fn stmts(&mut self, sc: &mut Scope, body: &[Stmt]) -> Result<Vec<S>, CompileError> {
        let mut out = Vec::new();
        for s in body {
            self.stmt(sc, s, &mut out)?;
        }
        Ok(out)
    }

    fn block(&mut self, sc: &mut Scope, body: &[Stmt]) -> Result<Vec<S>, CompileError> {
        sc.locals.push(HashMap::new());
        let r = self.stmts(sc, body);
        sc.locals.pop();
        r
    }

    /// `t.apply()` -> table id.
    fn apply_of(&self, sc: &Scope, e: &Expr) -> Option<u16> {
        let ExprKind::Call(callee, args) = &e.kind else {
            return None;
        };
        let ExprKind::Member(o, m) = &callee.kind else {
            return None;
        };
        let ExprKind::Name(t) = &o.kind else {
            return None;
        };
        if m != "apply" || !args.is_empty() {
            return None;
        }
        sc.control.as_ref()?.tables.get(t).copied()
    }

    fn stmt(&mut self, sc: &mut Scope, s: &Stmt, out: &mut Vec<S>) -> Result<(), CompileError> {
        match s {
            Stmt::Block(b, _) => out.extend(self.block(sc, b)?),
            Stmt::Var(v) => out.extend(self.var_decl(sc, v)?),
            Stmt::Const(k) => {
                let (v, t) = self.const_value(sc, k)?;
                sc.declare(&k.name, Named::Const(v, t), k.pos)?;
            }
            Stmt::Exit(pos) => {
                if sc.in_parser {
                    return Err(CompileError::ty(*pos, "exit in a parser"));
                }
                out.push(S::Exit)
            }
            Stmt::Return(pos) => {
                if sc.in_parser {
                    return Err(CompileError::ty(*pos, "return in a parser"));
                }
                out.push(S::Return)
            }
            Stmt::Assign(l, r, pos) => {
                let (lv, lt) = self.lvalue(sc, l)?;
                let (e, rt) = self.expr(sc, r)?;
                let e = self.coerce(e, rt, lt, *pos)?;
                out.push(S::Set(lv, e));
            }
            Stmt::If(c, t, e, pos) => {
                // if (t.apply().hit) / (t.apply().miss) / (!t.apply().hit)
                let (neg, inner) = match &c.kind {
                    ExprKind::Unary(UnOp::Not, x) => (true, &**x),
                    _ => (false, c),
                };
                if let ExprKind::Member(call, m) = &inner.kind {
                    if m == "hit" || m == "miss" {
                        let tid = self.apply_of(sc, call).ok_or_else(|| {
                            CompileError::ty(
                                c.pos,
                                &format!("`.{m}' of something that is not a table apply"),
                            )
                        })?;
                        let tb = self.block(sc, t)?;
                        let eb = match e {
                            Some(e) => self.block(sc, e)?,
                            None => Vec::new(),
                        };
                        let hit_first = (m == "hit") != neg;
                        let arms = if hit_first {
                            Arms::Hit(tb, eb)
                        } else {
                            Arms::Hit(eb, tb)
                        };
                        out.push(S::Apply(Apply { table: tid, arms }));
                        return Ok(());
                    }
                }
                let (ce, ct) = self.expr(sc, c)?;
                if ct != Ty::Bool {
                    return Err(CompileError::ty(
                        *pos,
                        &format!("if condition is {}, not bool", ty_str(ct)),
                    ));
                }
                let tb = self.block(sc, t)?;
                let eb = match e {
                    Some(e) => self.block(sc, e)?,
                    None => Vec::new(),
                };
                match ce {
                    E::Const(v) => out.extend(if v != 0 { tb } else { eb }),
                    ce => out.push(S::If(ce, tb, eb)),
                }
            }
            Stmt::Switch(e, cases, pos) => {
                let tid = match &e.kind {
                    ExprKind::Member(call, m) if m == "action_run" => self.apply_of(sc, call),
                    _ => None,
                }
                .ok_or_else(|| {
                    CompileError::unsupported(
                        *pos,
                        "switch on an expression (only table.apply().action_run)",
                    )
                })?;
                let allowed = self.prog.tables[tid as usize].actions.clone();
                let mut by_action = vec![None; self.prog.actions.len()];
                let mut bodies = Vec::new();
                let mut default = None;
                let mut pending: Vec<(Option<u16>, Pos)> = Vec::new();
                for c in cases {
                    let a = match &c.label {
                        None => None,
                        Some(l) => {
                            let cn = sc.control.as_ref().unwrap();
                            let id = if l == "NoAction" {
                                Some(0)
                            } else {
                                cn.actions.get(l).copied()
                            };
                            match id {
                                Some(id) if allowed.contains(&id) => Some(id),
                                _ => {
                                    return Err(CompileError::ty(
                                        c.pos,
                                        &format!(
                                            "`{l}' is not an action of table `{}'",
                                            self.prog.tables[tid as usize].name
                                        ),
                                    ))
                                }
                            }
                        }
                    };
                    pending.push((a, c.pos));
                    if let Some(b) = &c.body {
                        let body = self.block(sc, b)?;
                        let bi = bodies.len() as u16;
                        bodies.push(body);
                        for (a, p) in pending.drain(..) {
                            match a {
                                Some(a) => {
                                    if by_action[a as usize].is_some() {
                                        return Err(CompileError::ty(p, "duplicate switch label"));
                                    }
                                    by_action[a as usize] = Some(bi);
                                }
                                None => {
                                    if default.is_some() {
                                        return Err(CompileError::ty(p, "duplicate default label"));
                                    }
                                    default = Some(bi)
                                }
                            }
                        }
                    }
                }
                if let Some((_, p)) = pending.first() {
                    return Err(CompileError::ty(
                        *p,
                        "switch label without a body at the end",
                    ));
                }
                out.push(S::Apply(Apply {
                    table: tid,
                    arms: Arms::Switch {
                        by_action,
                        bodies,
                        default,
                    },
                }));
            }
            Stmt::Call(e, pos) => self.call(sc, e, *pos, out)?,
        }
        Ok(())
    }

    fn call(
        &mut self,
        sc: &mut Scope,
        e: &Expr,
        pos: Pos,
        out: &mut Vec<S>,
    ) -> Result<(), CompileError> {
        let ExprKind::Call(callee, args) = &e.kind else {
            unreachable!()
        };
        if let Some(t) = self.apply_of(sc, e) {
            if sc.in_action {
                return Err(CompileError::ty(pos, "table apply inside an action"));
            }
            out.push(S::Apply(Apply {
                table: t,
                arms: Arms::None,
            }));
            return Ok(());
        }
        match &callee.kind {
            ExprKind::Member(obj, m) => {
                // Header methods.
                if (m == "setValid" || m == "setInvalid") && args.is_empty() {
                    let i = self.header_of(sc, obj, &format!("{m}()"))?;
                    out.push(if m == "setValid" {
                        S::SetValid(i)
                    } else {
                        S::SetInvalid(i)
                    });
                    return Ok(());
                }
                if let ExprKind::Name(o) = &obj.kind {
                    match (sc.roots.get(o), m.as_str()) {
                        (Some(Root::PacketIn), "extract") => {
                            if !sc.in_parser {
                                return Err(CompileError::ty(pos, "extract outside the parser"));
                            }
                            if args.len() != 1 {
                                return Err(CompileError::unsupported(
                                    pos,
                                    "extract with a variable-size header",
                                ));
                            }
                            let i = self.header_of(sc, &args[0], "extract")?;
                            out.push(S::Extract(i));
                            return Ok(());
                        }
                        (Some(Root::PacketIn), other) => {
                            return Err(CompileError::unsupported(
                                pos,
                                &format!("packet_in.{other}"),
                            ))
                        }
                        (Some(Root::PacketOut), _) => {
                            return Err(CompileError::ty(pos, "emit outside the deparser"))
                        }
                        _ => {}
                    }
                    let inst = sc.control.as_ref().and_then(|c| c.insts.get(o)).cloned();
                    if let Some(inst) = inst {
                        return self.extern_call(sc, o, &inst, m, args, pos, out);
                    }
                }
                let name = Self::path(callee)
                    .map(|(r, v)| std::iter::once(r).chain(v).collect::<Vec<_>>().join("."))
                    .unwrap_or_else(|| m.clone());
                Err(CompileError::unsupported(
                    pos,
                    &format!("method call `{name}()'"),
                ))
            }
            ExprKind::Name(f) => match f.as_str() {
                "mark_to_drop" => {
                    // v1model's `mark_to_drop(inout standard_metadata_t)`: exactly the
                    // block's standard_metadata parameter, nothing else.
                    let is_std = |a: &Expr| matches!(&a.kind, ExprKind::Name(n) if sc.roots.get(n) == Some(&Root::Std));
                    if args.len() != 1 || !is_std(&args[0]) {
                        return Err(CompileError::ty(
                            pos,
                            "mark_to_drop takes standard_metadata",
                        ));
                    }
                    out.push(S::Drop);
                    Ok(())
                }
                "update_checksum" | "verify_checksum" => {
                    self.checksum(sc, f == "verify_checksum", args, pos, out)
                }
                "NoAction" => Ok(()),
                _ => {
                    let aid = sc.control.as_ref().and_then(|c| c.actions.get(f)).copied();
                    let Some(aid) = aid else {
                        let known = [
                            "hash",
                            "random",
                            "digest",
                            "clone",
                            "clone3",
                            "resubmit",
                            "recirculate",
                            "truncate",
                            "log_msg",
                            "assert",
                            "assume",
                            "verify",
                            "update_checksum_with_payload",
                            "verify_checksum_with_payload",
                            "clone_preserving_field_list",
                            "resubmit_preserving_field_list",
                            "recirculate_preserving_field_list",
                        ];
                        return Err(if known.contains(&f.as_str()) {
                            CompileError::unsupported(pos, &format!("`{f}'"))
                        } else {
                            CompileError::ty(pos, &format!("unknown function or action `{f}'"))
                        });
                    };
                    let ps = self.prog.actions[aid as usize].params.clone();
                    if let Some(m) = direct_meter_of(&self.prog.actions[aid as usize]) {
                        return Err(CompileError::unsupported(
                            pos,
                            &format!("call of action `{f}', which reads direct_meter `{m}'"),
                        ));
                    }
                    if ps.len() != args.len() {
                        return Err(CompileError::ty(
                            pos,
                            &format!(
                                "action `{f}' takes {} arguments, got {}",
                                ps.len(),
                                args.len()
                            ),
                        ));
                    }
                    let mut es = Vec::new();
                    for (a, (_, w)) in args.iter().zip(&ps) {
                        let (x, t) = self.expr(sc, a)?;
                        es.push(self.coerce(x, t, Ty::Bit(*w), a.pos)?);
                    }
                    if !self.opts.no_redundant && !sc.in_action && !sc.in_parser {
                        // p4c-style: a bare action call becomes a keyless table `tbl_<action>`.
                        let wrapper = self.prog.actions.len() as u16;
                        self.prog.actions.push(Action {
                            name: format!("act_{}", self.synth),
                            control: sc.control.as_ref().unwrap().name.clone(),
                            params: Vec::new(),
                            body: vec![S::Call(aid, es)],
                        });
                        self.prog.tables.push(Table {
                            name: format!("tbl_{f}_{}", self.synth),
                            control: sc.control.as_ref().unwrap().name.clone(),
                            keys: Vec::new(),
                            actions: vec![wrapper],
                            default: (wrapper, Vec::new()),
                            default_const: true,
                            const_entries: None,
                            size: None,
                            direct_counter: None,
                            direct_meter: None,
                            synthetic: true,
                        });
                        self.synth += 1;
                        out.push(S::Apply(Apply {
                            table: self.prog.tables.len() as u16 - 1,
                            arms: Arms::None,
                        }));
                    } else {
                        out.push(S::Call(aid, es));
                    }
                    Ok(())
                }
            },
            _ => Err(CompileError::unsupported(pos, "call of an expression")),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn extern_call(
        &mut self,
        sc: &Scope,
        name: &str,
        inst: &Inst,
        m: &str,
        args: &[Expr],
        pos: Pos,
        out: &mut Vec<S>,
    ) -> Result<(), CompileError> {
        let argc = |n: usize| {
            if args.len() != n {
                Err(CompileError::ty(
                    pos,
                    &format!("`{name}.{m}' takes {n} arguments, got {}", args.len()),
                ))
            } else {
                Ok(())
            }
        };
        let index = |this: &Self, e: &Expr| -> Result<E, CompileError> {
            let (x, t) = this.expr(sc, e)?;
            match t {
                Ty::Bit(_) | Ty::Int => Ok(x),
                _ => Err(CompileError::ty(
                    e.pos,
                    &format!("index of type {}", ty_str(t)),
                )),
            }
        };
        match (inst, m) {
            (Inst::Counter(c), "count") => {
                argc(1)?;
                out.push(S::Count(*c, index(self, &args[0])?));
            }
            (Inst::DirectCounter, "count") => {
                // Direct counters count every hit of their table's entries by themselves.
                argc(0)?;
            }
            (Inst::Register(r, w), "read") => {
                argc(2)?;
                let (lv, lt) = self.lvalue(sc, &args[0])?;
                if lt != Ty::Bit(*w) {
                    return Err(CompileError::ty(
                        args[0].pos,
                        &format!(
                            "register `{name}' is bit<{w}>, destination is {}",
                            ty_str(lt)
                        ),
                    ));
                }
                out.push(S::RegRead(*r, lv, index(self, &args[1])?));
            }
            (Inst::Register(r, w), "write") => {
                argc(2)?;
                let (v, t) = self.expr(sc, &args[1])?;
                let v = self.coerce(v, t, Ty::Bit(*w), args[1].pos)?;
                out.push(S::RegWrite(*r, index(self, &args[0])?, v));
            }
            (Inst::Meter(mi), "execute_meter") => {
                argc(2)?;
                let (lv, lt) = self.lvalue(sc, &args[1])?;
                if !matches!(lt, Ty::Bit(w) if w >= 2) {
                    return Err(CompileError::ty(
                        args[1].pos,
                        "meter colour destination must be bit<2> or wider",
                    ));
                }
                out.push(S::Meter(*mi, index(self, &args[0])?, lv));
            }
            (Inst::DirectMeter(mi), "read") => {
                argc(1)?;
                if !sc.in_action {
                    return Err(CompileError::unsupported(
                        pos,
                        "direct_meter read outside an action",
                    ));
                }
                let (lv, lt) = self.lvalue(sc, &args[0])?;
                if !matches!(lt, Ty::Bit(w) if w >= 2) {
                    return Err(CompileError::ty(
                        args[0].pos,
                        "meter colour destination must be bit<2> or wider",
                    ));
                }
                if self.direct_read.is_some_and(|(x, _)| x != *mi) {
                    return Err(CompileError::unsupported(
                        pos,
                        "an action reading two direct_meters",
                    ));
                }
                self.direct_read = Some((*mi, pos));
                // The hidden parameter after the declared ones.
                out.push(S::Meter(*mi, E::Param(sc.params.len() as u8), lv));
            }
            _ => {
                return Err(CompileError::unsupported(
                    pos,
                    &format!("method `{m}' of `{name}'"),
                ))
            }
        }
        Ok(())
    }

    fn checksum(
        &mut self,
        sc: &Scope,
        verify: bool,
        args: &[Expr],
        pos: Pos,
        out: &mut Vec<S>,
    ) -> Result<(), CompileError> {
        if args.len() != 4 {
            return Err(CompileError::ty(
                pos,
                "checksum takes (condition, { fields }, checksum, algorithm)",
            ));
        }
        let (cond, ct) = self.expr(sc, &args[0])?;
        if ct != Ty::Bool {
            return Err(CompileError::ty(
                args[0].pos,
                "checksum condition is not bool",
            ));
        }
        match &args[3].kind {
            ExprKind::Member(b, m) if matches!(&b.kind, ExprKind::Name(n) if n == "HashAlgorithm") => {
                if m != "csum16" {
                    return Err(CompileError::unsupported(
                        args[3].pos,
                        &format!("HashAlgorithm.{m} (csum16 only)"),
                    ));
                }
            }
            _ => {
                return Err(CompileError::ty(
                    args[3].pos,
                    "expected HashAlgorithm.csum16",
                ))
            }
        }
        let (dst, dt) = self.lvalue(sc, &args[2])?;
        if dt != Ty::Bit(16) {
            return Err(CompileError::ty(
                args[2].pos,
                "checksum field must be bit<16>",
            ));
        }
        let (dst_e, _) = self.expr(sc, &args[2])?;
        let ExprKind::List(items) = &args[1].kind else {
            return Err(CompileError::ty(
                args[1].pos,
                "expected a field list { ... }",
            ));
        };
        let mut fields = Vec::new();
        let mut places = Vec::new();
        for it in items {
            let (e, t) = self.expr(sc, it)?;
            let Ty::Bit(w) = t else {
                return Err(CompileError::ty(
                    it.pos,
                    &format!("checksum over {}", ty_str(t)),
                ));
            };
            places.push(self.place(sc, it)?);
            fields.push((e, w));
        }
        // Specialise: all fields of one header in order, minus the 16-bit destination field
        // at an even byte offset -> sum the header's bytes with the destination as zero.
        let mut src = CsumSrc::Fields(fields.clone());
        if let Some(Place::HField(di, dbit, 16)) = self.place(sc, &args[2])? {
            let h = &self.prog.headers[di as usize];
            let expect: Vec<(u16, u16)> = h
                .fields
                .iter()
                .filter(|f| f.1 != dbit)
                .map(|f| (f.1, f.2))
                .collect();
            let got: Vec<Option<(u16, u16)>> = places
                .iter()
                .map(|p| match p {
                    Some(Place::HField(i, b, w)) if *i == di => Some((*b, *w)),
                    _ => None,
                })
                .collect();
            if dbit % 16 == 0
                && got.len() == expect.len()
                && got.iter().zip(&expect).all(|(g, e)| *g == Some(*e))
            {
                src = CsumSrc::Header {
                    inst: di,
                    dst_off: dbit / 8,
                };
            }
        }
        out.push(S::Csum(Box::new(Csum {
            cond,
            src,
            dst,
            dst_e,
            verify,
            err_slot: self.prog.std.checksum_error,
        })));
        Ok(())
    }

    // ---- optimisation: redundant tables ----

    /// Keyless tables (always their default action) become direct calls; tables whose only
    /// action is NoAction (no keys or no counter) disappear.
    fn remove_redundant(&mut self) {
        let tables = self.prog.tables.clone();
        let mut inlined = Vec::new();
        let mut f = |s: &mut Vec<S>| rewrite(s, &tables, &mut inlined);
        f(&mut self.prog.ingress);
        f(&mut self.prog.egress);
        let n = self.prog.actions.len();
        for i in 0..n {
            let mut b = std::mem::take(&mut self.prog.actions[i].body);
            rewrite(&mut b, &tables, &mut inlined);
            self.prog.actions[i].body = b;
        }
        inlined.sort();
        inlined.dedup();
        self.prog.inlined_tables = inlined;
    }
}

fn ks_pos(k: &KeySet) -> Pos {
    match k {
        KeySet::Any(p) => *p,
        KeySet::Value(e) | KeySet::Mask(e, _) | KeySet::Range(e, _) => e.pos,
    }
}

/// A constant key set as a table match of the key's kind.
fn entry_match(k: &Key, m: Match, pos: Pos) -> Result<Match, CompileError> {
    let full = mask(k.width);
    Ok(match (k.kind, m) {
        (MatchKind::Exact, Match::Exact(v)) => Match::Exact(v),
        (MatchKind::Lpm, Match::Exact(v)) => Match::Lpm(v, k.width as u8),
        (MatchKind::Lpm, Match::Ternary(v, msk)) => {
            let len = msk.count_ones() as u16;
            if msk != (full & !mask(k.width - len.min(k.width))) {
                return Err(CompileError::ty(pos, "lpm mask is not a prefix"));
            }
            Match::Lpm(v & msk, len as u8)
        }
        (MatchKind::Ternary, Match::Exact(v)) => Match::Ternary(v, full),
        (MatchKind::Ternary, Match::Ternary(v, msk)) => Match::Ternary(v & msk, msk),
        (MatchKind::Range, Match::Exact(v)) => Match::Range(v, v),
        (MatchKind::Range, Match::Ternary(_, 0)) => Match::Range(0, full),
        (MatchKind::Range, Match::Range(a, b)) => Match::Range(a, b),
        (kind, _) => {
            return Err(CompileError::ty(
                pos,
                &format!("key set does not fit a {} key", kind.as_str()),
            ))
        }
    })
}

fn fold_un(op: Un, e: E, m: u64) -> E {
    match e {
        E::Const(v) => E::Const(match op {
            Un::Not => (v == 0) as u64,
            Un::BitNot => !v & m,
            Un::Neg => v.wrapping_neg() & m,
        }),
        e => E::Un(op, Box::new(e), m),
    }
}

/// Where an expression's text begins: a member, call, slice or index is positioned at its
/// `.`, `(` or `[`, a binary operation at its operator; this is their leftmost operand's.
fn start(e: &Expr) -> Pos {
    match &e.kind {
        ExprKind::Member(b, _)
        | ExprKind::Call(b, _)
        | ExprKind::Slice(b, _, _)
        | ExprKind::Index(b, _)
        | ExprKind::Binary(_, b, _)
        | ExprKind::Mux(b, _, _) => start(b),
        _ => e.pos,
    }
}

fn fold_bin(op: Bin, a: E, b: E, m: u64) -> E {
    match (a, b) {
        (E::Const(x), E::Const(y)) => E::Const(eval_bin(op, x, y, m)),
        (a, b) => E::Bin(op, Box::new(a), Box::new(b), m),
    }
}

fn rewrite(body: &mut Vec<S>, tables: &[Table], inlined: &mut Vec<String>) {
    let old = std::mem::take(body);
    for s in old {
        match s {
            S::Apply(Apply { table, arms }) => {
                let t = &tables[table as usize];
                let keyless = t.keys.is_empty() && t.direct_counter.is_none();
                let noop = t.actions.iter().all(|&a| a == 0) && t.direct_counter.is_none();
                if keyless || (noop && matches!(arms, Arms::None)) {
                    inlined.push(t.qualified());
                    // Always a miss running the default action.
                    let (a, ref p) = t.default;
                    if a != 0 {
                        body.push(S::Call(a, p.iter().map(|&v| E::Const(v)).collect()));
                    }
                    if keyless {
                        match arms {
                            Arms::None => {}
                            Arms::Hit(_, mut miss) => {
                                rewrite(&mut miss, tables, inlined);
                                body.extend(miss);
                            }
                            Arms::Switch {
                                by_action,
                                mut bodies,
                                default,
                            } => {
                                if let Some(bi) =
                                    by_action.get(a as usize).copied().flatten().or(default)
                                {
                                    let mut b = std::mem::take(&mut bodies[bi as usize]);
                                    rewrite(&mut b, tables, inlined);
                                    body.extend(b);
                                }
                            }
                        }
                    }
                    continue;
                }
                let arms = match arms {
                    Arms::None => Arms::None,
                    Arms::Hit(mut a, mut b) => {
                        rewrite(&mut a, tables, inlined);
                        rewrite(&mut b, tables, inlined);
                        Arms::Hit(a, b)
                    }
                    Arms::Switch {
                        by_action,
                        mut bodies,
                        default,
                    } => {
                        for b in &mut bodies {
                            rewrite(b, tables, inlined);
                        }
                        Arms::Switch {
                            by_action,
                            bodies,
                            default,
                        }
                    }
                };
                body.push(S::Apply(Apply { table, arms }));
            }
            S::If(c, mut a, mut b) => {
                rewrite(&mut a, tables, inlined);
                rewrite(&mut b, tables, inlined);
                body.push(S::If(c, a, b));
            }
            s => body.push(s),
        }
    }
}
