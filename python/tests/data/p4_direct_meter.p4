// An L2 forwarder with a direct meter on its table: each entry's own two-rate meter
// colours the frames it forwards (the colour is added to the EtherType), red ones are
// dropped. Configured per entry with `p4 table meter` / `p4_table_entry_meter_set`.
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
struct headers { ethernet_t ethernet; }
struct metadata { bit<2> colour; }

parser P(packet_in pkt, out headers hdr, inout metadata meta,
         inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.ethernet); transition accept; }
}
control V(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    direct_meter<bit<2>>(MeterType.packets) per_station;
    action forward(bit<9> port) {
        per_station.read(meta.colour);
        sm.egress_spec = port;
    }
    action unmetered(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    table stations {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { forward; unmetered; drop; }
        meters = per_station;
        default_action = drop();
        size = 64;
    }
    apply {
        stations.apply();
        if (meta.colour == 2) {
            mark_to_drop(sm);
        }
        hdr.ethernet.etherType = hdr.ethernet.etherType + (bit<16>) meta.colour;
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.ethernet); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
