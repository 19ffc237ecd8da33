"""One block of input bytes -> documents -> token ids -> instances -> masked examples ->
TFRecord bytes in a part file, and counts for the summary: `run_job`, what a worker process
(worker.py) and, when the workers are busy, the main process run for each block.

Nothing here imports TensorFlow (bert_tf/text/python_tokenizer.py says why).
"""

import collections
import os
import random
import zlib

import numpy as np

from bert_tf.data import instances as instances_lib
from bert_tf.data import example_codec, masking, segmenters, storage
from bert_tf.data.inputs import decode, load_vocab, parse_documents, read_block
from bert_tf.text.python_tokenizer import CachedTokenizer
from bert_tf.text.text_rules import CLS_TOKEN, CONTINUATION_PREFIX, MASK_TOKEN, SEP_TOKEN
from bert_tf.base.shard_schema import FEATURES, WORD_CONTINUES
from bert_tf.base.tfrecord import frame_records

# Instances packed, masked and serialized together: big enough to amortize numpy's per-call
# cost, small enough to keep the working set of a worker near 10 MB.
BATCH = 1024
# Records whose CRCs are computed together (a ~200-step loop over all of them: the more
# rows per step, the less numpy's per-call overhead counts). ~3 MB of records; a block's
# records wait, unframed, until the block is done (its pieces are written shard by shard).
FRAME_BATCH = 4096

_worker_state = {}


def _resources(settings):
    """Tokenizer and lookup arrays, built once per process (and per vocabulary)."""
    key = (settings.vocab_file, settings.do_lower_case, settings.chinese_word_segmenter)
    if _worker_state.get("key") != key:
        vocab = load_vocab(settings.vocab_file)
        _worker_state.clear()
        _worker_state.update(
            key=key, vocab_size=len(vocab),
            tokenizer=CachedTokenizer(vocab, settings.do_lower_case),
            is_subword=np.array([t.startswith(CONTINUATION_PREFIX) for t in vocab], bool),
            cls_id=vocab.index(CLS_TOKEN), sep_id=vocab.index(SEP_TOKEN),
            mask_id=vocab.index(MASK_TOKEN),
            segment=segmenters.load(settings.chinese_word_segmenter)
            if settings.chinese_word_segmenter else None)
    return _worker_state


def block_rngs(random_seed, index):
    """(random.Random, numpy Generator) of block `index`: independent streams that depend
    only on the seed and the block."""
    py_seq, np_seq = np.random.SeedSequence([random_seed, index]).spawn(2)
    py_seed = int.from_bytes(py_seq.generate_state(4, np.uint64).tobytes(), "little")
    return random.Random(py_seed), np.random.Generator(np.random.PCG64(np_seq))


def _documents(res, settings, data, stats):
    """The block's text -> (token ids of its sentences end to end, each sentence's first
    token, each document's (first, end) sentence, and for whole-word masking each token's
    mark "continues the word before it", else None), sentences and documents without
    tokens dropped; counts into `stats`."""
    text, stats["invalid_utf8_bytes"] = decode(data)
    sentences, doc_sizes, parse_counts = parse_documents(text, settings.input_format,
                                                         settings.jsonl_field)
    stats.update(parse_counts)
    continues = None
    if res["segment"] is not None:
        tokens, counts, continues = segmenters.tokenize_lines(
            res["tokenizer"], sentences, res["segment"], res["is_subword"])
    else:
        tokens, counts = res["tokenizer"].tokenize_lines(sentences)
        if settings.do_whole_word_mask:
            continues = res["is_subword"][tokens]
    stats["sentences"] = int(np.count_nonzero(counts))
    stats["sentences_without_tokens"] = len(counts) - stats["sentences"]
    stats["input_tokens"] = len(tokens)

    # google drops lines without tokens, then documents without lines.
    doc_of = np.repeat(np.arange(len(doc_sizes)), doc_sizes)
    kept = counts > 0
    sizes = np.bincount(doc_of[kept], minlength=len(doc_sizes))
    stats["documents"] = int(np.count_nonzero(sizes))
    stats["documents_without_tokens"] = len(doc_sizes) - stats["documents"]
    stats["one_sentence_documents"] = int(np.count_nonzero(sizes == 1))
    sizes = sizes[sizes > 0]
    first = np.concatenate([[0], np.cumsum(sizes)])
    doc_bounds = list(zip(first[:-1].tolist(), first[1:].tolist()))
    sentence_starts = np.concatenate([[0], np.cumsum(counts[kept])]).tolist()
    return tokens, sentence_starts, doc_bounds, continues


