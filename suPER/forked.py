"""Run one function call in a forked child process and collect its result later: evaluation off the training
process (``run.eval_parallel``; the original's ``--eval_in_parallel``).

Why fork: the child starts as a copy-on-write snapshot of the trainer at the moment of the call (networks,
evaluation env, the greedy ``act`` closure), so an evaluation needs no weight export, no policy rebuild and no
per-trainer code: it plays exactly the episodes the trainer would have played in-process, on another core,
while the parent goes on training. Pages the parent writes meanwhile (the replay rows of one evaluation
interval, the networks' few MB) are the only memory the child costs.

What the child does: turns off the cyclic garbage collector, ignores SIGINT (Ctrl-C is the parent's to handle), asks the kernel to SIGKILL it when its
parent thread ends (``PR_SET_PDEATHSIG``, so a killed trainer never leaves an evaluation behind), limits torch to
one thread, calls the function, writes the pickled result (or the error) to a pipe and leaves with
``os._exit`` (no atexit handlers, no flushing of the parent's buffers, no W&B or Ray shutdown).

Only for CPU work: a forked child cannot use a CUDA context its parent made (``fork_supported``).
"""

from __future__ import annotations

import ctypes
import gc
import os
import pickle
import select
import signal
import sys
from collections.abc import Callable
from typing import Any

import torch

_PR_SET_PDEATHSIG = 1


def fork_supported(device: torch.device) -> bool:
    """Whether a call can be forked here: Linux (``os.fork`` and ``prctl``) and networks on the CPU."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and device.type == "cpu"


class ForkedCallError(RuntimeError):
    """The forked call raised, or its process ended without a result (killed, out of memory)."""


class ForkedCall:
    """A function call running in a child process; ``ready()`` polls, ``result()`` waits and returns it.

    Args:
        fn: called with no arguments in the child; its return value must pickle.
        what: how errors name the call (e.g. ``"evaluation at env step 4000"``).
    """

    def __init__(self, fn: Callable[[], Any], what: str) -> None:
        self.what = what
        parent_pid = os.getpid()
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            _child(fn, write_fd, parent_pid)
        os.close(write_fd)
        self.pid: int | None = pid
        self._fd: int | None = read_fd
        self._chunks: list[bytes] = []

    def ready(self) -> bool:
        """True when ``result()`` would not block (the child wrote its result, or ended)."""
        if self._fd is None:
            return True
        readable, _, _ = select.select([self._fd], [], [], 0)
        return bool(readable)

    def result(self, timeout_s: float | None = None) -> Any:
        """Wait for the child (at most ``timeout_s`` seconds; None = as long as it takes) and return the call's value.

        Raises:
            ForkedCallError: the call raised in the child (its type and message are kept), the child ended
                without writing a result (a signal or an exit status is named), or it gave none within
                ``timeout_s`` (it is killed then: a child that stopped responding must not block its parent).
        """
        import time

        if self._fd is None:
            raise ForkedCallError(f"{self.what}: its result was already collected")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        fd = self._fd
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([fd], [], [], wait)
            if not readable:
                self.cancel()
                raise ForkedCallError(f"{self.what}: its worker process gave no result within {timeout_s:g} s "
                                      f"(stopped responding); it was killed")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            self._chunks.append(chunk)
        self._fd = None
        os.close(fd)
        status = self._reap()
        payload = b"".join(self._chunks)
        if not payload:
            raise ForkedCallError(f"{self.what}: its worker process ended without a result ({_describe(status)})")
        kind, value = pickle.loads(payload)
        if kind == "error":
            raise ForkedCallError(f"{self.what} failed in its worker process: {value}")
        return value

    def cancel(self) -> None:
        """Kill the child (if it still runs) and forget the call."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._reap()

    def __del__(self) -> None:  # dropped while in flight (the trainer raised): no orphan, no zombie
        if getattr(self, "pid", None) is not None:
            self.cancel()

    def _reap(self) -> int:
        if self.pid is None:
            return 0
        pid, self.pid = self.pid, None
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:  # reaped elsewhere (a SIGCHLD handler)
            return 0


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"killed by {signal.Signals(sig).name}" + (", out of memory?" if sig == signal.SIGKILL else "")
    return f"exit status {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else f"wait status {status}"


def _child(fn: Callable[[], Any], write_fd: int, parent_pid: int) -> None:
    """The child's whole life: set up, call, write, ``os._exit``."""
    code = 0
    try:
        gc.disable()  # no finalizer of the parent's garbage (a temp dir, a socket) may run in the child
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
        torch.set_num_threads(1)
        try:
            payload = pickle.dumps(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as one line
            first = (str(exc).splitlines() or [""])[0][:300]
            payload = pickle.dumps(("error", f"{type(exc).__name__}: {first}" if first else type(exc).__name__))
        view = memoryview(payload)
        while view:
            view = view[os.write(write_fd, view):]
    except BaseException:  # noqa: BLE001 - a child must never return into the parent's code
        code = 1
    finally:
        os._exit(code)
