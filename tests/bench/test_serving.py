"""bench/serving.py's verdicts: which of our rows each peer row is held against."""

from bench import serving


def test_targets_hold_each_peer_against_our_fastest_row():
    """The target line compares a peer row with our fastest row at its batch (any thread
    setting or precision), except that our int8 only meets an int8 peer; the ratio
    column still compares with ours at the peer's precision (fp32 where we have none)."""
    ours, ort = serving.OURS, serving.ORT
    seconds = {  # seconds per batch of 32, one per round
        (ours, "fp32", 32): [0.20, 0.20, 0.21],
        (ours, serving.ours_label("bf16-frozen", 1), 32): [0.10, 0.10, 0.12],
        (ours, "int8", 32): [0.05, 0.05, 0.05],
        (ort, "fp32", 32): [0.12, 0.12, 0.13],
        (ort, "int8", 32): [0.06, 0.06, 0.06],
    }
    met, missed = serving.target_note(seconds).split("not met for ")
    assert "ONNX Runtime fp32 batch 32 (1.20x with ours bf16-frozen, intra-op 1, target " \
        "1.5x)" in missed
    assert "ONNX Runtime int8 batch 32 (1.20x with ours int8, target 1.0x)" in met
    table = serving.table(seconds)
    assert "| ONNX Runtime | fp32 | 32 | 266.67 | 120.0 | 0.60x |" in table
    assert "| ONNX Runtime | int8 | 32 | 533.33 | 60.0 | 1.20x |" in table
    assert serving.ours_label("fp32", 0) == "fp32"


def test_the_one_text_server_is_a_row_of_ours_the_targets_can_pick():
    """`--one_text_server` rows are ours (a thread setting, like intra-op N): the target
    line names them when they are the fastest at a batch, the ratio column does not use
    them."""
    ours, ort = serving.OURS, serving.ORT
    one_text = serving.ours_label("bf16-frozen", serving.ONE_TEXT)
    assert one_text == "bf16-frozen, one-text server"
    seconds = {(ours, "fp32", 1): [0.005] * 3, (ours, one_text, 1): [0.003] * 3,
               (ort, "fp32", 1): [0.0033] * 3}
    assert "ONNX Runtime fp32 batch 1 (1.10x with ours bf16-frozen, one-text server, " \
        "target 1.0x)" in serving.target_note(seconds).split("not met for ")[0]
    assert "| ONNX Runtime | fp32 | 1 | 303.03 | 3.3 | 0.66x |" in serving.table(seconds)
