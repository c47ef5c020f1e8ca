"""Suites: which scenarios, DUTs and frame sizes run, with which search parameters.

- `smoke`: one frame size (64), IPv4 one-way, Sluice and Linux, searches capped at two short
  trials, one latency point, one fixed-rate loss trial. For the end-to-end test; a minute or so.
- `default`: every scenario once at 64 bytes, IPv4 one-way at all five RFC 2544 sizes, 1 s
  trials, latency at 10/50/90 % of NDR, loss at fixed offered rates of 0.1/0.25/0.5/1 Mpps,
  the engine benchmarks; <= 20 minutes on 2 cores.
- `full`: everything at every frame size, 2 s trials, two searches each, finer resolution,
  the engine benchmarks with more runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .rfc2544 import SearchConfig

#: RFC 2544 section 9.1 Ethernet frame sizes (the 889 is the research's "IMIX-like" mid size).
FRAME_SIZES = [64, 512, 889, 1280, 1518]


@dataclass
class Suite:
    name: str
    cases: list[tuple[str, list[int]]]          # (scenario, frame sizes)
    duts: list[str]
    search: SearchConfig = field(default_factory=SearchConfig)
    trial_s: float = 1.0
    warmup_s: float = 1.0
    repeat: int = 1                              # searches per case (RFC 2544: "trials")
    latency_fractions: list[float] = field(default_factory=lambda: [0.1, 0.5, 0.9])
    latency_pps: int = 5000                      # per direction, 64-byte latency stream
    # Seed 000's method beside RFC 2544: loss when every DUT is offered the same fixed
    # aggregate rates (pps), so DUTs are compared at equal load, not only at their own NDR.
    loss_rates: list[float] = field(default_factory=list)
    engine: list[str] | None = None              # sluice-bench arguments, None = skip

    def with_overrides(self, **kw) -> "Suite":
        kw = {k: v for k, v in kw.items() if v is not None}
        search_kw = {k: kw.pop(k) for k in list(kw) if k in SearchConfig.__dataclass_fields__}
        s = replace(self, **kw)
        if search_kw:
            s.search = replace(s.search, **search_kw)
        return s


#: The VPP rows are skipped with a reason when no VPP install is given (--vpp-prefix).
ALL_DUTS = ["sluice-af_packet", "linux", "sluice-memif", "sluice-af_xdp",
            "vpp-af_packet", "vpp-memif", "vpp-af_xdp"]


def _sizes(scenario: str) -> list[int]:
    """Every RFC 2544 size, except that VXLAN's 50 bytes must fit B's 1500-byte MTU."""
    from .scenarios import SCENARIOS, VXLAN_OVERHEAD
    if SCENARIOS[scenario].kind == "vxlan":
        return [s for s in FRAME_SIZES if s - 4 + VXLAN_OVERHEAD <= 1514]
    return FRAME_SIZES


def get(name: str) -> Suite:
    if name == "smoke":
        return Suite(
            "smoke", [("ip4-oneway", [64])], ["sluice-af_packet", "linux"],
            search=SearchConfig(max_rate=300_000, resolution=0.1, max_trials=2),
            trial_s=0.5, warmup_s=0.5, latency_fractions=[0.5], latency_pps=1000,
            loss_rates=[100_000])
    if name == "default":
        return Suite(
            "default",
            [("ip4-oneway", FRAME_SIZES), ("ip4-bidir", [64]), ("nat44-oneway", [64]),
             ("l2-xconnect", [64]), ("l2-bridge", [64]), ("ip4-fib-255k", [64]),
             ("ip6-oneway", [64]), ("ip6-fib-255k", [64]), ("vxlan-encap", [64])],
            ALL_DUTS,
            search=SearchConfig(max_rate=1_000_000, resolution=0.03, max_trials=10),
            trial_s=1.0, warmup_s=1.0,
            loss_rates=[100_000, 250_000, 500_000, 1_000_000],
            engine=["--runs", "3", "--packets", "4000000"])
    if name == "full":
        from .scenarios import SCENARIOS
        return Suite(
            "full", [(s, _sizes(s)) for s in SCENARIOS], ALL_DUTS,
            search=SearchConfig(max_rate=2_000_000, resolution=0.01, max_trials=16),
            trial_s=2.0, warmup_s=2.0, repeat=2,
            loss_rates=[100_000, 250_000, 500_000, 1_000_000, 2_000_000],
            engine=["--runs", "5", "--packets", "10000000"])
    raise ValueError(f"unknown suite `{name}' (smoke, default, full)")
