//! Route tables loaded as CLI scripts (`exec` of one `ip route add <prefix> <paths>` line per
//! prefix): such a line is applied without going through the command tree, and the paths
//! of a run of lines that repeat them are parsed once.
//!
//! [`RouteLines::run`] takes a line only when it is exactly `ip route add <IPv4 or IPv6
//! prefix> <paths>` in plain words (single spaces, no `$` macro, no quotes or braces) and
//! both the prefix and the paths parse, and `<paths>` sets neither `del` nor `count`;
//! anything else (and every error the parse would report) is left to the command tree,
//! which runs it as before. What a taken line does is what `ip route` does with it
//! ([`crate::ip4::route_add_del`] / [`crate::ip6::route_add_del`], errors named by the
//! prefix), so a script's transcript and failed lines are the same either way.
//!
//! Cost: the command tree's tokenizer, walk and argument parsing and the paths' parse were
//! about a third of the instructions of such a line (docs/benchmarking.md, bulk
//! configuration).

use crate::routes::{parse_addr, parse_paths, parse_prefix, RoutePaths};
use sluice_cli::{Args, CliError};
use sluice_graph::Vlib;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The last paths parsed, by family, with the text they were parsed from.
#[derive(Default)]
pub struct RouteLines {
    v4: Option<(String, RoutePaths<Ipv4Addr>)>,
    v6: Option<(String, RoutePaths<Ipv6Addr>)>,
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
/// `del` or `count` among the paths).
fn paths<A>(
    vm: &mut Vlib,
    text: &str,
    parse_nh: impl Fn(&str) -> Result<A, CliError>,
) -> Option<RoutePaths<A>> {
    let mut a = Args::new(text);
    let p = parse_paths(vm, &mut a, None, parse_nh).ok()?;
    (p.del.is_none() && p.count.is_none()).then_some(p)
}

impl RouteLines {
    /// Forgets the parsed paths: the caller ran another command, which may have changed
    /// what they parse to (interfaces, tables).
    pub fn forget(&mut self) {
        self.v4 = None;
        self.v6 = None;
    }

    /// Runs `line` if it is a plain route line (see the module doc): `Some` of what the
    /// command would have returned; `None`: run it through the command tree.
    pub fn run(&mut self, vm: &mut Vlib, line: &str) -> Option<Result<String, CliError>> {
        let (w, text) = split(line)?;
        let r = if w.contains(':') {
            let (p, len) = parse_prefix::<Ipv6Addr>(w, 128, "IPv6").ok()?;
            if self.v6.as_ref().is_none_or(|(t, _)| t != text) {
                let p = paths(vm, text, |t| parse_addr::<Ipv6Addr>(t, "IPv6"))?;
                self.v6 = Some((text.to_string(), p));
            }
            let (_, paths) = self.v6.as_ref()?;
            crate::ip6::route_add_del(vm, true, 1, u128::from(p), len, paths)
        } else {
            let (p, len) = parse_prefix::<Ipv4Addr>(w, 32, "IPv4").ok()?;
            if self.v4.as_ref().is_none_or(|(t, _)| t != text) {
                let p = paths(vm, text, |t| parse_addr::<Ipv4Addr>(t, "IPv4"))?;
                self.v4 = Some((text.to_string(), p));
            }
            let (_, paths) = self.v4.as_ref()?;
            crate::ip4::route_add_del(vm, true, 1, u32::from(p), len, paths)
        };
        Some(r.map(|()| String::new()).map_err(CliError::from))
    }
}

#[cfg(test)]
mod tests {
    use super::split;

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
