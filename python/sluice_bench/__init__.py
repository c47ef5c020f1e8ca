"""sluice_bench: the end-to-end benchmark harness (RFC 2544 NDR/PDR, latency, CPU per packet)
with a Sluice instance as the traffic tester and pluggable devices under test (Sluice, the
Linux kernel). Entry point: `sluice-bench run --suite smoke|default|full` (or
`python -m sluice_bench run ...`); method and report: docs/benchmarking.md."""
