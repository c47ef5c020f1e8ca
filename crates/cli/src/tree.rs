//! The command tree: VPP-style command paths matched word by word, each word abbreviable to
//! any unique prefix (`sh run` = `show runtime`, `set int ip addr` = `set interface ip
//! address`).
//!
//! Only the command-path words are abbreviated; the handler gets the remaining tokens as
//! [`Args`] and matches its own keywords. The longest registered path wins: with
//! `show interface` and `show interface address` registered, `show int addr` runs the latter
//! and `show int pg0` runs the former with `pg0` as its argument.

use crate::args::Args;
use crate::error::{clip, CliError};

/// A command handler: gets the context and the arguments after the command path, returns the
/// text to print or a one-line error.
pub type Handler<C> = fn(&mut C, &mut Args) -> Result<String, CliError>;

struct Node<C> {
    word: String,
    children: Vec<Node<C>>,
    cmd: Option<(Handler<C>, String)>,
    /// The full path of the command this one is another name of (`alias`).
    alias_of: Option<String>,
}

impl<C> Node<C> {
    fn new(word: &str) -> Self {
        Node {
            word: word.to_string(),
            children: Vec::new(),
            cmd: None,
            alias_of: None,
        }
    }

    /// The children whose word is `w` exactly, else those it is a prefix of.
    fn matches(&self, w: &str) -> Vec<&Node<C>> {
        if let Some(c) = self.children.iter().find(|c| c.word == w) {
            return vec![c];
        }
        if w.is_empty() {
            return Vec::new();
        }
        let mut m: Vec<&Node<C>> = self
            .children
            .iter()
            .filter(|c| c.word.starts_with(w))
            .collect();
        m.sort_by(|a, b| a.word.cmp(&b.word));
        m
    }
}

/// A tree of commands keyed by their path words.
pub struct CommandTree<C> {
    root: Node<C>,
}

impl<C> Default for CommandTree<C> {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a walk stopped before the end of the words.
enum Stop {
    /// No more plain words (end of line or a `{ }` group).
    End,
    /// A word that matches no child.
    Unknown(String),
    /// A word that is a prefix of several children (sorted names).
    Ambiguous(String, Vec<String>),
}

struct Walk<'a, C> {
    node: &'a Node<C>,
    /// Path words consumed.
    used: usize,
    /// Canonical (unabbreviated) path of `node`.
    path: String,
    stop: Stop,
}

fn join_path(path: &str, word: &str) -> String {
    let mut p = path.to_string();
    push_path(&mut p, word);
    p
}

/// Appends `word` to the path `path` (space-separated words), in place.
fn push_path(path: &mut String, word: &str) {
    if !path.is_empty() {
        path.push(' ');
    }
    path.push_str(word);
}

fn ambiguous(w: &str, names: &[String]) -> CliError {
    CliError::new(format!(
        "ambiguous input `{}' (could be: {})",
        clip(w),
        names.join(", ")
    ))
}

impl<C> CommandTree<C> {
    /// An empty tree.
    pub fn new() -> Self {
        CommandTree {
            root: Node::new(""),
        }
    }

