"""A testee process as the runner sees it: send a request, get a response or a reason it failed.

A testee that dies, hangs past the timeout or breaks the protocol fails the
request it was answering; it is started again for the next one, so one crash
costs one test, not the run.
"""

from __future__ import annotations

import os
import queue
import shlex
import subprocess
import sys
import tempfile
import threading
from typing import IO

from inert._errors import HarnessError

from ._protocol import Request, Response, TextOnStdout, read_response, write_request

__all__ = ["BUILTIN_TESTEES", "Testee", "TesteeFault", "resolve_testee"]

#: Testees shipped with Inert, by the short name ``--testee`` accepts.
BUILTIN_TESTEES = {
    "inert-generated": "inert.conformance.testees.inert_generated",
    "inert-construct": "inert.conformance.testees.inert_construct",
}


def resolve_testee(spec: str) -> list[str]:
    """The argv of a testee: a built-in name, or a command split as a POSIX shell splits words."""
    if spec in BUILTIN_TESTEES:
        return [sys.executable, "-m", BUILTIN_TESTEES[spec]]
    argv = shlex.split(spec)
    if not argv:
        raise HarnessError("the testee command is empty")
    return argv


class TesteeFault(Exception):
    """The testee did not answer one request properly (it died, hung, or broke the protocol)."""


class Testee:
    """One running testee; started on first use and again after a fault."""

    def __init__(self, argv: list[str], timeout: float = 10.0) -> None:
        self.argv = argv
        self.timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._responses: queue.Queue[Response | BaseException] = queue.Queue()
        self._stderr: IO[bytes] | None = None
        #: Faults since the last proper response: a testee that never answers is not asked for ever.
        self.consecutive_faults = 0

    def __enter__(self) -> Testee:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[bytes]:
        self._stderr = tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        except OSError as exc:
            raise HarnessError(f"cannot start testee {shlex.join(self.argv)}: {exc.strerror}") from None
        self._responses = queue.Queue()
        threading.Thread(target=self._read_all, args=(proc, self._responses), daemon=True).start()
        return proc

    @staticmethod
    def _read_all(proc: subprocess.Popen[bytes], out: queue.Queue[Response | BaseException]) -> None:
        assert proc.stdout is not None
        try:
            while True:
                out.put(read_response(proc.stdout))
        except (HarnessError, OSError, ValueError) as exc:
            out.put(exc)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 2000))
        lines = self._stderr.read().decode("utf-8", errors="replace").strip().splitlines()
        return (": " + " | ".join(lines[-3:])) if lines else ""

    def _fault(self, reason: str) -> TesteeFault:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()
            status = proc.returncode
            reason += f" (exit status {status})" if status is not None and status >= 0 else f" (signal {-status})"
        fault = TesteeFault(reason + self._stderr_tail())
        self.close()
        self.consecutive_faults += 1
        return fault

    def ask(self, request: Request) -> Response:
        """The testee's response to ``request``, or :class:`TesteeFault`."""
        if self._proc is None:
            self._proc = self._start()
        # Sent from a thread: a testee that stops reading would otherwise block a large write for ever.
        threading.Thread(target=self._send, args=(self._proc, request), daemon=True).start()
        try:
            got = self._responses.get(timeout=self.timeout)
        except queue.Empty:
            raise self._fault(f"no response within {self.timeout:g} s") from None
        if isinstance(got, TextOnStdout):  # not one bad answer: the testee's channel itself; said once, the run ends
            reason = f"{got}{self._stderr_tail()}"
            self._fault("")  # the testee is stopped
            raise HarnessError(reason)
        if isinstance(got, BaseException):
            raise self._fault(f"bad response: {got}")
        self.consecutive_faults = 0
        return got

    @staticmethod
    def _send(proc: subprocess.Popen[bytes], request: Request) -> None:
        assert proc.stdin is not None
        try:
            write_request(proc.stdin, request)
        except (OSError, ValueError):
            pass  # the testee died or closed its input: the reader thread reports the missing response

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
