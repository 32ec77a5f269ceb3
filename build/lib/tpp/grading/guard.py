"""In-kernel guard: a Python audit hook that keeps submitted code away from the grader's secrets.

The kernel runs as the grader's own user, so without help submitted code could read the master
notebook (``solutions/``), the cached reference values (``RESULTS/.cache``), other students'
answer files or other processes (``/proc/<pid>``), and write into ``lib/tpp`` or ``solutions/``.
:mod:`tpp.grading.launcher` calls :func:`install` in the kernel process *before* ``ipykernel``
starts, so every cell runs under the hook (``sys.addaudithook``: it cannot be removed). The hook
refuses, with a ``PermissionError`` that says what was refused:

- reading (``open``, ``os.listdir``, ``os.scandir``, Unix-socket ``connect``) anything whose
  real path (symlinks and ``/proc/self/fd/N`` links resolved) lies under a read-protected root:
  the solutions folder, ``.git``, the results folder, the grader's other temporary folders,
  the Jupyter runtime folder (other kernels' connection files), ``/proc/<pid>`` of any other
  process; listing the folder that holds the grader's temporary folders (their random names,
  e.g. of other kernels' sockets, stay unknown);
- writing, creating, renaming, deleting, ``chmod``-ing anything outside the kernel's own
  temporary folder (its working folder and answers folder; ``TMPDIR`` points there too);
- hard and symbolic links, directory file descriptors outside the kernel's folder, ``..`` in
  paths relative to a directory descriptor;
- starting processes (``subprocess``, ``os.system``, ``exec``, ``spawn``, ``fork``), signalling
  other processes, ``ctypes`` loading libraries, looking up symbols or reading raw addresses
  (``ctypes.memmove``/``memset`` are removed), ``gc.get_objects`` /
  ``get_referrers`` / ``get_referents``, SQLite extensions, and changing the guard's functions.

As a backstop the kernel also gets a seccomp filter (Linux x86-64/aarch64) that makes
``execve``/``execveat`` fail, so no new program can run even through a path the hook misses.

This is defence in depth, not a sandbox: native code loaded before the hook, or a CPython bug,
can bypass it. See ``chapters/instructors.md``. The module imports only the standard library.

Design note: the hook reads no global names at call time. Everything it uses is bound as a
default argument when it is created, so patching this module, ``os``, ``os.path`` or
``builtins`` from a cell changes nothing, and the functions themselves cannot be altered
(``object.__setattr__`` on them is refused).
"""

from __future__ import annotations

import json
import os
import posix
import sys

ENV = "TPP_GUARD"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_S_IFMT, _S_IFLNK, _S_IFDIR = 0o170000, 0o120000, 0o040000
_PROCESS_EVENTS = frozenset(
    {
        "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
        "os.forkpty", "pty.spawn", "os.startfile",
    }
)  # fmt: skip
_INTROSPECTION_EVENTS = frozenset(
    {
        "gc.get_objects", "gc.get_referrers", "gc.get_referents",
        "sqlite3.enable_load_extension", "sqlite3.load_extension",
    }
)  # fmt: skip
# event -> (indices of path arguments, index of the dir_fd argument or -1)
_WRITE_EVENTS = {
    "os.remove": ((0,), 1),
    "os.rmdir": ((0,), 1),
    "os.mkdir": ((0,), 2),
    "os.chmod": ((0,), 2),
    "os.chown": ((0,), 3),
    "os.utime": ((0,), 4),
    "os.truncate": ((0,), -1),
    "os.rename": ((0, 1), 2),
    "os.setxattr": ((0,), -1),
    "os.removexattr": ((0,), -1),
    "os.chflags": ((0,), -1),
    "os.lchflags": ((0,), -1),
    "os.lchmod": ((0,), -1),
    "shutil.copyfile": ((1,), -1),
    "shutil.copymode": ((1,), -1),
    "shutil.copystat": ((1,), -1),
    "shutil.copytree": ((1,), -1),
    "shutil.rmtree": ((0,), 1),
    "shutil.move": ((0, 1), -1),
    "shutil.chown": ((0,), -1),
    "shutil.make_archive": ((0,), -1),
    "shutil.unpack_archive": ((1,), -1),
}
_READ_EVENTS = {
    "os.listdir": 0,
    "os.scandir": 0,
    "shutil.copyfile": 0,
    "shutil.copytree": 0,
    "shutil.copymode": 0,
    "shutil.copystat": 0,
    "shutil.make_archive": 2,
    "shutil.unpack_archive": 0,
}


