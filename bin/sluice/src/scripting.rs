//! CLI scripts and the session commands VPP scripts use: `exec`, `define` / `undefine` /
//! `show macro` (variables expanded as `$name` / `$(name)` in every command line),
//! `comment { ... }` / `uncomment { ... }`, `echo`, `set terminal pager|history|ansi`.
//!
//! A script keeps going past a failing line, as VPP's `exec` (and `startup-config`): the
//! line is reported as `file:line: error` and the next one runs. `exec <file> strict` (and
//! `unix { exec-strict }` at start-up) stops at the first failing line instead.
//!
//! Variables live in one table per daemon (VPP keeps one per CLI session plus one for the
//! start-up script): a `define` on one session is seen by the others.

use crate::config;
use sluice_cli::macros::Macros;
use sluice_cli::{script, Args, CliError, CommandTree};
use sluice_graph::Vlib;
use std::fmt::Write;
use std::path::Path;

/// Adds the script and session commands.
pub fn register(t: &mut CommandTree<Vlib>) {
    t.add(
        "exec",
        "exec <file> [strict] — run a CLI script; a failing line is reported as file:line and the script goes on, unless strict",
        cli_exec,
    );
    t.add(
        "define",
        "define <variable-name> <value> — set a variable, used as $name or $(name)",
        cli_define,
    );
    t.add(
        "undefine",
        "undefine <variable-name> — remove a variable",
        cli_undefine,
    );
    t.add(
        "show macro",
        "show macro [noevaluate] — variables and their values",
        cli_show_macro,
    );
    t.add(
        "comment",
        "comment <anything> | comment { ... } — does nothing",
        cli_comment,
    );
    t.add(
        "uncomment",
        "uncomment { <command> } — runs the command",
        cli_uncomment,
    );
    t.add("echo", "echo <text> — print the text", cli_echo);
    t.add(
        "set terminal pager",
        "set terminal pager [on|off] [limit <lines>] — the CLI never pages (off)",
        cli_term_pager,
    );
    t.add(
        "set terminal history",
        "set terminal history [on|off] [limit <lines>] — sluicectl keeps the history",
        cli_term_noop,
    );
    t.add(
        "set terminal ansi",
        "set terminal ansi [on|off] — the CLI never colours its output",
        cli_term_noop,
    );
}

/// Runs one command line: variables expanded, then the command.
pub fn run_line(vm: &mut Vlib, tree: &CommandTree<Vlib>, line: &str) -> Result<String, CliError> {
    let expanded;
    let line = if line.contains('$') {
        expanded = vm.ext_mut::<Macros>().expand(line)?;
        expanded.as_str()
    } else {
        line
    };
    tree.execute(vm, line)
}

/// What a script run produced.
#[derive(Debug, Default)]
pub struct ScriptRun {
    /// The commands' output, with a `file:line: error` line where a command failed.
    pub transcript: String,
    /// The failed lines, `file:line: error` each.
    pub failed: Vec<String>,
}

/// Runs a CLI script. `strict`: stop at the first failing line (`Err("file:line: error")`);
/// otherwise every line runs and the failures are listed in [`ScriptRun::failed`].
///
/// Errors that stop any script: the file cannot be read (it must be a regular file of at
/// most [`config::MAX_SCRIPT_BYTES`]; a FIFO or device is refused without blocking), its
/// braces do not balance, or a stop request (SIGTERM) arrived. Errors never show the file's
/// content beyond the token that failed, and not even that when the line does not start
/// with a command-like word (so `exec` on a secret file does not print it).
pub fn run_script(
    vm: &mut Vlib,
    tree: &CommandTree<Vlib>,
    file: &Path,
    strict: bool,
) -> Result<ScriptRun, String> {
    let text = sluice_infra::files::read_regular(file, config::MAX_SCRIPT_BYTES)
        .map_err(|e| e.to_string())?;
    // Validated first as UTF-8 (fast), decoded lossily only if that fails.
    let text = match std::str::from_utf8(&text) {
        Ok(t) => std::borrow::Cow::Borrowed(t),
        Err(_) => String::from_utf8_lossy(&text),
    };
    let cmds = script::split_script(&text)
        .map_err(|e| format!("{}:{}: {}", file.display(), e.line, e.msg))?;
    let mut run = ScriptRun::default();
    // A route table's lines skip the command tree and are applied in batches (same
    // effect, a fraction of the work): queued, then applied before any other line runs.
    let mut routes = sluice_vnet::bulk::RouteLines::new(strict);
    let mut bad = Vec::new();
    // Reports the failed queued route lines (in line order).
    let report = |run: &mut ScriptRun, bad: &mut Vec<(usize, CliError)>| -> Result<(), String> {
        for (line, e) in bad.drain(..) {
            let m = format!("{}:{line}: {}", file.display(), e.msg);
            if strict {
                return Err(m);
            }
            let _ = writeln!(run.transcript, "{m}");
            run.failed.push(m);
        }
        Ok(())
    };
    for (line, cmd) in cmds {
        if vm
            .ext::<sluice_cli::Interrupt>()
            .is_some_and(|i| i.requested())
        {
            routes.flush(vm, &mut bad);
            report(&mut run, &mut bad)?;
            return Err(format!("{}:{line}: interrupted", file.display()));
        }
        let taken = routes.push(vm, line, &cmd, &mut bad);
        if !taken {
            routes.forget(vm, &mut bad);
        }
        report(&mut run, &mut bad)?;
        if taken {
            continue;
        }
        match run_line(vm, tree, &cmd) {
            Ok(s) => run.transcript.push_str(&s),
            Err(e) if e.msg.contains('\n') => {
                // A nested `exec` whose lines failed: its transcript names them.
                if strict {
                    return Err(e.msg);
                }
                run.transcript.push_str(&e.msg);
                if !e.msg.ends_with('\n') {
                    run.transcript.push('\n');
                }
                run.failed.push(format!(
                    "{}:{line}: {}",
                    file.display(),
                    e.msg.lines().last().unwrap_or("")
                ));
            }
            Err(e) => {
                let m = format!("{}:{}: {}", file.display(), line, script_error(&cmd, &e));
                if strict {
                    return Err(m);
                }
                let _ = writeln!(run.transcript, "{m}");
                run.failed.push(m);
            }
        }
    }
    routes.flush(vm, &mut bad);
    report(&mut run, &mut bad)?;
    Ok(run)
}

