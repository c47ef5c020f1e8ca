//! CLI errors: one line, quoting the offending token VPP style (`` `tok' ``).

/// A CLI error: a one-line reason, quoting the offending token as `` `tok' ``.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
pub struct CliError {
    /// The one-line message.
    pub msg: String,
}

impl CliError {
    /// An error with a message. Line breaks are folded into single spaces so the message
    /// always stays on one line.
    pub fn new(msg: impl Into<String>) -> Self {
        let msg: String = msg.into();
        let msg = if msg.contains(['\n', '\r']) {
            msg.split(['\n', '\r'])
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            msg
        };
        CliError { msg }
    }

    /// `` unknown input `tok' `` (the token is shortened and made printable by [`clip`]).
    pub fn unknown_input(tok: &str) -> Self {
        CliError::new(format!("unknown input `{}'", clip(tok)))
    }
}

/// Longest token quoted verbatim in a message; longer ones are cut and end in `...`.
pub const CLIP_MAX: usize = 64;

/// Makes a token fit for quoting in a one-line message: control characters become `?` and
/// anything past [`CLIP_MAX`] characters is replaced by `...` (garbage input can be huge).
pub fn clip(tok: &str) -> String {
    let mut out = String::new();
    for (n, c) in tok.chars().enumerate() {
        if n == CLIP_MAX {
            out.push_str("...");
            break;
        }
        out.push(if c.is_control() { '?' } else { c });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_input_quotes_vpp_style() {
        assert_eq!(
            CliError::unknown_input("frob").to_string(),
            "unknown input `frob'"
        );
    }

    #[test]
    fn messages_are_folded_onto_one_line() {
        assert_eq!(
            CliError::new("first\r\n  second\n\nthird").msg,
            "first second third"
        );
        assert_eq!(CliError::new("plain").msg, "plain");
    }

    #[test]
    fn clip_replaces_control_chars_and_shortens() {
        assert_eq!(clip("a\tb\u{1}c"), "a?b?c");
        let long = "x".repeat(CLIP_MAX + 10);
        let c = clip(&long);
        assert_eq!(c.len(), CLIP_MAX + 3);
        assert!(c.ends_with("..."));
        let exact = "y".repeat(CLIP_MAX);
        assert_eq!(clip(&exact), exact);
        assert_eq!(clip("héllo"), "héllo");
    }

    #[test]
    fn unknown_input_of_huge_control_token_is_one_short_line() {
        let tok = "\n".repeat(100_000);
        let e = CliError::unknown_input(&tok);
        assert!(!e.msg.contains('\n'));
        assert!(e.msg.len() < 100);
    }
}
