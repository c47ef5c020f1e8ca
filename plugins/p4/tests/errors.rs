//! Every compile error names the construct and file:line:column.

use sluice_p4::ir::Opts;

fn router() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/router.p4")).unwrap()
}

/// Compiles router.p4 with `from` replaced by `to`; returns the error text.
fn err(from: &str, to: &str) -> String {
    let s = router();
    assert!(s.contains(from), "{from}");
    let s = s.replacen(from, to, 1);
    sluice_p4::compile(&s, "r.p4", Opts::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn unsupported_constructs() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "struct metadata {",
            "enum E { A }\nstruct metadata {",
            "not supported: top-level `enum' declaration at r.p4:",
        ),
        (
            "bit<8>    ttl;",
            "bit<8>    ttl[2];",
            "not supported: header stack at r.p4:",
        ),
        (
            "bit<8>    ttl;",
            "int<8>    ttl;",
            "not supported: type `int' at r.p4:",
        ),
        (
            "        packet.extract(hdr.ipv4);\n",
            "        packet.extract(hdr.ipv4);\n        packet.advance(8);\n",
            "not supported: packet_in.advance at r.p4:",
        ),
        (
            "    action _drop() {\n        mark_to_drop(standard_metadata);",
            "    action _drop() {\n        clone(CloneType.I2E, 1);",
            "not supported: `clone' at r.p4:",
        ),
        (
            "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
            "standard_metadata.mcast_grp = 1;",
            "not supported: multicast (standard_metadata.mcast_grp) at r.p4:",
        ),
        (
            "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
            "hdr.ipv4.ttl = hdr.ipv4.ttl / hdr.ipv4.ihl;",
            "not supported: `/' on run-time values at r.p4:",
        ),
        (
            "key = { hdr.ipv4.dstAddr: lpm; }",
            "key = { hdr.ipv4.dstAddr: optional; }",
            "not supported: match kind `optional' at r.p4:",
        ),
        (
            "        size = 512;",
            "        implementation = foo;",
            "not supported: table property `implementation' at r.p4:",
        ),
        (
            "V1Switch(MyParser()",
            "PSA(MyParser()",
            "not supported: package `PSA' (only V1Switch) at r.p4:",
        ),
        (
            "    apply {\n        send_frame.apply();",
            "    register<bool>(4) r;\n    apply {\n        send_frame.apply();",
            "not supported: register of bool at r.p4:",
        ),
        (
            "        packet.emit(hdr.ethernet);",
            "        if (hdr.ipv4.isValid()) { packet.emit(hdr.ethernet); }",
            "not supported: deparser statement other than packet.emit(header) at r.p4:",
        ),
        (
            "    apply {\n        send_frame.apply();",
            "    apply {\n        switch (hdr.ipv4.ttl) { default: { } }",
            "not supported: switch on an expression (only table.apply().action_run) at r.p4:",
        ),
        (
            "#include <v1model.p4>",
            "#include <psa.p4>",
            "not supported: preprocessor directive `#include' at r.p4:5:1",
        ),
        (
            "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
            "hdr.ipv4.ttl = hash(1);",
            "not supported: call of `hash' in an expression at r.p4:",
        ),
    ];
    for (from, to, want) in cases {
        let e = err(from, to);
        assert!(e.starts_with(want), "{to}\n got: {e}\nwant: {want}");
    }
}

