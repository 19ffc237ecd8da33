"""One writer per output, and no writer under a reader: advisory locks that every command
takes on what it writes (`OutputLock`) and, where it reads for a long time, on what it
reads (`InputLock`: pretraining's shard sets).

    with OutputLock("runs/base", "--output_dir"):
        ...   # a second command writing runs/base stops with one line naming this one
    with InputLock("shards/train-00000-of-00008", "--input_file"):
        ...   # create_pretraining_data --output_file=shards/train stops, naming this run

The lock is the file `.NAME.lock` beside the output `NAME` (a run folder, a shard prefix,
a vocab file), so it is outside the output itself: a refused command leaves that
untouched, and a folder that is renamed into place (convert_checkpoint) is covered too.
It is found from the output's real path (symlinks of the output or of a folder above it
resolved), so every spelling of one output meets the same lock. A shard of a set
(`PREFIX-00003-of-00008`) is locked by its set's prefix, the name its writer locks.

A writer holds the file exclusively and writes its pid, start time and command line in
it; readers hold it shared, each appending a line of its own, so a refusal names the
other side: a writer while someone reads, a reader while someone writes. Neither waits.

`fcntl.flock` is released by the kernel when its process ends however it ends (kill -9
included), so a lock file left by a dead process is no lock: the next command takes it.
The file is removed on release by the last holder, while still locked; a waiter that
opened the removed file sees that its inode is no longer the path's and opens the path
again, so two commands never both hold one output. Paths with a scheme (gs://...) and
systems without flock are not locked (said nowhere: as before).
"""

import json
import os
import re
import sys
import time

try:
    import fcntl
except ImportError:     # not POSIX: commands run unlocked, as they did before
    fcntl = None

LOCK_SUFFIX = ".lock"

# A shard of a set as create_pretraining_data (and google's sharded writers) name them.
_SHARD_OF_SET = re.compile(r"^(.+)-\d{5}-of-\d{5}$")

# Locks this process holds, by lock file: a command run inside another one (quickstart
# runs build_vocab, create_pretraining_data, run_pretraining) never waits on its caller.
_HELD = {}


class OutputLockedError(ValueError):
    """Another live process writes the same output, or reads it while this one would
    write it (one line: who, since when)."""


def lock_path(output):
    """The lock file of `output`: `.NAME.lock` in the folder that holds NAME, both taken
    from the real path (every spelling and symlink of `output` gives the same file)."""
    output = os.path.realpath(os.path.abspath(output))
    parent, name = os.path.split(output.rstrip(os.sep))
    return os.path.join(parent, f".{name or 'root'}{LOCK_SUFFIX}")


def shard_set(path):
    """The output a shard file belongs to, as its writer locked it: the prefix of
    `PREFIX-NNNNN-of-NNNNN`, else the file itself."""
    match = _SHARD_OF_SET.match(os.path.basename(path))
    return os.path.join(os.path.dirname(path), match.group(1)) if match else path


class OutputLock:
    """Context manager: holds the lock of `output` (a path) for the block, exclusively
    (a writer) or `shared` (a reader), or raises OutputLockedError naming the holder;
    `flag` names the output in that line."""

    def __init__(self, output, flag, shared=False):
        self.output = output
        self.flag = flag
        self.shared = shared
        self.path = lock_path(output)
        self.fd = None

    def __enter__(self):
        if fcntl is None or self.path in _HELD:
            return self
        parent = os.path.dirname(self.path)
        while True:
            try:
                if not self.shared:
                    os.makedirs(parent, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError:
                # A read-only or missing place for the lock: the command's own write
                # reports that, in its words, naming its output.
                return self
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) |
                            fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise OutputLockedError(self._refusal(holder)) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)   # removed by the holder as it let go: take the new file
        try:
            if not self.shared:
                os.ftruncate(fd, 0)
            os.write(fd, (json.dumps({
                "pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                "reads": self.shared,
                "command": " ".join([os.path.basename(sys.executable)] + sys.argv)[:300],
            }) + "\n").encode())
        except OSError:
            pass   # a full disk: the lock holds without its note; the command's own
            # write will say what is wrong, naming its output
        self.fd = fd
        _HELD[self.path] = self
        return self

    def _refusal(self, holder):
        if self.shared:
            return (f"{self.flag}: {self.output} is being written by another command "
                    f"({holder}); wait for it to end")
        if holder.startswith("reading:"):
            return (f"{self.flag}={self.output} is being read by another command "
                    f"({holder[len('reading: '):]}); wait for it to end or choose another "
                    f"{self.flag}")
        return (f"{self.flag}={self.output} is in use by another command ({holder}); "
                f"wait for it to end or choose another {self.flag}")

    def __exit__(self, *exc):
        if self.fd is None:
            return
        _HELD.pop(self.path, None)
        try:
            # The last holder removes the file, still holding it exclusively (see the
            # module docstring); a reader that is not the last leaves it to the others.
            if self.shared:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(self.fd).st_ino == os.stat(self.path).st_ino:
                os.remove(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def InputLock(path, flag):  # noqa: N802  (a lock, spelled like the writer's)
    """A reader's lock on `path` (a shard: its set's lock), held while it reads."""
    return OutputLock(shard_set(path), flag, shared=True)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, TypeError):
        return True
    return True


def _read(fd):
    """Who holds a lock file: 'pid N: COMMAND, since TIME' of its live holder (a reader's
    prefixed 'reading: '), as much as can be read."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        lines = os.read(fd, 1 << 16).decode(errors="replace").splitlines()
    except OSError:
        lines = []
    notes = []
    for line in lines:
        try:
            info = json.loads(line)
        except ValueError:
            continue
        if isinstance(info, dict):
            notes.append(info)
    live = [info for info in notes if _alive(info.get("pid"))] or notes
    if not live:
        return "its pid could not be read"
    info = live[-1]
    text = f"pid {info.get('pid')}: {info.get('command')}, since {info.get('since')}"
    return f"reading: {text}" if info.get("reads") else text
