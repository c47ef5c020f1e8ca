//! startup.conf parser: VPP's brace syntax, with a line number on every token so that
//! validation errors can say `file:line`.
//!
//! ```text
//! unix { nodaemon cli-listen /run/sluice/cli.sock }   # comment
//! cpu {
//!   main-core 1
//!   corelist-workers 2-3
//! }
//! dpdk { dev 0000:02:00.1 { name eth0 } }
//! ```
//!
//! The parser is generic: it checks braces and section headers and keeps the body of each
//! section twice, as a flat [`Token`] stream ([`Section::tokens`], what a schema walks with a
//! [`SectionCursor`], since only the schema knows how many values a key takes) and as
//! line-based [`Item`]s (one per source line, nested blocks attached to the item that opened
//! them). Typed validation is the daemon's job; [`SectionCursor`] gives it the error messages.

use crate::args::parse_u64;
use crate::error::clip;

/// Top-level keys that take one value instead of a `{ ... }` block (VPP's `heapsize 2G`):
/// parsed as a section whose only token is the value.
pub const VALUE_SECTIONS: &[&str] = &["heapsize"];

/// Deepest brace nesting accepted, the section's own braces included.
pub const MAX_DEPTH: usize = 16;

/// A parse or validation error, displayed `file:line: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {msg}")]
pub struct ConfError {
    /// File name (`<command line>` for [`parse_argv`]).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// One-line message quoting the offending token as `` `tok' ``.
    pub msg: String,
}

/// A token with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// Text; `{` and `}` are tokens of their own.
    pub text: String,
    /// 1-based line.
    pub line: usize,
}

/// One line of a section body: its first token, the other tokens, and the nested block the
/// line opened, if any (`dev 0000:02:00.1 { name eth0 }` is key `dev`, values
/// `["0000:02:00.1"]`, a block with the item `name eth0`). A block whose `{` is on the next
/// line attaches to the item before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// First token of the line.
    pub key: String,
    /// Other tokens of the line, up to the block.
    pub values: Vec<String>,
    /// 1-based line of the key.
    pub line: usize,
    /// The items of the nested block opened by this item.
    pub block: Option<Vec<Item>>,
}

/// A top-level section `name { ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Name (`unix`, `cpu`, ...).
    pub name: String,
    /// Line of the name.
    pub line: usize,
    /// Line-based items of the body.
    pub items: Vec<Item>,
    tokens: Vec<Token>,
}

impl Section {
    /// Flat tokens of the body in order, nested braces included as `{` / `}` tokens (always
    /// balanced).
    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }
}

/// A parsed file: its sections in file order (a name may repeat; the schema decides).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfFile {
    /// Sections in file order.
    pub sections: Vec<Section>,
}

fn error(file: &str, line: usize, msg: impl Into<String>) -> ConfError {
    ConfError {
        file: file.to_string(),
        line,
        msg: msg.into(),
    }
}

fn lex(text: &str, file: &str) -> Result<Vec<Token>, ConfError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let ln = i + 1;
        if let Some(c) = line.chars().find(|c| c.is_control() && !c.is_whitespace()) {
            let what = if c == '\0' {
                "NUL byte".to_string()
            } else {
                format!("control character 0x{:02x}", c as u32)
            };
            return Err(error(file, ln, format!("binary data ({what})")));
        }
        let line = line.split_once('#').map_or(line, |(code, _)| code);
        let mut word_start = None;
        for (j, c) in line.char_indices() {
            let brace = c == '{' || c == '}';
            if c.is_whitespace() || brace {
                if let Some(s) = word_start.take() {
                    out.push(Token {
                        text: line[s..j].to_string(),
                        line: ln,
                    });
                }
                if brace {
                    out.push(Token {
                        text: c.to_string(),
                        line: ln,
                    });
                }
            } else if word_start.is_none() {
                word_start = Some(j);
            }
        }
        if let Some(s) = word_start {
            out.push(Token {
                text: line[s..].to_string(),
                line: ln,
            });
        }
    }
    Ok(out)
}

