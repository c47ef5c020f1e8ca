//! The runtime the p4 API and direct-meter tests share: the real daemon assembly with the
//! p4 plugin, one thread, a small private buffer pool.

use sluice_graph::CpuConfig;
use sluice_vnet::plugin::Assembled;

pub fn runtime() -> Assembled {
    let cpu = CpuConfig {
        main_core: None,
        workers: Vec::new(),
    };
    let plugins: Vec<&'static dyn sluice_vnet::plugin::Plugin> = vec![&sluice_p4::PLUGIN];
    let entries = sluice_vnet::plugin::PluginsConfig::default().entries(&plugins);
    sluice_vnet::plugin::assemble(
        &entries,
        &cpu,
        &sluice_graph::testing::test_pool(),
        Default::default(),
    )
    .expect("runtime")
}
