//! Tokenizer and argument cursor for command handlers.

use crate::error::{clip, CliError};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Word(String),
    Group(String),
}

impl Tok {
    fn text(&self) -> &str {
        match self {
            Tok::Word(s) | Tok::Group(s) => s,
        }
    }
}

/// The tokens of a command line after the matched command path, consumed by the handler.
///
/// Tokens are separated by white space; a "double-quoted string" is one token; a balanced
/// `{ ... }` group (which may span lines) is one token whose text is the trimmed inner content.
#[derive(Clone, Debug)]
pub struct Args {
    toks: Vec<Tok>,
    pos: usize,
}

fn tokenize(input: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let chars: Vec<char> = input.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '{' {
            let mut depth = 1;
            let start = i + 1;
            i += 1;
            while i < chars.len() && depth > 0 {
                match chars[i] {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                i += 1;
            }
            let end = if depth == 0 { i - 1 } else { i };
            let inner: String = chars[start..end].iter().collect();
            out.push(Tok::Group(inner.trim().to_string()));
        } else if c == '"' {
            let start = i + 1;
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += 1;
            }
            out.push(Tok::Word(chars[start..i.min(chars.len())].iter().collect()));
            i += 1;
        } else {
            let start = i;
            while i < chars.len() && !chars[i].is_whitespace() && chars[i] != '{' {
                i += 1;
            }
            out.push(Tok::Word(chars[start..i].iter().collect()));
        }
    }
    out
}

impl Args {
    /// Tokenizes `input`.
    pub fn new(input: &str) -> Args {
        Args {
            toks: tokenize(input),
            pos: 0,
        }
    }

