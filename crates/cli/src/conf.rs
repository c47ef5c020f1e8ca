//! startup.conf parser: VPP's brace syntax (`section { key value ... }`, `#` comments), with
//! line numbers kept for every token so validation errors can say `file:line`.

use crate::error::clip;

/// A parse or validation error: `file:line: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {msg}")]
pub struct ConfError {
    /// File name.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// Message naming the token.
    pub msg: String,
}

/// A token with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// Text (`{` and `}` are tokens of their own).
    pub text: String,
    /// 1-based line.
    pub line: usize,
}

/// One line of a section body: a key, its values, and a nested block if the line opened one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// First token of the line.
    pub key: String,
    /// Other tokens of the line.
    pub values: Vec<String>,
    /// Line.
    pub line: usize,
    /// Nested block opened on this line.
    pub block: Option<Vec<Item>>,
}

/// A top-level section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Name (`unix`, `cpu`, ...).
    pub name: String,
    /// Line of the name.
    pub line: usize,
    /// Line-based items.
    pub items: Vec<Item>,
    tokens: Vec<Token>,
}

impl Section {
    /// Flat tokens of the body, nested braces included as `{` / `}` tokens.
    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }
}

/// A parsed file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfFile {
    /// Sections in file order.
    pub sections: Vec<Section>,
}

fn lex(text: &str, file: &str) -> Result<Vec<Token>, ConfError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        if line.contains('\0') {
            return Err(ConfError {
                file: file.into(),
                line: ln,
                msg: "binary data (NUL byte)".into(),
            });
        }
        let line = match line.find('#') {
            Some(p) => &line[..p],
            None => line,
        };
        let mut word = String::new();
        let flush = |w: &mut String, out: &mut Vec<Token>| {
            if !w.is_empty() {
                out.push(Token {
                    text: std::mem::take(w),
                    line: ln,
                });
            }
        };
        for c in line.chars() {
            match c {
                '{' | '}' => {
                    flush(&mut word, &mut out);
                    out.push(Token {
                        text: c.to_string(),
                        line: ln,
                    });
                }
                c if c.is_whitespace() => flush(&mut word, &mut out),
                c if c.is_control() => {
                    return Err(ConfError {
                        file: file.into(),
                        line: ln,
                        msg: format!("control character 0x{:02x} in configuration", c as u32),
                    })
                }
                c => word.push(c),
            }
        }
        flush(&mut word, &mut out);
    }
    Ok(out)
}

fn items(tokens: &[Token]) -> Vec<Item> {
    // Group by line; a `{` opens a nested block attached to the current item.
    let mut out: Vec<Item> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        if t.text == "{" {
            // Find the matching brace.
            let mut depth = 1;
            let mut j = i + 1;
            while j < tokens.len() && depth > 0 {
                match tokens[j].text.as_str() {
                    "{" => depth += 1,
                    "}" => depth -= 1,
                    _ => {}
                }
                j += 1;
            }
            let inner = &tokens[i + 1..j.saturating_sub(1).max(i + 1)];
            if let Some(last) = out.last_mut() {
                last.block = Some(items(inner));
            }
            i = j;
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
    out
}

/// Parses a startup.conf text.
pub fn parse(text: &str, file: &str) -> Result<ConfFile, ConfError> {
    let toks = lex(text, file)?;
    let err = |line: usize, msg: String| ConfError {
        file: file.to_string(),
        line,
        msg,
    };
    let mut cf = ConfFile::default();
    let mut i = 0;
    while i < toks.len() {
        let name = &toks[i];
        if name.text == "{" || name.text == "}" {
            return Err(err(name.line, format!("unexpected `{}'", name.text)));
        }
        match toks.get(i + 1) {
            Some(t) if t.text == "{" => {}
            _ => {
                return Err(err(
                    name.line,
                    format!("expected `{{' after section name `{}'", clip(&name.text)),
                ))
            }
        }
        let open_line = toks[i + 1].line;
        let mut depth = 1;
        let mut j = i + 2;
        while j < toks.len() && depth > 0 {
            match toks[j].text.as_str() {
                "{" => depth += 1,
                "}" => depth -= 1,
                _ => {}
            }
            j += 1;
        }
        if depth > 0 {
            return Err(err(
                open_line,
                format!("unbalanced `{{' in section `{}'", clip(&name.text)),
            ));
        }
        let body = toks[i + 2..j - 1].to_vec();
        cf.sections.push(Section {
            name: name.text.clone(),
            line: name.line,
            items: items(&body),
            tokens: body,
        });
        i = j;
    }
    Ok(cf)
}

/// Parses a configuration given on the command line (VPP: `vpp unix { ... } cpu { ... }`).
pub fn parse_argv(args: &[String]) -> Result<ConfFile, ConfError> {
    parse(&args.join(" "), "<command line>")
}

/// A cursor over a section's tokens for typed validation.
pub struct SectionCursor<'a> {
    section: &'a Section,
    file: String,
    pos: usize,
}

impl<'a> SectionCursor<'a> {
    /// A cursor at the start of `section`.
    pub fn new(section: &'a Section, file: &str) -> Self {
        SectionCursor {
            section,
            file: file.to_string(),
            pos: 0,
        }
    }

