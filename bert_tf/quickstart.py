"""The whole pipeline on the embedded default corpus, in a few minutes on 2 CPU cores.

    python -m bert_tf.quickstart

1. corpus      the Python standard library's docstrings (every machine has them), split
               into training and held-out documents
2. vocab       a WordPiece vocabulary learned from the training documents
3. shards      masked-LM + next-sentence TFRecords (create_pretraining_data)
4. pretrain    a tiny BERT (run_pretraining)
5. evaluate    masked-LM accuracy on the held-out shards vs the unigram baseline
6. fill-mask   predictions for a few sentences

Every stage's output lands under --work_dir, and a stage whose output already exists is
skipped, so an interrupted quickstart resumes where it stopped. What each stage was made
from (the corpus's bytes, the flags that shape it) is kept in --work_dir; a rerun whose
--corpus or flags differ from what a stage already made is refused before anything is
written, instead of mixing the two.
"""

import argparse
import collections
import json
import os
import time

from bert_tf.base.cli import ArgumentParser, DTYPES, check_seq_length, run_main
from bert_tf.base.files import atomic_write, file_sha256, read_results, read_text, write_json
from bert_tf.base.input_names import PADDING_MASK, SEGMENT_IDS, TOKEN_IDS

SENTENCES = (
    "Return the [MASK] of the list.",
    "This module provides access to the [MASK] system.",
    "Raise a [MASK] if the file does not exist.",
    "The default [MASK] is None.",
)


# What the stages were made from, kept in --work_dir (see StageRecord).
SETTINGS_FILE = "quickstart_settings.json"
DEFAULT_CORPUS = "Python standard library docstrings"
# Stage -> (the flags its output depends on besides those of the stages before it, the
# files in --work_dir that show it was started).
STAGES = (
    ("corpus split", ("corpus",), ("corpus.txt", "train.txt", "heldout.txt")),
    ("vocab", ("vocab_size",), ("vocab.txt",)),
    ("shards", ("max_seq_length", "max_predictions_per_seq", "dupe_factor"),
     ("train.tfrecord", "train.tfrecord.summary.json", "heldout.tfrecord",
      "heldout.tfrecord.summary.json")),
    # steps_per_loop only groups steps (the same numbers come out), so it may change.
    ("model", ("preset", "train_batch_size", "learning_rate", "num_train_steps",
               "mixed_precision"), ("bert_config.json", "model")),
)


def corpus_identity(corpus):
    """What the corpus split is made from: None for the default corpus (written into
    --work_dir once), else the file's path, size and sha256 (the bytes decide, wherever
    the file lies)."""
    if corpus is None:
        return None
    return {"path": os.path.abspath(corpus), "bytes": os.path.getsize(corpus),
            "sha256": file_sha256(corpus)}


def _same(name, made, now):
    if name == "corpus" and made is not None and now is not None:
        return (made.get("bytes"), made.get("sha256")) == (now["bytes"], now["sha256"])
    return made == now


def _shown(name, value):
    if name != "corpus":
        return f"--{name}={value}"
    return DEFAULT_CORPUS + " (no --corpus)" if value is None else f"--corpus={value['path']}"


class StageRecord:
    """--work_dir/quickstart_settings.json: the flags each started stage was made with
    (a stage is recorded when it starts, so an interrupted one counts too). `check`
    compares a rerun with it before anything is written; `start` adds a stage."""

    def __init__(self, work_dir, flags):
        self.work_dir, self.flags = work_dir, flags
        self.path = os.path.join(work_dir, SETTINGS_FILE)
        self.started, self.made = [], {}

    def check(self):
        """ValueError (one line) when a stage already made was made from another corpus
        or with other flags, or when --work_dir holds a quickstart's files without the
        record of what they were made from. Returns the stages that will be reused."""
        work = self.work_dir
        advice = f"choose another --work_dir or delete {work}"
        if os.path.exists(self.path):
            try:
                with open(self.path, encoding="utf-8") as f:
                    record = json.load(f)
                self.started, self.made = list(record["stages"]), dict(record["flags"])
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{self.path}: not a quickstart settings record (damaged?): "
                                 f"what {work} was made from is unknown; {advice}") from None
        elif any(os.path.exists(os.path.join(work, name))
                 for _, _, outputs in STAGES for name in outputs):
            raise ValueError(f"--work_dir={work} holds a quickstart's files but no "
                             f"{SETTINGS_FILE} saying what they were made from; {advice}")
        differ = [name for stage_name, names, _ in STAGES if stage_name in self.started
                  for name in names if not _same(name, self.made.get(name), self.flags[name])]
        if differ:
            name = differ[0]
            made, now = self.made.get(name), self.flags[name]
            what = f"from {_shown(name, made)}" if name == "corpus" else \
                f"with {_shown(name, made)}"
            if name == "corpus" and made and now and made["path"] == now["path"]:
                what += f" as it was then ({made['bytes']:,} bytes; it has changed)"
            more = f" (and {len(differ) - 1} more flag(s) differ)" if len(differ) > 1 else ""
            raise ValueError(f"{_shown(name, now)}: {work} was made {what}{more}; {advice}")
        return list(self.started)

    def start(self, stage_name):
        """Records `stage_name` and its flags before the stage writes anything."""
        if stage_name in self.started:
            return
        names = next(names for name, names, _ in STAGES if name == stage_name)
        self.made.update({name: self.flags[name] for name in names})
        self.started.append(stage_name)
        write_json(self.path, {"stages": self.started, "flags": self.made})


