//! VXLAN in the real graph: pg in, pcap out, exact bytes; drops counted by name; no leaks.

mod common;
use common::*;
use sluice_vnet::interface::counter as ifc;

const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const H1: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x01];
const H2: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x02];

/// pg0: underlay 10.0.0.1/24 (peer 10.0.0.2); pg1 and vxlan_tunnel0 in bridge domain 1.
/// The runtime, its CLI and pg0's MAC.
fn setup(
    v6: bool,
) -> (
    sluice_graph::Vlib,
    sluice_cli::CommandTree<sluice_graph::Vlib>,
    [u8; 6],
) {
    let (mut vm, t) = build();
    let (l, r) = underlay(v6);
    clis(
        &mut vm,
        &t,
        &[
            "create packet-generator interface pg0".to_string(),
            "create packet-generator interface pg1".to_string(),
            "set interface state pg0 up".to_string(),
            "set interface state pg1 up".to_string(),
            format!(
                "set interface ip address pg0 {l}/{}",
                if v6 { 64 } else { 24 }
            ),
            format!("ip neighbor pg0 {r} 02:00:00:00:00:02 static"),
        ],
    );
    let out = cli(
        &mut vm,
        &t,
        &format!("create vxlan tunnel src {l} dst {r} vni 13"),
    );
    assert_eq!(out, "vxlan_tunnel0\n");
    clis(
        &mut vm,
        &t,
        &[
            "set interface state vxlan_tunnel0 up",
            "set interface l2 bridge pg1 1",
            "set interface l2 bridge vxlan_tunnel0 1",
        ],
    );
    let pg0 = mac_of(&vm, "pg0");
    (vm, t, pg0)
}

/// Writes `frames` to `in.pcap` of the directory `<tag>-<pid>` (made here, returned for the
/// test to remove), creates the pcap stream `packet-generator new pcap <file> source
/// <stream> node ethernet-input` and enables it.
fn pcap_stream(
    vm: &mut sluice_graph::Vlib,
    t: &sluice_cli::CommandTree<sluice_graph::Vlib>,
    tag: &str,
    frames: &[Vec<u8>],
    stream: &str,
) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("in.pcap");
    write_pcap(&p, frames);
    cli(
        vm,
        t,
        &format!(
            "packet-generator new pcap {} source {stream} node ethernet-input",
            p.display()
        ),
    );
    cli(vm, t, "packet-generator enable");
    dir
}

fn vxlan_outer4(inner: &[u8], sport: u16, vni: u32, pg0: [u8; 6], to_peer: bool) -> Vec<u8> {
    let (s, d, smac, dmac) = if to_peer {
        ([10, 0, 0, 1], [10, 0, 0, 2], pg0, PEER_MAC)
    } else {
        ([10, 0, 0, 2], [10, 0, 0, 1], PEER_MAC, pg0)
    };
    let mut f = eth(dmac, smac, 0x0800);
    f.extend(ip4(s, d, 17, 16 + inner.len(), 64));
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&4789u16.to_be_bytes());
    f.extend_from_slice(&((16 + inner.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x08, 0, 0, 0]);
    f.extend_from_slice(&(vni << 8).to_be_bytes());
    f.extend_from_slice(inner);
    f
}

