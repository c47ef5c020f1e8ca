//! Route tables loaded as CLI scripts (`exec` of one `ip route add <prefix> <paths>` line per
//! prefix): such lines skip the command tree, the paths of a run of lines that repeat them
//! are parsed once, and the run is applied as one batch by the FIB's batched entry point
//! ([`crate::ip_family::routes_add_del`], the one `ip_route_add_del_multi` uses): the paths
//! are resolved and the control plane locked once per batch, not once per line.
//!
//! [`RouteLines::push`] takes a line only when it is exactly `ip route add <IPv4 or IPv6
//! prefix> <paths>` in plain words (single spaces, no `$` macro, no quotes or braces) and
//! both the prefix and the paths parse, and `<paths>` sets neither `del`, `count` nor
//! `resolve-via-host` (whose check depends on the routes the batch itself adds); anything
//! else (and every error the parse would report) is left to the command tree, which runs
//! it as before, after the queued lines are applied ([`RouteLines::flush`]). What a taken
//! line does is what `ip route` does with it, errors named by the prefix; a failing line
//! is reported with its own line number and the lines after it still run (not with
//! `strict`, where the script stops there), so a script's transcript, failed lines and
//! FIB are the same either way (test `script_route_table_lines`).
//!
//! Cost: the command tree's tokenizer, walk and argument parsing and the paths' parse were
//! about a third of the instructions of such a line, the per-line path resolution and
//! control-plane lock most of the rest outside the FIB (docs/benchmarking.md, bulk
//! configuration).

use crate::ip4::Ip4Control;
use crate::ip6::Ip6Control;
use crate::ip_family::{Addr, IpControl};
use crate::routes::{parse_addr, parse_paths, parse_prefix, RoutePaths};
use sluice_cli::{Args, CliError};
use sluice_graph::Vlib;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Lines applied in one batch at most (memory, and how long an interrupt may wait).
const BATCH: usize = 8192;

/// The last paths parsed, by family, with the text they were parsed from, and the queued
/// prefixes (of one family at a time, with that family's paths) with their line numbers.
#[derive(Default)]
pub struct RouteLines {
    v4: Option<(String, RoutePaths<Ipv4Addr>)>,
    v6: Option<(String, RoutePaths<Ipv6Addr>)>,
    q4: Vec<(u32, u8)>,
    q6: Vec<(u128, u8)>,
    lines: Vec<usize>,
    strict: bool,
}

/// The `(prefix, paths)` words of a plain `ip route add <prefix> <paths>` line.
fn split(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim().strip_prefix("ip route add ")?;
    let (prefix, paths) = rest.split_once(' ')?;
    let plain = |s: &str, extra: &[u8]| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"./:".contains(&b) || extra.contains(&b))
    };
    // Paths in plain words (interface names may have `-` and `_`), no empty word.
    (plain(prefix, b"")
        && prefix.contains('/')
        && plain(paths, b" -_")
        && !paths.starts_with(' ')
        && !paths.contains("  ")
        && !paths.ends_with(' '))
    .then_some((prefix, paths))
}

/// The paths of `text`, parsed (`None` for text the command tree must see: a parse error,
/// `del` or `count` among the paths; or a batch must not take: `resolve-via-host`).
fn paths<A>(
    vm: &mut Vlib,
    text: &str,
    parse_nh: impl Fn(&str) -> Result<A, CliError>,
) -> Option<RoutePaths<A>> {
    let mut a = Args::new(text);
    let p = parse_paths(vm, &mut a, None, parse_nh).ok()?;
    (p.del.is_none() && p.count.is_none() && !p.resolve_via_host).then_some(p)
}

/// Adds the queued prefixes `q` (script lines `lines`) with `paths` in batches; each
/// failing line goes to `failed` and the batch goes on after it (`strict`: stops there).
fn apply<C: IpControl>(
    vm: &mut Vlib,
    q: &[(Addr<C>, u8)],
    lines: &[usize],
    paths: &RoutePaths<C::Ip>,
    strict: bool,
    failed: &mut Vec<(usize, CliError)>,
) {
    let mut at = 0;
    while at < q.len() {
        let Err(e) = crate::ip_family::routes_add_del::<C>(vm, true, 1, &q[at..], paths) else {
            return;
        };
        // Index None: the paths failed (every line would fail alike).
        let bad = e.index.map_or(at..q.len(), |k| at + k..at + k + 1);
        let next = bad.end;
        for l in &lines[bad] {
            failed.push((*l, CliError::from(e.error.clone())));
            if strict {
                return;
            }
        }
        at = next;
    }
}

