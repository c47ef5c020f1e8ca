//! Splitting CLI scripts (`exec <file>`, `unix { startup-config <file> }`) into commands.
//!
//! One command per line, except that a command whose `{` braces are not yet balanced
//! continues on the following lines, as in
//!
//! ```text
//! packet-generator new {
//!   name s0
//!   data { IP4: 1.2.3.4 -> 5.6.7.8 }
//! }
//! ```
//!
//! Braces are counted as raw characters (quotes do not hide them), the same way
//! [`crate::Args`] groups them.

/// A script error: `line N: msg`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {msg}")]
pub struct ScriptError {
    /// 1-based line.
    pub line: usize,
    /// One-line message.
    pub msg: String,
}

fn is_skipped(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// Splits a script into `(line where the command starts, command text)` pairs, 1-based.
///
/// Blank lines and lines whose first non-space character is `#` are skipped, also inside a
/// multi-line command. A trailing `\r` is stripped from every line. A command whose `{` are
/// unbalanced continues on the following lines (joined with `\n`) until balanced. Errors:
/// ``line N: unbalanced `{'`` (N = first line of the command left open at the end of the
/// text) and ``line N: unbalanced `}'`` (N = line of the stray `}`).
pub fn split_script(text: &str) -> Result<Vec<(usize, String)>, ScriptError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    let mut depth: usize = 0;
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if is_skipped(line) {
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
                '}' => {
                    depth = depth.checked_sub(1).ok_or_else(|| ScriptError {
                        line: i + 1,
                        msg: "unbalanced `}'".into(),
                    })?;
                }
                _ => {}
            }
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

    fn cmds(s: &str) -> Vec<(usize, String)> {
        split_script(s).unwrap()
    }

    #[test]
    fn one_command_per_line_with_line_numbers() {
        assert_eq!(
            cmds("show run\n\nshow errors\n"),
            vec![(1, "show run".to_string()), (3, "show errors".to_string())]
        );
    }

    #[test]
    fn skips_blank_and_comment_lines() {
        assert_eq!(
            cmds("# setup\n   # indented comment\n\t\n  show int  \n"),
            vec![(4, "show int".to_string())]
        );
        assert!(cmds("").is_empty());
        assert!(cmds("\n\n# only comments\n").is_empty());
    }

    #[test]
    fn hash_later_in_a_line_is_part_of_the_command() {
        assert_eq!(cmds("set tag pg0 a#b\n")[0].1, "set tag pg0 a#b");
    }

    #[test]
    fn strips_carriage_returns() {
        assert_eq!(
            cmds("show run\r\nshow err\r\n"),
            vec![(1, "show run".to_string()), (2, "show err".to_string())]
        );
    }

    #[test]
    fn brace_block_spans_lines_joined_with_newlines() {
        let s = "create packet-generator interface pg0\r\n\npacket-generator new {\r\n  name x\n  data {\n    UDP: 1.1.1.1 -> 2.2.2.2\n  }\n}\nshow run\n";
        let v = cmds(s);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0], (1, "create packet-generator interface pg0".into()));
        assert_eq!(
            v[1],
            (
                3,
                "packet-generator new {\n  name x\n  data {\n    UDP: 1.1.1.1 -> 2.2.2.2\n  }\n}"
                    .into()
            )
        );
        assert_eq!(v[2], (9, "show run".into()));
    }

    #[test]
    fn comments_and_blanks_inside_a_block_are_dropped() {
        let v = cmds("pg new {\n\n  # a comment with { brace\n  name x\n}\n");
        assert_eq!(v, vec![(1, "pg new {\n  name x\n}".to_string())]);
    }

    #[test]
    fn balanced_on_one_line_is_one_command() {
        assert_eq!(
            cmds("pg new { name x } \nshow run"),
            vec![(1, "pg new { name x }".into()), (2, "show run".into())]
        );
    }

    #[test]
    fn unclosed_brace_names_the_command_start_line() {
        let e = split_script("a\nb {\nc\n").unwrap_err();
        assert_eq!(e.to_string(), "line 2: unbalanced `{'");
        assert_eq!(
            e,
            ScriptError {
                line: 2,
                msg: "unbalanced `{'".into()
            }
        );
    }

    #[test]
    fn stray_close_brace_names_its_line() {
        assert_eq!(
            split_script("show run\n\na }\n").unwrap_err().to_string(),
            "line 3: unbalanced `}'"
        );
        assert_eq!(
            split_script("x {\n}\n}\n").unwrap_err().to_string(),
            "line 3: unbalanced `}'"
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_commands_are_clean(s in "(\\r\\n|[a-z {}#\\n\\t]){0,300}") {
            if let Ok(v) = split_script(&s) {
                let mut last = 0;
                for (line, cmd) in v {
                    proptest::prop_assert!(line > last, "line numbers increase");
                    last = line;
                    proptest::prop_assert!(!cmd.is_empty());
                    proptest::prop_assert!(!cmd.starts_with('#'));
                    proptest::prop_assert!(!cmd.contains('\r'));
                    proptest::prop_assert_eq!(cmd.matches('{').count(), cmd.matches('}').count());
                }
            }
        }
    }
}
