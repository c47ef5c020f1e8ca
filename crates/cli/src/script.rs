//! Splitting CLI scripts (`exec <file>`, `unix { startup-config <file> }`) into commands.
//!
//! One command per line, as VPP reads them, with:
//!
//! - **continuation lines**: a line ending in `\` continues on the next one (VPP's scripts
//!   write every `packet-generator new` stanza so);
//! - **comments**: a `#` at the start of a line or after white space starts a comment that
//!   runs to the end of the line (VPP cuts at any `#`; Sluice keeps a `#` inside a word, as
//!   in `a#b`);
//! - **brace blocks** (Sluice's addition): a command whose `{` braces are not yet balanced
//!   continues on the following lines without `\`, as in
//!
//! ```text
//! packet-generator new {
//!   name s0
//!   data { IP4: 1.2.3.4 -> 5.6.7.8 }
//! }
//! ```
//!
//! Braces are counted as raw characters (quotes do not hide them), the same way
//! [`crate::Args`] groups them. Macros (`define`, `$(name)`) are expanded later, line by
//! line, by [`crate::macros::Macros::expand`].

use std::borrow::Cow;

/// A script error: `line N: msg`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {msg}")]
pub struct ScriptError {
    /// 1-based line.
    pub line: usize,
    /// One-line message.
    pub msg: String,
}

/// `line` without its comment: from a `#` at the start or after white space to the end.
fn strip_comment(line: &str) -> &str {
    let b = line.as_bytes();
    let mut from = 0;
    // `#` is one byte never inside a multi-byte character; white space before it is ASCII
    // or ends in a byte >= 0x80 (checked as a character then).
    while let Some(p) = b[from..].iter().position(|&c| c == b'#') {
        let i = from + p;
        if i == 0
            || line[..i]
                .chars()
                .next_back()
                .is_some_and(char::is_whitespace)
        {
            return &line[..i];
        }
        from = i + 1;
    }
    line
}

/// Whether each byte of `x` is `c`: the high bit of each byte that is (exact up to the
/// lowest such byte; a byte above one may be flagged by the borrow).
#[inline(always)]
fn bytes_eq(x: u64, c: u8) -> u64 {
    const LO: u64 = 0x0101_0101_0101_0101;
    let y = x ^ (LO * u64::from(c));
    y.wrapping_sub(LO) & !y & (LO << 7)
}

/// The end of the line starting at `pos` (the next `\n` or the end of the text), and
/// whether the line has a byte that needs the slow path (`#`, a brace, `\\`): eight bytes
/// at a time.
fn line_end(b: &[u8], pos: usize) -> (usize, bool) {
    let specials =
        |x| bytes_eq(x, b'#') | bytes_eq(x, b'{') | bytes_eq(x, b'}') | bytes_eq(x, b'\\');
    let mut end = pos;
    let mut special = false;
    while let Some(w) = b.get(end..end + 8) {
        let x = u64::from_le_bytes(w.try_into().unwrap_or_default());
        let nl = bytes_eq(x, b'\n');
        if nl != 0 {
            // The lowest flagged byte is exact; a special below it is a real one.
            let k = nl.trailing_zeros() / 8;
            let below = (1u64 << (k * 8)) - 1;
            return (end + k as usize, special || specials(x) & below != 0);
        }
        special |= specials(x) != 0;
        end += 8;
    }
    while let Some(&c) = b.get(end) {
        if c == b'\n' {
            break;
        }
        special |= matches!(c, b'#' | b'{' | b'}' | b'\\');
        end += 1;
    }
    (end, special)
}

/// `line.trim()`, with ASCII white space trimmed without decoding characters.
fn trim(line: &str) -> &str {
    let t = line.trim_ascii();
    let b = t.as_bytes();
    if b.first().is_some_and(|&c| c >= 0x80) || b.last().is_some_and(|&c| c >= 0x80) {
        line.trim()
    } else {
        t
    }
}

/// Splits a line into (its text without comment, whether it ends in a `\` continuation).
fn continued(line: &str) -> (&str, bool) {
    let t = line.trim_end();
    match t.strip_suffix('\\') {
        // `\\` at the end is an escaped backslash, not a continuation.
        Some(body) if !body.ends_with('\\') => (strip_comment(body), true),
        _ => (strip_comment(line), false),
    }
}

