"""Bad inputs to the commands, one row each: exit status 1, exactly one `error: ...` line
naming the file or flag and what was expected, no traceback, nothing left under the
output name. (Each command's own test file has more of its cases; these are the rows that
once crashed, hung or passed silently.)"""

import os

import pytest


TINY_CONFIG = ('{"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1, '
               '"num_attention_heads": 2, "intermediate_size": 64}')


def _task_flags(tmp_path, minilm_dir, train_file):
    config = tmp_path / "bert_config.json"
    config.write_text(TINY_CONFIG)
    return [f"--bert_config_file={config}", f"--vocab_file={minilm_dir}/vocab.txt",
            f"--output_dir={tmp_path / 'out'}", "--do_train", f"--train_file={train_file}",
            "--max_seq_length=32", "--num_train_epochs=1"]


def _glue_flags(tmp_path, minilm_dir, train_file="x.tsv"):
    return _task_flags(tmp_path, minilm_dir, train_file) + ["--task_name=custom",
                                                            "--labels=0,1"]


def _latin1_tsv(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes("sentence\tlabel\nun caf\xe9 cr\xe8me\t1\nplain\t0\n".encode("latin-1"))
    return path


def _good_tsv(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\na fine film\t1\na dull plot\t0\n", encoding="utf-8")
    return path


def _latin1_swag(tmp_path):
    path = tmp_path / "train.csv"
    path.write_bytes(("sent1,sent2,ending0,ending1,ending2,ending3,label\n"
                      "caf\xe9,b,c,d,e,f,1\n").encode("latin-1"))
    return path


def _damaged_hf(tmp_path, minilm_dir, how):
    """A copy of MiniLM's HF directory with model.safetensors cut in half or its header's
    first byte flipped."""
    import shutil
    directory = tmp_path / f"damaged_{how}"
    directory.mkdir()
    for name in ("config.json", "vocab.txt"):
        shutil.copy(os.path.join(minilm_dir, name), directory)
    data = open(os.path.join(minilm_dir, "model.safetensors"), "rb").read()
    data = data[:len(data) // 2] if how == "cut" else data[:8] + b"X" + data[9:]
    (directory / "model.safetensors").write_bytes(data)
    return directory


def _convert_flags(tmp_path, minilm_dir, how):
    return [f"--input={_damaged_hf(tmp_path, minilm_dir, how)}", f"--output={tmp_path / 'out'}",
            "--output_format=keras"]


# (command module, flags builder, what the one line must say)
ROWS = {
    "glue_batch_size_0": ("tasks.glue", lambda t, m: _glue_flags(t, m) + [
        "--train_batch_size=0"], "--train_batch_size must be a positive number, got 0"),
    "glue_batch_size_negative": ("tasks.glue", lambda t, m: _glue_flags(t, m) + [
        "--train_batch_size=-8"], "--train_batch_size must be a positive number, got -8"),
    "glue_learning_rate_0": ("tasks.glue", lambda t, m: _glue_flags(t, m) + [
        "--learning_rate=0"], "--learning_rate must be a positive number, got 0.0"),
    "glue_learning_rate_nan": ("tasks.glue", lambda t, m: _glue_flags(t, m) + [
        "--learning_rate=nan"], "--learning_rate must be a positive number, got nan"),
    "glue_warmup_over_1": ("tasks.glue", lambda t, m: _glue_flags(t, m) + [
        "--warmup_proportion=2"], "--warmup_proportion must be a number from 0 to 1"),
    "ner_epochs_negative": ("tasks.ner", lambda t, m: _task_flags(t, m, "x.txt")[:-1] + [
        "--num_train_epochs=-1"], "--num_train_epochs must be a positive number, got -1.0"),
    "glue_latin1_tsv": ("tasks.glue", lambda t, m: _glue_flags(t, m, _latin1_tsv(t)),
                        "train.tsv:2: not UTF-8 (byte 7 of the line"),
    "convert_cut_safetensors": ("bert_tf.convert_checkpoint",
                                lambda t, m: _convert_flags(t, m, "cut"),
                                "model.safetensors: not a readable safetensors file"),
    "convert_flipped_safetensors_header": ("bert_tf.convert_checkpoint",
                                           lambda t, m: _convert_flags(t, m, "flip"),
                                           "invalid JSON in header"),
    "glue_init_checkpoint_cut_safetensors": (
        "tasks.glue", lambda t, m: _glue_flags(t, m, _good_tsv(t))[1:] + [
            f"--init_checkpoint={_damaged_hf(t, m, 'cut')}"],
        "model.safetensors: not a readable safetensors file"),
    "swag_latin1_csv": ("tasks.swag", lambda t, m: _task_flags(t, m, _latin1_swag(t))[:-1],
                        "train.csv:2: not UTF-8 (byte 4 of the line"),
}


@pytest.mark.parametrize("row", sorted(ROWS))
def test_bad_input_is_one_line(row, tmp_path, minilm_dir, capsys):
    import importlib
    module, flags, message = ROWS[row]
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as exit_info:
        main([str(f) for f in flags(tmp_path, minilm_dir)])
    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert message in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert not os.path.exists(tmp_path / "out") or not os.listdir(tmp_path / "out"), \
        os.listdir(tmp_path / "out")


def test_ctrl_c_is_one_line_and_status_130(capsys):
    """Ctrl-C inside any command's work (the shared run_main): one line, exit status 130,
    no KeyboardInterrupt traceback. (run_pretraining saves a checkpoint first:
    tests/test_pretraining.py.)"""
    from bert_tf.cli import run_main

    def work(args):
        raise KeyboardInterrupt
    with pytest.raises(SystemExit) as exit_info:
        run_main(work, None, keras=False)
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C)\n"
