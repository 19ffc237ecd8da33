import json

import pytest

from bert_tf.base.config import PRESETS, BertConfig


def test_presets_follow_googles_family():
    expected = {"tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024),
                "small": (4, 512, 8, 2048), "medium": (8, 512, 8, 2048),
                "base": (12, 768, 12, 3072), "large": (24, 1024, 16, 4096)}
    assert set(PRESETS) == set(expected)
    for name, (layers, hidden, heads, inner) in expected.items():
        c = BertConfig.preset(name)
        assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
                c.intermediate_size) == (layers, hidden, heads, inner)
        assert c.type_vocab_size == 2 and c.max_position_embeddings == 512
        assert c.layer_norm_eps == 1e-12 and c.initializer_range == 0.02


def test_google_json_round_trip(tmp_path):
    c = BertConfig.preset("mini", vocab_size=8000, hidden_act="gelu_new")
    path = tmp_path / "bert_config.json"
    c.to_json_file(str(path), flavor="google")
    values = json.loads(path.read_text())
    # google's file has no epsilon field: the original hard-codes 1e-12.
    assert "layer_norm_eps" not in values
    assert values["hidden_act"] == "gelu_new" and values["vocab_size"] == 8000
    assert BertConfig.from_json_file(str(path)) == c


def test_hf_json_round_trip_ignores_extra_keys(tmp_path):
    c = BertConfig.preset("small", layer_norm_eps=1e-5)
    path = tmp_path / "config.json"
    c.to_json_file(str(path), flavor="hf")
    values = json.loads(path.read_text())
    assert values["model_type"] == "bert" and values["layer_norm_eps"] == 1e-5
    assert BertConfig.from_json_file(str(path)) == c


def test_real_hf_config(minilm_dir):
    c = BertConfig.from_json_file(f"{minilm_dir}/config.json")
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.vocab_size) == \
        (6, 384, 12, 30522)


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="not a multiple of num_attention_heads"):
        BertConfig(hidden_size=100, num_attention_heads=12)
    with pytest.raises(ValueError, match="hidden_act"):
        BertConfig(hidden_act="gelu_fast")
    bad = tmp_path / "bad.json"
    bad.write_text('{"hidden_size": 64}')
    with pytest.raises(ValueError, match=r"bad.json: missing required field\(s\) \['intermediate_size'"):
        BertConfig.from_json_file(str(bad))
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        BertConfig.from_json_file(str(bad))
    with pytest.raises(FileNotFoundError, match="config file not found"):
        BertConfig.from_json_file(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="unknown preset"):
        BertConfig.preset("huge")


def test_frozen():
    c = BertConfig()
    with pytest.raises(Exception):
        c.hidden_size = 10
    assert c.replace(hidden_size=384, num_attention_heads=6).hidden_size == 384
