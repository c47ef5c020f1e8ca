"""pytest hooks: remember each phase's report, attach the daemon's state to failures, and
name the binary under test in the session header. Loaded by python/tests/conftest.py."""

from __future__ import annotations

import os

import pytest

from .instance import REPO_ROOT

REPORTS_KEY = pytest.StashKey[dict]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    item.stash.setdefault(REPORTS_KEY, {})[rep.when] = rep
    if rep.failed and rep.when in ("setup", "call"):
        inst = getattr(item, "instance", None)
        text = getattr(inst, "_failure_diag", None)
        if text is None and inst is not None and hasattr(inst, "diagnostics") \
                and getattr(inst, "vpp", None) is not None:
            try:
                text = inst.diagnostics()
            except Exception as e:  # diagnostics must never hide the real failure
                text = f"(collecting diagnostics failed: {e!r})"
        if text:
            rep.sections.append(("sluice diagnostics (show trace, show errors, pcaps)", text))
    return rep


def pytest_report_header(config):
    env = os.environ.get("SLUICE_BIN")
    path = env or str(REPO_ROOT / "target" / "debug" / "sluice")
    state = "found" if os.path.isfile(path) else "MISSING: every test will fail"
    return f"sluice binary: {path} ({state})"
