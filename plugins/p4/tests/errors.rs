//! Every compile error names the construct and file:line:column.

use sluice_p4::ir::Opts;

/// Edit anchors in router.p4: the TTL decrement in `set_nhop` (line 80), the control
/// declarations before `set_nhop` in MyIngress, the end of state `parse_ipv4`.
const ACT: &str = "hdr.ipv4.ttl = hdr.ipv4.ttl - 1;";
const ING: &str =
    "    action _drop() {\n        mark_to_drop(standard_metadata);\n    }\n    action set_nhop";
const PST: &str = "        packet.extract(hdr.ipv4);\n        transition accept;";

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

/// Compiles router.p4 after each `(from, to)` edit (first occurrence); the error text, or
/// "(compiled)".
fn edited(edits: &[(&str, String)]) -> String {
    let mut s = router();
    for (from, to) in edits {
        assert!(s.contains(from), "{from}");
        s = s.replacen(from, to, 1);
    }
    match sluice_p4::compile(&s, "r.p4", Opts::default()) {
        Ok(_) => "(compiled)".to_string(),
        Err(e) => e.to_string(),
    }
}

/// The rest of the compile-error messages (issue 18: every message named by a test), each
/// with its kind, text and exact file:line:col. With this test every reachable message of
/// the 179 distinct `CompileError::{syntax,unsupported,ty,program}` messages (the lexer's
/// integer-literal ones included) is named by a test; 177 are reachable.
///
/// Messages no source can reach (internal invariants), so not tested:
/// - compile.rs `constant ... needs a compile-time value' for a top-level `const': its
///   scope holds no run-time name (no block parameters), so every name is a constant and
///   the value always folds; the same message for a control-level `const' is tested below,
///   for a `const' in a block in `const_in_a_block_is_a_constant'.
/// - compile.rs `extract outside the parser': only the parser has a `packet_in' parameter
///   (v1model block parameters are checked first), so `packet.extract' elsewhere is an
///   unknown name.
/// - compile.rs `emit outside the deparser': only the deparser has a `packet_out', and its
///   body is compiled by the deparser path (`deparser statement other than packet.emit').
///
/// `'{f}'' (calls of known v1model externs outside the subset) is `not supported: `clone''
/// in `unsupported_constructs`; `duplicate declaration' is in
/// `const_in_a_block_is_a_constant`; `access to header field ... spanning more than 8 bytes' is
/// in `wide_header_fields_refused_where_accessed`.
#[test]
fn remaining_error_messages() {
    const APPLY: &str = "            ipv4_lpm.apply();\n            forward.apply();";
    const DEP: &str = "        packet.emit(hdr.ethernet);";
    const SZ: &str = "        size = 1048576;";
    let decl = |d: &str| format!("    {d}\n{ING}");
    let one = |from: &'static str, to: String| vec![(from, to)];
    let many_fields = |n: usize, ty: &str| {
        (0..n)
            .map(|i| format!("    {ty} f{i};\n"))
            .collect::<String>()
    };
    let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
        // lexer
        (one(ING, format!("    @name(\"a\n\")\n{ING}")), "syntax error: annotation spans lines at r.p4:74:5"),
        (one(SZ, format!("{SZ}\n        const entries = {{ @priority(x) 1 : _drop(); }}")), "syntax error: bad @priority value `x' at r.p4:89:27"),
        (one(ACT, "hdr.ipv4.ttl = \"x;".into()), "syntax error: unterminated string at r.p4:80:24"),
        (one(ACT, "hdr.ipv4.ttl = $;".into()), "syntax error: unexpected character `$' at r.p4:80:24"),
        (one(ACT, "hdr.ipv4.ttl = 12a;".into()), "syntax error: bad digit `a' in integer literal at r.p4:80:24"),
        (one(ACT, format!("hdr.ipv4.ttl = 0x{};", "f".repeat(33))), "syntax error: integer literal too large at r.p4:80:24"),
        (one(ACT, "hdr.ipv4.ttl = 0x;".into()), "syntax error: integer literal without digits at r.p4:80:24"),
        (one(ACT, "hdr.ipv4.ttl = 8s1;".into()), "syntax error: signed literals (`Ns...') are not supported at r.p4:80:24"),
        (one(ACT, "hdr.ipv4.ttl = 99999999999w1;".into()), "syntax error: bad literal width at r.p4:80:24"),
        (one(ACT, "hdr.ipv4.ttl = 65w1;".into()), "syntax error: literal width 65 not in 1..=64 at r.p4:80:24"),
        // parser
        (one("struct metadata {", "@priority(1)\nstruct metadata {".into()), "syntax error: @priority outside a table entry at r.p4:38:1"),
        (one("struct metadata {", "42;\nstruct metadata {".into()), "syntax error: expected a declaration, found `42' at r.p4:38:1"),
        (one("V1Switch(MyParser()", "V1Switch<headers>(MyParser()".into()), "not supported: package with type arguments at r.p4:144:1"),
        (one("bit<8>    ttl;", "bit<x>    ttl;".into()), "syntax error: expected a width, found `x' at r.p4:27:5"),
        (one("bit<8>    ttl;", "bit<65>    ttl;".into()), "not supported: bit<65> (widths 1..=64 only) at r.p4:27:5"),
        (one("    state start {", "    value_set<bit<16>>(4) vs;\n    state start {".into()), "not supported: value_set at r.p4:49:5"),
        (one(ACT, "for (;;) { }".into()), "not supported: `for' statement at r.p4:80:9"),
        (one(ACT, "while (true) { }".into()), "not supported: `while' statement at r.p4:80:9"),
        (one(ACT, "hdr.ipv4.ttl;".into()), "syntax error: expression statement is neither an assignment nor a call at r.p4:80:9"),
        (one(ACT, "hdr.ipv4.ttl = f<bit<8>>(1);".into()), "not supported: call with type arguments at r.p4:80:25"),
        (one(ACT, "hdr.ipv4.ttl = ;".into()), "syntax error: expected an expression, found `;' at r.p4:80:24"),
        // declarations and types
        (one("typedef bit<9>  egressSpec_t;", "typedef bit<9>  egressSpec_t;\ntypedef bit<9>  egressSpec_t;".into()), "type error: duplicate type `egressSpec_t' at r.p4:10:1"),
        (one("header ethernet_t {", "header ethernet_t { bit<8> x; }\nheader ethernet_t {".into()), "type error: duplicate type `ethernet_t' at r.p4:14:1"),
        (one("bit<8>    ttl;", "bool      ttl;".into()), "not supported: header field of type bool at r.p4:27:5"),
        (one("V1Switch(MyParser()", "V1Switch(NoParser()".into()), "type error: no parser `NoParser' at r.p4:144:10"),
        (one("MyVerifyChecksum(),", "NoCheck(),".into()), "type error: no control `NoCheck' at r.p4:144:22"),
        (one("out headers hdr, inout metadata meta,\n", "out bit<8> hdr, inout metadata meta,\n".into()), "type error: expected a struct type at r.p4:47:35"),
        (one(ACT, "headers h;".into()), "type error: `headers' is a header or struct, not a value type at r.p4:80:9"),
        (one("    ipv4_t     ipv4;\n}", format!("    ipv4_t     ipv4;\n{}}}", many_fields(20, "ethernet_t"))), "not supported: headers larger than 256 bytes in total at r.p4:60:5"),
        (one("    ipv4_t     ipv4;\n}", "    ipv4_t     ipv4;\n    bit<8> x;\n}".into()), "not supported: field `x' of the headers struct that is not a header at r.p4:45:5"),
        (one("    routing_metadata_t routing;", "    routing_metadata_t routing;\n    ethernet_t e;".into()), "not supported: header `e' in the metadata struct at r.p4:40:5"),
        (one("    routing_metadata_t routing;", format!("    routing_metadata_t routing;\n{}", many_fields(130, "bit<8>"))), "not supported: more than 128 metadata fields at r.p4:167:5"),
        (one("control MyVerifyChecksum(inout headers hdr, inout metadata meta)", "control MyVerifyChecksum(inout headers hdr, inout metadata meta, in bit<8> x)".into()), "not supported: parameter `x' of type Bit(8) (v1model block parameters only) at r.p4:62:66"),
        // expressions
        (one(ACT, "if (meta.routing.isValid()) { }".into()), "type error: isValid() needs a header at r.p4:80:17"),
        (one(ING, decl("counter(hdr.ipv4.ttl, CounterType.packets) c;")), "type error: expected a compile-time constant at r.p4:74:21"),
        (one(APPLY, "            bool b = forward.apply();".into()), "not supported: table apply inside an expression at r.p4:100:35"),
        (one(ACT, "hdr.ipv4.ttl = { 1 };".into()), "not supported: list expression outside a checksum field list at r.p4:80:24"),
        (one(ACT, "hdr.ipv4.ttl = (bit<8>)(true[1:0]);".into()), "type error: slice of bool at r.p4:80:37"),
        (one(ACT, "bool b = (bool)hdr.ipv4.ttl;".into()), "type error: cannot cast bit<8> to bool at r.p4:80:18"),
        (one(ACT, "hdr.ipv4.ttl = hdr.ipv4.ttl ? 8w1 : 8w2;".into()), "type error: condition is not bool at r.p4:80:32"),
        (one(ACT, "if (hdr.ipv4.ttl && true) { }".into()), "type error: operands of `&&' must be bool, found bit<8> and bool at r.p4:80:26"),
        (one(ACT, "hdr.ipv4.ttl = hdr.ipv4.ttl << true;".into()), "type error: shift by bool at r.p4:80:37"),
        (one(ACT, "hdr.ipv4.totalLen = hdr.ipv4.ttl ++ true;".into()), "type error: `++' needs bit<N> operands, found bit<8> and bool at r.p4:80:42"),
        // parser
        (one("TYPE_IPV4: parse_ipv4;", "8w1: parse_ipv4;".into()), "type error: key set is bit<8>, key is bit<16> at r.p4:52:13"),
        (one(PST, "        exit;\n        transition accept;".into()), "type error: exit in a parser at r.p4:57:9"),
        (one(PST, "        return;\n        transition accept;".into()), "type error: return in a parser at r.p4:57:9"),
        // deparser
        (one("control MyDeparser(packet_out packet, in headers hdr) {", "control MyDeparser(packet_out packet, in headers hdr) {\n    bit<8> x = 1;".into()), "not supported: declarations in the deparser at r.p4:137:1"),
        (one(DEP, "        packet.emit(hdr.ethernet.etherType);".into()), "type error: emit needs a header or a struct of headers at r.p4:139:33"),
        // actions, tables, externs
        (one("action set_dmac(macAddr_t dmac)", format!("action set_dmac(macAddr_t dmac{})", (0..8).map(|i| format!(", bit<8> p{i}")).collect::<String>())), "not supported: action with more than 8 parameters at r.p4:82:114"),
        (one("    table forward {", "    table ipv4_lpm { actions = { _drop; } }\n    table forward {".into()), "type error: duplicate table `ipv4_lpm' at r.p4:91:5"),
        (one(ING, decl("register<bit<8>>() r;")), "type error: `register' needs a size at r.p4:74:5"),
        (one(ING, decl("counter(4) c;")), "type error: `counter' needs a CounterType at r.p4:74:5"),
        (one(ING, decl("direct_meter<bit<1>>(MeterType.packets) m;")), "type error: direct_meter needs a bit<N> type argument, N >= 2 at r.p4:74:5"),
        (one(ING, decl("Random(4) r;")), "not supported: extern `Random' at r.p4:74:5"),
        (one("actions = { set_dmac; _drop; }", "actions = { }".into()), "type error: table `forward' has no actions at r.p4:91:5"),
        (one(SZ, format!("{SZ}\n        const entries = {{ (1, 2) : _drop(); }}")), "type error: entry has 2 key sets, table has 1 keys at r.p4:89:27"),
        (one(SZ, format!("{SZ}\n        const entries = {{ 0x0a000000 &&& 0xff00ff00 : _drop(); }}")), "type error: lpm mask is not a prefix at r.p4:89:27"),
        (vec![(ING, decl("counter(4, CounterType.packets) c;")), ("        size = 512;", "        size = 512;\n        counters = c;".into())], "type error: `c' is not a direct_counter at r.p4:96:20"),
        (one(APPLY, "            if (hdr.ipv4.isValid().hit) { }".into()), "type error: `.hit' of something that is not a table apply at r.p4:100:35"),
        (one(APPLY, "            switch (forward.apply().action_run) { _drop: }".into()), "type error: switch label without a body at the end at r.p4:100:51"),
        (vec![(ING, decl("register<bit<8>>(4) r;")), (ACT, "r.read(hdr.ipv4.ttl, true);".into())], "type error: index of type bool at r.p4:81:30"),
        (vec![(ING, decl("register<bit<8>>(4) r;")), (ACT, "r.read(hdr.ipv4.totalLen, 0);".into())], "type error: register `r' is bit<8>, destination is bit<16> at r.p4:81:24"),
        (vec![(ING, decl("meter(4, MeterType.packets) m;")), (ACT, "bit<1> c; m.execute_meter(0, c);".into())], "type error: meter colour destination must be bit<2> or wider at r.p4:81:38"),
        (vec![(ING, decl("counter(4, CounterType.packets) c;")), (ACT, "c.foo(0);".into())], "not supported: method `foo' of `c' at r.p4:81:9"),
        // checksums
        (one("select(hdr.ethernet.etherType)", "select(hdr.ethernet.etherType, 1)".into()), "type error: select on int at r.p4:51:51"),
        (one("select(hdr.ethernet.etherType)", format!("select({})", ["hdr.ethernet.etherType"; 9].join(", "))), "not supported: select on more than 8 keys at r.p4:51:231"),
        (one("const bit<16> TYPE_IPV4 = 0x800;", "const register<bit<8>> Y = 1;\nconst bit<16> TYPE_IPV4 = 0x800;".into()), "type error: `register<...>' is not a value type at r.p4:11:1"),
        (one("out headers hdr, inout metadata meta,\n", "out ethernet_t hdr, inout metadata meta,\n".into()), "type error: `ethernet_t' is not a struct of headers at r.p4:47:35"),
        (one("out headers hdr, inout metadata meta,\n", "out headers hdr, inout ethernet_t meta,\n".into()), "type error: `ethernet_t' is not a struct at r.p4:47:52"),
        (vec![("struct metadata {", "header tiny_t { bit<8> x; }\nstruct metadata {".into()), ("    ipv4_t     ipv4;\n}", format!("    ipv4_t     ipv4;\n{}}}", many_fields(63, "tiny_t")))], "not supported: more than 64 header instances at r.p4:108:5"),
        (one(PST, "        hdr.ipv4.ttl = packet.x;\n        transition accept;".into()), "type error: `packet' is a packet at r.p4:57:30"),
        (one(PST, "        hdr.ipv4.ttl = packet;\n        transition accept;".into()), "type error: `packet' is not a value at r.p4:57:24"),
        (one(ACT, "hdr.ipv4.ttl = hdr.ipv4.ttl[0];".into()), "not supported: header stack index at r.p4:80:36"),
        (one(ACT, "hdr.ipv4.isValid() = true;".into()), "type error: not an assignable expression at r.p4:80:25"),
        (vec![(ING, decl("direct_meter<bit<2>>(MeterType.packets) dm;")), ("action set_dmac(macAddr_t dmac)", format!("action set_dmac(macAddr_t dmac{})", (1..8).map(|i| format!(", bit<8> p{i}")).collect::<String>())), ("hdr.ethernet.dstAddr = dmac;", "hdr.ethernet.dstAddr = dmac;\n        dm.read(hdr.ipv4.ttl);".into()), ("        size = 512;", "        size = 512;\n        meters = dm;".into())], "not supported: direct_meter read in an action with 8 parameters at r.p4:85:9"),
        (vec![(ING, decl("direct_meter<bit<2>>(MeterType.packets) dm;")), ("        size = 512;", "        size = 16777216;\n        meters = dm;".into())], "not supported: table of 16777216 entries with a direct_meter (at most 16777215) at r.p4:92:5"),
        (one(PST, "        packet.extract(hdr.ipv4, 32);\n        transition accept;".into()), "not supported: extract with a variable-size header at r.p4:57:9"),
        (one(ACT, "f()();".into()), "not supported: call of an expression at r.p4:80:9"),
        (one("HashAlgorithm.csum16", "1".into()), "type error: expected HashAlgorithm.csum16 at r.p4:68:35"),
        (one(SZ, format!("{SZ}\n        const entries = {{ 1 .. 2 : _drop(); }}")), "type error: key set does not fit a lpm key at r.p4:89:27"),
        (one(SZ, "        size = x;".into()), "syntax error: expected a size, found `x' at r.p4:88:9"),
        (one(ACT, (0..130).map(|i| format!("bit<8> l{i} = 1; ")).collect::<String>()), "not supported: more than 128 metadata fields and locals at r.p4:80:1786"),
        (one(ING, decl("bit<8>(4) x;")), "type error: bad instance type at r.p4:74:5"),
        (one("    routing_metadata_t routing;", format!("    routing_metadata_t routing;\n{}", many_fields(126, "bit<8>"))), "not supported: program state of 143 metadata slots (at most 128) at r.p4:271:1"),
        (one(ING, decl("const bit<8> Y = hdr.ipv4.ttl;")), "type error: constant `Y' needs a compile-time value, found run-time value `hdr.ipv4.ttl' at r.p4:74:22"),
        (one(ACT, "TYPE_IPV4.x = 1;".into()), "type error: not an assignable field at r.p4:80:18"),
        (one("    apply {\n        if (hdr.ipv4.isValid()", "    action late() { forward.apply(); }\n    apply {\n        if (hdr.ipv4.isValid()".into()), "type error: table apply inside an action at r.p4:97:21"),
        (one(ACT, format!("hdr.ipv4.ttl = {}1{};", "(".repeat(300), ")".repeat(300))), "not supported: nesting deeper than 64 at r.p4:80:87"),
        (one("verify_checksum(hdr.ipv4.isValid(),", "verify_checksum(hdr.ipv4.ttl,".into()), "type error: checksum condition is not bool at r.p4:64:33"),
        (one("hdr.ipv4.hdrChecksum, HashAlgorithm", "hdr.ipv4.ttl, HashAlgorithm".into()), "type error: checksum field must be bit<16> at r.p4:68:21"),
        (one("{ hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,\n              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,\n              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr }", "hdr.ipv4.ttl".into()), "type error: expected a field list { ... } at r.p4:65:21"),
    ];
    assert_edits(&cases);
}

