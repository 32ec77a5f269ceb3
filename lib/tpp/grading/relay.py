"""A per-kernel relay process: the grader's real bound on what one kernel message can cost it.

libzmq (4.3.5) makes a multipart message readable only once its last frame has arrived, and its
high-water mark counts whole messages, so a kernel sending one validly signed message of N
frames, each under ZeroMQ's per-frame cap, had it buffered whole in the process that reads the
kernel's sockets (400 frames of 1 MiB: 401 MiB of the grader's RSS, unbounded in N; the kernel
sends one buffer N times, so its own memory limit does not help). Here that process is not the
grader: a small relay, started outside the sandbox for each kernel, connects to the kernel's
five sockets and binds five of its own in a private folder of the grader (never the kernel's
shared folder), to which the grader's client connects (same ports, another ``ip`` prefix:
jupyter_client names an ``ipc`` endpoint ``ip + "-" + port``).

The relay runs under its own ``RLIMIT_AS`` (:func:`address_space_mb`: a base plus a few times
the cap), set before it imports ZeroMQ. It forwards each message frame by frame: shell, control,
stdin and heartbeat as DEALER to the kernel and ROUTER to the grader (the grader socket's
identity travels as one more envelope frame, so a reply goes back to its asker only; shell and
stdin share one identity, as jupyter_client's do, so that ``input_request`` finds its way),
IOPub as SUB (all topics) to the kernel and PUB to the grader.
A kernel message whose frames together pass the cap is released frame by frame, never sent on,
and reported to the grader with one byte ``D`` on the relay's stdout (:meth:`Relay.dropped`).
If libzmq inside the relay cannot hold a message within the relay's limit, the relay dies: the
kernel manager (:class:`RelayKernelManager`) then reports the kernel not alive, nbclient raises
``DeadKernelError`` within a second, and the row says ``message-too-large``. The grader process
itself never holds more of a kernel message than the cap.

Run as a script, it imports only ``os``, ``sys``, ``resource`` and ``zmq``.
"""

from __future__ import annotations

import os
import sys

CHANNELS = ("shell", "control", "stdin", "hb", "iopub")
BASE_AS_MB = 256  # python + pyzmq + libzmq's I/O thread: ~100 MiB of address space, measured
READY = b"R"
_MANAGERS: dict[type, type] = {}
DROP = b"D"
REFUSED = 3  # the relay's exit code when libzmq dropped a kernel connection it could not hold
JUDGE_S = 0.5  # after a disconnection, how long a reconnection attempt is waited for


class CappedMessage:
    """The frames of one kernel message, counted as they arrive: once their total passes
    ``cap`` bytes the frames held are released and later ones are never kept (``over``).
    The one rule of the message cap, used by the relay and by the grader's own channels."""

    def __init__(self, cap: float) -> None:
        self.cap, self.total, self.over = cap, 0, False
        self.frames: list = []

    def add(self, frame) -> bool:  # noqa: ANN001 - a zmq.Frame (no zmq import here)
        """Count ``frame`` (kept while the total is within the cap); True if more frames of
        this message follow. Read a message with ``while msg.add(sock.recv(copy=False)): pass``:
        the caller keeps no reference to a frame, so a frame past the cap is freed at once."""
        more = bool(frame.more)
        if not self.over:
            self.total += len(frame)
            if self.total > self.cap:
                self.over = True
                self.frames.clear()
            else:
                self.frames.append(frame)
        return more


def address_space_mb(max_message_mb: int) -> int:
    """The relay's ``RLIMIT_AS``: its base plus room for 3 messages at the cap (one being
    received by libzmq, one being read, one queued to the grader)."""
    return BASE_AS_MB + 3 * int(max_message_mb)


