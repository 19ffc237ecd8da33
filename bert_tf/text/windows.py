"""Windows over a sequence longer than the model, as google-research/bert's run_squad.py
makes them (`doc_stride`), for units of one piece (SQuAD's context pieces,
extract_features' pieces) or of several (NER's words, never cut across):

* `windows`: from the first unit, as many whole units as fit in `room` pieces; the next
  window starts at the first unit at least `stride` pieces after the previous start,
  never past its end, until one reaches the last unit. A stride of `room` or more (or
  None) gives consecutive parts.
* `max_context`: a unit in several windows is read from the one where the least of the
  pieces before and after its first piece, plus a hundredth of the window's pieces, is
  largest (`_check_is_max_context`), the earlier window on a tie.

TF-free; the NER and SQuAD signatures compute the same in the graph, and their tests hold
them equal to these.
"""

import numpy as np

# How a text read in windows gets one answer from its windows' logits (classification,
# multi-label): their mean, or their maximum (bert_tf.models.task_layers.pool_windows).
# Here, TF-free, so that the commands' flags name them before TensorFlow loads.
WINDOW_POOLINGS = ("mean", "max")


def default_doc_stride(max_seq_length):
    """A training run's doc_stride unless given (NER, classification): half a window's
    pieces, so that every unit of a long text is read where it has a quarter window of
    context on each side (or the text's end)."""
    return max(1, (max_seq_length - 2) // 2)


def check_doc_stride(doc_stride, max_seq_length, flag="--doc_stride"):
    """ValueError when `doc_stride` (None: not given) is more than a window of
    max_seq_length holds (max_seq_length - 2 pieces, [CLS] and [SEP] aside): `windows`
    starts the next window at the previous one's end then, so the flag would not say
    what the run does. The families whose window has that room (classification,
    multi-label, NER) and extract_features call it on their flags."""
    room = max_seq_length - 2
    if doc_stride is not None and room >= 1 and doc_stride > room:
        raise ValueError(f"{flag}={doc_stride}: more than a window holds ({room} pieces: "
                         f"--max_seq_length={max_seq_length} less [CLS] and [SEP]); "
                         f"windows would start {room} pieces apart, not {doc_stride}, "
                         f"leaving no overlap: give at most {room}")


def windows(lengths, room, stride=None):
    """lengths: pieces of each unit (each at most `room`) -> list of (first, end) unit
    indices, end exclusive; one (0, 0) window for no units."""
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    stride = room if stride is None else stride
    if room < 1 or stride < 1:
        raise ValueError(f"windows: room and stride must be >= 1, got {room} and {stride}")
    out, first, n = [], 0, len(offsets) - 1
    while True:
        end = min(max(int(np.searchsorted(offsets, offsets[first] + room, "right")) - 1,
                      first + 1), n)
        out.append((first, end))
        if end >= n:
            return out
        following = int(np.searchsorted(offsets, offsets[first] + stride, "left"))
        first = max(first + 1, min(following, end))


def max_context(lengths, spans):
    """int64 [units]: for each unit, the index in `spans` (`windows`) of the window where
    it has the most context."""
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    best = np.full(len(offsets) - 1, -1, np.int64)
    best_score = np.full(len(offsets) - 1, -np.inf)
    for index, (first, end) in enumerate(spans):
        units = np.arange(first, end)
        at = offsets[units]
        score = np.minimum(at - offsets[first], offsets[end] - 1 - at) + \
            0.01 * float(offsets[end] - offsets[first])
        better = score > best_score[units]           # strict: the earlier window on ties
        best[units[better]] = index
        best_score[units[better]] = score[better]
    return best