def process_block(settings, index, data, part_path):
    """One block -> TFRecords (gzip member if settings.gzip) in part_path; returns a dict
    of counts (all additive, see docs/pretraining_data.md)."""
    res = _resources(settings)
    stats = collections.Counter()
    tokens, sentence_starts, doc_bounds, continues = _documents(res, settings, data, stats)
    py_rng, np_rng = block_rngs(settings.random_seed, index)
    inst = instances_lib.create_instances(
        sentence_starts, doc_bounds, settings.dupe_factor, settings.max_seq_length,
        settings.short_seq_prob, py_rng, settings.next_sentence)
    n = len(inst["a_start"])
    stats["document_passes"] = len(doc_bounds) * settings.dupe_factor
    stats["short_target_passes"] = inst.pop("short_target_passes")
    full_sentences = settings.next_sentence == "none"
    doc_starts = instances_lib.document_starts(sentence_starts, doc_bounds) \
        if full_sentences else None
    stats["truncated_examples"] = instances_lib.truncate_full_sentences(
        inst, settings.max_seq_length, np_rng, doc_starts) if full_sentences else \
        instances_lib.truncate(inst, settings.max_seq_length, np_rng)
    stats["examples"] = n
    # Text tokens in the examples, against the text's tokens times the passes: 1 for
    # full sentences (every token once per pass); for pairs less (truncation, the text
    # after a random B) plus the random B's borrowed sentences.
    stats["example_text_tokens"] = int(inst["a_len"].sum() + inst["b_len"].sum())
    stats["input_token_passes"] = len(tokens) * settings.dupe_factor
    swapped = int(inst["swapped"].sum())
    stats["random_next"] = int(inst["random_next"].sum()) - swapped
    if swapped:     # --next_sentence=sop: label 1 for these too
        stats["swapped"] = swapped
    stats["random_next_same_document"] = int(inst["same_document"].sum())
    stats["short_target_examples"] = int(inst["short_target"].sum())

    # google shuffles all instances; here those of the block (the reader shuffles more).
    order = np_rng.permutation(n)
    pieces = _write_examples(part_path, settings, res, tokens, inst, order, np_rng, stats,
                             doc_starts, continues, index)
    return dict(stats, pieces=pieces)


def piece_of(index, position, num_shards):
    """The shard that example `position` (in write order) of block `index` goes to:
    dealt round-robin, each block starting one shard further, as google's writer deals
    examples to its files. So every shard gets a share of every block (the same share
    within one example), and shards come out the same size whatever stretch of the
    corpus makes more examples."""
    return (index + position) % num_shards


def _write_examples(part_path, settings, res, tokens, inst, order, np_rng, stats,
                    doc_starts=None, continues=None, index=0):
    """The instances written to part_path as one piece per shard, one after the other
    (shard 0's first): the examples of `order` that `piece_of` deals to each, in order,
    each piece a gzip member of its own under --gzip. They are packed, masked and encoded
    as TFRecords BATCH at a time in that order (shard after shard), counts into `stats`.
    Returns [(bytes, examples)] per shard. doc_starts: full-sentences instances
    (--next_sentence=none) with a [SEP] at each of these token offsets. continues:
    whole-word masking, each token's mark (continues the word before it)."""
    num_shards = settings.num_shards
    dealt = [order[(s - index) % num_shards::num_shards] for s in range(num_shards)]
    examples = [len(d) for d in dealt]
    order = np.concatenate(dealt)
    pending, lengths = [], []       # encode_unframed's batches; each record's data length

    def pack(values, cls_id, sep_id, sel):
        if doc_starts is not None:
            return masking.pack_full_sentences(
                values, inst["a_start"][sel], inst["a_len"][sel], doc_starts,
                settings.max_seq_length, cls_id, sep_id)
        return masking.pack(values, inst["a_start"][sel], inst["a_len"][sel],
                            inst["b_start"][sel], inst["b_len"][sel],
                            settings.max_seq_length, cls_id, sep_id)

    for lo in range(0, len(order), BATCH):
        sel = order[lo:lo + BATCH]
        ids, segment_ids, input_mask, candidate, n_tokens = pack(
            tokens, res["cls_id"], res["sep_id"], sel)
        # The marks packed as the ids are (False at [CLS], [SEP] and padding).
        marks = None if continues is None else \
            pack(continues.view(np.int8), 0, 0, sel)[0].astype(bool)
        if settings.masking == "none":
            # Unmasked: the schema's mask features are there, all weights 0 (every
            # reader reads them; run_pretraining --masking=dynamic draws the masks).
            positions, labels, weights, decisions = masking.no_masks(
                len(sel), settings.max_predictions_per_seq)
        else:
            chosen, group = masking.choose_positions(
                ids, candidate, n_tokens, np_rng, settings.masked_lm_prob,
                settings.max_predictions_per_seq, marks, settings.max_ngram_size)
            positions, labels, weights, decisions = masking.apply_masks(
                ids, chosen, group, np_rng, res["mask_id"], res["vocab_size"],
                settings.max_predictions_per_seq)
        stats["example_tokens"] += int(n_tokens.sum())
        stats["padded_examples"] += int(np.count_nonzero(
            n_tokens < settings.max_seq_length))
        stats["masked"] += int(decisions.sum())
        stats["masked_as_mask"] += int(decisions[masking.MASKED])
        stats["masked_as_random"] += int(decisions[masking.RANDOM])
        stats["masked_unchanged"] += int(decisions[masking.KEPT])
        columns = (ids, input_mask, segment_ids, positions, labels, weights,
                   inst["random_next"][sel][:, None])      # in the schema's order
        features = {feature.name: column for feature, column in zip(FEATURES, columns)}
        if marks is not None and settings.masking == "none":
            # For dynamic whole-word masking (shard_schema.WORD_CONTINUES).
            features[WORD_CONTINUES.name] = marks
        pending.append(example_codec.encode_unframed(features))
        lengths.append(pending[-1][1])
    # A framed record is its data and 16 bytes: each piece's bytes, from its rows'.
    framed_bytes = np.concatenate(lengths) + 16 if lengths else np.zeros(0, np.int64)
    ends = np.cumsum(examples)
    sizes = [int(framed_bytes[end - count:end].sum()) for end, count in zip(ends, examples)]
    pieces = []
    with storage.open_write(part_path) as f:
        if not settings.gzip:
            for data in _frame(pending):
                f.write(data)
            return list(zip(sizes, examples))
        stream = np.concatenate(_frame(pending) or [np.zeros(0, np.uint8)])
        at = 0
        for size, count in zip(sizes, examples):
            data = b""
            if count:       # a gzip member of its own
                compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
                data = compressor.compress(stream[at:at + size]) + compressor.flush()
            f.write(data)
            pieces.append((len(data), count))
            at += size
    return pieces


