//! Compile errors: every one names the construct and where it is (file:line:column).

/// A position in the source (1-based line and column).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

/// What kind of error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The text is not P4-16.
    Syntax,
    /// P4-16 outside the subset Sluice compiles.
    Unsupported,
    /// Types do not agree (widths, bool vs bit, unknown names).
    Type,
    /// The program is well-typed but cannot be loaded (limits, missing package).
    Program,
}

/// A compile error with its position.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {msg} at {}{}:{}", kind_str(*.kind), file_prefix(.file), .pos.line, .pos.col)]
pub struct CompileError {
    pub kind: ErrorKind,
    pub msg: String,
    pub pos: Pos,
    /// Source file name, once known.
    pub file: Option<String>,
}

fn kind_str(k: ErrorKind) -> &'static str {
    match k {
        ErrorKind::Syntax => "syntax error",
        ErrorKind::Unsupported => "not supported",
        ErrorKind::Type => "type error",
        ErrorKind::Program => "error",
    }
}

fn file_prefix(f: &Option<String>) -> String {
    f.as_ref().map(|f| format!("{f}:")).unwrap_or_default()
}

impl CompileError {
    fn new(kind: ErrorKind, pos: Pos, msg: &str) -> Self {
        CompileError {
            kind,
            msg: msg.to_string(),
            pos,
            file: None,
        }
    }
    /// A syntax error.
    pub fn syntax(pos: Pos, msg: &str) -> Self {
        Self::new(ErrorKind::Syntax, pos, msg)
    }
    /// A construct outside the subset.
    pub fn unsupported(pos: Pos, what: &str) -> Self {
        Self::new(ErrorKind::Unsupported, pos, what)
    }
    /// A type error.
    pub fn ty(pos: Pos, msg: &str) -> Self {
        Self::new(ErrorKind::Type, pos, msg)
    }
    /// A program-level error.
    pub fn program(pos: Pos, msg: &str) -> Self {
        Self::new(ErrorKind::Program, pos, msg)
    }
    /// Names the source file.
    pub fn in_file(mut self, file: &str) -> Self {
        self.file = Some(file.to_string());
        self
    }
}

/// A failed control-plane operation (`p4 ...` commands and the API messages alike): the
/// CLI prints it, the API maps it to a result code (`api::retval`).
#[derive(Debug, thiserror::Error)]
pub enum P4Error {
    /// No program of that name is loaded.
    #[error("no P4 program `{0}'")]
    NoProgram(String),
    /// A program of that name is loaded already.
    #[error("P4 program `{0}' is already loaded")]
    AlreadyLoaded(String),
    /// The program has no table, counter, register or meter of that name.
    #[error("no {0} `{1}'")]
    NoObject(&'static str, String),
    /// The action is not one of the table's.
    #[error("`{0}' is not an action of table `{1}'")]
    NoAction(String, String),
    /// A table refused the change (the table's name, why).
    #[error("{0}: {1}")]
    Table(String, crate::table::TableError),
    /// An index beyond the counter, register or meter's size.
    #[error("index `{0}' out of range (size {1})")]
    Index(u32, u32),
    /// A bad value (names the token).
    #[error("{0}")]
    Invalid(String),
    /// The program does not compile.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The program's file cannot be read.
    #[error("cannot read `{0}': {1}")]
    Read(String, String),
    /// An interface or graph operation failed.
    #[error(transparent)]
    Vnet(#[from] sluice_vnet::error::VnetError),
    /// A short name more than one control declares.
    #[error("{what} `{name}' is ambiguous: {}", .candidates.join(", "))]
    Ambiguous {
        what: &'static str,
        name: String,
        /// Their `control.name`s.
        candidates: Vec<String>,
    },
    /// `p4 load ... on <if>`: the interface's received frames already go elsewhere.
    #[error("interface `{interface}' is taken by {}", taker(.program))]
    InterfaceTaken {
        interface: String,
        /// The P4 program redirecting it, `None` for another feature.
        program: Option<String>,
    },
    /// A thread's copy of a table refused a change the master copy accepted (the table's
    /// name, the thread, why): the copies differ, which the control plane never lets happen.
    /// The change stays made on the master and on every thread that accepted it (it is not
    /// undone), so the text says so.
    #[error(
        "{0}: the change was made, but thread {1}'s copy refused it ({2}): the copies now differ"
    )]
    Replica(String, usize, crate::table::TableError),
    /// Threads (by index, 0 the main thread) that did not run an operation on their copies
    /// within `Vlib::foreach_thread`'s wait (the second field, `Vlib::thread_wait`,
    /// `Vlib::THREAD_WAIT` unless set): a change may still reach them later (it stays
    /// queued) or never; a read lacks their counts.
    #[error("thread(s) {} did not answer within {} s: their copies may not have the change, or their counts are missing", list(.0), .1.as_secs_f64())]
    NoAnswer(Vec<usize>, std::time::Duration),
    /// `p4 load` / `p4 unload`: threads (by index) that did not install or remove the
    /// program within `Vlib::foreach_thread`'s wait (`wait`). A load is undone (every
    /// thread drops it, those threads once they take the change); an unload stays done,
    /// and those threads run the program until they take it.
    #[error("{}", not_taken(.program, *.unload, .threads, *.wait))]
    NotTaken {
        program: String,
        unload: bool,
        threads: Vec<usize>,
        wait: std::time::Duration,
    },
}

fn not_taken(program: &str, unload: bool, threads: &[usize], wait: std::time::Duration) -> String {
    let (t, w) = (list(threads), wait.as_secs_f64());
    if unload {
        format!("P4 program `{program}' unloaded, but thread(s) {t} did not take the change within {w} s: they run it until they do")
    } else {
        format!("P4 program `{program}' not loaded: thread(s) {t} did not take it within {w} s")
    }
}

fn list(v: &[usize]) -> String {
    v.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn taker(p: &Option<String>) -> String {
    match p {
        Some(p) => format!("P4 program `{p}'"),
        None => "another feature's input redirect".into(),
    }
}

impl P4Error {
    /// Clips a user-supplied name for a one-line message.
    pub fn no(what: &'static str, name: &str) -> Self {
        P4Error::NoObject(what, sluice_cli::error::clip(name))
    }

    /// Why the `what` called `name` was not found ([`crate::ir::find_named`]).
    pub fn named(what: &'static str, name: &str, e: crate::ir::NameError) -> Self {
        match e {
            crate::ir::NameError::Unknown => P4Error::no(what, name),
            crate::ir::NameError::Ambiguous(candidates) => P4Error::Ambiguous {
                what,
                name: sluice_cli::error::clip(name),
                candidates,
            },
        }
    }
}

impl From<P4Error> for sluice_cli::CliError {
    fn from(e: P4Error) -> Self {
        sluice_cli::CliError::new(e.to_string())
    }
}