def stage(title):
    print(f"\n== {title}", flush=True)


def split_corpus(corpus, train_path, heldout_path, heldout_every=20):
    """Every `heldout_every`-th document goes to the held-out file."""
    text = read_text(corpus).replace("\r\n", "\n")
    documents = [d for d in text.split("\n\n") if d.strip()]
    if not documents:
        raise ValueError(f"--corpus: {corpus}: empty (no text)")
    for path, keep in ((train_path, lambda i: i % heldout_every),
                       (heldout_path, lambda i: not i % heldout_every)):
        with atomic_write(path) as f:
            for i, doc in enumerate(documents):
                if keep(i):
                    f.write(doc.strip("\n") + "\n\n")
    return len(documents)


def unigram_baseline(train_pattern, heldout_pattern, max_seq_length, max_predictions):
    """Masked-LM accuracy of always predicting the most frequent masked token of the
    training shards, measured on the held-out shards."""
    from bert_tf.training.data import pretraining_dataset
    counts = collections.Counter()
    for batch in pretraining_dataset(train_pattern, 256, max_seq_length, max_predictions,
                                     is_training=False):
        ids = batch["masked_lm_ids"].numpy()[batch["masked_lm_weights"].numpy() > 0]
        counts.update(ids.tolist())
    top = counts.most_common(1)[0][0]
    hits = total = 0
    for batch in pretraining_dataset(heldout_pattern, 256, max_seq_length, max_predictions,
                                     is_training=False):
        ids = batch["masked_lm_ids"].numpy()[batch["masked_lm_weights"].numpy() > 0]
        hits += int((ids == top).sum())
        total += ids.size
    return top, hits / max(total, 1)


def fill_mask(model, tokenizer, sentences, top_k=5):
    """[MASK] in plain text -> the top-k tokens at each mask, from the MLM head."""
    import numpy as np

    from bert_tf.text.packing import pack_row
    results = []
    for sentence in sentences:
        parts = sentence.split("[MASK]")
        ids, masks = [], []                 # [CLS] and [SEP] aside
        for i, piece in enumerate(parts):
            ids += tokenizer.encode([piece])[0] if piece.strip() else []
            if i < len(parts) - 1:
                masks.append(1 + len(ids))
                ids.append(tokenizer.mask_id)
        packed = pack_row(ids, None, None, tokenizer.cls_id, tokenizer.sep_id)
        out = model({name: packed[name][None] for name in (TOKEN_IDS, SEGMENT_IDS,
                                                            PADDING_MASK)} |
                    {"masked_lm_positions": np.array([masks], "int32")})
        probs = _softmax(np.asarray(out["mlm_logits"])[0])
        guesses = []
        for row in probs:
            best = np.argsort(-row)[:top_k]
            guesses.append([(tokenizer.vocab[j], float(row[j])) for j in best])
        results.append((sentence, guesses))
    return results