/// `a.b.c.d/len` written the usual way (decimal octets without leading zeros, a length of
/// one or two digits): (address, length). None: anything else, which
/// [`parse_prefix`] decides (a faster parse of the common form, the same result).
fn fast_v4(w: &[u8]) -> Option<(u32, u8)> {
    let mut addr = 0u32;
    let mut i = 0;
    for sep in [b'.', b'.', b'.', b'/'] {
        let start = i;
        let mut v = 0u32;
        while let Some(&c) = w.get(i).filter(|c| c.is_ascii_digit()) {
            v = v * 10 + u32::from(c - b'0');
            i += 1;
            if i - start > 3 {
                return None;
            }
        }
        if i == start || v > 255 || (i - start > 1 && w[start] == b'0') || w.get(i) != Some(&sep) {
            return None;
        }
        addr = addr << 8 | v;
        i += 1;
    }
    let l = &w[i..];
    if l.is_empty() || l.len() > 2 || !l.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let len = l.iter().fold(0u8, |a, &c| a * 10 + (c - b'0'));
    (len <= 32).then_some((addr, len))
}

impl RouteLines {
    /// Queues `line` when it repeats the queued lines' paths text (the usual line of a
    /// table) and its prefix parses: true if it did.
    fn push_same(&mut self, line: &str, n: usize) -> bool {
        let Some((w, text)) = line
            .trim_ascii()
            .strip_prefix("ip route add ")
            .and_then(|r| {
                let k = r.bytes().position(|b| b == b' ')?;
                Some((&r[..k], &r[k + 1..]))
            })
        else {
            return false;
        };
        fn same<P>(c: &Option<(String, P)>, text: &str) -> bool {
            c.as_ref().is_some_and(|(t, _)| t == text)
        }
        if self.q6.is_empty() && same(&self.v4, text) {
            let Some(p) = fast_v4(w.as_bytes()) else {
                return false;
            };
            self.q4.push(p);
        } else if self.q4.is_empty() && same(&self.v6, text) && w.contains('/') {
            let Ok((p, len)) = parse_prefix::<Ipv6Addr>(w, 128, "IPv6") else {
                return false;
            };
            self.q6.push((u128::from(p), len));
        } else {
            return false;
        }
        self.lines.push(n);
        true
    }

    /// Lines of a script run with `strict` (stop at the first failing line).
    pub fn new(strict: bool) -> Self {
        RouteLines {
            strict,
            ..Default::default()
        }
    }

    /// Applies the queued lines (in order); each failing one goes to `failed` as (line
    /// number, error).
    pub fn flush(&mut self, vm: &mut Vlib, failed: &mut Vec<(usize, CliError)>) {
        if !self.q4.is_empty() {
            if let Some((_, p)) = &self.v4 {
                apply::<Ip4Control>(vm, &self.q4, &self.lines, p, self.strict, failed);
            }
        } else if !self.q6.is_empty() {
            if let Some((_, p)) = &self.v6 {
                apply::<Ip6Control>(vm, &self.q6, &self.lines, p, self.strict, failed);
            }
        }
        self.q4.clear();
        self.q6.clear();
        self.lines.clear();
    }

    /// Applies the queued lines and forgets the parsed paths: the caller runs another
    /// command, which may change what they parse to (interfaces, tables).
    pub fn forget(&mut self, vm: &mut Vlib, failed: &mut Vec<(usize, CliError)>) {
        self.flush(vm, failed);
        self.v4 = None;
        self.v6 = None;
    }

