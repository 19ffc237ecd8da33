"""BertConfig: the hyperparameters of a BERT encoder.

Field names are exactly the keyword arguments of `BertEncoder` (and of google's
`bert_config.json`, which uses the same names), so a config can be splatted into the
encoder with `BertEncoder(**config.to_dict())` and no mapping table is needed.
HF `config.json` files use the same names too, plus extra keys that are ignored.
"""

import dataclasses
import json

from bert_tf.base.files import write_json

# `hidden_act` values and the GELU they mean. google's first release and HF's "gelu" use
# the exact erf form; tensorflow/models and a later google commit use the tanh form.
GELU_EXACT = ("gelu",)
GELU_TANH = ("gelu_new", "gelu_tanh", "gelu_pytorch_tanh")
SUPPORTED_ACTIVATIONS = GELU_EXACT + GELU_TANH + ("relu", "tanh", "swish", "silu")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """BERT's hyperparameters, named as google's bert_config.json names them (all fields
    are checked together; one error lists every problem).

    Args:
        vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
        intermediate_size: the shape (BERT-base: 30522, 768, 12, 12, 3072).
        hidden_act: "gelu" (exact erf), "gelu_new"/"gelu_tanh", "relu", "swish", ...
        hidden_dropout_prob, attention_probs_dropout_prob: dropout rates in [0, 1).
        max_position_embeddings, type_vocab_size: positions and segments.
        initializer_range: stddev of the truncated-normal initialisers.
        layer_norm_eps: LayerNorm epsilon (1e-12, as google's checkpoints use).

    Example:
        >>> from bert_tf import BertConfig
        >>> config = BertConfig.preset("tiny", vocab_size=1000)
        >>> config.vocab_size, config.hidden_size % config.num_attention_heads
        (1000, 0)
        >>> BertConfig(hidden_size=100, num_attention_heads=12)
        Traceback (most recent call last):
        ...
        ValueError: Invalid BertConfig: hidden_size 100 is not a multiple of num_attention_heads 12
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12

    def __post_init__(self):
        problems = []
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                problems.append(f"{name} must be a positive integer, got {value!r}")
        if not problems and self.hidden_size % self.num_attention_heads:
            problems.append(f"hidden_size {self.hidden_size} is not a multiple of "
                            f"num_attention_heads {self.num_attention_heads}")
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            problems.append(f"hidden_act must be one of {SUPPORTED_ACTIVATIONS}, "
                            f"got {self.hidden_act!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                problems.append(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        if problems:
            raise ValueError("Invalid BertConfig: " + "; ".join(problems))

    # -- dictionaries and files -------------------------------------------------------

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values, source="config"):
        """Builds a config from google's or HF's dict; unknown keys are ignored.

        HF's `layer_norm_eps` and google's absent epsilon (always 1e-12) both map to
        `layer_norm_eps`; any missing required key is reported by name.
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        required = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size"}
        missing = sorted(required - set(values))
        if missing:
            raise ValueError(f"{source}: missing required field(s) {missing}")
        kwargs = {k: v for k, v in values.items() if k in fields}
        try:
            return cls(**kwargs)
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None

    @classmethod
    def from_json_file(cls, path):
        """Reads google's `bert_config.json` or HF's `config.json`."""
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: config file not found") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a JSON object of BERT hyperparameters")
        return cls.from_dict(values, source=path)

    def to_google_dict(self):
        """google's bert_config.json keys (no epsilon: the original hard-codes 1e-12)."""
        d = self.to_dict()
        d.pop("layer_norm_eps")
        return d

    def to_hf_dict(self):
        """HF BertConfig keys, enough for `transformers.BertModel.from_pretrained`."""
        d = self.to_dict()
        d.update(model_type="bert", architectures=["BertForPreTraining"],
                 pad_token_id=0, position_embedding_type="absolute")
        return d

    def to_json_file(self, path, flavor="google"):
        values = {"google": self.to_google_dict, "hf": self.to_hf_dict,
                  "full": self.to_dict}[flavor]()
        write_json(path, values, indent=2, sort_keys=True, ensure_ascii=True)

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name, **overrides):
        """google's released sizes: tiny, mini, small, medium, base, large."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
        layers, hidden = PRESETS[name]
        # google's family: 4H feed-forward and 64-wide heads.
        values = dict(num_hidden_layers=layers, hidden_size=hidden,
                      num_attention_heads=hidden // 64, intermediate_size=4 * hidden)
        values.update(overrides)
        return cls(**values)


# name -> (num_hidden_layers, hidden_size)
PRESETS = {
    "tiny": (2, 128),
    "mini": (4, 256),
    "small": (4, 512),
    "medium": (8, 512),
    "base": (12, 768),
    "large": (24, 1024),
}