def _softmax(x):
    import numpy as np
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def run(args):
    """Every stage; returns 0. A stage's command that fails has printed its `error: ...`
    line and raised SystemExit(1), which ends the quickstart with it."""
    record = check_work_dir(args)   # a rerun with another corpus or flags stops here
    started = time.time()
    corpus_stage(args, record)
    vocab = vocab_stage(args, record)
    shards_stage(args, record, vocab)
    pretraining_flags = pretrain_stage(args, record, vocab)
    metrics, top, baseline = evaluate_stage(args, pretraining_flags)
    tokenizer = fill_mask_stage(args, vocab)
    summarize(args, metrics, tokenizer.vocab[top], baseline, started)
    return 0


def _path(args, name):
    return os.path.join(args.work_dir, name)


def check_work_dir(args):
    """Before anything is written: the flags and the corpus are usable, and --work_dir
    holds nothing made from another corpus or with other flags (ValueError, one line).
    Returns the StageRecord of --work_dir, which now exists."""
    check_seq_length(args.max_seq_length, texts=2)
    # A missing, binary, non-UTF-8 or empty corpus stops here, before anything is written.
    if args.corpus and not read_text(args.corpus).strip():
        raise ValueError(f"--corpus: {args.corpus}: empty (no text)")
    flags = {name: getattr(args, name) for _, names, _ in STAGES for name in names}
    flags["corpus"] = corpus_identity(args.corpus)
    record = StageRecord(args.work_dir, flags)
    reused = record.check()
    os.makedirs(args.work_dir, exist_ok=True)
    if reused:
        print(f"reusing from {args.work_dir} (made from the same corpus and flags): "
              f"{', '.join(reused)}", flush=True)
    return record


def corpus_stage(args, record):
    """1/6: the default corpus written once (or --corpus), split into train.txt and
    heldout.txt."""
    stage(f"1/6 corpus: {args.corpus or DEFAULT_CORPUS}")
    record.start("corpus split")
    corpus = args.corpus or _path(args, "corpus.txt")
    if not args.corpus and not os.path.exists(corpus):
        from bert_tf.base.corpus import write_corpus
        docs, size = write_corpus(corpus)
        print(f"wrote {docs} documents, {size / 1e6:.2f} MB to {corpus}")
    if not os.path.exists(_path(args, "train.txt")):
        n = split_corpus(corpus, _path(args, "train.txt"), _path(args, "heldout.txt"))
        print(f"{n} documents: every 20th held out -> train.txt, heldout.txt")


def vocab_stage(args, record):
    """2/6: vocab.txt learned from the training documents (build_vocab); returns its
    path."""
    stage("2/6 vocab: WordPiece from the training documents")
    vocab = _path(args, "vocab.txt")
    record.start("vocab")
    if not os.path.exists(vocab):
        from bert_tf import build_vocab
        build_vocab.main([f"--input_file={_path(args, 'train.txt')}",
                          f"--output_file={vocab}", f"--vocab_size={args.vocab_size}",
                          "--do_lower_case=true"])
    print(f"vocab: {vocab}")
    return vocab


def shards_stage(args, record, vocab):
    """3/6: train.tfrecord (--dupe_factor passes) and heldout.tfrecord (one pass), made
    by create_pretraining_data with a seed of their own."""
    stage("3/6 shards: masked-LM + next-sentence examples")
    from bert_tf import create_pretraining_data
    record.start("shards")
    for name, dupe in (("train", args.dupe_factor), ("heldout", 1)):
        create_pretraining_data.main([
            f"--input_file={_path(args, name + '.txt')}",
            f"--output_file={_path(args, name + '.tfrecord')}", f"--vocab_file={vocab}",
            "--do_lower_case=true", f"--max_seq_length={args.max_seq_length}",
            f"--max_predictions_per_seq={args.max_predictions_per_seq}",
            f"--dupe_factor={dupe}", f"--random_seed={12345 + (name == 'heldout')}"])


def pretrain_stage(args, record, vocab):
    """4/6: the --preset model with the vocabulary's size, pretrained by run_pretraining
    into model/ (resuming when it holds a checkpoint). Returns the run_pretraining flags
    that training and evaluation share."""
    stage("4/6 pretrain: tiny BERT")
    from bert_tf import run_pretraining
    from bert_tf.base.config import BertConfig
    config = BertConfig.preset(args.preset, vocab_size=_count_lines(vocab))
    config_file = _path(args, "bert_config.json")
    record.start("model")
    config.to_json_file(config_file)
    common = [f"--bert_config_file={config_file}", f"--output_dir={_path(args, 'model')}",
              f"--vocab_file={vocab}", f"--max_seq_length={args.max_seq_length}",
              f"--max_predictions_per_seq={args.max_predictions_per_seq}",
              f"--num_train_steps={args.num_train_steps}",
              f"--num_warmup_steps={args.num_train_steps // 10}",
              f"--mixed_precision={args.mixed_precision}"]
    run_pretraining.main(common + [
        f"--input_file={_path(args, 'train.tfrecord')}", "--do_train",
        f"--train_batch_size={args.train_batch_size}", f"--learning_rate={args.learning_rate}",
        f"--save_checkpoints_steps={max(args.num_train_steps // 5, 1)}",
        f"--steps_per_loop={args.steps_per_loop}"])
    return common


