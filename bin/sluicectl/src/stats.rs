//! `sluicectl stats ls|dump|poll`: read the daemon's statistics segment directly (shared
//! memory, read-only), without the CLI socket and without disturbing the daemon — VPP's
//! `vpp_get_stats`.
//!
//! ```text
//! sluicectl [-s <cli socket>] stats [socket-name <path>] ls [<pattern>...]
//! sluicectl [-s <cli socket>] stats [socket-name <path>] dump [<pattern>...]
//! sluicectl [-s <cli socket>] stats [socket-name <path>] poll [interval <s>] [count <n>] [<pattern>...]
//! ```
//!
//! The stats socket is `socket-name`, else `$SLUICE_STATS_SOCKET`, else `stats.sock` beside
//! the CLI socket. A pattern matches the paths that contain it (`*`: any characters, `^`
//! and `$` anchor). `dump` prints every value per item and thread as `vpp_get_stats` does;
//! `poll` prints, every interval, the totals over threads of each item that changed, by
//! name, with its rate.

use sluice_stats::reader::{Stat, StatClient, StatValue};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What `stats` was asked.
#[derive(Debug, PartialEq)]
pub struct StatsCmd {
    /// `socket-name`.
    pub socket: Option<PathBuf>,
    /// `ls`, `dump` or `poll`.
    pub op: Op,
    /// Patterns.
    pub patterns: Vec<String>,
    /// `poll` interval.
    pub interval: f64,
    /// `poll` count (0: forever).
    pub count: u64,
}

/// The operation.
#[derive(Debug, PartialEq, Eq)]
pub enum Op {
    /// Names.
    Ls,
    /// Values.
    Dump,
    /// Values over time.
    Poll,
}

const USAGE: &str =
    "usage: sluicectl stats [socket-name <path>] ls|dump|poll [interval <s>] [count <n>] [<pattern>...]";

/// Parses the words after `stats`.
pub fn parse(words: &[String]) -> Result<StatsCmd, String> {
    let mut it = words.iter().peekable();
    let mut socket = None;
    if it.peek().map(|w| w.as_str()) == Some("socket-name") {
        it.next();
        socket = Some(PathBuf::from(
            it.next().ok_or("sluicectl: `socket-name' needs a path")?,
        ));
    }
    let op = match it.next().map(|s| s.as_str()) {
        Some("ls") => Op::Ls,
        Some("dump") => Op::Dump,
        Some("poll") => Op::Poll,
        Some(w) => return Err(format!("sluicectl: unknown stats command `{w}'\n{USAGE}")),
        None => return Err(USAGE.to_string()),
    };
    let mut c = StatsCmd {
        socket,
        op,
        patterns: Vec::new(),
        interval: 1.0,
        count: 0,
    };
    while let Some(w) = it.next() {
        match w.as_str() {
            "interval" if c.op == Op::Poll => {
                let v = it.next().ok_or("sluicectl: `interval' needs seconds")?;
                c.interval = v
                    .parse::<f64>()
                    .ok()
                    .filter(|x| (0.01..=3600.0).contains(x))
                    .ok_or_else(|| {
                        format!("sluicectl: bad interval `{v}': expected seconds, 0.01..3600")
                    })?;
            }
            "count" if c.op == Op::Poll => {
                let v = it.next().ok_or("sluicectl: `count' needs a number")?;
                c.count = v
                    .parse()
                    .map_err(|_| format!("sluicectl: bad count `{v}': expected a number"))?;
            }
            _ => c.patterns.push(w.clone()),
        }
    }
    Ok(c)
}

/// The stats socket: `socket-name`, else `$SLUICE_STATS_SOCKET` (ignored when empty), else
/// beside the CLI socket.
pub fn resolve(flag: Option<PathBuf>, env: Option<OsString>, cli: &Path) -> PathBuf {
    flag.or_else(|| env.filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| sluice_stats::stats_socket_beside(cli))
}

