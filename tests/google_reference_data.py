"""A slow, independent pure-Python model of google-research/bert's create_pretraining_data.

Written from REFERENCE.md ("Pretraining data") and a reading of the original script (no
code taken from it), and used only by tests/commands/test_create_pretraining_data.py as the oracle
for statistics that depend on the corpus: the share of random next sentences, of short
targets, the number of examples, their lengths. It works on documents that are already
token ids, so the comparison isolates the algorithm from tokenization.

What the original does, step by step (and what this module does the same way):
1. Documents without sentences are dropped; the document list is shuffled once.
2. For each of dupe_factor passes, for each document: the target length is
   max_seq_length - 3, or with probability short_seq_prob a uniform int in
   [2, max_seq_length - 3], drawn once for the document in this pass.
3. Sentences are added to a chunk until its token count reaches the target or the
   document ends. A takes the first a_end sentences, a_end uniform in [1, n - 1] (1 if
   the chunk is one sentence).
4. With probability 1/2, and always for a one-sentence chunk, B is "random": up to 10
   draws of a document index until it differs from the current one; from a uniform start
   sentence of that document, sentences are added until B reaches target - len(A). The
   chunk's sentences after A are handed back (the next chunk starts right after A).
   Otherwise B is the rest of the chunk.
5. While len(A) + len(B) > max_seq_length - 3: take the longer (B on a tie), drop its
   first token with probability 1/2, else its last.
6. [CLS] A [SEP] B [SEP]; segment 0 up to the first [SEP], 1 after.
7. Masking: every position but [CLS]/[SEP] is a candidate (with whole-word masking a
   '##' piece joins the candidate before it); candidates are shuffled;
   num_to_predict = min(max_predictions_per_seq, max(1, round(len(tokens) * prob)));
   candidates are taken in order, skipping any that would overshoot; for each taken
   position (per piece, even with whole-word masking): 80% [MASK], else 50/50 unchanged
   or a uniform id of the whole vocabulary. Positions are sorted.
8. All instances are shuffled.
"""

import random


class Instance:
    __slots__ = ("tokens", "segment_ids", "is_random_next", "short_target",
                 "masked_positions", "masked_labels")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


def _truncate(a, b, max_num_tokens, rng):
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def truncation_removed(len_a, len_b, max_num_tokens):
    """How many tokens step 5 removes from A and from B (counted by running it)."""
    a, b = list(range(len_a)), list(range(len_b))
    _truncate(a, b, max_num_tokens, random.Random(0))
    return len_a - len(a), len_b - len(b)


def _mask(tokens, vocab_size, cls_id, sep_id, mask_id, masked_lm_prob,
          max_predictions_per_seq, is_subword, do_whole_word_mask, rng):
    candidates = []
    for i, t in enumerate(tokens):
        if t == cls_id or t == sep_id:
            continue
        if do_whole_word_mask and candidates and is_subword(t):
            candidates[-1].append(i)
        else:
            candidates.append([i])
    rng.shuffle(candidates)
    k = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    output = list(tokens)
    chosen = []
    covered = set()
    for group in candidates:
        if len(chosen) >= k:
            break
        if len(chosen) + len(group) > k or any(i in covered for i in group):
            continue
        for i in group:
            covered.add(i)
            if rng.random() < 0.8:
                output[i] = mask_id
            elif rng.random() < 0.5:
                pass
            else:
                output[i] = rng.randint(0, vocab_size - 1)
            chosen.append(i)
    chosen.sort()
    return output, chosen, [tokens[i] for i in chosen]


def _document_instances(docs, d, max_seq_length, short_seq_prob, masked_lm_prob,
                        max_predictions_per_seq, vocab_size, ids, is_subword,
                        do_whole_word_mask, rng):
    doc = docs[d]
    max_num_tokens = max_seq_length - 3
    target = max_num_tokens
    short = False
    if rng.random() < short_seq_prob:
        target = rng.randint(2, max_num_tokens)
        short = True
    out = []
    chunk, length, i = [], 0, 0
    while i < len(doc):
        chunk.append(doc[i])
        length += len(doc[i])
        if i == len(doc) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            a = [t for s in chunk[:a_end] for t in s]
            b = []
            if len(chunk) == 1 or rng.random() < 0.5:
                is_random = True
                for _ in range(10):
                    r = rng.randint(0, len(docs) - 1)
                    if r != d:
                        break
                other = docs[r]
                for j in range(rng.randint(0, len(other) - 1), len(other)):
                    b.extend(other[j])
                    if len(b) >= target - len(a):
                        break
                i -= len(chunk) - a_end
            else:
                is_random = False
                b = [t for s in chunk[a_end:] for t in s]
            _truncate(a, b, max_num_tokens, rng)
            tokens = [ids["cls"]] + a + [ids["sep"]] + b + [ids["sep"]]
            segment_ids = [0] * (len(a) + 2) + [1] * (len(b) + 1)
            tokens, positions, labels = _mask(
                tokens, vocab_size, ids["cls"], ids["sep"], ids["mask"], masked_lm_prob,
                max_predictions_per_seq, is_subword, do_whole_word_mask, rng)
            out.append(Instance(tokens=tokens, segment_ids=segment_ids,
                                is_random_next=is_random, short_target=short,
                                masked_positions=positions, masked_labels=labels))
            chunk, length = [], 0
        i += 1
    return out


def create_instances(documents, vocab_size, cls_id, sep_id, mask_id, is_subword=None,
                     max_seq_length=128, dupe_factor=10, short_seq_prob=0.1,
                     masked_lm_prob=0.15, max_predictions_per_seq=20,
                     do_whole_word_mask=False, seed=12345):
    """documents: list of documents, each a list of sentences, each a list of token ids.
    Returns a list of Instance (tokens, segment_ids, is_random_next, short_target,
    masked_positions, masked_labels)."""
    rng = random.Random(seed)
    docs = [[list(s) for s in doc if s] for doc in documents]
    docs = [doc for doc in docs if doc]
    rng.shuffle(docs)
    ids = {"cls": cls_id, "sep": sep_id, "mask": mask_id}
    is_subword = is_subword or (lambda t: False)
    instances = []
    for _ in range(dupe_factor):
        for d in range(len(docs)):
            instances.extend(_document_instances(
                docs, d, max_seq_length, short_seq_prob, masked_lm_prob,
                max_predictions_per_seq, vocab_size, ids, is_subword, do_whole_word_mask,
                rng))
    rng.shuffle(instances)
    return instances