/// For each `{` token, the index of its matching `}` (checked balanced by the caller).
fn matching_close(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, t) in tokens.iter().enumerate().skip(open) {
        match t.text.as_str() {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// Line-based grouping of a balanced token slice (depth is bounded by [`MAX_DEPTH`]).
fn items(tokens: &[Token], file: &str) -> Result<Vec<Item>, ConfError> {
    let mut out: Vec<Item> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        if t.text == "{" {
            let j = matching_close(tokens, i);
            let inner = items(&tokens[i + 1..j.min(tokens.len())], file)?;
            match out.last_mut() {
                Some(last) if last.block.is_none() => last.block = Some(inner),
                _ => {
                    return Err(error(
                        file,
                        t.line,
                        "unexpected `{' (a block must follow a key)",
                    ))
                }
            }
            i = j + 1;
            continue;
        }
        match out.last_mut() {
            Some(last) if last.line == t.line && last.block.is_none() => {
                last.values.push(t.text.clone())
            }
            _ => out.push(Item {
                key: t.text.clone(),
                values: Vec::new(),
                line: t.line,
                block: None,
            }),
        }
        i += 1;
    }
    Ok(out)
}

/// Parses a startup.conf text; `file` names it in errors.
///
/// Errors (`file:line: msg`): ``binary data (NUL byte)`` / ``binary data (control character
/// 0xNN)``; ``expected `{' after section name `foo'``; ``expected a section name before
/// `{'``; ``unexpected `}'`` (a `}` closing nothing); ``unbalanced `{' in section `foo'``
/// at the line of the section's `{`; ``unexpected `{' (a block must follow a key)``;
/// ``blocks nested too deeply (more than 16)``. An empty file has no sections.
pub fn parse(text: &str, file: &str) -> Result<ConfFile, ConfError> {
    let toks = lex(text, file)?;
    let mut cf = ConfFile::default();
    let mut i = 0;
    while i < toks.len() {
        let name = &toks[i];
        match name.text.as_str() {
            "}" => return Err(error(file, name.line, "unexpected `}'")),
            "{" => return Err(error(file, name.line, "expected a section name before `{'")),
            _ => {}
        }
        match toks.get(i + 1) {
            Some(t) if t.text == "{" => {}
            Some(v) if VALUE_SECTIONS.contains(&name.text.as_str()) && v.text != "}" => {
                cf.sections.push(Section {
                    name: name.text.clone(),
                    line: name.line,
                    items: vec![Item {
                        key: v.text.clone(),
                        values: Vec::new(),
                        line: v.line,
                        block: None,
                    }],
                    tokens: vec![v.clone()],
                });
                i += 2;
                continue;
            }
            _ => {
                return Err(error(
                    file,
                    name.line,
                    format!("expected `{{' after section name `{}'", clip(&name.text)),
                ))
            }
        }
        let open = &toks[i + 1];
        let mut depth = 0usize;
        let mut close = None;
        for (j, t) in toks.iter().enumerate().skip(i + 1) {
            match t.text.as_str() {
                "{" => {
                    depth += 1;
                    if depth > MAX_DEPTH {
                        return Err(error(
                            file,
                            t.line,
                            format!("blocks nested too deeply (more than {MAX_DEPTH})"),
                        ));
                    }
                }
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(j);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else {
            return Err(error(
                file,
                open.line,
                format!("unbalanced `{{' in section `{}'", clip(&name.text)),
            ));
        };
        let body = toks[i + 2..close].to_vec();
        cf.sections.push(Section {
            name: name.text.clone(),
            line: name.line,
            items: items(&body, file)?,
            tokens: body,
        });
        i = close + 1;
    }
    Ok(cf)
}

/// Parses raw file contents: as [`parse`], plus ``binary data (invalid UTF-8)`` at the line
/// of the first invalid byte.
pub fn parse_bytes(bytes: &[u8], file: &str) -> Result<ConfFile, ConfError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(text, file),
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            // A NUL or control byte before the bad one is reported as such.
            if let Ok(text) = std::str::from_utf8(good) {
                lex(text, file)?;
            }
            let line = 1 + good.iter().filter(|&&b| b == b'\n').count();
            Err(error(file, line, "binary data (invalid UTF-8)"))
        }
    }
}

/// Parses a configuration given as command-line arguments (VPP: `vpp unix { nodaemon }
/// cpu { workers 2 }`), the arguments joined with spaces; errors name `<command line>`.
pub fn parse_argv(args: &[String]) -> Result<ConfFile, ConfError> {
    parse(&args.join(" "), "<command line>")
}

/// Parses a number with an optional binary size suffix: `k`/`K` (x1024), `m`/`M` (x1024²),
/// `g`/`G` (x1024³). Decimal or `0x` hex digits; overflow is an error.
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    parse_u64(num)?.checked_mul(mult)
}

