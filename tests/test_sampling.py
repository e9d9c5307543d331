"""The one sampler (toolgym.agents.sampling.sample_tokens) on hand-computed distributions, and at the
uniform draw's extremes: 0 and the largest float32 below 1."""
import math

import pytest
import torch

from toolgym.agents.sampling import sample_tokens

P = [0.5, 0.3, 0.2]
LOGITS = torch.log(torch.tensor([P]))
U_MAX = 1.0 - 2.0 ** -24  # the largest float32 below 1: torch.rand's largest draw


def draw(logits, u, **kw):
    ids, logp = sample_tokens(logits, kw.pop("temperature", 1.0), uniform=torch.tensor([[u]]), **kw)
    return int(ids[0]), float(logp[0])


def test_inverse_cdf_at_temperature_one():
    # cdf [.5, .8, 1.0]: u = .6 lands in token 1's slice
    assert draw(LOGITS, 0.6) == (1, pytest.approx(math.log(0.3), abs=1e-6))
    assert draw(LOGITS, 0.49)[0] == 0 and draw(LOGITS, 0.81)[0] == 2


def test_temperature_two_takes_square_roots():
    # p_T ∝ p^(1/2): .7071, .5477, .4472 -> /1.7020 = .4155, .3218, .2628; cdf .4155, .7373, 1
    ids, logp = draw(LOGITS, 0.42, temperature=2.0)
    root = [math.sqrt(p) for p in P]
    assert ids == 1 and logp == pytest.approx(math.log(root[1] / sum(root)), abs=1e-6)
    assert draw(LOGITS, 0.41, temperature=2.0)[0] == 0


def test_top_k_and_top_p_renormalise_and_never_pick_the_tail():
    # top-k 2 and top-p .7 (the tail .2 has mass <= .3) both leave [.625, .375, 0]
    for kw in ({"top_k": 2}, {"top_p": 0.7}):
        assert draw(LOGITS, 0.6, **kw) == (0, pytest.approx(math.log(0.625), abs=1e-6))
        assert draw(LOGITS, 0.7, **kw) == (1, pytest.approx(math.log(0.375), abs=1e-6))
        assert draw(LOGITS, U_MAX, **kw)[0] == 1  # never token 2
    assert draw(LOGITS, 0.99, top_p=0.9)[0] == 2  # .2 > 1 - .9: kept


def test_a_draw_of_zero_never_picks_a_token_without_mass():
    # token 0 outside top-k / the allowed set: the left search used to return it with log-prob −inf
    low_first = torch.log(torch.tensor([[0.1, 0.6, 0.3]]))
    ids, logp = draw(low_first, 0.0, top_k=2)
    assert ids == 1 and math.isfinite(logp)
    allowed = torch.tensor([[False, True, True]])
    ids, logp = draw(LOGITS, 0.0, allowed=allowed)
    assert ids == 1 and logp == pytest.approx(math.log(0.6), abs=1e-6)  # .3 / (.3 + .2)


def test_the_largest_draw_below_one_picks_the_last_token_with_mass():
    allowed = torch.tensor([[True, True, False]])
    ids, logp = draw(LOGITS, U_MAX, allowed=allowed)
    assert ids == 1 and math.isfinite(logp)
    assert draw(LOGITS, U_MAX)[0] == 2


def test_greedy_is_the_argmax_of_the_masked_logits():
    ids, logp = sample_tokens(LOGITS, 0.0)
    assert int(ids[0]) == 0 and float(logp[0]) == pytest.approx(math.log(0.5), abs=1e-6)
    ids, logp = sample_tokens(LOGITS, 0.0, allowed=torch.tensor([[False, True, True]]))
    assert int(ids[0]) == 1 and float(logp[0]) == pytest.approx(math.log(0.6), abs=1e-6)


def test_draws_follow_the_distribution():
    torch.manual_seed(0)
    ids, _ = sample_tokens(LOGITS.expand(20000, 3), 1.0)
    freq = torch.bincount(ids, minlength=3).float() / 20000
    assert torch.allclose(freq, torch.tensor(P), atol=0.015)


def test_the_pick_is_the_lean_decoders_historical_one_draw_for_draw():
    """Every earlier run sampled with a left search of the CDF: the shared sampler repeats it exactly (a right
    search moves the pick wherever the draw lands on a cumulative value, frequent at the top of a float32
    CDF over 49k tokens), so a resumed or repeated run is the same run."""
    def lean_before(logits):
        logp = torch.log_softmax(logits, -1)
        cdf = logp.exp().cumsum(-1)
        u = torch.rand((cdf.shape[0], 1), dtype=cdf.dtype) * cdf[:, -1:]
        return torch.searchsorted(cdf, u).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)

    for seed in range(200):  # a right search differs from it on 4 of these 6 400 draws
        logits = torch.randn(32, 49152, generator=torch.Generator().manual_seed(seed)) * 3
        torch.manual_seed(seed)
        before = lean_before(logits)
        torch.manual_seed(seed)
        assert torch.equal(sample_tokens(logits, 1.0)[0], before), seed
