//! `sluice-p4c`: compiles a P4 program (the `p4` plugin's subset) to the Rust module the
//! plugin builds in (`plugins/p4/src/generated/`; see docs/p4.md).
//!
//! ```text
//! sluice-p4c <file.p4> [-o <out.rs>] [--name <module>]
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut file, mut out, mut name) = (None, None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => out = it.next().cloned(),
            "--name" => name = it.next().cloned(),
            _ if file.is_none() && !a.starts_with('-') => file = Some(a.clone()),
            _ => {
                eprintln!("sluice-p4c: unexpected argument `{a}'");
                return ExitCode::from(2);
            }
        }
    }
    let Some(file) = file else {
        eprintln!("usage: sluice-p4c <file.p4> [-o <out.rs>] [--name <module>]");
        return ExitCode::from(2);
    };
    let name = name.unwrap_or_else(|| {
        std::path::Path::new(&file)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("p4")
            .to_string()
    });
    let src = match std::fs::read_to_string(&file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice-p4c: cannot read `{file}': {e}");
            return ExitCode::FAILURE;
        }
    };
    let shown = source_name(std::path::Path::new(&file));
    let text = match sluice_p4::gen::from_source(&src, &shown, &name) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sluice-p4c: {e}");
            return ExitCode::FAILURE;
        }
    };
    match out {
        Some(o) => {
            if let Err(e) = std::fs::write(&o, text) {
                eprintln!("sluice-p4c: cannot write `{o}': {e}");
                return ExitCode::FAILURE;
            }
        }
        None => print!("{text}"),
    }
    ExitCode::SUCCESS
}

/// How the generated module names its source: the path relative to the repository (the
/// nearest directory above holding `.git`), whatever path the caller gave (`./x.p4`, an
/// absolute one), so the output does not depend on the working directory; the file name
/// alone outside a repository.
fn source_name(file: &std::path::Path) -> String {
    let name = || {
        file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let Ok(abs) = file.canonicalize() else {
        return name();
    };
    abs.ancestors()
        .skip(1)
        .find(|d| d.join(".git").exists())
        .and_then(|root| abs.strip_prefix(root).ok())
        .map_or_else(name, |r| r.display().to_string())
}