    /// Queues `line` (script line `n`) if it is a plain route line (see the module doc),
    /// applying the queued lines first when its family or paths differ from theirs or the
    /// batch is full (failures to `failed`). false: run it through the command tree (after
    /// [`Self::forget`]).
    pub fn push(
        &mut self,
        vm: &mut Vlib,
        n: usize,
        line: &str,
        failed: &mut Vec<(usize, CliError)>,
    ) -> bool {
        if self.lines.len() >= BATCH {
            self.flush(vm, failed);
        }
        if self.push_same(line, n) {
            return true;
        }
        let Some((w, text)) = split(line) else {
            return false;
        };
        if w.contains(':') {
            let Ok((p, len)) = parse_prefix::<Ipv6Addr>(w, 128, "IPv6") else {
                return false;
            };
            if !self.q4.is_empty() || self.v6.as_ref().is_none_or(|(t, _)| t != text) {
                self.flush(vm, failed);
            }
            if self.v6.as_ref().is_none_or(|(t, _)| t != text) {
                let Some(p) = paths(vm, text, |t| parse_addr::<Ipv6Addr>(t, "IPv6")) else {
                    return false;
                };
                self.v6 = Some((text.to_string(), p));
            }
            self.q6.push((u128::from(p), len));
        } else {
            let Ok((p, len)) = parse_prefix::<Ipv4Addr>(w, 32, "IPv4") else {
                return false;
            };
            if !self.q6.is_empty() || self.v4.as_ref().is_none_or(|(t, _)| t != text) {
                self.flush(vm, failed);
            }
            if self.v4.as_ref().is_none_or(|(t, _)| t != text) {
                let Some(p) = paths(vm, text, |t| parse_addr::<Ipv4Addr>(t, "IPv4")) else {
                    return false;
                };
                self.v4 = Some((text.to_string(), p));
            }
            self.q4.push((u32::from(p), len));
        }
        self.lines.push(n);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn fast_v4_parses_what_parse_prefix_parses() {
        use crate::routes::parse_prefix;
        use std::net::Ipv4Addr;
        for w in [
            "10.0.0.0/8",
            "0.0.0.0/0",
            "255.255.255.255/32",
            "1.2.3.4/33",
            "1.2.3.4/024",
            "01.2.3.4/8",
            "1.2.3/8",
            "1.2.3.4.5/8",
            "256.0.0.0/8",
            "1.2.3.4/",
            "1.2.3.4/+8",
            "1.2.3.4",
            "1.2.3.4/8/8",
            "1..3.4/8",
            "1000.0.0.0/8",
            "10.0.0.0/9x",
        ] {
            let slow = parse_prefix::<Ipv4Addr>(w, 32, "IPv4")
                .ok()
                .map(|(a, l)| (u32::from(a), l));
            match super::fast_v4(w.as_bytes()) {
                Some(f) => assert_eq!(Some(f), slow, "{w}"),
                // Left to the slow parse: only forms it may take or refuse.
                None => assert!(
                    slow.is_none() || ["1.2.3.4/024", "1.2.3.4/+8", "1.2.3.4"].contains(&w),
                    "{w}"
                ),
            }
        }
    }

    #[test]
    fn only_plain_route_lines_are_taken() {
        assert_eq!(
            split("ip route add 10.0.0.0/8 via 10.0.1.2"),
            Some(("10.0.0.0/8", "via 10.0.1.2"))
        );
        assert_eq!(
            split("  ip route add fd00::/8 via fd01::2 pg1 weight 2 "),
            Some(("fd00::/8", "via fd01::2 pg1 weight 2"))
        );
        for l in [
            "ip route del 10.0.0.0/8 via 10.0.1.2",
            "ip route add count 4 10.0.0.0/8 via 10.0.1.2",
            "ip route add 10.0.0.0/8",
            "ip route add 10.0.0.0/8 via $(nh)",
            "ip route add 10.0.0.0/8 via \"10.0.1.2\"",
            "ip route add 10.0.0.0/8  via 10.0.1.2",
            "ip  route add 10.0.0.0/8 via 10.0.1.2",
            "ip ro add 10.0.0.0/8 via 10.0.1.2",
            "ip route add 10.0.0.0/8 via { 10.0.1.2 }",
        ] {
            assert_eq!(split(l), None, "{l}");
        }
    }
}
