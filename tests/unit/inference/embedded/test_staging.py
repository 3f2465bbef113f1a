"""Staged weight updates (embedded/staging.py) on the tiny model: nothing reaches the model
before the commit, the commit swaps storage (no second copy) and keeps Parameter identity, the
fused q/k/v tensor stays the one the forward pass reads, and a bad bucket stages nothing."""

from __future__ import annotations

import pytest
import torch

from loongsage.inference.embedded.staging import StagedWeights
from loongsage.inference.embedded.weights import WeightError, apply_named_tensors, load_model, read_safetensors

torch.set_num_threads(1)
IDS = torch.arange(12)
Q, K, V = (f"model.layers.0.self_attn.{p}_proj.weight" for p in "qkv")
EMBED, LM_HEAD, NORM = "model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"


@pytest.fixture(scope="module")
def checkpoint(tiny_model_path):
    return read_safetensors(tiny_model_path)


@pytest.fixture
def model(tiny_model_path):
    return load_model(tiny_model_path)


def logits(model) -> torch.Tensor:
    hidden, _, _ = model.prefill(IDS)
    return model.logits(hidden)


def params(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters(remove_duplicate=False)}


def shifted(checkpoint, delta: float = 0.01) -> list[tuple[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [(name, t + delta * torch.randn(t.shape, generator=gen)) for name, t in checkpoint]


def test_staged_buckets_change_nothing_until_the_commit_which_matches_a_direct_load(model, checkpoint, tiny_model_path):
    staged, before, old_logits = StagedWeights(model), params(model), logits(model)
    new = shifted(checkpoint)
    half = len(new) // 2
    assert staged.stage(new[:half], owned=True) == half
    assert staged.stage(new[half:], owned=True) == len(new) - half
    assert staged.count == len(new)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters(remove_duplicate=False))
    assert torch.equal(logits(model), old_logits)

    written, count = staged.commit()
    assert count == len(new) and staged.count == 0
    assert written == {id(p) for p in model.parameters()}
    reference = load_model(tiny_model_path)
    apply_named_tensors(reference, new)
    assert torch.equal(logits(model), logits(reference))
    for name, tensor in new:
        assert torch.equal(dict(model.named_parameters())[name], tensor)


def test_the_commit_swaps_storage_keeps_parameters_and_ties_and_refuses_foreign_memory(model, checkpoint):
    staged = StagedWeights(model)
    identity = {name: id(p) for name, p in model.named_parameters(remove_duplicate=False)}
    norm = dict(checkpoint)[NORM] * 2  # owned, exact size, the model's dtype: kept as it is
    embed = dict(checkpoint)[EMBED] + 1
    shared = embed.clone().share_memory_()  # the sender's shared memory: copied
    staged.stage([(NORM, norm), (EMBED, shared)], owned=True)
    staged.commit()
    named = dict(model.named_parameters(remove_duplicate=False))
    assert {name: id(p) for name, p in named.items()} == identity
    assert named[NORM].data_ptr() == norm.data_ptr()  # no second copy
    assert named[EMBED].data_ptr() != shared.data_ptr() and torch.equal(named[EMBED], embed)
    assert named[LM_HEAD] is named[EMBED]  # still tied

    not_owned, wider = dict(checkpoint)[NORM] * 3, dict(checkpoint)[NORM].double() * 4
    staged.stage([(NORM, not_owned)])  # a caller's tensor: copied
    staged.commit()
    assert named[NORM].data_ptr() != not_owned.data_ptr() and torch.equal(named[NORM], not_owned)
    staged.stage([(NORM, wider)], owned=True)  # another dtype: converted
    staged.commit()
    assert named[NORM].dtype == torch.float32 and torch.equal(named[NORM], wider.float())


def test_a_push_of_some_of_q_k_v_keeps_the_others_and_the_fused_tensor_in_use(model, checkpoint, tiny_model_path):
    staged, attn = StagedWeights(model), model.model.layers[0].self_attn
    old = params(model)
    new_q = dict(checkpoint)[Q] + 0.5
    staged.stage([(Q, new_q)], owned=True)
    assert torch.equal(attn.q_proj.weight, old[Q])
    written, _ = staged.commit()
    assert written == {id(attn.q_proj.weight)}
    assert torch.equal(attn.q_proj.weight, new_q)
    assert torch.equal(attn.k_proj.weight, old[K]) and torch.equal(attn.v_proj.weight, old[V])
    # q/k/v are still views into the tensor the forward pass multiplies by.
    fused = attn.fused_weight
    for lin in (attn.q_proj, attn.k_proj, attn.v_proj):
        assert lin.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    assert torch.equal(fused, torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
    reference = load_model(tiny_model_path)
    apply_named_tensors(reference, [(Q, new_q)])
    assert torch.equal(logits(model), logits(reference))


def test_a_bad_bucket_stages_nothing_and_discard_drops_everything(model, checkpoint):
    staged, before = StagedWeights(model), params(model)
    staged.stage([(NORM, dict(checkpoint)[NORM] + 1)], owned=True)
    with pytest.raises(WeightError, match="nope"):
        staged.stage([(EMBED, dict(checkpoint)[EMBED]), ("model.nope.weight", torch.zeros(2))])
    with pytest.raises(WeightError, match="shape mismatch"):
        staged.stage([(EMBED, torch.zeros(3))])
    refusal = RuntimeError("weights released")

    def refuse():
        raise refusal

    with pytest.raises(RuntimeError, match="weights released"):
        staged.stage([(EMBED, dict(checkpoint)[EMBED])], check=refuse)
    assert staged.count == 1
    assert staged.discard() == 1 and staged.count == 0
    assert staged.commit() == (set(), 0)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters(remove_duplicate=False))


def test_parameters_not_loaded_since_a_resume_are_written_in_place_and_count_at_the_commit(model, checkpoint):
    """A resumed engine's parameters hold nothing to keep: no second copy of them is made."""
    attn = model.model.layers[0].self_attn
    unloaded = {id(attn.q_proj.weight), id(model.model.norm.weight)}
    staged = StagedWeights(model, not_loaded=lambda param: id(param) in unloaded)
    pointers = {name: p.data_ptr() for name, p in model.named_parameters()}
    new = {name: t + 1 for name, t in checkpoint if name in (Q, K, NORM)}
    staged.stage(list(new.items()), owned=True)
    assert torch.equal(model.model.norm.weight, new[NORM]) and torch.equal(attn.q_proj.weight, new[Q])  # at once
    assert not torch.equal(attn.k_proj.weight, new[K])  # loaded: staged beside
    written, count = staged.commit()
    assert count == 3 and written == {id(attn.q_proj.weight), id(attn.k_proj.weight), id(model.model.norm.weight)}
    assert model.model.norm.weight.data_ptr() == pointers[NORM]
    for name, tensor in new.items():
        assert torch.equal(dict(model.named_parameters())[name], tensor)
    assert torch.equal(attn.fused_weight, torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))


