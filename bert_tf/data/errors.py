"""How a create_pretraining_data run ends early: `InputError` (bad flags or input) and
`Stopped` (SIGTERM or SIGINT), each reported as one line with exit status 1, and
`stop_on_signals`, which turns those signals into `Stopped` so the run's cleanup runs.
"""

import contextlib
import signal
import threading


class InputError(ValueError):
    """Bad flags or input: reported as one line, exit status 1."""


class Stopped(Exception):
    """SIGTERM or SIGINT stopped the run (one line, exit status 1): complete shards are
    kept, the rest is redone by the same command."""


@contextlib.contextmanager
def stop_on_signals(stops=None, first=None):
    """SIGTERM (a stopped job or VM) and SIGINT (Ctrl-C) raise Stopped in this process,
    so the run's cleanup runs: workers killed, temporary files removed. A second signal
    is ignored, so it cannot cut that cleanup short. `stops`: a list that gets the
    signal's name too, and `first`: a function called before the exception is raised
    (for a library that catches exceptions in its main loop: Beam's runner, whose
    workers `first` can end so that it fails). Outside the main thread (a caller's own
    thread) signals cannot be caught and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    names = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}
    previous = {number: signal.getsignal(number) for number in names}

    def stop(number, frame):
        for other in names:
            signal.signal(other, signal.SIG_IGN)
        if stops is not None:
            stops.append(names[number])
        if first is not None:
            first()
        raise Stopped(names[number])

    for number in names:
        signal.signal(number, stop)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
