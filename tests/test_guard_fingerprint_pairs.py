"""The weights' fingerprint is blind to no pair of bit flips (`weights.fingerprint`): one
wrap-around sum of 64-bit words per tensor was, for two flips of a word's bit 63 (2 x 2^63 =
2^64 = 0: in float32 the sign of every odd-index element) and for a bit set in one word and
cleared in another (+2^k - 2^k = 0) at any bit position."""

from __future__ import annotations

import itertools

import pytest
import torch
from guard_support import alarms, run, weights_reader  # noqa: F401
from torch import nn

from inspector.guard.guard import Guard, GuardConfig
from inspector.guard.weights.fingerprint import fingerprint


def one_sum(t: torch.Tensor) -> int:
    """The fingerprint before: the wrap-around int64 sum of the tensor's 64-bit words."""
    return int(t.detach().reshape(-1).view(torch.int64).sum())


def flip_bit(t: torch.Tensor, word: int, bit: int) -> None:
    """Flip one bit of one 64-bit word of `t` in place (the test's own fault)."""
    raw = t.detach().view(-1).view(torch.uint8)
    words = raw[:raw.numel() - raw.numel() % 8].view(torch.int64)
    words[word] ^= (1 << bit) if bit < 63 else -(1 << 63)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_no_pair_of_bit_flips_leaves_the_fingerprint_unchanged(dtype):
    """Pairs at the same bit in two words (sign bit and others, both directions), in one row,
    one column, the words after the summed grid and the bytes after the last word."""
    count = 4 * 10007 // torch.empty((), dtype=dtype).element_size()  # an odd tail of bytes
    t = torch.randn(count, generator=torch.Generator().manual_seed(3)).to(dtype)
    words = t.numel() * t.element_size() // 8
    # 0 and 1 share a row, 0 and 64 a column (64 columns); the last two are past the grid
    places = [0, 1, 2, 64, 65, 128, 2500, words - 40, words - 5, words - 1]
    before = fingerprint([t]).per_tensor()[0]
    missed = []
    for bit in (0, 7, 31, 52, 62, 63):
        for a, b in itertools.combinations(places, 2):
            flip_bit(t, a, bit)
            flip_bit(t, b, bit)
            if fingerprint([t]).per_tensor()[0] == before:
                missed.append((a, b, bit))
            flip_bit(t, a, bit)
            flip_bit(t, b, bit)
    assert missed == []
    raw = t.view(-1).view(torch.uint8)
    for at in (raw.numel() - 1, raw.numel() - 2):  # the bytes after the last whole word
        raw[at] ^= 0x80
    assert fingerprint([t]).per_tensor()[0] != before


def test_the_one_sum_was_blind_to_these_pairs():
    """The pairs the test above checks are the ones the one-sum fingerprint missed."""
    t = torch.randn(64, generator=torch.Generator().manual_seed(4))
    before = one_sum(t)
    flip_bit(t, 3, 63)
    flip_bit(t, 20, 63)
    assert one_sum(t) == before
    words = t.view(torch.int64)
    up = next(i for i in range(32) if not int(words[i]) >> 40 & 1)
    down = next(i for i in range(32) if int(words[i]) >> 40 & 1)
    flip_bit(t, up, 40)
    flip_bit(t, down, 40)
    assert one_sum(t) == before


def wide_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 1))


@pytest.mark.usefixtures("weights_reader")  # inline and in the background
def test_eight_sign_flips_between_steps_are_named_and_they_do_harm(tmp_path):
    """A memory fault flips the sign of 8 odd-index elements of a weight between two steps
    (their 64-bit words' bit 63: the one-sum fingerprint is unchanged): the guard names the
    tensor, and the loss moves against a clean twin's."""
    def fault(step):
        if step == 20:
            w = faulty[0].weight
            assert w.numel() * 4 // 8 > 64  # summed over a grid, not kept whole
            before = one_sum(w)
            for word in (1, 9, 17, 40, 41, 77, 100, 127):
                flip_bit(w, word, 63)
            assert one_sum(w) == before  # what the guard read before saw no change

    faulty, clean = wide_model(), wide_model()
    hit = run(Guard(tmp_path / "f", GuardConfig(console=False)), faulty, range(24),
              before_step=fault)
    calm = run(Guard(tmp_path / "c", GuardConfig(console=False)), clean, range(24))
    assert [v.step for v in hit if v.alarm] == [20]
    assert [(a["rule"], a["param"]) for a in alarms(tmp_path / "f")] == [
        ("weights-changed", "0.weight")]
    assert not any(v.alarm for v in calm)
    assert abs(hit[20].loss - calm[20].loss) > 1e-3 * calm[20].loss
