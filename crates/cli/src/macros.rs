//! CLI macros, as VPP's: `define <name> <value>` sets a variable, `$name` or `$(name)` in a
//! later command line is replaced by its value (itself expanded, at most 8 levels deep),
//! `undefine <name>` removes it, `show macro` lists them.
//!
//! Differences from VPP, each deliberate: an undefined variable is an error naming it (VPP
//! substitutes the word `UNSET`), the daemon's environment is not consulted (a remote CLI
//! user must not read it), and only `\$` is an escape (a literal `$`); other backslashes are
//! kept as typed. `$hostname` is not built in.

use crate::error::{clip, CliError};
use std::collections::BTreeMap;

/// Deepest nesting of variables in variables.
pub const MAX_DEPTH: usize = 8;
/// Most variables one table holds.
pub const MAX_VARS: usize = 1024;
/// Longest expanded line (bytes).
pub const MAX_EXPANDED: usize = 1 << 20;

/// A table of CLI variables.
#[derive(Clone, Debug, Default)]
pub struct Macros {
    vars: BTreeMap<String, String>,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

impl Macros {
    /// Sets `name` to `value` (`define`). Names are letters, digits and `_`.
    pub fn define(&mut self, name: &str, value: &str) -> Result<(), CliError> {
        if name.is_empty() || !name.chars().all(is_name_char) {
            return Err(CliError::new(format!(
                "bad variable name `{}' (letters, digits and _)",
                clip(name)
            )));
        }
        if !self.vars.contains_key(name) && self.vars.len() >= MAX_VARS {
            return Err(CliError::new(format!("at most {MAX_VARS} variables")));
        }
        self.vars.insert(name.to_string(), value.to_string());
        Ok(())
    }

    /// Removes `name` (`undefine`); false if it was not set.
    pub fn undefine(&mut self, name: &str) -> bool {
        self.vars.remove(name).is_some()
    }

    /// The value of `name`, unexpanded.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(|s| s.as_str())
    }

    /// The variables, sorted by name, as `(name, raw value)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// `line` with every `$name` / `$(name)` replaced by its (recursively expanded) value.
    ///
    /// Errors: ``undefined variable `$name'``, ``variable `$name' nested more than 8
    /// deep`` (a circular definition), ``unclosed `$('``, or an expansion over 1 MiB.
    pub fn expand(&self, line: &str) -> Result<String, CliError> {
        if !line.contains('$') {
            return Ok(line.to_string());
        }
        let mut out = String::with_capacity(line.len());
        self.expand_into(line, 0, &mut out)?;
        Ok(out)
    }

    fn expand_into(&self, s: &str, depth: usize, out: &mut String) -> Result<(), CliError> {
        let mut it = s.char_indices().peekable();
        while let Some((i, c)) = it.next() {
            match c {
                '\\' if s[i + 1..].starts_with('$') => {
                    out.push('$');
                    it.next();
                }
                '$' => {
                    let rest = &s[i + 1..];
                    let (name, used) = if let Some(r) = rest.strip_prefix('(') {
                        let end = r.find(')').ok_or_else(|| {
                            CliError::new("unclosed `$(' in a variable reference")
                        })?;
                        (&r[..end], end + 2)
                    } else {
                        let end = rest.find(|c| !is_name_char(c)).unwrap_or(rest.len());
                        (&rest[..end], end)
                    };
                    if name.is_empty() {
                        // A lone `$` is kept.
                        out.push('$');
                        continue;
                    }
                    for _ in 0..rest[..used].chars().count() {
                        it.next();
                    }
                    let v = self.vars.get(name).ok_or_else(|| {
                        CliError::new(format!(
                            "undefined variable `${}' (define it with `define {} <value>')",
                            clip(name),
                            clip(name)
                        ))
                    })?;
                    if depth + 1 >= MAX_DEPTH {
                        return Err(CliError::new(format!(
                            "variable `${}' nested more than {MAX_DEPTH} deep (circular definition?)",
                            clip(name)
                        )));
                    }
                    self.expand_into(v, depth + 1, out)?;
                }
                c => out.push(c),
            }
            if out.len() > MAX_EXPANDED {
                return Err(CliError::new("macro expansion longer than 1 MiB"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> Macros {
        let mut m = Macros::default();
        m.define("if", "pg0").unwrap();
        m.define("net", "10.0.0").unwrap();
        m.define("addr", "$(net).1/24").unwrap();
        m
    }

    #[test]
    fn both_forms_expand_recursively() {
        let m = m();
        assert_eq!(
            m.expand("set int ip addr $if $(addr)").unwrap(),
            "set int ip addr pg0 10.0.0.1/24"
        );
        assert_eq!(m.expand("x$(if)y").unwrap(), "xpg0y");
        assert_eq!(m.expand("no macro here").unwrap(), "no macro here");
        assert_eq!(m.expand("cost $ 5").unwrap(), "cost $ 5");
    }

    #[test]
    fn escaped_dollar_and_errors() {
        let mut m = m();
        assert_eq!(m.expand("echo \\$if").unwrap(), "echo $if");
        assert_eq!(
            m.expand("show $nope").unwrap_err().msg,
            "undefined variable `$nope' (define it with `define nope <value>')"
        );
        assert!(m.expand("a $(if").unwrap_err().msg.contains("unclosed"));
        m.define("a", "$b").unwrap();
        m.define("b", "$a").unwrap();
        assert!(m.expand("$a").unwrap_err().msg.contains("circular"));
        assert!(m.define("bad name", "x").is_err());
        assert!(m.define("", "x").is_err());
        assert!(m.undefine("a"));
        assert!(!m.undefine("a"));
    }

    #[test]
    fn exponential_definitions_are_bounded() {
        let mut m = Macros::default();
        m.define("a0", "xxxxxxxxxxxxxxxx").unwrap();
        for i in 1..8 {
            let p = format!("$a{} ", i - 1).repeat(16);
            m.define(&format!("a{i}"), &p).unwrap();
        }
        assert!(m.expand("$a7").is_err());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "(\\$|\\(|\\)|\\\\|if|net|addr|é| |x){0,60}") {
            let _ = m().expand(&s);
        }
    }
}
