//! The control-plane error of vnet's actions (the functions the CLI and the API both call):
//! a category that maps to a stable API code ([`sluice_api::Retval`]) and a one-line reason
//! that quotes the offending value, which the CLI prints as it is.

use sluice_api::{ApiError, Retval};
use sluice_cli::CliError;

/// Why an action failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VnetError {
    /// No live interface with this index.
    #[error("no interface with sw_if_index {0}")]
    NoSuchInterface(u32),
    /// A value is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// What should be changed or deleted does not exist.
    #[error("{0}")]
    NotFound(String),
    /// What should be created exists.
    #[error("{0}")]
    Exists(String),
    /// No such table.
    #[error("{0}")]
    NoTable(String),
    /// In use.
    #[error("{0}")]
    InUse(String),
    /// A table is full.
    #[error("{0}")]
    Full(String),
    /// Does not apply to this object.
    #[error("{0}")]
    NotSupported(String),
    /// A system call or the runtime failed.
    #[error("{0}")]
    System(String),
}

impl From<sluice_graph::cli::TraceError> for VnetError {
    fn from(e: sluice_graph::cli::TraceError) -> Self {
        use sluice_graph::cli::TraceError as T;
        match e {
            T::NoSuchNode(_) => VnetError::NotFound(e.to_string()),
            T::NotInput(_) => VnetError::NotSupported(e.to_string()),
            T::Invalid(m) | T::Capture(m) => VnetError::Invalid(m),
        }
    }
}

impl VnetError {
    /// The stable API code.
    pub fn retval(&self) -> Retval {
        match self {
            VnetError::NoSuchInterface(_) => Retval::NoSuchInterface,
            VnetError::Invalid(_) => Retval::InvalidValue,
            VnetError::NotFound(_) => Retval::NoSuchEntry,
            VnetError::Exists(_) => Retval::AlreadyExists,
            VnetError::NoTable(_) => Retval::NoSuchTable,
            VnetError::InUse(_) => Retval::InUse,
            VnetError::Full(_) => Retval::NoResources,
            VnetError::NotSupported(_) => Retval::NotSupported,
            VnetError::System(_) => Retval::SystemError,
        }
    }

    /// The category of an error a plugin still reports as text (memif's socket table,
    /// linux-cp's tap pairs): "already exists"/"is already" is [`VnetError::Exists`], "in use" is
    /// [`VnetError::InUse`], "no ..."/"unknown ..."/"does not exist" is
    /// [`VnetError::NotFound`], anything else [`VnetError::Invalid`] (a value the system
    /// refused: a Linux interface, a queue count, a socket path).
    pub fn from_text(msg: String) -> Self {
        if msg.contains("already exists") || msg.contains("is already") {
            VnetError::Exists(msg)
        } else if msg.contains("in use") {
            VnetError::InUse(msg)
        } else if msg.starts_with("no ")
            || msg.starts_with("unknown ")
            || msg.contains("no such")
            || msg.contains("does not exist")
        {
            VnetError::NotFound(msg)
        } else {
            VnetError::Invalid(msg)
        }
    }

    /// The same error with its reason prefixed by `what` (`what: reason`), naming the
    /// object it concerns where the caller knows more than the action did.
    pub fn context(self, what: &dyn std::fmt::Display) -> Self {
        let f = |m: String| format!("{what}: {m}");
        match self {
            e @ VnetError::NoSuchInterface(_) => e,
            VnetError::Invalid(m) => VnetError::Invalid(f(m)),
            VnetError::NotFound(m) => VnetError::NotFound(f(m)),
            VnetError::Exists(m) => VnetError::Exists(f(m)),
            VnetError::NoTable(m) => VnetError::NoTable(f(m)),
            VnetError::InUse(m) => VnetError::InUse(f(m)),
            VnetError::Full(m) => VnetError::Full(f(m)),
            VnetError::NotSupported(m) => VnetError::NotSupported(f(m)),
            VnetError::System(m) => VnetError::System(f(m)),
        }
    }

    /// A bad value (shorthand).
    pub fn invalid(msg: impl Into<String>) -> Self {
        VnetError::Invalid(msg.into())
    }
}

impl From<VnetError> for CliError {
    fn from(e: VnetError) -> Self {
        CliError::new(e.to_string())
    }
}

impl From<VnetError> for ApiError {
    fn from(e: VnetError) -> Self {
        ApiError::new(e.retval(), e.to_string())
    }
}

/// Result of an action.
pub type VnetResult<T = ()> = Result<T, VnetError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_texts_map_to_their_codes() {
        let r = |m: &str| VnetError::from_text(m.to_string()).retval();
        assert_eq!(
            r("interface `host-x' already exists"),
            Retval::AlreadyExists
        );
        assert_eq!(r("`/run/a' is already socket id 2"), Retval::AlreadyExists);
        assert_eq!(r("socket id 1 is in use by an interface"), Retval::InUse);
        assert_eq!(r("socket id 9 does not exist"), Retval::NoSuchEntry);
        assert_eq!(
            r("unknown Linux interface `x' (no such device)"),
            Retval::NoSuchEntry
        );
        assert_eq!(r("no host interface on `x'"), Retval::NoSuchEntry);
        assert_eq!(r("`x': Operation not permitted"), Retval::InvalidValue);
        assert_eq!(
            CliError::from(VnetError::NoTable("no table 3".into())).msg,
            "no table 3"
        );
        let e = VnetError::NotFound("no route `1.0.0.0/8'".into()).context(&"prefixes[2]");
        assert_eq!(e.retval(), Retval::NoSuchEntry);
        assert_eq!(e.to_string(), "prefixes[2]: no route `1.0.0.0/8'");
    }
}