    /// Skips `n` tokens (used by the command tree after matching the command path).
    pub(crate) fn skip(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.toks.len());
    }

    /// The plain-word token at absolute position `i` (None for groups or past the end).
    pub(crate) fn word_at(&self, i: usize) -> Option<&str> {
        match self.toks.get(i) {
            Some(Tok::Word(w)) => Some(w),
            _ => None,
        }
    }

    /// Whether the next token is a `{ ... }` group.
    pub fn next_is_group(&self) -> bool {
        matches!(self.toks.get(self.pos), Some(Tok::Group(_)))
    }

    /// No tokens left.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.toks.len()
    }

    /// Tokens left.
    pub fn remaining(&self) -> usize {
        self.toks.len().saturating_sub(self.pos)
    }

    /// The next token without consuming it.
    pub fn peek(&self) -> Option<&str> {
        self.toks.get(self.pos).map(Tok::text)
    }

    /// The next token; `expected <what>` when there is none.
    pub fn word(&mut self, what: &str) -> Result<String, CliError> {
        self.opt_word()
            .ok_or_else(|| CliError::new(format!("expected {what}")))
    }

    /// The next token, if any.
    pub fn opt_word(&mut self) -> Option<String> {
        let t = self.toks.get(self.pos)?.text().to_string();
        self.pos += 1;
        Some(t)
    }

    /// Consumes the next token if it is exactly `kw` (a plain word, not a group).
    pub fn keyword(&mut self, kw: &str) -> bool {
        match self.toks.get(self.pos) {
            Some(Tok::Word(w)) if w == kw => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    /// Consumes the next token if it is a prefix of `kw` at least `min_len` long.
    pub fn keyword_prefix(&mut self, kw: &str, min_len: usize) -> bool {
        match self.toks.get(self.pos) {
            Some(Tok::Word(w)) if w.len() >= min_len && kw.starts_with(w.as_str()) => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    fn num<T>(&mut self, what: &str, parse: impl Fn(&str) -> Option<T>) -> Result<T, CliError> {
        let w = self.word(what)?;
        parse(&w).ok_or_else(|| CliError::new(format!("expected {what}, got `{}'", clip(&w))))
    }

    /// A decimal or `0x` hexadecimal number.
    pub fn u64(&mut self, what: &str) -> Result<u64, CliError> {
        self.num(what, |w| {
            if let Some(h) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
                u64::from_str_radix(h, 16).ok()
            } else {
                w.parse().ok()
            }
        })
    }

    /// A number that fits in 32 bits.
    pub fn u32(&mut self, what: &str) -> Result<u32, CliError> {
        let save = self.pos;
        let v = self.u64(what)?;
        u32::try_from(v).map_err(|_| {
            let w = self.toks[save].text().to_string();
            CliError::new(format!("expected {what}, got `{}' (too large)", clip(&w)))
        })
    }

    /// A floating-point number (`1e6`, `1000`, `1.5e3`).
    pub fn f64(&mut self, what: &str) -> Result<f64, CliError> {
        self.num(what, |w| w.parse::<f64>().ok().filter(|v| v.is_finite()))
    }

    /// `a` or `a-b` (a <= b).
    pub fn range_u32(&mut self, what: &str) -> Result<(u32, u32), CliError> {
        let w = self.word(what)?;
        let bad = || CliError::new(format!("expected {what} (n or a-b), got `{}'", clip(&w)));
        let (a, b) = match w.split_once('-') {
            Some((a, b)) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
            None => {
                let v = w.parse().map_err(|_| bad())?;
                (v, v)
            }
        };
        if a > b {
            return Err(bad());
        }
        Ok((a, b))
    }

    /// All remaining tokens joined by single spaces (groups re-wrapped in braces).
    pub fn rest(&mut self) -> String {
        let v: Vec<String> = self.toks[self.pos.min(self.toks.len())..]
            .iter()
            .map(|t| match t {
                Tok::Word(w) => w.clone(),
                Tok::Group(g) => format!("{{ {g} }}"),
            })
            .collect();
        self.pos = self.toks.len();
        v.join(" ")
    }

    /// Ok if every token was consumed, else "unknown input `tok'" naming the first leftover.
    pub fn finish(&self) -> Result<(), CliError> {
        match self.peek() {
            None => Ok(()),
            Some(t) => Err(CliError::unknown_input(t)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_quotes_and_groups() {
        let mut a =
            Args::new("name s0 \"two words\" data { IP4: a -> b\n UDP: 1 -> 2 } limit 0x10");
        assert!(a.keyword("name"));
        assert_eq!(a.word("x").unwrap(), "s0");
        assert_eq!(a.word("x").unwrap(), "two words");
        assert!(a.keyword("data"));
        assert_eq!(a.word("x").unwrap(), "IP4: a -> b\n UDP: 1 -> 2");
        assert!(a.keyword("limit"));
        assert_eq!(a.u64("limit").unwrap(), 16);
        assert!(a.finish().is_ok());
    }

    #[test]
    fn number_errors_quote_the_token() {
        let mut a = Args::new("12x");
        assert_eq!(a.u64("count").unwrap_err().msg, "expected count, got `12x'");
        let mut a = Args::new("99999999999");
        assert!(a.u32("count").unwrap_err().msg.contains("too large"));
        let mut a = Args::new("");
        assert_eq!(a.u32("count").unwrap_err().msg, "expected count");
        let mut a = Args::new("1e6 64-1500 100 9-3");
        assert_eq!(a.f64("rate").unwrap(), 1e6);
        assert_eq!(a.range_u32("size").unwrap(), (64, 1500));
        assert_eq!(a.range_u32("size").unwrap(), (100, 100));
        assert!(a.range_u32("size").is_err());
    }

    #[test]
    fn finish_names_leftover() {
        let mut a = Args::new("up sideways");
        assert!(a.keyword("up"));
        assert_eq!(a.finish().unwrap_err().msg, "unknown input `sideways'");
        assert!(a.keyword_prefix("sideways-step", 3));
        assert!(a.finish().is_ok());
    }

    #[test]
    fn rest_rewraps_groups() {
        let mut a = Args::new("show { x y } z");
        assert_eq!(a.rest(), "show { x y } z");
        assert!(a.is_empty());
    }
}
