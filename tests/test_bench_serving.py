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
