import json
import os

import pytest

from bert_tf import quickstart


@pytest.mark.slow
def test_quickstart_runs_every_stage_and_resumes(stdlib_corpus, tmp_path, capsys):
    # A 300 KB slice of the default corpus, cut at a document boundary.
    text = open(stdlib_corpus, encoding="utf-8").read()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text[:text.index("\n\n", 300_000) + 2], encoding="utf-8")
    work = tmp_path / "work"
    args = ["--work_dir", str(work), "--corpus", str(corpus), "--vocab_size", "2000",
            "--num_train_steps", "30", "--steps_per_loop", "10", "--dupe_factor", "1"]
    assert quickstart.main(args) == 0
    results = json.loads((work / "quickstart_results.json").read_text())
    assert 0.0 <= results["heldout_masked_lm_accuracy"] <= 1.0
    assert 0.0 < results["unigram_baseline_accuracy"] < 0.5
    out = capsys.readouterr().out
    assert out.count("    -> ") == len(quickstart.SENTENCES)
    for name in ("vocab.txt", "train.tfrecord", "heldout.tfrecord", "model/google",
                 "model/hf", "model/eval_results.txt"):
        assert os.path.exists(work / name), name
    # A second run finds every stage done: same results, no retraining.
    before = (work / "model" / "train_log.jsonl").read_text()
    assert quickstart.main(args) == 0
    assert (work / "model" / "train_log.jsonl").read_text() == before


def test_fill_mask_puts_the_mask_id_between_pieces(minilm_dir):
    from bert_tf.text.tokenization import BertTokenizer
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))
    seen = {}

    def model(inputs):
        import numpy as np
        seen.update(inputs)
        n = inputs["masked_lm_positions"].shape[1]
        logits = np.zeros((1, n, tokenizer.vocab_size), "float32")
        logits[0, :, 7592] = 10.0  # "hello"
        return {"mlm_logits": logits}

    (_, guesses), = quickstart.fill_mask(model, tokenizer, ["a [MASK] b [MASK]"], top_k=2)
    assert seen["token_ids"].tolist() == [[101, 1037, 103, 1038, 103, 102]]
    assert seen["masked_lm_positions"].tolist() == [[2, 4]]
    assert [g[0][0] for g in guesses] == ["hello", "hello"]


def test_package_topics_are_real_sentences_of_their_package():
    """corpus.package_topics: the first sentences of a package's docstrings, as many as
    asked, none in two packages, each found in a source file of its package; the same
    lists on every call; too few docstrings is one clear error."""
    import sysconfig

    from bert_tf.base.corpus import docstrings, package_topics, split_sentences, stdlib_sources
    topics = package_topics(("json", "email"), 15)
    assert [len(v) for v in topics.values()] == [15, 15]
    assert not set(topics["json"]) & set(topics["email"])
    root = sysconfig.get_paths()["stdlib"]
    firsts = {p: set() for p in topics}
    for path in stdlib_sources(root):
        package = os.path.relpath(path, root).split(os.sep)[0]
        if package in firsts:
            firsts[package].update(split_sentences(d)[0] for d in docstrings(path)
                                   if split_sentences(d))
    for package, sentences in topics.items():
        assert set(sentences) <= firsts[package], package
    assert package_topics(("json", "email"), 15) == topics
    with pytest.raises(ValueError, match=r"^json: \d+ docstrings in .*, 100000 wanted$"):
        package_topics(("json",), 100000)