#[test]
fn vxlan4_encap_exact_bytes() {
    let (mut vm, t, pg0) = setup(false);
    let frames: Vec<Vec<u8>> = (0..4).map(|i| inner_frame(H2, H1, 20 + i)).collect();
    let out = run(&mut vm, &t, "pg1", "pg0", &frames, frames.len());
    assert_eq!(out.len(), frames.len());
    for (o, i) in out.iter().zip(&frames) {
        let sport = 0xc000 | (sluice_tunnels::tunnel::inner_flow_hash(i) >> 18) as u16;
        assert_eq!(o, &vxlan_outer4(i, sport, 13, pg0, true));
    }
    assert_eq!(counter(&vm, "vxlan4-encap", "encapsulated"), 4);
    assert_eq!(if_counter(&vm, "vxlan_tunnel0", ifc::TX_PACKETS), 4);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn vxlan4_decap_exact_bytes_and_drops() {
    let (mut vm, t, pg0) = setup(false);
    let inner: Vec<Vec<u8>> = (0..3).map(|i| inner_frame(H1, H2, 30 + i)).collect();
    let mut frames: Vec<Vec<u8>> = inner
        .iter()
        .map(|i| vxlan_outer4(i, 5555, 13, pg0, false))
        .collect();
    // Unknown VNI, I flag clear, truncated inner frame, UDP length lie.
    frames.push(vxlan_outer4(&inner[0], 5555, 14, pg0, false));
    let mut noi = vxlan_outer4(&inner[0], 5555, 13, pg0, false);
    noi[14 + 20 + 8] = 0;
    frames.push(noi);
    frames.push(vxlan_outer4(&inner[0][..10], 5555, 13, pg0, false));
    let mut lie = vxlan_outer4(&inner[0], 5555, 13, pg0, false);
    lie[14 + 20 + 5] ^= 1;
    frames.push(lie);
    let out = run(&mut vm, &t, "pg0", "pg1", &frames, 3);
    assert_eq!(out, inner);
    assert_eq!(counter(&vm, "vxlan4-input", "decapsulated"), 3);
    assert_eq!(counter(&vm, "vxlan4-input", "no_such_tunnel"), 1);
    assert_eq!(counter(&vm, "vxlan4-input", "bad_flags"), 1);
    assert_eq!(counter(&vm, "vxlan4-input", "truncated"), 1);
    assert_eq!(counter(&vm, "vxlan4-input", "bad_udp_length"), 1);
    assert_eq!(
        rx(&vm, "vxlan_tunnel0"),
        (3, inner_bytes(&inner, &[0, 1, 2]))
    );
    assert_eq!(in_use(&vm), 0);
}

/// Packet `j`: an inner frame (`inner[j]`) in VXLAN to pg0 with VNI `vnis[j]`, or for VNI 0
/// with the I flag clear (`bad_flags`). The inner frames and the packets.
fn vxlan_frames(vnis: &[u32], pg0: [u8; 6]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let inner: Vec<Vec<u8>> = (0..vnis.len())
        .map(|i| inner_frame(H1, H2, 30 + i))
        .collect();
    let frames = vnis
        .iter()
        .zip(&inner)
        .map(|(&v, i)| {
            if v == 0 {
                let mut f = vxlan_outer4(i, 5555, 13, pg0, false);
                f[14 + 20 + 8] = 0;
                return f;
            }
            vxlan_outer4(i, 5555, v, pg0, false)
        })
        .collect();
    (inner, frames)
}

/// The inner frames `js` (indexes into `inner`), in that order.
fn inner_frames(inner: &[Vec<u8>], js: &[usize]) -> Vec<Vec<u8>> {
    js.iter().map(|&j| inner[j].clone()).collect()
}

/// The bytes of the inner frames `js`: what their tunnel counts as received.
fn inner_bytes(inner: &[Vec<u8>], js: &[usize]) -> u64 {
    js.iter().map(|&j| inner[j].len() as u64).sum()
}

/// Interface `name`'s rx counters: (packets, bytes).
fn rx(vm: &sluice_graph::Vlib, name: &str) -> (u64, u64) {
    let c = |k| if_counter(vm, name, k);
    (c(ifc::RX_PACKETS), c(ifc::RX_BYTES))
}

/// One frame of runs from two tunnels with malformed packets and unknown keys between
/// them (a run continued after a malformed packet; the frame's first and last new keys
/// differ), then a frame that starts with the last one's tunnel: each packet goes to its
/// own tunnel (the decap node looks a run up once and remembers the last key across
/// frames), a miss is counted however many packets repeat it.
#[test]
fn vxlan4_decap_runs_of_tunnels_and_misses_in_one_frame() {
    let (mut vm, t, pg0) = setup(false);
    clis(
        &mut vm,
        &t,
        &[
            "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 14",
            "set interface state vxlan_tunnel1 up",
            "set interface l2 bridge vxlan_tunnel1 2",
        ],
    );
    let vnis = [14, 13, 0, 13, 0, 14, 99, 99, 14, 13, 99, 13, 13];
    let (inner, frames) = vxlan_frames(&vnis, pg0);
    let out = run(&mut vm, &t, "pg0", "pg1", &frames, 5);
    assert_eq!(out, inner_frames(&inner, &[1, 3, 9, 11, 12]));
    let out = run(&mut vm, &t, "pg0", "pg1", &frames[11..], 2);
    assert_eq!(out, inner_frames(&inner, &[11, 12]));
    let b = |js: &[usize]| inner_bytes(&inner, js);
    assert_eq!(rx(&vm, "vxlan_tunnel0"), (7, b(&[1, 3, 9, 11, 12, 11, 12])));
    assert_eq!(rx(&vm, "vxlan_tunnel1"), (3, b(&[0, 5, 8])));
    assert_eq!(counter(&vm, "vxlan4-input", "decapsulated"), 10);
    assert_eq!(counter(&vm, "vxlan4-input", "no_such_tunnel"), 3);
    assert_eq!(counter(&vm, "vxlan4-input", "bad_flags"), 2);
    assert_eq!(in_use(&vm), 0);
}

/// A frame whose first packet is of the last frame's last tunnel is finished in the parse
/// pass for that tunnel's packets (the known key) and in the finish pass for the others:
/// packets of the known tunnel interleaved with another tunnel's, unknown VNIs and a
/// malformed packet leave in order, each tunnel counting exactly its own packets and
/// bytes, and nothing leaks.
#[test]
fn vxlan4_decap_known_tunnel_interleaved_with_others() {
    let (mut vm, t, pg0) = setup(false);
    clis(
        &mut vm,
        &t,
        &[
            "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 14",
            "set interface state vxlan_tunnel1 up",
            "set interface l2 xconnect vxlan_tunnel1 pg1",
            // Both tunnels the same path to pg1, so pg1 sends in packet order.
            "set interface l2 xconnect vxlan_tunnel0 pg1",
        ],
    );
    // The first frame ends on VNI 13: the second starts with the known key (finished as
    // parsed, a malformed packet among them), then VNI 14 sends the rest to the lookup.
    let vnis = [13, 13, 13, 0, 13, 14, 99, 13, 14, 14, 13, 99];
    let (inner, frames) = vxlan_frames(&vnis, pg0);
    let out = run(&mut vm, &t, "pg0", "pg1", &frames[..2], 2);
    assert_eq!(out, inner_frames(&inner, &[0, 1]));
    let out = run(&mut vm, &t, "pg0", "pg1", &frames[2..], 7);
    assert_eq!(out, inner_frames(&inner, &[2, 4, 5, 7, 8, 9, 10]));
    let b = |js: &[usize]| inner_bytes(&inner, js);
    assert_eq!(rx(&vm, "vxlan_tunnel0"), (6, b(&[0, 1, 2, 4, 7, 10])));
    assert_eq!(rx(&vm, "vxlan_tunnel1"), (3, b(&[5, 8, 9])));
    assert_eq!(counter(&vm, "vxlan4-input", "decapsulated"), 9);
    assert_eq!(counter(&vm, "vxlan4-input", "no_such_tunnel"), 2);
    assert_eq!(counter(&vm, "vxlan4-input", "bad_flags"), 1);
    assert_eq!(in_use(&vm), 0);
}

/// The occupied slots of the main thread's `vxlan4-input` table. Reaching the table
/// makes the node forget its last lookup, as every control-plane change does: ask only
/// where that does not matter.
fn decap4_slots(vm: &mut sluice_graph::Vlib) -> Vec<u32> {
    use sluice_tunnels::{tunnel, vxlan};
    let i = vm.registry.find(vxlan::INPUT4).unwrap();
    let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let o = out.clone();
    vm.foreach_thread(move |tg| {
        if tg.thread() == 0 {
            let tbl = tunnel::table_of::<vxlan::VxlanInput<false>>(tg, i).unwrap();
            let used = (0..1024).filter(|&s| tbl.entry(s).is_some());
            o.lock().unwrap().extend(used);
        }
    });
    let v = out.lock().unwrap().clone();
    v
}

/// The decap node keeps the last frame's last key and its slot across frames and finishes
/// a packet of that key without a lookup: when the tunnel is deleted between two frames of
/// its key, or its slot is then taken by another VNI's tunnel, the second frame's packets
/// are `no_such_tunnel` — not decapsulated, not counted on the new tunnel.
#[test]
fn vxlan4_decap_tunnel_deleted_or_slot_reused_between_frames() {
    let (mut vm, t, pg0) = setup(false);
    let mk = |v: u32| format!("create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni {v}");
    let add = |vm: &mut sluice_graph::Vlib, v: u32| {
        let name = cli(vm, &t, &mk(v)).trim().to_string();
        clis(
            vm,
            &t,
            &[
                format!("set interface state {name} up"),
                format!("set interface l2 bridge {name} 1"),
            ],
        );
        name
    };
    // A VNI whose tunnel, alone in the table, takes VNI 13's slot (the hash is seeded at
    // random per table; 8 slots, so a few tries).
    let [s13] = decap4_slots(&mut vm)[..] else {
        panic!("one tunnel, one slot")
    };
    cli(&mut vm, &t, &format!("{} del", mk(13)));
    let other = (14..2000)
        .find(|&v| {
            cli(&mut vm, &t, &mk(v));
            let s = decap4_slots(&mut vm);
            cli(&mut vm, &t, &format!("{} del", mk(v)));
            s == [s13]
        })
        .expect("a VNI homed in VNI 13's slot");
    let (inner, frames) = vxlan_frames(&[13; 4], pg0);
    let mut missed = 0;
    // Deleted: a frame of VNI 13 goes out, after the delete the next one is all misses.
    for reuse in [false, true] {
        let name = add(&mut vm, 13);
        let out = run(&mut vm, &t, "pg0", "pg1", &frames, 4);
        assert_eq!(out, inner, "reuse {reuse}");
        assert_eq!(if_counter(&vm, &name, ifc::RX_PACKETS), 4, "reuse {reuse}");
        cli(&mut vm, &t, &format!("{} del", mk(13)));
        // Reused: another VNI's tunnel, up in the same bridge, now in VNI 13's slot.
        let new = reuse.then(|| add(&mut vm, other));
        let out = run(&mut vm, &t, "pg0", "pg1", &frames, 1);
        missed += 4;
        assert_eq!(out, Vec::<Vec<u8>>::new(), "reuse {reuse}");
        assert_eq!(
            counter(&vm, "vxlan4-input", "no_such_tunnel"),
            missed,
            "reuse {reuse}"
        );
        // Each round decapsulates its first frame only.
        assert_eq!(counter(&vm, "vxlan4-input", "decapsulated"), missed);
        if let Some(new) = new {
            assert_eq!(if_counter(&vm, &new, ifc::RX_PACKETS), 0);
            assert_eq!(if_counter(&vm, &new, ifc::RX_BYTES), 0);
            assert_eq!(decap4_slots(&mut vm), [s13]);
        }
    }
    assert_eq!(in_use(&vm), 0);
}

/// An L2 tunnel's frames go from the decap node straight to `l2-input` (`ethernet-input`
/// sees only the outer frame: one vector per packet); its mode and admin state apply from
/// the next packet: bridged, admin down (dropped by `ethernet-input` as `down`), up,
/// cross-connected, routed (not switched: the inner frame is not for the tunnel's MAC),
/// bridged again. Through `ethernet-input` (two vectors per packet): admin down, routed, a
/// VLAN-tagged inner frame, an `l2-input` feature on the tunnel (not one on another
/// interface), an input redirect.
#[test]
fn vxlan4_decap_follows_mode_and_state() {
    let (mut vm, t, pg0) = setup(false);
    let inner = inner_frame(H1, H2, 40);
    let pkt = vxlan_outer4(&inner, 5555, 13, pg0, false);
    let mut eth_seen = 0;
    // Sends `p` after CLI `c`; returns what pg1 sent and ethernet-input's vectors for it.
    let mut send = |vm: &mut sluice_graph::Vlib, c: &str, p: &[u8], n: usize| {
        if !c.is_empty() {
            cli(vm, &t, c);
        }
        let out = run(vm, &t, "pg0", "pg1", &[p.to_vec()], n);
        let v = vectors(vm, "ethernet-input");
        let d = v - eth_seen;
        eth_seen = v;
        (out, d)
    };
    let one = vec![inner.clone()];
    assert_eq!(send(&mut vm, "", &pkt, 1), (one.clone(), 1));
    let down = send(&mut vm, "set interface state vxlan_tunnel0 down", &pkt, 0);
    assert_eq!(down, (vec![], 2));
    assert_eq!(counter(&vm, "ethernet-input", "down"), 1);
    let up = "set interface state vxlan_tunnel0 up";
    assert_eq!(send(&mut vm, up, &pkt, 1), (one.clone(), 1));
    let xc = "set interface l2 xconnect vxlan_tunnel0 pg1";
    assert_eq!(send(&mut vm, xc, &pkt, 1), (one.clone(), 1));
    assert_eq!(counter(&vm, "l2-input", "xconnect"), 1);
    let l3 = "set interface l3 vxlan_tunnel0";
    assert_eq!(send(&mut vm, l3, &pkt, 0), (vec![], 2));
    assert_eq!(counter(&vm, "ethernet-input", "l3_mac_mismatch"), 1);
    let bridged = "set interface l2 bridge vxlan_tunnel0 1";
    assert_eq!(send(&mut vm, bridged, &pkt, 1), (one.clone(), 1));
    // A VLAN-tagged inner frame (perhaps a sub-interface's): ethernet-input decides.
    let mut tagged = inner[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    tagged.extend_from_slice(&inner[12..]);
    let tpkt = vxlan_outer4(&tagged, 5555, 13, pg0, false);
    assert_eq!(send(&mut vm, "", &tpkt, 1), (vec![tagged], 2));
    // An l2-input feature on another interface only: the tunnel's frames still go direct.
    let other = "set interface feature pg1 l2-input-count arc l2-input";
    assert_eq!(send(&mut vm, other, &pkt, 1), (one.clone(), 1));
    assert_eq!(vectors(&vm, "l2-input-count"), 0);
    // An l2-input feature on the tunnel: ethernet-input sends the frame to it.
    let feat = "set interface feature vxlan_tunnel0 l2-input-count arc l2-input";
    assert_eq!(send(&mut vm, feat, &pkt, 1), (one.clone(), 2));
    assert_eq!(vectors(&vm, "l2-input-count"), 1);
    let nofeat = "set interface feature vxlan_tunnel0 l2-input-count arc l2-input disable";
    assert_eq!(send(&mut vm, nofeat, &pkt, 1), (one.clone(), 1));
    // An input redirect (here to error-drop): ethernet-input applies it.
    let sw = {
        let ifs = vm.ext::<sluice_vnet::Interfaces>().unwrap();
        ifs.find("vxlan_tunnel0").unwrap()
    };
    let drop = vm.registry.find("error-drop").unwrap();
    sluice_vnet::set_rx_redirect(&mut vm, sw, Some(drop)).unwrap();
    assert_eq!(send(&mut vm, "", &pkt, 0), (vec![], 2));
    sluice_vnet::set_rx_redirect(&mut vm, sw, None).unwrap();
    assert_eq!(send(&mut vm, "", &pkt, 1), (one.clone(), 1));
    assert_eq!(counter(&vm, "vxlan4-input", "decapsulated"), 12);
    assert_eq!(if_counter(&vm, "vxlan_tunnel0", ifc::RX_PACKETS), 12);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn vxlan6_encap_checksum_and_decap() {
    let (mut vm, t, pg0) = setup(true);
    let a1: [u8; 16] = "2001:db8::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let a2: [u8; 16] = "2001:db8::2"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let i = inner_frame(H2, H1, 40);
    let out = run(&mut vm, &t, "pg1", "pg0", std::slice::from_ref(&i), 1);
    assert_eq!(out.len(), 1);
    let o = &out[0];
    let sport = 0xc000 | (sluice_tunnels::tunnel::inner_flow_hash(&i) >> 18) as u16;
    let ulen = 16 + i.len();
    let mut want = eth(PEER_MAC, pg0, 0x86dd);
    want.extend(ip6(a1, a2, 17, ulen, 64));
    want.extend_from_slice(&sport.to_be_bytes());
    want.extend_from_slice(&4789u16.to_be_bytes());
    want.extend_from_slice(&(ulen as u16).to_be_bytes());
    want.extend_from_slice(&[0, 0, 0x08, 0, 0, 0, 0, 0, 13, 0]);
    want.extend_from_slice(&i);
    // The UDP checksum: pseudo-header + UDP, summing to all ones.
    let mut ph = a1.to_vec();
    ph.extend_from_slice(&a2);
    ph.extend_from_slice(&(ulen as u32).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 17]);
    ph.extend_from_slice(&o[54..]);
    assert_eq!(sluice_wire::checksum::sum(&ph), 0xffff, "UDP checksum");
    let mut got = o.clone();
    got[60..62].copy_from_slice(&[0, 0]);
    assert_eq!(got, want);
    // Decap: the same packet coming back from the peer.
    let mut back = eth(pg0, PEER_MAC, 0x86dd);
    back.extend(ip6(a2, a1, 17, ulen, 64));
    back.extend_from_slice(&o[54..]);
    let out = run(&mut vm, &t, "pg0", "pg1", &[back], 1);
    assert_eq!(out, vec![i]);
    assert_eq!(counter(&vm, "vxlan6-input", "decapsulated"), 1);
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn routed_vxlan_and_delete_under_traffic() {
    // The tunnel is an L3 interface: an address, a neighbour behind it, a route through it.
    let (mut vm, t) = routed();
    clis(
        &mut vm,
        &t,
        &[
            "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 7 instance 5",
            "set interface state vxlan_tunnel5 up",
            "set interface ip address vxlan_tunnel5 192.168.9.1/24",
            "ip neighbor vxlan_tunnel5 192.168.9.2 02:cc:00:00:00:01 static",
            "ip route add 198.51.100.0/24 via 192.168.9.2 vxlan_tunnel5",
        ],
    );
    let pg1 = mac_of(&vm, "pg1");
    let tun = mac_of(&vm, "vxlan_tunnel5");
    let mut f = eth(pg1, H1, 0x0800);
    f.extend(ip4([172, 16, 0, 2], [198, 51, 100, 7], 17, 8, 64));
    f.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
    let out = run(&mut vm, &t, "pg1", "pg0", std::slice::from_ref(&f), 1);
    assert_eq!(out.len(), 1);
    let o = &out[0];
    // Inner: routed (TTL 63), Ethernet from the tunnel's MAC to the neighbour's.
    let inner = &o[14 + 20 + 16..];
    assert_eq!(&inner[..6], &[0x02, 0xcc, 0, 0, 0, 1]);
    assert_eq!(&inner[6..12], &tun);
    assert_eq!(inner[14 + 8], 63);
    assert_eq!(&o[14 + 20 + 12..14 + 20 + 15], &[0, 0, 7]);
    let show = cli(&mut vm, &t, "show vxlan tunnel");
    assert!(
        show.contains("instance 5 src 10.0.0.1 dst 10.0.0.2 src_port 0 dst_port 4789 vni 7"),
        "{show}"
    );
    // Delete while a stream is queued: every packet forwarded or counted, no leak.
    let frames: Vec<Vec<u8>> = (0..50).map(|_| f.clone()).collect();
    let dir = pcap_stream(
        &mut vm,
        &t,
        "tunnels-del",
        &frames,
        "pg1 name d limit 5000 rate 100000",
    );
    for _ in 0..20 {
        vm.run_main_once();
    }
    cli(
        &mut vm,
        &t,
        "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 7 del",
    );
    let t0 = std::time::Instant::now();
    while sluice_vnet::pg::any_enabled(&mut vm) && t0.elapsed().as_secs() < 20 {
        vm.run_main_once();
    }
    for _ in 0..10 {
        vm.run_main_once();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        cli(&mut vm, &t, "show vxlan tunnel"),
        "No vxlan tunnels configured...\n"
    );
    assert_eq!(in_use(&vm), 0);
}

#[test]
fn bad_cli_input_names_the_token() {
    let (mut vm, t) = build();
    cli_errs(
        &mut vm,
        &t,
        &[
            (
                "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2",
                "missing vni",
            ),
            (
                "create vxlan tunnel src 10.0.0.x dst 10.0.0.2 vni 1",
                "`10.0.0.x'",
            ),
            (
                "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 16777216",
                "vni 16777216",
            ),
            (
                "create vxlan tunnel src 10.0.0.1 dst 2001:db8::1 vni 1",
                "different families",
            ),
            (
                "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 1 encap-vrf-id 9",
                "9",
            ),
            (
                "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 1 decap-next foo",
                "`foo'",
            ),
            (
                "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 1 del",
                "no such tunnel",
            ),
            (
                "create vxlan tunnel src 10.0.0.1 dst 224.0.0.1 vni 1",
                "multicast",
            ),
        ],
    );
    cli(
        &mut vm,
        &t,
        "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 1",
    );
    cli_errs(
        &mut vm,
        &t,
        &[(
            "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 1",
            "vxlan_tunnel0",
        )],
    );
}

#[test]
fn failed_create_leaves_no_interface() {
    let (mut vm, t) = build();
    // UDP port 4789 already served by another node: the tunnel's registration fails after
    // its interface was made, which must be deleted again.
    let key = sluice_vnet::ip_local::LocalKey::UdpPort(sluice_tunnels::tunnel::VXLAN_PORT);
    sluice_vnet::ip_local::register(&mut vm, false, key, "error-drop").expect("register");
    let c = "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 1";
    let e = t.execute(&mut vm, c).expect_err("port taken").to_string();
    assert!(e.contains("error-drop"), "{e}");
    assert!(!cli(&mut vm, &t, "show interface").contains("vxlan_tunnel"));
    sluice_vnet::ip_local::unregister(&mut vm, false, key).expect("unregister");
    assert_eq!(cli(&mut vm, &t, c), "vxlan_tunnel0\n");
}

#[test]
fn running_config_recreates_the_tunnel() {
    let (mut vm, t, _) = setup(false);
    let rc = cli(&mut vm, &t, "show running-config");
    assert!(
        rc.contains("create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 13 instance 0"),
        "{rc}"
    );
}

/// A VXLAN packet between `src` and `dst` (both of one family) with these MACs; over
/// IPv6 with its UDP checksum, as `vxlan6-encap` writes it.
fn vxlan_ip(
    inner: &[u8],
    sport: u16,
    vni: u32,
    (s, d): (std::net::IpAddr, std::net::IpAddr),
    (smac, dmac): ([u8; 6], [u8; 6]),
) -> Vec<u8> {
    use std::net::IpAddr::{V4, V6};
    let ulen = 16 + inner.len();
    let mut udp = sport.to_be_bytes().to_vec();
    udp.extend_from_slice(&4789u16.to_be_bytes());
    udp.extend_from_slice(&(ulen as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0, 0x08, 0, 0, 0]);
    udp.extend_from_slice(&(vni << 8).to_be_bytes());
    udp.extend_from_slice(inner);
    let mut f = match (s, d) {
        (V4(s), V4(d)) => {
            let mut f = eth(dmac, smac, 0x0800);
            f.extend(ip4(s.octets(), d.octets(), 17, ulen, 64));
            f
        }
        (V6(s), V6(d)) => {
            let mut ph = s.octets().to_vec();
            ph.extend_from_slice(&d.octets());
            ph.extend_from_slice(&(ulen as u32).to_be_bytes());
            ph.extend_from_slice(&[0, 0, 0, 17]);
            ph.extend_from_slice(&udp);
            let c = sluice_wire::checksum::internet_checksum(&ph);
            udp[6..8].copy_from_slice(&c.to_be_bytes());
            let mut f = eth(dmac, smac, 0x86dd);
            f.extend(ip6(s.octets(), d.octets(), 17, ulen, 64));
            f
        }
        _ => panic!("{s} and {d} are of different families"),
    };
    f.extend(udp);
    f
}

/// A tunnel to group 239.1.1.1 on pg0, bridged with pg1: flooded frames go to the group
/// (its MAC 01:00:5e:01:01:01, no neighbour), and what any VTEP sends to the group with the
/// VNI on pg0 comes out of pg1 (from pg2 it is dropped).
#[test]
fn vxlan4_multicast_group_floods_and_accepts_any_source() {
    multicast_group_floods_and_accepts_any_source(false);
}

/// The same over IPv6, group ff0e::101 (MAC 33:33:00:00:01:01): `ip6-input` receives a
/// non-link-scope group only with the tunnel's `via local` /128 route.
#[test]
fn vxlan6_multicast_group_floods_and_accepts_any_source() {
    multicast_group_floods_and_accepts_any_source(true);
}

fn multicast_group_floods_and_accepts_any_source(v6: bool) {
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let (me, group, group_mac, plen, vtep_net) = if v6 {
        (
            "2001:db8::1",
            "ff0e::101",
            [0x33, 0x33, 0, 0, 1, 1],
            64,
            "2001:db8::",
        )
    } else {
        (
            "10.0.0.1",
            "239.1.1.1",
            [0x01, 0, 0x5e, 1, 1, 1],
            24,
            "10.0.0.",
        )
    };
    let pg2_addr = if v6 {
        "2001:db8:2::1/64"
    } else {
        "10.0.2.1/24"
    };
    let (input, fib, hostlen) = if v6 {
        ("vxlan6-input", "show ip6 fib", 128)
    } else {
        ("vxlan4-input", "show ip fib", 32)
    };
    let (mut vm, t) = build();
    for c in [
        "create packet-generator interface pg0".to_string(),
        "create packet-generator interface pg1".to_string(),
        "create packet-generator interface pg2".to_string(),
        "set interface state pg0 up".to_string(),
        "set interface state pg1 up".to_string(),
        "set interface state pg2 up".to_string(),
        format!("set interface ip address pg0 {me}/{plen}"),
        format!("set interface ip address pg2 {pg2_addr}"),
    ] {
        cli(&mut vm, &t, &c);
    }
    let other_family = if v6 { "10.0.0.1" } else { "2001:db8::1" };
    cli_errs(
        &mut vm,
        &t,
        &[
            (
                &format!("create vxlan tunnel src {me} dst {group} vni 13"),
                "group <address> <interface>",
            ),
            (
                &format!("create vxlan tunnel src {me} group {vtep_net}9 pg0 vni 13"),
                "not multicast",
            ),
            (
                &format!("create vxlan tunnel src {other_family} group {group} pg0 vni 13"),
                if v6 { "unicast IPv6" } else { "unicast IPv4" },
            ),
            (
                &format!("create vxlan tunnel src {me} group {group} nosuch0 vni 13"),
                "nosuch0",
            ),
        ],
    );
    let create = format!("create vxlan tunnel src {me} group {group} pg0 vni 13");
    assert_eq!(cli(&mut vm, &t, &create), "vxlan_tunnel0\n");
    // The join report goes out of pg0 now (group_tunnel_joins_and_leaves_on_its_interface).
    for _ in 0..5 {
        vm.run_main_once();
    }
    clis(
        &mut vm,
        &t,
        &[
            "set interface state vxlan_tunnel0 up",
            "set interface l2 bridge pg1 1",
            "set interface l2 bridge vxlan_tunnel0 1",
        ],
    );
    let s = cli(&mut vm, &t, "show vxlan tunnel");
    assert!(
        s.contains(&format!("dst {group}")) && s.contains("mcast-sw-if-idx 1 "),
        "{s}"
    );
    let rc = cli(&mut vm, &t, "show running-config");
    assert!(rc.contains(&format!("{create} instance 0")), "{rc}");
    let pg0 = mac_of(&vm, "pg0");
    let (group, me) = (ip(group), ip(me));
    // Encap: unknown destinations flood into the tunnel, out to the group.
    let frames: Vec<Vec<u8>> = (0..3).map(|i| inner_frame(H2, H1, 20 + i)).collect();
    let out = run(&mut vm, &t, "pg1", "pg0", &frames, frames.len());
    let want: Vec<Vec<u8>> = frames
        .iter()
        .map(|i| {
            let sport = 0xc000 | (sluice_tunnels::tunnel::inner_flow_hash(i) >> 18) as u16;
            vxlan_ip(i, sport, 13, (me, group), (pg0, group_mac))
        })
        .collect();
    assert_eq!(out, want);
    assert_eq!(if_counter(&vm, "vxlan_tunnel0", ifc::TX_PACKETS), 3);
    // Decap: two VTEPs send to the group; a third VNI is nobody's.
    let vtep = |n: u8| (ip(&format!("{vtep_net}{n}")), [0x02, 0, 0, 0, 0, n]);
    let inner: Vec<Vec<u8>> = (0..2).map(|i| inner_frame(H1, H2, 30 + i)).collect();
    let (a, b) = (vtep(7), vtep(8));
    let pkts = vec![
        vxlan_ip(&inner[0], 5000, 13, (a.0, group), (a.1, group_mac)),
        vxlan_ip(&inner[1], 5001, 13, (b.0, group), (b.1, group_mac)),
    ];
    assert_eq!(run(&mut vm, &t, "pg0", "pg1", &pkts, 2), inner);
    assert_eq!(if_counter(&vm, "vxlan_tunnel0", ifc::RX_PACKETS), 2);
    let other = vxlan_ip(&inner[0], 5000, 14, (a.0, group), (a.1, group_mac));
    assert!(run(&mut vm, &t, "pg0", "pg1", &[other], 0).is_empty());
    assert_eq!(counter(&vm, input, "no_group_tunnel"), 1);
    // Only from the tunnel's interface (VPP's mfib): the group packet from pg2, of the
    // same underlay table, is dropped and counted.
    let wrong_if = vxlan_ip(&inner[0], 5000, 13, (a.0, group), (a.1, group_mac));
    assert!(run(&mut vm, &t, "pg2", "pg1", &[wrong_if], 0).is_empty());
    assert_eq!(counter(&vm, input, "no_group_tunnel"), 2);
    assert_eq!(counter(&vm, input, "decapsulated"), 2);
    assert_eq!(if_counter(&vm, "vxlan_tunnel0", ifc::RX_PACKETS), 2);
    // A unicast tunnel to VTEP a on the same VNI: a's packets to the group still decap
    // into the group tunnel (VPP would decap them into the unicast tunnel and drop them
    // without one: docs/tunnels.md), its unicast packets into the unicast tunnel.
    let uni = format!("create vxlan tunnel src {me} dst {} vni 13", a.0);
    assert_eq!(cli(&mut vm, &t, &uni), "vxlan_tunnel1\n");
    for c in [
        "set interface state vxlan_tunnel1 up",
        "set interface l2 bridge vxlan_tunnel1 1",
    ] {
        cli(&mut vm, &t, c);
    }
    let to_group = vxlan_ip(&inner[0], 5000, 13, (a.0, group), (a.1, group_mac));
    let to_me = vxlan_ip(&inner[1], 5000, 13, (a.0, me), (a.1, pg0));
    assert_eq!(run(&mut vm, &t, "pg0", "pg1", &[to_group, to_me], 2), inner);
    assert_eq!(if_counter(&vm, "vxlan_tunnel0", ifc::RX_PACKETS), 3);
    assert_eq!(if_counter(&vm, "vxlan_tunnel1", ifc::RX_PACKETS), 1);
    cli(&mut vm, &t, &format!("{uni} del"));
    assert_eq!(counter(&vm, input, "decapsulated"), 4);
    // A second tunnel to the group (another VNI) shares its receive route; deleting one
    // keeps it, deleting both removes it.
    let route = format!("{fib} {group}/{hostlen}");
    let vni14 = format!("create vxlan tunnel src {me} group {group} pg0 vni 14");
    cli(&mut vm, &t, &vni14);
    cli(&mut vm, &t, &format!("{vni14} del"));
    assert!(cli(&mut vm, &t, &route).contains(&format!("{group}/{hostlen}")));
    let before = counter(&vm, input, "decapsulated");
    let again = vxlan_ip(&inner[0], 5000, 13, (a.0, group), (a.1, group_mac));
    assert_eq!(
        run(&mut vm, &t, "pg0", "pg1", std::slice::from_ref(&again), 1).len(),
        1
    );
    cli(&mut vm, &t, "set interface l3 pg1");
    cli(&mut vm, &t, &format!("{create} del"));
    assert!(!cli(&mut vm, &t, &route).contains(&format!("{group}/{hostlen}")));
    assert!(run(&mut vm, &t, "pg0", "pg1", &[again], 0).is_empty());
    assert_eq!(counter(&vm, input, "decapsulated"), before + 1);
    if v6 {
        // Without the route the group is not received at all.
        assert_eq!(counter(&vm, "ip6-input", "multicast"), 1);
    }
    assert_eq!(in_use(&vm), 0);
}

/// The tunnel table's indexes (key → tunnel, free slots, name instances) stay consistent
/// through creations, deletions in the middle and reuse: the lowest free instance is
/// taken again, a duplicate key is refused, the same key over the other family is not,
/// and a tunnel in a reused slot decapsulates.
#[test]
fn many_tunnels_reuse_slots_instances_and_keys() {
    let (mut vm, t, _) = setup(false);
    let mk = |v: u32| format!("create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni {v}");
    for v in 100..400 {
        assert_eq!(
            cli(&mut vm, &t, &mk(v)),
            format!("vxlan_tunnel{}\n", v - 99)
        );
    }
    // Explicit instances above and inside the auto range.
    cli(&mut vm, &t, &format!("{} instance 1000", mk(50)));
    let e = cli_err(&mut vm, &t, &format!("{} instance 7", mk(51)));
    assert!(e.contains("vxlan_tunnel7"), "{e}");
    for v in [150, 120, 380] {
        cli(&mut vm, &t, &format!("{} del", mk(v)));
    }
    let e = cli_err(&mut vm, &t, &format!("{} del", mk(150)));
    assert!(e.contains("no such tunnel"), "{e}");
    let e = cli_err(&mut vm, &t, &mk(200));
    assert!(e.contains("vxlan_tunnel101 has the same endpoints"), "{e}");
    // Lowest free first: 21 (vni 120), then 51 (vni 150), 281 (vni 380), then 301.
    for (v, inst) in [(500, 21), (501, 51), (502, 281), (503, 301)] {
        assert_eq!(cli(&mut vm, &t, &mk(v)), format!("vxlan_tunnel{inst}\n"));
    }
    // The same endpoints and VNI over the other family are another tunnel.
    cli(&mut vm, &t, "set interface ip address pg0 2001:db8::1/64");
    assert_eq!(
        cli(
            &mut vm,
            &t,
            "create vxlan tunnel src 2001:db8::1 dst 2001:db8::2 vni 13"
        ),
        "vxlan_tunnel302\n"
    );
    // A tunnel in a reused slot decapsulates (vni 501 on vxlan_tunnel51, bridged to pg1).
    clis(
        &mut vm,
        &t,
        &[
            "set interface state vxlan_tunnel51 up",
            "set interface l2 bridge vxlan_tunnel51 1",
        ],
    );
    let pg0 = mac_of(&vm, "pg0");
    let inner = inner_frame(H1, H2, 40);
    let frames = vec![
        vxlan_outer4(&inner, 5555, 501, pg0, false),
        vxlan_outer4(&inner, 5555, 150, pg0, false),
    ];
    let out = run(&mut vm, &t, "pg0", "pg1", &frames, 1);
    assert_eq!(out, vec![inner.clone()]);
    assert_eq!(if_counter(&vm, "vxlan_tunnel51", ifc::RX_PACKETS), 1);
    assert_eq!(counter(&vm, "vxlan4-input", "no_such_tunnel"), 1);
    let tunnels = vm
        .ext::<sluice_tunnels::tunnel::Tunnels>()
        .expect("tunnels");
    // vxlan_tunnel0, 300, instance 1000, 3 deleted, 4, the IPv6 one.
    assert_eq!(tunnels.iter().count(), 1 + 300 + 1 - 3 + 4 + 1);
    assert_eq!(in_use(&vm), 0);
}

/// Admin state, L2 mode and input redirect changed while a stream of decap traffic flows:
/// each change reaches the decap entries (through vnet's interface-change hook, called on
/// the main thread which also runs the graph here) before the next packet, so after each
/// one the next packets, until K more were decapsulated, go exactly where that mode sends
/// them: switched out of pg1 straight from the decap node (one `ethernet-input` vector per
/// packet: the outer frame), cross-connected (counted by `l2-input`), or dropped through
/// `ethernet-input` (two vectors per packet) with nothing out of pg1. Every call site of
/// the hook is the first to show its change (a missing one sends an interval's packets the
/// old way). Nothing leaks.
#[test]
fn vxlan4_decap_mode_and_state_changes_under_traffic() {
    let (mut vm, t, pg0) = setup(false);
    let pkt = vxlan_outer4(&inner_frame(H1, H2, 40), 5555, 13, pg0, false);
    let frames: Vec<Vec<u8>> = (0..64).map(|_| pkt.clone()).collect();
    let dir = pcap_stream(
        &mut vm,
        &t,
        "tunnels-mode",
        &frames,
        "pg0 name m limit 10000000 rate 200000",
    );
    let sw = {
        let ifs = vm.ext::<sluice_vnet::Interfaces>().unwrap();
        ifs.find("vxlan_tunnel0").unwrap()
    };
    let drop_node = vm.registry.find("error-drop").unwrap();
    /// Where an interval's packets go.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum To {
        /// Bridged out of pg1, straight from the decap node.
        Bridged,
        /// Cross-connected to pg1, straight from the decap node.
        Xconnect,
        /// Dropped by `ethernet-input` (down, L3 MAC mismatch, redirect to `error-drop`).
        Drop,
    }
    // (change, where the packets after it go); the first interval has no change.
    let steps: [(&str, To); 12] = [
        ("", To::Bridged),
        ("set interface state vxlan_tunnel0 down", To::Drop),
        ("set interface state vxlan_tunnel0 up", To::Bridged),
        ("set interface l2 xconnect vxlan_tunnel0 pg1", To::Xconnect),
        ("set interface l3 vxlan_tunnel0", To::Drop),
        ("set interface l2 bridge vxlan_tunnel0 1", To::Bridged),
        ("set interface l2 xconnect vxlan_tunnel0 pg1", To::Xconnect),
        ("set interface l2 bridge vxlan_tunnel0 1", To::Bridged),
        ("redirect", To::Drop),
        ("no redirect", To::Bridged),
        ("set interface state vxlan_tunnel0 down", To::Drop),
        ("set interface state vxlan_tunnel0 up", To::Bridged),
    ];
    const K: u64 = 64;
    let snap = |vm: &sluice_graph::Vlib| {
        [
            counter(vm, "vxlan4-input", "decapsulated"),
            if_counter(vm, "pg1", ifc::TX_PACKETS),
            vectors(vm, "ethernet-input"),
            counter(vm, "l2-input", "xconnect"),
        ]
    };
    let mut seen = Vec::new();
    for (c, to) in steps {
        match c {
            "" => {}
            "redirect" => sluice_vnet::set_rx_redirect(&mut vm, sw, Some(drop_node)).unwrap(),
            "no redirect" => sluice_vnet::set_rx_redirect(&mut vm, sw, None).unwrap(),
            c => {
                cli(&mut vm, &t, c);
            }
        }
        let s0 = snap(&vm);
        let t0 = std::time::Instant::now();
        while counter(&vm, "vxlan4-input", "decapsulated") < s0[0] + K {
            assert!(t0.elapsed().as_secs() < 20, "{c}: traffic stopped");
            vm.run_main_once();
        }
        let s1 = snap(&vm);
        let [dec, out, eth, xc] = [0, 1, 2, 3].map(|i| s1[i] - s0[i]);
        let want = match to {
            To::Bridged => [dec, dec, 0],
            To::Xconnect => [dec, dec, dec],
            To::Drop => [0, 2 * dec, 0],
        };
        // (change, [out of pg1, ethernet-input vectors, cross-connected]) against `want`.
        seen.push((c, [out, eth, xc], want));
    }
    cli(&mut vm, &t, "packet-generator disable");
    for _ in 0..10 {
        vm.run_main_once();
    }
    let _ = t.execute(&mut vm, "packet-generator delete m");
    let _ = std::fs::remove_dir_all(&dir);
    for (c, got, want) in &seen {
        assert_eq!(got, want, "after {c:?} (all: {seen:?})");
    }
    assert!(counter(&vm, "ethernet-input", "down") > 0);
    assert!(counter(&vm, "ethernet-input", "l3_mac_mismatch") > 0);
    assert_eq!(in_use(&vm), 0);
}

/// Deleting tunnels while a stream spread over many of them runs (the decap table's
/// entries move back into the holes as tunnels go): every packet is decapsulated out of
/// pg1 or counted as `no_such_tunnel` (of a deleted tunnel), the remaining tunnels keep
/// decapsulating, and no buffer leaks.
#[test]
fn many_tunnels_deleted_under_traffic() {
    let (mut vm, t, _) = setup(false);
    let mk = |v: u32| format!("create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni {v}");
    for v in 100..164 {
        let name = cli(&mut vm, &t, &mk(v));
        let name = name.trim();
        clis(
            &mut vm,
            &t,
            &[
                format!("set interface state {name} up"),
                format!("set interface l2 xconnect {name} pg1"),
            ],
        );
    }
    let pg0 = mac_of(&vm, "pg0");
    let inner = inner_frame(H1, H2, 40);
    // Every packet on another tunnel (and a run of one), the unicast bridged tunnel too.
    let frames: Vec<Vec<u8>> = (0..256u32)
        .map(|i| {
            let v = if i % 32 == 0 { 13 } else { 100 + (i * 37) % 64 };
            vxlan_outer4(&inner, 5555, v, pg0, false)
        })
        .collect();
    let out = run(&mut vm, &t, "pg0", "pg1", &frames, frames.len());
    assert_eq!(out.len(), frames.len());
    assert_eq!(counter(&vm, "vxlan4-input", "decapsulated"), 256);
    // Each tunnel's rx counters hold its packets.
    let on = |v: u32| {
        (0..256u32)
            .filter(|i| i % 32 != 0 && 100 + (i * 37) % 64 == v)
            .count() as u64
    };
    for (name, n) in [
        ("vxlan_tunnel0".to_string(), 8),
        ("vxlan_tunnel1".to_string(), on(100)),
        ("vxlan_tunnel38".to_string(), on(137)),
    ] {
        assert_eq!(if_counter(&vm, &name, ifc::RX_PACKETS), n, "{name}");
        assert_eq!(
            if_counter(&vm, &name, ifc::RX_BYTES),
            n * inner.len() as u64,
            "{name}"
        );
    }
    // The same packets as a stream, with every other tunnel deleted while it runs.
    let dir = std::env::temp_dir().join(format!("tunnels-many-del-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("in.pcap");
    write_pcap(&p, &frames);
    let sent = 20 * frames.len() as u64;
    cli(
        &mut vm,
        &t,
        &format!(
            "packet-generator new pcap {} source pg0 name d limit {sent} rate 200000 node ethernet-input",
            p.display()
        ),
    );
    cli(&mut vm, &t, "packet-generator enable");
    for v in (100..164).step_by(2) {
        for _ in 0..3 {
            vm.run_main_once();
        }
        cli(&mut vm, &t, &format!("{} del", mk(v)));
    }
    let t0 = std::time::Instant::now();
    while sluice_vnet::pg::any_enabled(&mut vm) && t0.elapsed().as_secs() < 20 {
        vm.run_main_once();
    }
    for _ in 0..10 {
        vm.run_main_once();
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (dec, miss) = (
        counter(&vm, "vxlan4-input", "decapsulated") - 256,
        counter(&vm, "vxlan4-input", "no_such_tunnel"),
    );
    assert_eq!(dec + miss, sent);
    // The frames of the tunnels that stay (VNI 13 and the odd VNIs: 136 of 256) are all
    // decapsulated, so the deleted tunnels' frames were partly decapsulated (more than
    // the kept share: deletions came after traffic started) and partly missed (they came
    // before it ended). The decap table's hash seed is random per table, so where the
    // deletions' back-shifts land differs from run to run: this test is no deterministic
    // guard for back-shift (the fixed-seed unit tests of `DecapTable` are).
    let kept = (0..256u32)
        .filter(|i| i % 32 == 0 || (i * 37) % 64 % 2 == 1)
        .count();
    assert_eq!(kept, 136);
    assert!(
        miss > 0 && dec > sent * kept as u64 / 256,
        "decapsulated {dec}, missed {miss}"
    );
    // A kept tunnel lost none of its frames while the others were deleted around it.
    assert_eq!(
        if_counter(&vm, "vxlan_tunnel38", ifc::RX_PACKETS),
        21 * on(137)
    );
    assert_eq!(in_use(&vm), 0);
    cli(&mut vm, &t, "packet-generator delete d");
    let out = run(&mut vm, &t, "pg0", "pg1", &frames, frames.len());
    assert_eq!(out.len(), kept);
    assert_eq!(
        counter(&vm, "vxlan4-input", "no_such_tunnel") - miss,
        256 - kept as u64
    );
    assert_eq!(in_use(&vm), 0);
}

/// The decap node parses a frame into keys, looks each key that differs from the previous
/// packet's up once, and finishes every packet from its key's result: on a fresh node,
/// frames of 40 tunnels (each packet's key new, or the previous packet's) mixed with
/// malformed packets (parsed, never looked up) and unknown VNIs. A packet finished with
/// another key's result, or a stale one (a miss on the first frame, the last frame's after),
/// shows in the tunnels' rx counters and the drop counters below, which are exact.
#[test]
fn decap_frames_with_malformed_and_repeated_keys() {
    let (mut vm, t, _) = setup(false);
    let mut names = std::collections::HashMap::new();
    for v in 200..240u32 {
        let name = cli(
            &mut vm,
            &t,
            &format!("create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni {v}"),
        );
        let name = name.trim().to_string();
        clis(
            &mut vm,
            &t,
            &[
                format!("set interface state {name} up"),
                format!("set interface l2 xconnect {name} pg1"),
            ],
        );
        names.insert(v, name);
    }
    let pg0 = mac_of(&vm, "pg0");
    let inner = inner_frame(H1, H2, 40);
    // Packet i of frame `f`: malformed (I flag clear), an unknown VNI, or tunnel
    // 200 + (13 * (i / 2) + f) % 40 (pairs of one key, a malformed packet between some).
    let what = |f: u32, i: u32| -> (u32, bool) {
        let v = if i % 11 == 5 {
            999
        } else {
            200 + (13 * (i / 2) + f) % 40
        };
        (v, i % 7 == 3)
    };
    let mut rx: std::collections::HashMap<u32, u64> = Default::default();
    let (mut dec, mut miss, mut bad) = (0, 0, 0);
    for f in 0..3u32 {
        let before = dec;
        let frames: Vec<Vec<u8>> = (0..250u32)
            .map(|i| {
                let (v, malformed) = what(f, i);
                let mut p = vxlan_outer4(&inner, 5555, v, pg0, false);
                if malformed {
                    p[14 + 20 + 8] = 0;
                }
                p
            })
            .collect();
        for i in 0..250u32 {
            match what(f, i) {
                (_, true) => bad += 1,
                (999, false) => miss += 1,
                (v, false) => {
                    dec += 1;
                    *rx.entry(v).or_default() += 1;
                }
            }
        }
        let out = run(&mut vm, &t, "pg0", "pg1", &frames, (dec - before) as usize);
        assert_eq!(out.len() as u64, dec - before, "frame {f}");
        assert_eq!(
            counter(&vm, "vxlan4-input", "decapsulated"),
            dec,
            "frame {f}"
        );
        assert_eq!(
            counter(&vm, "vxlan4-input", "no_such_tunnel"),
            miss,
            "frame {f}"
        );
        assert_eq!(counter(&vm, "vxlan4-input", "bad_flags"), bad, "frame {f}");
    }
    // Many new keys a frame (more than a quarter of its packets).
    let keys: Vec<u32> = (0..250u32)
        .map(|i| what(0, i))
        .filter(|&(_, malformed)| !malformed)
        .map(|(v, _)| v)
        .collect();
    let new = 1 + keys.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(new > 2 * 32, "{new} new keys");
    for (v, name) in &names {
        let n = rx.get(v).copied().unwrap_or(0);
        assert!(n > 0, "{name}");
        assert_eq!(if_counter(&vm, name, ifc::RX_PACKETS), n, "{name}");
        // What the operator reads: `show interface`'s rx packets row.
        let show = cli(&mut vm, &t, &format!("show interface {name}"));
        let shown = show
            .lines()
            .find_map(|l| l.split("rx packets").nth(1))
            .and_then(|v| v.trim().parse::<u64>().ok());
        assert_eq!(shown, Some(n), "{name}: {show}");
    }
    assert_eq!(in_use(&vm), 0);
}

/// Ones'-complement checksum (RFC 1071), written out here to check the reports' own.
fn csum(d: &[u8]) -> u16 {
    let mut s: u32 = d
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32)
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// What `mcast` interface pg0 sends while two tunnels to a group on it come and go: one
/// join when the first is created (IGMPv3 / MLDv2 report, CHANGE_TO_EXCLUDE with no
/// sources), nothing for the second or when the first of them is deleted, one leave
/// (CHANGE_TO_INCLUDE) when the last goes.
#[test]
fn vxlan4_group_tunnel_joins_and_leaves_on_its_interface() {
    group_tunnel_joins_and_leaves(false, LinkLocal::Eui64, false);
}

/// The same over IPv6: MLDv2 from pg0's link-local address (the one IPv6 gave it).
#[test]
fn vxlan6_group_tunnel_joins_and_leaves_on_its_interface() {
    group_tunnel_joins_and_leaves(true, LinkLocal::Eui64, false);
}

/// MLDv2 from the link-local address the operator set on pg0 (not the MAC's).
#[test]
fn vxlan6_group_report_from_the_link_local_address_set() {
    group_tunnel_joins_and_leaves(true, LinkLocal::Set("fe80::1234"), false);
}

/// MLDv2 from :: when pg0 has no IPv6 address (RFC 3810 §5.2.13; the source is on pg1).
#[test]
fn vxlan6_group_report_from_unspecified_without_link_local() {
    group_tunnel_joins_and_leaves(true, LinkLocal::None, false);
}

/// The tunnel made while pg0 is down: its join is dropped by `interface-output` and sent
/// again when pg0 comes up.
#[test]
fn vxlan4_group_join_sent_again_when_the_interface_comes_up() {
    group_tunnel_joins_and_leaves(false, LinkLocal::Eui64, true);
}

/// The link-local address of the group tunnel's interface in
/// [`group_tunnel_joins_and_leaves`].
#[derive(Clone, Copy)]
enum LinkLocal {
    /// The one IPv6 derives from the MAC with the first address.
    Eui64,
    /// This one, set before the first global address.
    Set(&'static str),
    /// None: the tunnel's source address is on another interface.
    None,
}

fn group_tunnel_joins_and_leaves(v6: bool, ll: LinkLocal, down_first: bool) {
    let (me, plen, group) = if v6 {
        ("2001:db8::1", 64, "ff0e::101")
    } else {
        ("10.0.0.1", 24, "239.1.1.1")
    };
    let (mut vm, t) = build();
    let mut setup = vec!["create packet-generator interface pg0".to_string()];
    if !down_first {
        setup.push("set interface state pg0 up".to_string());
    }
    match ll {
        LinkLocal::Eui64 => setup.push(format!("set interface ip address pg0 {me}/{plen}")),
        LinkLocal::Set(a) => setup.extend([
            format!("set interface ip address pg0 {a}/64"),
            format!("set interface ip address pg0 {me}/{plen}"),
        ]),
        LinkLocal::None => setup.extend([
            "create packet-generator interface pg1".to_string(),
            "set interface state pg1 up".to_string(),
            format!("set interface ip address pg1 {me}/{plen}"),
        ]),
    }
    clis(&mut vm, &t, &setup);
    // One directory per case: the cases run at once in this process.
    let tag = match ll {
        LinkLocal::Eui64 => "eui64",
        LinkLocal::Set(_) => "set",
        LinkLocal::None => "none",
    };
    let dir = std::env::temp_dir().join(format!(
        "tunnels-join-{v6}-{tag}-{down_first}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    *vm.ext_mut::<sluice_graph::pcap::CaptureDir>() = sluice_graph::pcap::CaptureDir(
        sluice_infra::files::OutputDir::new(&dir).expect("absolute temp dir"),
    );
    let outp = dir.join("out.pcap");
    cli(
        &mut vm,
        &t,
        &format!(
            "packet-generator capture pg0 pcap {} count 10",
            outp.display()
        ),
    );
    let mk = |v: u32| format!("create vxlan tunnel src {me} group {group} pg0 vni {v}");
    let mut steps = vec![
        mk(13),
        mk(14),
        format!("{} del", mk(13)),
        format!("{} del", mk(14)),
    ];
    if down_first {
        steps.insert(1, "set interface state pg0 up".to_string());
    }
    let mut sent = Vec::new();
    for c in &steps {
        cli(&mut vm, &t, c);
        for _ in 0..5 {
            vm.run_main_once();
        }
        sent.push(if_counter(&vm, "pg0", ifc::TX_PACKETS));
    }
    cli(&mut vm, &t, "packet-generator capture pg0 disable");
    let out = read_pcap(&outp);
    let _ = std::fs::remove_dir_all(&dir);
    // One report with the first tunnel, none with the second or its deletion, one with
    // the last tunnel's; with pg0 down at first, the join when it comes up.
    if down_first {
        assert_eq!(sent, vec![0, 1, 1, 1, 2]);
        assert_eq!(counter(&vm, "interface-output", "interface_down"), 1);
    } else {
        assert_eq!(sent, vec![1, 1, 1, 2]);
    }
    let pg0 = mac_of(&vm, "pg0");
    let want = |record: u8| -> Vec<u8> {
        let mut f = Vec::new();
        if v6 {
            f.extend_from_slice(&[0x33, 0x33, 0, 0, 0, 0x16]);
            f.extend_from_slice(&pg0);
            f.extend_from_slice(&[0x86, 0xdd]);
            let src = match ll {
                LinkLocal::Eui64 => {
                    // fe80::<modified EUI-64 of pg0's MAC>
                    let mut src = [0u8; 16];
                    src[..2].copy_from_slice(&[0xfe, 0x80]);
                    src[8..11].copy_from_slice(&[pg0[0] ^ 2, pg0[1], pg0[2]]);
                    src[11..13].copy_from_slice(&[0xff, 0xfe]);
                    src[13..].copy_from_slice(&pg0[3..]);
                    src
                }
                LinkLocal::Set(a) => a6(a),
                LinkLocal::None => [0; 16],
            };
            let dst = a6("ff02::16");
            f.extend(ip6(src, dst, 0, 36, 1));
            // Hop-by-hop: next header ICMPv6, Router Alert (MLD), PadN.
            f.extend_from_slice(&[58, 0, 5, 2, 0, 0, 1, 0]);
            let mut r = vec![143, 0, 0, 0, 0, 0, 0, 1, record, 0, 0, 0];
            r.extend_from_slice(&a6(group));
            let mut ph = Vec::new();
            ph.extend_from_slice(&src);
            ph.extend_from_slice(&dst);
            ph.extend_from_slice(&[0, 0, 0, 28, 0, 0, 0, 58]);
            ph.extend_from_slice(&r);
            r[2..4].copy_from_slice(&csum(&ph).to_be_bytes());
            f.extend(r);
        } else {
            f.extend_from_slice(&[0x01, 0, 0x5e, 0, 0, 0x16]);
            f.extend_from_slice(&pg0);
            f.extend_from_slice(&[0x08, 0x00]);
            let mut ip = vec![
                0x46, 0xc0, 0, 40, 0, 0, 0, 0, 1, 2, 0, 0, 10, 0, 0, 1, 224, 0, 0, 22, 0x94, 4, 0,
                0,
            ];
            let c = csum(&ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend(ip);
            let mut r = vec![0x22, 0, 0, 0, 0, 0, 0, 1, record, 0, 0, 0, 239, 1, 1, 1];
            let c = csum(&r);
            r[2..4].copy_from_slice(&c.to_be_bytes());
            f.extend(r);
        }
        f
    };
    assert_eq!(out, vec![want(4), want(3)]);
    assert_eq!(in_use(&vm), 0);
}

/// VXLAN over an ECMP underlay (two equal-cost next hops for the tunnel's destination):
/// the encap picks the load-balance bucket from each packet's inner flow and stacks on
/// its adjacency, no lookup — 32 inner flows (two packets each, in two frames) spread
/// over both next hops, each flow's packets on one. With one next hop's neighbour
/// forgotten (a bucket gleans), the tunnel's packets take the lookup arc (the lookup node
/// picks and gleans), and only the other next hop gets data. IPv4 and IPv6 underlay.
#[test]
fn vxlan_encap_spreads_inner_flows_over_ecmp() {
    for v6 in [false, true] {
        let (mut vm, t) = build();
        let (lk, l, plen, nh2, nh3, far, pfx) = if v6 {
            (
                "ip6-lookup",
                "2001:db8::1/64",
                128,
                "2001:db8::2",
                "2001:db8::3",
                "2001:db8:9::9",
                "2001:db8::1",
            )
        } else {
            (
                "ip4-lookup",
                "10.0.0.1/24",
                32,
                "10.0.0.2",
                "10.0.0.3",
                "192.0.2.9",
                "10.0.0.1",
            )
        };
        clis(
            &mut vm,
            &t,
            &[
                "create packet-generator interface pg0".to_string(),
                "create packet-generator interface pg1".to_string(),
                "set interface state pg0 up".to_string(),
                "set interface state pg1 up".to_string(),
                format!("set interface ip address pg0 {l}"),
                format!("ip neighbor pg0 {nh2} 02:00:00:00:00:02 static"),
                format!("ip neighbor pg0 {nh3} 02:00:00:00:00:03 static"),
                format!("ip route add {far}/{plen} via {nh2} pg0"),
                format!("ip route add {far}/{plen} via {nh3} pg0"),
                format!("create vxlan tunnel src {pfx} dst {far} vni 13"),
                "set interface state vxlan_tunnel0 up".to_string(),
                "set interface l2 bridge pg1 1".to_string(),
                "set interface l2 bridge vxlan_tunnel0 1".to_string(),
            ],
        );
        let mac2 = [0x02, 0, 0, 0, 0, 0x02];
        let mac3 = [0x02, 0, 0, 0, 0, 0x03];
        // 32 inner flows (UDP source ports 1000..1032), each twice; the flow is the
        // VXLAN source port (from the inner flow hash).
        let flow = |p: u16| {
            let mut f = inner_frame(H2, H1, 20);
            f[34..36].copy_from_slice(&p.to_be_bytes());
            f
        };
        let frames: Vec<Vec<u8>> = (0..64).map(|i| flow(1000 + i % 32)).collect();
        let et = if v6 { [0x86, 0xdd] } else { [0x08, 0x00] };
        let sport_at = if v6 { 14 + 40 } else { 14 + 20 };
        let lookups = vectors(&vm, lk);
        let out = run(&mut vm, &t, "pg1", "pg0", &frames, frames.len());
        assert_eq!(out.len(), 64, "v6 {v6}");
        assert_eq!(vectors(&vm, lk), lookups, "v6 {v6}: stacked, no lookup");
        let mut by_flow = std::collections::HashMap::new();
        for o in &out {
            assert_eq!(o[12..14], et, "v6 {v6}");
            let sport = u16::from_be_bytes([o[sport_at], o[sport_at + 1]]);
            let mac: [u8; 6] = o[..6].try_into().unwrap();
            assert!(mac == mac2 || mac == mac3, "v6 {v6}: {mac:?}");
            assert_eq!(
                *by_flow.entry(sport).or_insert(mac),
                mac,
                "v6 {v6}: one flow, one path"
            );
        }
        assert!(
            by_flow.len() >= 16,
            "v6 {v6}: {} source ports",
            by_flow.len()
        );
        let on3 = by_flow.values().filter(|&&m| m == mac3).count();
        assert!(
            on3 > 0 && on3 < by_flow.len(),
            "v6 {v6}: flows on both next hops ({on3} of {} on .3)",
            by_flow.len()
        );
        // .3 forgotten: its bucket gleans, so the tunnel takes the lookup arc; data only
        // to .2 (the lookup node sends .3's share to ARP/ND).
        cli(&mut vm, &t, &format!("ip neighbor del pg0 {nh3}"));
        let lookups = vectors(&vm, lk);
        let out = run(&mut vm, &t, "pg1", "pg0", &frames, frames.len());
        let data: Vec<_> = out
            .iter()
            .filter(|o| o[12..14] == et && o[..6] == mac2)
            .collect();
        assert!(!data.is_empty(), "v6 {v6}");
        assert!(out.iter().all(|o| o[..6] != mac3), "v6 {v6}: nothing to .3");
        assert_eq!(vectors(&vm, lk) - lookups, 64, "v6 {v6}: the lookup arc");
        assert_eq!(in_use(&vm), 0, "v6 {v6}");
    }
}
