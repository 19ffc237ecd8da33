"""Sentence-pair instances for masked-LM + next-sentence pretraining (google's algorithm).

An instance is described by two token ranges of one block's flat token array, so nothing is
copied until the records are written:

    [CLS] tokens[a_start : a_start + a_len] [SEP] tokens[b_start : b_start + b_len] [SEP]

The rules are google-research/bert's `create_instances_from_document`, as REFERENCE.md
states them. Per document and pass (`dupe_factor` passes):

* target length: max_num_tokens = max_seq_length - 3; with probability short_seq_prob a
  random int in [2, max_num_tokens] instead, kept for the whole document in this pass.
* chunks of whole sentences are collected until they reach the target (or the document
  ends); A is the first 1..n-1 of them (1 when n == 1).
* with probability 0.5, and always when the chunk is one sentence, B is random: sentences
  from a random start in a random *different* document (up to 10 draws, as google does),
  until B reaches target - len(A); the chunk's sentences after A are put back. Otherwise
  B is the rest of the chunk.
* the pair is cut to max_num_tokens: one token at a time from the longer segment (B on a
  tie), from its front or back with probability 1/2 each.

Two things differ from google's code, neither in distribution:
* Random-B documents come from the same block (a bounded window of the corpus), not from
  the whole corpus; see docs/pretraining_data.md.
* Truncation is computed in closed form. Which segment loses each token depends only on
  the lengths, so the counts taken from A and B are fixed numbers; each removal is a fair
  coin between front and back, so the number taken from the front is Binomial(count, 1/2).
  Drawing that binomial gives the same distribution as google's token-by-token loop.
"""

from bisect import bisect_left, bisect_right

import numpy as np


def create_instances(sentence_starts, doc_bounds, dupe_factor, max_seq_length,
                     short_seq_prob, rng, next_sentence="nsp"):
    """All instances of one block, before truncation.

    Args:
      sentence_starts: list of int, [sentences + 1]: sentence i is
        tokens[sentence_starts[i] : sentence_starts[i + 1]]; no sentence is empty.
      doc_bounds: list of (first sentence, end sentence) per document, each non-empty,
        documents laid end to end in order.
      dupe_factor: passes over the documents.
      max_seq_length: the example length; max_num_tokens = max_seq_length - 3.
      short_seq_prob: probability that a document pass uses a short random target.
      rng: random.Random (scalar draws in a Python loop: ~20x cheaper than numpy's).
      next_sentence: "nsp" (google's: B is random with probability 1/2) or "sop" (ALBERT's
        sentence-order prediction: B is the actual next text, and with probability 1/2
        the two segments are swapped; a one-sentence chunk still gets a random B, as
        ALBERT's script does). The label (random_next) is 1 for a random or swapped B.
        "none": no sentence pairs (`full_sentences`).

    Returns a dict of numpy arrays, one entry per instance: a_start, a_len, b_start, b_len
    (int64), random_next, short_target, same_document (bool: B was drawn at random but
    from A's own document, because the block has one document); and short_target_passes
    (int: document passes that drew a short target).
    """
    if next_sentence == "none":
        return full_sentences(sentence_starts, doc_bounds, dupe_factor, max_seq_length,
                              short_seq_prob, rng)
    max_num_tokens = max_seq_length - 3
    starts = sentence_starts
    n_docs = len(doc_bounds)
    rnd = rng.random
    a_start, a_end, b_start, b_end, random_next, short, same_doc = [], [], [], [], [], [], []
    swapped = []
    short_passes = 0
    nsp = next_sentence == "nsp"
    for _ in range(dupe_factor):
        for d, (s0, s1) in enumerate(doc_bounds):
            target = max_num_tokens
            is_short = False
            if rnd() < short_seq_prob:
                # google: rng.randint(2, max_num_tokens)
                target = 2 + int(rnd() * (max_num_tokens - 1))
                is_short = True
                short_passes += 1
            cs = s0   # first sentence of the current chunk
            while cs < s1:
                # The chunk ends at the first sentence that brings it to the target, or
                # at the end of the document: e = one past its last sentence.
                e = bisect_left(starts, starts[cs] + target, cs + 1, s1)
                n = e - cs
                a_stop = cs + 1 if n == 1 else cs + 1 + int(rnd() * (n - 1))
                a_lo, a_hi = starts[cs], starts[a_stop]
                swap = False
                if n == 1 or (nsp and rnd() < 0.5):
                    target_b = target - (a_hi - a_lo)
                    rd = d
                    if n_docs > 1:
                        for _ in range(10):
                            rd = int(rnd() * n_docs)
                            if rd != d:
                                break
                    r0, r1 = doc_bounds[rd]
                    rs = r0 + int(rnd() * (r1 - r0))
                    b_lo = starts[rs]
                    # Sentences from rs on until B reaches target_b (at least one).
                    b_hi = starts[bisect_left(starts, b_lo + target_b, rs + 1, r1)]
                    random_next.append(True)
                    same_doc.append(rd == d)
                    cs = a_stop   # the sentences after A go back to the document
                else:
                    b_lo, b_hi = a_hi, starts[e]
                    swap = not nsp and rnd() < 0.5
                    if swap:    # sentence order: B first, then A
                        a_lo, a_hi, b_lo, b_hi = b_lo, b_hi, a_lo, a_hi
                    random_next.append(swap)
                    same_doc.append(False)
                    cs = e
                swapped.append(swap)
                a_start.append(a_lo)
                a_end.append(a_hi)
                b_start.append(b_lo)
                b_end.append(b_hi)
                short.append(is_short)
    a_start = np.array(a_start, np.int64)
    b_start = np.array(b_start, np.int64)
    return {
        "a_start": a_start, "a_len": np.array(a_end, np.int64) - a_start,
        "b_start": b_start, "b_len": np.array(b_end, np.int64) - b_start,
        "random_next": np.array(random_next, bool), "short_target": np.array(short, bool),
        "same_document": np.array(same_doc, bool), "swapped": np.array(swapped, bool),
        "short_target_passes": short_passes,
    }