    /// The next token (in key position).
    pub fn next_key(&mut self) -> Option<&'a Token> {
        let t = self.section.tokens.get(self.pos)?;
        self.pos += 1;
        Some(t)
    }

    /// The value of `key`.
    pub fn value(&mut self, key: &Token) -> Result<&'a Token, ConfError> {
        match self.section.tokens.get(self.pos) {
            Some(t) if t.text != "{" && t.text != "}" => {
                self.pos += 1;
                Ok(t)
            }
            _ => Err(self.error(key, &format!("`{}' needs a value", clip(&key.text)))),
        }
    }

    /// A numeric value of `key`; sizes may end in k/K, m/M, g/G (powers of 1024).
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

    /// The tokens of a `{ ... }` block following `key`.
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
        let mut depth = 1;
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

    /// An error at a token.
    pub fn error(&self, tok: &Token, msg: &str) -> ConfError {
        ConfError {
            file: self.file.clone(),
            line: tok.line,
            msg: msg.to_string(),
        }
    }

    /// "unknown key `tok' in section `name'".
    pub fn unknown(&self, tok: &Token) -> ConfError {
        self.error(
            tok,
            &format!(
                "unknown key `{}' in section `{}'",
                clip(&tok.text),
                self.section.name
            ),
        )
    }
}

fn parse_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1u64 << 10),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        'g' | 'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let v: u64 = if let Some(h) = num.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()?
    } else {
        num.parse().ok()?
    };
    v.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_items_and_tokens() {
        let cf = parse(
            "unix {\n  nodaemon cli-listen /run/x.sock # comment\n  log /tmp/l\n}\n\ndpdk\n{\n  dev 0000:02:00.1 { name eth0 }\n}\n",
            "s.conf",
        )
        .unwrap();
        assert_eq!(cf.sections.len(), 2);
        let u = &cf.sections[0];
        assert_eq!(u.name, "unix");
        assert_eq!(u.items[0].key, "nodaemon");
        assert_eq!(u.items[0].values, vec!["cli-listen", "/run/x.sock"]);
        assert_eq!(u.items[1].line, 3);
        assert_eq!(u.tokens().len(), 5);
        let d = &cf.sections[1];
        assert_eq!(d.line, 6);
        assert_eq!(d.items[0].key, "dev");
        let b = d.items[0].block.as_ref().unwrap();
        assert_eq!(b[0].key, "name");
        assert_eq!(b[0].values, vec!["eth0"]);
    }

    #[test]
    fn syntax_errors_have_file_and_line() {
        assert_eq!(
            parse("unix {\n nodaemon\n", "a.conf")
                .unwrap_err()
                .to_string(),
            "a.conf:1: unbalanced `{' in section `unix'"
        );
        assert_eq!(
            parse("\nunix nodaemon\n", "a.conf")
                .unwrap_err()
                .to_string(),
            "a.conf:2: expected `{' after section name `unix'"
        );
        assert_eq!(
            parse("}\n", "a.conf").unwrap_err().to_string(),
            "a.conf:1: unexpected `}'"
        );
        assert_eq!(
            parse("unix { a }\nx\0y", "a.conf").unwrap_err().to_string(),
            "a.conf:2: binary data (NUL byte)"
        );
        assert!(parse("", "a.conf").unwrap().sections.is_empty());
    }

    #[test]
    fn cursor_values_and_errors() {
        let cf = parse(
            "buffers {\n buffers-per-numa 16k\n page-size\n}\nx { y }",
            "b.conf",
        )
        .unwrap();
        let s = &cf.sections[0];
        let mut c = SectionCursor::new(s, "b.conf");
        let k = c.next_key().unwrap();
        assert_eq!(c.value_u64(k).unwrap(), 16384);
        let k = c.next_key().unwrap();
        assert_eq!(
            c.value(k).unwrap_err().to_string(),
            "b.conf:3: `page-size' needs a value"
        );
        assert_eq!(
            c.unknown(k).to_string(),
            "b.conf:3: unknown key `page-size' in section `buffers'"
        );
        let cf = parse("s { n lots }", "c.conf").unwrap();
        let mut c = SectionCursor::new(&cf.sections[0], "c.conf");
        let k = c.next_key().unwrap();
        assert_eq!(
            c.value_u64(k).unwrap_err().to_string(),
            "c.conf:1: bad value `lots' for `n': expected a number"
        );
    }

    #[test]
    fn argv_form() {
        let cf = parse_argv(&["unix".into(), "{".into(), "nodaemon".into(), "}".into()]).unwrap();
        assert_eq!(cf.sections[0].name, "unix");
    }

    proptest::proptest! {
        #[test]
        fn random_text_never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..500)) {
            if let Ok(cf) = parse(&String::from_utf8_lossy(&b), "r.conf") {
                for s in &cf.sections {
                    let mut c = SectionCursor::new(s, "r.conf");
                    while let Some(k) = c.next_key() {
                        let _ = c.value_u64(k);
                    }
                }
            }
        }
    }
}
