"""Progress on long work, readable on a terminal and in a log file.

On a terminal (stdout is a TTY) a tqdm bar redraws in place. When stdout goes to a file or
a pipe, a bar writes nothing readable until it closes, so `LineProgress` prints one plain
line instead every `every` units (5% of the total by default) and at the end:

    pretraining: 400/2000 steps (20%), 12.3 steps/s, elapsed 0:32, ETA 2:10, loss=5.123

Both take tqdm's calls (`update`, `set_postfix`, `set_postfix_str`, `close`), so the
commands use `progress_bar(...)` and never ask which one they got.
"""

import sys
import time


def interactive():
    """True when stdout is a terminal (a bar can redraw in place)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def progress_bar(total, desc, unit="it", initial=0, disable=False, unit_scale=False,
                 every=None):
    """A tqdm bar on a terminal, else a `LineProgress`; `disable` shows nothing."""
    if interactive() or disable:
        from tqdm import tqdm
        return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=disable,
                    unit_scale=unit_scale, dynamic_ncols=True, mininterval=0.5,
                    file=sys.stderr)
    return LineProgress(total, desc, unit=unit, initial=initial, unit_scale=unit_scale,
                        every=every)


def _clock(seconds):
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else \
        f"{rest // 60}:{rest % 60:02d}"


def _amount(n, unit_scale):
    if not unit_scale:
        return f"{n:,.0f}"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.1f}{prefix}"
    return f"{n:.0f}"


class LineProgress:
    """One progress line on stdout every `every` units (default: 5% of `total`) but at
    most one per `min_seconds`, on the first update (so the rate shows early) and at
    close."""

    def __init__(self, total, desc, unit="it", initial=0, unit_scale=False, every=None,
                 min_seconds=10.0, stream=None):
        self.total, self.desc, self.unit, self.unit_scale = total, desc, unit, unit_scale
        self.n = self.start_n = self.last_printed = initial
        self.every = every or max(1, (total or 0) // 20)
        self.min_seconds = min_seconds
        self.stream = stream
        self.postfix = ""
        self.start = self.last_time = time.perf_counter()
        self.closed = False

    def set_postfix(self, refresh=False, **values):
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, text, refresh=False):
        self.postfix = text

    def due(self, n=1):
        """Whether `update(n)` will print a line."""
        if self.last_printed == self.start_n:
            return True
        return (self.n + n - self.last_printed >= self.every and
                time.perf_counter() - self.last_time >= self.min_seconds)

    def update(self, n=1):
        printing = self.due(n)
        self.n += n
        if printing:
            self._print()

    def rate(self, ahead=0):
        """Units per second since the start, counting `ahead` units not yet updated."""
        elapsed = time.perf_counter() - self.start
        return (self.n + ahead - self.start_n) / elapsed if elapsed > 0 else 0.0

    def line(self):
        elapsed = time.perf_counter() - self.start
        rate = self.rate()
        done = _amount(self.n, self.unit_scale)
        parts = [f"{self.desc}: {done}"]
        if self.total:
            parts[0] += f"/{_amount(self.total, self.unit_scale)} {self.unit} " \
                        f"({100 * self.n / self.total:.0f}%)"
        else:
            parts[0] += f" {self.unit}"
        shown_rate = _amount(rate, True) if self.unit_scale else \
            f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"
        parts.append(f"{shown_rate} {self.unit}/s")
        parts.append(f"elapsed {_clock(elapsed)}")
        if self.total and rate > 0 and self.n < self.total:
            parts.append(f"ETA {_clock((self.total - self.n) / rate)}")
        if self.postfix:
            parts.append(self.postfix)
        return ", ".join(parts)

    def _print(self):
        self.last_printed, self.last_time = self.n, time.perf_counter()
        print(self.line(), file=self.stream or sys.stdout, flush=True)

    def close(self):
        if not self.closed and self.n != self.last_printed:
            self._print()
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def step_lines(total_steps, batch_size, initial=0):
    """A Keras callback printing one progress line every 5% of the training steps (steps
    done, loss, examples/s, ETA), for output that is not a terminal; `initial` steps
    were done before (a resumed run). It may serve several fit calls of one run."""
    import keras

    class StepLines(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.progress = LineProgress(total_steps, "training", unit="step",
                                         initial=initial)

        def on_train_batch_end(self, batch, logs=None):
            if self.progress.due():
                # Reading the loss waits for the step: only when a line is printed.
                rate = self.progress.rate(1) * batch_size
                self.progress.set_postfix(loss=f"{float(logs['loss']):.4f}",
                                          examples_per_s=f"{rate:.1f}")
            self.progress.update(1)

        def on_train_end(self, logs=None):
            if self.progress.n >= total_steps:
                self.progress.close()

    return StepLines()