/// A cursor over a section's tokens for typed (schema) validation:
///
/// ```
/// # use sluice_cli::conf::{parse, SectionCursor};
/// let cf = parse("buffers { buffers-per-numa 16k }", "s.conf").unwrap();
/// let mut c = SectionCursor::new(&cf.sections[0], "s.conf");
/// while let Some(k) = c.next_key() {
///     match k.text.as_str() {
///         "buffers-per-numa" => assert_eq!(c.value_u64(k).unwrap(), 16384),
///         _ => panic!("{}", c.unknown(k)),
///     }
/// }
/// ```
#[derive(Debug, Clone)]
pub struct SectionCursor<'a> {
    section: &'a Section,
    file: String,
    pos: usize,
}

impl<'a> SectionCursor<'a> {
    /// A cursor at the start of `section`; `file` names it in errors.
    pub fn new(section: &'a Section, file: &str) -> Self {
        SectionCursor {
            section,
            file: file.to_string(),
            pos: 0,
        }
    }

    /// The next token (in key position), consumed; `None` at the end of the section. A brace
    /// here is returned as is (a schema rejects it with [`SectionCursor::unknown`]).
    pub fn next_key(&mut self) -> Option<&'a Token> {
        let t = self.section.tokens.get(self.pos)?;
        self.pos += 1;
        Some(t)
    }

    /// The next token without consuming it (for keys whose value is optional).
    pub fn peek(&self) -> Option<&'a Token> {
        self.section.tokens.get(self.pos)
    }

    /// The next token as the value of `key`. A missing value (end of section or a brace) is
    /// ``file:line: `key' needs a value`` at the key's line.
    pub fn value(&mut self, key: &Token) -> Result<&'a Token, ConfError> {
        match self.section.tokens.get(self.pos) {
            Some(t) if t.text != "{" && t.text != "}" => {
                self.pos += 1;
                Ok(t)
            }
            _ => Err(self.error(key, &format!("`{}' needs a value", clip(&key.text)))),
        }
    }

    /// A numeric value of `key` (see [`parse_size`]: `16k`, `2G`, `0x100`). A bad one is
    /// ``file:line: bad value `x' for `key': expected a number`` at the value's line.
    pub fn value_u64(&mut self, key: &Token) -> Result<u64, ConfError> {
        let v = self.value(key)?;
        parse_size(&v.text).ok_or_else(|| {
            self.error(
                v,
                &format!(
                    "bad value `{}' for `{}': expected a number",
                    clip(&v.text),
                    clip(&key.text)
                ),
            )
        })
    }

    /// The tokens of the `{ ... }` block that follows `key` (without the outer braces, nested
    /// braces included). No block is ``file:line: `key' needs a { ... } block``.
    pub fn block(&mut self, key: &Token) -> Result<Vec<&'a Token>, ConfError> {
        match self.section.tokens.get(self.pos) {
            Some(t) if t.text == "{" => {}
            _ => {
                return Err(self.error(
                    key,
                    &format!("`{}' needs a {{ ... }} block", clip(&key.text)),
                ))
            }
        }
        self.pos += 1;
        let mut depth = 1usize;
        let mut out = Vec::new();
        while let Some(t) = self.section.tokens.get(self.pos) {
            self.pos += 1;
            match t.text.as_str() {
                "{" => depth += 1,
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            out.push(t);
        }
        Ok(out)
    }

    /// An error at `tok`'s line: ``file:line: msg``.
    pub fn error(&self, tok: &Token, msg: &str) -> ConfError {
        error(&self.file, tok.line, msg)
    }

    /// ``file:line: unknown key `tok' in section `name'``.
    pub fn unknown(&self, tok: &Token) -> ConfError {
        self.error(
            tok,
            &format!(
                "unknown key `{}' in section `{}'",
                clip(&tok.text),
                clip(&self.section.name)
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text, "a.conf").unwrap_err().to_string()
    }

    fn texts(s: &Section) -> Vec<&str> {
        s.tokens().iter().map(|t| t.text.as_str()).collect()
    }

    #[test]
    fn sections_with_brace_on_same_or_next_line() {
        let cf = parse("unix { nodaemon }\n\ncpu\n{\n  workers 2\n}\n", "s.conf").unwrap();
        assert_eq!(cf.sections.len(), 2);
        assert_eq!(
            (cf.sections[0].name.as_str(), cf.sections[0].line),
            ("unix", 1)
        );
        assert_eq!(
            (cf.sections[1].name.as_str(), cf.sections[1].line),
            ("cpu", 3)
        );
        assert_eq!(texts(&cf.sections[1]), vec!["workers", "2"]);
        assert_eq!(cf.sections[1].tokens()[0].line, 5);
    }

    #[test]
    fn empty_and_comment_only_files_have_no_sections() {
        assert!(parse("", "a.conf").unwrap().sections.is_empty());
        assert!(parse("\n  # nothing { here\n\n", "a.conf")
            .unwrap()
            .sections
            .is_empty());
        assert!(parse("x {}", "a.conf").unwrap().sections[0]
            .items
            .is_empty());
    }

    #[test]
    fn comments_run_to_end_of_line_anywhere() {
        let cf = parse(
            "unix { # opening\n  log /tmp/l # the log } not a brace\n}#end",
            "s.conf",
        )
        .unwrap();
        assert_eq!(texts(&cf.sections[0]), vec!["log", "/tmp/l"]);
    }

    #[test]
    fn several_items_on_one_line_share_a_line_item_but_keep_tokens() {
        let cf = parse("unix { nodaemon cli-listen /run/vpp/cli.sock }\n", "s.conf").unwrap();
        let u = &cf.sections[0];
        assert_eq!(
            texts(u),
            vec!["nodaemon", "cli-listen", "/run/vpp/cli.sock"]
        );
        assert_eq!(u.items.len(), 1);
        assert_eq!(u.items[0].key, "nodaemon");
        assert_eq!(u.items[0].values, vec!["cli-listen", "/run/vpp/cli.sock"]);
    }

    #[test]
    fn items_are_one_per_line_with_nested_blocks() {
        let cf = parse(
            "dpdk {\n  dev 0000:02:00.1 { name eth0 num-rx-queues 2 }\n  dev default\n  {\n    num-rx-desc 512\n    tso on\n  }\n  uio-driver vfio-pci\n}\n",
            "s.conf",
        )
        .unwrap();
        let d = &cf.sections[0];
        assert_eq!(d.items.len(), 3);
        let dev = &d.items[0];
        assert_eq!((dev.key.as_str(), dev.line), ("dev", 2));
        assert_eq!(dev.values, vec!["0000:02:00.1"]);
        let b = dev.block.as_ref().unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].key, "name");
        assert_eq!(b[0].values, vec!["eth0", "num-rx-queues", "2"]);
        let def = &d.items[1];
        assert_eq!(def.values, vec!["default"]);
        let b = def.block.as_ref().unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!((b[1].key.as_str(), b[1].line), ("tso", 6));
        assert_eq!(d.items[2].key, "uio-driver");
        assert_eq!(d.items[2].block, None);
        assert_eq!(
            texts(d).iter().filter(|t| **t == "{").count(),
            texts(d).iter().filter(|t| **t == "}").count()
        );
    }

    #[test]
    fn tokens_after_a_block_on_the_same_line_start_a_new_item() {
        let cf = parse(
            "plugins { plugin default { disable } plugin dpdk_plugin.so { enable } }",
            "s.conf",
        )
        .unwrap();
        let it = &cf.sections[0].items;
        assert_eq!(it.len(), 2);
        assert_eq!(it[1].values, vec!["dpdk_plugin.so"]);
        assert_eq!(it[1].block.as_ref().unwrap()[0].key, "enable");
    }

    #[test]
    fn byte_order_mark_and_crlf_are_accepted() {
        let cf = parse("\u{feff}unix {\r\n  nodaemon\r\n}\r\n", "s.conf").unwrap();
        assert_eq!(cf.sections[0].name, "unix");
        assert_eq!(texts(&cf.sections[0]), vec!["nodaemon"]);
    }

    #[test]
    fn unbalanced_names_the_opening_brace_line() {
        assert_eq!(
            err("unix\n{\n nodaemon\n"),
            "a.conf:2: unbalanced `{' in section `unix'"
        );
        assert_eq!(
            err("unix { a }\ndpdk {\n dev x {\n  name y\n }\n"),
            "a.conf:2: unbalanced `{' in section `dpdk'"
        );
    }

    #[test]
    fn heapsize_takes_a_value_without_braces() {
        let cf = parse("heapsize 2G\nunix { nodaemon }\n", "h.conf").unwrap();
        assert_eq!(cf.sections.len(), 2);
        assert_eq!(cf.sections[0].name, "heapsize");
        assert_eq!(texts(&cf.sections[0]), vec!["2G"]);
        assert_eq!(cf.sections[1].name, "unix");
        assert_eq!(
            err("heapsize\n"),
            "a.conf:1: expected `{' after section name `heapsize'"
        );
    }

    #[test]
    fn section_name_without_brace() {
        assert_eq!(
            err("\nunix nodaemon\n"),
            "a.conf:2: expected `{' after section name `unix'"
        );
        assert_eq!(
            err("unix { }\nfoo"),
            "a.conf:2: expected `{' after section name `foo'"
        );
    }

    #[test]
    fn stray_braces() {
        assert_eq!(err("unix { }\n}\n"), "a.conf:2: unexpected `}'");
        assert_eq!(
            err("{ nodaemon }"),
            "a.conf:1: expected a section name before `{'"
        );
    }

    #[test]
    fn block_without_key_is_an_error() {
        assert_eq!(
            err("unix {\n { nodaemon }\n}"),
            "a.conf:2: unexpected `{' (a block must follow a key)"
        );
        assert_eq!(
            err("dpdk { dev x { a }\n { b } }"),
            "a.conf:2: unexpected `{' (a block must follow a key)"
        );
    }

    #[test]
    fn nesting_depth_is_bounded() {
        let ok = format!(
            "s {{{}{}",
            "k {".repeat(MAX_DEPTH - 1),
            "}".repeat(MAX_DEPTH)
        );
        assert!(parse(&ok, "a.conf").is_ok());
        let deep = format!("s {{{}", "k {\n".repeat(100_000));
        assert_eq!(
            parse(&deep, "a.conf").unwrap_err().to_string(),
            format!(
                "a.conf:{}: blocks nested too deeply (more than 16)",
                MAX_DEPTH
            )
        );
    }

    #[test]
    fn binary_data_is_refused_with_its_line() {
        assert_eq!(err("unix { a }\nx\0y"), "a.conf:2: binary data (NUL byte)");
        assert_eq!(
            err("unix {\n\n a \u{1b}[0m }"),
            "a.conf:3: binary data (control character 0x1b)"
        );
        assert_eq!(err("# \0 in a comment"), "a.conf:1: binary data (NUL byte)");
    }

    #[test]
    fn parse_bytes_reports_invalid_utf8_line() {
        assert_eq!(
            parse_bytes(b"unix {\n nodaemon\n log \xff\xfe\n}", "b.conf")
                .unwrap_err()
                .to_string(),
            "b.conf:3: binary data (invalid UTF-8)"
        );
        assert_eq!(
            parse_bytes(b"a\0b\n\xff", "b.conf")
                .unwrap_err()
                .to_string(),
            "b.conf:1: binary data (NUL byte)"
        );
        assert_eq!(
            parse_bytes(b"unix { nodaemon }", "b.conf")
                .unwrap()
                .sections[0]
                .name,
            "unix"
        );
    }

    #[test]
    fn argv_form_joins_arguments() {
        let argv: Vec<String> = ["unix", "{", "nodaemon", "}", "cpu", "{ workers 2 }"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let cf = parse_argv(&argv).unwrap();
        assert_eq!(cf.sections.len(), 2);
        assert_eq!(texts(&cf.sections[1]), vec!["workers", "2"]);
        assert_eq!(
            parse_argv(&["unix".to_string()]).unwrap_err().to_string(),
            "<command line>:1: expected `{' after section name `unix'"
        );
        assert!(parse_argv(&[]).unwrap().sections.is_empty());
    }

    #[test]
    fn sizes_with_binary_suffixes() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("128000"), Some(128000));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("32m"), Some(32 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("0x10k"), Some(16 << 10));
        for bad in [
            "",
            "k",
            "G",
            "1T",
            "-1",
            "+1",
            "1.5G",
            "1kk",
            "lots",
            "99999999999999G",
        ] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    fn cursor_section(text: &str) -> ConfFile {
        parse(text, "b.conf").unwrap()
    }

    #[test]
    fn cursor_walks_keys_and_values() {
        let cf = cursor_section("buffers {\n buffers-per-numa 16k\n page-size\n  4k\n}");
        let mut c = SectionCursor::new(&cf.sections[0], "b.conf");
        let k = c.next_key().unwrap();
        assert_eq!(k.text, "buffers-per-numa");
        assert_eq!(c.value_u64(k).unwrap(), 16384);
        let k = c.next_key().unwrap();
        assert_eq!(c.peek().unwrap().text, "4k");
        let v = c.value(k).unwrap();
        assert_eq!((v.text.as_str(), v.line), ("4k", 4));
        assert!(c.next_key().is_none());
        assert!(c.peek().is_none());
    }

    #[test]
    fn cursor_missing_value_at_key_line() {
        let cf = cursor_section("unix {\n nodaemon\n cli-listen\n}");
        let mut c = SectionCursor::new(&cf.sections[0], "b.conf");
        c.next_key();
        let k = c.next_key().unwrap();
        assert_eq!(
            c.value(k).unwrap_err().to_string(),
            "b.conf:3: `cli-listen' needs a value"
        );
        assert_eq!(
            c.value_u64(k).unwrap_err().to_string(),
            "b.conf:3: `cli-listen' needs a value"
        );
    }

    #[test]
    fn cursor_brace_is_not_a_value() {
        let cf = cursor_section("dpdk { dev { name x } }");
        let mut c = SectionCursor::new(&cf.sections[0], "b.conf");
        let k = c.next_key().unwrap();
        assert_eq!(
            c.value(k).unwrap_err().to_string(),
            "b.conf:1: `dev' needs a value"
        );
        assert_eq!(
            c.peek().unwrap().text,
            "{",
            "the failed value consumed nothing"
        );
    }

    #[test]
    fn cursor_bad_number_at_value_line() {
        let cf = cursor_section("s {\n n\n lots\n}");
        let mut c = SectionCursor::new(&cf.sections[0], "c.conf");
        let k = c.next_key().unwrap();
        assert_eq!(
            c.value_u64(k).unwrap_err().to_string(),
            "c.conf:3: bad value `lots' for `n': expected a number"
        );
    }

    #[test]
    fn cursor_block_returns_inner_tokens() {
        let cf =
            cursor_section("dpdk {\n dev 0000:02:00.1 { name eth0 x { y } }\n no-multi-seg\n}");
        let mut c = SectionCursor::new(&cf.sections[0], "b.conf");
        let k = c.next_key().unwrap();
        let v = c.value(k).unwrap();
        assert_eq!(v.text, "0000:02:00.1");
        let b: Vec<&str> = c
            .block(k)
            .unwrap()
            .iter()
            .map(|t| t.text.as_str())
            .collect();
        assert_eq!(b, vec!["name", "eth0", "x", "{", "y", "}"]);
        let k = c.next_key().unwrap();
        assert_eq!(k.text, "no-multi-seg");
        assert_eq!(
            c.block(k).unwrap_err().to_string(),
            "b.conf:3: `no-multi-seg' needs a { ... } block"
        );
    }

    #[test]
    fn cursor_unknown_and_custom_errors() {
        let cf = cursor_section("buffers {\n\n frobnicate 1\n}");
        let mut c = SectionCursor::new(&cf.sections[0], "b.conf");
        let k = c.next_key().unwrap();
        assert_eq!(
            c.unknown(k).to_string(),
            "b.conf:3: unknown key `frobnicate' in section `buffers'"
        );
        assert_eq!(
            c.error(k, "frobnicate is not supported").to_string(),
            "b.conf:3: frobnicate is not supported"
        );
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..500)) {
            let _ = parse_bytes(&b, "r.conf");
            if let Ok(cf) = parse(&String::from_utf8_lossy(&b), "r.conf") {
                for s in &cf.sections {
                    walk_all(s)?;
                }
            }
        }

        #[test]
        fn brace_soup_never_panics_and_tokens_balance(s in "[a-z0-9 {}#\\n]{0,400}") {
            match parse(&s, "r.conf") {
                Ok(cf) => for sec in &cf.sections {
                    let open = sec.tokens().iter().filter(|t| t.text == "{").count();
                    let close = sec.tokens().iter().filter(|t| t.text == "}").count();
                    proptest::prop_assert_eq!(open, close);
                    walk_all(sec)?;
                },
                Err(e) => {
                    proptest::prop_assert!(e.line >= 1 && e.line <= s.split('\n').count());
                    proptest::prop_assert!(!e.msg.contains('\n'));
                }
            }
        }
    }

    fn walk_all(s: &Section) -> Result<(), proptest::test_runner::TestCaseError> {
        let mut c = SectionCursor::new(s, "r.conf");
        while let Some(k) = c.next_key() {
            if c.value_u64(k).is_err() {
                let _ = c.block(k);
            }
        }
        proptest::prop_assert!(c.peek().is_none());
        Ok(())
    }
}
