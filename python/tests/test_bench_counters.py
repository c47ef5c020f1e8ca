"""Per-trial diagnostics without root: the counter snapshots (Sluice `show` output parsed,
af_xdp kernel ring counters, the scheduler's wait time) and their deltas, and the drain after
`tester stop` (frames in flight are waited for, RFC 2544 §23, not counted as lost)."""

import os

from sluice_bench import tester as tester_mod
from sluice_bench.counters import counter_delta, sched_counters, sluice_counters

ERRORS = """       Count  Node                            Reason                                          Severity
        6765  memif-tx                        tx ring full                                    error
"""
INTERFACES = """Name                       Idx   State  MTU (L3/IP4/IP6/MPLS)   Counter                    Count
local0                       0    down  0/0/0/0
xdp0                         1      up  1500/0/0/0              rx packets                 15000
                                                                rx-miss                    35000
"""
AF_XDP = """xdp0 (sw_if_index 1): Linux `sb1d0' ifindex 2
  native XDP, copy mode, 1 of 1 queue(s), rx-queue-size 512 tx-queue-size 512, UMEM 2048 KiB per queue
    queue 0: fd 8 thread 0 (sluice_main) polling, kernel rx dropped 35000 ring full 0 fill ring empty 35000 invalid rx/tx descs 0/2
"""


class FakeVpp:
    def __init__(self):
        self.calls = []

    def cli(self, c):
        self.calls.append(c)
        return {"show errors": ERRORS, "show interface": INTERFACES}[c]

    def cli_try(self, c):
        self.calls.append(c)
        return AF_XDP if c == "show af_xdp" else ""


def test_sluice_counters_parse_errors_interfaces_and_af_xdp_kernel_rings():
    v = FakeVpp()
    c = sluice_counters(v, ("show af_xdp",))
    # `show af_xdp` first: it is what folds the kernel's socket drops into rx-miss.
    assert v.calls[0] == "show af_xdp"
    assert c["error memif-tx: tx ring full"] == 6765
    assert c["xdp0 rx-miss"] == 35000 and c["xdp0 rx packets"] == 15000
    assert c["af_xdp xdp0 q0 kernel fill ring empty"] == 35000
    assert c["af_xdp xdp0 q0 kernel tx invalid descs"] == 2
    assert counter_delta({"a": 1, "b": 2}, {"a": 1, "b": 5, "c": 7}) == {"b": 3, "c": 7}


def test_sched_counters_read_this_process():
    c = sched_counters(os.getpid(), "me")
    assert c["sched me run us"] > 0 and c["sched me wait us"] >= 0
    assert "sched me involuntary switches" in c
    assert sched_counters(None, "x") == {} and sched_counters(2 ** 22 + 12345, "x") == {}


def drain_with(monkeypatch, rx_seq):
    monkeypatch.setattr(tester_mod, "DRAIN_MIN_S", 0.0)
    monkeypatch.setattr(tester_mod, "DRAIN_POLL_S", 0.001)
    monkeypatch.setattr(tester_mod, "DRAIN_IDLE_S", 0.02)
    t = tester_mod.Tester.__new__(tester_mod.Tester)
    seq = iter(rx_seq)
    last = {}

    def show():
        last["rx"] = next(seq, last.get("rx", rx_seq[-1]))
        return {"streams": {"a2b": {"tx_packets": 100, "rx_packets": last["rx"],
                                    "duplicate": 0}}}
    t.show = show
    s = tester_mod.Stream("a2b", None, "", "", "", 64)
    return t.drain([s]), last["rx"]


def test_drain_waits_for_frames_in_flight_then_stops_when_all_arrived(monkeypatch):
    res, rx = drain_with(monkeypatch, [10, 50, 90, 100, 100])
    assert res["drained"] is True and rx == 100


def test_drain_gives_up_when_reception_stopped(monkeypatch):
    res, rx = drain_with(monkeypatch, [10, 60, 97])
    assert res["drained"] is False and rx == 97
    assert res["drain_s"] < 1.0
