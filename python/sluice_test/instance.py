"""A real `sluice` daemon in a fresh temporary directory, driven over its CLI socket.

The CLI protocol (crates/cli/src/proto.rs): a request is a u32 little-endian length followed
by the UTF-8 command; a response is a u32 little-endian length N (N >= 1), one status byte
(0 ok, 1 error) and N-1 bytes of UTF-8 text; a long reply comes first as frames with status 2
(more follows). One connection carries any number of requests.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

log = logging.getLogger("sluice")

#: Repository root (this file is python/sluice_test/instance.py).
REPO_ROOT = Path(__file__).resolve().parents[2]

#: Largest response the daemon sends (proto::MAX_FRAME).
MAX_FRAME = 16 << 20

#: Lines of a command's output copied to the log (the full text is in `history`).
LOG_LINES = 12

DEFAULT_BUFFERS = "buffers { buffers-per-numa 8192 page-size 4k }"


class CliError(Exception):
    """A CLI command answered with the error status; `msg` is the daemon's one-line error."""

    def __init__(self, msg: str, cmd: str | None = None):
        super().__init__(msg if cmd is None else f"`{cmd}': {msg}")
        self.msg = msg
        self.cmd = cmd


class SluiceError(RuntimeError):
    """The daemon could not be started, died, or stopped badly."""


def sluice_binary() -> Path:
    """The daemon binary: `$SLUICE_BIN`, else `<repo>/target/debug/sluice`.

    Raises SluiceError with instructions when it is missing, so a test that cannot run fails
    with a clear message instead of being skipped."""
    env = os.environ.get("SLUICE_BIN")
    path = Path(env) if env else REPO_ROOT / "target" / "debug" / "sluice"
    if not path.is_file() or not os.access(path, os.X_OK):
        how = (
            f"SLUICE_BIN={env} does not name an executable file"
            if env
            else f"{path} does not exist: build it with `cargo build -p sluice` "
            "(or point SLUICE_BIN at a sluice binary)"
        )
        raise SluiceError(f"cannot run the functional tests: {how}")
    return path


