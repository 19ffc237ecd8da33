"""Learning a WordPiece vocabulary from text, normalised exactly as the tokenizer does.

Words are counted with `bert_tf.text.tokenization.BasicTokenizer` (google's cleaning, casing and
punctuation rules, the same as `BertTokenizer`), then pieces are learned by byte-pair-style
merging with the '##' continuation prefix, as HF's WordPiece trainer does: every word
starts as its characters ('w', '##o', '##r', '##d'), the most frequent adjacent pair (ties
broken alphabetically, so the result is deterministic) is merged into a new token, and so
on until the vocabulary is full or no pair occurs twice. tf-text's
`bert_vocab_from_dataset` learner was the first choice but needs ~60 s and ends far short of
8000 tokens on the 2.3 MB stdlib corpus; this one takes a few seconds.

A vocabulary starts with [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4, [PAD] at 0 as in
bert-base's vocab), then every character of the corpus both as a word start and as a
'##' continuation (so no word of the corpus becomes [UNK]), then the merged tokens in the
order they were learned.

    vocab = build_vocab(["corpus.txt"], 8000, do_lower_case=True, output_file="vocab.txt")

`python -m bert_tf.build_vocab` is this module behind flags.
"""

import collections
import heapq
import os

from bert_tf.base import file_patterns
from bert_tf.base.files import atomic_write, text_line
from bert_tf.base.progress import progress_bar
from bert_tf.text.text_rules import CONTINUATION_PREFIX, MAX_CHARS_PER_WORD, SPECIAL_TOKENS


def read_lines(files):
    """Yields the lines (UTF-8 bytes, line end and a first line's BOM stripped) of each
    file in turn; ValueError naming the file, line and byte at the first byte that is not
    UTF-8 or is NUL (a vocabulary learned from latin-1 or UTF-16 would be wrong)."""
    import tensorflow as tf
    for path in files:
        with tf.io.gfile.GFile(path, "rb") as f:
            for number, line in enumerate(f, 1):
                if number == 1 or b"\0" in line or not (line.isascii() or _utf8(line)):
                    line = text_line(line, path, number).encode("utf-8")
                yield line.rstrip(b"\r\n")


def _utf8(data):
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def file_system(path):
    """The calls that reach `path` (bert_tf/base/file_patterns.py): Python's for a local
    path, tf.io.gfile's for one with a scheme (gs://...), TensorFlow imported only then,
    so that the command checks local inputs before it imports TensorFlow."""
    if "://" not in path:
        return file_patterns.LOCAL
    import tensorflow as tf
    return file_patterns.FileSystem(tf.io.gfile.glob, tf.io.gfile.exists, tf.io.gfile.isdir,
                                    lambda p: tf.io.gfile.stat(p).length)


def expand_files(input_file):
    """Comma-separated file names or globs -> sorted existing files; ValueError otherwise.
    A path that exists as written is taken literally; globs skip side files
    (bert_tf/base/file_patterns.py)."""
    files = []
    for pattern in file_patterns.split_patterns(input_file):
        fs = file_system(pattern)
        matches = file_patterns.match(pattern, fs.glob, fs.exists)
        if not matches:
            raise FileNotFoundError(f"{pattern}: no such file (no file matches it)")
        for path in matches:
            if fs.isdir(path):
                raise IsADirectoryError(21, "Is a directory (expected text files)", path)
        files.extend(matches)
    if not files:
        raise ValueError("no input file given")
    return files


def count_words(files, do_lower_case=True, batch_lines=8192, progress=True):
    """Counter {word: count} of the words `BertTokenizer` would see in these files."""
    import tensorflow as tf

    from bert_tf.text.tokenization import BasicTokenizer

    splitter = BasicTokenizer(do_lower_case)
    counts = collections.Counter()
    total = sum(file_system(f).size(f) for f in files)
    bar = progress_bar(total, "counting words", unit="B", unit_scale=True,
                       disable=not progress)
    batch = []

    def flush():
        words = splitter.words(tf.constant(batch, tf.string))   # [lines, (words)]
        counts.update(words.flat_values.numpy().tolist())
        bar.update(sum(len(line) + 1 for line in batch))
        batch.clear()

    for line in read_lines(files):
        batch.append(line)
        if len(batch) == batch_lines:
            flush()
    if batch:
        flush()
    bar.close()
    return collections.Counter({w.decode("utf-8"): c for w, c in counts.items()})


