//! The syntax tree of the P4-16 subset. Every node carries the position it starts at.

use crate::error::Pos;

/// A type as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypeRef {
    /// `bit<N>`.
    Bit(u16),
    /// `bool`.
    Bool,
    /// `error`.
    Error,
    /// A header, struct or typedef name (or a built-in like `standard_metadata_t`).
    Named(String),
    /// `packet_in`, `packet_out` and extern types with type arguments (`register<bit<32>>`).
    Generic(String, Vec<TypeRef>),
}

/// A field of a header or struct.
#[derive(Clone, Debug)]
pub struct Field {
    pub name: String,
    pub ty: TypeRef,
    pub pos: Pos,
}

/// Parameter direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    In,
    Out,
    InOut,
}

/// A parameter of a parser, control or action.
#[derive(Clone, Debug)]
pub struct Param {
    pub dir: Option<Dir>,
    pub ty: TypeRef,
    pub name: String,
    pub pos: Pos,
}

/// A top-level declaration.
#[derive(Clone, Debug)]
pub enum Decl {
    Header {
        name: String,
        fields: Vec<Field>,
        pos: Pos,
    },
    Struct {
        name: String,
        fields: Vec<Field>,
        pos: Pos,
    },
    Typedef {
        name: String,
        ty: TypeRef,
        pos: Pos,
    },
    Const(ConstDecl),
    /// `error { A, B }`: adds error names.
    Errors(Vec<(String, Pos)>),
    Parser(ParserDecl),
    Control(ControlDecl),
    /// `V1Switch(P(), VC(), I(), E(), CC(), D()) main;`
    Package {
        ty: String,
        args: Vec<(String, Pos)>,
        name: String,
        pos: Pos,
    },
}

/// `const T name = value;`
#[derive(Clone, Debug)]
pub struct ConstDecl {
    pub ty: TypeRef,
    pub name: String,
    pub value: Expr,
    pub pos: Pos,
}

/// A parser block.
#[derive(Clone, Debug)]
pub struct ParserDecl {
    pub name: String,
    pub params: Vec<Param>,
    pub states: Vec<StateDecl>,
    pub pos: Pos,
}

/// One parser state.
#[derive(Clone, Debug)]
pub struct StateDecl {
    pub name: String,
    pub body: Vec<Stmt>,
    pub trans: Transition,
    pub pos: Pos,
}

/// A state's transition.
#[derive(Clone, Debug)]
pub enum Transition {
    Goto(String, Pos),
    Select {
        keys: Vec<Expr>,
        cases: Vec<SelectCase>,
        pos: Pos,
    },
}

/// One case of a `select`.
#[derive(Clone, Debug)]
pub struct SelectCase {
    /// One key set per select key (a single `default`/`_` matches everything).
    pub keysets: Vec<KeySet>,
    pub target: String,
    pub pos: Pos,
}

/// A key set in a `select` case or a table's const entry.
#[derive(Clone, Debug)]
pub enum KeySet {
    /// `default` or `_`.
    Any(Pos),
    Value(Expr),
    /// `value &&& mask`.
    Mask(Expr, Expr),
    /// `lo .. hi`.
    Range(Expr, Expr),
}

/// A control block.
#[derive(Clone, Debug)]
pub struct ControlDecl {
    pub name: String,
    pub params: Vec<Param>,
    pub locals: Vec<Local>,
    pub apply: Vec<Stmt>,
    pub pos: Pos,
}

/// A declaration inside a control.
#[derive(Clone, Debug)]
pub enum Local {
    Action(ActionDecl),
    Table(TableDecl),
    /// An extern instance: `counter(1024, CounterType.packets) c;`, `register<bit<32>>(16) r;`
    Instance {
        ty: TypeRef,
        args: Vec<Expr>,
        name: String,
        pos: Pos,
    },
    Var(VarDecl),
    Const(ConstDecl),
}

/// A local variable: `bit<16> x = e;`
#[derive(Clone, Debug)]
pub struct VarDecl {
    pub ty: TypeRef,
    pub name: String,
    pub init: Option<Expr>,
    pub pos: Pos,
}

/// An action.
#[derive(Clone, Debug)]
pub struct ActionDecl {
    pub name: String,
    pub params: Vec<Param>,
    pub body: Vec<Stmt>,
    pub pos: Pos,
}

/// An action with arguments, as named in `default_action` or an entry.
#[derive(Clone, Debug)]
pub struct ActionCall {
    pub name: String,
    pub args: Vec<Expr>,
    pub pos: Pos,
}

/// One table key: expression and match kind.
#[derive(Clone, Debug)]
pub struct KeyDecl {
    pub expr: Expr,
    pub kind: String,
    pub pos: Pos,
}

/// A const entry of a table.
#[derive(Clone, Debug)]
pub struct EntryDecl {
    pub keysets: Vec<KeySet>,
    pub action: ActionCall,
    pub priority: Option<u64>,
    pub pos: Pos,
}

/// A table.
#[derive(Clone, Debug)]
pub struct TableDecl {
    pub name: String,
    pub keys: Vec<KeyDecl>,
    pub actions: Vec<(String, Pos)>,
    /// Default action and whether it is `const`.
    pub default: Option<(ActionCall, bool)>,
    pub entries: Option<Vec<EntryDecl>>,
    pub size: Option<u64>,
    /// `counters = <direct_counter name>`.
    pub counters: Option<(String, Pos)>,
    /// `meters = <direct_meter name>`.
    pub meters: Option<(String, Pos)>,
    pub pos: Pos,
}

/// A statement.
#[derive(Clone, Debug)]
pub enum Stmt {
    Assign(Expr, Expr, Pos),
    /// A method or function call used as a statement.
    Call(Expr, Pos),
    If(Expr, Vec<Stmt>, Option<Vec<Stmt>>, Pos),
    Switch(Expr, Vec<SwitchCase>, Pos),
    Block(Vec<Stmt>, Pos),
    Var(VarDecl),
    /// `const T name = value;` in a block: a constant of that block.
    Const(ConstDecl),
    Exit(Pos),
    Return(Pos),
}

/// A `switch` case: `label: { ... }` or `label:` (falls through to the next body).
#[derive(Clone, Debug)]
pub struct SwitchCase {
    /// None for `default`.
    pub label: Option<String>,
    pub body: Option<Vec<Stmt>>,
    pub pos: Pos,
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Not,
    BitNot,
    Neg,
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Mul,
    Div,
    Mod,
    Add,
    Sub,
    AddSat,
    SubSat,
    Shl,
    Shr,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    BitAnd,
    BitXor,
    BitOr,
    And,
    Or,
    Concat,
}

/// An expression.
#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub pos: Pos,
}

/// Expression forms.
#[derive(Clone, Debug)]
pub enum ExprKind {
    Int(u128, Option<u16>),
    Bool(bool),
    Name(String),
    Member(Box<Expr>, String),
    /// `e[hi:lo]`.
    Slice(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `e[i]` (header stacks, not supported; kept for the error position).
    Index(Box<Expr>, Box<Expr>),
    Call(Box<Expr>, Vec<Expr>),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Cast(TypeRef, Box<Expr>),
    Mux(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `{ a, b, c }` (field lists of checksum externs).
    List(Vec<Expr>),
}
