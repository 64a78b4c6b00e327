"""Reading and writing graph files by the C++ library's rules (ir/io.cc, docs/graph-format.md
"Input limits" and "Writing outputs"), for jointfx.load_graph and jointfx.write_graph.

Reading: at most the input limit (2 GiB by default, as the CLI's), never more than limit + 1
bytes of a stream, stopping at the first block that holds a NUL byte (no graph text has one:
/dev/zero fails at once); a directory is refused; a FIFO nobody writes to for 10 s is an
error. Writing: a regular file (or a new one) through
a temporary file that mkstemp creates with O_EXCL beside it, synced, then renamed over it; a
symbolic link's final target is written by the same rules and the link stays; a character
device or a FIFO is written in place, never replaced; a directory, a socket or a block device
is refused. Every failure raises `error(message)` (the caller's ExportError), the message
naming the path as the C++ errors do ("g.json: error: ...").
"""

from __future__ import annotations

import errno
import os
import re
import select
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

# ir/io.h kDefaultInputLimitBytes: the CLI's default, which `jointfx --max-input-mib` changes.
DEFAULT_INPUT_LIMIT = 2 << 30
_BLOCK = 1 << 16  # what a stream is read in, and the granularity of the NUL-byte stop
# ir/io.cc kFifoWriterWaitMs: how long an input FIFO may go without a writer.
FIFO_WRITER_WAIT_S = 10


def _mib(n: int) -> str:
    return f"{n >> 20} MiB"


def read_input(path: str | Path, what: str, limit: int, error: Callable[[str], Exception]) -> bytes:
    """The bytes of `path` up to `limit` (`error(message)` is raised otherwise), ending just past
    the first NUL byte when the file holds one (the parser then reports it where it is)."""
    shown = str(path)

    def too_large() -> Exception:
        return error(f"{shown}: error: the {what} is larger than the input limit of "
                     f"{_mib(limit)} (max_input_bytes raises it)")

    try:
        # Non-blocking: opening a FIFO nobody writes to would wait for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise error(f"{shown}: error: cannot open the {what}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{shown}: error: cannot read: {os.strerror(errno.EISDIR)}")
        if stat.S_ISFIFO(st.st_mode) and not select.select([fd], [], [], FIFO_WRITER_WAIT_S)[0]:
            raise error(f"{shown}: error: cannot read the {what}: a FIFO nobody wrote to in "
                        f"{FIFO_WRITER_WAIT_S} s (no writer?)")
        os.set_blocking(fd, True)
        regular = stat.S_ISREG(st.st_mode)
        if regular and st.st_size > limit:
            raise too_large()
        chunks: list[bytes] = []
        size = 0
        # A regular file in as few reads as its size allows; anything else (a FIFO, a device, a
        # file that grows) in blocks, never past limit + 1 bytes.
        block = max(min(st.st_size, limit) + 1, _BLOCK) if regular else _BLOCK
        while True:
            try:
                chunk = os.read(fd, min(block, limit + 1 - size))
            except InterruptedError:
                continue
            except OSError as e:
                raise error(f"{shown}: error: cannot read: {e.strerror}") from None
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise too_large()
            nul = chunk.find(b"\0")
            if nul >= 0:
                chunks.append(chunk[:nul + 1])
                break
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- writing


def _descriptor(path: str) -> int:
    """The descriptor `path` names when it is a standard stream or an open file of this process
    (/dev/stdout, /dev/fd/1, /proc/self/fd/1, "-"), else -1: writing there must not reopen it."""
    if path in ("-", "/dev/stdout"):
        return 1
    if path == "/dev/stderr":
        return 2
    m = re.fullmatch(r"/(?:dev/fd|proc/self/fd)/([0-9]+)", path)
    if m:
        fd = int(m.group(1))
        try:
            os.fstat(fd)
            return fd
        except OSError:
            return -1
    return -1


