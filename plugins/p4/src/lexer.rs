//! P4-16 lexer: source text to tokens, each with its line and column (1-based).
//!
//! Comments (`//`, `/* */`) and annotations other than `@priority(n)` are skipped;
//! `#include <core.p4>` and `#include <v1model.p4>` are accepted (their declarations are
//! built in), any other preprocessor line is an error. `>` is always a token of its own (so
//! `bit<8>>` closes two generic lists); the parser joins two adjacent `>` into a shift.

use crate::error::{CompileError, Pos};

/// One token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    Ident(String),
    /// An integer literal: value and optional width (`8w5`: Some(8)).
    Int(u128, Option<u16>),
    Str(String),
    /// Punctuation or operator (`{`, `==`, `&&&`, `..`, ...).
    P(&'static str),
    /// `@priority(n)` annotation.
    Priority(u64),
    Eof,
}

/// A token and where it starts.
#[derive(Clone, Debug)]
pub struct Token {
    pub tok: Tok,
    pub pos: Pos,
    /// The next token starts right after this one (no blank between): `>` `>` is a shift.
    pub joined: bool,
}

const PUNCT: [&str; 40] = [
    "&&&", "|+|", "|-|", "<<", "<=", ">=", "==", "!=", "&&", "||", "++", "..", "{", "}", "(", ")",
    "[", "]", "<", ">", ";", ":", ",", ".", "=", "!", "~", "&", "|", "^", "+", "-", "*", "/", "%",
    "?", "@", "_", "#", "$",
];

/// Splits `src` into tokens; the last is [`Tok::Eof`].
pub fn lex(src: &str) -> Result<Vec<Token>, CompileError> {
    let b = src.as_bytes();
    let mut i = 0usize;
    let mut line = 1u32;
    let mut col = 1u32;
    let mut out: Vec<Token> = Vec::new();
    // Advances over n bytes of one line.
    macro_rules! adv {
        ($n:expr) => {{
            i += $n;
            col += $n as u32;
        }};
    }
    while i < b.len() {
        let c = b[i];
        let pos = Pos { line, col };
        if c == b'\n' {
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            adv!(1);
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                adv!(1);
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            adv!(2);
            loop {
                if i >= b.len() {
                    return Err(CompileError::syntax(pos, "unterminated comment"));
                }
                if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    adv!(2);
                    break;
                }
                if b[i] == b'\n' {
                    i += 1;
                    line += 1;
                    col = 1;
                } else {
                    adv!(1);
                }
            }
            continue;
        }
        if c == b'#' && out.last().is_none_or(|t| t.pos.line != line) {
            let end = b[i..]
                .iter()
                .position(|&x| x == b'\n')
                .map_or(b.len(), |p| i + p);
            let text = std::str::from_utf8(&b[i..end]).unwrap_or("").trim();
            let norm: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
            if norm == "#include <core.p4>" || norm == "#include <v1model.p4>" {
                let n = end - i;
                adv!(n);
                continue;
            }
            let word = text.split_whitespace().next().unwrap_or("#");
            return Err(CompileError::unsupported(
                pos,
                &format!("preprocessor directive `{word}'"),
            ));
        }
        if c == b'@' {
            // Annotation: @name or @name(...) — only @priority(n) means something here.
            let s = i + 1;
            let mut e = s;
            while e < b.len() && (b[e].is_ascii_alphanumeric() || b[e] == b'_') {
                e += 1;
            }
            let name = std::str::from_utf8(&b[s..e]).unwrap_or("");
            let n = e - i;
            adv!(n);
            if b.get(i) == Some(&b'(') {
                let mut depth = 0;
                let start = i;
                while i < b.len() {
                    match b[i] {
                        b'(' => depth += 1,
                        b')' => depth -= 1,
                        b'\n' => {
                            return Err(CompileError::syntax(pos, "annotation spans lines"));
                        }
                        _ => {}
                    }
                    adv!(1);
                    if depth == 0 {
                        break;
                    }
                }
                if name == "priority" {
                    let inner = std::str::from_utf8(&b[start + 1..i - 1])
                        .unwrap_or("")
                        .trim();
                    let v = inner.parse::<u64>().map_err(|_| {
                        CompileError::syntax(pos, &format!("bad @priority value `{inner}'"))
                    })?;
                    out.push(Token {
                        tok: Tok::Priority(v),
                        pos,
                        joined: false,
                    });
                }
            }
            continue;
        }
        if c == b'"' {
            let mut e = i + 1;
            while e < b.len() && b[e] != b'"' && b[e] != b'\n' {
                e += 1;
            }
            if e >= b.len() || b[e] != b'"' {
                return Err(CompileError::syntax(pos, "unterminated string"));
            }
            let s = String::from_utf8_lossy(&b[i + 1..e]).into_owned();
            let n = e + 1 - i;
            adv!(n);
            out.push(Token {
                tok: Tok::Str(s),
                pos,
                joined: false,
            });
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let mut e = i;
            while e < b.len() && (b[e].is_ascii_alphanumeric() || b[e] == b'_') {
                e += 1;
            }
            let s = std::str::from_utf8(&b[i..e]).unwrap_or("_");
            let n = e - i;
            adv!(n);
            let tok = if s == "_" {
                Tok::P("_")
            } else {
                Tok::Ident(s.to_string())
            };
            out.push(Token {
                tok,
                pos,
                joined: false,
            });
            continue;
        }
        if c.is_ascii_digit() {
            let (v, w, n) = lex_int(&b[i..]).map_err(|m| CompileError::syntax(pos, &m))?;
            adv!(n);
            out.push(Token {
                tok: Tok::Int(v, w),
                pos,
                joined: false,
            });
            continue;
        }
        let mut matched = None;
        for p in PUNCT {
            if b[i..].starts_with(p.as_bytes()) {
                matched = Some(p);
                break;
            }
        }
        match matched {
            Some(p) if p != "#" && p != "$" && p != "@" => {
                adv!(p.len());
                out.push(Token {
                    tok: Tok::P(p),
                    pos,
                    joined: false,
                });
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(CompileError::syntax(
                    pos,
                    &format!("unexpected character `{}'", ch.escape_default()),
                ));
            }
        }
    }
    // Mark tokens immediately followed by the next one (for `>>`).
    for k in 0..out.len().saturating_sub(1) {
        let (a, n) = (&out[k], &out[k + 1]);
        if a.tok == Tok::P(">") && n.pos.line == a.pos.line && n.pos.col == a.pos.col + 1 {
            out[k].joined = true;
        }
    }
    out.push(Token {
        tok: Tok::Eof,
        pos: Pos { line, col },
        joined: false,
    });
    Ok(out)
}

