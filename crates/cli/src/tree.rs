//! The command tree: VPP-style command paths matched word by word, each word abbreviable to
//! any unique prefix (`sh run` = `show runtime`).

use crate::args::Args;
use crate::error::{clip, CliError};

/// A command handler: gets the context and the arguments after the command path.
pub type Handler<C> = fn(&mut C, &mut Args) -> Result<String, CliError>;

struct Node<C> {
    word: String,
    children: Vec<Node<C>>,
    cmd: Option<(Handler<C>, String)>,
}

impl<C> Node<C> {
    fn new(word: &str) -> Self {
        Node {
            word: word.to_string(),
            children: Vec::new(),
            cmd: None,
        }
    }
}

/// A tree of commands.
pub struct CommandTree<C> {
    root: Node<C>,
}

impl<C> Default for CommandTree<C> {
    fn default() -> Self {
        Self::new()
    }
}

enum Walk<'a, C> {
    /// Reached a node after consuming `n` path tokens.
    At(&'a Node<C>, usize, String),
    Err(CliError),
}

impl<C> CommandTree<C> {
    /// An empty tree.
    pub fn new() -> Self {
        CommandTree {
            root: Node::new(""),
        }
    }

    /// Registers a command. Registering one path twice is a programming error (panics at
    /// start-up, never at run time).
    pub fn add(&mut self, path: &str, short_help: &str, handler: Handler<C>) {
        let mut node = &mut self.root;
        for w in path.split_whitespace() {
            let i = match node.children.iter().position(|c| c.word == w) {
                Some(i) => i,
                None => {
                    node.children.push(Node::new(w));
                    node.children.len() - 1
                }
            };
            node = &mut node.children[i];
        }
        assert!(node.cmd.is_none(), "command `{path}' registered twice");
        node.cmd = Some((handler, short_help.to_string()));
    }