def _frame(parts):
    """encode_unframed's batches -> framed records, FRAME_BATCH rows at a time (a list of
    uint8 arrays, in order: the CRCs' loop costs per call, not per row)."""
    framed, group, rows = [], [], 0
    for i, part in enumerate(parts):
        group.append(part)
        rows += len(part[1])
        if rows >= FRAME_BATCH or i == len(parts) - 1:
            framed.append(frame_records(group))      # empties `group`
            rows = 0
    return framed


class NotText(ValueError):
    """An input file is not UTF-8 text (the message names the file and line)."""


# Invalid UTF-8 bytes are dropped (google's tokenizer drops them) and counted in the
# summary while they are stray bytes; a block with more than this share of them (and at
# least MIN_INVALID_UTF8 of them, so a short block with a few stray bytes passes), or with
# a NUL byte, is not UTF-8 text (latin-1, UTF-16, a compressed or binary file).
MAX_INVALID_UTF8_SHARE = 0.01
MIN_INVALID_UTF8 = 16


def check_text(data, segments):
    """NotText naming the file and line when the block `data` (read from `segments`) is
    not UTF-8 text: a NUL byte, or more than MAX_INVALID_UTF8_SHARE invalid bytes."""
    at = data.find(b"\0")
    what = "NUL byte (UTF-16 or a binary file?)"
    if at < 0:
        text = data.decode("utf-8", "ignore")
        invalid = len(data) - len(text.encode("utf-8"))
        if invalid <= MAX_INVALID_UTF8_SHARE * len(data) or invalid < MIN_INVALID_UTF8:
            return
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            at = e.start
        what = (f"not UTF-8 ({invalid:,} of the {len(data):,} bytes around it are invalid; "
                f"latin-1, or a compressed file?)")
    for path, start, length in segments:
        if at < length:
            if path is None:
                break
            with storage.open_read(path) as f:
                line = f.read(start + at).count(b"\n") + 1
            raise NotText(f"--input_file: {path}:{line}: {what}; expected UTF-8 text")
        at -= length
    raise NotText(f"--input_file: {what}; expected UTF-8 text")


def run_job(settings, job):
    """job = (block index, file segments, part path) -> counts."""
    index, segments, part_path = job
    data = read_block(segments)
    check_text(data, segments)
    try:
        return process_block(settings, index, data, part_path)
    except OSError as e:
        storage.remove(part_path)
        if e.filename or not e.errno:
            raise
        # A full disk: said of the shard being written (the part is its temporary piece).
        raise OSError(e.errno, os.strerror(e.errno), part_path.rsplit(".tmp-part", 1)[0]) \
            from None