def evaluate_stage(args, pretraining_flags):
    """5/6: the model's eval metrics on the held-out shards, and the unigram baseline
    (most frequent masked token of the training shards, and its held-out accuracy)."""
    stage("5/6 evaluate on held-out documents")
    from bert_tf import run_pretraining
    run_pretraining.main(pretraining_flags + [
        f"--input_file={_path(args, 'heldout.tfrecord')}", "--do_eval",
        "--eval_batch_size=64", "--max_eval_steps=0"])
    metrics = read_results(os.path.join(_path(args, "model"), "eval_results.txt"))
    top, baseline = unigram_baseline(_path(args, "train.tfrecord"),
                                     _path(args, "heldout.tfrecord"),
                                     args.max_seq_length, args.max_predictions_per_seq)
    return metrics, top, baseline


def fill_mask_stage(args, vocab):
    """6/6: the exported HF model's guesses for SENTENCES; returns the tokenizer."""
    stage("6/6 fill-mask")
    from bert_tf.checkpoints.dispatch import load_pretrainer
    from bert_tf.text.tokenization import BertTokenizer
    model = load_pretrainer(os.path.join(_path(args, "model"), "hf"))
    tokenizer = BertTokenizer(vocab, do_lower_case=True)
    for sentence, guesses in fill_mask(model, tokenizer, SENTENCES):
        shown = ", ".join(f"{t} ({p:.2f})" for t, p in guesses[0])
        print(f"{sentence}\n    -> {shown}")
    return tokenizer


def summarize(args, metrics, baseline_token, baseline, started):
    """quickstart_results.json and the closing line."""
    summary = {
        "heldout_masked_lm_accuracy": metrics["masked_lm_accuracy"],
        "heldout_masked_lm_loss": metrics["masked_lm_loss"],
        "heldout_next_sentence_accuracy": metrics["next_sentence_accuracy"],
        "unigram_baseline_accuracy": baseline,
        "unigram_baseline_token": baseline_token,
        "minutes": (time.time() - started) / 60,
    }
    results = _path(args, "quickstart_results.json")
    write_json(results, summary, sort_keys=False)
    print(f"\nheld-out masked-LM accuracy {summary['heldout_masked_lm_accuracy']:.3f} vs "
          f"unigram baseline {baseline:.3f} (always '{baseline_token}'); "
          f"next-sentence accuracy {summary['heldout_next_sentence_accuracy']:.3f}; "
          f"{summary['minutes']:.1f} min. Results: {results}")


def _count_lines(path):
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def main(argv=None):
    p = ArgumentParser(prog="python -m bert_tf.quickstart",
                       description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--work_dir", default="runs/quickstart", help="where every stage writes")
    p.add_argument("--corpus", default=None,
                   help="your own corpus (one sentence per line, blank line between "
                        "documents) instead of the stdlib docstrings")
    p.add_argument("--vocab_size", type=int, default=8000)
    p.add_argument("--preset", default="tiny", help="model size (BertConfig preset)")
    p.add_argument("--max_seq_length", type=int, default=64)
    p.add_argument("--max_predictions_per_seq", type=int, default=10)
    p.add_argument("--dupe_factor", type=int, default=3)
    p.add_argument("--train_batch_size", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--num_train_steps", type=int, default=2000)
    p.add_argument("--steps_per_loop", type=int, default=50)
    p.add_argument("--mixed_precision", default="float32", choices=tuple(DTYPES))
    return run_main(run, p.parse_args(argv), positive=(
        "vocab_size", "max_seq_length", "max_predictions_per_seq", "dupe_factor",
        "train_batch_size", "learning_rate", "num_train_steps", "steps_per_loop"))


if __name__ == "__main__":
    main()