/// The message for a failed script line: the command's own error, unless the line's first
/// word is not command-like (letters, digits, `-_.`, at most 32 characters), which is
/// reported without quoting it.
fn script_error(cmd: &str, e: &CliError) -> String {
    let first = cmd.split_whitespace().next().unwrap_or("");
    let wordlike = first.len() <= 32
        && first
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !wordlike {
        "not a CLI command (line not shown)".to_string()
    } else {
        e.msg.clone()
    }
}

fn cli_exec(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let file = a.word("file name")?;
    let strict = a.keyword("strict");
    a.finish()?;
    let d = vm.ext_mut::<crate::Daemon>();
    if d.exec_depth >= 8 {
        return Err(CliError::new("exec nested too deeply"));
    }
    let Some(tree) = d.tree.clone() else {
        return Err(CliError::new("exec unavailable"));
    };
    d.exec_depth += 1;
    // The transcript holds every line's whole output: no streamed pieces.
    let r = sluice_graph::reply::with_allowed(vm, false, |vm| {
        run_script(vm, &tree, Path::new(&file), strict)
    });
    vm.ext_mut::<crate::Daemon>().exec_depth -= 1;
    let run = r.map_err(CliError::new)?;
    if run.failed.is_empty() {
        Ok(run.transcript)
    } else {
        // The reply is an error (sluicectl exits 1) that still carries every output: the
        // one CLI error of several lines, one per failed line plus a count.
        let mut msg = run.transcript;
        let _ = write!(msg, "{}: {} line(s) failed", file, run.failed.len());
        Err(CliError { msg })
    }
}

fn cli_define(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let name = a.word("variable name")?;
    let value = a.rest();
    if value.trim().is_empty() {
        return Err(CliError::new(format!("missing value for `{name}'")));
    }
    vm.ext_mut::<Macros>().define(&name, value.trim())?;
    Ok(String::new())
}

fn cli_undefine(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let name = a.word("variable name")?;
    a.finish()?;
    if vm.ext_mut::<Macros>().undefine(&name) {
        Ok(String::new())
    } else {
        // VPP prints this and succeeds.
        Ok(format!("{name} wasn't set...\n"))
    }
}

fn cli_show_macro(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let raw = a.keyword("noevaluate") || a.keyword("noeval");
    a.finish()?;
    let m = vm.ext_mut::<Macros>();
    let mut out = String::new();
    for (k, v) in m.iter() {
        let shown = if raw {
            v.to_string()
        } else {
            m.expand(v).unwrap_or_else(|e| format!("<{}>", e.msg))
        };
        let _ = writeln!(out, "{k:<24}{shown}");
    }
    Ok(out)
}

fn cli_comment(_: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let _ = a.rest();
    Ok(String::new())
}

fn cli_uncomment(vm: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let body = if a.next_is_group() && a.remaining() == 1 {
        a.word("command")?
    } else {
        a.rest()
    };
    let Some(tree) = vm.ext_mut::<crate::Daemon>().tree.clone() else {
        return Err(CliError::new("uncomment unavailable"));
    };
    let d = vm.ext_mut::<crate::Daemon>();
    if d.exec_depth >= 8 {
        return Err(CliError::new("uncomment nested too deeply"));
    }
    d.exec_depth += 1;
    let r = tree.execute(vm, body.trim());
    vm.ext_mut::<crate::Daemon>().exec_depth -= 1;
    r
}

fn cli_echo(_: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    let mut s = a.rest();
    s.push('\n');
    Ok(s)
}

fn on_off_limit(a: &mut Args) -> Result<Option<bool>, CliError> {
    let mut on = None;
    while !a.is_empty() {
        if a.keyword("on") {
            on = Some(true);
        } else if a.keyword("off") {
            on = Some(false);
        } else if a.keyword("limit") {
            a.u32("limit")?;
        } else {
            return Err(CliError::unknown_input(a.peek().unwrap_or("")));
        }
    }
    Ok(on)
}

/// `set terminal pager`: `off` (and a limit) is what Sluice always does; `on` cannot be.
fn cli_term_pager(_: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    if on_off_limit(a)? == Some(true) {
        return Err(CliError::new(
            "set terminal pager on: the Sluice CLI has no pager; pipe sluicectl's output to less instead",
        ));
    }
    Ok(String::new())
}

fn cli_term_noop(_: &mut Vlib, a: &mut Args) -> Result<String, CliError> {
    on_off_limit(a)?;
    Ok(String::new())
}
