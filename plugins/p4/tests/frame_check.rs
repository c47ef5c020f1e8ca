//! The one bound check per frame (`Arena::check_frame`) of the single node on generated
//! code, whose per-packet loops then resolve buffer indices unchecked
//! (`node::frame_generated`, `node::frame_staged`): a frame holding an index past the pool
//! panics before any packet of it is touched.

use sluice_buffer::BufIdx;
use sluice_graph::testing::test_pool;
use sluice_vnet::testing::NodeTest;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");

/// Loads example `file` in single mode (node `p4-c`) and feeds it a frame whose only index
/// is one past the test pool's last buffer.
fn feed_an_index_out_of_range(file: &str, table: &str) {
    let plugins: Vec<&'static dyn sluice_vnet::plugin::Plugin> = vec![&sluice_p4::PLUGIN];
    let entry = sluice_vnet::plugin::PluginsConfig::default().entries(&plugins);
    let mut t = NodeTest::with_plugins(&entry, "ethernet-input");
    t.cli(&format!("p4 load {EXAMPLES}/{file} name c mode single"));
    let show = t.cli("show p4 program c");
    assert!(show.contains("executor: generated"), "{show}");
    assert!(show.contains(&format!("table {table} [")), "{show}");
    t.inject_at("p4-c", &[BufIdx(test_pool().buffers)]);
}

/// The L2 switch's first table (`smac`, exact, a few entries) does not pay for stages
/// (`node::stage_pays`): the frame runs `node::frame_generated`.
#[test]
#[should_panic(expected = "a frame holds a buffer index out of range")]
fn generated_single_node_checks_its_frame() {
    feed_an_index_out_of_range("l2switch.p4", "SwIngress.smac");
}

/// The router's first table (`ipv4_lpm`) is a DIR-24-8, which always pays for stages: the
/// frame runs `node::frame_staged`.
#[test]
#[should_panic(expected = "a frame holds a buffer index out of range")]
fn staged_single_node_checks_its_frame() {
    feed_an_index_out_of_range("router.p4", "MyIngress.ipv4_lpm");
}
