from __future__ import annotations

import torch

from loongsage.inference.embedded.sampling import noise_size, sample_tokens, token_logprobs


def _rows(n, vocab, temperature=1.0, top_p=1.0, top_k=-1, seed=0):
    return {
        "temperature": torch.full((n,), float(temperature)),
        "top_p": torch.full((n,), float(top_p)),
        "top_k": torch.full((n,), int(top_k)),
        "exp_noise": torch.empty(n, noise_size(vocab)).exponential_(generator=torch.Generator().manual_seed(seed)),
    }


def test_greedy_and_full_truncation_pick_the_argmax():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0], [5.0, 0.0, 0.0, 4.9]])
    for seed in range(5):
        assert sample_tokens(logits, **_rows(2, 4, temperature=0, seed=seed))[0].tolist() == [1, 0]
        assert sample_tokens(logits, **_rows(2, 4, top_k=1, seed=seed))[0].tolist() == [1, 0]
        assert sample_tokens(logits, **_rows(2, 4, top_p=1e-6, seed=seed))[0].tolist() == [1, 0]


def test_samples_follow_the_tempered_distribution():
    n = 20000
    logits = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4])).expand(n, 4)
    freq = torch.bincount(sample_tokens(logits, **_rows(n, 4))[0], minlength=4).float() / n
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.3, 0.4]), atol=0.015)
    hot = torch.softmax(logits[0] / 2.0, -1)
    freq = torch.bincount(sample_tokens(logits, **_rows(n, 4, temperature=2.0, seed=1))[0], minlength=4).float() / n
    assert torch.allclose(freq, hot, atol=0.015)


def test_uneven_vocabulary_blocks_sample_exactly():
    n, vocab = 20000, 50  # 7 blocks of 8, the last one padded
    probs = torch.softmax(torch.randn(vocab, generator=torch.Generator().manual_seed(5)) * 2, -1)
    freq = torch.bincount(sample_tokens(probs.log().expand(n, vocab), **_rows(n, vocab, seed=2))[0], minlength=vocab).float() / n
    assert freq.shape == (vocab,)
    assert (freq - probs).abs().max() < 0.015


def test_top_p_keeps_the_smallest_set_reaching_p():
    n = 4000
    logits = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4])).expand(n, 4)
    # top_p=0.6 keeps {0.4, 0.3} renormalised to 4/7 and 3/7
    freq = torch.bincount(sample_tokens(logits, **_rows(n, 4, top_p=0.6))[0], minlength=4).float() / n
    assert freq[0] == 0 and freq[1] == 0
    assert abs(freq[3].item() - 4 / 7) < 0.03
    # top_k=3 drops only the 0.1 token
    freq = torch.bincount(sample_tokens(logits, **_rows(n, 4, top_k=3))[0], minlength=4).float() / n
    assert freq[0] == 0 and freq[1] > 0.2


def test_a_row_depends_only_on_its_own_noise():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(3))
    rows = _rows(3, 50, seed=7)
    together = sample_tokens(logits, **rows)[0]
    alone = [sample_tokens(logits[i : i + 1], **{k: v[i : i + 1] for k, v in rows.items()})[0].item() for i in range(3)]
    assert together.tolist() == alone


def test_logprobs_are_untempered():
    logits = torch.randn(3, 10)
    tokens = torch.tensor([1, 4, 9])
    expected = torch.log_softmax(logits, -1).gather(1, tokens[:, None])[:, 0]
    assert torch.allclose(token_logprobs(logits, tokens), expected, atol=1e-6)


def test_sampled_logprobs_are_untempered_whatever_the_row_settings():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(4)) * 3
    rows = _rows(4, 50, seed=9)
    rows["temperature"] = torch.tensor([1.0, 0.0, 0.5, 1.0])
    rows["top_k"] = torch.tensor([-1, -1, -1, 5])
    tokens, logprobs = sample_tokens(logits, **rows)
    expected = torch.log_softmax(logits, -1).gather(1, tokens[:, None])[:, 0]
    assert torch.allclose(logprobs, expected, atol=1e-6)
    assert tokens[1] == logits[1].argmax()
