//! The runtime the p4 API and direct-meter tests share: the real daemon assembly with the
//! p4 plugin, one thread (or a main thread and workers), a small private buffer pool.

use sluice_graph::CpuConfig;
use sluice_vnet::plugin::Assembled;

#[allow(dead_code)] // Not every test file uses both.
pub fn runtime() -> Assembled {
    runtime_with_workers(0)
}

/// [`runtime`] with `workers` worker threads (unpinned); stop them with `stop_workers`.
#[allow(dead_code)]
pub fn runtime_with_workers(workers: usize) -> Assembled {
    let cpu = CpuConfig {
        main_core: None,
        workers: vec![None; workers],
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