    fn walk(&self, args: &Args) -> Walk<'_, C> {
        let mut node = &self.root;
        let mut n = 0;
        let mut path = String::new();
        while let Some(w) = args.word_at(n) {
            if let Some(c) = node.children.iter().find(|c| c.word == w) {
                node = c;
            } else {
                let m: Vec<&Node<C>> = node
                    .children
                    .iter()
                    .filter(|c| c.word.starts_with(w))
                    .collect();
                match m.len() {
                    1 => node = m[0],
                    0 if node.cmd.is_some() => break,
                    0 => return Walk::Err(CliError::unknown_input(w)),
                    _ if node.cmd.is_some() => break,
                    _ => {
                        let names: Vec<&str> = m.iter().map(|c| c.word.as_str()).collect();
                        return Walk::Err(CliError::new(format!(
                            "ambiguous input `{}' (could be: {})",
                            clip(w),
                            names.join(", ")
                        )));
                    }
                }
            }
            if !path.is_empty() {
                path.push(' ');
            }
            path.push_str(&node.word);
            n += 1;
        }
        Walk::At(node, n, path)
    }

    fn listing(node: &Node<C>, path: &str, out: &mut Vec<(String, String)>) {
        if let Some((_, h)) = &node.cmd {
            out.push((path.to_string(), h.clone()));
        }
        for c in &node.children {
            let p = if path.is_empty() {
                c.word.clone()
            } else {
                format!("{path} {}", c.word)
            };
            Self::listing(c, &p, out);
        }
    }

    fn format_listing(v: &[(String, String)]) -> String {
        let mut v = v.to_vec();
        v.sort();
        let mut s = String::new();
        for (p, h) in v {
            s.push_str(&format!("  {p:<36} {h}\n"));
        }
        s
    }

    /// Lists the commands under a prefix (`help show`, `show ?`).
    pub fn help(&self, prefix: &str) -> Result<String, CliError> {
        let args = Args::new(prefix);
        match self.walk(&args) {
            Walk::Err(e) => Err(e),
            Walk::At(node, _, path) => {
                let mut v = Vec::new();
                Self::listing(node, &path, &mut v);
                Ok(Self::format_listing(&v))
            }
        }
    }

    /// All commands with their short help.
    pub fn commands(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        Self::listing(&self.root, "", &mut v);
        v.sort();
        v
    }

    /// Runs one command line. Blank lines and `#` comments do nothing; a trailing `?` lists
    /// the matching commands.
    pub fn execute(&self, ctx: &mut C, line: &str) -> Result<String, CliError> {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            return Ok(String::new());
        }
        if let Some(p) = t.strip_suffix('?') {
            return self.help(p);
        }
        let mut args = Args::new(t);
        match self.walk(&args) {
            Walk::Err(e) => Err(e),
            Walk::At(node, n, path) => match &node.cmd {
                Some((h, _)) => {
                    args.skip(n);
                    h(ctx, &mut args)
                }
                None => {
                    if n == 0 {
                        return Err(CliError::unknown_input(args.peek().unwrap_or("")));
                    }
                    let names: Vec<String> = node
                        .children
                        .iter()
                        .map(|c| format!("{path} {}", c.word))
                        .collect();
                    Err(CliError::new(format!(
                        "incomplete command `{path}'; try: {}",
                        names.join(", ")
                    )))
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Ctx {
        last: String,
    }

    fn rec(c: &mut Ctx, a: &mut Args) -> Result<String, CliError> {
        c.last = a.rest();
        Ok(format!("ran [{}]", c.last))
    }
    fn rt(_: &mut Ctx, a: &mut Args) -> Result<String, CliError> {
        a.finish()?;
        Ok("runtime".into())
    }

    fn tree() -> CommandTree<Ctx> {
        let mut t = CommandTree::new();
        t.add("show runtime", "show runtime", rt);
        t.add("show interface", "show interface [<if>]", rec);
        t.add("show interface address", "show interface address", rec);
        t.add("show errors", "show errors", rec);
        t.add(
            "set interface state",
            "set interface state <if> up|down",
            rec,
        );
        t.add("set interface ip address", "set interface ip address", rec);
        t.add("quit", "bye", rec);
        t
    }

    #[test]
    fn unique_prefixes_match() {
        let t = tree();
        let mut c = Ctx::default();
        assert_eq!(t.execute(&mut c, "sh run").unwrap(), "runtime");
        assert_eq!(t.execute(&mut c, "show err").unwrap(), "ran []");
        assert_eq!(
            t.execute(&mut c, "set int state pg0 up").unwrap(),
            "ran [pg0 up]"
        );
        assert_eq!(
            t.execute(&mut c, "set int ip addr pg0 1.1.1.1/24").unwrap(),
            "ran [pg0 1.1.1.1/24]"
        );
        assert_eq!(t.execute(&mut c, "show int pg0").unwrap(), "ran [pg0]");
        assert_eq!(t.execute(&mut c, "show int addr").unwrap(), "ran []");
    }

    #[test]
    fn errors_quote_the_word() {
        let t = tree();
        let mut c = Ctx::default();
        assert_eq!(
            t.execute(&mut c, "frob").unwrap_err().msg,
            "unknown input `frob'"
        );
        assert_eq!(
            t.execute(&mut c, "sh x").unwrap_err().msg,
            "unknown input `x'"
        );
        assert_eq!(
            t.execute(&mut c, "s run").unwrap_err().msg,
            "ambiguous input `s' (could be: show, set)"
        );
        assert!(t
            .execute(&mut c, "show")
            .unwrap_err()
            .msg
            .starts_with("incomplete command `show'; try: show runtime"));
        assert_eq!(
            t.execute(&mut c, "show runtime now").unwrap_err().msg,
            "unknown input `now'"
        );
    }

    #[test]
    fn help_and_comments() {
        let t = tree();
        let mut c = Ctx::default();
        assert_eq!(t.execute(&mut c, "# comment").unwrap(), "");
        assert_eq!(t.execute(&mut c, "   ").unwrap(), "");
        let h = t.execute(&mut c, "sh ?").unwrap();
        assert!(
            h.contains("show runtime") && h.contains("show errors") && !h.contains("set interface")
        );
        let h = t.execute(&mut c, "sh int?").unwrap();
        assert!(h.contains("show interface address"));
        assert_eq!(t.commands().len(), 7);
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn duplicate_registration_panics_at_startup() {
        let mut t = tree();
        t.add("show runtime", "again", rt);
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(s in "\\PC{0,200}") {
            let t = tree();
            let mut c = Ctx::default();
            let _ = t.execute(&mut c, &s);
        }
        #[test]
        fn garbage_bytes_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let t = tree();
            let mut c = Ctx::default();
            let _ = t.execute(&mut c, &String::from_utf8_lossy(&b));
        }
    }
}
