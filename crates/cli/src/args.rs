//! Tokenizer and argument cursor for command handlers.
//!
//! A command line is split into tokens: white-space separated words, `"double quoted"`
//! strings (one token, quotes removed) and balanced `{ ... }` groups (one token whose text is
//! the trimmed inner content; groups may span lines, as in `packet-generator new { ... }`).
//! Handlers walk the tokens with [`Args`], which produces one-line errors quoting the
//! offending token VPP style: ``expected count, got `12x'``.

use crate::error::{clip, CliError};

/// A token: a byte range of the line (a quoted word without its quotes, a group's trimmed
/// inner text), so tokenizing a line allocates the token list and one copy of the line only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tok {
    start: usize,
    end: usize,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A plain or quoted word.
    Word,
    /// A `{ ... }` group; `closed` is false when the input ended before its `}`.
    Group { closed: bool },
}

/// The tokens of a command line after the matched command path, consumed by the handler.
///
/// Tokens are separated by white space; a "double-quoted string" is one token (an unterminated
/// quote runs to the end of the input); a balanced `{ ... }` group (which may span lines) is
/// one token whose text is the trimmed inner content. Keywords are matched exactly
/// (case-sensitive) and never match a group.
#[derive(Clone, Debug)]
pub struct Args {
    line: String,
    toks: Vec<Tok>,
    pos: usize,
}

/// The white-space character starting at byte `i` of `s` (Unicode white space, as
/// `char::is_whitespace`), as its length in bytes.
#[inline(always)]
fn space_at(s: &str, i: usize) -> Option<usize> {
    let b = s.as_bytes()[i];
    if b < 0x80 {
        // ASCII white space as `char::is_whitespace` has it (with vertical tab).
        matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c).then_some(1)
    } else {
        non_ascii_space_at(s, i)
    }
}

#[cold]
#[inline(never)]
fn non_ascii_space_at(s: &str, i: usize) -> Option<usize> {
    let c = s.get(i..)?.chars().next()?;
    c.is_whitespace().then(|| c.len_utf8())
}

/// The byte length of the character starting at `i` (`i` is on a character boundary).
#[inline(always)]
fn char_len(s: &str, i: usize) -> usize {
    if s.as_bytes()[i] < 0x80 {
        1
    } else {
        s.get(i..)
            .and_then(|t| t.chars().next())
            .map_or(1, char::len_utf8)
    }
}

/// Byte-wise scan: `{`, `}`, `"` and ASCII white space are single bytes that never occur
/// inside a multi-byte UTF-8 character, so only non-ASCII bytes need decoding (white space).
fn tokenize(input: &str) -> Vec<Tok> {
    let b = input.as_bytes();
    let n = b.len();
    let mut out = Vec::with_capacity(8);
    let mut i = 0;
    while i < n {
        if let Some(l) = space_at(input, i) {
            i += l;
        } else if b[i] == b'{' {
            let mut depth = 1usize;
            let mut end = None;
            let mut j = i + 1;
            while j < n {
                match b[j] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(j);
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            let inner_end = end.unwrap_or(n);
            let inner = &input[i + 1..inner_end];
            let lead = inner.len() - inner.trim_start().len();
            let t = inner.trim();
            out.push(Tok {
                start: i + 1 + lead,
                end: i + 1 + lead + t.len(),
                kind: Kind::Group {
                    closed: end.is_some(),
                },
            });
            i = end.map_or(n, |e| e + 1);
        } else if b[i] == b'"' {
            let end = b[i + 1..]
                .iter()
                .position(|&c| c == b'"')
                .map_or(n, |p| i + 1 + p);
            out.push(Tok {
                start: i + 1,
                end,
                kind: Kind::Word,
            });
            i = (end + 1).min(n);
        } else {
            let s = i;
            loop {
                // Plain ASCII bytes in one tight loop; the rest one character at a time.
                while i < n
                    && b[i] < 0x80
                    && !matches!(b[i], b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | b'{')
                {
                    i += 1;
                }
                if i >= n || b[i] == b'{' || space_at(input, i).is_some() {
                    break;
                }
                i += char_len(input, i);
            }
            out.push(Tok {
                start: s,
                end: i,
                kind: Kind::Word,
            });
        }
    }
    out
}

/// Parses a decimal or `0x`/`0X` hexadecimal number, digits only (no sign, no separators).
pub(crate) fn parse_u64(w: &str) -> Option<u64> {
    if let Some(h) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        if h.is_empty() || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(h, 16).ok()
    } else {
        if w.is_empty() || !w.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        w.parse().ok()
    }
}

