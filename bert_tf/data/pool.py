"""A small process pool for the workers: `python -m bert_tf.data.worker`
processes fed through their stdin and stdout.

Why not multiprocessing.Pool: its queues need locks, which start a resource-tracker
process (16 MB more in a tree whose whole budget is ~180 MB), and it would pickle each
block's bytes through a pipe. Here a job is a few hundred bytes (where the block lies in
the input files; the worker reads it), a result a dict of counts, and the examples go to
a part file on disk. Workers are fresh interpreters (never a fork of a process that might
hold TensorFlow or threads).

Messages: 8-byte little-endian length, then a pickle. The first message to a worker is
the Settings; then jobs; None ends it. A worker answers each job with
("ok", index, counts) or ("error", index, traceback text).
"""

import os
import pickle
import selectors
import struct
import subprocess
import sys

_HEADER = struct.Struct("<Q")


def send(stream, obj):
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    while data:   # an unbuffered pipe may take part of it at a time
        data = data[stream.write(data):]
    stream.flush()


def _read_exact(stream, n):
    parts = []
    while n:
        part = stream.read(n)
        if not part:
            raise EOFError
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def receive(stream):
    """The next message, or raises EOFError if the other side is gone.

    The main process reads its workers' results from unbuffered pipes: a buffered reader
    could pull a second message into its buffer, where select() would not see it."""
    size = _HEADER.unpack(_read_exact(stream, _HEADER.size))[0]
    return pickle.loads(_read_exact(stream, size))


class WorkerError(RuntimeError):
    pass


class WorkerPool:
    """num_workers processes, each with at most `depth` jobs queued (one running, the rest
    waiting in its pipe, so it never idles between jobs)."""

    def __init__(self, num_workers, settings, depth=2):
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [package_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        self.depth = depth
        self.procs = []
        self.queued = []
        self.selector = selectors.DefaultSelector()
        for w in range(num_workers):
            proc = subprocess.Popen(
                [sys.executable, "-m", "bert_tf.data.worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0)
            send(proc.stdin, settings)
            self.procs.append(proc)
            self.queued.append(0)
            self.selector.register(proc.stdout, selectors.EVENT_READ, w)

    def has_room(self):
        return min(self.queued) < self.depth

    def busy(self):
        return sum(self.queued) > 0

    def submit(self, job):
        """Queues a job on the least busy worker (requires has_room())."""
        w = self.queued.index(min(self.queued))
        send(self.procs[w].stdin, job)
        self.queued[w] += 1

    def results(self, timeout=None):
        """Finished jobs, [(index, counts)]: waits until there is one (timeout None), or
        up to `timeout` seconds."""
        done = []
        for key, _ in self.selector.select(timeout):
            w = key.data
            try:
                status, index, payload = receive(self.procs[w].stdout)
            except EOFError:
                code = self.procs[w].wait()
                raise WorkerError(f"worker process {self.procs[w].pid} exited "
                                  f"(status {code})") from None
            if status == "bad_input":       # the input's fault: the worker's one line
                raise ValueError(payload)
            if status != "ok":
                raise WorkerError(f"worker failed on block {index}:\n{payload}")
            self.queued[w] -= 1
            done.append((index, payload))
        return done

    def close(self, kill=False):
        for proc in self.procs:
            try:
                if kill:
                    proc.kill()
                else:
                    send(proc.stdin, None)
                    proc.stdin.close()
            except OSError:
                pass
        for proc in self.procs:
            proc.wait()
            proc.stdout.close()
        self.selector.close()
