"""A worker process: runs the blocks the main process sends (block.py), answers with their
counts.

    python -m bert_tf.data.worker    # started by pool.WorkerPool

Nothing here imports TensorFlow (bert_tf/text/python_tokenizer.py says why).
"""

import os
import signal
import sys
import traceback

from bert_tf.data.block import NotText, run_job


def main():
    """Worker loop (see pool.py for the protocol).

    Stopping is the main process's job: SIGTERM and SIGINT (Ctrl-C reaches the whole
    process group) are ignored here, and the main process, which catches them, kills its
    workers once it has cleaned up. A worker whose main process is gone (its pipes
    closed: killed with SIGKILL) ends quietly, without a traceback per worker."""
    from bert_tf.data import pool
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, signal.SIG_IGN)
    channel_in, channel_out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr      # nothing else may write into the result channel
    try:
        settings = pool.receive(channel_in)
        while True:
            job = pool.receive(channel_in)
            if job is None:
                return
            try:
                reply = ("ok", job[0], run_job(settings, job))
            except NotText as e:
                reply = ("bad_input", job[0], str(e))
            except Exception:   # reported by the main process, which stops the run
                reply = ("error", job[0], traceback.format_exc())
            pool.send(channel_out, reply)
    except (EOFError, BrokenPipeError):
        # The result channel may be a broken pipe: point it at /dev/null so that the
        # interpreter's flush at exit has nothing to complain about.
        os.dup2(os.open(os.devnull, os.O_WRONLY), channel_out.fileno())


if __name__ == "__main__":
    main()