def choose_alphabet(word_counts, vocab_size, reserved=len(SPECIAL_TOKENS),
                    max_unique_chars=None, character_coverage=1.0):
    """The characters a vocabulary keeps (each with and without '##'): the most frequent
    ones (ties alphabetical) that cover `character_coverage` of the corpus's character
    occurrences (1.0: every character; SentencePiece's 0.9995 drops the rarest), at most
    `max_unique_chars`. When they do not all fit in `vocab_size`, the most frequent that
    fill half of it (the other half for learned pieces): a Chinese corpus of a few MB
    has ~5,000 characters, which fit in bert-base's 30,522 but not in 8,000, where the
    rarest give way (the caller says so). Returns (alphabet, share of the occurrences it
    covers, how many characters the corpus has)."""
    char_counts = collections.Counter()
    for word, count in word_counts.items():
        for ch in word:
            char_counts[ch] += count
    ranked = sorted(char_counts.items(), key=lambda kv: (-kv[1], kv[0]))
    total = sum(char_counts.values()) or 1
    keep, covered = 0, 0
    for _, count in ranked:
        if covered >= character_coverage * total:
            break
        keep, covered = keep + 1, covered + count
    keep = min(keep, max_unique_chars or keep)
    if reserved + 2 * keep > vocab_size:
        keep = (vocab_size // 2 - reserved) // 2
        if keep < 1:
            raise ValueError(f"vocab_size {vocab_size} is too small for the {reserved} "
                             f"reserved tokens and a character (x2 with '##'); raise "
                             f"--vocab_size")
    alphabet = {ch for ch, _ in ranked[:keep]}
    return alphabet, sum(c for _, c in ranked[:keep]) / total, len(ranked)


def unknown_share(word_counts, vocab, max_chars_per_word=MAX_CHARS_PER_WORD):
    """(share of the corpus's word occurrences the vocabulary makes [UNK], distinct such
    words): a word with a character it lacks, or longer than the tokenizer's limit (it
    holds every kept character with and without '##', so any other word splits)."""
    chars = {t for t in vocab if len(t) == 1}
    unknown = {w: c for w, c in word_counts.items()
               if len(w) > max_chars_per_word or any(ch not in chars for ch in w)}
    return sum(unknown.values()) / max(1, sum(word_counts.values())), len(unknown)


def learn_wordpiece(word_counts, vocab_size, reserved_tokens=SPECIAL_TOKENS,
                    max_unique_chars=None, min_frequency=2, max_chars_per_word=MAX_CHARS_PER_WORD,
                    progress=True, character_coverage=1.0):
    """{word: count} -> vocabulary (list of tokens), at most vocab_size long.

    The alphabet is `choose_alphabet`'s (by default every character of the corpus that
    fits in half the vocabulary); words with other characters, or longer than
    max_chars_per_word (the tokenizer makes them [UNK] anyway), are not learned from.
    Merging stops at vocab_size tokens or when the most frequent pair occurs fewer than
    min_frequency times.
    """
    alphabet, _, _ = choose_alphabet(word_counts, vocab_size, len(reserved_tokens),
                                     max_unique_chars, character_coverage)

    vocab = list(reserved_tokens)
    vocab += sorted(alphabet) + sorted(CONTINUATION_PREFIX + ch for ch in alphabet)
    known = set(vocab)

    # words[i]: current pieces of the i-th distinct word; counts[i]: its frequency.
    words, counts = [], []
    for word, count in sorted(word_counts.items()):
        if len(word) <= max_chars_per_word and all(ch in alphabet for ch in word):
            words.append([word[0]] + [CONTINUATION_PREFIX + ch for ch in word[1:]])
            counts.append(count)

    pair_counts = collections.defaultdict(int)      # (left, right) -> weighted count
    pair_words = collections.defaultdict(set)       # (left, right) -> word indices
    for i, pieces in enumerate(words):
        for pair in zip(pieces, pieces[1:]):
            pair_counts[pair] += counts[i]
            pair_words[pair].add(i)
    # Max-heap by count, then alphabetical; entries go stale when counts change and are
    # skipped when popped.
    heap = [(-c, pair) for pair, c in pair_counts.items()]
    heapq.heapify(heap)

    bar = progress_bar(vocab_size, "learning pieces", unit="token", initial=len(vocab),
                       disable=not progress)
    while len(vocab) < vocab_size and heap:
        neg_count, pair = heapq.heappop(heap)
        if pair_counts.get(pair) != -neg_count:
            continue
        if -neg_count < min_frequency:
            break
        left, right = pair
        merged = left + right[len(CONTINUATION_PREFIX):]
        touched = set()
        for i in pair_words.pop(pair):
            old = words[i]
            for p in zip(old, old[1:]):
                pair_counts[p] -= counts[i]
                pair_words[p].discard(i)
                touched.add(p)
            new, k = [], 0
            while k < len(old):
                if k + 1 < len(old) and old[k] == left and old[k + 1] == right:
                    new.append(merged)
                    k += 2
                else:
                    new.append(old[k])
                    k += 1
            words[i] = new
            for p in zip(new, new[1:]):
                pair_counts[p] += counts[i]
                pair_words[p].add(i)
                touched.add(p)
        # Re-queue every pair whose count changed; the old heap entries go stale.
        for p in touched:
            if pair_counts[p] > 0:
                heapq.heappush(heap, (-pair_counts[p], p))
            else:
                del pair_counts[p]
                pair_words.pop(p, None)
        if merged not in known:
            known.add(merged)
            vocab.append(merged)
            bar.update(1)
    bar.close()
    return vocab


def build_vocab(files, vocab_size, do_lower_case=True, output_file=None,
                max_unique_chars=None, min_frequency=2, progress=True,
                character_coverage=1.0, log=None):
    """Text files -> vocabulary list; written to output_file (one token per line) if given.

    files: a list of paths, or a string of comma-separated paths/globs. Raises ValueError
    (one line) for a missing or empty input. `log`: a function given a line on what the
    vocabulary leaves out (characters, the corpus's [UNK] share).
    """
    if isinstance(files, str):
        files = expand_files(files)
    for path in files:
        if not file_system(path).exists(path):
            raise ValueError(f"input file not found: {path}")
    counts = count_words(files, do_lower_case, progress=progress)
    if not counts:
        raise ValueError(f"no words in the input: {', '.join(files)}")
    vocab = learn_wordpiece(counts, vocab_size, max_unique_chars=max_unique_chars,
                            min_frequency=min_frequency, progress=progress,
                            character_coverage=character_coverage)
    if output_file:
        write_vocab(vocab, output_file)
    if log is not None:     # once written: a failed write is the command's one line
        _, covered, distinct = choose_alphabet(counts, vocab_size, len(SPECIAL_TOKENS),
                                               max_unique_chars, character_coverage)
        kept = sum(1 for t in vocab if len(t) == 1)
        share, words = unknown_share(counts, vocab)
        log(f"characters: {kept:,} of the corpus's {distinct:,} ({100 * covered:.3f}% of "
            f"its character occurrences); [UNK]: {100 * share:.3f}% of its words "
            f"({words:,} distinct)")
    return vocab


def write_vocab(vocab, output_file):
    """One token per line, under a temporary name first so a reader never sees half a file."""
    import tensorflow as tf
    directory = os.path.dirname(output_file)
    if directory:
        tf.io.gfile.makedirs(directory)
    with atomic_write(output_file) as f:
        f.write("".join(token + "\n" for token in vocab))
