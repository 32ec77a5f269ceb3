"""The grading kernel's OS sandbox: bubblewrap outside, a private ``noexec`` folder inside.

Each kernel runs under ``bwrap`` (Debian package ``bubblewrap``) in its own PID, IPC, network
and UTS namespaces, as an unprivileged uid of its own, and sees only:

- read-only: the system folders (``/usr``, ``/bin``, ``/lib*``, ``/etc``), the Python install
  and virtual environment the grader runs in, and the folder holding the ``tpp`` package;
- read-write: its *shared folder* (host ``tpp-grade-*``), bound at the same path, where the
  grader and only this kernel meet: the connection file, the kernel's Unix sockets (Jupyter's
  ``ipc`` transport), the answers files; and ``work/`` in it, over which a fresh ``tmpfs`` is
  mounted ``noexec,nosuid,nodev`` (so a compiled extension written there cannot be loaded);
- a fresh ``/dev`` and ``/proc`` (its own processes only), and a ``/tmp`` it cannot write to
  (``TMPDIR`` is ``work/``, a ``tmpfs`` of ``Limits.disk_mb``; the shared folder is a sized
  ``tmpfs`` too, see :mod:`tpp.grading.bounds`).

Not mounted at all: ``solutions/``, the results and cache folders, the course repository, the
host ``/tmp`` (other kernels' folders and connection files), ``/root``, ``/home``.
Killing the outer ``bwrap`` kills the namespace's PID 1, and with it every process of the
sandbox (``--die-with-parent``, the kernel tears a PID namespace down with its init).

Two ways in, chosen by the grader's uid:

- as root, ``bwrap`` keeps the host user namespace and hands the inner launcher three
  capabilities: it mounts the ``noexec`` tmpfs, then drops to a fresh uid from
  :data:`UID_BASE` upward (so ``RLIMIT_NPROC`` counts that kernel's processes only) and
  loses every capability with it;
- unprivileged, ``bwrap --unshare-user --uid 65534`` maps the grader's uid; the inner launcher
  creates a nested user and mount namespace to mount the tmpfs, then drops its capabilities.

This module imports only the standard library: :mod:`tpp.grading.launcher` imports it by path.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import secrets
import shutil
import subprocess
import sys

UID_BASE = 1 << 20  # root mode: each kernel gets a uid in [UID_BASE, 2 * UID_BASE)
NOBODY = 65534
WORK = "work"  # the private noexec folder, inside the shared folder
ENV = "TPP_ALLOW_UNSANDBOXED"


def bwrap_path() -> str | None:
    """The ``bwrap`` executable, if installed."""
    return shutil.which("bwrap") or (
        "/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else None
    )


def readonly_roots(package_dir: str) -> list[str]:
    """Folders the kernel may read: system, Python, venv, and the folder holding ``tpp``.

    ``package_dir`` is the folder that contains the ``tpp`` package (``lib/`` of the course):
    it must not be the course root, which holds ``solutions/``.
    """
    if os.path.isdir(os.path.join(package_dir, "solutions")):
        raise ValueError(
            f"{package_dir} holds solutions/: install tpp so that its package folder does not "
            "contain the masters (the course keeps it in lib/)"
        )
    roots = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"]
    for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        roots.append(os.path.realpath(p))
    roots.append(os.path.realpath(package_dir))
    out: list[str] = []
    for r in roots:
        if os.path.isdir(r) and r not in out:
            out.append(r)
    return out


def bwrap_argv(shared: str, config: dict, inner: list[str]) -> list[str]:
    """The ``bwrap`` command running ``inner`` in the sandbox around folder ``shared``."""
    argv = [
        config["bwrap"],
        "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
        "--unshare-cgroup-try", "--die-with-parent", "--new-session",
        "--hostname", "grader",
    ]  # fmt: skip
    if os.getuid() == 0:
        argv += ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETUID"]
        argv += ["--cap-add", "CAP_SETGID", "--cap-add", "CAP_CHOWN"]
    else:
        argv += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    # no tmpfs on /tmp (one more place to bound; bwrap >= 0.8 could size it with --size): /tmp
    # is a root-owned folder of the sandbox's root, and TMPDIR is the private, sized work/
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "0755", "--dir", "/tmp"]
    parents: set[str] = set()
    for r in [*config["ro"], shared]:
        d = os.path.dirname(r)
        while d not in ("/", ""):
            parents.add(d)
            d = os.path.dirname(d)
    for d in sorted(parents, key=lambda p: (p.count("/"), p)):  # traversable by the kernel
        argv += ["--perms", "0755", "--dir", d]
    for r in config["ro"]:
        argv += ["--ro-bind", r, r]
    argv += ["--bind", shared, shared, "--chdir", os.path.join(shared, WORK)]
    argv += ["--clearenv"]
    for k, v in sorted(config.get("env", {}).items()):
        argv += ["--setenv", k, v]
    home = os.path.join(shared, WORK)
    for k, v in (("HOME", home), ("TMPDIR", home), ("PATH", "/usr/bin:/bin")):
        argv += ["--setenv", k, v]
    argv += ["--setenv", "MPLCONFIGDIR", home, "--setenv", "IPYTHONDIR", home + "/.ipython"]
    return [*argv, "--", *inner]


@functools.lru_cache(maxsize=1)
def probe() -> str:
    """Why the sandbox cannot run here ("" if it can): one ``bwrap`` run of ``true``."""
    exe = bwrap_path()
    if exe is None:
        return "bwrap (Debian package bubblewrap) is not installed"
    if sys.platform != "linux":
        return f"bubblewrap needs Linux, not {sys.platform}"
    cmd = [exe, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent"]
    if os.getuid() != 0:
        cmd += ["--unshare-user"]
    cmd += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true"]
    try:
        res = subprocess.run(cmd, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap failed to start: {exc}"
    if res.returncode != 0:
        return "bwrap cannot create namespaces here: " + res.stderr.decode(errors="replace")[:200]
    return ""


def config_for(package_dir: str, env: dict[str, str]) -> dict:
    """The sandbox part of the kernel launcher's configuration."""
    exe = bwrap_path()
    if exe is None:
        raise RuntimeError("bwrap is not installed")
    return {"bwrap": exe, "ro": readonly_roots(package_dir), "env": env}