/// Runs the command; `Err` is the message and exit status.
pub fn run(c: &StatsCmd, socket: &Path) -> Result<(), (String, u8)> {
    let mut client = StatClient::connect(socket).map_err(|e| {
        (
            format!("sluicectl: {e} (is sluice running? statseg {{ socket-name }} sets the path)"),
            2,
        )
    })?;
    let out = std::io::stdout();
    let err = |e: sluice_stats::StatsError| (format!("sluicectl: {e}"), 1);
    match c.op {
        Op::Ls => {
            let mut o = out.lock();
            for e in client.ls(&c.patterns).map_err(err)? {
                if writeln!(o, "{}", e.name).is_err() {
                    return Ok(());
                }
            }
        }
        Op::Dump => {
            let d = client.dump(&c.patterns).map_err(err)?;
            let mut o = out.lock();
            for s in &d {
                if dump_one(&mut o, s).is_err() {
                    return Ok(());
                }
            }
        }
        Op::Poll => poll(&mut client, c).map_err(err)?,
    }
    Ok(())
}

fn dump_one(o: &mut impl Write, s: &Stat) -> std::io::Result<()> {
    let n = &s.name;
    match &s.value {
        StatValue::Scalar(v) => writeln!(o, "{v} {n}"),
        StatValue::Simple(rows) => {
            for (t, r) in rows.iter().enumerate() {
                for (i, v) in r.iter().enumerate() {
                    writeln!(o, "[{i} @ {t}]: {v} {n}")?;
                }
            }
            Ok(())
        }
        StatValue::Combined(rows) => {
            for (t, r) in rows.iter().enumerate() {
                for (i, (p, b)) in r.iter().enumerate() {
                    writeln!(o, "[{i} @ {t}]: {p} packets, {b} bytes {n}")?;
                }
            }
            Ok(())
        }
        StatValue::Gauges(rows) => {
            for (t, r) in rows.iter().enumerate() {
                for (i, v) in r.iter().enumerate() {
                    writeln!(o, "[{i} @ {t}]: {v:.2} {n}")?;
                }
            }
            Ok(())
        }
        StatValue::Names(v) => {
            for (i, s) in v.iter().enumerate() {
                writeln!(o, "[{i}]: {s} {n}")?;
            }
            Ok(())
        }
    }
}

/// One line of `poll`: (key, total, bytes).
fn totals(d: &[Stat]) -> Vec<(String, f64, Option<u64>)> {
    let names = |p: &str| -> Vec<String> {
        d.iter()
            .find(|s| s.name == p)
            .and_then(|s| match &s.value {
                StatValue::Names(v) => Some(v.clone()),
                _ => None,
            })
            .unwrap_or_default()
    };
    let ifs = names("/if/names");
    let nodes = names("/sys/node/names");
    let mut out = Vec::new();
    for s in d {
        let label = |i: usize| -> String {
            let n = if s.name.starts_with("/if/") {
                ifs.get(i)
            } else if s.name.starts_with("/sys/node/") {
                nodes.get(i)
            } else {
                None
            };
            match n {
                Some(n) if !n.is_empty() => format!("{}[{n}]", s.name),
                _ if s.symlink => s.name.clone(),
                _ => format!("{}[{i}]", s.name),
            }
        };
        match &s.value {
            StatValue::Scalar(v) => out.push((s.name.clone(), *v, None)),
            StatValue::Simple(r) => {
                let cols = r.first().map_or(0, |x| x.len());
                for i in 0..cols {
                    out.push((label(i), s.value.item_total(i) as f64, None));
                }
            }
            StatValue::Combined(r) => {
                let cols = r.first().map_or(0, |x| x.len());
                for i in 0..cols {
                    out.push((
                        label(i),
                        s.value.item_total(i) as f64,
                        Some(s.value.item_bytes(i)),
                    ));
                }
            }
            StatValue::Gauges(r) => {
                let cols = r.first().map_or(0, |x| x.len());
                for i in 0..cols {
                    out.push((label(i), r.iter().filter_map(|x| x.get(i)).sum(), None));
                }
            }
            StatValue::Names(_) => {}
        }
    }
    out
}