class SluiceInstance:
    """One daemon process with its own temporary directory and CLI socket.

    >>> vpp = SluiceInstance("demo"); vpp.start()
    >>> vpp.cli("show interface")
    >>> vpp.stop()
    """

    def __init__(self, tag: str = "test", extra_config: str = "", binary: Path | None = None,
                 cli_timeout: float = 30.0, wrapper: list[str] | None = None,
                 buffers: str = DEFAULT_BUFFERS):
        """`wrapper`: a command prefix for the daemon, e.g. `["ip", "netns", "exec", "ns1"]`
        (it must exec the daemon so `proc.pid` stays the daemon's); `buffers`: the
        startup.conf buffers section."""
        self.tag = tag
        self.extra_config = extra_config
        self.binary = binary
        self.wrapper = list(wrapper or [])
        self.buffers = buffers
        self.cli_timeout = cli_timeout
        self.dir: Path | None = None
        self.sock_path: Path | None = None
        self.stderr_path: Path | None = None
        self.proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._api = None
        self.history: list[tuple[str, bool, str]] = []

    # -- life cycle ---------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> "SluiceInstance":
        """Starts the daemon and connects to its CLI socket. `timeout` bounds a start-up
        that is only slow, never a failed one (an exit is reported at once): a debug build
        needs ~0.15 s of CPU to open its socket, but took 2-6 s on 2 cores loaded to 20,
        and 9 s with two busy loops at autogroup priority -10 besides (as a benchmark run
        gets): 20 s was too close."""
        binary = self.binary or sluice_binary()
        safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in self.tag)[:40]
        # Short base directory: Unix socket paths are limited to 107 bytes.
        base = os.environ.get("SLUICE_TEST_TMPDIR") or (
            "/tmp" if Path("/tmp").is_dir() else tempfile.gettempdir())
        self.dir = Path(tempfile.mkdtemp(prefix=f"sluice-{safe}-", dir=base))
        self.sock_path = self.dir / "cli.sock"
        self.stderr_path = self.dir / "sluice.log"
        conf = self.dir / "startup.conf"
        conf.write_text(
            "unix {\n"
            "  nodaemon\n"
            f"  cli-listen {self.sock_path}\n"
            f"  capture-dir {self.dir}\n"
            "}\n"
            f"{self.buffers}\n"
            f"{self.extra_config}\n"
        )
        log.info("starting %s -c %s", binary, conf)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [*self.wrapper, str(binary), "-c", str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                cwd=self.dir,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise SluiceError(
                    f"sluice exited with status {self.proc.returncode} during start-up:\n"
                    f"{self.stderr_text()}")
            try:
                self._connect()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self._kill()
                    raise SluiceError(
                        f"sluice did not open {self.sock_path} within {timeout}s:\n"
                        f"{self.stderr_text()}")
                time.sleep(0.02)
        log.info("sluice pid %d up, dir %s", self.proc.pid, self.dir)
        return self

    @property
    def api_path(self) -> Path:
        """The API socket (the daemon's default: beside the CLI socket)."""
        assert self.dir is not None
        return self.dir / "api.sock"

    def api(self):
        """A connected control-API client (`sluice_papi.Client`), made on first use and
        closed by `stop()`."""
        if self._api is None:
            from sluice_papi import Client
            self._api = Client(self.api_path, name=f"test-{self.tag}"[:64]).connect()
        return self._api

    def sw_if_index(self, name: str) -> int:
        """An interface's index, read through the API."""
        r = self.api().sw_interface_dump(name_filter=name)
        if not r:
            raise KeyError(f"no interface `{name}'")
        return r[0].sw_if_index

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr_text(self) -> str:
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        return self.stderr_path.read_text(errors="replace")

    def stop(self, timeout: float = 20.0) -> str:
        """SIGTERM, wait, and check a clean exit: status 0 and no buffer "still in use".

        Returns the daemon's log (stderr)."""
        if self.proc is None:
            raise SluiceError("sluice was never started")
        self._close()
        if self.proc.poll() is not None:
            raise SluiceError(
                f"sluice had already exited with status {self.proc.returncode}:\n"
                f"{self.stderr_text()}")
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            raise SluiceError(f"sluice did not stop within {timeout}s of SIGTERM:\n"
                              f"{self.stderr_text()}")
        err = self.stderr_text()
        if rc != 0:
            raise SluiceError(f"sluice exited with status {rc} on SIGTERM:\n{err}")
        if "still in use" in err:
            raise SluiceError(f"sluice reported buffers still in use at exit:\n{err}")
        if "stopped" not in err:
            raise SluiceError(f"sluice did not log `stopped' on SIGTERM:\n{err}")
        log.info("sluice pid %d stopped cleanly", self.proc.pid)
        return err

    def remove_dir(self) -> None:
        if self.dir is not None and self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)

    def _kill(self) -> None:
        """Last resort for our own child: SIGKILL and reap."""
        self._close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def kill(self) -> None:
        self._kill()

    # -- CLI ----------------------------------------------------------------------------

    def _connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(self.sock_path))
        except OSError:
            s.close()
            raise
        s.settimeout(self.cli_timeout)
        self._sock = s

    def _close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _recv_exact(self, n: int) -> bytes:
        assert self._sock is not None
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("sluice closed the CLI connection")
            buf += chunk
        return bytes(buf)

    def raw_request(self, cmd: str | bytes) -> tuple[bool, str]:
        """Sends one request and returns (ok, text) without interpreting the status."""
        data = cmd.encode() if isinstance(cmd, str) else cmd
        if self._sock is None:
            self._connect()
        try:
            self._sock.sendall(struct.pack("<I", len(data)) + data)
            # A long reply comes in pieces: frames with status 2 (more follows), then the
            # final frame (status 0 or 1).
            pieces = []
            while True:
                (n,) = struct.unpack("<I", self._recv_exact(4))
                if n == 0 or n > MAX_FRAME:
                    raise SluiceError(f"bad CLI response length {n} for `{cmd}'")
                body = self._recv_exact(n)
                if body[0] != 2:
                    break
                pieces.append(body[1:])
            body = body[:1] + b"".join(pieces) + body[1:]
        except (OSError, ConnectionError) as e:
            self._close()
            state = ("still running" if self.alive()
                     else f"exited with status {self.proc.returncode if self.proc else '?'}")
            raise SluiceError(f"CLI `{cmd}' failed ({e}); sluice {state}:\n"
                              f"{self.stderr_text()[-4000:]}") from e
        return body[0] == 0, body[1:].decode("utf-8", errors="replace")

    def cli(self, cmd: str) -> str:
        """Runs a command; returns its output, raises CliError on the error status."""
        ok, text = self.raw_request(cmd)
        self.history.append((cmd, ok, text))
        if ok:
            lines = text.rstrip("\n").splitlines()
            if len(lines) > LOG_LINES:
                lines = lines[:LOG_LINES] + [f"... ({len(lines) - LOG_LINES} more lines)"]
            log.debug("cli> %s%s", cmd, "".join("\n" + x for x in lines))
            return text
        log.debug("cli> %s\nERROR: %s", cmd, text.rstrip("\n"))
        raise CliError(text.strip(), cmd)

    def cli_try(self, cmd: str) -> str | None:
        """Like cli() but returns None on an error status (for best-effort diagnostics)."""
        try:
            return self.cli(cmd)
        except CliError:
            return None
