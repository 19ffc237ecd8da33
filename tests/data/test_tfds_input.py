"""create_pretraining_data --input_tfds: a prepared tensorflow-datasets text dataset as the
input (bert_tf/data/tfds_input.py). The dataset is built here from real text
(standard-library docstrings, a document per example) by a small GeneratorBasedBuilder:
nothing is downloaded. A TFDS-sourced run writes the same shards as the same documents
given as a JSON-lines file, and its bad flags are one line each."""

import json
import os

import pytest

tfds = pytest.importorskip("tensorflow_datasets")

from bert_tf import create_pretraining_data as cpd  # noqa: E402

DOCUMENTS = []      # what the builder below serves (set before it is prepared)


class DocstringDocuments(tfds.core.GeneratorBasedBuilder):
    """Standard-library docstrings, one document per example (a title and its text)."""
    VERSION = tfds.core.Version("1.0.0")
    # Generated here, with no download: no checksums file to look for beside its code
    # (tfds would find this module's folder through importlib_resources, which tfds
    # itself does not install).
    code_path = None

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
            {"title": tfds.features.Text(), "text": tfds.features.Text()}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(DOCUMENTS[:-40]),
                "validation": self._generate_examples(DOCUMENTS[-40:])}

    def _generate_examples(self, documents):
        for i, text in enumerate(documents):
            yield i, {"title": f"document {i}", "text": text}


@pytest.fixture(scope="module")
def prepared(docstring_documents, tmp_path_factory):
    """The dataset prepared in a data dir of its own."""
    with open(docstring_documents, encoding="utf-8") as f:
        DOCUMENTS[:] = [doc for doc in f.read().split("\n\n") if doc.strip()]
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    builder = DocstringDocuments(data_dir=data_dir)
    builder.download_and_prepare()
    return data_dir


def test_a_tfds_run_writes_the_shards_of_the_same_text_as_a_file(prepared, minilm_dir,
                                                                  tmp_path):
    vocab = os.path.join(minilm_dir, "vocab.txt")
    common = [f"--vocab_file={vocab}", "--num_shards=2", "--dupe_factor=2", "--quiet",
              "--block_size_kb=32"]
    from_tfds = cpd.main(common + ["--input_tfds=docstring_documents",
                                   f"--tfds_data_dir={prepared}",
                                   f"--output_file={tmp_path / 'tfds' / 'train'}"])
    # The same documents, in the dataset's order (read here with tfds itself), as a file.
    texts = [example["text"].decode("utf-8") for example in tfds.as_numpy(tfds.load(
        "docstring_documents", split="train", data_dir=prepared, shuffle_files=False))]
    assert sorted(texts) == sorted(DOCUMENTS[:-40])
    source = tmp_path / "documents.jsonl"
    source.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n"
                              for t in texts), encoding="utf-8")
    from_file = cpd.main(common + [f"--input_file={source}", "--input_format=jsonl",
                                   f"--output_file={tmp_path / 'file' / 'train'}"])
    assert from_tfds["examples"] == from_file["examples"] > 500
    for name in ("train-00000-of-00002", "train-00001-of-00002"):
        assert (tmp_path / "tfds" / name).read_bytes() == (tmp_path / "file" / name).read_bytes()
    # The export is reused by a rerun, which keeps the complete shards.
    again = cpd.main(common + ["--input_tfds=docstring_documents", f"--tfds_data_dir={prepared}",
                               f"--output_file={tmp_path / 'tfds' / 'train'}"])
    assert again["skipped_shards"] == 2
    exported = os.listdir(os.path.join(prepared, "bert_tf_text"))
    assert exported == ["docstring_documents-train-text.jsonl"]


@pytest.mark.parametrize("flags,message", [
    (["--input_tfds=no_such_dataset_here"], "--input_tfds=no_such_dataset_here: not a "
                                            "dataset prepared in --tfds_data_dir="),
    (["--input_tfds=docstring_documents", "--tfds_split=test"],
     "--tfds_split=test: docstring_documents has the splits train, validation"),
    (["--input_tfds=docstring_documents", "--tfds_text_field=body"],
     "--tfds_text_field=body: docstring_documents has no such feature (it has: text, "
     "title)"),
])
def test_bad_tfds_flags_are_one_line_and_write_nothing(flags, message, prepared, minilm_dir,
                                                        tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cpd.main([f"--vocab_file={os.path.join(minilm_dir, 'vocab.txt')}",
                  f"--tfds_data_dir={prepared}", f"--output_file={tmp_path / 'out' / 'x'}",
                  "--quiet"] + flags)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: " + message), err
    assert not (tmp_path / "out").exists()


def test_input_file_and_input_tfds_are_exclusive(capsys):
    for flags in ([], ["--input_file=a.txt", "--input_tfds=wikipedia/20230601.en"]):
        with pytest.raises(SystemExit) as exit_info:
            cpd.parse_args(["--output_file=x", "--vocab_file=v"] + flags)
        assert exit_info.value.code == 2
        assert "give exactly one of --input_file or --input_tfds" in capsys.readouterr().err


def test_a_refused_run_writes_no_export(prepared, minilm_dir, tmp_path, capsys):
    """The output is the vocabulary file (an input): refused in one line before the split
    is exported, so the dataset's folder is left as it was."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(open(os.path.join(minilm_dir, "vocab.txt"), "rb").read())
    export = os.path.join(prepared, "bert_tf_text", "docstring_documents-validation-text.jsonl")
    with pytest.raises(SystemExit) as exit_info:
        cpd.main([f"--vocab_file={vocab}", f"--output_file={vocab}", "--quiet",
                  "--input_tfds=docstring_documents", "--tfds_split=validation",
                  f"--tfds_data_dir={prepared}"])
    assert exit_info.value.code == 1
    assert "output_file" in capsys.readouterr().err
    assert not os.path.exists(export)
    assert vocab.read_bytes() == open(os.path.join(minilm_dir, "vocab.txt"), "rb").read()