#[test]
fn type_errors() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
            "hdr.ipv4.ttl = hdr.ipv4.totalLen;",
            "type error: expected bit<8>, found bit<16> at r.p4:",
        ),
        (
            "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
            "hdr.ipv4.ttl = 300;",
            "type error: value 300 does not fit in bit<8> at r.p4:",
        ),
        (
            "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
            "hdr.ipv4.ttl = hdr.ipv4.nosuch;",
            "type error: `hdr.ipv4.nosuch' does not exist at r.p4:",
        ),
        (
            "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
            "nhop_ipv4 = 1;",
            "type error: cannot assign to action parameter `nhop_ipv4' at r.p4:",
        ),
        (
            "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
            "hdr.ipv4.ttl = hdr.ipv4.ttl - hdr.ipv4.totalLen;",
            "type error: operands of `-' differ: bit<8> and bit<16> at r.p4:",
        ),
        (
            "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
            "if (hdr.ipv4.ttl) { }",
            "type error: if condition is bit<8>, not bool at r.p4:",
        ),
        (
            "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;",
            "hdr.ipv4.ttl = hdr.ipv4.ttl[8:1];",
            "type error: slice [8:1] out of bit<8> at r.p4:",
        ),
        (
            "actions = { set_nhop; _drop; }",
            "actions = { set_nhop; nosuch; }",
            "type error: unknown action `nosuch' at r.p4:",
        ),
        (
            "        default_action = _drop();\n    }\n    table forward",
            "        default_action = set_dmac(1);\n    }\n    table forward",
            "type error: action `set_dmac' is not in the table's actions at r.p4:",
        ),
        (
            "            TYPE_IPV4: parse_ipv4;",
            "            TYPE_IPV4: parse_ipv6;",
            "type error: unknown state `parse_ipv6' at r.p4:",
        ),
        (
            "            TYPE_IPV4: parse_ipv4;",
            "            (TYPE_IPV4, 1): parse_ipv4;",
            "type error: case has 2 key sets, select has 1 keys at r.p4:",
        ),
        (
            "    state start {",
            "    state begin {",
            "type error: parser has no `start' state at r.p4:",
        ),
        (
            "        ipv4_lpm.apply();",
            "        ipv4_lpm.apply();\n        nosuch();",
            "type error: unknown function or action `nosuch' at r.p4:",
        ),
        (
            "        ipv4_lpm.apply();",
            "        set_nhop(1);",
            "type error: action `set_nhop' takes 2 arguments, got 1 at r.p4:",
        ),
        (
            "    bit<4>    ihl;",
            "    bit<3>    ihl;",
            "type error: header `ipv4' is 159 bits, not a whole number of bytes at r.p4:",
        ),
        (
            "V1Switch(MyParser(), MyVerifyChecksum(),",
            "V1Switch(MyParser(),",
            "type error: V1Switch takes 5 blocks, got 5 at r.p4:",
        ),
    ];
    for (from, to, want) in cases {
        let e = err(from, to);
        if want.contains("takes 5 blocks") {
            assert!(
                e.starts_with("type error: V1Switch takes 6 blocks, got 5 at r.p4:"),
                "{e}"
            );
            continue;
        }
        assert!(e.starts_with(want), "{to}\n got: {e}\nwant: {want}");
    }
}

#[test]
fn positions_are_exact() {
    let e = err("hdr.ipv4.ttl = hdr.ipv4.ttl - 1;", "hdr.ipv4.ttl = 300;");
    // Line of the assignment in router.p4, column of the statement.
    let line = router()
        .lines()
        .position(|l| l.contains("hdr.ipv4.ttl = hdr.ipv4.ttl - 1;"))
        .unwrap()
        + 1;
    assert_eq!(
        e,
        format!("type error: value 300 does not fit in bit<8> at r.p4:{line}:9")
    );
    let no_pkg = router()
        .replace("V1Switch(", "// V1Switch(")
        .replace("         MyDeparser()) main;", "");
    assert_eq!(
        sluice_p4::compile(&no_pkg, "r.p4", Opts::default())
            .unwrap_err()
            .to_string(),
        "error: no `V1Switch(...) main;' instantiation at r.p4:1:1"
    );
}

/// `mark_to_drop` takes the block's standard_metadata and nothing else; anything else is a
/// type error at the argument (issue 18 audit: `mark_to_drop(hdr)` used to compile).
#[test]
fn mark_to_drop_takes_only_standard_metadata() {
    const CALL: &str = "mark_to_drop(standard_metadata);";
    let line = router().lines().position(|l| l.contains(CALL)).unwrap() + 1;
    let col = router().lines().nth(line - 1).unwrap().find(CALL).unwrap() + 1;
    for to in [
        "mark_to_drop(hdr);",
        "mark_to_drop(meta);",
        "mark_to_drop(hdr.ipv4);",
        "mark_to_drop(standard_metadata.egress_spec);",
        "mark_to_drop();",
        "mark_to_drop(standard_metadata, hdr);",
    ] {
        assert_eq!(
            err(CALL, to),
            format!("type error: mark_to_drop takes standard_metadata at r.p4:{line}:{col}"),
            "{to}"
        );
    }
    // The parameter may have any name.
    let s = router()
        .replace(
            "inout standard_metadata_t standard_metadata",
            "inout standard_metadata_t sm",
        )
        .replace("standard_metadata.", "sm.")
        .replace(CALL, "mark_to_drop(sm);");
    sluice_p4::compile(&s, "r.p4", Opts::default()).unwrap();
}