/// Parses an integer literal at the start of `b`: decimal, 0x, 0o, 0b, with optional
/// `<width>w` / `<width>s` prefix and `_` separators. Returns value, width and bytes used.
fn lex_int(b: &[u8]) -> Result<(u128, Option<u16>, usize), String> {
    let mut i = 0;
    let digits = |b: &[u8], i: &mut usize, radix: u32| -> Result<u128, String> {
        let start = *i;
        let mut v: u128 = 0;
        while *i < b.len() && (b[*i].is_ascii_alphanumeric() || b[*i] == b'_') {
            let c = b[*i];
            *i += 1;
            if c == b'_' {
                continue;
            }
            let d = (c as char)
                .to_digit(radix)
                .ok_or_else(|| format!("bad digit `{}' in integer literal", c as char))?;
            v = v
                .checked_mul(radix as u128)
                .and_then(|v| v.checked_add(d as u128))
                .ok_or("integer literal too large")?;
        }
        if *i == start {
            return Err("integer literal without digits".into());
        }
        Ok(v)
    };
    // Leading decimal part: either the value or the width of a `Nw` literal.
    let mut j = 0;
    while j < b.len() && b[j].is_ascii_digit() {
        j += 1;
    }
    let mut width = None;
    if j < b.len() && (b[j] == b'w' || b[j] == b's') && j > 0 {
        if b[j] == b's' {
            return Err("signed literals (`Ns...') are not supported".into());
        }
        let w: u32 = std::str::from_utf8(&b[..j])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("bad literal width")?;
        if w == 0 || w > 64 {
            return Err(format!("literal width {w} not in 1..=64"));
        }
        width = Some(w as u16);
        i = j + 1;
    }
    let radix = if b.get(i) == Some(&b'0') {
        match b.get(i + 1) {
            Some(b'x') | Some(b'X') => 16,
            Some(b'b') | Some(b'B') => 2,
            Some(b'o') | Some(b'O') => 8,
            Some(b'd') | Some(b'D') => 10,
            _ => 0,
        }
    } else {
        0
    };
    let v = if radix != 0 {
        i += 2;
        digits(b, &mut i, radix)?
    } else {
        digits(b, &mut i, 10)?
    };
    Ok((v, width, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn literals_and_widths() {
        assert_eq!(
            toks("8w5 0x800 16w0x86dd 0b101 1_000"),
            vec![
                Tok::Int(5, Some(8)),
                Tok::Int(0x800, None),
                Tok::Int(0x86dd, Some(16)),
                Tok::Int(5, None),
                Tok::Int(1000, None),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn positions_and_comments() {
        let t = lex("// c\n  /* x\n y */ abc &&& >>").unwrap();
        assert_eq!(t[0].tok, Tok::Ident("abc".into()));
        assert_eq!((t[0].pos.line, t[0].pos.col), (3, 7));
        assert_eq!(t[1].tok, Tok::P("&&&"));
        assert!(t[2].joined && !t[3].joined);
    }

    #[test]
    fn errors() {
        assert_eq!(
            lex("a\n #define X 1").unwrap_err().to_string(),
            "not supported: preprocessor directive `#define' at 2:2"
        );
        assert_eq!(
            lex("8s3").unwrap_err().to_string(),
            "syntax error: signed literals (`Ns...') are not supported at 1:1"
        );
        assert_eq!(
            lex("a ` b").unwrap_err().to_string(),
            "syntax error: unexpected character ``' at 1:3"
        );
        assert!(lex("/* x").is_err());
        assert!(lex("\"abc").is_err());
        assert!(lex("99999999999999999999999999999999999999999").is_err());
        assert!(lex("65w1").is_err());
        assert_eq!(toks("@priority(5) x")[0], Tok::Priority(5));
        assert!(lex("#include <core.p4>\n#include  <v1model.p4>\n").is_ok());
    }
}