def _serve(argv: list[str]) -> int:  # pragma: no cover - runs in the relay process
    import resource
    import time

    kernel_ip, front_ip = argv[0], argv[1]
    cap, as_mb, ppid = int(argv[2]), int(argv[3]), int(argv[4])
    ports = dict(zip(CHANNELS, (int(p) for p in argv[5:10]), strict=True))
    limit = as_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # before ZeroMQ allocates anything
    import zmq

    ctx = zmq.Context(1)
    out = os.fdopen(1, "wb", buffering=0)
    ident = os.urandom(8).hex().encode()
    pairs = {}  # back (kernel side) -> front (grader side), and front -> back
    capped = set()
    monitors: list = []
    for ch in CHANNELS:
        if ch == "iopub":
            back = ctx.socket(zmq.SUB)
            back.setsockopt(zmq.SUBSCRIBE, b"")
            front = ctx.socket(zmq.PUB)
        else:
            back = ctx.socket(zmq.DEALER)
            front = ctx.socket(zmq.ROUTER)  # the asker's identity travels as a frame, and
            # the kernel's reply (its envelope) is routed back to that asker only
            if ch in ("shell", "stdin"):
                back.setsockopt(zmq.IDENTITY, ident)
        for s in (back, front):  # ZeroMQ's high-water marks (1000 messages): as without a
            s.setsockopt(zmq.LINGER, 0)  # relay, a burst of honest output is not dropped
        mon = back.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED
                                      | zmq.EVENT_CLOSED)  # fmt: skip
        monitors.append(mon)
        back.connect(f"ipc://{kernel_ip}-{ports[ch]}")
        front.bind(f"ipc://{front_ip}-{ports[ch]}")
        pairs[back], pairs[front] = front, back
        capped.add(back)
    poller = zmq.Poller()
    for s in [*pairs, *monitors]:
        poller.register(s, zmq.POLLIN)
    pending: dict = {}  # monitor -> when its kernel-side connection was dropped
    out.write(READY)
    while True:
        if os.getppid() != ppid:
            return 0  # the grader is gone
        now = time.monotonic()
        for mon in [m for m, t in pending.items() if now - t > JUDGE_S]:
            _events(mon, pending, zmq)  # what came in meanwhile (a busy machine)
            if mon in pending:
                return REFUSED  # dropped, and no reconnection tried: libzmq refused a message
        for sock, _ in poller.poll(100 if pending else 1000):
            if sock in monitors:
                _events(sock, pending, zmq)
                continue
            msg = CappedMessage(cap if sock in capped else float("inf"))
            while msg.add(sock.recv(copy=False)):
                pass
            if msg.over:
                out.write(DROP)
                continue
            try:
                pairs[sock].send_multipart(msg.frames, copy=False, flags=zmq.NOBLOCK)
            except zmq.Again:
                pass  # no peer yet, or the grader's queue is full: as a lost message
            del msg


def _events(mon, pending: dict, zmq) -> None:  # pragma: no cover - in the relay process
    """Read a monitor's events: a disconnection is pending until a reconnection is tried (the
    kernel's socket is gone: closed, or the kernel died), which is not a message refused."""
    import time

    while True:
        try:
            frames = mon.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        event = int.from_bytes(frames[0][:2], "little")
        if event == zmq.EVENT_DISCONNECTED:
            pending[mon] = time.monotonic()
        else:
            pending.pop(mon, None)


class Relay:
    """The grader's handle on one relay process (see the module's docstring)."""

    def __init__(self, kernel_ip: str, ports: dict[str, int], max_message_mb: int,
                 folder: str) -> None:  # fmt: skip
        import subprocess
        import time

        self.front_ip = os.path.join(folder, "r")
        self.folder = folder
        self.limit_mb = address_space_mb(max_message_mb)
        began = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), kernel_ip, self.front_ip,
             str(int(max_message_mb) * 2**20), str(self.limit_mb), str(os.getpid()),
             *(str(ports[ch]) for ch in CHANNELS)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self._fd = self.proc.stdout.fileno()
        first = os.read(self._fd, 1)  # blocks until the relay has bound its sockets (or died)
        self.start_s = time.monotonic() - began
        os.set_blocking(self._fd, False)
        self._drops = first.count(DROP)
        self.ready = first == READY

    def dropped(self) -> int:
        """Messages over the cap the relay released so far."""
        try:
            while chunk := os.read(self._fd, 4096):
                self._drops += chunk.count(DROP)
        except (BlockingIOError, OSError, ValueError):
            pass
        return self._drops

    def alive(self) -> bool:
        return self.proc.poll() is None

    def died(self) -> bool:
        """True if the relay ended on its own (its memory limit: a message it could not hold)."""
        code = self.proc.poll()
        return code is not None and code != 0 and not getattr(self, "_closed", False)

    def close(self) -> None:
        import shutil

        self.dropped()
        self._closed = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def relay_manager_class(base: type | None = None) -> type:
    """The class :class:`RelayKernelManager`, a subclass of ``base`` (jupyter_client's
    ``AsyncKernelManager`` by default), built on first use: the relay script itself must not
    import jupyter_client."""
    if base is None:
        from jupyter_client.manager import AsyncKernelManager as base
    if base in _MANAGERS:
        return _MANAGERS[base]

    class RelayKernelManager(base):  # type: ignore[valid-type,misc]
        """An ``AsyncKernelManager`` whose clients talk to the kernel through a :class:`Relay`
        (started right after the kernel), and whose kernel counts as dead once its relay is."""

        tpp_max_message_mb = 16
        tpp_relay: Relay | None = None

        async def start_kernel(self, **kw):  # type: ignore[override]
            import tempfile

            await super()._async_start_kernel(**kw)
            ports = {ch: getattr(self, f"{ch}_port") for ch in CHANNELS}
            folder = tempfile.mkdtemp(prefix="tpp-ipc-")
            self.tpp_relay = Relay(self.ip, ports, self.tpp_max_message_mb, folder)

        def client(self, **kw):  # type: ignore[override]
            kc = super().client(**kw)
            if self.tpp_relay is not None:
                kc.ip = self.tpp_relay.front_ip
            return kc

        async def _async_is_alive(self) -> bool:  # the client's is_alive asks this one
            if self.tpp_relay is not None and not self.tpp_relay.alive():
                return False
            return await super()._async_is_alive()

        is_alive = _async_is_alive  # type: ignore[assignment]

    _MANAGERS[base] = RelayKernelManager
    return RelayKernelManager


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_serve(sys.argv[1:]))