/// Compiles router.p4 after each case's edits; fails listing every case whose result (the
/// error text, or "(compiled)") is not the one wanted.
fn assert_edits(cases: &[(Vec<(&str, String)>, &str)]) {
    let mut bad = Vec::new();
    for (edits, want) in cases {
        let e = edited(edits);
        if e != *want {
            bad.push(format!(
                "{:?}\n got: {e}\nwant: {want}",
                edits.last().unwrap().1
            ));
        }
    }
    assert!(bad.is_empty(), "{} bad:\n{}", bad.len(), bad.join("\n\n"));
}

/// A `const` in a block (an action body here) is a constant of that block (P4-16 §7.1.6):
/// a run-time initializer is an error naming the run-time part at its file:line:col (it
/// was compiled as a variable), a constant one is a true constant (usable where only
/// constants are, in no metadata slot), and it cannot be assigned.
#[test]
fn const_in_a_block_is_a_constant() {
    const APPLY: &str = "            ipv4_lpm.apply();";
    let one = |to: &str| vec![(ACT, to.to_string())];
    let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
        (one("const bit<8> y = hdr.ipv4.ttl;"), "type error: constant `y' needs a compile-time value, found run-time value `hdr.ipv4.ttl' at r.p4:80:26"),
        (one("const bit<8> y = 8w1 + (hdr.ipv4.ttl & 3);"), "type error: constant `y' needs a compile-time value, found run-time value `hdr.ipv4.ttl' at r.p4:80:33"),
        (one("const bit<32> y = nhop_ipv4;"), "type error: constant `y' needs a compile-time value, found run-time value `nhop_ipv4' at r.p4:80:27"),
        (one("const bool y = hdr.ipv4.isValid();"), "type error: constant `y' needs a compile-time value, found run-time value `hdr.ipv4.isValid()' at r.p4:80:24"),
        (one("bit<8> v = 1; { const bit<8> y = v; }"), "type error: constant `y' needs a compile-time value, found run-time value `v' at r.p4:80:42"),
        (one("const bit<8> y = 1; y = 2;"), "type error: cannot assign to constant `y' at r.p4:80:29"),
        (one("{ const bit<8> y = 1; } hdr.ipv4.ttl = y;"), "type error: unknown name `y' at r.p4:80:48"),
        // A true constant: a slice bound, which must be known at compile time.
        (one("const bit<8> H = 3; hdr.ipv4.ttl = (bit<8>)hdr.ipv4.ttl[H:0];"), "(compiled)"),
        // Shadowing an outer constant inside a block: the inner value is used (a slice of
        // 5 bits fits bit<5> only with the inner H = 4).
        (one("const bit<8> H = 3; { const bit<8> H = 4; bit<5> z = hdr.ipv4.ttl[H:0]; }"), "(compiled)"),
        (one("const bit<8> H = 4; { const bit<8> H = 3; bit<5> z = hdr.ipv4.ttl[H:0]; }"), "type error: expected bit<5>, found bit<4> at r.p4:80:74"),
        // A name declared twice in one block (P4-16 refuses a redeclaration in one scope).
        (one("const bit<8> y = 1; const bit<8> y = 2;"), "type error: duplicate declaration `y' at r.p4:80:29"),
        (one("bit<8> y = 1; const bit<8> y = 2;"), "type error: duplicate declaration `y' at r.p4:80:23"),
        (one("const bit<8> y = 1; bit<8> y = 2;"), "type error: duplicate declaration `y' at r.p4:80:29"),
        (one("bit<8> y = 1; { bit<8> y = 2; }"), "(compiled)"),
        // In a parser state and in `apply` too.
        (vec![(PST, "        packet.extract(hdr.ipv4);\n        const bit<8> t = hdr.ipv4.ttl;\n        transition accept;".into())], "type error: constant `t' needs a compile-time value, found run-time value `hdr.ipv4.ttl' at r.p4:58:26"),
        (vec![(APPLY, "            const bit<8> P = 1; ipv4_lpm.apply(); hdr.ipv4.ttl = (bit<8>)hdr.ipv4.ttl[P:0];".into())], "(compiled)"),
        // A control's `const` is its own: not visible in the next control; declared twice
        // in a control, or as a constant and a variable, it is an error.
        (vec![(ING, format!("    const bit<8> LEAK = 7;\n{ING}")), ("        hdr.ethernet.srcAddr = smac;", "        hdr.ethernet.srcAddr = smac;\n        hdr.ipv4.ttl = LEAK;".into())], "type error: unknown name `LEAK' at r.p4:113:24"),
        (vec![(ING, format!("    const bit<8> LEAK = 7;\n{ING}")), (ACT, "hdr.ipv4.ttl = LEAK;".into())], "(compiled)"),
        (vec![(ING, format!("    const bit<8> K = 7;\n    const bit<8> K = 8;\n{ING}"))], "type error: duplicate declaration `K' at r.p4:75:5"),
        (vec![(ING, format!("    bit<8> K = 7;\n    const bit<8> K = 8;\n{ING}"))], "type error: duplicate declaration `K' at r.p4:75:5"),
        (vec![(ING, format!("    const bit<8> K = 7;\n    bit<8> K = 8;\n{ING}"))], "type error: duplicate declaration `K' at r.p4:75:5"),
        // Constants take no metadata slot: 200 of them fit where 128 locals do not.
        (one(&(0..200).map(|i| format!("const bit<8> k{i} = {i}; ")).collect::<String>()), "(compiled)"),
    ];
    assert_edits(&cases);
}

