//! Splitting CLI scripts (`exec <file>`, `unix { exec ... }`) into commands.

/// A script error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {msg}")]
pub struct ScriptError {
    /// 1-based line.
    pub line: usize,
    /// Message.
    pub msg: String,
}

/// Splits a script into `(first line, command)` pairs. Blank lines and `#` comment lines are
/// skipped; a command with unbalanced `{` continues on the next lines until balanced.
pub fn split_script(text: &str) -> Result<Vec<(usize, String)>, ScriptError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    let mut depth: i64 = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let t = line.trim();
        if depth == 0 && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if depth == 0 {
            start = i + 1;
            cur.clear();
        } else {
            cur.push('\n');
        }
        cur.push_str(line);
        for c in line.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
        }
        if depth < 0 {
            return Err(ScriptError {
                line: i + 1,
                msg: "unbalanced `}'".into(),
            });
        }
        if depth == 0 {
            out.push((start, cur.trim().to_string()));
        }
    }
    if depth > 0 {
        return Err(ScriptError {
            line: start,
            msg: "unbalanced `{'".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_brace_blocks_and_skips_comments() {
        let s = "# setup\ncreate packet-generator interface pg0\r\n\npacket-generator new {\n  name x\n  data { UDP: 1.1.1.1 -> 2.2.2.2 }\n}\nshow run\n";
        let v = split_script(s).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(
            v[0],
            (2, "create packet-generator interface pg0".to_string())
        );
        assert_eq!(v[1].0, 4);
        assert!(v[1].1.starts_with("packet-generator new {\n  name x"));
        assert_eq!(v[2], (8, "show run".to_string()));
    }

    #[test]
    fn unbalanced_is_an_error_with_line() {
        assert_eq!(
            split_script("a\nb {\nc\n").unwrap_err().to_string(),
            "line 2: unbalanced `{'"
        );
        assert_eq!(split_script("a }\n").unwrap_err().line, 1);
    }
}
