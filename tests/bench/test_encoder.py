"""bench/encoder.py's bookkeeping: which torch row each Keras row is held against, the
forward pass's FLOP count and the target line."""

from bench import encoder


def test_forward_flops_of_bert_base_at_128():
    """Twice the dense layers' weights per token, plus the two attention products
    (scores and context: 2 x seq x seq x hidden multiply-adds a layer); 22.35 GFLOP."""
    dense = 4 * 768 * 768 + 2 * 768 * 3072                 # Q, K, V, out; in, out
    expected = 12 * (2 * 128 * dense + 2 * 2 * 128 * 128 * 768)
    assert encoder.forward_flops(128) == expected == 22_347_251_712


def test_torch_runs_once_for_both_bfloat16_settings(monkeypatch):
    """torch's bfloat16 model already holds bfloat16 weights: asked for bf16 and
    bf16-weights, it is built once (as bf16) and both Keras rows divide by it."""
    built = []

    def fake(name):
        def runner(policy, inputs):
            built.append((name, policy))
            return lambda: None
        return runner
    monkeypatch.setattr(encoder, "RUNNERS", {n: fake(n) for n in ("bert_tf", "HF torch")})
    monkeypatch.setattr(encoder, "make_inputs", lambda *a: None)
    times = encoder.run_benchmark(2, 8, 1, 0, ["bf16", "bf16-weights"],
                                  ["bert_tf", "HF torch"], progress=lambda _: None)
    assert built == [("bert_tf", "mixed_bfloat16"), ("HF torch", "mixed_bfloat16"),
                     ("bert_tf", "bfloat16")]
    assert sorted(times) == [("HF torch", "bf16"), ("bert_tf", "bf16"),
                             ("bert_tf", "bf16-weights")]
    times = {("bert_tf", "bf16"): [0.4], ("bert_tf", "bf16-weights"): [0.2],
             ("HF torch", "bf16"): [0.3]}
    table = encoder.table(times, 8)
    assert "| bert_tf | bf16-weights | 40.00 | 200 | 1.50x | 40.00 | 1.50x |" in table
    assert "| bert_tf | bf16 | 20.00 | 400 | 0.75x | 20.00 | 0.75x |" in table


def test_target_line_compares_fastest_rows_and_their_flop_rates(monkeypatch):
    """Each side's fastest row, whatever its precision; both rates against one product's
    (here said to run at 1000 GFLOP/s in bfloat16)."""
    asked = []
    monkeypatch.setattr(encoder, "matmul_rate",
                        lambda dtype: asked.append(dtype) or 1e12)
    times = {("bert_tf", "fp32"): [0.5], ("bert_tf", "bf16-weights"): [0.24],
             ("HF torch", "fp32"): [1.0], ("HF torch", "bf16"): [0.3]}
    note = encoder.target_note(times, 8, 128)
    assert asked == ["bfloat16"]
    assert "setting: met (1.25x: bert_tf bf16-weights 33.33 seq/s against HF torch bf16 " \
        "26.67)" in note
    flops = encoder.forward_flops(128)
    ours, peer = 8 / 0.24 * flops, 8 / 0.3 * flops
    assert f"run at {ours / 1e9:.0f} and {peer / 1e9:.0f} GFLOP/s" in note
    assert f"{ours / 1e12:.0%} and {peer / 1e12:.0%} of it." in note
    times[("HF torch", "bf16")] = [0.2]            # torch now the faster side
    assert "setting: not met (0.83x" in encoder.target_note(times, 8, 128)