def full_sentences(sentence_starts, doc_bounds, dupe_factor, max_seq_length,
                   short_seq_prob, rng):
    """RoBERTa's FULL-SENTENCES inputs, for pretraining without a sentence-pair task:
    whole sentences in order up to the target length, read on across documents' ends,
    with a [SEP] wherever one document ends and the next begins:

        [CLS] sentences [SEP]
        [CLS] end of a document [SEP] a short document [SEP] start of the next [SEP]

    A sentence that does not fit in what is left of the target starts the next example;
    a sentence longer than a whole target is split, its first `target` tokens one example,
    the rest the start of the next. So the chunks of a pass tile the block's text in
    order and every token is in exactly one example per pass: nothing is cut off
    (`truncate_full_sentences` finds nothing to cut).

    An instance is one token range of the block (`a_start`, `a_len`; B empty), which
    `document_starts` and masking.pack_full_sentences turn into that layout. The target
    is max_seq_length - 2 tokens, each document end inside costing one more ([SEP]); with
    probability short_seq_prob, drawn per chunk, a random length in [2, target] (google's
    short sequences; 0 turns them off, as RoBERTa has none). Labels are 0 (nothing is
    random). Same return value as create_instances (`short_target_passes` counts chunks
    here).
    """
    max_num_tokens = max_seq_length - 2
    starts = sentence_starts
    rnd = rng.random
    # Token offsets where each document ends, and the sentence boundaries of the block
    # (every sentence start, and the end of the last sentence).
    doc_end = [starts[end] for _, end in doc_bounds]
    last = len(doc_end) - 1
    a_start, a_end, short = [], [], []
    short_passes = 0
    for _ in range(dupe_factor):
        d, p = 0, 0          # the document and the token the next chunk starts at
        while d <= last:
            target = max_num_tokens
            is_short = rnd() < short_seq_prob
            if is_short:
                target = 2 + int(rnd() * (max_num_tokens - 1))
                short_passes += 1
            first, room = p, target
            while True:
                # The furthest sentence boundary of document d within `room` tokens of p.
                reach = min(p + room, doc_end[d])
                b = starts[bisect_right(starts, reach) - 1]
                if b <= p:
                    if p == first:
                        p = reach          # one sentence longer than the target: split
                    break                  # else it starts the next chunk
                room -= b - p
                p = b
                if p < doc_end[d] or d == last or room < 2:
                    break                  # a [SEP] and a token of the next: room >= 2
                room -= 1                  # the [SEP] between the documents
                d += 1
            a_start.append(first)
            a_end.append(p)
            short.append(is_short)
            if p >= doc_end[d]:
                d += 1
    a_start = np.array(a_start, np.int64)
    none = np.zeros(len(a_start), bool)
    return {
        "a_start": a_start, "a_len": np.array(a_end, np.int64) - a_start,
        "b_start": np.array(a_end, np.int64), "b_len": np.zeros(len(a_start), np.int64),
        "random_next": none, "short_target": np.array(short, bool),
        "same_document": none.copy(), "swapped": none.copy(),
        "short_target_passes": short_passes,
    }


