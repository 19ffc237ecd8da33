"""One writer per output: an advisory lock that every command takes on what it writes.

    with OutputLock("runs/base", "--output_dir"):
        ...   # a second command writing runs/base stops with one line naming this one

The lock is the file `.NAME.lock` beside the output `NAME` (a run folder, a shard prefix,
a vocab file), so it is outside the output itself: a refused command leaves that
untouched, and a folder that is renamed into place (convert_checkpoint) is covered too.
It holds the holder's pid, start time and command line, for the refusal to name.

`fcntl.flock` is released by the kernel when its process ends however it ends (kill -9
included), so a lock file left by a dead process is no lock: the next command takes it.
The file is removed on release while still locked; a waiter that opened the removed file
sees that its inode is no longer the path's and opens the path again, so two commands
never both hold one output. Paths with a scheme (gs://...) and systems without flock are
not locked (said nowhere: as before).
"""

import json
import os
import sys
import time

try:
    import fcntl
except ImportError:     # not POSIX: commands run unlocked, as they did before
    fcntl = None

LOCK_SUFFIX = ".lock"

# Locks this process holds, by real path: a command run inside another one (quickstart
# runs build_vocab, create_pretraining_data, run_pretraining) never waits on its caller.
_HELD = {}


class OutputLockedError(ValueError):
    """Another live process writes the same output (one line: who, since when)."""


def lock_path(output):
    """The lock file of `output`: `.NAME.lock` in the folder that holds NAME."""
    output = os.path.abspath(output)
    parent, name = os.path.split(output.rstrip(os.sep))
    return os.path.join(parent, f".{name or 'root'}{LOCK_SUFFIX}")


class OutputLock:
    """Context manager: holds the lock of `output` (a path) for the block, or raises
    OutputLockedError naming the holder; `flag` names the output in that line."""

    def __init__(self, output, flag):
        self.output = output
        self.flag = flag
        self.path = lock_path(output)
        self.fd = None

    def __enter__(self):
        key = os.path.realpath(self.path)
        if fcntl is None or key in _HELD:
            return self
        parent = os.path.dirname(self.path)
        while True:
            try:
                os.makedirs(parent, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                # A read-only or missing place for the lock: the command's own write
                # reports that, in its words, naming its output.
                return self
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise OutputLockedError(
                    f"{self.flag}={self.output} is in use by another command ({holder}); "
                    f"wait for it to end or choose another {self.flag}") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)   # removed by the holder as it let go: take the new file
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({
                "pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                "command": " ".join([os.path.basename(sys.executable)] + sys.argv)[:300],
            }).encode())
        except OSError:
            pass   # a full disk: the lock holds without its note; the command's own
            # write will say what is wrong, naming its output
        self.fd = fd
        _HELD[key] = self
        return self

    def __exit__(self, *exc):
        if self.fd is None:
            return
        _HELD.pop(os.path.realpath(self.path), None)
        try:
            os.remove(self.path)   # while still locked: see the module docstring
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def _read(fd):
    """'pid N: COMMAND, since TIME' from a held lock file (as much as can be read)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "its pid could not be read"
    return f"pid {info.get('pid')}: {info.get('command')}, since {info.get('since')}"