/// A header field spanning 9 bytes (a `bit<63>` at bit 4, a `bit<60>` at bit 5) is legal
/// P4-16: a header holding one compiles while it is only extracted and emitted (it did on
/// b31c17e). Reading or writing the field (an expression, an assignment, a table key, a
/// checksum list) is refused, naming the field where its text starts; up to 8 bytes an
/// access compiles.
#[test]
fn wide_header_fields_refused_where_accessed() {
    const IHL: &str = "    bit<4>    ihl;";
    const KEY: &str = "key = { hdr.ipv4.dstAddr: lpm; }";
    const CSUM: &str = "hdr.ipv4.protocol, hdr.ipv4.srcAddr";
    let wide = |more: Vec<(&'static str, String)>| {
        let mut v = vec![(IHL, format!("    bit<63>   x;\n    bit<1>    y;\n{IHL}"))];
        v.extend(more);
        v
    };
    let msg = |at: &str| {
        format!("not supported: access to header field `hdr.ipv4.x' (bit<63> at bit 4 of its header) spanning more than 8 bytes at r.p4:{at}")
    };
    let cases: Vec<(Vec<(&str, String)>, String)> = vec![
        // Declared, extracted and emitted, never read or written.
        (wide(vec![]), "(compiled)".into()),
        // A separate header of 9 bytes with a 9-byte field, extracted and emitted.
        (vec![
            ("struct headers {", "header pad_t { bit<4> a; bit<61> b; bit<3> c; bit<4> d; }\nstruct headers {".into()),
            ("    ipv4_t     ipv4;\n}", "    ipv4_t     ipv4;\n    pad_t      pad;\n}".into()),
            ("        packet.extract(hdr.ipv4);", "        packet.extract(hdr.ipv4);\n        packet.extract(hdr.pad);".into()),
            ("        packet.emit(hdr.ipv4);", "        packet.emit(hdr.ipv4);\n        packet.emit(hdr.pad);".into()),
        ], "(compiled)".into()),
        (wide(vec![(ACT, "hdr.ipv4.x = 1;".into())]), msg("82:9")),
        (wide(vec![(ACT, "hdr.ipv4.ttl = (bit<8>)hdr.ipv4.x;".into())]), msg("82:32")),
        (wide(vec![(KEY, "key = { hdr.ipv4.x: exact; }".into())]), msg("88:17")),
        (wide(vec![(CSUM, "hdr.ipv4.protocol, hdr.ipv4.x, hdr.ipv4.srcAddr".into())]), msg("69:34")),
        (vec![(IHL, format!("    bit<1>    y;\n    bit<60>   x;\n    bit<3>    z;\n{IHL}")), (ACT, "hdr.ipv4.x = 1;".into())],
            "not supported: access to header field `hdr.ipv4.x' (bit<60> at bit 5 of its header) spanning more than 8 bytes at r.p4:83:9".into()),
        // Up to 8 bytes an access compiles: bit<64> on a byte boundary, bit<60> at bit 4.
        (vec![(IHL, format!("    bit<4>    y;\n    bit<64>   x;\n    bit<4>    w;\n{IHL}")), (ACT, "hdr.ipv4.x = hdr.ipv4.x + 1;".into())], "(compiled)".into()),
        (vec![(IHL, format!("    bit<60>   x;\n    bit<4>    y;\n{IHL}")), (ACT, "hdr.ipv4.x = hdr.ipv4.x + 1;".into())], "(compiled)".into()),
    ];
    let cases: Vec<(Vec<(&str, String)>, &str)> =
        cases.iter().map(|(e, w)| (e.clone(), w.as_str())).collect();
    assert_edits(&cases);
}
