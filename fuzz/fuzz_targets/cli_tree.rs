//! The CLI command tree (prefix matching, `?` help, `{ }` groups, argument parsing in the
//! handlers) and the script splitter, on arbitrary text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_cli::script::split_script;
use sluice_cli::{Args, CliError, CommandTree};
use std::sync::OnceLock;

fn show_interface(_: &mut u32, a: &mut Args) -> Result<String, CliError> {
    let name = a.opt_word().unwrap_or_default();
    a.finish()?;
    Ok(name)
}

fn show_interface_address(_: &mut u32, a: &mut Args) -> Result<String, CliError> {
    a.finish()?;
    Ok(String::new())
}

fn set_interface_state(n: &mut u32, a: &mut Args) -> Result<String, CliError> {
    let _ = a.word("interface")?;
    if !(a.keyword("up") || a.keyword("down")) {
        return Err(CliError::new("expected up or down"));
    }
    a.finish()?;
    *n = n.wrapping_add(1);
    Ok(String::new())
}

fn set_interface_ip_address(_: &mut u32, a: &mut Args) -> Result<String, CliError> {
    let del = a.keyword_prefix("del", 3);
    let ifname = a.word("interface")?;
    let addr = a.word("address")?;
    a.finish()?;
    Ok(format!("{del} {ifname} {addr}"))
}

fn trace_add(_: &mut u32, a: &mut Args) -> Result<String, CliError> {
    let node = a.word("node")?;
    let n = a.u32("count")?;
    a.finish()?;
    Ok(format!("{node} {n}"))
}

fn packet_generator_new(_: &mut u32, a: &mut Args) -> Result<String, CliError> {
    let mut out = String::new();
    while !a.is_empty() {
        if a.keyword("name") {
            out.push_str(&a.word("name")?);
        } else if a.keyword("limit") {
            let _ = a.u64("limit")?;
        } else if a.keyword("rate") {
            let _ = a.f64("rate")?;
        } else if a.keyword("size") {
            let _ = a.range_u32("size")?;
        } else if a.next_is_group() || a.keyword("data") {
            out.push_str(&a.rest());
        } else {
            return Err(CliError::unknown_input(a.peek().unwrap_or("")));
        }
    }
    Ok(out)
}

fn tree() -> &'static CommandTree<u32> {
    static TREE: OnceLock<CommandTree<u32>> = OnceLock::new();
    TREE.get_or_init(|| {
        let mut t = CommandTree::new();
        t.add("show interface", "show interface [<name>]", show_interface);
        t.add(
            "show interface address",
            "show interface address",
            show_interface_address,
        );
        t.add(
            "set interface state",
            "set interface state <if> up|down",
            set_interface_state,
        );
        t.add(
            "set interface ip address",
            "set interface ip address [del] <if> <addr>",
            set_interface_ip_address,
        );
        t.add("trace add", "trace add <node> <n>", trace_add);
        t.add(
            "packet-generator new",
            "packet-generator new { ... }",
            packet_generator_new,
        );
        t
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let t = tree();
    let mut ctx = 0u32;
    let _ = t.execute(&mut ctx, &text);
    let _ = t.help(&text);
    if let Ok(cmds) = split_script(&text) {
        for (line, cmd) in cmds {
            assert!(line >= 1);
            let _ = t.execute(&mut ctx, &cmd);
        }
    }
    let mut a = Args::new(&text);
    while a.opt_word().is_some() {}
});
