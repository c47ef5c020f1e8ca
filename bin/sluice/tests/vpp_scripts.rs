//! VPP-syntax regression suite: the project's own scripts under `tests/vpp-scripts/` (every
//! form of docs/vpp-compatibility.md that a script can show: continuation lines, comments,
//! macros, neighbours, next hops, bridge domains, packet-generator stanzas, logging,
//! diagnostics) run through `exec` on a real daemon; each test checks the state and output
//! they leave.

mod common;

use common::*;
use std::path::PathBuf;

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vpp-scripts")
        .join(name)
}

/// Runs a script with `exec` and returns its transcript (the outputs of its commands).
fn exec(d: &Daemon, name: &str) -> String {
    d.cli(&format!("exec {}", script(name).display()))
        .unwrap_or_else(|e| panic!("exec {name} failed: {e}"))
}

/// The rows of a table whose first column is `first`.
fn rows<'a>(text: &'a str, first: &str) -> Vec<Vec<&'a str>> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|r| r.first() == Some(&first))
        .collect()
}

#[test]
fn script_syntax_continuations_comments_macros_and_keep_going() {
    let d = Daemon::start("vppsyntax", "");
    let path = script("syntax.cli");
    // Line 16 fails; exec goes on (VPP) and reports it, with every output kept.
    let t = d.cli(&format!("exec {}", path.display())).unwrap_err();
    let failed = format!("{}:16: unknown interface `pg9'", path.display());
    assert!(t.contains(&failed), "{t}");
    assert!(
        t.ends_with(&format!("{}: 1 line(s) failed", path.display())),
        "{t}"
    );
    // The lines around the failure ran, in order.
    let echo = t
        .find("macro-check pg0 $notamacro")
        .expect("echo with macros");
    let fail = t.find(&failed).unwrap();
    let after = t.find("after-failure").expect("line after the failure ran");
    assert!(echo < fail && fail < after, "{t}");
    // `show macro`: values expanded when defined (`addr` kept 10.9.8 after `undefine net`).
    let m = rows(&t, "addr");
    assert_eq!(m, vec![vec!["addr", "10.9.8.1/24"]], "{t}");
    assert_eq!(rows(&t, "ifname"), vec![vec!["ifname", "pg0"]]);
    // The continued `create` line made pg0 (its comment cut), and the macros configured it.
    let addr = d.ok("show int addr");
    assert!(addr.contains("pg0 (up):"), "{addr}");
    assert!(addr.contains("L3 10.9.8.1/24"), "{addr}");
    assert!(
        t.contains("L3 10.9.8.1/24"),
        "uncomment ran its command: {t}"
    );
    let show = d.ok("show macro");
    assert!(!show.contains("net "), "undefine removed it: {show}");
    // `strict` stops at the failing line: the echo after it does not run.
    let e = d
        .cli(&format!("exec {} strict", path.display()))
        .unwrap_err();
    assert_eq!(e, failed);
    // Sluice cannot page; it says so and what to use instead.
    assert_eq!(
        d.cli("set terminal pager on").unwrap_err(),
        "set terminal pager on: the Sluice CLI has no pager; pipe sluicectl's output to less instead"
    );
    // Undefined variables are named.
    assert!(d
        .cli("show int $nothere")
        .unwrap_err()
        .contains("undefined variable `$nothere'"));
    d.stop();
}

