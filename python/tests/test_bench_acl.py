"""The "acl" bench scenarios' configuration: every line of `acl_commands` is accepted by a
Sluice daemon's CLI (acl-100 and acl-stateful), and `acl_nft_ruleset` is a ruleset nftables
accepts (`nft -c`, a check that changes nothing). Needs the sluice binary; nft optional."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from sluice_bench.scenarios import SCENARIOS, acl_commands, acl_nft_ruleset
from sluice_test import SluiceInstance


@pytest.mark.parametrize("name", ["acl-100", "acl-stateful"])
def test_acl_scenario_commands_are_accepted_by_sluice(name):
    sc = SCENARIOS[name]
    cmds = acl_commands(sc, "pg0", "pg1")
    v = SluiceInstance(f"bench-{name}").start()
    try:
        for i in (0, 1):
            v.cli(f"create packet-generator interface pg{i}")
        for c in cmds:
            v.cli(c)  # raises CliError naming the line it refused
        idx = {n: int(re.search(rf"^{n}\s+(\d+)", v.cli("show interface"), re.M).group(1))
               for n in ("pg0", "pg1")}
        made = [c for c in cmds if c.startswith("set acl-plugin acl index ")]
        # Every rule in the ACLs (the stateful deny-all is one more), each ACL applied where
        # the scenario says: A's input list, or B's output list plus B's deny-all input.
        counts, inbound, outbound = [], [], []
        for i in range(len(made)):
            out = v.cli(f"show acl-plugin acl index {i}")
            counts.append(int(re.search(rf"acl-index {i} count (\d+)", out).group(1)))
            inbound.append(re.search(r"applied inbound on sw_if_index: ?(.*)", out).group(1))
            outbound.append(re.search(r"applied outbound on sw_if_index: ?(.*)", out).group(1))
        assert sum(counts) == sc.acl_rules + (1 if sc.stateful else 0)
        if sc.stateful:
            assert outbound[:-1] == [str(idx["pg1"])] * (len(made) - 1), outbound
            assert inbound[-1] == str(idx["pg1"]) and outbound[-1] == "", (inbound, outbound)
        else:
            assert inbound == [str(idx["pg0"])] * len(made), inbound
            assert outbound == [""] * len(made), outbound
    finally:
        v.stop()
    v.remove_dir()


@pytest.mark.parametrize("name", ["acl-100", "acl-stateful"])
def test_acl_scenario_nft_ruleset_is_valid(name):
    nft = shutil.which("nft")
    if nft is None:
        pytest.skip("nft (nftables) is not installed")
    ruleset = acl_nft_ruleset(SCENARIOS[name], "d0", "d1")
    p = subprocess.run([nft, "-c", "-f", "-"], input=ruleset, capture_output=True, text=True)
    if p.returncode != 0 and "Operation not permitted" in p.stderr:
        pytest.skip(f"nft -c needs privileges here: {p.stderr.strip()}")
    assert p.returncode == 0, p.stderr
