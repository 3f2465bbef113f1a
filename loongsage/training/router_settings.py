"""trainer.moe.* against the model: the routers' RL settings mean nothing without experts."""

from __future__ import annotations

from loongsage.config.schema import MoeConfig


def refuse_without_experts(moe: MoeConfig, family: str, has_experts: bool) -> None:
    """A dense model has no router for these settings to change: refused by name, not ignored."""
    if has_experts:
        return
    if moe.aux_loss_coeff is not None:
        setting, default = f"trainer.moe.aux_loss_coeff={moe.aux_loss_coeff}", "null"
    elif moe.freeze_router:
        setting, default = "trainer.moe.freeze_router=true", "false"
    else:
        return
    raise ValueError(f"{setting}: the model ({family}) has no experts; leave it at {default}")
