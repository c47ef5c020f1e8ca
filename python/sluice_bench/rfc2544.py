"""RFC 2544 throughput search: NDR (no drop rate) and PDR (partial drop rate).

RFC 2544 section 26.1 defines throughput as the fastest rate at which no offered frame is
lost, found by trials at fixed rates. This module holds the search only: a trial is a callable
`trial(rate_pps) -> Trial` supplied by the caller (the real tester, or a simulated DUT in the
unit tests), so the algorithm is tested against known loss curves.

Search (per `SearchConfig`):

1. One trial at `max_rate`. If it passes, the result is that trial, flagged
   `tester_limited` when the tester could not even offer the rate asked for (then the DUT is at
   least that fast: the report prints ">=").
2. Otherwise the delivered rate of that overload trial is the first estimate (what the DUT
   managed to forward when flooded). Trials step down from it, by `step_down` first and by
   growing steps after, until one passes, so the bracket [pass, fail] is found in few trials.
3. Bisection of the bracket until `(fail - pass) / fail <= resolution` (or `max_trials`).

PDR is searched first; NDR (loss ratio 0) then reuses every PDR trial with zero loss and
searches below the PDR, which saves trials. Rates are the offered rates the tester measured,
not the targets, so a tester that falls short of its target cannot inflate a result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable


@dataclass
class Trial:
    """One fixed-rate trial. `tx` counts frames the tester's driver accepted, `rx` the test
    frames received back (duplicates excluded); `offered_pps` is tx over the trial's elapsed
    time, i.e. the load the DUT really saw. `tx_fail`: frames the tester's own driver refused
    (not DUT loss; the trial is tester-limited)."""

    target_pps: float
    offered_pps: float
    tx: int
    rx: int
    duration_s: float = 0.0
    tx_fail: int = 0
    extra: dict = field(default_factory=dict)  # CPU, latency, counters: carried to the report

    @property
    def lost(self) -> int:
        return max(self.tx - self.rx, 0)

    @property
    def loss_ratio(self) -> float:
        return self.lost / self.tx if self.tx else 1.0

    @property
    def delivered_pps(self) -> float:
        return self.offered_pps * (self.rx / self.tx) if self.tx else 0.0

    def tester_limited(self, tolerance: float = 0.03) -> bool:
        """The tester offered clearly less than asked (its own limit, not the DUT's): its
        driver refused frames (`tx_fail`, beyond `tolerance / 10` of them) or it paced
        below the target."""
        attempted = self.tx + self.tx_fail
        if attempted and self.tx_fail > attempted * tolerance / 10:
            return True
        return self.offered_pps < self.target_pps * (1.0 - tolerance)

    def passes(self, loss_ratio: float) -> bool:
        if self.tx == 0 or self.extra.get("failed"):
            return False  # "failed": the DUT crashed during the trial (runner)
        if loss_ratio <= 0.0:
            return self.rx >= self.tx
        return self.loss_ratio <= loss_ratio

    def to_json(self) -> dict:
        d = asdict(self)
        d["loss_ratio"] = self.loss_ratio
        return d


@dataclass
class SearchConfig:
    max_rate: float = 2_000_000.0   # pps; the first trial
    min_rate: float = 1_000.0       # below this the search gives up (result 0)
    pdr_loss: float = 0.005         # PDR: loss ratio allowed (RFC 2544 has only NDR; 0.5 %)
    resolution: float = 0.02        # stop when (fail - pass) / fail <= this
    step_down: float = 0.05         # from the overload estimate, step down by 5 % until a pass
    max_trials: int = 14            # per search (safety bound)


@dataclass
class SearchResult:
    """Outcome of one search. `rate_pps` is the offered rate of the best passing trial (0 if
    none passed); `tester_limited` means that trial was capped by the tester."""

    loss_allowed: float
    rate_pps: float
    best: Trial | None
    trials: list[Trial]
    tester_limited: bool = False
    upper_fail_pps: float | None = None

    def to_json(self) -> dict:
        return {
            "loss_allowed": self.loss_allowed,
            "rate_pps": self.rate_pps,
            "tester_limited": self.tester_limited,
            "upper_fail_pps": self.upper_fail_pps,
            "best": self.best.to_json() if self.best else None,
            "n_trials": len(self.trials),
        }


def search(trial: Callable[[float], Trial], loss: float, cfg: SearchConfig,
           known: list[Trial] | None = None, hi: float | None = None) -> SearchResult:
    """Finds the highest rate whose trial loses at most `loss` (ratio; 0 = NDR).

    `known`: trials already run (e.g. by a PDR search) that are reused as bracket ends; `hi`:
    an upper bound to start from instead of `cfg.max_rate` (e.g. the PDR for an NDR search).
    Returns the trials it ran itself in `.trials`."""
    ran: list[Trial] = []
    best: Trial | None = None
    fail: float | None = None  # lowest offered rate seen failing

    def consider(t: Trial) -> None:
        nonlocal best, fail
        if t.passes(loss):
            if best is None or t.offered_pps > best.offered_pps:
                best = t
        else:
            rate = t.offered_pps if t.tx else t.target_pps
            if fail is None or rate < fail:
                fail = rate

    def run(rate: float) -> Trial:
        t = trial(rate)
        ran.append(t)
        consider(t)
        return t

    for t in known or []:
        consider(t)
    # A known pass above a known fail cannot bracket (noise): trust the fails, drop such passes.
    if best is not None and fail is not None and best.offered_pps >= fail:
        best = None

    start = hi if hi is not None else cfg.max_rate
    if best is None and fail is None:
        first = run(start)
        if first.passes(loss):
            return SearchResult(loss, first.offered_pps, first, ran,
                                tester_limited=first.tester_limited())
        estimate = first.delivered_pps
    elif best is None:
        # Only failures known: start from the smallest failing rate's delivered rate.
        fails = [t for t in (known or []) if not t.passes(loss)]
        estimate = min(fails, key=lambda t: t.offered_pps).delivered_pps if fails else start
    else:
        estimate = None

    if best is None:
        # Step down from the estimate until a trial passes.
        rate = min(estimate or start, fail or start) * (1.0 - cfg.step_down)
        while len(ran) < cfg.max_trials:
            if rate < cfg.min_rate:
                return SearchResult(loss, 0.0, None, ran, upper_fail_pps=fail)
            t = run(rate)
            if t.passes(loss):
                break
            rate = min(rate, t.offered_pps) * (1.0 - cfg.step_down) ** (1 + len(ran) // 3)
        if best is None:
            return SearchResult(loss, 0.0, None, ran, upper_fail_pps=fail)

    if fail is None:
        # Everything passed so far (known passes only): probe the upper bound unless a pass
        # was already taken there.
        if best.target_pps < start * (1.0 - 1e-9):
            run(start)
        if fail is None:
            return SearchResult(loss, best.offered_pps, best, ran,
                                tester_limited=best.tester_limited())

    while len(ran) < cfg.max_trials and fail is not None and best is not None:
        lo = best.offered_pps
        if (fail - lo) / fail <= cfg.resolution:
            break
        run((lo + fail) / 2.0)
    assert best is not None
    return SearchResult(loss, best.offered_pps, best, ran,
                        tester_limited=best.tester_limited(), upper_fail_pps=fail)


def ndr_pdr(trial: Callable[[float], Trial], cfg: SearchConfig) -> tuple[SearchResult, SearchResult]:
    """PDR first, then NDR below it reusing the PDR search's trials."""
    pdr = search(trial, cfg.pdr_loss, cfg)
    if pdr.best is None:
        return SearchResult(0.0, 0.0, None, [], upper_fail_pps=pdr.upper_fail_pps), pdr
    ndr = search(trial, 0.0, cfg, known=pdr.trials, hi=pdr.upper_fail_pps or cfg.max_rate)
    return ndr, pdr


class SimulatedDut:
    """A DUT with a known loss curve, for testing the search (and nothing else).

    Below `ndr_pps` nothing is lost. Between `ndr_pps` and `capacity_pps` the loss ratio grows
    linearly to `knee_loss` (buffer overflows before saturation); above `capacity_pps` the DUT
    delivers at most `capacity_pps` (plus the knee loss). The tester offers at most
    `tester_max_pps`."""

    def __init__(self, ndr_pps: float, capacity_pps: float, knee_loss: float = 0.01,
                 tester_max_pps: float = float("inf"), duration_s: float = 1.0):
        self.ndr_pps = ndr_pps
        self.capacity_pps = capacity_pps
        self.knee_loss = knee_loss
        self.tester_max_pps = tester_max_pps
        self.duration_s = duration_s
        self.calls: list[float] = []

    def loss_ratio(self, offered: float) -> float:
        if offered <= self.ndr_pps:
            return 0.0
        if offered <= self.capacity_pps:
            span = self.capacity_pps - self.ndr_pps
            return self.knee_loss * (offered - self.ndr_pps) / span if span > 0 else 0.0
        delivered = self.capacity_pps * (1.0 - self.knee_loss)
        return 1.0 - delivered / offered

    def __call__(self, rate: float) -> Trial:
        self.calls.append(rate)
        offered = min(rate, self.tester_max_pps)
        tx = int(round(offered * self.duration_s))
        lost = int(round(tx * self.loss_ratio(offered)))
        if offered > self.ndr_pps and lost == 0:
            lost = 1  # past the NDR at least one frame is lost
        return Trial(target_pps=rate, offered_pps=offered, tx=tx, rx=tx - lost,
                     duration_s=self.duration_s)