def _realpath(
    path: str,
    _lstat=posix.lstat,
    _readlink=posix.readlink,
    _getcwd=posix.getcwd,
    _split=str.split,
    _join=str.join,
    _startswith=str.startswith,
    _OSError=OSError,
    _ValueError=ValueError,
    _ifmt=_S_IFMT,
    _iflnk=_S_IFLNK,
) -> str:
    """``os.path.realpath`` rebuilt from the ``posix`` C functions (patching ``os`` changes
    nothing). Symlinks are followed; a magic link whose target is not a path (``pipe:[..]``,
    ``socket:[..]``) stays as it is."""
    if not _startswith(path, "/"):
        path = _getcwd() + "/" + path
    todo = _split(path, "/")
    todo.reverse()
    done: list[str] = []
    hops = 0
    while todo:
        c = todo.pop()
        if c == "." or c == "":
            continue
        if c == "..":
            if done:
                done.pop()
            continue
        cand = "/" + _join("/", done + [c])
        try:
            st = _lstat(cand)
        except (_OSError, _ValueError):
            done.append(c)  # does not exist (yet): keep the rest literally
            continue
        if st.st_mode & _ifmt != _iflnk:
            done.append(c)
            continue
        hops += 1
        try:
            target = _readlink(cand)
        except (_OSError, _ValueError):
            done.append(c)
            continue
        if hops > 40 or (not _startswith(target, "/") and ":[" in target):
            done.append(c)
            continue
        if _startswith(target, "/"):
            done = []
        parts = _split(target, "/")
        parts.reverse()
        todo.extend(parts)
    return "/" + _join("/", done)


def _is_dir(
    path: str,
    _stat=posix.stat,
    _OSError=OSError,
    _ValueError=ValueError,
    _ifmt=_S_IFMT,
    _ifdir=_S_IFDIR,
) -> bool:
    try:
        return _stat(path).st_mode & _ifmt == _ifdir
    except (_OSError, _ValueError):
        return False


def _under(path: str, roots: tuple[str, ...], _startswith=str.startswith) -> str:
    """The root of ``roots`` that ``path`` is (under), else ''."""
    for r in roots:
        if path == r or _startswith(path, r + "/") or r == "/":
            return r
    return ""


def _refuse(what: str, path: str = "", why: str = "", _E=PermissionError) -> None:
    where = " " + path if path else ""
    raise _E("the grader does not allow " + what + where + (": " + why if why else ""))


