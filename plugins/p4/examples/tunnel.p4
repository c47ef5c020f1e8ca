// IPv4-in-IPv4 tunnel endpoint: packets to a tunnelled prefix get an outer IPv4 header
// (setValid) and leave on the tunnel's port; IP-in-IP packets addressed to the endpoint
// lose their outer header (setInvalid) and are forwarded on the inner destination.
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}

struct metadata { }
struct headers {
    ethernet_t ethernet;
    ipv4_t     outer;
    ipv4_t     inner;
}

parser TunParser(packet_in pkt, out headers hdr, inout metadata meta,
                 inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: ip;
            default: accept;
        }
    }
    state ip {
        // Peek at the protocol: IP-in-IP (4) carries an inner header.
        pkt.extract(hdr.outer);
        transition select(hdr.outer.protocol) {
            4: inner;
            default: accept;
        }
    }
    state inner {
        pkt.extract(hdr.inner);
        transition accept;
    }
}

control TunVerify(inout headers hdr, inout metadata meta) { apply { } }

control TunIngress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    action drop() { mark_to_drop(sm); }
    action encap(bit<32> src, bit<32> dst, bit<9> port, bit<48> dmac, bit<48> smac) {
        // The packet's IPv4 header becomes the inner one.
        hdr.inner.setValid();
        hdr.inner.version = hdr.outer.version;
        hdr.inner.ihl = hdr.outer.ihl;
        hdr.inner.diffserv = hdr.outer.diffserv;
        hdr.inner.totalLen = hdr.outer.totalLen;
        hdr.inner.identification = hdr.outer.identification;
        hdr.inner.flags = hdr.outer.flags;
        hdr.inner.fragOffset = hdr.outer.fragOffset;
        hdr.inner.ttl = hdr.outer.ttl - 1;
        hdr.inner.protocol = hdr.outer.protocol;
        hdr.inner.hdrChecksum = hdr.outer.hdrChecksum;
        hdr.inner.srcAddr = hdr.outer.srcAddr;
        hdr.inner.dstAddr = hdr.outer.dstAddr;
        hdr.outer.ihl = 5;
        hdr.outer.diffserv = 0;
        hdr.outer.totalLen = hdr.inner.totalLen + 20;
        hdr.outer.identification = 0;
        hdr.outer.flags = 0;  // DF clear, as Sluice's native IPIP encap (test_p4.py)
        hdr.outer.fragOffset = 0;
        hdr.outer.ttl = 64;
        hdr.outer.protocol = 4;
        hdr.outer.srcAddr = src;
        hdr.outer.dstAddr = dst;
        sm.egress_spec = port;
        hdr.ethernet.dstAddr = dmac;
        hdr.ethernet.srcAddr = smac;
    }
    action decap(bit<9> port, bit<48> dmac, bit<48> smac) {
        hdr.outer.setInvalid();
        hdr.inner.ttl = hdr.inner.ttl - 1;
        sm.egress_spec = port;
        hdr.ethernet.dstAddr = dmac;
        hdr.ethernet.srcAddr = smac;
    }
    table tunnel_encap {
        key = { hdr.outer.dstAddr: lpm; }
        actions = { encap; drop; }
        default_action = drop();
    }
    table tunnel_decap {
        key = { hdr.outer.dstAddr: exact; hdr.inner.dstAddr: lpm; }
        actions = { decap; drop; }
        default_action = drop();
    }
    apply {
        if (!hdr.outer.isValid() || hdr.outer.ttl <= 1) {
            drop();
        } else if (hdr.inner.isValid()) {
            tunnel_decap.apply();
        } else {
            tunnel_encap.apply();
        }
    }
}

control TunEgress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { }
}

control TunCompute(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(hdr.outer.isValid(),
            { hdr.outer.version, hdr.outer.ihl, hdr.outer.diffserv, hdr.outer.totalLen,
              hdr.outer.identification, hdr.outer.flags, hdr.outer.fragOffset, hdr.outer.ttl,
              hdr.outer.protocol, hdr.outer.srcAddr, hdr.outer.dstAddr },
            hdr.outer.hdrChecksum, HashAlgorithm.csum16);
        update_checksum(hdr.inner.isValid(),
            { hdr.inner.version, hdr.inner.ihl, hdr.inner.diffserv, hdr.inner.totalLen,
              hdr.inner.identification, hdr.inner.flags, hdr.inner.fragOffset, hdr.inner.ttl,
              hdr.inner.protocol, hdr.inner.srcAddr, hdr.inner.dstAddr },
            hdr.inner.hdrChecksum, HashAlgorithm.csum16);
    }
}

control TunDeparser(packet_out pkt, in headers hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.outer);
        pkt.emit(hdr.inner);
    }
}

V1Switch(TunParser(), TunVerify(), TunIngress(), TunEgress(), TunCompute(), TunDeparser()) main;