def document_starts(sentence_starts, doc_bounds):
    """Token offsets where the block's documents begin, the first left out: where a
    full-sentences instance puts a [SEP] (int64, ascending)."""
    return np.array([sentence_starts[first] for first, _ in doc_bounds[1:]], np.int64)


def separators(start, length, doc_starts):
    """Document starts strictly inside each range [start, start + length): the [SEP]s a
    full-sentences instance adds (int64 [N])."""
    return (np.searchsorted(doc_starts, start + length, "left")
            - np.searchsorted(doc_starts, start, "right"))


def truncate_full_sentences(instances, max_seq_length, rng, doc_starts):
    """Cuts each full-sentences instance to max_seq_length - 2 tokens with its [SEP]s,
    from the front or the back of its range (one fair coin per token removed, as google
    cuts a segment); returns the number of instances cut."""
    start, length = instances["a_start"], instances["a_len"]
    cut = np.maximum(length + separators(start, length, doc_starts) - (max_seq_length - 2),
                     0)
    front = rng.binomial(cut, 0.5)
    instances["a_start"] += front
    instances["a_len"] -= cut
    instances["b_start"] = instances["a_start"] + instances["a_len"]
    return int(np.count_nonzero(cut))


def truncation_counts(a_len, b_len, max_num_tokens):
    """Tokens google's truncation removes from A and from B (int64 arrays).

    While the pair is too long, one token goes from the longer segment, from B on a tie.
    So first the longer one loses the difference (or the whole excess, if smaller); then
    they are equal and lose tokens alternately, B first: B gets the odd one.
    """
    excess = np.maximum(a_len + b_len - max_num_tokens, 0)
    first = np.minimum(excess, np.abs(a_len - b_len))
    rest = excess - first
    a_longer = a_len > b_len
    cut_a = np.where(a_longer, first, 0) + rest // 2
    cut_b = np.where(a_longer, 0, first) + (rest + 1) // 2
    return cut_a, cut_b


def truncate(instances, max_seq_length, rng):
    """Applies google's random front/back truncation in place; returns the number of
    instances that were cut. rng: numpy Generator."""
    cut_a, cut_b = truncation_counts(instances["a_len"], instances["b_len"],
                                     max_seq_length - 3)
    front_a = rng.binomial(cut_a, 0.5)
    front_b = rng.binomial(cut_b, 0.5)
    instances["a_start"] += front_a
    instances["a_len"] -= cut_a
    instances["b_start"] += front_b
    instances["b_len"] -= cut_b
    return int(np.count_nonzero(cut_a + cut_b))