fn poll(client: &mut StatClient, c: &StatsCmd) -> Result<(), sluice_stats::StatsError> {
    let t0 = Instant::now();
    let mut prev: HashMap<String, (f64, Option<u64>)> = HashMap::new();
    let mut last = t0;
    let mut n = 0u64;
    // The name vectors label the items, whatever the patterns select.
    let mut pats = c.patterns.clone();
    if !pats.is_empty() {
        pats.extend(["^/if/names$".to_string(), "^/sys/node/names$".to_string()]);
    }
    loop {
        let d = client.dump(&pats)?;
        let now = Instant::now();
        let dt = now.duration_since(last).as_secs_f64().max(1e-9);
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "--- {:.1} s", now.duration_since(t0).as_secs_f64());
        for (k, v, b) in totals(&d) {
            let line = match prev.get(&k) {
                None => Some(match b {
                    Some(b) => format!("{k}: {v} packets, {b} bytes"),
                    None => format!("{k}: {v}"),
                }),
                Some(&(pv, _)) if pv == v => None,
                Some(&(pv, pb)) => Some(match (b, pb) {
                    (Some(b), Some(pb)) => format!(
                        "{k}: {v} packets, {b} bytes ({:+.0} pps, {:+.0} Bps)",
                        (v - pv) / dt,
                        (b as f64 - pb as f64) / dt
                    ),
                    _ => format!("{k}: {v} ({:+.0}/s)", (v - pv) / dt),
                }),
            };
            if let Some(l) = line {
                if writeln!(o, "{l}").is_err() {
                    return Ok(());
                }
            }
            prev.insert(k, (v, b));
        }
        if o.flush().is_err() {
            return Ok(());
        }
        drop(o);
        last = now;
        n += 1;
        if c.count != 0 && n >= c.count {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs_f64(c.interval));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_vpp_get_stats_style_arguments() {
        let c = parse(&w("ls /if")).unwrap();
        assert_eq!((c.op, c.patterns, c.socket), (Op::Ls, w("/if"), None));
        let c = parse(&w(
            "socket-name /x/s.sock poll interval 0.5 count 3 /err ^/sys",
        ))
        .unwrap();
        assert_eq!(c.op, Op::Poll);
        assert_eq!(c.socket, Some(PathBuf::from("/x/s.sock")));
        assert_eq!((c.interval, c.count), (0.5, 3));
        assert_eq!(c.patterns, w("/err ^/sys"));
        // `interval` is only a keyword for poll.
        assert_eq!(parse(&w("dump interval")).unwrap().patterns, w("interval"));
        assert_eq!(
            parse(&w("poll interval 0")).unwrap_err(),
            "sluicectl: bad interval `0': expected seconds, 0.01..3600"
        );
        assert_eq!(
            parse(&w("poll count x")).unwrap_err(),
            "sluicectl: bad count `x': expected a number"
        );
        assert!(parse(&w("frob"))
            .unwrap_err()
            .contains("unknown stats command `frob'"));
        assert!(parse(&[]).unwrap_err().starts_with("usage:"));
    }

    #[test]
    fn socket_is_flag_then_env_then_beside_the_cli_socket() {
        let cli = Path::new("/run/x/cli.sock");
        assert_eq!(
            resolve(Some("/a".into()), Some("/b".into()), cli),
            PathBuf::from("/a")
        );
        assert_eq!(resolve(None, Some("/b".into()), cli), PathBuf::from("/b"));
        assert_eq!(
            resolve(None, Some("".into()), cli),
            PathBuf::from("/run/x/stats.sock")
        );
    }

    #[test]
    fn poll_totals_name_interfaces_and_nodes() {
        let st = |n: &str, v| Stat {
            name: n.into(),
            value: v,
            symlink: false,
        };
        let d = vec![
            st(
                "/if/names",
                StatValue::Names(vec!["local0".into(), "pg0".into()]),
            ),
            st(
                "/if/rx",
                StatValue::Combined(vec![vec![(0, 0), (2, 128)], vec![(0, 0), (3, 192)]]),
            ),
            st("/sys/vector_rate", StatValue::Scalar(4.5)),
            st(
                "/err/ip4-input/ttl",
                StatValue::Simple(vec![vec![1], vec![2]]),
            ),
        ];
        let t = totals(&d);
        assert!(t.contains(&("/if/rx[pg0]".into(), 5.0, Some(320))), "{t:?}");
        assert!(t.contains(&("/sys/vector_rate".into(), 4.5, None)));
        assert!(t.contains(&("/err/ip4-input/ttl[0]".into(), 3.0, None)));
    }
}
