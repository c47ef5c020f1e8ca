// An L2 switch with static tables (no learning digest): the destination MAC picks the
// output port, unknown destinations are dropped, and the source MAC table counts known
// stations (direct counter) so `p4 table show` tells which hosts talk.
#include <core.p4>
#include <v1model.p4>

header ethernet_t {
    bit<48> dstAddr;
    bit<48> srcAddr;
    bit<16> etherType;
}

struct metadata { }

struct headers {
    ethernet_t ethernet;
}

parser SwParser(packet_in packet, out headers hdr, inout metadata meta,
                inout standard_metadata_t sm) {
    state start {
        packet.extract(hdr.ethernet);
        transition accept;
    }
}

control SwVerify(inout headers hdr, inout metadata meta) { apply { } }

control SwIngress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    direct_counter(CounterType.packets_and_bytes) station_hits;
    action forward(bit<9> port) {
        sm.egress_spec = port;
    }
    action drop() {
        mark_to_drop(sm);
    }
    table dmac {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { forward; drop; }
        default_action = drop();
        size = 4096;
    }
    table smac {
        key = { hdr.ethernet.srcAddr: exact; }
        actions = { NoAction; }
        counters = station_hits;
        default_action = NoAction();
    }
    apply {
        smac.apply();
        dmac.apply();
        // Never send a frame back where it came from.
        if (sm.egress_spec == sm.ingress_port) {
            drop();
        }
    }
}

control SwEgress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { }
}

control SwCompute(inout headers hdr, inout metadata meta) { apply { } }

control SwDeparser(packet_out packet, in headers hdr) {
    apply { packet.emit(hdr.ethernet); }
}

V1Switch(SwParser(), SwVerify(), SwIngress(), SwEgress(), SwCompute(), SwDeparser()) main;