def make_hook(config: dict, own_pid: int, own_root: str):  # noqa: C901 - one dispatcher
    """The audit hook for ``config`` (see :func:`install`).

    Every value the hook and its helpers use is a *positional* default argument (an immutable
    tuple, not a closure cell or a keyword-defaults dict that a cell could change); none reads
    a global name, which :func:`tests.test_grading_guard` checks with ``dis``.
    """
    import pathlib
    import types

    read_roots = tuple(sorted({_realpath(p) for p in config.get("read", [])}))
    prefixes = tuple((_realpath(d), str(p)) for d, p in config.get("read_prefixes", []))
    write_roots = tuple(sorted({_realpath(p) for p in [own_root, *config.get("write", [])]}))
    allow_read = frozenset(_realpath(p) for p in config.get("allow_read", []))
    own = (_realpath(own_root),)
    pid = str(own_pid)
    write_events = types.MappingProxyType(dict(_WRITE_EVENTS))
    read_events = types.MappingProxyType(dict(_READ_EVENTS))

    def as_text(
        p,
        _type=type,
        _str=str,
        _bytes=bytes,
        _int=int,
        _isinstance=isinstance,
        _join=str.join,
        _decode=bytes.decode,
        _bjoin=bytes.join,
        _path_types=(pathlib.PosixPath, pathlib.PurePosixPath),
        _fspath=pathlib.PurePath.__fspath__,
        _pstr=pathlib.PurePath.__str__,
        _refuse=_refuse,
    ):
        """The path as an exact str; None for a descriptor; refuse anything unusual."""
        t = _type(p)
        if t is _int or p is None:
            return None
        if _isinstance(p, _str):
            return _join("", (p,))  # an exact str, whatever a subclass says
        if _isinstance(p, _bytes):
            return _decode(_bjoin(b"", (p,)), "utf-8", "surrogateescape")
        if t in _path_types and t.__fspath__ is _fspath and t.__str__ is _pstr:
            return _join("", (_fspath(p),))
        _refuse("a path of type " + t.__name__, "", "pass a str")
        return None

    def check_read(
        path: str,
        _real=_realpath,
        _under=_under,
        _split=str.split,
        _startswith=str.startswith,
        _isdigit=str.isdigit,
        _len=len,
        _allow=allow_read,
        _roots=read_roots,
        _prefixes=prefixes,
        _own=own,
        _pid=pid,
        _refuse=_refuse,
    ) -> str:
        rp = _real(path)
        if rp in _allow:
            return rp
        if _under(rp, _roots):
            _refuse("reading", rp, "submitted code cannot read the grader's files")
        for d, pre in _prefixes:
            if _startswith(rp, d + "/" + pre) and not _under(rp, _own):
                _refuse("reading", rp, "submitted code cannot read other grading runs")
        if _startswith(rp, "/proc/"):
            parts = _split(rp, "/")
            if _len(parts) > 2 and _isdigit(parts[2]) and parts[2] != _pid:
                _refuse("reading", rp, "submitted code cannot inspect other processes")
            if _len(parts) > 3 and parts[2] == _pid and parts[3] == "net":
                _refuse("reading", rp, "submitted code cannot list sockets")
        return rp

    def check_write(
        path: str, _real=_realpath, _under=_under, _roots=write_roots, _refuse=_refuse
    ) -> str:
        rp = _real(path)
        if not _under(rp, _roots):
            _refuse("writing", rp, "submitted code may write only in its working folder")
        return rp

    def check_relative(
        path: str, dir_fd, _startswith=str.startswith, _split=str.split, _refuse=_refuse
    ) -> None:
        if dir_fd is not None and dir_fd != -1 and not _startswith(path, "/"):
            if ".." in _split(path, "/"):
                _refuse("'..' in a path relative to a directory descriptor:", path)

    def hook(
        event: str,
        args: tuple,
        _write_events=write_events,
        _read_events=read_events,
        _process=_PROCESS_EVENTS,
        _introspection=_INTROSPECTION_EVENTS,
        _write_flags=_WRITE_FLAGS,
        _startswith=str.startswith,
        _split=str.split,
        _type=type,
        _int=int,
        _str=str,
        _bytes=bytes,
        _len=len,
        _fn=types.FunctionType,
        _guard_file=__file__,
        _is_dir=_is_dir,
        _under=_under,
        _own=own,
        _pid=pid,
        _unlisted=frozenset(d for d, _ in prefixes),
        _as_text=as_text,
        _check_read=check_read,
        _check_write=check_write,
        _check_relative=check_relative,
        _refuse=_refuse,
        _ImportError=ImportError,
    ) -> None:
        if event == "open":
            path = _as_text(args[0])
            if path is None:
                return
            mode, flags = args[1], args[2]
            if mode is None and not _startswith(path, "/") and ".." in _split(path, "/"):
                _refuse("os.open with '..' in a relative path:", path)
            rp = _check_read(path)
            if _type(flags) is _int and flags & _write_flags:
                _check_write(path)
            if mode is None and _is_dir(rp) and not _under(rp, _own):
                _refuse("opening the directory", rp, "directory descriptors are not allowed")
            return
        if event in _write_events:
            idx, dfd = _write_events[event]
            dir_fd = args[dfd] if 0 <= dfd < _len(args) else None
            for i in idx:
                if i < _len(args):
                    p = _as_text(args[i])
                    if p is not None:
                        _check_relative(p, dir_fd)
                        _check_read(p)
                        _check_write(p)
        if event in _read_events:
            i = _read_events[event]
            if i < _len(args):
                p = _as_text(args[i])
                if p is not None:
                    rp = _check_read(p)
                    if (event == "os.listdir" or event == "os.scandir") and rp in _unlisted:
                        _refuse("listing", rp, "it would reveal other grading runs' names")
            return
        if event == "import":
            name = args[0] if _len(args) else ""
            if _type(name) is _str and name == "_ctypes":
                raise _ImportError("the grader does not allow importing " + name)
            return
        if event in _process:
            _refuse("starting processes", "", event)
        if _startswith(event, "ctypes."):
            _refuse("ctypes", "", event)
        if event in _introspection:
            _refuse(event)
        if event == "os.link" or event == "os.symlink":
            _refuse("creating links", "", event)
        if event == "os.kill" or event == "os.killpg":
            if event == "os.killpg" or (_len(args) > 0 and _str(args[0]) != _pid):
                _refuse("signalling other processes", "", event)
            return
        if event == "socket.connect" or event == "socket.bind":
            if _len(args) > 1 and (_type(args[1]) is _str or _type(args[1]) is _bytes):
                p = _as_text(args[1])
                if p and not _startswith(p, "\0"):
                    _check_read(p)
                    if event == "socket.bind":
                        _check_write(p)
            return
        if event == "sqlite3.connect":
            p = _as_text(args[0]) if _len(args) else None
            if p and _startswith(p, "file:"):
                _refuse("SQLite URIs:", p)
            if p and p != ":memory:":
                _check_read(p)
                _check_write(p)
            return
        if event == "object.__setattr__" or event == "object.__delattr__":
            obj = args[0] if _len(args) else None
            if _type(obj) is _fn and obj.__code__.co_filename == _guard_file:
                _refuse("changing the grader's guard")
            return

    return hook


