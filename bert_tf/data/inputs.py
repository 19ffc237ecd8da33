"""Reading the input: flags shared with the workers, the vocabulary check, blocks, documents.

No numpy and no TensorFlow here: the main process only reads, dispatches and writes, and
stays small (the memory budget is the whole process tree; see docs/pretraining_data.md).

Blocks are the unit of streaming, of parallel work and of randomness. The input (all
files, in order, as one byte stream with a document break between files) is cut into
blocks of about `block_bytes` at document boundaries. Where a block is cut depends only on
the input, and block k draws from its own random generators, seeded with (random_seed, k);
so the output is the same whatever the number of worker processes, and a block can be
redone alone. Random next sentences come from the block's own documents: that window, not
the corpus, is what must be in memory.
"""

import collections
import dataclasses
import errno
import json
import os
import re

from bert_tf.text import text_rules
from bert_tf.data import storage
from bert_tf.text.text_rules import CLS_TOKEN, MASK_TOKEN, SEP_TOKEN, UNK_TOKEN

# The tokens the pretraining data is made of, besides the text's.
PRETRAINING_TOKENS = (UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)

INPUT_FORMATS = ("lines", "paragraphs", "jsonl")
# A block ends at the first document boundary after block_bytes. When there is none before
# CAP_FACTOR * block_bytes: at the last document boundary before that; else at the last
# line end (the document goes on in the next block: `documents_split`); else inside the
# line (`lines_cut`). So memory stays bounded on any input.
CAP_FACTOR = 4
# A blank line: only ASCII whitespace between two newlines (google's test is
# line.strip() == "", which also strips Unicode spaces; such a line is still found by
# the worker, it just cannot end a block).
_BLANK_LINE = re.compile(rb"\n[ \t\r\f\v]*\n")
# Sentence ends for --input_format paragraphs/jsonl: . ! ? (optionally closed by a quote
# or bracket) followed by space and a capital, digit, quote or bracket; or a CJK full stop.
_SENTENCE_END = re.compile(
    r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])|(?<=[.!?][\"')\]])\s+(?=[\"'(\[A-Z0-9])"
    r"|(?<=[。！？])\s*")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a worker needs besides the block (all of it decides the output)."""
    vocab_file: str
    do_lower_case: bool = True
    do_whole_word_mask: bool = False
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    random_seed: int = 12345
    dupe_factor: int = 10
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    max_ngram_size: int = 1
    input_format: str = "lines"
    jsonl_field: str = "text"
    gzip: bool = False
    masking: str = "static"    # "none": no masked-LM predictions (weights 0)
    next_sentence: str = "nsp"    # "sop": ALBERT's sentence order; "none" (instances.py)
    chinese_word_segmenter: str = None    # segmenters.py; implies do_whole_word_mask
    num_shards: int = 1    # a block's examples are dealt to the shards (block.py)


def chooses_masks(masked_lm_prob, do_whole_word_mask, max_ngram_size):
    """Whether these flags ask for other masks than the defaults' (refused where no masks
    are drawn: create_pretraining_data --masking=none, run_pretraining --masking=static)."""
    return (masked_lm_prob, bool(do_whole_word_mask), max_ngram_size) != (
        Settings.masked_lm_prob, Settings.do_whole_word_mask, Settings.max_ngram_size)


# ------------------------------------------------------------------------------ vocab

def load_vocab(vocab_file):
    """Reads a WordPiece vocabulary -> list of tokens: `bert_tf.text.text_rules.load_vocab` with
    the special tokens the pretraining data needs, its lines worded for --vocab_file.

    Raises ValueError with one line naming the file: unreadable, not UTF-8, empty, a blank
    line, a repeated token, or no [UNK], [CLS], [SEP] or [MASK]. A URL (the Beam engine's
    gs://...) is read through a local copy.
    """
    try:
        return text_rules.load_vocab(storage.local_copy(vocab_file), required=PRETRAINING_TOKENS)
    except OSError as e:
        raise ValueError(f"--vocab_file: cannot read {vocab_file}: {e.strerror}") from None
    except text_rules.VocabError as e:
        raise ValueError(_vocab_line(e, vocab_file)) from None


def _vocab_line(error, vocab_file):
    """The one line this command says for a refused vocabulary."""
    d = error.details
    if error.problem == "not_found":
        return f"--vocab_file: cannot read {vocab_file}: {os.strerror(errno.ENOENT)}"
    if error.problem == "not_text":
        if "reason" in d:
            return (f"--vocab_file: {vocab_file} is not UTF-8 ({d['reason']} at byte "
                    f"{d['byte']})")
        return f"--vocab_file: {error}"
    if error.problem == "empty":
        return f"--vocab_file: {vocab_file} is empty"
    if error.problem == "blank":
        return f"--vocab_file: {vocab_file} line {d['line']} is blank"
    if error.problem == "repeated":
        return (f"--vocab_file: {vocab_file} has {d['token']!r} twice (lines {d['first']} "
                f"and {d['second']})")
    return f"--vocab_file: {vocab_file} lacks {', '.join(d['tokens'])}"


# ------------------------------------------------------------------------------ blocks

# segments: ((path, start, length), ...) of the input files; path None stands for the
# document break between two files (SEPARATOR).
Block = collections.namedtuple(
    "Block", "index offset length segments documents_split lines_cut")
SEPARATOR = b"\n\n"


def iter_blocks(paths, block_bytes, input_format="lines", read_size=1 << 18):
    """Yields Blocks: where each block lies in the input (index, offset in the stream,
    length, file segments) and how it ends (documents_split, lines_cut: 0 or 1).

    The stream is the files in order with SEPARATOR after each (a file ends its last
    document, and its last JSON line). The main process only finds the cuts; a worker
    reads the block's bytes itself (read_block), so block data never goes through a pipe.
    A block is at most CAP_FACTOR * block_bytes; memory: that plus read_size bytes.
    """
    cap = CAP_FACTOR * block_bytes
    buf = bytearray()
    pieces = collections.deque()   # [path, file offset, length] of the bytes in buf
    offset = 0
    index = 0

    def cut(final):
        """(end, documents_split, lines_cut) of the next block in buf; None: read more."""
        if input_format == "jsonl":
            at = buf.find(b"\n", block_bytes - 1, cap)
            if at >= 0:
                return at + 1, 0, 0
        else:
            m = _BLANK_LINE.search(buf, max(block_bytes - 1, 0), cap)
            if m:
                return m.end(), 0, 0
        if final:
            return len(buf), 0, 0
        if len(buf) < cap:
            return None
        if input_format != "jsonl":
            at = buf.rfind(b"\n\n", 0, cap)     # a document boundary before block_bytes
            if at >= 0:
                return at + 2, 0, 0
        at = buf.rfind(b"\n", 0, cap)
        if at >= 0:
            return at + 1, 1, 0
        # Not inside a UTF-8 character: back up to a character's first byte. At the end
        # of buf the next byte is unknown, so the last character is checked whole.
        at = cap
        if at < len(buf):
            while at > 0 and 0x80 <= buf[at] < 0xC0:
                at -= 1
        else:
            start = at - 1
            while start > 0 and 0x80 <= buf[start] < 0xC0:
                start -= 1
            lead = buf[start]
            length = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
            if start + length > at:
                at = start
        return at, 0, 1

    def take(n):
        """The file segments of the first n bytes of buf (consumed from `pieces`)."""
        segments = []
        while n:
            piece = pieces[0]
            k = min(n, piece[2])
            segments.append((piece[0], piece[1], k))
            piece[1] += k
            piece[2] -= k
            n -= k
            if piece[2] == 0:
                pieces.popleft()
        return tuple(segments)

    def stream():
        for path in paths:
            with storage.open_read(path) as f:
                at = 0
                while True:
                    data = f.read(read_size)
                    if not data:
                        break
                    yield path, at, data
                    at += len(data)
            yield None, 0, SEPARATOR

    chunks = stream()
    final = False
    while True:
        while not final and len(buf) < cap:
            item = next(chunks, None)
            if item is None:
                final = True
            else:
                path, at, data = item
                buf += data
                pieces.append([path, at, len(data)])
        while buf:
            decision = cut(final)
            if decision is None:
                break
            end, split, line_cut = decision
            yield Block(index, offset, end, take(end), split, line_cut)
            index += 1
            offset += end
            del buf[:end]
            if not final and len(buf) < cap:
                break
        if final and not buf:
            return


def read_block(segments):
    """The bytes of a block, from its file segments."""
    parts = []
    for path, start, length in segments:
        if path is None:
            parts.append(SEPARATOR[:length])
            continue
        with storage.open_read(path) as f:
            f.seek(start)
            data = f.read(length)
        if len(data) != length:
            raise OSError(f"{path} changed while being read (expected {length} bytes at "
                          f"{start}, got {len(data)})")
        parts.append(data)
    return b"".join(parts)


def stream_size(paths, sizes):
    """Bytes of the stream iter_blocks reads (files plus separators)."""
    return sum(sizes) + len(SEPARATOR) * len(paths)


# ------------------------------------------------------------------------------ documents

def split_sentences(text):
    """Text -> sentences, cut after . ! ? or a CJK full stop (see _SENTENCE_END)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def parse_documents(text, input_format="lines", jsonl_field="text"):
    """Text of a block -> (sentences: list of str, sentences per document: list of int,
    counts: dict). Documents with no sentence are not returned."""
    sentences, sizes = [], []
    counts = collections.Counter()
    lines = text.split("\n")    # google reads with readline(): '\n' only ends a line
    if input_format == "jsonl":
        for line in lines:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                counts["malformed_json_lines"] += 1
                continue
            value = obj.get(jsonl_field) if isinstance(obj, dict) else None
            if not isinstance(value, str):
                counts["json_lines_without_field"] += 1
                continue
            doc = [s for para in value.split("\n") for s in split_sentences(para)]
            if doc:
                sentences.extend(doc)
                sizes.append(len(doc))
        return sentences, sizes, counts
    current = []
    for line in lines + [""]:
        line = line.strip()
        if line:
            current.append(line)
        elif current:
            doc = split_sentences(" ".join(current)) if input_format == "paragraphs" \
                else current
            sentences.extend(doc)
            sizes.append(len(doc))
            current = []
    return sentences, sizes, counts


def decode(data):
    """UTF-8 bytes -> (text, bytes dropped). Undecodable bytes are dropped, as google's
    tokenizer does with bytes input."""
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", "ignore")
        return text, len(data) - len(text.encode("utf-8"))
