"""The pretraining recipes of docs/pretraining_data.md ("Recipes"), run as written there
with fewer steps: BERT in two phases (128 then 512 tokens, phase 2 from phase 1's
checkpoint), RoBERTa-style (dynamic masks, no next-sentence task) and Chinese-BERT-wwm
(jieba's words masked whole). The quickstart commands themselves are README's first
command, which CI runs; here their outputs (text, vocabulary, config, phase 1's
checkpoint) are stood in for by small ones."""

import importlib
import json
import os
import re
import shlex

import numpy as np
import pytest

from bert_tf import BertConfig, BertPretrainer
from bert_tf.checkpoints import dispatch as checkpoints
from tests import ROOT

DOC = os.path.join(ROOT, "docs",
                   "pretraining_data.md")
FEWER = {"--num_train_steps": "3", "--num_warmup_steps": "1", "--train_batch_size": "4"}


def recipe_commands():
    """The bash blocks of the "Recipes" section: [(module, [args])] per command, line
    continuations joined."""
    text = open(DOC, encoding="utf-8").read()
    section = text.split("\n## Recipes\n", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                assert words[:2] == ["python", "-m"], line
                commands.append((words[2], words[3:]))
    return commands


def stand_in(root, name, minilm_dir, stdlib_corpus):
    """runs/NAME as the quickstart leaves it: train.txt, vocab.txt, bert_config.json and
    model/google (a tiny pretrainer with both heads)."""
    folder = os.path.join(root, "runs", name)
    os.makedirs(os.path.join(folder, "model"), exist_ok=True)
    with open(stdlib_corpus, encoding="utf-8") as f:
        text = f.read(60_000)
    with open(os.path.join(folder, "train.txt"), "w", encoding="utf-8") as f:
        f.write(text[:text.rfind("\n\n") + 1])
    vocab = os.path.join(minilm_dir, "vocab.txt")
    with open(vocab, encoding="utf-8") as src, \
            open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as dst:
        dst.write(src.read())
    config = BertConfig.preset("tiny", vocab_size=30522)
    config.to_json_file(os.path.join(folder, "bert_config.json"))
    checkpoints.save_checkpoint(BertPretrainer.from_config_object(config),
                                os.path.join(folder, "model", "google"), "google")


def test_the_recipes_run_as_documented(tmp_path, minilm_dir, stdlib_corpus, capsys,
                                       monkeypatch):
    commands = recipe_commands()
    modules = [m for m, _ in commands]
    assert modules.count("bert_tf.quickstart") == 1
    assert modules.count("bert_tf.run_pretraining") == 3
    for name in ("phase1", "quickstart"):
        stand_in(str(tmp_path), name, minilm_dir, stdlib_corpus)
    monkeypatch.chdir(tmp_path)
    for module, args in commands:
        if module == "bert_tf.quickstart":
            continue
        args = [re.sub(r"^(--[a-z_]+)=(\d+)$",
                       lambda m: f"{m[1]}={FEWER.get(m[1], m[2])}", a) for a in args]
        importlib.import_module(module).main(args)
    out = capsys.readouterr().out
    # Phase 2 starts from phase 1's weights, every tensor of them (512 positions).
    assert "initialised from runs/phase1/model/google" in out
    phase1 = checkpoints.load_pretrainer("runs/phase1/model/google")
    phase2 = checkpoints.load_pretrainer("runs/phase2/model/google")
    assert phase2.encoder.bert_config == phase1.encoder.bert_config
    with open("runs/phase2/model/train_log.jsonl", encoding="utf-8") as f:
        assert [json.loads(line)["step"] for line in f] == [1, 2, 3]
    # RoBERTa-style: the masked LM alone, and a checkpoint without the next-sentence head.
    with open("runs/roberta/model/hf/config.json", encoding="utf-8") as f:
        assert json.load(f)["architectures"] == ["BertForMaskedLM"]
    with open("runs/roberta/model/train_log.jsonl", encoding="utf-8") as f:
        steps = [json.loads(line) for line in f]
    assert len(steps) == 3 and "next_sentence_loss" not in steps[0]
    assert np.isfinite(steps[-1]["loss"])
    # Full-sentence examples hold every token of the text, and every conversion keeps
    # the checkpoint's heads as they are (no next-sentence head made up).
    with open("runs/roberta/train.tfrecord.summary.json", encoding="utf-8") as f:
        made = json.load(f)
    assert made["kept_token_share"] == 1.0 and made["truncated_share"] == 0.0
    from bert_tf import convert_checkpoint
    convert_checkpoint.main(["--input=runs/roberta/model/hf", "--output=runs/roberta/g",
                             "--output_format=google"])
    assert not [n for n in checkpoints.read_checkpoint("runs/roberta/g").tensors
                if "seq_relationship" in n]
    # Chinese-BERT-wwm: shards written through the segmenter, pretrained on.
    with open("runs/wwm/train.tfrecord.summary.json", encoding="utf-8") as f:
        assert json.load(f)["config"]["segmenter"].startswith("jieba ")
    with open("runs/wwm/model/train_log.jsonl", encoding="utf-8") as f:
        assert [json.loads(line)["step"] for line in f] == [1, 2, 3]


@pytest.mark.parametrize("flag", sorted(FEWER))
def test_the_overridden_flags_are_in_the_recipes(flag):
    """The test shortens the runs through these flags: each recipe run must name them."""
    runs = [args for module, args in recipe_commands() if module == "bert_tf.run_pretraining"]
    assert all(any(a.startswith(flag + "=") for a in args) for args in runs)
