//! CLI errors: one line, quoting the offending token VPP style (`tok').

/// A CLI error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
pub struct CliError {
    /// The one-line message.
    pub msg: String,
}

impl CliError {
    /// An error with a message.
    pub fn new(msg: impl Into<String>) -> Self {
        let mut msg: String = msg.into();
        if let Some(i) = msg.find('\n') {
            msg.truncate(i);
        }
        CliError { msg }
    }

    /// "unknown input `tok'".
    pub fn unknown_input(tok: &str) -> Self {
        CliError::new(format!("unknown input `{}'", clip(tok)))
    }
}

/// Shortens a token for quoting in a message (garbage can be huge).
pub fn clip(tok: &str) -> String {
    const MAX: usize = 64;
    let printable: String = tok
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if printable.chars().count() > MAX {
        let s: String = printable.chars().take(MAX).collect();
        format!("{s}...")
    } else {
        printable
    }
}