#[test]
fn parser_loops_are_bounded() {
    // A state that loops on itself: compiled (bounded), and a packet that keeps matching
    // is dropped as a parser loop, counted by the node.
    let s = router().replacen(
        "        packet.extract(hdr.ipv4);\n        transition accept;",
        "        packet.extract(hdr.ipv4);\n        transition select(hdr.ipv4.ttl) { 0: parse_ipv4; default: accept; }",
        1,
    );
    let p = sluice_p4::compile(&s, "loop.p4", Opts::default()).unwrap();
    assert!(p.parser_loops);
    let mut ts = sluice_p4::exec::ThreadState::new(&p).unwrap();
    let sh = sluice_p4::exec::Shared::new(&p);
    let mut pkt = vec![0u8; 14 + 20 * 100];
    pkt[12] = 8;
    assert_eq!(
        sluice_p4::exec::simulate(&p, &mut ts, &sh, &pkt, 0),
        sluice_p4::exec::Outcome::ParserLoop
    );
    // Short of data first: PacketTooShort, not a loop.
    assert_eq!(
        sluice_p4::exec::simulate(&p, &mut ts, &sh, &pkt[..200], 0),
        sluice_p4::exec::Outcome::Drop
    );
}

/// Messages the tests above leave out (issue 18: a test for every error message), each
/// with its kind and position.
#[test]
fn more_error_messages() {
    const ACT: &str = "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;";
    const ING: &str = "    action _drop() {\n        mark_to_drop(standard_metadata);\n    }\n    action set_nhop";
    const APPLY: &str = "            ipv4_lpm.apply();\n            forward.apply();";
    let decl = |d: &str| format!("    {d}\n{ING}");
    let cases: Vec<(&str, String, &str)> = vec![
        ("key = { hdr.ipv4.dstAddr: lpm; }", "key = { hdr.ipv4.dstAddr: lpm; hdr.ipv4.srcAddr: lpm; }".into(), "type error: a table has at most one lpm key at r.p4:"),
        (ING, format!("    action _drop() {{ }}\n{ING}"), "type error: duplicate action `_drop' at r.p4:"),
        ("    state parse_ipv4 {", "    state parse_ipv4 { transition accept; }\n    state parse_ipv4 {".into(), "type error: duplicate state `parse_ipv4' at r.p4:"),
        ("    state parse_ipv4 {", "    state accept { transition reject; }\n    state parse_ipv4 {".into(), "type error: state `accept' is reserved at r.p4:"),
        ("    bit<8>    protocol;", "    bit<8>    protocol;\n    bit<8>    protocol;".into(), "type error: duplicate field `protocol' at r.p4:"),
        ("mark_to_drop(standard_metadata);\n    }\n    action set_nhop", "return 1;\n    }\n    action set_nhop".into(), "not supported: return with a value at r.p4:"),
        (ACT, "hdr.ipv4.ttl = 8w1 / 8w0;".into(), "type error: division by zero at r.p4:"),
        ("typedef bit<9>  egressSpec_t;", "typedef nosuch_t  egressSpec_t;".into(), "type error: unknown type `nosuch_t' at r.p4:"),
        (ACT, "hdr.ipv4.ttl = nosuch;".into(), "type error: unknown name `nosuch' at r.p4:"),
        (ACT, "TYPE_IPV4 = 1;".into(), "type error: cannot assign to constant `TYPE_IPV4' at r.p4:"),
        (ACT, "forward.apply();".into(), "not supported: method call `forward.apply()' at r.p4:"),
        (ACT, "hdr.ipv4.ttl = \"x\";".into(), "not supported: string literal at r.p4:"),
        (ACT, "hdr.ipv4.ttl = 0x1ffffffffffffffff;".into(), "type error: integer literal wider than 64 bits at r.p4:"),
        ("mark_to_drop(standard_metadata);\n    }\n    action set_nhop", "mark_to_drop(standard_metadata, hdr);\n    }\n    action set_nhop".into(), "type error: mark_to_drop takes standard_metadata at r.p4:"),
        ("standard_metadata.checksum_error == 0", "standard_metadata.parser_error == error.Nosuch".into(), "type error: unknown error `Nosuch' at r.p4:"),
        (ING, decl("counter(4, CounterType.nosuch) c;"), "type error: unknown CounterType.nosuch at r.p4:"),
        (ING, decl("register(4) r;"), "type error: register needs a type argument at r.p4:"),
        (ING, decl("counter(0, CounterType.packets) c;"), "not supported: counter size 0 (1..=16777216) at r.p4:"),
        ("action set_dmac(macAddr_t dmac)", "action set_dmac(in macAddr_t dmac)".into(), "not supported: directional action parameter at r.p4:"),
        ("action set_dmac(macAddr_t dmac)", "action set_dmac(bool dmac)".into(), "not supported: action parameter that is not bit<N> at r.p4:"),
        (ACT, "hdr.ipv4.ttl = ~1;".into(), "not supported: negated or complemented integer without a width (write bit<N>) at r.p4:"),
        (ACT, "hdr.ipv4.ttl = (bit<8>)(1 << hdr.ipv4.ihl);".into(), "type error: shift of an integer without a width by a run-time value at r.p4:"),
        (ACT, "meta.routing.nhop_ipv4 = (bit<32>)(hdr.ethernet.dstAddr ++ hdr.ethernet.srcAddr);".into(), "not supported: concatenation wider than 64 bits (bit<96>) at r.p4:"),
        ("key = { meta.routing.nhop_ipv4: exact; }", "key = { hdr.ipv4.dstAddr: exact; hdr.ipv4.srcAddr: exact; hdr.ethernet.dstAddr: exact; hdr.ethernet.srcAddr: exact; }".into(), "not supported: table key of 160 bits (at most 128) at r.p4:"),
        (ACT, "hdr.ipv4 = hdr.ipv4;".into(), "not supported: assignment of a whole header or struct at r.p4:"),
        (APPLY, "            switch (forward.apply().action_run) { default: { } default: { } }".into(), "type error: duplicate default label at r.p4:"),
        (APPLY, "            switch (forward.apply().action_run) { _drop: { } _drop: { } }".into(), "type error: duplicate switch label at r.p4:"),
        ("hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);", "hdr.ipv4.hdrChecksum);".into(), "type error: checksum takes (condition, { fields }, checksum, algorithm) at r.p4:"),
        ("inout metadata meta,\n                inout standard_metadata_t standard_metadata) {\n    state", "inout metadata meta) {\n    state".into(), "type error: the v1model parser takes (packet_in, out H, inout M, inout standard_metadata_t) at r.p4:"),
        (ACT, "hdr.ipv4.ttl = hdr.ipv4 + 1;".into(), "type error: a header or struct is not a value here at r.p4:80:27"),
        (ACT, "hdr.ipv4.ttl = hdr.ipv4.ttl - (1 |+| 2);".into(), "type error: saturating operator needs a width at r.p4:"),
        ("    apply {\n        send_frame.apply();", "    apply {\n        send_frame.apply();\n        hdr.ipv4.ttl = send_frame.apply().hit ? 8w1 : 8w2;".into(), "not supported: `apply().hit' outside `if (t.apply().hit)' or `switch (t.apply().action_run)' at r.p4:"),
        ("}\n\ncontrol MyEgress", "}\n/* never closed\ncontrol MyEgress".into(), "syntax error: unterminated comment at r.p4:"),
    ];
    let mut bad = Vec::new();
    for (from, to, want) in &cases {
        let src = router();
        assert!(src.contains(from), "{from}");
        let e = match sluice_p4::compile(&src.replacen(from, to, 1), "r.p4", Opts::default()) {
            Ok(_) => "(compiled)".to_string(),
            Err(e) => e.to_string(),
        };
        if !e.starts_with(want) || !e.contains(" at r.p4:") {
            bad.push(format!("{to}\n got: {e}\nwant: {want}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}
