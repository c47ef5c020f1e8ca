// An ACL / firewall in front of IPv4 forwarding: a ternary + range ACL (priority decides),
// per-rule hit counts in an indexed counter, a register that remembers the last denied
// source, a meter policing one traffic class, then LPM forwarding with a MAC rewrite.
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
header l4_t { bit<16> srcPort; bit<16> dstPort; }

struct metadata {
    bit<16> rule;
    bit<2>  colour;
}
struct headers { ethernet_t ethernet; ipv4_t ipv4; l4_t l4; }

parser FwParser(packet_in pkt, out headers hdr, inout metadata meta,
                inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: ipv4;
            default: accept;
        }
    }
    state ipv4 {
        pkt.extract(hdr.ipv4);
        // TCP (6) and UDP (17) ports, first fragments only.
        transition select(hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (0, 6): l4;
            (0, 17): l4;
            default: accept;
        }
    }
    state l4 {
        pkt.extract(hdr.l4);
        transition accept;
    }
}

control FwVerify(inout headers hdr, inout metadata meta) { apply { } }

control FwIngress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    counter(1024, CounterType.packets_and_bytes) rule_hits;
    register<bit<32>>(1) last_denied;
    meter(16, MeterType.packets) policer;

    action deny(bit<16> rule) {
        meta.rule = rule;
        last_denied.write(0, hdr.ipv4.srcAddr);
        mark_to_drop(sm);
    }
    action allow(bit<16> rule) {
        meta.rule = rule;
    }
    action police(bit<16> rule, bit<32> class) {
        meta.rule = rule;
        policer.execute_meter(class, meta.colour);
    }
    table acl {
        key = {
            hdr.ipv4.srcAddr: ternary;
            hdr.ipv4.dstAddr: ternary;
            hdr.ipv4.protocol: ternary;
            hdr.l4.dstPort: range;
        }
        actions = { allow; deny; police; }
        default_action = allow(0);
        size = 4096;
    }
    action route(bit<9> port, bit<48> dmac, bit<48> smac) {
        sm.egress_spec = port;
        hdr.ethernet.dstAddr = dmac;
        hdr.ethernet.srcAddr = smac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    action unroutable() { mark_to_drop(sm); }
    table fib {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { route; unroutable; }
        default_action = unroutable();
    }
    apply {
        if (!hdr.ipv4.isValid() || hdr.ipv4.ttl <= 1) {
            mark_to_drop(sm);
            exit;
        }
        switch (acl.apply().action_run) {
            deny: { }
            default: {
                if (meta.colour == 2) {
                    mark_to_drop(sm);
                } else {
                    fib.apply();
                }
            }
        }
        rule_hits.count((bit<32>) meta.rule);
    }
}

control FwEgress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { }
}

control FwCompute(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control FwDeparser(packet_out pkt, in headers hdr) {
    apply { pkt.emit(hdr); }
}

V1Switch(FwParser(), FwVerify(), FwIngress(), FwEgress(), FwCompute(), FwDeparser()) main;