#[test]
fn script_neighbors() {
    let d = Daemon::start("vppnbr", "");
    let t = exec(&d, "neighbors.cli");
    // `show ip4 neighbors` then `sh ip neighbor` (both families): VPP's columns.
    let v4 = &t[..t.find("2001:1::2").unwrap_or(t.len())];
    assert!(v4.contains("Age") && v4.contains("Flags") && v4.contains("Ethernet"));
    let r = rows(&t, "-");
    assert!(
        r.contains(&vec!["-", "10.1.0.3", "S", "00:00:dd:ee:aa:03", "loop0"]),
        "{t}"
    );
    assert!(
        r.contains(&vec!["-", "2001:1::2", "S", "00:00:dd:ee:aa:ee", "loop0"]),
        "{t}"
    );
    // Deleted with VPP's forms (`ip neighbor del <if> <ip> <mac>`, `set ip neighbor del`).
    assert!(!t.contains("10.1.0.4") && !t.contains("10.1.0.2 "), "{t}");
    let all = d.ok("show ip neighbors");
    assert_eq!(rows(&all, "-").len(), 2, "two static entries left: {all}");
    // `show ip4 neighbors` lists no IPv6 entry.
    assert!(!d.ok("show ip4 neighbors").contains("2001:1::2"));
    assert!(d.ok("show ip6 neighbors").contains("2001:1::2"));
    d.stop();
}

