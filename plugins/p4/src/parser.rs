//! Recursive-descent parser for the P4-16 subset (tokens to [`crate::ast`]).
//!
//! Constructs of P4-16 outside the subset are recognised where cheap (`extern`, `enum`,
//! `header_union`, header stacks, `lookahead`, ...) and reported as "not supported: <construct>"
//! with their position; everything else that does not parse is a syntax error naming the token.

use crate::ast::*;
use crate::error::{CompileError, Pos};
use crate::lexer::{lex, Tok, Token};
use std::collections::HashSet;

/// Parses a whole program.
pub fn parse(src: &str) -> Result<Vec<Decl>, CompileError> {
    let toks = lex(src)?;
    let mut p = Parser {
        t: toks,
        i: 0,
        types: ["standard_metadata_t"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        depth: 0,
    };
    let mut out = Vec::new();
    while !p.at_eof() {
        out.push(p.decl()?);
    }
    Ok(out)
}

/// Deepest nesting of expressions/blocks accepted (keeps recursion bounded on hostile input).
const MAX_DEPTH: usize = 64;

struct Parser {
    t: Vec<Token>,
    i: usize,
    /// Type names declared so far (to tell `(T) e` casts from parenthesised expressions).
    types: HashSet<String>,
    depth: usize,
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("`{s}'"),
        Tok::Int(v, _) => format!("`{v}'"),
        Tok::Str(s) => format!("\"{s}\""),
        Tok::P(p) => format!("`{p}'"),
        Tok::Priority(_) => "`@priority'".into(),
        Tok::Eof => "end of file".into(),
    }
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.t[self.i].tok
    }
    fn peek_at(&self, k: usize) -> &Tok {
        &self.t[(self.i + k).min(self.t.len() - 1)].tok
    }
    fn pos(&self) -> Pos {
        self.t[self.i].pos
    }
    fn at_eof(&self) -> bool {
        matches!(self.peek(), Tok::Eof)
    }
    fn bump(&mut self) -> Tok {
        let t = self.t[self.i].tok.clone();
        if self.i + 1 < self.t.len() {
            self.i += 1;
        }
        t
    }
    fn is(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::P(x) if *x == p)
    }
    fn is_kw(&self, k: &str) -> bool {
        matches!(self.peek(), Tok::Ident(x) if x == k)
    }
    fn eat(&mut self, p: &str) -> bool {
        if self.is(p) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn eat_kw(&mut self, k: &str) -> bool {
        if self.is_kw(k) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn err_expected(&self, what: &str) -> CompileError {
        CompileError::syntax(
            self.pos(),
            &format!("expected {what}, found {}", describe(self.peek())),
        )
    }
    fn expect(&mut self, p: &str) -> Result<(), CompileError> {
        if self.eat(p) {
            Ok(())
        } else {
            Err(self.err_expected(&format!("`{p}'")))
        }
    }
    fn ident(&mut self) -> Result<String, CompileError> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                self.bump();
                Ok(s)
            }
            _ => Err(self.err_expected("a name")),
        }
    }
    fn enter(&mut self) -> Result<(), CompileError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(CompileError::unsupported(
                self.pos(),
                &format!("nesting deeper than {MAX_DEPTH}"),
            ));
        }
        Ok(())
    }
    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn decl(&mut self) -> Result<Decl, CompileError> {
        let pos = self.pos();
        let kw = match self.peek().clone() {
            Tok::Ident(s) => s,
            Tok::Priority(_) => {
                return Err(CompileError::syntax(pos, "@priority outside a table entry"));
            }
            t => {
                return Err(CompileError::syntax(
                    pos,
                    &format!("expected a declaration, found {}", describe(&t)),
                ))
            }
        };
        match kw.as_str() {
            "header" | "struct" => {
                self.bump();
                let name = self.ident()?;
                self.types.insert(name.clone());
                self.expect("{")?;
                let mut fields = Vec::new();
                while !self.eat("}") {
                    let fpos = self.pos();
                    let ty = self.type_ref()?;
                    let fname = self.ident()?;
                    if self.is("[") {
                        return Err(CompileError::unsupported(fpos, "header stack"));
                    }
                    self.expect(";")?;
                    fields.push(Field {
                        name: fname,
                        ty,
                        pos: fpos,
                    });
                }
                Ok(if kw == "header" {
                    Decl::Header { name, fields, pos }
                } else {
                    Decl::Struct { name, fields, pos }
                })
            }
            "typedef" | "type" => {
                self.bump();
                let ty = self.type_ref()?;
                let name = self.ident()?;
                self.expect(";")?;
                self.types.insert(name.clone());
                Ok(Decl::Typedef { name, ty, pos })
            }
            "const" => Ok(Decl::Const(self.const_decl()?)),
            "error" => {
                self.bump();
                self.expect("{")?;
                let mut names = Vec::new();
                loop {
                    let p = self.pos();
                    names.push((self.ident()?, p));
                    if !self.eat(",") {
                        break;
                    }
                }
                self.expect("}")?;
                Ok(Decl::Errors(names))
            }
            "parser" => Ok(Decl::Parser(self.parser_decl()?)),
            "control" => Ok(Decl::Control(self.control_decl()?)),
            "extern" | "enum" | "header_union" | "package" | "action" | "function"
            | "match_kind" | "value_set" | "table" => Err(CompileError::unsupported(
                pos,
                &format!("top-level `{kw}' declaration"),
            )),
            _ => {
                // Package instantiation: Type(args) name;
                let ty = self.ident()?;
                if self.is("<") {
                    return Err(CompileError::unsupported(
                        pos,
                        "package with type arguments",
                    ));
                }
                self.expect("(")?;
                let mut args = Vec::new();
                if !self.eat(")") {
                    loop {
                        let ap = self.pos();
                        let a = self.ident()?;
                        self.expect("(")?;
                        self.expect(")")?;
                        args.push((a, ap));
                        if !self.eat(",") {
                            break;
                        }
                    }
                    self.expect(")")?;
                }
                let name = self.ident()?;
                self.expect(";")?;
                Ok(Decl::Package {
                    ty,
                    args,
                    name,
                    pos,
                })
            }
        }
    }

    fn const_decl(&mut self) -> Result<ConstDecl, CompileError> {
        let pos = self.pos();
        self.bump(); // const
        let ty = self.type_ref()?;
        let name = self.ident()?;
        self.expect("=")?;
        let value = self.expr()?;
        self.expect(";")?;
        Ok(ConstDecl {
            ty,
            name,
            value,
            pos,
        })
    }

    fn type_ref(&mut self) -> Result<TypeRef, CompileError> {
        let pos = self.pos();
        let name = self.ident()?;
        match name.as_str() {
            "bit" => {
                self.expect("<")?;
                let w = match self.bump() {
                    Tok::Int(v, None) => v,
                    t => {
                        return Err(CompileError::syntax(
                            pos,
                            &format!("expected a width, found {}", describe(&t)),
                        ))
                    }
                };
                self.expect(">")?;
                if w == 0 || w > 64 {
                    return Err(CompileError::unsupported(
                        pos,
                        &format!("bit<{w}> (widths 1..=64 only)"),
                    ));
                }
                Ok(TypeRef::Bit(w as u16))
            }
            "bool" => Ok(TypeRef::Bool),
            "error" => Ok(TypeRef::Error),
            "int" | "varbit" | "string" | "tuple" | "void" => {
                Err(CompileError::unsupported(pos, &format!("type `{name}'")))
            }
            _ => {
                if self.is("<") {
                    self.bump();
                    let mut args = Vec::new();
                    loop {
                        args.push(self.type_ref()?);
                        if !self.eat(",") {
                            break;
                        }
                    }
                    self.expect(">")?;
                    Ok(TypeRef::Generic(name, args))
                } else {
                    Ok(TypeRef::Named(name))
                }
            }
        }
    }

    fn params(&mut self) -> Result<Vec<Param>, CompileError> {
        self.expect("(")?;
        let mut out = Vec::new();
        if self.eat(")") {
            return Ok(out);
        }
        loop {
            let pos = self.pos();
            let dir = if self.eat_kw("in") {
                Some(Dir::In)
            } else if self.eat_kw("out") {
                Some(Dir::Out)
            } else if self.eat_kw("inout") {
                Some(Dir::InOut)
            } else {
                None
            };
            let ty = self.type_ref()?;
            let name = self.ident()?;
            out.push(Param { dir, ty, name, pos });
            if !self.eat(",") {
                break;
            }
        }
        self.expect(")")?;
        Ok(out)
    }

    fn parser_decl(&mut self) -> Result<ParserDecl, CompileError> {
        let pos = self.pos();
        self.bump();
        let name = self.ident()?;
        let params = self.params()?;
        self.expect("{")?;
        let mut states = Vec::new();
        while !self.eat("}") {
            let spos = self.pos();
            if !self.eat_kw("state") {
                if self.is_kw("value_set") {
                    return Err(CompileError::unsupported(spos, "value_set"));
                }
                return Err(self.err_expected("`state'"));
            }
            let sname = self.ident()?;
            self.expect("{")?;
            let mut body = Vec::new();
            let trans = loop {
                if self.is_kw("transition") {
                    let tpos = self.pos();
                    self.bump();
                    let t = if self.eat_kw("select") {
                        self.expect("(")?;
                        let mut keys = Vec::new();
                        loop {
                            keys.push(self.expr()?);
                            if !self.eat(",") {
                                break;
                            }
                        }
                        self.expect(")")?;
                        self.expect("{")?;
                        let mut cases = Vec::new();
                        while !self.eat("}") {
                            let cpos = self.pos();
                            let keysets = if self.eat("(") {
                                let mut v = Vec::new();
                                loop {
                                    v.push(self.keyset()?);
                                    if !self.eat(",") {
                                        break;
                                    }
                                }
                                self.expect(")")?;
                                v
                            } else {
                                vec![self.keyset()?]
                            };
                            self.expect(":")?;
                            let target = self.ident()?;
                            self.expect(";")?;
                            cases.push(SelectCase {
                                keysets,
                                target,
                                pos: cpos,
                            });
                        }
                        Transition::Select {
                            keys,
                            cases,
                            pos: tpos,
                        }
                    } else {
                        let target = self.ident()?;
                        self.expect(";")?;
                        Transition::Goto(target, tpos)
                    };
                    self.expect("}")?;
                    break t;
                }
                if self.is("}") {
                    // No transition: P4 says reject.
                    let p = self.pos();
                    self.bump();
                    break Transition::Goto("reject".into(), p);
                }
                body.push(self.stmt()?);
            };
            states.push(StateDecl {
                name: sname,
                body,
                trans,
                pos: spos,
            });
        }
        Ok(ParserDecl {
            name,
            params,
            states,
            pos,
        })
    }

    fn keyset(&mut self) -> Result<KeySet, CompileError> {
        let pos = self.pos();
        if self.eat_kw("default") || self.eat("_") {
            return Ok(KeySet::Any(pos));
        }
        let v = self.expr()?;
        if self.eat("&&&") {
            let m = self.expr()?;
            return Ok(KeySet::Mask(v, m));
        }
        if self.eat("..") {
            let h = self.expr()?;
            return Ok(KeySet::Range(v, h));
        }
        Ok(KeySet::Value(v))
    }

    fn control_decl(&mut self) -> Result<ControlDecl, CompileError> {
        let pos = self.pos();
        self.bump();
        let name = self.ident()?;
        let params = self.params()?;
        self.expect("{")?;
        let mut locals = Vec::new();
        let apply = loop {
            let lpos = self.pos();
            if self.eat_kw("apply") {
                let b = self.block()?;
                self.expect("}")?;
                break b;
            }
            if self.eat_kw("action") {
                let aname = self.ident()?;
                let aparams = self.params()?;
                let body = self.block()?;
                locals.push(Local::Action(ActionDecl {
                    name: aname,
                    params: aparams,
                    body,
                    pos: lpos,
                }));
                continue;
            }
            if self.is_kw("table") {
                locals.push(Local::Table(self.table()?));
                continue;
            }
            if self.is_kw("const") {
                locals.push(Local::Const(self.const_decl()?));
                continue;
            }
            if self.is("}") || self.at_eof() {
                return Err(self.err_expected("`apply'"));
            }
            // Instance `T(args) n;` / `T<..>(args) n;` or variable `T n [= e];`
            let ty = self.type_ref()?;
            if self.is("(") {
                self.bump();
                let mut args = Vec::new();
                if !self.eat(")") {
                    loop {
                        args.push(self.expr()?);
                        if !self.eat(",") {
                            break;
                        }
                    }
                    self.expect(")")?;
                }
                let n = self.ident()?;
                self.expect(";")?;
                locals.push(Local::Instance {
                    ty,
                    args,
                    name: n,
                    pos: lpos,
                });
                continue;
            }
            let n = self.ident()?;
            let init = if self.eat("=") {
                Some(self.expr()?)
            } else {
                None
            };
            self.expect(";")?;
            locals.push(Local::Var(VarDecl {
                ty,
                name: n,
                init,
                pos: lpos,
            }));
        };
        Ok(ControlDecl {
            name,
            params,
            locals,
            apply,
            pos,
        })
    }

    fn action_call(&mut self) -> Result<ActionCall, CompileError> {
        let pos = self.pos();
        let name = self.ident()?;
        let mut args = Vec::new();
        if self.eat("(") && !self.eat(")") {
            loop {
                args.push(self.expr()?);
                if !self.eat(",") {
                    break;
                }
            }
            self.expect(")")?;
        }
        Ok(ActionCall { name, args, pos })
    }

    fn table(&mut self) -> Result<TableDecl, CompileError> {
        let pos = self.pos();
        self.bump();
        let name = self.ident()?;
        self.expect("{")?;
        let mut t = TableDecl {
            name,
            keys: Vec::new(),
            actions: Vec::new(),
            default: None,
            entries: None,
            size: None,
            counters: None,
            meters: None,
            pos,
        };
        while !self.eat("}") {
            let ppos = self.pos();
            let is_const = self.eat_kw("const");
            let prop = self.ident()?;
            match prop.as_str() {
                "key" => {
                    self.expect("=")?;
                    self.expect("{")?;
                    while !self.eat("}") {
                        let kpos = self.pos();
                        let expr = self.expr()?;
                        self.expect(":")?;
                        let kind = self.ident()?;
                        self.expect(";")?;
                        t.keys.push(KeyDecl {
                            expr,
                            kind,
                            pos: kpos,
                        });
                    }
                }
                "actions" => {
                    self.expect("=")?;
                    self.expect("{")?;
                    while !self.eat("}") {
                        let apos = self.pos();
                        let a = self.ident()?;
                        if self.eat("(") {
                            self.expect(")")?;
                        }
                        self.expect(";")?;
                        t.actions.push((a, apos));
                    }
                }
                "default_action" => {
                    self.expect("=")?;
                    let a = self.action_call()?;
                    self.expect(";")?;
                    t.default = Some((a, is_const));
                }
                "entries" => {
                    self.expect("=")?;
                    self.expect("{")?;
                    let mut es = Vec::new();
                    while !self.eat("}") {
                        let epos = self.pos();
                        let priority = if let Tok::Priority(v) = self.peek() {
                            let v = *v;
                            self.bump();
                            Some(v)
                        } else {
                            None
                        };
                        let keysets = if self.eat("(") {
                            let mut v = Vec::new();
                            loop {
                                v.push(self.keyset()?);
                                if !self.eat(",") {
                                    break;
                                }
                            }
                            self.expect(")")?;
                            v
                        } else {
                            vec![self.keyset()?]
                        };
                        self.expect(":")?;
                        let action = self.action_call()?;
                        self.expect(";")?;
                        es.push(EntryDecl {
                            keysets,
                            action,
                            priority,
                            pos: epos,
                        });
                    }
                    t.entries = Some(es);
                }
                "size" => {
                    self.expect("=")?;
                    match self.bump() {
                        Tok::Int(v, _) => t.size = Some(v.min(u64::MAX as u128) as u64),
                        tk => {
                            return Err(CompileError::syntax(
                                ppos,
                                &format!("expected a size, found {}", describe(&tk)),
                            ))
                        }
                    }
                    self.expect(";")?;
                }
                "counters" | "meters" => {
                    self.expect("=")?;
                    let npos = self.pos();
                    let n = self.ident()?;
                    self.expect(";")?;
                    if prop == "counters" {
                        t.counters = Some((n, npos));
                    } else {
                        t.meters = Some((n, npos));
                    }
                }
                other => {
                    return Err(CompileError::unsupported(
                        ppos,
                        &format!("table property `{other}'"),
                    ))
                }
            }
        }
        Ok(t)
    }

    fn block(&mut self) -> Result<Vec<Stmt>, CompileError> {
        self.expect("{")?;
        self.enter()?;
        let mut out = Vec::new();
        while !self.eat("}") {
            if self.at_eof() {
                return Err(self.err_expected("`}'"));
            }
            out.push(self.stmt()?);
        }
        self.leave();
        Ok(out)
    }

    /// Whether the tokens at the cursor start a variable declaration (`T name`).
    fn starts_var_decl(&self) -> bool {
        match self.peek() {
            Tok::Ident(s) if s == "bit" || s == "bool" => true,
            Tok::Ident(s) if self.types.contains(s) => matches!(self.peek_at(1), Tok::Ident(_)),
            _ => false,
        }
    }

    fn stmt(&mut self) -> Result<Stmt, CompileError> {
        let pos = self.pos();
        if self.is("{") {
            return Ok(Stmt::Block(self.block()?, pos));
        }
        if self.eat(";") {
            return Ok(Stmt::Block(Vec::new(), pos));
        }
        if self.eat_kw("if") {
            self.expect("(")?;
            let c = self.expr()?;
            self.expect(")")?;
            self.enter()?;
            let t = self.stmt_as_block()?;
            let e = if self.eat_kw("else") {
                Some(self.stmt_as_block()?)
            } else {
                None
            };
            self.leave();
            return Ok(Stmt::If(c, t, e, pos));
        }
        if self.eat_kw("switch") {
            self.expect("(")?;
            let e = self.expr()?;
            self.expect(")")?;
            self.expect("{")?;
            let mut cases = Vec::new();
            while !self.eat("}") {
                let cpos = self.pos();
                let label = if self.eat_kw("default") {
                    None
                } else {
                    Some(self.ident()?)
                };
                self.expect(":")?;
                let body = if self.is("{") {
                    Some(self.block()?)
                } else {
                    None
                };
                cases.push(SwitchCase {
                    label,
                    body,
                    pos: cpos,
                });
            }
            return Ok(Stmt::Switch(e, cases, pos));
        }
        if self.eat_kw("exit") {
            self.expect(";")?;
            return Ok(Stmt::Exit(pos));
        }
        if self.eat_kw("return") {
            if !self.is(";") {
                return Err(CompileError::unsupported(pos, "return with a value"));
            }
            self.expect(";")?;
            return Ok(Stmt::Return(pos));
        }
        for kw in ["for", "while", "transition"] {
            if self.is_kw(kw) {
                return Err(CompileError::unsupported(pos, &format!("`{kw}' statement")));
            }
        }
        if self.is_kw("const") {
            return Ok(Stmt::Const(self.const_decl()?));
        }
        if self.starts_var_decl() {
            let ty = self.type_ref()?;
            let name = self.ident()?;
            let init = if self.eat("=") {
                Some(self.expr()?)
            } else {
                None
            };
            self.expect(";")?;
            return Ok(Stmt::Var(VarDecl {
                ty,
                name,
                init,
                pos,
            }));
        }
        let lhs = self.expr()?;
        if self.eat("=") {
            let rhs = self.expr()?;
            self.expect(";")?;
            return Ok(Stmt::Assign(lhs, rhs, pos));
        }
        self.expect(";")?;
        match lhs.kind {
            ExprKind::Call(..) => Ok(Stmt::Call(lhs, pos)),
            _ => Err(CompileError::syntax(
                pos,
                "expression statement is neither an assignment nor a call",
            )),
        }
    }

    fn stmt_as_block(&mut self) -> Result<Vec<Stmt>, CompileError> {
        match self.stmt()? {
            Stmt::Block(b, _) => Ok(b),
            s => Ok(vec![s]),
        }
    }

    pub fn expr(&mut self) -> Result<Expr, CompileError> {
        self.enter()?;
        let r = self.mux();
        self.leave();
        r
    }

    fn mux(&mut self) -> Result<Expr, CompileError> {
        let c = self.binary(0)?;
        if self.is("?") {
            let pos = c.pos;
            self.bump();
            let a = self.expr()?;
            self.expect(":")?;
            let b = self.expr()?;
            return Ok(Expr {
                kind: ExprKind::Mux(Box::new(c), Box::new(a), Box::new(b)),
                pos,
            });
        }
        Ok(c)
    }

    /// The binary operator at the cursor, its precedence level and token count.
    fn binop(&self) -> Option<(BinOp, u8, usize)> {
        let t = &self.t[self.i];
        let Tok::P(p) = t.tok else { return None };
        Some(match p {
            "||" => (BinOp::Or, 1, 1),
            "&&" => (BinOp::And, 2, 1),
            "|" => (BinOp::BitOr, 3, 1),
            "^" => (BinOp::BitXor, 4, 1),
            "&" => (BinOp::BitAnd, 5, 1),
            "==" => (BinOp::Eq, 6, 1),
            "!=" => (BinOp::Ne, 6, 1),
            "<" => (BinOp::Lt, 7, 1),
            "<=" => (BinOp::Le, 7, 1),
            ">" if t.joined && matches!(self.peek_at(1), Tok::P(">")) => (BinOp::Shr, 8, 2),
            ">" => (BinOp::Gt, 7, 1),
            ">=" => (BinOp::Ge, 7, 1),
            "<<" => (BinOp::Shl, 8, 1),
            "+" => (BinOp::Add, 9, 1),
            "-" => (BinOp::Sub, 9, 1),
            "|+|" => (BinOp::AddSat, 9, 1),
            "|-|" => (BinOp::SubSat, 9, 1),
            "++" => (BinOp::Concat, 9, 1),
            "*" => (BinOp::Mul, 10, 1),
            "/" => (BinOp::Div, 10, 1),
            "%" => (BinOp::Mod, 10, 1),
            _ => return None,
        })
    }

    fn binary(&mut self, min: u8) -> Result<Expr, CompileError> {
        let mut lhs = self.unary()?;
        while let Some((op, prec, n)) = self.binop() {
            if prec <= min {
                break;
            }
            let pos = self.pos();
            for _ in 0..n {
                self.bump();
            }
            self.enter()?;
            let rhs = self.binary(prec)?;
            self.leave();
            lhs = Expr {
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                pos,
            };
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, CompileError> {
        let pos = self.pos();
        let op = if self.eat("!") {
            Some(UnOp::Not)
        } else if self.eat("~") {
            Some(UnOp::BitNot)
        } else if self.eat("-") {
            Some(UnOp::Neg)
        } else {
            None
        };
        if let Some(op) = op {
            self.enter()?;
            let e = self.unary()?;
            self.leave();
            return Ok(Expr {
                kind: ExprKind::Unary(op, Box::new(e)),
                pos,
            });
        }
        // Cast: `(bit<N>) e`, `(bool) e`, `(typedef) e`.
        if self.is("(") {
            let is_cast = match self.peek_at(1) {
                Tok::Ident(s) if s == "bit" || s == "bool" => true,
                Tok::Ident(s) if self.types.contains(s) => matches!(self.peek_at(2), Tok::P(")")),
                Tok::Ident(s) if s == "int" => true,
                _ => false,
            };
            if is_cast {
                self.bump();
                let ty = self.type_ref()?;
                self.expect(")")?;
                self.enter()?;
                let e = self.unary()?;
                self.leave();
                return Ok(Expr {
                    kind: ExprKind::Cast(ty, Box::new(e)),
                    pos,
                });
            }
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Result<Expr, CompileError> {
        let mut e = self.primary()?;
        loop {
            let pos = self.pos();
            if self.eat(".") {
                let m = self.ident()?;
                e = Expr {
                    kind: ExprKind::Member(Box::new(e), m),
                    pos,
                };
            } else if self.is("(") {
                self.bump();
                let mut args = Vec::new();
                if !self.eat(")") {
                    loop {
                        args.push(self.expr()?);
                        if !self.eat(",") {
                            break;
                        }
                    }
                    self.expect(")")?;
                }
                e = Expr {
                    kind: ExprKind::Call(Box::new(e), args),
                    pos,
                };
            } else if self.is("<") && matches!(e.kind, ExprKind::Name(_) | ExprKind::Member(..)) {
                // Generic method call `f<T>(..)`: only if a `(` follows the closing `>`.
                if let Some(close) = self.generic_args_end() {
                    if matches!(self.t[close].tok, Tok::P("(")) {
                        return Err(CompileError::unsupported(pos, "call with type arguments"));
                    }
                }
                break;
            } else if self.eat("[") {
                let hi = self.expr()?;
                if self.eat(":") {
                    let lo = self.expr()?;
                    self.expect("]")?;
                    e = Expr {
                        kind: ExprKind::Slice(Box::new(e), Box::new(hi), Box::new(lo)),
                        pos,
                    };
                } else {
                    self.expect("]")?;
                    e = Expr {
                        kind: ExprKind::Index(Box::new(e), Box::new(hi)),
                        pos,
                    };
                }
            } else {
                break;
            }
        }
        Ok(e)
    }

    /// If the cursor is at `<` of a type-argument list `<bit<8>, T>`, the index after its `>`.
    fn generic_args_end(&self) -> Option<usize> {
        let mut depth = 0i32;
        let mut k = self.i;
        while k < self.t.len() {
            match &self.t[k].tok {
                Tok::P("<") => depth += 1,
                Tok::P(">") => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(k + 1);
                    }
                }
                Tok::Ident(_) | Tok::Int(..) | Tok::P(",") => {}
                _ => return None,
            }
            k += 1;
        }
        None
    }

    fn primary(&mut self) -> Result<Expr, CompileError> {
        let pos = self.pos();
        match self.bump() {
            Tok::Int(v, w) => Ok(Expr {
                kind: ExprKind::Int(v, w),
                pos,
            }),
            Tok::Ident(s) if s == "true" || s == "false" => Ok(Expr {
                kind: ExprKind::Bool(s == "true"),
                pos,
            }),
            Tok::Ident(s) => Ok(Expr {
                kind: ExprKind::Name(s),
                pos,
            }),
            Tok::P("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::P("{") => {
                let mut v = Vec::new();
                if !self.eat("}") {
                    loop {
                        v.push(self.expr()?);
                        if !self.eat(",") {
                            break;
                        }
                    }
                    self.expect("}")?;
                }
                Ok(Expr {
                    kind: ExprKind::List(v),
                    pos,
                })
            }
            Tok::Str(_) => Err(CompileError::unsupported(pos, "string literal")),
            t => Err(CompileError::syntax(
                pos,
                &format!("expected an expression, found {}", describe(&t)),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(src: &str) -> String {
        parse(src).unwrap_err().to_string()
    }

    #[test]
    fn precedence_and_shift() {
        let d = parse("const bit<8> X = 1 + 2 * 3 >> 1 == 3 & 4;").unwrap();
        let Decl::Const(c) = &d[0] else { panic!() };
        // ((1 + (2*3)) >> 1) == 3, then & 4 (C precedence: == binds tighter than &).
        let ExprKind::Binary(BinOp::BitAnd, l, _) = &c.value.kind else {
            panic!("{:?}", c.value)
        };
        let ExprKind::Binary(BinOp::Eq, l, _) = &l.kind else {
            panic!()
        };
        let ExprKind::Binary(BinOp::Shr, l, _) = &l.kind else {
            panic!()
        };
        assert!(matches!(l.kind, ExprKind::Binary(BinOp::Add, ..)));
    }

    #[test]
    fn generic_close() {
        let src = "control C() { register<bit<32>>(16) r; apply { } }";
        let d = parse(src).unwrap();
        let Decl::Control(c) = &d[0] else { panic!() };
        assert!(matches!(&c.locals[0], Local::Instance { name, .. } if name == "r"));
    }

    #[test]
    fn syntax_errors_name_token_and_position() {
        assert_eq!(
            err("header h { bit<8> a }"),
            "syntax error: expected `;', found `}' at 1:21"
        );
        assert_eq!(
            err("header h { bit<8> a[4]; }"),
            "not supported: header stack at 1:12"
        );
        assert_eq!(
            err("extern E {}"),
            "not supported: top-level `extern' declaration at 1:1"
        );
        assert_eq!(
            err("header h { int<8> a; }"),
            "not supported: type `int' at 1:12"
        );
        assert_eq!(
            err("header h { bit<65> a; }"),
            "not supported: bit<65> (widths 1..=64 only) at 1:12"
        );
        assert_eq!(
            err("control C() { apply { for (;;) {} } }"),
            "not supported: `for' statement at 1:23"
        );
        assert_eq!(
            err("control C() { apply { x + 1; } }"),
            "syntax error: expression statement is neither an assignment nor a call at 1:23"
        );
        assert_eq!(
            err("control C() { table t { foo = 1; } apply {} }"),
            "not supported: table property `foo' at 1:25"
        );
        assert_eq!(
            err("control C() { apply { f<bit<8>>(x); } }"),
            "not supported: call with type arguments at 1:24"
        );
        assert_eq!(
            err("parser P() { value_set<bit<8>>(4) vs; }"),
            "not supported: value_set at 1:14"
        );
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let src = format!(
            "const bit<8> X = {}1{};",
            "(".repeat(5000),
            ")".repeat(5000)
        );
        assert!(err(&src).contains("nesting deeper"));
        let src = format!("const bit<8> X = {}1;", "-".repeat(5000));
        assert!(err(&src).contains("nesting deeper"));
    }
}
