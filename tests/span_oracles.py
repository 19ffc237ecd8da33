"""The span tasks' text rules in plain Python: the oracles that tests hold the
TensorFlow ops against. Words (`word_spans`, `words`: google's BasicTokenizer cut,
bert_tf/text/words.py's docstring states it) against bert_tf/text/graph_words.py;
windows and max context (their docstring in bert_tf/text/windows.py) against that
module's ops, on many random lengths, strides and rooms.

    spans = windows([1, 2, 1, 3], room=4, stride=2)   # [(0, 3), (2, 4)]: (first, end)
    max_context([1, 2, 1, 3], spans)                  # [0, 0, 0, 1]: each unit's window
"""

import bisect
import functools

import numpy as np

from bert_tf.text.words import separators, single_character_ranges


@functools.lru_cache(maxsize=1)
def _lookup():
    ranges = single_character_ranges()
    return [lo for lo, _ in ranges], [hi for _, hi in ranges], frozenset(separators())


def word_spans(text):
    """text (str) -> list of (start, end) character offsets of its words, end exclusive,
    in order (bert_tf/text/words.py's docstring says where words are cut)."""
    firsts, lasts, space = _lookup()
    spans, start = [], None
    for i, ch in enumerate(text):
        if ch in space:
            if start is not None:
                spans.append((start, i))
                start = None
            continue
        cp = ord(ch)
        k = bisect.bisect_right(firsts, cp) - 1
        if k >= 0 and cp <= lasts[k]:
            if start is not None:
                spans.append((start, i))
            spans.append((i, i + 1))
            start = None
        elif start is None:
            start = i
    if start is not None:
        spans.append((start, len(text)))
    return spans


def words(text):
    """text (str) -> list of its words (str), cut as `word_spans` cuts them."""
    return [text[start:end] for start, end in word_spans(text)]


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


# SQuAD's windows over one context, in the terms its tests pin them: bert_tf/text/windows.py's
# ops (what tasks/families/squad/data.py runs), not the oracle.

def doc_spans(num_doc_tokens, max_tokens_for_doc, doc_stride):
    """The op's windows over a context of `num_doc_tokens` pieces -> list of (start,
    length); a window without room refused first (as tasks/families/squad/config.py's
    check_windows refuses the settings that leave none)."""
    from bert_tf.text import windows as graph
    if max_tokens_for_doc < 1:
        raise ValueError(f"no room for context pieces ({max_tokens_for_doc})")
    _, first, end = graph.windows([0], [num_doc_tokens], max_tokens_for_doc, doc_stride)
    return [(int(f), int(e - f)) for f, e in zip(first.numpy(), end.numpy())]


def max_context_window(spans, num_doc_tokens):
    """[num_doc_tokens] int: the op's window where each piece has most context."""
    from bert_tf.text import windows as graph
    first = np.asarray([start for start, _ in spans], np.int64)
    end = np.asarray([start + length for start, length in spans], np.int64)
    best, _ = graph.max_context(np.zeros(len(spans), np.int64), first, end, [0],
                                [num_doc_tokens])
    return best.numpy()


def max_context_mask(spans, span_index, num_doc_tokens):
    """[length of window span_index] bool: which of its pieces have their max context
    there."""
    start, length = spans[span_index]
    return max_context_window(spans, num_doc_tokens)[start:start + length] == span_index
