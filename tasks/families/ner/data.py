"""Reading CoNLL files for NER: `read_conll` -> a `ConllFile` of `Sentence`s, each file word
cut into units as google's BasicTokenizer cuts text (bert_tf.text.words), its tag continued
over them (`continue_tag`) and read back per word (`word_tag`); `label_list`, a training
file's labels. task.py's features, predictions and NerTask follow these units.
"""

import dataclasses
import re

from bert_tf.text import words as text_words
from bert_tf.base.files import read_text

DOCSTART = "-DOCSTART-"
_TAG = re.compile(r"^(O|[BIES]-\S+)$")


@dataclasses.dataclass
class Sentence:
    """words: list of str; tags: list of str or None (unlabelled file); lines: the
    original text lines (for writing predictions back); line_numbers: 1-based.

    Derived: units (list of str, every word cut by bert_tf.text.words), unit_word (the word
    index of each unit) and unit_tags (each word's tag continued over its units; None for
    an unlabelled file)."""
    words: list
    tags: list
    lines: list = None
    line_numbers: list = None

    def __post_init__(self):
        self.units, self.unit_word = [], []
        self.unit_tags = [] if self.tags is not None else None
        for w, word in enumerate(self.words):
            cut = text_words.words(word) or [word]
            self.units.extend(cut)
            self.unit_word.extend([w] * len(cut))
            if self.tags is not None:
                self.unit_tags.extend(continue_tag(self.tags[w], len(cut)))


def continue_tag(tag, n):
    """A word's tag -> the tags of its n units: B-X -> B-X I-X ..., I-X -> I-X ...,
    E-X -> I-X ... E-X, S-X -> B-X I-X ... E-X, O -> O ...; a one-unit word keeps its tag."""
    if n == 1 or tag == "O":
        return [tag] * n
    prefix, kind = tag[0], tag[2:]
    first = "B-" + kind if prefix in "BS" else "I-" + kind
    last = "E-" + kind if prefix in "ES" else "I-" + kind
    return [first] + ["I-" + kind] * (n - 2) + [last]


def word_tag(unit_tags):
    """The tags of one word's units -> the word's tag (the inverse of `continue_tag`):
    the first unit's tag, made S-X / E-X when the units end in E-X."""
    first, last = unit_tags[0], unit_tags[-1]
    if len(unit_tags) > 1 and first != "O" and last == "E-" + first[2:]:
        return ("S-" if first[0] in "BS" else "E-") + first[2:]
    return first


@dataclasses.dataclass
class ConllFile:
    """sentences plus `layout`: the original file as a list of items, each a Sentence
    index, a blank line ("") or a -DOCSTART- line (its text)."""
    path: str
    columns: int
    sentences: list
    layout: list


def read_conll(path):
    """Reads a CoNLL file: whitespace-separated columns, the word first and the tag last
    (CoNLL-2003's 4 columns, word + tag, or any other count; one column = words only).

    One clear ValueError naming the file and line for: a line whose number of columns
    differs from the file's first, a tag that is not O or PREFIX-TYPE (PREFIX one of B,
    I, E, S), a file that is not UTF-8 or has no sentence.
    """
    lines = read_text(path).replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    columns = None
    sentences, layout = [], []
    current = None

    def close():
        nonlocal current
        if current is not None:
            layout.append(len(sentences))
            sentences.append(Sentence(*current))      # (cuts the words into units)
            current = None

    for number, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        fields = line.split()
        if not fields:
            close()
            layout.append("")
            continue
        if fields[0] == DOCSTART:
            close()
            layout.append(line)
            continue
        if columns is None:
            columns = len(fields)
        elif len(fields) != columns:
            raise ValueError(f"{path}:{number}: {len(fields)} columns, but the file's "
                             f"first line has {columns}: {line!r}")
        tag = None
        if columns > 1:
            tag = fields[-1]
            if not _TAG.match(tag):
                raise ValueError(f"{path}:{number}: malformed tag {tag!r} (expected O or "
                                 f"B-/I-/E-/S- followed by a type)")
        if current is None:
            current = ([], [] if columns > 1 else None, [], [])   # Sentence's fields
        words, tags, sentence_lines, line_numbers = current
        words.append(fields[0])
        if tag is not None:
            tags.append(tag)
        sentence_lines.append(line)
        line_numbers.append(number)
    close()
    if not sentences:
        raise ValueError(f"{path}: no sentences")
    return ConllFile(path, columns, sentences, layout)


def label_list(conll):
    """Labels of a training file's units: "O" first, then the others sorted."""
    labels = {t for s in conll.sentences for t in s.unit_tags}
    return ["O"] + sorted(labels - {"O"})