#[test]
fn script_routes() {
    let d = Daemon::start("vpproutes", "");
    let t = exec(&d, "routes.cli");
    let fib0 = d.ok("show ip fib");
    let entry = |fib: &str, p: &str| -> String {
        let mut lines = fib.lines().skip_while(|l| *l != p);
        lines.next();
        lines
            .take_while(|l| l.starts_with(' '))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(entry(&fib0, "5.6.7.8/32").contains("dpo-receive"), "{fib0}");
    assert!(
        entry(&fib0, "8.0.0.1/32").contains("arp-ipv4: via 8.0.0.1 loop0"),
        "host route via an interface: the destination is the neighbour\n{fib0}"
    );
    assert!(entry(&fib0, "10.2.0.9/32").contains("via 10.2.0.2 loop0"));
    assert!(!entry(&fib0, "6.0.0.0/8").is_empty(), "resolve-via-host");
    // Deleted: `ip route del <p>`, `ip route <p> del via <if>`, `ip route del table 5 <p>`.
    assert!(
        !fib0.contains("9.9.9.0/24") && !fib0.contains("1.2.3.0/24"),
        "{fib0}"
    );
    let fib5 = d.ok("show ip fib table 5");
    assert!(
        entry(&fib5, "7.0.0.0/8").contains("via 10.2.0.2 loop0"),
        "{fib5}"
    );
    assert!(!fib5.contains("7.1.0.0/16"), "{fib5}");
    assert!(d.ok("show ip6 fib").contains("::1/128"));
    assert!(t.contains("ipv4-VRF:5"), "the script's own show: {t}");
    // resolve-via-attached refuses a next hop off any connected subnet.
    assert_eq!(
        d.cli("ip route add 6.1.0.0/16 via 9.9.9.9 resolve-via-attached")
            .unwrap_err(),
        "next hop 9.9.9.9 is not on a connected subnet (resolve-via-attached)"
    );
    d.stop();
}

#[test]
fn script_route_table_lines() {
    // Plain `ip route add <prefix> <paths>` lines skip the command tree and are applied in
    // batches of lines with the same paths (vnet::bulk): the transcript and the FIBs must
    // be what the command tree gives for the same lines, run one by one on a second
    // daemon. Lines 16-17 are a batch whose paths fail (each line reported), 19 a bad
    // prefix and 21 a missing table in the middle of a run (the lines after them run).
    let d = Daemon::start("vpproutetable", "");
    let f = script("route-table.cli");
    let e = d
        .cli(&format!("exec {}", f.display()))
        .expect_err("seven lines fail");
    let one = Daemon::start("vpproutetable1", "");
    let mut expect = String::new();
    for (n, line) in std::fs::read_to_string(&f).unwrap().lines().enumerate() {
        match one.cli(line) {
            Ok(out) => expect += &out,
            Err(e) => expect += &format!("{}:{}: {e}\n", f.display(), n + 1),
        }
    }
    expect += &format!("{}: 7 line(s) failed", f.display());
    assert_eq!(e, expect);
    assert!(
        e.contains(":6: bad prefix length") && e.contains(":9: "),
        "{e}"
    );
    for l in [
        ":16: next hop 9.9.9.9",
        ":17: next hop 9.9.9.9",
        ":19: bad prefix",
        ":21: ",
    ] {
        assert!(e.contains(l), "{l}: {e}");
    }
    for fam in ["ip", "ip6"] {
        let (fib, fib1) = (
            d.ok(&format!("show {fam} fib")),
            one.ok(&format!("show {fam} fib")),
        );
        assert_eq!(fib, fib1);
    }
    let fib = d.ok("show ip fib");
    for p in [
        "20.0.0.0/24",
        "20.0.4.0/24",
        "20.0.5.0/24",
        "20.0.7.0/24",
        "20.2.0.0/24",
        "20.2.2.0/24",
        "20.2.4.0/24",
    ] {
        assert!(fib.contains(p), "{p}: {fib}");
    }
    assert!(
        fib.contains("via 10.4.0.2 loop1") && !fib.contains("20.0.6.0/24"),
        "{fib}"
    );
    assert!(d.ok("show ip6 fib").contains("fd00:2::/48"));
    d.stop();
    one.stop();
}

#[test]
fn script_bridge_domains() {
    let d = Daemon::start("vppbridge", "");
    let t = exec(&d, "bridge.cli");
    // bd 7 was created by `set int l2 bridge`; bd 0 (VPP's default) is not listed.
    let bds = d.ok("show bridge-domain");
    assert!(bds.starts_with(" BD-ID "), "{bds}");
    let r: Vec<_> = bds
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .collect();
    assert_eq!(r.len(), 1, "{bds}");
    assert_eq!(&r[0][..4], &["7", "7", "0", "off"], "{bds}");
    // Members with VPP's columns; the tag rewrite is what Sluice does on a sub-interface.
    let m = rows(&t, "pg1.1");
    assert!(m.iter().any(|r| r.ends_with(&["-", "*", "pop-1"])), "{t}");
    // The BVI of the default domain is marked in the l2fib; the static entry is there.
    let fib = d.ok("show l2fib verbose");
    assert!(fib.starts_with("    Mac-Address"), "{fib}");
    let s = rows(&fib, "00:22:44:06:08:0a");
    assert_eq!(s[0][1], "7");
    assert_eq!(s[0][5], "*", "static: {fib}");
    assert!(fib.contains("L2FIB total/learned entries: 2/0"), "{fib}");
    let bvi = fib
        .lines()
        .find(|l| l.contains("loop0"))
        .expect("BVI entry");
    let bvi: Vec<_> = bvi.split_whitespace().collect();
    assert_eq!((bvi[1], bvi[7]), ("0", "*"), "{fib}");
    // What Sluice cannot follow is refused with what to use instead.
    let e = d
        .cli("set int l2 tag-rewrite pg1.1 push dot1q 50")
        .unwrap_err();
    assert!(
        e.starts_with("set interface l2 tag-rewrite push: not supported;"),
        "{e}"
    );
    assert_eq!(
        d.cli("create bridge-domain 0").unwrap_err(),
        "No operations on the default bridge domain are supported"
    );
    d.stop();
}

#[test]
fn script_tunnels() {
    let d = Daemon::start("vpptunnels", "");
    let t = exec(&d, "tunnels.cli");
    assert!(
        t.contains(
            "[0] instance 0 src 10.0.3.1 dst 10.0.3.3 src_port 0 dst_port 4789 vni 13 fib-idx 1"
        ),
        "{t}"
    );
    assert!(t.contains("vni 14 fib-idx 0"), "{t}");
    assert!(t.contains("instance 5 src 10.0.3.1 dst 10.0.3.4"), "{t}");
    assert!(t.contains("payload TEB key 77"), "{t}");
    assert!(t.contains("payload L3"), "{t}");
    assert!(t.contains("src 10.0.3.1 dst 10.0.3.5 table-ID 0"), "{t}");
    let fib = d.ok("show ip fib 10.10.0.0/16");
    assert!(fib.contains("gre0"), "{fib}");
    let bd = d.ok("show bridge-domain 13 detail");
    assert!(
        bd.contains("vxlan_tunnel0") && bd.contains("vxlan_tunnel1"),
        "{bd}"
    );
    let rc = d.ok("show running-config");
    assert!(
        rc.contains(
            "create vxlan tunnel src 10.0.3.1 dst 10.0.3.3 vni 13 instance 0 encap-vrf-id 7"
        ),
        "{rc}"
    );
    d.stop();
}

#[test]
fn script_packet_generator_forms() {
    let d = Daemon::start("vpppg", "");
    let t = exec(&d, "pg.cli");
    for s in ["icmp", "v6", "tcp", "udp", "raw", "forever", "forever0"] {
        assert!(rows(&t, s).len() == 1, "stream {s}: {t}");
    }
    let out = d.dir.join("pg1.pcap");
    d.ok(&format!(
        "packet-generator capture pg1 pcap {} count 6",
        out.display()
    ));
    // `pa en <name>` as VPP's command tree resolves it (enable, not enable-stream).
    for s in ["icmp", "v6", "tcp", "udp", "raw"] {
        d.ok(&format!("pa en {s}"));
    }
    let got = wait_pcap(&out, 6);
    let sum = |b: &[u8]| sluice_wire::checksum::internet_checksum(b);
    // ICMP echo request, 64 bytes, every checksum right.
    let icmp = &got[0];
    assert_eq!(icmp.len(), 64);
    assert_eq!(&icmp[12..14], &[8, 0]);
    assert_eq!(sum(&icmp[14..34]), 0);
    assert_eq!(icmp[34], 8, "echo request");
    assert_eq!(sum(&icmp[34..]), 0);
    assert_eq!(got[1], got[0], "limit 2");
    // IPv6 ICMPv6 echo request.
    let v6 = &got[2];
    assert_eq!(&v6[12..14], &[0x86, 0xdd]);
    assert_eq!((v6[20], v6[54]), (58, 128));
    // TCP SYN of 100 bytes through `tx-interface`.
    let tcp = &got[3];
    assert_eq!(tcp.len(), 100);
    assert_eq!((tcp[23], tcp[14 + 20 + 13]), (6, 0x02));
    // UDP with the given length and checksum 0.
    let udp = &got[4];
    assert_eq!(&udp[38..40], &128u16.to_be_bytes());
    assert_eq!(&udp[40..42], &[0, 0]);
    // hex data as given.
    assert_eq!(got[5][..14], [0, 1, 2, 3, 4, 5, 0, 2, 4, 6, 8, 10, 8, 0]);
    // `limit -1` and `limit 0`: no limit (they run until disabled).
    d.ok("packet-generator enable forever");
    d.ok("packet-generator enable forever0");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let sh = d.ok("show packet-generator");
    for s in ["forever", "forever0"] {
        assert_eq!(rows(&sh, s)[0][1], "Yes", "{s} still running: {sh}");
    }
    d.ok("packet-generator disable");
    d.stop();
}

#[test]
fn script_logging() {
    let d = Daemon::start("vpplog", "");
    let t = exec(&d, "logging.cli");
    assert!(t.contains("Configuration:"), "{t}");
    assert_eq!(rows(&t, "vnet")[0][1], "debug", "{t}");
    assert_eq!(rows(&t, "sluice/scripting")[0][1], "warn", "{t}");
    // The ring was cleared by the script; the start-up lines are gone.
    assert!(!d.ok("show log").contains("CLI on"));
    assert!(d
        .cli("set logging class vnet level loud")
        .unwrap_err()
        .contains("unknown log level `loud'"));
    d.stop();
}

#[test]
fn startup_logging_section_sets_levels_size_and_rate_limit() {
    // A start-up script with six failing lines: each is logged as a warning (class
    // `sluice`), which the section limits to three per window.
    let dir = tmpdir("vpplogconf");
    let bad = dir.join("bad.cli");
    std::fs::write(&bad, "no-such-command 1\n".repeat(6)).unwrap();
    let d = Daemon::start(
        "vpplogconf",
        &format!(
            "unix {{ exec {} }}\nlogging {{\n  default-log-level warn\n  default-syslog-log-level disabled\n  size 8\n  unthrottle-time 3600\n  class sluice {{ rate-limit 3 }}\n  class vnet/ip4 {{ level debug syslog-level err }}\n}}",
            bad.display()
        ),
    );
    let conf = d.ok("show logging");
    for l in [
        "Default log level: warn",
        "Default syslog log level: disabled",
        "Max entries: 8",
        "Unthrottle time: 3600",
    ] {
        assert!(conf.contains(l), "{l}: {conf}");
    }
    assert_eq!(
        rows(&conf, "sluice")[0][1..4],
        ["warn", "disabled", "3"],
        "{conf}"
    );
    assert_eq!(
        rows(&conf, "vnet/ip4")[0][1..4],
        ["debug", "err", "-"],
        "{conf}"
    );
    let log = d.ok("show log");
    // Info lines (`CLI on ...`) are below the default level; three failures, then one
    // throttle notice.
    assert!(!log.contains("CLI on"), "{log}");
    assert_eq!(log.matches("no-such-command").count(), 3, "{log}");
    assert_eq!(
        log.matches("--- message(s) throttled ---").count(),
        1,
        "{log}"
    );
    // `set logging class` acts on the same settings.
    d.ok("set logging class sluice level disabled rate-limit 10 syslog-level crit");
    let conf = d.ok("show logging");
    assert_eq!(
        rows(&conf, "sluice")[0][1..4],
        ["disabled", "err", "10"],
        "{conf}"
    );
    d.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn script_diagnostics() {
    let d = Daemon::start("vppdiag", "");
    let t = exec(&d, "diag.cli");
    assert!(t.contains("pg0 -> pg1"), "show l2patch: {t}");
    assert!(t.contains("ipv4 via 10.3.0.2 pg0"), "show adj: {t}");
    assert!(t.contains("Thread 0 sluice_main"), "show memory: {t}");
    assert!(rows(&t, "ip4-lookup").len() == 1, "graph: {t}");
    assert!(t.contains("ip4-rewrite [1]"), "graph: {t}");
    assert!(t.contains("Write 0 packets to "), "pcap trace off: {t}");
    assert!(t.contains("Sched Policy (Priority)"), "show threads: {t}");
    assert!(rows(&t, "Version:").len() == 1, "show version verbose: {t}");
    assert!(
        t.contains("pg0 (dn):"),
        "show int addr: the admin state: {t}"
    );
    d.stop();
}

/// As VPP, a new memif interface gets a random locally administered MAC unless `hw-addr`
/// is given (a MAC derived from socket-id/id was the same on both ends of a pair).
#[test]
fn memif_mac_is_random_unless_given() {
    let d = Daemon::start("vppmemif", "");
    let sock = d.dir.join("m.sock");
    d.ok(&format!(
        "create memif socket id 1 filename {}",
        sock.display()
    ));
    d.ok("create interface memif id 0 socket-id 1 master");
    d.ok("create interface memif id 1 socket-id 1 master hw-addr 02:00:00:00:00:01");
    let hw = d.ok("show hardware-interfaces");
    let macs: Vec<&str> = hw
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Ethernet address "))
        .collect();
    assert!(macs.contains(&"02:00:00:00:00:01"), "{hw}");
    let random = macs
        .iter()
        .find(|m| **m != "02:00:00:00:00:01" && **m != "00:00:00:00:00:00")
        .expect("the memif without hw-addr");
    assert!(random.starts_with("02:fe:"), "locally administered: {hw}");
    assert_ne!(
        *random, "02:fe:6d:01:00:00",
        "not derived from socket-id/id"
    );
    d.stop();
}
