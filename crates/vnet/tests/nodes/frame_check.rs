//! The one bound check per frame (`Arena::check_frame`) of the nodes whose per-packet loop
//! then resolves buffer indices unchecked: a frame holding an index past the pool panics
//! before any packet of it is touched.

use super::*;
use sluice_buffer::BufIdx;
use sluice_graph::testing::test_pool;

/// Feeds `node` a frame whose only index is one past the test pool's last buffer.
fn feed_an_index_out_of_range(node: &str) {
    let (mut t, _) = setup(node);
    t.h.inject(&[BufIdx(test_pool().buffers)]);
}

#[test]
#[should_panic(expected = "a frame holds a buffer index out of range")]
fn a_per_packet_node_checks_its_frame() {
    // ip6-input is a `PerPacket` node.
    feed_an_index_out_of_range("ip6-input");
}

#[test]
#[should_panic(expected = "a frame holds a buffer index out of range")]
fn ip4_lookup_checks_its_frame() {
    feed_an_index_out_of_range("ip4-lookup");
}

#[test]
#[should_panic(expected = "a frame holds a buffer index out of range")]
fn ip6_lookup_checks_its_frame() {
    feed_an_index_out_of_range("ip6-lookup");
}

#[test]
#[should_panic(expected = "a frame holds a buffer index out of range")]
fn interface_output_checks_its_frame() {
    feed_an_index_out_of_range("interface-output");
}
