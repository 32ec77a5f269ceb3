"""The grading kernel's kernelspec (launcher, limits, sandbox, guard) and its client.

:func:`kernelspec_dir` writes a private kernelspec whose ``argv`` starts the kernel through
:mod:`tpp.grading.launcher`; :class:`GraderClient` is nbclient with a per-cell output budget.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_core.utils import ensure_async
from nbclient import NotebookClient
from traitlets import Type

from tpp.grading import bounds, sandbox
from tpp.grading.limits import Limits
from tpp.grading.relay import CappedMessage

KERNEL_NAME = "tpp-grader"
_SPEC_DIRS: dict[tuple, Path] = {}


def guard_config(limits: Limits) -> dict[str, Any]:
    """What the kernel's guard protects (see :mod:`tpp.grading.guard`).

    Read-protected: ``limits.protect`` (the grader passes the solutions and results folders),
    every ``solutions/`` and ``.git`` at or above the ``tpp`` package (the course repository),
    the Jupyter runtime folder (other kernels' connection files) and the grader's temporary
    folders (``tpp-grade-*``, ``tpp-ipc-*``, ``tpp-kernels-*``) other than the kernel's own.
    Writable: only the kernel's own temporary folder, and ``/dev/null``.
    """
    from jupyter_core.paths import jupyter_runtime_dir

    import tpp

    read = {str(Path(p).resolve()) for p in limits.protect}
    for d in Path(tpp.__file__).resolve().parents:
        for name in ("solutions", ".git"):
            if (d / name).exists():
                read.add(str(d / name))
    read.add(str(Path(jupyter_runtime_dir()).resolve()))
    tmp = str(Path(tempfile.gettempdir()).resolve())
    return {
        "read": sorted(read),
        "read_prefixes": [[tmp, "tpp-grade-"], [tmp, "tpp-ipc-"], [tmp, "tpp-kernels-"]],
        "write": ["/dev/null"],
    }


def kernelspec_dir(limits: Limits) -> Path:
    """A private kernelspec folder whose kernel starts through the limiting launcher."""
    guard = json.dumps(guard_config(limits), sort_keys=True) if limits.guard else ""
    key = (limits.memory_mb, limits.cpu_seconds, limits.file_mb, guard, limits.sandbox,
           limits.nproc, limits.disk_mb, limits.cgroup)  # fmt: skip
    if key in _SPEC_DIRS and _SPEC_DIRS[key].exists():
        return _SPEC_DIRS[key]
    root = Path(tempfile.mkdtemp(prefix="tpp-kernels-"))
    atexit.register(shutil.rmtree, root, True)
    spec = root / KERNEL_NAME
    spec.mkdir()
    launcher = Path(__file__).with_name("launcher.py")
    env = {
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "PYTHONHASHSEED": "0",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "PYTHONWARNINGS": "ignore",
        "LANG": "C.UTF-8",
        # at most 2 malloc arenas (64 MiB of address space each): without it a thread creates
        # one when it meets contention, so the kernel's address space at start-up depended on
        # timing, and near RLIMIT_AS a thread start failed now and then
        "MALLOC_ARENA_MAX": "2",
    }
    box: list[str] = []
    if limits.sandbox:
        import tpp

        package_dir = str(Path(tpp.__file__).resolve().parent.parent)
        box = ["--sandbox", sandbox.encode(sandbox.config_for(package_dir, env))]
    argv = [
        sys.executable,
        str(launcher),
        "--memory-mb", str(bounds.address_space_mb(limits.memory_mb, bool(limits.cgroup))),
        "--cpu-seconds", str(limits.cpu_seconds),
        "--file-mb", str(limits.file_mb),
        "--disk-mb", str(limits.disk_mb),
        "--nproc", str(limits.nproc if limits.sandbox else 0),
        *box,
        *(["--guard", guard] if guard else []),
        "--",
        sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
    ]  # fmt: skip
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": argv,
                "display_name": "Python 3 (tpp grader)",
                "language": "python",
                "env": env,
                "interrupt_mode": "message",  # no signals across the sandbox's PID namespace
                "metadata": {"debugger": False},
            }
        )
    )
    _SPEC_DIRS[key] = root
    return root


class StartTimeout(RuntimeError):
    """The kernel is alive but did not answer ``kernel_info`` before the submission's budget ran
    out (:attr:`FastStartClient.start_deadline`): the machine was slow (load), not the
    submission. ``waits``: how many start-up waits it outlasted."""

    def __init__(self, message: str, waits: int = 0) -> None:
        super().__init__(message)
        self.waits = waits


FLUSH_S = 0.02  # IOPub quiet time that ends start-up (jupyter_client waits 0.2 s every time)


class CappedChannel(AsyncZMQSocketChannel):
    """jupyter_client's asyncio channel, with a cap on each WHOLE incoming message.

    ZeroMQ's ``MAXMSGSIZE`` caps one frame; a Jupyter message is any number of frames (the
    header, parent, metadata and content frames are signed, the buffer frames after them are
    not), so 150 frames of 15 MB each passed it and the grader copied and deserialised all of
    them. Here each frame is received on its own (``copy=False``: libzmq's buffer, not a
    copy) with a running total; once it passes :attr:`max_bytes` the frames already received
    are released and the message's remaining frames are released as they are read, never
    held. Such a message is counted in :attr:`dropped` (:meth:`FastStartClient.dropped`) and
    :meth:`get_msg` goes on waiting for the next one, within the same timeout.

    What this alone does not bound: libzmq makes a multipart message readable only once its
    last frame has arrived, so the process reading the kernel's sockets holds it whole; that
    process is a relay with its own memory limit (:mod:`tpp.grading.relay`), not the grader.
    """

    dropped = 0

    @property
    def max_bytes(self) -> int:
        """The cap: :attr:`FastStartClient.max_message_bytes` (set per run)."""
        return int(FastStartClient.max_message_bytes)

    async def _recv(self, **kwargs: Any) -> dict[str, Any] | None:  # type: ignore[override]
        assert self.socket is not None
        msg = CappedMessage(self.max_bytes)
        while msg.add(await self.socket.recv(copy=False, **kwargs)):
            pass
        if msg.over:
            self.dropped += 1
            return None
        _, smsg = self.session.feed_identities([f.bytes for f in msg.frames])
        return self.session.deserialize(smsg)

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:  # type: ignore[override]
        """The next message within ``timeout`` seconds; messages over the cap are skipped."""
        from queue import Empty

        assert self.socket is not None
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if end is None else max(0.0, end - time.monotonic())
            if not await self.socket.poll(None if left is None else int(left * 1000)):
                raise Empty
            msg = await self._recv()
            if msg is not None:
                return msg


class FastStartClient(AsyncKernelClient):
    """jupyter_client's client, whose ``wait_for_ready`` ends its IOPub flush sooner.

    The same handshake as ``AsyncKernelClient.wait_for_ready`` (a ``kernel_info`` reply on
    shell, then one IOPub message to show IOPub is connected, the kernel's liveness checked and
    the start-up deadline enforced in between), but the final flush waits :data:`FLUSH_S` of
    quiet instead of 0.2 s: a fixed 0.2 s per kernel, and one kernel per submission. Messages
    that arrive later are the kernel's own start-up status, which nbclient ignores (it keeps
    only messages whose parent is the cell's request).

    A kernel alive but slower than its wait (a busy machine) is not killed and started again
    (a start that never fits its wait would never end): the wait doubles, on the same kernel,
    until it answers, dies (``RuntimeError``: the runner starts another) or the submission's
    budget ends at :attr:`start_deadline` (:class:`StartTimeout`). :attr:`tpp_slow_waits`
    counts the waits it outlasted.
    """

    start_wait_s: float | None = None  # set per kernel by the runner (nbclient's is whole seconds)
    start_deadline: float | None = None  # time.monotonic() when the submission's budget ends

    async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
        from queue import Empty

        if self.start_wait_s is not None:
            timeout = self.start_wait_s
        wait_s = float("inf") if timeout is None else max(0.01, timeout)
        began = time.monotonic()
        deadline = began + wait_s
        end = self.start_deadline if self.start_deadline is not None else deadline
        self.tpp_slow_waits = 0
        while True:
            self.kernel_info()
            try:
                wait = max(0.01, min(1.0, deadline - time.monotonic()))
                msg = await ensure_async(self.shell_channel.get_msg(timeout=wait))
            except Empty:
                pass
            else:
                if msg["msg_type"] == "kernel_info_reply":
                    try:
                        await ensure_async(self.iopub_channel.get_msg(timeout=0.2))
                    except Empty:
                        pass
                    else:
                        self._handle_kernel_info_reply(msg)
                        break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            now = time.monotonic()
            if now > deadline:
                if now >= end:
                    raise StartTimeout(f"the kernel did not answer within {now - began:.3g} s "
                                       f"of starting ({self.tpp_slow_waits + 1} start-up waits "
                                       "outlasted)", self.tpp_slow_waits + 1)  # fmt: skip
                self.tpp_slow_waits += 1  # alive, the machine slow: the same kernel, longer
                wait_s *= 2
                deadline = min(began + wait_s, end)
            await asyncio.sleep(0)
        while True:
            try:
                await ensure_async(self.iopub_channel.get_msg(timeout=FLUSH_S))
            except Empty:
                break

    wait_for_ready = _async_wait_for_ready  # type: ignore[assignment]

    max_message_bytes = 16 * 2**20  # set per run from Limits.max_message_mb

    # every channel capped on the whole message (CappedChannel reads max_message_bytes)
    shell_channel_class = Type(CappedChannel)  # type: ignore[assignment]
    iopub_channel_class = Type(CappedChannel)  # type: ignore[assignment]
    stdin_channel_class = Type(CappedChannel)  # type: ignore[assignment]
    control_channel_class = Type(CappedChannel)  # type: ignore[assignment]

    def _channels(self) -> list[Any]:
        return [getattr(self, f"_{n}_channel", None) for n in ("shell", "iopub", "stdin",
                                                              "control")]  # fmt: skip

    def _create_connected_socket(self, channel: str, identity: bytes | None = None) -> Any:
        """jupyter_client's socket, with a cap on each incoming message frame and a short
        queue: a kernel's huge (validly signed) messages are refused by ZeroMQ before the
        grader allocates or deserialises them (the connection is dropped; libzmq 4.3.5 does
        not reconnect after that protocol error).
        A monitor on the socket records each such disconnection (:meth:`dropped`), and the
        failed reconnections that tell a peer gone from a message refused."""
        import zmq

        self.context.setsockopt(zmq.MAXMSGSIZE, int(self.max_message_bytes))  # new sockets
        self.context.setsockopt(zmq.RCVHWM, 64)
        sock = super()._create_connected_socket(channel, identity)
        try:
            mon = sock.get_monitor_socket(
                zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_CLOSED
            )
        except zmq.ZMQError:  # pragma: no cover - libzmq without monitors
            return sock
        self.__dict__.setdefault("_tpp_monitors", []).append(zmq.Socket.shadow(mon.underlying))
        self.__dict__.setdefault("_tpp_keep", []).append(mon)  # the shadow does not own it
        return sock

    JUDGE_S = 0.5  # after a disconnection, how long a failed reconnection is waited for

    def dropped(self) -> int:
        """How many messages over ``max_message_bytes`` ZeroMQ refused so far. A refused message
        drops the connection, and libzmq does not reconnect after that protocol error; a kernel
        that closes its own socket (or dies) drops it too, but then the grader's side tries to
        reconnect to an endpoint that is gone (``EVENT_CONNECT_RETRIED``, ``EVENT_CLOSED``):
        that disconnection is not counted (it was reported as a message over the cap).
        Messages whose frames are each under the cap but whose total is not are dropped by the
        channels (:class:`CappedChannel`) and counted here too."""
        import zmq
        from zmq.utils.monitor import parse_monitor_message

        seen = self.__dict__.get("_tpp_dropped", 0)
        pending = self.__dict__.setdefault("_tpp_pending", {})  # monitor -> disconnections
        for k, mon in enumerate(self.__dict__.get("_tpp_monitors", [])):
            while True:
                try:
                    if pending.get(k) and not mon.poll(int(self.JUDGE_S * 1000)):
                        break  # no reconnection tried: the connection was dropped by libzmq
                    frames = mon.recv_multipart(zmq.NOBLOCK)
                except zmq.ZMQError:
                    break
                event = parse_monitor_message(frames)["event"]
                if event == zmq.EVENT_DISCONNECTED:
                    pending[k] = pending.get(k, 0) + 1
                elif event in (zmq.EVENT_CONNECT_RETRIED, zmq.EVENT_CLOSED):
                    pending[k] = 0  # the peer's socket is gone: not a message refused
            seen += pending.pop(k, 0)
        self.__dict__["_tpp_dropped"] = seen
        return seen + sum(getattr(c, "dropped", 0) for c in self._channels() if c is not None)

    def stop_channels(self) -> None:
        for mon in self.__dict__.pop("_tpp_keep", []):
            try:
                mon.close(linger=0)
            except Exception:  # noqa: BLE001 - closing a monitor must not fail a shutdown
                pass
        self.__dict__.pop("_tpp_monitors", None)
        super().stop_channels()


def _message_size(msg: dict[str, Any]) -> int:
    content = msg.get("content", {})
    if "text" in content:
        return len(content["text"])
    if "data" in content:
        return sum(len(str(v)) for v in content["data"].values())
    if "traceback" in content:
        return sum(len(x) for x in content["traceback"])
    return 200


class GraderClient(NotebookClient):
    """nbclient with a per-cell output budget: outputs beyond it are dropped, not stored."""

    def __init__(self, nb: nbformat.NotebookNode, output_bytes: int, **kw: Any) -> None:
        super().__init__(nb, **kw)
        self._output_bytes = output_bytes
        self._used: dict[int, int] = {}
        self._truncated: set[int] = set()

    def output(self, outs, msg, display_id, cell_index):  # type: ignore[override]
        used = self._used.get(cell_index, 0) + _message_size(msg)
        self._used[cell_index] = used
        if used > self._output_bytes:
            if cell_index not in self._truncated:
                self._truncated.add(cell_index)
                outs.append(
                    nbformat.v4.new_output(
                        "stream", name="stderr", text="[output truncated by the grader]\n"
                    )
                )
            return None
        return super().output(outs, msg, display_id, cell_index)
