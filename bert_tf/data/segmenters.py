"""Chinese word segmentation for whole-word masking (`--chinese_word_segmenter`), as
Chinese-BERT-wwm does it: BERT's tokenizer makes every CJK ideograph a word of its own, so
`--do_whole_word_mask` alone masks single characters of Chinese text. With a segmenter,
the text is also cut into words, and the characters of a Chinese word are masked
together: each token carries a mark "continues the word before it" beside its id.

A token continues a word when it is a '##' WordPiece (English whole-word masking, kept for
mixed text) or an ideograph that is not the first character of a segmented word made of
ideographs only (a word mixing scripts, such as "4S店", is not grouped: HF's
`run_chinese_ref.py` and `DataCollatorForWholeWordMask` do the same). The ids are exactly
the tokenizer's ids of the whole line: the line is tokenized in pieces cut where BERT's
tokenizer cuts it anyway (around each ideograph), so each ideograph is one token.

A segmenter is a function: a line -> its words, which joined give the line back. One more
is one entry in SEGMENTERS (LTP or pkuseg would be a loader like `_jieba`). The
command's main process reads SEGMENTERS and checks the package is there; only the
processes that tokenize import it.
"""

import importlib.util
import re

from bert_tf.text.text_rules import CJK_RANGES

_CJK = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES)
# An ideograph alone, or a run of anything else (what BERT's tokenizer cuts around).
_PIECES = re.compile(f"[{_CJK}]|[^{_CJK}]+")
_IDEOGRAPHS = re.compile(f"[{_CJK}]+")


def _jieba():
    import logging
    import warnings
    try:
        with warnings.catch_warnings():     # jieba 0.42 imports the deprecated pkg_resources
            warnings.simplefilter("ignore", UserWarning)
            import jieba
    except ImportError:
        raise ValueError(_missing("jieba", "jieba")) from None
    jieba.setLogLevel(logging.WARNING)      # no "Building prefix dict..." on every worker
    jieba.initialize()
    return lambda line: jieba.lcut(line, HMM=True)


# name -> (the package that must be installed, loader returning the segment function)
SEGMENTERS = {"jieba": ("jieba", _jieba)}


def check_available(name):
    """A one-line ValueError when the segmenter's package is not installed (checked before
    any output is written; the package itself is imported by the workers only)."""
    package = SEGMENTERS[name][0]
    if importlib.util.find_spec(package) is None:
        raise ValueError(_missing(name, package))


def _missing(name, package):
    return (f"--chinese_word_segmenter={name} needs the {package} package, which is not "
            f"installed: pip install 'bert-tf[chinese]'")


def version(name):
    """The segmenter's package and version (its dictionary decides the output, so a rerun
    under another version writes new shards)."""
    from importlib.metadata import version as package_version
    package = SEGMENTERS[name][0]
    return f"{package} {package_version(package)}"


def load(name):
    """name -> segment function (line -> words)."""
    return SEGMENTERS[name][1]()


def continued_characters(line, words):
    """Offsets in `line` of the ideographs that continue a segmented word (each character
    of an all-ideograph word of two or more characters but its first)."""
    if "".join(words) != line:
        raise ValueError(f"the word segmenter's words do not make up the line {line[:40]!r}")
    offsets, at = [], 0
    for word in words:
        if len(word) > 1 and _IDEOGRAPHS.fullmatch(word):
            offsets.extend(range(at + 1, at + len(word)))
        at += len(word)
    return offsets


def tokenize_lines(tokenizer, lines, segment, is_subword):
    """Lines -> (ids int32 [total], counts int64 [lines], continues bool [total]): the
    tokenizer's ids and counts for these lines, and each token's mark (continues the word
    before it: a '##' piece, or a later character of a segmented Chinese word)."""
    import numpy as np      # here: the command's main process imports this module
    pieces, line_of, marked = [], [], []
    for number, line in enumerate(lines):
        if line.isascii() or not _IDEOGRAPHS.search(line):
            pieces.append(line)
            line_of.append(number)
            continue
        continued = set(continued_characters(line, segment(line)))
        for match in _PIECES.finditer(line):
            if match.start() in continued:
                marked.append(len(pieces))
            pieces.append(match.group())
            line_of.append(number)
    ids, piece_counts = tokenizer.tokenize_lines(pieces)
    counts = np.bincount(np.asarray(line_of, np.int64), weights=piece_counts,
                         minlength=len(lines)).astype(np.int64)
    continues = is_subword[ids]
    # An ideograph piece is one token (its id or [UNK]): the first of its piece.
    first = np.cumsum(piece_counts) - piece_counts
    continues[first[np.asarray(marked, np.int64)]] = True
    return ids, counts, continues