def new_uid() -> int:
    """A uid of its own for one kernel (root mode)."""
    return UID_BASE + secrets.randbelow(UID_BASE)


# --- inside the sandbox (run by the launcher, before the kernel starts) ---------------------

_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount_private(path: str, owner: int, size_mb: int = 256, mode: str = "0700") -> None:
    opts = f"size={int(size_mb)}m,mode={mode},uid={owner},gid={owner}".encode()
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    if _libc().mount(b"tmpfs", path.encode(), b"tmpfs", flags, opts) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mounting the private folder {path}: {os.strerror(err)}")


def _drop_capabilities() -> None:
    """Clear this process's capability sets (``capset`` with empty sets)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("eff", ctypes.c_uint32), ("perm", ctypes.c_uint32), ("inh", ctypes.c_uint32)]

    data = (Data * 2)()
    if _libc().capset(ctypes.byref(Header(0x20080522, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def enter(shared: str, uid: int, connection_file: str, disk_mb: int = 256) -> str:
    """Inside ``bwrap``: mount ``shared/work`` private, ``noexec`` and of ``disk_mb`` MiB,
    become ``uid``, lose every capability. Returns the connection file
    the kernel should read."""
    work = os.path.join(shared, WORK)
    libc = _libc()
    if os.getuid() == 0:  # root mode: mount with bwrap's capabilities, then drop to uid
        with open(connection_file, "rb") as fh:
            conn = fh.read()
        _mount_private(work, uid, disk_mb)
        own = os.path.join(work, ".kernel.json")
        fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(conn)
        os.chown(own, uid, uid)
        connection_file = own
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # all uids non-zero: the capabilities are gone
    else:  # a nested user + mount namespace of our own to mount the tmpfs
        me = os.getuid()
        if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare failed")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{me} {me} 1"),
                           ("gid_map", f"{os.getgid()} {os.getgid()} 1")):  # fmt: skip
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
        _mount_private(work, me, disk_mb)
        _drop_capabilities()
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs failed")
    os.chdir(work)
    return connection_file


def encode(config: dict) -> str:
    return json.dumps(config, sort_keys=True)