def storages(model) -> dict[int, int]:
    """data pointer -> bytes of every storage behind the parameters (the fused q/k/v ones once)."""
    return {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}


def test_spares_take_the_next_push_without_allocating_and_a_failed_push_keeps_the_old_weights(model, checkpoint):
    staged = StagedWeights(model)
    original = storages(model)
    first, second, third = (shifted(checkpoint, delta) for delta in (0.01, 0.02, 0.03))
    staged.stage(first)  # a caller's tensors: copied into buffers of the engine's own
    staged.commit()
    allocated = staged.allocations
    assert allocated > 0 and not set(storages(model)) & set(original)
    assert staged.spare_bytes == sum(original.values())  # the replaced storages, kept

    staged.stage(second, copy_threads=2)  # as an shm sender asks for its last buckets
    assert staged.allocations == allocated  # into the spares: nothing allocated
    staged.commit()
    assert storages(model) == original  # ping-pong: back in the storages the first push replaced
    assert all(torch.equal(dict(model.named_parameters())[name], t) for name, t in second)

    before = params(model)
    staged.stage(third[: len(third) // 2])  # a push that fails half way: written into spares only
    assert staged.discard() == len(third) // 2
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters(remove_duplicate=False))
    staged.stage(third)
    staged.commit()
    assert staged.allocations == allocated
    assert all(torch.equal(dict(model.named_parameters())[name], t) for name, t in third)

    assert staged.drop_spares() == sum(original.values()) and staged.spare_bytes == 0
    staged.stage(first)
    assert staged.allocations > allocated  # no spares left: fresh buffers again


def test_without_spares_a_commit_keeps_nothing(model, checkpoint):
    staged = StagedWeights(model, keep_spares=False)
    for delta in (0.01, 0.02):
        staged.stage(shifted(checkpoint, delta))
        staged.commit()
        assert staged.spare_bytes == 0
    staged.stage(shifted(checkpoint, 0.03))
    staged.discard()
    assert staged.spare_bytes == 0
