"""`SluiceTestCase`: the base class of the functional tests (pytest, class based).

Every test method gets its own daemon in its own temporary directory (`self.vpp`), started
before the test and stopped after it. The teardown deletes leftover streams and captures,
removes registered configuration newest first, asserts that no buffer is in use and that
the daemon exits cleanly on SIGTERM. When a test fails, `diagnostics()` (show trace, show
errors, show interface, the pcap files, the daemon log) is attached to the pytest report by
the plugin in `sluice_test.plugin`, and the temporary directory is kept.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from pathlib import Path
from typing import Iterable

import pytest
from scapy.packet import Packet

from .instance import CliError, SluiceError, SluiceInstance
from .parsers import parse_buffers_used, parse_errors, parse_interfaces, parse_pg_streams
from .pcap import Frame, read_pcap
from .pg import PgInterface, Stream

log = logging.getLogger("sluice")

_TEST_SEQ = itertools.count()

CounterKey = tuple[str, str]


class SluiceTestCase:
    """Base class for functional tests. Subclasses may set:

    - `extra_config`: text appended to the generated startup.conf;
    - `trace_count`: packets traced per `pg_start()` (`trace add pg-input N`);
    - `stream_timeout`: seconds a started stream may take to finish;

    and override `setup_test()` / `teardown_test()` (called after the daemon is up and before
    the automatic cleanup, respectively)."""

    extra_config = ""
    trace_count = 50
    stream_timeout = 30.0
    #: Counters `assert_counters` does not check: they count the framework's own captures,
    #: not the behaviour under test. A test may still name them in `delta` to check them.
    counters_ignored: frozenset = frozenset({("pg-tx", "packets written to capture file")})

    vpp: SluiceInstance
    pg_interfaces: list[PgInterface]

    # -- pytest life cycle --------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _sluice_lifecycle(self, request):
        self._setup_framework(request)
        try:
            self.setup_test()
        except BaseException:
            # The test body will not run. Keep the diagnostics for the plugin (the daemon is
            # stopped before the setup report is made), then clean up.
            self._failure_diag = self.diagnostics()
            try:
                self._teardown_framework(request, failed=True)
            except BaseException as e:  # the setup error is the one to report
                log.error("cleanup after failed setup: %s", e)
            raise
        yield
        failed = _item_failed(request.node)
        try:
            self.teardown_test()
        finally:
            self._teardown_framework(request, failed=failed)

    def setup_test(self) -> None:
        """Hook: runs after the daemon is up (create interfaces, base config)."""

    def teardown_test(self) -> None:
        """Hook: runs before the automatic cleanup."""

    def _setup_framework(self, request) -> None:
        self._test_no = next(_TEST_SEQ)
        self._file_seq = itertools.count()
        self._stream_seq = itertools.count()
        self._configs: list = []
        self._streams: list[Stream] = []
        self._pending: list[Stream] = []
        self._pcaps: list[Path] = []
        self.pg_interfaces = []
        self._counter_baseline: dict[CounterKey, int] | None = None
        self.vpp = SluiceInstance(tag=request.node.name, extra_config=self.extra_config)
        error = None
        try:
            self.vpp.start()
        except SluiceError as e:
            error = str(e)
        if error is not None:
            # Not a skip: a suite that cannot run must not look green.
            pytest.fail(error, pytrace=False)
        self.snapshot_counters()

    def _teardown_framework(self, request, failed: bool) -> None:
        keep = failed or bool(os.environ.get("SLUICE_KEEP_TMP"))
        vpp = self.vpp
        try:
            if not vpp.alive():
                raise SluiceError(f"sluice died during the test (status "
                                  f"{vpp.proc.returncode}):\n{vpp.stderr_text()[-4000:]}")
            problems = []
            for s in list(self._streams):
                try:
                    vpp.cli(f"packet-generator disable {s.name}")
                    self._delete_stream(s)
                except (CliError, AssertionError) as e:
                    problems.append(f"deleting stream {s.name}: {e}")
            for i in self.pg_interfaces:
                if i.capture_path is not None:
                    try:
                        i.disable_capture()
                    except CliError as e:
                        problems.append(f"disabling capture on {i.name}: {e}")
                    i.capture_path = None
            for obj in reversed(list(self._configs)):
                try:
                    obj.remove_config()
                except (CliError, AssertionError) as e:
                    problems.append(f"removing {obj.object_id()}: {e}")
            try:
                self.assert_no_leaks()
            except AssertionError as e:
                problems.append(str(e))
            if problems and not failed:
                keep = True
                diag = self.diagnostics()
                raise AssertionError("teardown: " + "\n".join(problems) + "\n" + diag)
            if problems:
                log.error("teardown after a failed test: %s", "\n".join(problems))
            vpp.stop()
        except BaseException:
            keep = True
            raise
        finally:
            if vpp.alive():
                vpp.kill()
            if keep:
                log.warning("kept test directory %s", vpp.dir)
            else:
                vpp.remove_dir()

    # -- names and files ----------------------------------------------------------------

    def new_stream_name(self) -> str:
        """A stream name unique in the session (t<test>s<n>)."""
        return f"t{self._test_no}s{next(self._stream_seq)}"

    def new_file(self, stem: str, ext: str) -> Path:
        """A new, unique path in the test's temporary directory."""
        return self.vpp.dir / f"{stem}-{next(self._file_seq)}.{ext}"

    def register_pcap(self, path: Path) -> None:
        self._pcaps.append(path)

    def register_stream(self, s: Stream) -> None:
        self._streams.append(s)
        self._pending.append(s)
        self.register_pcap(s.pcap)

    def register_config(self, obj) -> None:
        if obj not in self._configs:
            self._configs.append(obj)

    def unregister_config(self, obj) -> None:
        if obj in self._configs:
            self._configs.remove(obj)

    # -- interfaces ---------------------------------------------------------------------

    def create_pg_interfaces(self, indexes: Iterable[int], up: bool = True,
                             ip4: bool = False, resolve: bool = False,
                             ip6: bool = False) -> list[PgInterface]:
        """Creates pg interfaces (optionally up, with 10.0.N.1/24 and/or fd01:N::1/64, with
        the remote host's static neighbours) and appends them to `self.pg_interfaces`."""
        out = []
        for i in indexes:
            pg = PgInterface(self, i).create()
            if up:
                pg.admin_up()
            if ip4:
                pg.config_ip4()
            if ip6:
                pg.config_ip6()
            if resolve and ip4:
                pg.resolve_arp()
            if resolve and ip6:
                pg.resolve_ndp()
            self.pg_interfaces.append(pg)
            out.append(pg)
        return out

    # -- streams ------------------------------------------------------------------------

    def pg_enable(self) -> list[Stream]:
        """Enables every stream added since the last start, with a fresh packet trace."""
        streams, self._pending = self._pending, []
        self.vpp.cli("clear trace")
        if self.trace_count:
            self.vpp.cli(f"trace add pg-input {self.trace_count}")
        for s in streams:
            self.vpp.cli(f"packet-generator enable {s.name}")
            s.enabled = True
        return streams

    def wait_for_streams(self, streams: Iterable[Stream], timeout: float | None = None,
                         delete: bool = True) -> None:
        """Waits until each stream has sent all its packets and was disabled by the
        generator, then deletes it."""
        streams = list(streams)
        timeout = self.stream_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            text = self.vpp.cli("show packet-generator")
            table = parse_pg_streams(text)
            pending = []
            for s in streams:
                st = table.get(s.name)
                if st is None:
                    raise AssertionError(f"stream {s.name} vanished:\n{text}")
                if st.enabled or st.count < s.expected:
                    pending.append(s)
            if not pending:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"streams {[s.name for s in pending]} did not finish "
                                     f"within {timeout}s:\n{text}")
            time.sleep(0.02)
        if delete:
            for s in streams:
                self._delete_stream(s)

    def _delete_stream(self, s: Stream) -> None:
        self.vpp.cli(f"packet-generator delete {s.name}")
        if s in self._streams:
            self._streams.remove(s)
        if s in self._pending:
            self._pending.remove(s)
        if s.name in parse_pg_streams(self.vpp.cli("show packet-generator")):
            raise AssertionError(f"stream {s.name} still listed after delete")

    def stream_sent(self, s: Stream) -> int:
        st = parse_pg_streams(self.vpp.cli("show packet-generator")).get(s.name)
        if st is None:
            raise AssertionError(f"no stream {s.name}")
        return st.count

    def pg_start(self, timeout: float | None = None) -> None:
        """Enables the pending streams, waits until they are done and deletes them."""
        self.wait_for_streams(self.pg_enable(), timeout)

    # -- send / expect ------------------------------------------------------------------

    def send_and_expect(self, src_if: PgInterface, pkts: Iterable[Frame],
                        dst_if: PgInterface, n_rx: int | None = None,
                        node: str | None = None, timeout: float = 20.0) -> list[Packet]:
        """Sends `pkts` as received on `src_if` and returns what `dst_if` transmitted,
        failing unless that is exactly `n_rx` packets (default: as many as were sent)."""
        pkts = list(pkts)
        n_rx = len(pkts) if n_rx is None else n_rx
        dst_if.enable_capture()
        src_if.add_stream(pkts, node=node)
        self.pg_start()
        return dst_if.get_capture(n_rx, timeout,
                                  remark=f"send_and_expect {src_if.name} -> {dst_if.name}")

    def send_and_assert_no_replies(self, src_if: PgInterface, pkts: Iterable[Frame],
                                   remark: str = "", node: str | None = None) -> None:
        """Sends `pkts` on `src_if` and fails if any interface transmitted anything: the tx
        counters of `show interface` must not move (every pg interface is also captured, to
        show what leaked)."""
        before = self.get_interface_counters()
        caps = [i for i in self.pg_interfaces if i.capture_path is None]
        for i in caps:
            i.enable_capture()
        src_if.add_stream(pkts, node=node)
        self.pg_start()
        after = self.get_interface_counters()
        moved = {}
        for name in set(before) | set(after):
            d = (after.get(name, {}).get("tx packets", 0)
                 - before.get(name, {}).get("tx packets", 0))
            if d:
                moved[name] = d
        leaked = []
        for i in caps:
            path = i.capture_path
            i.disable_capture()
            i.capture_path = None
            leaked += [f"  {i.name}: {p.summary()}" for p in read_pcap(path)[:10]]
        if moved or leaked:
            raise AssertionError(
                f"{remark + ': ' if remark else ''}expected no packets out, but tx counters "
                f"moved {moved}:\n" + "\n".join(leaked))

    def assert_cli_error(self, line: str, token: str, what: str | None = None) -> str:
        """Runs CLI `line`, which must fail with an error naming `token`; returns the error.
        `what` says what acceptance would mean (default: `accepted: <line>`)."""
        try:
            self.vpp.cli(line)
        except CliError as e:
            assert token in e.msg, e.msg
            return e.msg
        raise AssertionError(what or f"accepted: {line}")

    @staticmethod
    def assert_api_error(code, fn, match: str | None = None, **kw):
        """Calls API method `fn(**kw)`, which must fail with `code` (a `Retval`) and, if
        given, a message containing `match`; returns the `ApiError`."""
        from sluice_papi import ApiError
        try:
            fn(**kw)
        except ApiError as e:
            assert e.retval == code, str(e)
            assert match is None or match in e.message, e.message
            return e
        raise AssertionError(f"accepted: {getattr(fn, '__name__', fn)}({kw})")

    def wait_for(self, cond, what: str, timeout: float = 10.0) -> None:
        """Polls `cond()` until it is true; fails naming `what` after `timeout` seconds
        (generous: a wait, not a speed check, on a machine that may be loaded)."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for: {what}")
            time.sleep(0.02)

    # -- counters -----------------------------------------------------------------------

    def get_counters(self) -> dict[CounterKey, int]:
        """Every node counter (`show errors verbose`) as {(node, reason): count}."""
        return parse_errors(self.vpp.cli("show errors verbose"))

    def snapshot_counters(self) -> dict[CounterKey, int]:
        """Sets (and returns) the baseline for the next `assert_counters`."""
        self._counter_baseline = self.get_counters()
        return self._counter_baseline

    def assert_counters(self, delta: dict[CounterKey, int],
                        since: dict[CounterKey, int] | None = None,
                        timeout: float = 1.0) -> None:
        """Checks that each named (node, reason) counter changed by exactly the given amount
        and that every other counter (but `counters_ignored`) did not change, relative to
        `since` (default: the baseline taken at setup, by `snapshot_counters()` or by the
        last successful `assert_counters()`). On success the baseline moves to the current
        values.

        Process nodes (neighbour learning) may count a little after the packets went
        through, so a mismatch is re-read for up to `timeout` seconds before failing."""
        before = self._counter_baseline if since is None else since
        assert before is not None
        deadline = time.monotonic() + timeout
        while True:
            after = self.get_counters()
            unknown = [k for k in delta if k not in after]
            if unknown:
                raise AssertionError(f"unknown counter(s) {unknown}; known: {sorted(after)}")
            wrong = []
            for k in sorted(set(before) | set(after)):
                if k in self.counters_ignored and k not in delta:
                    continue
                got = after.get(k, 0) - before.get(k, 0)
                want = delta.get(k, 0)
                if got != want:
                    wrong.append(f"  {k[0]} / {k[1]}: changed by {got}, expected {want}")
            if not wrong:
                self._counter_baseline = after
                return
            if time.monotonic() > deadline:
                raise AssertionError("counter deltas differ:\n" + "\n".join(wrong))
            time.sleep(0.05)

    def get_interface_counters(self) -> dict[str, dict[str, int]]:
        """`show interface` as {interface: {counter: count}}."""
        return parse_interfaces(self.vpp.cli("show interface"))

    def buffers_in_use(self) -> int:
        return parse_buffers_used(self.vpp.cli("show buffers"))

    def assert_no_leaks(self, timeout: float = 10.0) -> None:
        """`show buffers` must report 0 buffers in use (waiting briefly for packets still in
        flight). Runs automatically at the end of every test. Where the traffic has provably
        ended on the main thread, `timeout=0` checks once: a buffer a node keeps for later
        (a timer, a queue) fails it, where a wait would pass once the timer fired."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.vpp.cli("show buffers")
            used = parse_buffers_used(text)
            if used == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{used} buffer(s) leaked:\n{text}")
            time.sleep(0.02)

    # -- diagnostics --------------------------------------------------------------------

    def diagnostics(self) -> str:
        """What a failed test's log shows: show trace, show errors, show interface, show
        packet-generator, the pcap files and the tail of the daemon's log."""
        vpp = getattr(self, "vpp", None)
        if vpp is None or vpp.proc is None:
            return ""
        parts = [f"test directory: {vpp.dir}"]
        if vpp.alive():
            for cmd in ("show trace", "show errors", "show interface", "show packet-generator",
                        "show ip fib", "show ip neighbors", "show buffers"):
                try:
                    ok, text = vpp.raw_request(cmd)
                    parts.append(f"### {cmd}{'' if ok else ' (error)'}\n{text.rstrip()}")
                except SluiceError as e:
                    parts.append(f"### {cmd}: {e}")
        else:
            code = vpp.proc.returncode if vpp.proc else None
            parts.append(f"sluice is not running (exit status {code})")
        parts.append("### pcap files\n" + "\n".join(
            f"  {p} ({p.stat().st_size if p.exists() else 'missing'} bytes)"
            for p in self._pcaps) if getattr(self, "_pcaps", None) else "### pcap files: none")
        parts.append("### sluice log (tail)\n" + "\n".join(vpp.stderr_text().splitlines()[-40:]))
        return "\n".join(parts)


def _item_failed(item) -> bool:
    from .plugin import REPORTS_KEY

    reports = item.stash.get(REPORTS_KEY, {})
    return any(r.failed for r in reports.values())