fn parse_dec_u32(w: &str) -> Option<u32> {
    if w.is_empty() || !w.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    w.parse().ok()
}

fn unbalanced() -> CliError {
    CliError::new("unbalanced `{'")
}

impl Args {
    /// Tokenizes `input`.
    pub fn new(input: &str) -> Args {
        Args {
            toks: tokenize(input),
            line: input.to_string(),
            pos: 0,
        }
    }

    /// The text of token `t`.
    fn text(&self, t: &Tok) -> &str {
        &self.line[t.start..t.end]
    }

    /// The text of the plain word at absolute position `i`.
    fn word_text(&self, i: usize) -> Option<&str> {
        match self.toks.get(i) {
            Some(t) if t.kind == Kind::Word => Some(self.text(t)),
            _ => None,
        }
    }

    /// Skips `n` tokens (used by the command tree after matching the command path).
    pub(crate) fn skip(&mut self, n: usize) {
        self.pos = self.pos.saturating_add(n).min(self.toks.len());
    }

    /// The plain-word token at absolute position `i` (None for groups or past the end).
    pub(crate) fn word_at(&self, i: usize) -> Option<&str> {
        self.word_text(i)
    }

    /// Whether some `{` group in the input was never closed.
    pub(crate) fn has_unclosed_group(&self) -> bool {
        self.toks
            .iter()
            .any(|t| t.kind == Kind::Group { closed: false })
    }

    /// Whether the next token is a `{ ... }` group.
    pub fn next_is_group(&self) -> bool {
        matches!(
            self.toks.get(self.pos),
            Some(Tok {
                kind: Kind::Group { .. },
                ..
            })
        )
    }