    /// Registers a command under `path` (space-separated words, e.g. `"set interface state"`).
    ///
    /// # Panics
    ///
    /// Registration errors are programming errors and panic at start-up, never at run time:
    /// the same path registered twice, an empty path, or a path word containing `?`, `{`, `}`,
    /// `"` or starting with `#`.
    pub fn add(&mut self, path: &str, short_help: &str, handler: Handler<C>) {
        let words: Vec<&str> = path.split_whitespace().collect();
        assert!(!words.is_empty(), "command with an empty path");
        for w in &words {
            assert!(
                !w.contains(['?', '{', '}', '"']) && !w.starts_with('#'),
                "command `{path}': word `{w}' cannot be typed"
            );
        }
        let mut node = &mut self.root;
        for w in words {
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

    /// Registers `path` as another name of the registered command `target` (same handler,
    /// help `same as `target'`). Where a typed prefix matches both, it is not ambiguous: the
    /// target runs (`packet-generator en` with `enable` and its alias `enable-stream`).
    ///
    /// # Panics
    ///
    /// As [`CommandTree::add`], and when `target` is not registered.
    pub fn alias(&mut self, path: &str, target: &str) {
        let target = target.split_whitespace().collect::<Vec<_>>().join(" ");
        let h = self
            .commands_ref()
            .into_iter()
            .find(|(p, _)| *p == target)
            .map(|(_, h)| h)
            .unwrap_or_else(|| panic!("alias `{path}': no command `{target}'"));
        self.add(path, &format!("same as `{target}'"), h);
        let mut node = &mut self.root;
        for w in path.split_whitespace() {
            let i = node
                .children
                .iter()
                .position(|c| c.word == w)
                .expect("just added");
            node = &mut node.children[i];
        }
        node.alias_of = Some(target);
    }

    /// Every command's path and handler.
    fn commands_ref(&self) -> Vec<(String, Handler<C>)> {
        fn walk<C>(n: &Node<C>, path: &str, out: &mut Vec<(String, Handler<C>)>) {
            if let Some((h, _)) = &n.cmd {
                out.push((path.to_string(), *h));
            }
            for c in &n.children {
                walk(c, &join_path(path, &c.word), out);
            }
        }
        let mut v = Vec::new();
        walk(&self.root, "", &mut v);
        v
    }

    /// Walks the plain words of `args` from the root, at most `limit` of them.
    fn walk(&self, args: &Args, limit: usize) -> Walk<'_, C> {
        let mut node = &self.root;
        let mut used = 0;
        let mut path = String::with_capacity(32);
        let stop = loop {
            let Some(w) = args.word_at(used).filter(|_| used < limit) else {
                break Stop::End;
            };
            // The usual case, a whole word: no candidate list.
            if let Some(c) = node.children.iter().find(|c| c.word == w) {
                node = c;
                push_path(&mut path, &node.word);
                used += 1;
                continue;
            }
            let mut m = node.matches(w);
            if m.len() > 1 {
                // Aliases of another candidate are the same command.
                let names: Vec<String> = m.iter().map(|c| join_path(&path, &c.word)).collect();
                m.retain(|c| c.alias_of.as_ref().is_none_or(|t| !names.contains(t)));
            }
            match m.len() {
                1 => node = m[0],
                0 => break Stop::Unknown(w.to_string()),
                _ => {
                    break Stop::Ambiguous(
                        w.to_string(),
                        m.iter().map(|c| c.word.clone()).collect(),
                    )
                }
            }
            push_path(&mut path, &node.word);
            used += 1;
        };
        Walk {
            node,
            used,
            path,
            stop,
        }
    }

    fn collect(node: &Node<C>, path: &str, out: &mut Vec<(String, String)>) {
        if let Some((_, h)) = &node.cmd {
            out.push((path.to_string(), h.clone()));
        }
        for c in &node.children {
            Self::collect(c, &join_path(path, &c.word), out);
        }
    }

    fn format_listing(mut v: Vec<(String, String)>) -> String {
        v.sort();
        v.dedup();
        let w = v.iter().map(|(p, _)| p.len()).max().unwrap_or(0);
        let mut s = String::new();
        for (p, h) in v {
            let line = format!("{p:<w$}  {h}");
            s.push_str(line.trim_end());
            s.push('\n');
        }
        s
    }

    /// Lists every command under `node` (whose canonical path is `path`).
    fn listing(node: &Node<C>, path: &str) -> String {
        let mut v = Vec::new();
        Self::collect(node, path, &mut v);
        Self::format_listing(v)
    }

    /// Lists the commands under a prefix (`help`, `help show`, `help sh int`): one line per
    /// command, `<full path>  <short help>`, sorted by path, paths padded to one column.
    /// An empty prefix lists everything. Words of the prefix may be abbreviated; words past
    /// a complete command (its arguments) are ignored. Errors: unknown or ambiguous words.
    pub fn help(&self, prefix: &str) -> Result<String, CliError> {
        let args = Args::new(prefix);
        let w = self.walk(&args, usize::MAX);
        match w.stop {
            Stop::Unknown(word) if w.node.cmd.is_none() => Err(CliError::unknown_input(&word)),
            Stop::Ambiguous(word, names) if w.node.cmd.is_none() => Err(ambiguous(&word, &names)),
            _ => Ok(Self::listing(w.node, &w.path)),
        }
    }

    /// `?` help. `line` is the command line without the trailing `?`; `attached` says the `?`
    /// touched the last word (`sh in?`), which is then completed as a prefix.
    fn question(&self, line: &str, attached: bool) -> Result<String, CliError> {
        let args = Args::new(line);
        if !attached {
            return self.help(line);
        }
        // Complete the last word: everything before it is walked as a path.
        let nwords = (0..).take_while(|&i| args.word_at(i).is_some()).count();
        let last = match nwords.checked_sub(1) {
            Some(i) if args.remaining() == nwords => args.word_at(i).unwrap_or(""),
            // The `?` follows a group or nothing: plain subtree help.
            _ => return self.help(line),
        };
        let w = self.walk(&args, nwords - 1);
        match w.stop {
            Stop::End => {
                let mut v = Vec::new();
                for c in w.node.children.iter().filter(|c| c.word.starts_with(last)) {
                    Self::collect(c, &join_path(&w.path, &c.word), &mut v);
                }
                if v.is_empty() {
                    if w.node.cmd.is_some() {
                        // `last` is an argument of the command reached.
                        return Ok(Self::listing(w.node, &w.path));
                    }
                    return Err(CliError::unknown_input(last));
                }
                Ok(Self::format_listing(v))
            }
            _ if w.node.cmd.is_some() => Ok(Self::listing(w.node, &w.path)),
            Stop::Unknown(word) => Err(CliError::unknown_input(&word)),
            Stop::Ambiguous(word, names) => Err(ambiguous(&word, &names)),
        }
    }

    /// All registered commands as `(full path, short help)`, sorted by path.
    pub fn commands(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        Self::collect(&self.root, "", &mut v);
        v.sort();
        v
    }

    /// Runs one command line and returns its output.
    ///
    /// - Blank lines and lines starting with `#` do nothing (`Ok("")`).
    /// - A trailing `?` (`show ?`, or attached to the last word: `sh in?`) returns the help
    ///   listing of the matching commands instead of running anything.
    /// - Otherwise path words are matched (exact name first, then unique prefix) as far as
    ///   they go, and the deepest command reached runs with the remaining tokens.
    ///
    /// Errors, one line each: ``unknown input `word'``,
    /// ``ambiguous input `s' (could be: set, show)``,
    /// ``incomplete command `show'; try: show errors, show runtime``,
    /// ``unbalanced `{'``, or the handler's own error. Never panics on any input.
    pub fn execute(&self, ctx: &mut C, line: &str) -> Result<String, CliError> {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            return Ok(String::new());
        }
        if let Some(body) = t.strip_suffix('?') {
            let attached = body.chars().last().is_some_and(|c| !c.is_whitespace());
            return self.question(body, attached);
        }
        let mut args = Args::new(t);
        if args.has_unclosed_group() {
            return Err(CliError::new("unbalanced `{'"));
        }
        let w = self.walk(&args, usize::MAX);
        if let Some((h, _)) = &w.node.cmd {
            args.skip(w.used);
            return h(ctx, &mut args);
        }
        match w.stop {
            Stop::Unknown(word) => Err(CliError::unknown_input(&word)),
            Stop::Ambiguous(word, names) => Err(ambiguous(&word, &names)),
            Stop::End if w.used == 0 => {
                // Only a group (or an empty quoted word) where a command should be.
                Err(CliError::unknown_input(args.peek().unwrap_or("")))
            }
            Stop::End => {
                let mut names: Vec<String> = w
                    .node
                    .children
                    .iter()
                    .map(|c| join_path(&w.path, &c.word))
                    .collect();
                names.sort();
                Err(CliError::new(format!(
                    "incomplete command `{}'; try: {}",
                    w.path,
                    names.join(", ")
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Ctx {
        ran: Vec<String>,
    }

    fn rec(c: &mut Ctx, a: &mut Args) -> Result<String, CliError> {
        let r = a.rest();
        c.ran.push(r.clone());
        Ok(format!("ran [{r}]"))
    }
    fn rt(_: &mut Ctx, a: &mut Args) -> Result<String, CliError> {
        a.finish()?;
        Ok("runtime".into())
    }
    fn addr(_: &mut Ctx, a: &mut Args) -> Result<String, CliError> {
        Ok(format!("address [{}]", a.rest()))
    }
    fn fail(_: &mut Ctx, _: &mut Args) -> Result<String, CliError> {
        Err(CliError::new("interface `pg9' not found"))
    }

    fn tree() -> CommandTree<Ctx> {
        let mut t = CommandTree::new();
        t.add("show runtime", "show runtime [verbose]", rt);
        t.add("show interface", "show interface [<if>]", rec);
        t.add("show interface address", "show interface address", addr);
        t.add("show interfaces-extra", "an extra command", rec);
        t.add("show errors", "show errors", rec);
        t.add(
            "set interface state",
            "set interface state <if> up|down",
            rec,
        );
        t.add("set interface ip address", "set interface ip address", rec);
        t.add("shutdown", "stop", rec);
        t.add("packet-generator new", "packet-generator new { ... }", rec);
        t.add("fail", "always fails", fail);
        t
    }

    fn run(line: &str) -> Result<String, CliError> {
        tree().execute(&mut Ctx::default(), line)
    }

    fn err(line: &str) -> String {
        run(line).unwrap_err().msg
    }

    #[test]
    fn an_alias_keeps_an_abbreviation_unambiguous() {
        let mut t: CommandTree<Ctx> = CommandTree::new();
        t.add("show runtime", "show runtime", rec);
        t.add("show running-config", "show running-config", rec);
        assert!(
            t.execute(&mut Ctx::default(), "sh run").is_err(),
            "ambiguous"
        );
        t.alias("show run", "show runtime");
        let mut c = Ctx::default();
        t.execute(&mut c, "sh run").unwrap();
        t.execute(&mut c, "sh runn").unwrap();
        t.execute(&mut c, "sh runt").unwrap();
        assert_eq!(c.ran.len(), 3);
    }

    #[test]
    fn unique_prefixes_expand_every_path_word() {
        assert_eq!(run("sho run").unwrap(), "runtime");
        assert_eq!(run("show err").unwrap(), "ran []");
        assert_eq!(run("set int state pg0 up").unwrap(), "ran [pg0 up]");
        assert_eq!(
            run("set i ip a pg0 1.1.1.1/24").unwrap(),
            "ran [pg0 1.1.1.1/24]"
        );
    }

    #[test]
    fn exact_name_wins_over_longer_names_it_prefixes() {
        // "interface" is also a prefix of "interfaces-extra": the exact name wins.
        assert_eq!(run("show interface pg0").unwrap(), "ran [pg0]");
        // "int" is a prefix of both: ambiguous.
        assert_eq!(
            err("show int pg0"),
            "ambiguous input `int' (could be: interface, interfaces-extra)"
        );
        assert_eq!(run("show interfaces-e").unwrap(), "ran []");
    }

    #[test]
    fn longest_path_wins_and_rest_are_arguments() {
        assert_eq!(run("show interface addr pg0").unwrap(), "address [pg0]");
        assert_eq!(run("show interface pg0 addr").unwrap(), "ran [pg0 addr]");
        assert_eq!(err("show runtime now"), "unknown input `now'");
    }

    #[test]
    fn an_alias_is_not_ambiguous_with_its_target() {
        let mut t = tree();
        t.add("packet-generator enable", "enable", rec);
        t.alias("packet-generator enable-stream", "packet-generator enable");
        let mut c = Ctx::default();
        assert_eq!(t.execute(&mut c, "pa en s1").unwrap(), "ran [s1]");
        assert_eq!(t.execute(&mut c, "pa enable-s s1").unwrap(), "ran [s1]");
        assert!(t
            .help("packet-generator")
            .unwrap()
            .contains("same as `packet-generator enable'"));
        // A real second command still makes the prefix ambiguous.
        t.add("packet-generator end", "end", rec);
        assert!(t.execute(&mut c, "pa en s1").is_err());
    }

    #[test]
    fn handler_gets_groups_as_arguments() {
        let mut c = Ctx::default();
        let out = tree()
            .execute(&mut c, "packet-generator new {\n name x\n limit 1\n}")
            .unwrap();
        assert_eq!(out, "ran [{ name x\n limit 1 }]");
        assert_eq!(c.ran, vec!["{ name x\n limit 1 }".to_string()]);
    }

    #[test]
    fn handler_error_is_returned_unchanged() {
        assert_eq!(err("fail"), "interface `pg9' not found");
    }

    #[test]
    fn unknown_word_is_quoted() {
        assert_eq!(err("frob"), "unknown input `frob'");
        assert_eq!(
            err("sh x"),
            "ambiguous input `sh' (could be: show, shutdown)"
        );
        assert_eq!(err("show x"), "unknown input `x'");
        assert_eq!(err("set interface mtu 9000"), "unknown input `mtu'");
    }

    #[test]
    fn ambiguous_prefix_lists_candidates_sorted() {
        assert_eq!(
            err("s run"),
            "ambiguous input `s' (could be: set, show, shutdown)"
        );
        assert_eq!(err("sh"), "ambiguous input `sh' (could be: show, shutdown)");
    }

    #[test]
    fn prefix_node_without_handler_is_incomplete() {
        assert_eq!(
            err("show"),
            "incomplete command `show'; try: show errors, show interface, show interfaces-extra, show runtime"
        );
        assert_eq!(
            err("set int"),
            "incomplete command `set interface'; try: set interface ip, set interface state"
        );
        assert_eq!(
            err("set int { x }"),
            "incomplete command `set interface'; try: set interface ip, set interface state"
        );
    }

    #[test]
    fn group_or_empty_word_in_command_position_is_unknown() {
        assert_eq!(err("{ show runtime }"), "unknown input `show runtime'");
        assert_eq!(err("\"\" runtime"), "unknown input `'");
    }

    #[test]
    fn unbalanced_group_is_refused_before_running() {
        let mut c = Ctx::default();
        assert_eq!(
            tree()
                .execute(&mut c, "packet-generator new { name x")
                .unwrap_err()
                .msg,
            "unbalanced `{'"
        );
        assert!(c.ran.is_empty());
    }

    #[test]
    fn blank_and_comment_lines_do_nothing() {
        let mut c = Ctx::default();
        let t = tree();
        assert_eq!(t.execute(&mut c, "").unwrap(), "");
        assert_eq!(t.execute(&mut c, "  \t ").unwrap(), "");
        assert_eq!(t.execute(&mut c, "# show errors").unwrap(), "");
        assert_eq!(t.execute(&mut c, "   #x").unwrap(), "");
        assert!(c.ran.is_empty());
    }

    #[test]
    fn question_mark_after_space_lists_subtree() {
        let h = run("sho ?").unwrap();
        assert_eq!(
            h,
            "show errors             show errors\n\
             show interface          show interface [<if>]\n\
             show interface address  show interface address\n\
             show interfaces-extra   an extra command\n\
             show runtime            show runtime [verbose]\n"
        );
        assert_eq!(run("?").unwrap(), tree().help("").unwrap());
        assert_eq!(run("  ?  ").unwrap(), tree().help("").unwrap());
    }

    #[test]
    fn question_mark_attached_completes_last_word() {
        let h = run("show in?").unwrap();
        assert!(h.starts_with("show interface "), "{h}");
        assert!(h.contains("show interfaces-extra"));
        assert!(h.contains("show interface address"));
        assert!(!h.contains("runtime"));
        let h = run("sho r?").unwrap();
        assert_eq!(h, "show runtime  show runtime [verbose]\n");
        assert_eq!(err("show zz?"), "unknown input `zz'");
        assert_eq!(
            err("sh r?"),
            "ambiguous input `sh' (could be: show, shutdown)"
        );
        // An argument of a complete command: the command's own help.
        assert_eq!(
            run("show runtime verb?").unwrap(),
            "show runtime  show runtime [verbose]\n"
        );
    }

    #[test]
    fn question_mark_never_runs_the_command() {
        let mut c = Ctx::default();
        let t = tree();
        assert!(t.execute(&mut c, "show errors ?").is_ok());
        assert!(t.execute(&mut c, "show errors?").is_ok());
        assert!(c.ran.is_empty());
    }

    #[test]
    fn help_by_prefix() {
        let t = tree();
        let all = t.help("").unwrap();
        assert_eq!(all.lines().count(), t.commands().len());
        let h = t.help("set int").unwrap();
        assert_eq!(h.lines().count(), 2);
        assert!(h.lines().all(|l| l.starts_with("set interface ")));
        assert_eq!(
            t.help("show interface pg0").unwrap(),
            t.help("show interface").unwrap()
        );
        assert_eq!(t.help("nope").unwrap_err().msg, "unknown input `nope'");
        assert_eq!(
            t.help("s").unwrap_err().msg,
            "ambiguous input `s' (could be: set, show, shutdown)"
        );
    }

    #[test]
    fn help_lines_are_trimmed_when_short_help_is_empty() {
        let mut t: CommandTree<Ctx> = CommandTree::new();
        t.add("quit", "", rec);
        assert_eq!(t.help("").unwrap(), "quit\n");
    }

    #[test]
    fn commands_lists_all_sorted() {
        let c = tree().commands();
        assert_eq!(c.len(), 10);
        assert_eq!(c[0], ("fail".to_string(), "always fails".to_string()));
        let mut sorted = c.clone();
        sorted.sort();
        assert_eq!(c, sorted);
        assert!(c.iter().any(|(p, _)| p == "set interface ip address"));
        assert!(CommandTree::<Ctx>::new().commands().is_empty());
    }

    #[test]
    fn empty_tree_rejects_everything_cleanly() {
        let t: CommandTree<Ctx> = CommandTree::default();
        let mut c = Ctx::default();
        assert_eq!(
            t.execute(&mut c, "show").unwrap_err().msg,
            "unknown input `show'"
        );
        assert_eq!(t.help("").unwrap(), "");
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn duplicate_registration_panics_at_startup() {
        let mut t = tree();
        t.add("show  runtime", "again", rt);
    }

    #[test]
    #[should_panic(expected = "empty path")]
    fn empty_path_panics_at_startup() {
        tree().add("  ", "nothing", rt);
    }

    #[test]
    #[should_panic(expected = "cannot be typed")]
    fn untypeable_word_panics_at_startup() {
        tree().add("show {x}", "bad", rt);
    }

    #[test]
    fn huge_and_control_char_lines_give_short_one_line_errors() {
        let big = "x".repeat(100 * 1024);
        let e = err(&big);
        assert!(e.starts_with("unknown input `xxxx"));
        assert!(e.len() < 100);
        let e = err("show \u{1}\u{7}\n\r");
        assert_eq!(e, "unknown input `??'");
        let many = "show ".repeat(20_000);
        assert!(run(&many).is_err());
    }

    fn check_one_line(
        r: &Result<String, CliError>,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        if let Err(e) = r {
            proptest::prop_assert!(!e.msg.contains('\n'), "multi-line error: {:?}", e.msg);
            proptest::prop_assert!(!e.msg.is_empty());
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn random_strings_never_panic(s in "\\PC{0,200}") {
            let t = tree();
            let mut c = Ctx::default();
            check_one_line(&t.execute(&mut c, &s))?;
            check_one_line(&t.help(&s).map(|_| String::new()))?;
        }

        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let t = tree();
            let mut c = Ctx::default();
            check_one_line(&t.execute(&mut c, &String::from_utf8_lossy(&b)))?;
        }

        #[test]
        fn near_miss_command_words_never_panic(
            words in proptest::collection::vec("(s|sh|show|set|int|interface|ip|a|\\{|\\}|\\?|\"|#|run)", 0..8)
        ) {
            let t = tree();
            let mut c = Ctx::default();
            check_one_line(&t.execute(&mut c, &words.join(" ")))?;
            check_one_line(&t.execute(&mut c, &words.concat()))?;
        }
    }
}
