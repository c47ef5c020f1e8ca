// Control flow for the executors' and the generator's differential tests
// (tests/vector.rs): switch on action_run, hit/miss, exit and return, nested action calls
// with arguments, slices, concatenation, ?:, a ternary key and an indexed counter.
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> typ; }
struct headers { eth_t eth; }
struct metadata { bit<16> a; bit<8> b; }
parser P(packet_in pk, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pk.extract(hdr.eth);
        transition select(hdr.eth.typ) {
            0x0800 &&& 0xff00: accept;
            0x1000 .. 0x10ff: accept;
            0x2000: reject;
            default: accept;
        }
    }
}
control V(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    counter(16, CounterType.packets_and_bytes) c;
    action inner(bit<8> x) {
        meta.b = x + 1;
        if (x == 7) { return; }
        hdr.eth.src[7:0] = x;
    }
    action outer(bit<8> y, bit<9> port) {
        inner(y ^ 3);
        sm.egress_spec = port;
    }
    action stop() { sm.egress_spec = 3; exit; }
    action nop() { }
    table t {
        key = { hdr.eth.dst[7:0]: exact; hdr.eth.typ: ternary; }
        actions = { outer; stop; nop; }
        default_action = nop();
    }
    table u {
        key = { meta.b: exact; }
        actions = { nop; }
        default_action = nop();
        const entries = { 8w4: nop(); }
    }
    apply {
        sm.egress_spec = 1;
        meta.a = hdr.eth.typ |+| 16w0xff00;
        switch (t.apply().action_run) {
            outer: { hdr.eth.dst[15:8] = meta.b; }
            stop: { sm.egress_spec = 5; }
            default: { if (!u.apply().hit) { hdr.eth.typ = ((meta.a ++ 8w0) == 24w0) ? 16w1 : 16w2; } }
        }
        if (hdr.eth.dst[0:0] == 1) { return; }
        c.count((bit<32>) hdr.eth.src[3:0]);
        if (sm.ingress_port == 2) { mark_to_drop(sm); }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { if (sm.egress_port == 5) { hdr.eth.src[47:40] = 8w0xee; exit; } }
}
control C(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pk, in headers hdr) { apply { pk.emit(hdr.eth); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