/// Splits a script into `(line where the command starts, command text)` pairs, 1-based.
///
/// Blank lines and comments are skipped, also inside a multi-line command. A trailing `\r`
/// is stripped from every line. A line ending in `\` continues on the next line, and so
/// does a command whose `{` are unbalanced; the lines of one command are joined with `\n`.
/// A one-line command borrows its text (a route table of a million lines is not copied
/// line by line).
/// Errors: ``line N: unbalanced `{'`` (N = first line of the command left open at the end
/// of the text) and ``line N: unbalanced `}'`` (N = line of the stray `}`).
pub fn split_script(text: &str) -> Result<Vec<(usize, Cow<'_, str>)>, ScriptError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    let mut depth: usize = 0;
    // The previous line ended in `\`.
    let mut open = false;
    // The lines as `text.split('\n')` gives them, each scanned once for its end and for
    // the bytes that need the slow path (a million-line route table spends most of its
    // split here).
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut i = 0;
    while pos <= bytes.len() {
        let (end, special) = line_end(bytes, pos);
        // `\n` is one byte, never inside a multi-byte character.
        let raw = &text[pos..end];
        pos = end + 1;
        i += 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if (cur.is_empty() || (depth == 0 && !open)) && !special {
            // The usual line: no comment, brace or continuation, not inside a command.
            open = false;
            let t = trim(line);
            if !t.is_empty() {
                out.push((i, Cow::Borrowed(t)));
            }
            continue;
        }
        let i = i - 1;
        let (body, more) = continued(line);
        let pending = !cur.is_empty() && (depth > 0 || open);
        open = more;
        if body.trim().is_empty() {
            if pending && !more && depth == 0 {
                // A continuation ending on an empty line completes the command.
                out.push((start, Cow::Owned(cur.trim().to_string())));
                cur.clear();
            }
            continue;
        }
        // Braces are single bytes, never inside a multi-byte character.
        for &c in body.as_bytes() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.checked_sub(1).ok_or_else(|| ScriptError {
                        line: i + 1,
                        msg: "unbalanced `}'".into(),
                    })?;
                }
                _ => {}
            }
        }
        if !pending {
            start = i + 1;
            if depth == 0 && !more {
                // A whole command on one line.
                out.push((start, Cow::Borrowed(body.trim())));
                continue;
            }
            cur.clear();
        } else {
            cur.push('\n');
        }
        cur.push_str(body);
        if depth == 0 && !more {
            out.push((start, Cow::Owned(cur.trim().to_string())));
            cur.clear();
        }
    }
    if depth > 0 {
        return Err(ScriptError {
            line: start,
            msg: "unbalanced `{'".into(),
        });
    }
    if !cur.trim().is_empty() {
        // The text ended after a continuation.
        out.push((start, Cow::Owned(cur.trim().to_string())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds(s: &str) -> Vec<(usize, String)> {
        split_script(s)
            .unwrap()
            .into_iter()
            .map(|(l, c)| (l, c.into_owned()))
            .collect()
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

    #[test]
    fn backslash_continues_a_command_as_in_vpp_scripts() {
        let s = "packet-generator new {\t\t\\\n  name x\t\\\n  limit 1 \\\n  data {\t\\\n    ICMP: 1.2.3.4 -> 5.6.7.8 \\\n    ICMP echo_request \\\n  }\t\\\n}\n\ntrace add pg-input 100\n";
        let v = cmds(s);
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v[0].0, 1);
        assert!(v[0].1.starts_with("packet-generator new {"));
        assert!(v[0].1.contains("ICMP echo_request"));
        assert!(v[0].1.ends_with('}'));
        assert!(!v[0].1.contains('\\'));
        assert_eq!(v[1], (10, "trace add pg-input 100".into()));
    }

    #[test]
    fn continuation_of_plain_lines_and_at_end_of_text() {
        assert_eq!(
            cmds("ip route add \\\n  10.0.0.0/8 via 1.1.1.1\nshow ip fib\n"),
            vec![
                (1, "ip route add \n  10.0.0.0/8 via 1.1.1.1".into()),
                (3, "show ip fib".into())
            ]
        );
        // A continuation into an empty line or the end of the text ends the command.
        assert_eq!(
            cmds("show \\\n\nshow run \\"),
            vec![(1, "show".into()), (3, "show run".into())]
        );
        // `\\` at the end is an escaped backslash.
        assert_eq!(
            cmds("echo a\\\\\nshow run\n"),
            vec![(1, "echo a\\\\".into()), (2, "show run".into())]
        );
    }

    #[test]
    fn comments_after_white_space_are_cut() {
        assert_eq!(
            cmds("show int # all of them\nset int state pg0 up\t#now\n"),
            vec![(1, "show int".into()), (2, "set int state pg0 up".into())]
        );
        // A comment inside a continued command, and a `{` in a comment, do not count.
        assert_eq!(
            cmds("pg new { \\\n  name x # a { brace \\\n}\n"),
            vec![(1, "pg new { \n  name x \n}".into())]
        );
    }

    proptest::proptest! {
        #[test]
        fn line_end_is_a_byte_scan(s in "[a-z {}#\\\\\n\r]{0,40}", pos in 0usize..40) {
            let b = s.as_bytes();
            let pos = pos.min(b.len());
            let end = b[pos..].iter().position(|&c| c == b'\n').map_or(b.len(), |k| pos + k);
            let special = b[pos..end].iter().any(|c| b"#{}\\".contains(c));
            proptest::prop_assert_eq!(line_end(b, pos), (end, special));
        }

        #[test]
        fn never_panics_and_commands_are_clean(s in "(\\r\\n|\\\\\\n|[a-z {}#\\\\\\n\\t]){0,300}") {
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
