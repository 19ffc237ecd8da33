"""Reading CoNLL files for NER: `read_conll` -> a `ConllFile` of `Sentence`s, each sentence's
text cut into units as google's BasicTokenizer cuts raw text (bert_tf.text.words), the
file words' tags carried onto the units (`continue_tag`, `word_tag`) and read back per
file word (`Sentence.word_tags`); `label_list`, a training file's labels. task.py's
features, predictions and NerTask follow these units.

A sentence's text is its file words joined by a space, or, for a file written one
character per line (`LINE_UNITS`' "character": MSRA, Weibo and People's Daily's
per-character release write Latin letters and digits one a line too), joined with
nothing: "G", "o", "o", "g", "l", "e" read back as the one word "Google", as the NER
signature cuts the raw text "Google". The units a model trains on are the units its
export cuts, whatever the file's lines hold.
"""

import dataclasses
import re

from bert_tf.base.files import read_text

DOCSTART = "-DOCSTART-"
_TAG = re.compile(r"^(O|[BIES]-\S+)$")
# What one line of a file holds, and so how its lines join into text: "word", joined with
# a space (CoNLL-2003, word-segmented Chinese); "character", joined with nothing.
# `read_conll` finds a file's own with "auto" (`detect_line_unit`).
LINE_UNITS = ("word", "character")
JOINERS = {"word": " ", "character": ""}
# A file is written one character per line when at least this share of its lines hold one
# character: Chinese sets write Latin letters and digits one a line too. English CoNLL
# files have about a fifth, word-segmented Chinese about a third.
CHARACTER_LINES = 0.99


@dataclasses.dataclass
class Sentence:
    """words: list of str; tags: list of str or None (unlabelled file); lines: the
    original text lines (for writing predictions back); line_numbers: 1-based; line_unit:
    one of LINE_UNITS, how the words join into the sentence's text.

    Derived: text (the words joined), units (list of str: the text cut by
    bert_tf.text.words' rule, `graph_words.word_spans`, and any word the cut leaves
    nothing of whole), unit_words (for each
    unit, the indices of the words it overlaps, in order), unit_tags (None for an
    unlabelled file) and mixed_units (how many units join words of tags that do not
    continue one tag). Where a unit and a word overlap is a segment: a word of several
    units ("U.S.", a segmented "北京市") continues its tag over its segments (B-LOC ->
    B-LOC I-LOC ...), and a unit of several words (the letters of "Google" a line each)
    takes its segments' tags merged (`word_tag`); `word_tags` reads predictions back the
    other way."""
    words: list
    tags: list
    lines: list = None
    line_numbers: list = None
    line_unit: str = "word"
    text_spans: list = None     # the text's cut, when the reader made it for many at once

    def __post_init__(self):
        joiner = JOINERS[self.line_unit]
        starts, position = [], 0
        for word in self.words:
            starts.append(position)
            position += len(word) + len(joiner)
        self.text = sentence_text(self.words, self.line_unit)
        word_of = [None] * len(self.text)
        for w, (start, word) in enumerate(zip(starts, self.words)):
            word_of[start:start + len(word)] = [w] * len(word)
        spans = self.text_spans
        if spans is None:
            from bert_tf.text import graph_words
            spans = graph_words.word_spans([self.text])[0]
        touched = {word_of[i] for a, b in spans for i in range(a, b)}
        spans = sorted(spans + [(starts[w], starts[w] + len(word))
                                for w, word in enumerate(self.words) if w not in touched])
        self.units = [self.text[a:b] for a, b in spans]
        self.unit_words = [list(dict.fromkeys(word_of[a:b])) for a, b in spans]
        self.unit_tags, self.mixed_units = None, 0
        if self.tags is not None:
            segment_tags = [iter(continue_tag(tag, n))
                            for tag, n in zip(self.tags, self._segments_per_word())]
            segments = [[next(segment_tags[w]) for w in unit_words]
                        for unit_words in self.unit_words]
            self.unit_tags = [word_tag(tags) for tags in segments]
            # Units whose segments' tags are not one tag continued ("JohnSmith" from a
            # file without the space: B-PER for "John" and for "Smith"): the file's
            # words tell two entities the text cannot.
            self.mixed_units = sum(continue_tag(tag, len(tags)) != tags
                                   for tag, tags in zip(self.unit_tags, segments))

    def _segments_per_word(self):
        counts = [0] * len(self.words)
        for unit_words in self.unit_words:
            for w in unit_words:
                counts[w] += 1
        return counts

    def word_tags(self, unit_tags):
        """One tag per unit -> one tag per file word: each unit's tag continued over its
        segments, each word's segments merged (the inverse of the units' tags)."""
        per_word = [[] for _ in self.words]
        for tag, unit_words in zip(unit_tags, self.unit_words):
            for w, segment_tag in zip(unit_words, continue_tag(tag, len(unit_words))):
                per_word[w].append(segment_tag)
        return [word_tag(tags) for tags in per_word]


def sentence_text(words, line_unit):
    """A sentence's text: its words joined as `line_unit` (one of LINE_UNITS) says."""
    return JOINERS[line_unit].join(words)


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
    index, a blank line ("") or a -DOCSTART- line (its text); `line_unit`: what its lines
    hold (one of LINE_UNITS)."""
    path: str
    columns: int
    sentences: list
    layout: list
    line_unit: str = "word"


def detect_line_unit(words):
    """"character" for the words of a file written one character per line (at least
    CHARACTER_LINES of them one character long), else "word"."""
    single = sum(len(word) == 1 for word in words)
    return "character" if words and single >= CHARACTER_LINES * len(words) else "word"


def read_conll(path, line_unit="auto"):
    """Reads a CoNLL file: whitespace-separated columns, the word first and the tag last
    (CoNLL-2003's 4 columns, word + tag, or any other count; one column = words only).
    line_unit: what a line holds, one of LINE_UNITS, or "auto": the file's own
    (`detect_line_unit`).

    One clear ValueError naming the file and line for: a line whose number of columns
    differs from the file's first, a tag that is not O or PREFIX-TYPE (PREFIX one of B,
    I, E, S), a file that is not UTF-8 or has no sentence.
    """
    if line_unit != "auto" and line_unit not in LINE_UNITS:
        raise ValueError(f"line unit: expected auto or one of {', '.join(LINE_UNITS)}, "
                         f"got {line_unit!r}")
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
            sentences.append(current)                 # Sentence's fields, cut below
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
    if line_unit == "auto":
        line_unit = detect_line_unit([word for fields in sentences for word in fields[0]])
    # Every sentence's text cut at once (bert_tf/text/graph_words.py, the signature's cut).
    from bert_tf.text import graph_words
    cuts = graph_words.word_spans([sentence_text(fields[0], line_unit)
                                   for fields in sentences])
    return ConllFile(path, columns,
                     [Sentence(*fields, line_unit=line_unit, text_spans=spans)
                      for fields, spans in zip(sentences, cuts)], layout, line_unit)


def label_list(conll):
    """Labels of a training file's units: "O" first, then the others sorted."""
    labels = {t for s in conll.sentences for t in s.unit_tags}
    return ["O"] + sorted(labels - {"O"})