def _follow_links(path: str, error: Callable[[str], Exception]) -> str:
    """The file `path` finally names through symbolic links (which need not exist yet)."""
    p = path
    for _ in range(40):
        try:
            st = os.lstat(p)
        except OSError:
            return p
        if not stat.S_ISLNK(st.st_mode):
            return p
        try:
            target = os.readlink(p)
        except OSError as e:
            raise error(f"{path}: error: cannot read the symbolic link: {e.strerror}") from None
        if not target:
            raise error(f"{path}: error: the symbolic link is empty")
        if not target.startswith("/"):
            target = os.path.join(os.path.dirname(p), target)
        p = target
    raise error(f"{path}: error: cannot follow the symbolic link: {os.strerror(errno.ELOOP)}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


def _write_in_place(target: str, shown: str, data: bytes, regular: bool,
                    error: Callable[[str], Exception]) -> None:
    """A character device, a FIFO, or a regular file under /dev, /proc or /sys: opened and
    written, never replaced (no temporary, no rename)."""
    flags = os.O_WRONLY | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0) | (os.O_TRUNC if regular else 0)
    try:
        fd = os.open(target, flags)
    except OSError as e:
        raise error(f"{shown}: error: cannot open for writing: {e.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        ok = stat.S_ISREG(mode) if regular else (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode))
        if not ok:  # replaced by something else between the check and the open
            raise error(f"{shown}: error: the output changed while it was opened; not written")
        _write_all(fd, data)
    except OSError as e:
        raise error(f"{shown}: error: cannot write: {e.strerror}") from None
    finally:
        os.close(fd)


def _replace_atomically(target: str, shown: str, data: bytes,
                        error: Callable[[str], Exception]) -> None:
    """Writes a temporary beside `target` (mkstemp: a fresh name, O_EXCL, so no file or link
    planted at a guessable name is ever opened), syncs it and renames it over `target`."""
    folder, base = os.path.split(target)
    folder = folder or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.tmp.", dir=folder)
    except OSError as e:
        raise error(f"{shown}: error: cannot create a temporary file in '{folder}': "
                    f"{e.strerror}") from None
    try:
        try:
            # mkstemp makes the file 0600; an existing target keeps its mode, else 0644.
            try:
                mode = stat.S_IMODE(os.stat(target).st_mode)
            except OSError:
                mode = 0o644
            os.fchmod(fd, mode)
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, target)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise error(f"{shown}: error: cannot write: {e.strerror}") from None
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # the rename itself made durable; a failure here leaves a complete file
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def write_output(path: str | Path, data: bytes, error: Callable[[str], Exception]) -> None:
    """Writes `data` to `path` by the C++ writer's rules (ir/io.h writeFileAtomic)."""
    path = os.fspath(path)
    if not path:
        raise error("<output>: error: empty output path")
    fd = _descriptor(path)
    if fd >= 0:
        try:
            _write_all(fd, data)
        except OSError as e:
            raise error(f"{path}: error: cannot write: {e.strerror}") from None
        return
    target = _follow_links(path, error)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        _replace_atomically(target, path, data, error)  # a new file
        return
    except OSError as e:
        raise error(f"{path}: error: cannot write: {e.strerror}") from None
    system_dir = target.startswith(("/dev/", "/proc/", "/sys/"))
    mode = st.st_mode
    if stat.S_ISREG(mode) and not system_dir:
        _replace_atomically(target, path, data, error)
    elif stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        _write_in_place(target, path, data, stat.S_ISREG(mode), error)
    elif stat.S_ISDIR(mode):
        raise error(f"{path}: error: cannot write: {os.strerror(errno.EISDIR)}")
    else:
        kind = ("socket" if stat.S_ISSOCK(mode) else
                "block device" if stat.S_ISBLK(mode) else "special file")
        raise error(f"{path}: error: refusing to write to a {kind} (outputs go to regular files, "
                    "character devices or FIFOs)")