def _seccomp_no_exec() -> bool:
    """Make ``execve``/``execveat`` fail with EPERM in this process and its children (seccomp
    filter, Linux x86-64 and aarch64). Returns False where unsupported."""
    import ctypes
    import platform
    import struct

    arch = platform.machine()
    table = {
        "x86_64": (0xC000003E, (59, 322)),
        "aarch64": (0xC00000B7, (221, 281)),
    }
    if sys.platform != "linux" or arch not in table:
        return False
    audit_arch, (nr_execve, nr_execveat) = table[arch]

    def ins(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("HBBI", code, jt, jf, k)

    ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
    allow, errno_eperm = 0x7FFF0000, 0x00050000 | 1
    prog = b"".join(
        [
            ins(ld_w_abs, 0, 0, 4),  # arch
            ins(jeq_k, 1, 0, audit_arch),
            ins(ret_k, 0, 0, allow),
            ins(ld_w_abs, 0, 0, 0),  # syscall number
            ins(jeq_k, 1, 0, nr_execve),
            ins(jeq_k, 0, 1, nr_execveat),
            ins(ret_k, 0, 0, errno_eperm),
            ins(ret_k, 0, 0, allow),
        ]
    )
    n = len(prog) // 8
    buf = ctypes.create_string_buffer(prog)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(n, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) == 0


def install(config: dict | None = None) -> None:
    """Install the guard in this process. ``config`` (else JSON in ``$TPP_GUARD``, then removed
    from the environment): ``read`` (roots nobody may read), ``read_prefixes`` ([folder, name
    prefix] pairs: its entries starting with the prefix are protected, except the kernel's
    own), ``write`` (extra writable roots), ``allow_read`` (exact files readable anyway, e.g.
    the kernel's connection file). The kernel's own folder is the parent of the working folder.
    """
    if config is None:
        config = json.loads(os.environ.pop(ENV, "{}") or "{}")
    own_root = os.path.dirname(os.path.realpath(os.getcwd()))
    os.environ["TMPDIR"] = own_root
    import tempfile

    tempfile.tempdir = None
    # Modules whose import needs what the hook forbids: import them first.
    import subprocess  # noqa: F401
    import uuid  # noqa: F401

    if config.get("seccomp", True):
        try:
            _seccomp_no_exec()
        except (OSError, AttributeError, ValueError):  # pragma: no cover - no seccomp here
            pass
    # ctypes must stay importable (SymPy and numpy import it) and its loading, symbol lookup and
    # raw-address events are refused by the hook; its memmove/memset (which raise no audit
    # event in CPython 3.11) are removed, and a second load of _ctypes is refused.
    import _ctypes
    import ctypes

    for mod in (ctypes, _ctypes):
        for name in ("memmove", "memset", "_memmove_addr", "_memset_addr"):
            if hasattr(mod, name):
                delattr(mod, name)
    sys.addaudithook(make_hook(config, os.getpid(), own_root))