    /// No tokens left.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.toks.len()
    }

    /// Number of tokens left.
    pub fn remaining(&self) -> usize {
        self.toks.len().saturating_sub(self.pos)
    }

    /// The next token without consuming it (a group's inner text for a group).
    pub fn peek(&self) -> Option<&str> {
        self.toks.get(self.pos).map(|t| self.text(t))
    }

    /// The next token. Errors: `expected <what>` when there is none, ``unbalanced `{'`` when
    /// it is a group whose `}` is missing.
    pub fn word(&mut self, what: &str) -> Result<String, CliError> {
        match self.toks.get(self.pos) {
            None => Err(CliError::new(format!("expected {what}"))),
            Some(Tok {
                kind: Kind::Group { closed: false },
                ..
            }) => Err(unbalanced()),
            Some(t) => {
                let s = self.text(t).to_string();
                self.pos += 1;
                Ok(s)
            }
        }
    }

    /// The next token, if any.
    pub fn opt_word(&mut self) -> Option<String> {
        let t = self.text(self.toks.get(self.pos)?).to_string();
        self.pos += 1;
        Some(t)
    }

    /// Consumes the next token if it is exactly `kw` (case-sensitive; a plain word, not a
    /// group).
    pub fn keyword(&mut self, kw: &str) -> bool {
        match self.word_text(self.pos) {
            Some(w) if w == kw => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    /// Consumes the next token if it is a non-empty prefix of `kw` at least `min_len` bytes
    /// long (`keyword_prefix("verbose", 1)` accepts `v`, `verb`, `verbose`).
    pub fn keyword_prefix(&mut self, kw: &str, min_len: usize) -> bool {
        match self.word_text(self.pos) {
            Some(w) if !w.is_empty() && w.len() >= min_len && kw.starts_with(w) => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    fn num<T>(&mut self, what: &str, parse: impl Fn(&str) -> Option<T>) -> Result<T, CliError> {
        let save = self.pos;
        let w = self.word(what)?;
        match parse(&w) {
            Some(v) => Ok(v),
            None => {
                self.pos = save;
                Err(CliError::new(format!(
                    "expected {what}, got `{}'",
                    clip(&w)
                )))
            }
        }
    }

    /// A decimal or `0x` hexadecimal number. On error the token is not consumed and the
    /// message quotes it: ``expected <what>, got `tok'``.
    pub fn u64(&mut self, what: &str) -> Result<u64, CliError> {
        self.num(what, parse_u64)
    }

    /// A number (as [`Args::u64`]) that fits in 32 bits; a larger one is
    /// ``expected <what>, got `tok' (too large)``.
    pub fn u32(&mut self, what: &str) -> Result<u32, CliError> {
        let save = self.pos;
        let v = self.u64(what)?;
        u32::try_from(v).map_err(|_| {
            let w = self.text(&self.toks[save]).to_string();
            self.pos = save;
            CliError::new(format!("expected {what}, got `{}' (too large)", clip(&w)))
        })
    }

    /// A finite floating-point number (`1e6`, `1000`, `1.5e3`).
    pub fn f64(&mut self, what: &str) -> Result<f64, CliError> {
        self.num(what, |w| {
            // Only digits, sign, point and exponent: no `inf`, `NaN`, `infinity`.
            if !w
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
            {
                return None;
            }
            w.parse::<f64>().ok().filter(|v| v.is_finite())
        })
    }

    /// `n` (giving `(n, n)`) or `a-b` with `a <= b`, decimal.
    pub fn range_u32(&mut self, what: &str) -> Result<(u32, u32), CliError> {
        let save = self.pos;
        let w = self.word(what)?;
        let parsed = match w.split_once('-') {
            Some((a, b)) => parse_dec_u32(a).zip(parse_dec_u32(b)),
            None => parse_dec_u32(&w).map(|v| (v, v)),
        };
        match parsed {
            Some((a, b)) if a <= b => Ok((a, b)),
            Some(_) => {
                self.pos = save;
                Err(CliError::new(format!(
                    "expected {what} (n or a-b), got `{}' (start > end)",
                    clip(&w)
                )))
            }
            None => {
                self.pos = save;
                Err(CliError::new(format!(
                    "expected {what} (n or a-b), got `{}'",
                    clip(&w)
                )))
            }
        }
    }

    /// All remaining tokens joined by single spaces, groups re-wrapped as `{ inner }`
    /// (`{ }` when empty). Consumes everything.
    pub fn rest(&mut self) -> String {
        let v: Vec<String> = self.toks[self.pos.min(self.toks.len())..]
            .iter()
            .map(|t| match (t.kind, self.text(t)) {
                (Kind::Word, w) => w.to_string(),
                (Kind::Group { .. }, "") => "{ }".to_string(),
                (Kind::Group { .. }, text) => format!("{{ {text} }}"),
            })
            .collect();
        self.pos = self.toks.len();
        v.join(" ")
    }

    /// Ok if every token was consumed, else ``unknown input `tok'`` naming the first leftover
    /// (``unbalanced `{'`` if it is an unclosed group).
    pub fn finish(&self) -> Result<(), CliError> {
        match self.toks.get(self.pos) {
            None => Ok(()),
            Some(Tok {
                kind: Kind::Group { closed: false },
                ..
            }) => Err(unbalanced()),
            Some(t) => Err(CliError::unknown_input(self.text(t))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &str) -> Vec<String> {
        let mut a = Args::new(input);
        let mut v = Vec::new();
        while let Some(w) = a.opt_word() {
            v.push(w);
        }
        v
    }

    #[test]
    fn whitespace_of_any_kind_separates_words() {
        assert_eq!(all("  a\tb \r\n c  "), vec!["a", "b", "c"]);
        assert!(all("").is_empty());
        assert!(all(" \t\n ").is_empty());
        // Unicode white space (vertical tab, no-break space, em space) separates too; other
        // non-ASCII characters are part of words, also before a group.
        assert_eq!(
            all("a\u{0b}b\u{a0}c\u{2003}dé{ x }ü\"ß\""),
            vec!["a", "b", "c", "dé", "x", "ü\"ß\""]
        );
    }

    #[test]
    fn quoted_string_is_one_token_without_quotes() {
        assert_eq!(
            all("tag \"two words\" x \"\""),
            vec!["tag", "two words", "x", ""]
        );
        assert_eq!(all("\"unterminated rest"), vec!["unterminated rest"]);
    }

    #[test]
    fn brace_group_is_one_trimmed_token_spanning_lines() {
        let mut a = Args::new("data {\n  IP4: a -> b\n  UDP: 1 -> 2\n} limit 3");
        assert!(a.keyword("data"));
        assert!(a.next_is_group());
        assert_eq!(a.word("data").unwrap(), "IP4: a -> b\n  UDP: 1 -> 2");
        assert!(!a.next_is_group());
        assert!(a.keyword("limit"));
        assert_eq!(a.u32("limit").unwrap(), 3);
        assert!(a.finish().is_ok());
    }

    #[test]
    fn nested_groups_stay_in_the_outer_token() {
        assert_eq!(
            all("new { name x data { a } } end"),
            vec!["new", "name x data { a }", "end"]
        );
        assert_eq!(all("word{ a }"), vec!["word", "a"]);
    }

    #[test]
    fn unclosed_group_is_reported_not_swallowed() {
        let mut a = Args::new("new { name x");
        assert!(a.has_unclosed_group());
        assert!(a.keyword("new"));
        assert_eq!(a.finish().unwrap_err().msg, "unbalanced `{'");
        assert_eq!(a.word("spec").unwrap_err().msg, "unbalanced `{'");
        assert!(!Args::new("a { b } c").has_unclosed_group());
    }

    #[test]
    fn keyword_is_exact_and_case_sensitive() {
        let mut a = Args::new("Up up");
        assert!(!a.keyword("up"));
        assert!(!a.keyword("U"));
        assert!(a.keyword("Up"));
        assert!(a.keyword("up"));
        assert!(!a.keyword("up"));
    }

    #[test]
    fn keyword_never_matches_a_group() {
        let mut a = Args::new("{ up }");
        assert!(!a.keyword("up"));
        assert!(!a.keyword_prefix("up", 1));
        assert_eq!(a.remaining(), 1);
    }

    #[test]
    fn keyword_prefix_needs_min_len_and_a_real_prefix() {
        let mut a = Args::new("v verb verbosity x");
        assert!(!a.keyword_prefix("verbose", 2));
        assert!(a.keyword_prefix("verbose", 1));
        assert!(a.keyword_prefix("verbose", 4));
        assert!(!a.keyword_prefix("verbose", 1), "longer than kw");
        assert_eq!(a.opt_word().as_deref(), Some("verbosity"));
        let mut e = Args::new("\"\"");
        assert!(!e.keyword_prefix("verbose", 0), "empty token never matches");
    }

    #[test]
    fn peek_does_not_consume_and_remaining_counts() {
        let mut a = Args::new("a b");
        assert_eq!(a.remaining(), 2);
        assert_eq!(a.peek(), Some("a"));
        assert_eq!(a.peek(), Some("a"));
        assert_eq!(a.opt_word().as_deref(), Some("a"));
        assert_eq!(a.remaining(), 1);
        assert!(!a.is_empty());
        assert_eq!(a.opt_word().as_deref(), Some("b"));
        assert!(a.is_empty());
        assert_eq!(a.peek(), None);
        assert_eq!(a.opt_word(), None);
    }

    #[test]
    fn word_reports_what_was_expected() {
        let mut a = Args::new("");
        assert_eq!(a.word("interface").unwrap_err().msg, "expected interface");
    }

    #[test]
    fn u64_decimal_and_hex() {
        let mut a = Args::new("0 42 0x10 0XfF 18446744073709551615");
        assert_eq!(a.u64("n").unwrap(), 0);
        assert_eq!(a.u64("n").unwrap(), 42);
        assert_eq!(a.u64("n").unwrap(), 16);
        assert_eq!(a.u64("n").unwrap(), 255);
        assert_eq!(a.u64("n").unwrap(), u64::MAX);
    }

    #[test]
    fn u64_rejects_signs_junk_and_overflow_quoting_the_token() {
        for bad in [
            "12x",
            "+5",
            "-1",
            "0x",
            "0x+5",
            "1_000",
            "",
            "18446744073709551616",
        ] {
            let mut a = Args::new(&format!("\"{bad}\""));
            assert_eq!(
                a.u64("count").unwrap_err().msg,
                format!("expected count, got `{bad}'")
            );
            assert_eq!(a.remaining(), 1, "bad token `{bad}' must not be consumed");
        }
        let mut a = Args::new("");
        assert_eq!(a.u64("count").unwrap_err().msg, "expected count");
    }

    #[test]
    fn u32_range_check() {
        let mut a = Args::new("4294967295 4294967296");
        assert_eq!(a.u32("n").unwrap(), u32::MAX);
        assert_eq!(
            a.u32("count").unwrap_err().msg,
            "expected count, got `4294967296' (too large)"
        );
        assert_eq!(a.peek(), Some("4294967296"));
        let mut a = Args::new("ten");
        assert_eq!(a.u32("count").unwrap_err().msg, "expected count, got `ten'");
    }

    #[test]
    fn f64_accepts_plain_and_exponent_forms() {
        let mut a = Args::new("1e6 1000 1.5e3 0.25 2E-3");
        assert_eq!(a.f64("rate").unwrap(), 1e6);
        assert_eq!(a.f64("rate").unwrap(), 1000.0);
        assert_eq!(a.f64("rate").unwrap(), 1500.0);
        assert_eq!(a.f64("rate").unwrap(), 0.25);
        assert_eq!(a.f64("rate").unwrap(), 0.002);
    }

    #[test]
    fn f64_rejects_non_finite_and_junk() {
        for bad in ["inf", "NaN", "infinity", "1e400", "fast", "1.2.3", "0x10"] {
            let mut a = Args::new(bad);
            assert_eq!(
                a.f64("rate").unwrap_err().msg,
                format!("expected rate, got `{bad}'")
            );
        }
    }

    #[test]
    fn range_single_and_pair() {
        let mut a = Args::new("64 64-1500 7-7");
        assert_eq!(a.range_u32("size").unwrap(), (64, 64));
        assert_eq!(a.range_u32("size").unwrap(), (64, 1500));
        assert_eq!(a.range_u32("size").unwrap(), (7, 7));
    }

    #[test]
    fn range_errors_quote_the_token() {
        let mut a = Args::new("9-3");
        assert_eq!(
            a.range_u32("size").unwrap_err().msg,
            "expected size (n or a-b), got `9-3' (start > end)"
        );
        for bad in ["64-", "-5", "a-b", "1-2-3", "+1-2", "5000000000"] {
            let mut a = Args::new(bad);
            assert_eq!(
                a.range_u32("size").unwrap_err().msg,
                format!("expected size (n or a-b), got `{bad}'")
            );
        }
        let mut a = Args::new("");
        assert_eq!(a.range_u32("size").unwrap_err().msg, "expected size");
    }

    #[test]
    fn rest_joins_and_rewraps_groups() {
        let mut a = Args::new("x  show {  x   y }  z {}");
        assert!(a.keyword("x"));
        assert_eq!(a.rest(), "show { x   y } z { }");
        assert!(a.is_empty());
        assert_eq!(a.rest(), "");
    }

    #[test]
    fn finish_names_first_leftover() {
        let mut a = Args::new("up sideways more");
        assert!(a.keyword("up"));
        assert_eq!(a.finish().unwrap_err().msg, "unknown input `sideways'");
        assert!(a.keyword_prefix("sideways-step", 3));
        assert_eq!(a.finish().unwrap_err().msg, "unknown input `more'");
        a.opt_word();
        assert!(a.finish().is_ok());
    }

    #[test]
    fn skip_and_word_at_are_bounded() {
        let mut a = Args::new("a { g } b");
        assert_eq!(a.word_at(0), Some("a"));
        assert_eq!(a.word_at(1), None, "groups are not words");
        assert_eq!(a.word_at(9), None);
        a.skip(usize::MAX);
        assert!(a.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn tokenizer_never_panics_and_finish_is_one_line(s in "\\PC{0,200}|[{}\" \\n\\ta-z0-9]{0,200}") {
            let mut a = Args::new(&s);
            let _ = a.clone().rest();
            let _ = a.u64("n");
            let _ = a.f64("n");
            let _ = a.range_u32("n");
            if let Err(e) = a.finish() {
                proptest::prop_assert!(!e.msg.contains('\n'));
            }
        }

        #[test]
        fn plain_words_round_trip_through_rest(words in proptest::collection::vec("[a-z0-9./:-]{1,8}", 0..10)) {
            let line = words.join("   ");
            let mut a = Args::new(&line);
            proptest::prop_assert_eq!(a.remaining(), words.len());
            proptest::prop_assert_eq!(a.rest(), words.join(" "));
        }
    }
}
