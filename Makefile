# Sluice — the two quick-start commands are `make run` and `make test`.
.PHONY: run test bench check fmt clippy

# Run Sluice's main job on the built-in default: pg traffic through the graph, live rate,
# then `show runtime`. No root, hugepages, NIC or config needed.
run:
	./scripts/run.sh

# The whole test suite (what CI runs).
test:
	./scripts/test.sh

# Engine benchmarks (not tests): pg -> null Mpps, per-node clocks, handoff.
bench:
	./scripts/bench.sh

fmt:
	cargo fmt --all

clippy:
	cargo clippy --workspace --all-targets -- -D warnings
