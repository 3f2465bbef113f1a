"""Run modes as rows of one table: what each mode fixes, and a setting it fixes refused, not ignored."""

from __future__ import annotations

import pytest

from loongsage.config import Config, ConfigError, check
from loongsage.config.run_modes import RUN_MODES, pipeline_settings


def _config(mode: str, **pipeline) -> Config:
    cfg = Config()
    cfg.run.mode = mode
    for key, value in pipeline.items():
        setattr(cfg.pipeline, key, value)
    return cfg


@pytest.mark.parametrize("mode", sorted(RUN_MODES))
def test_each_mode_runs_the_pipeline_with_its_row(mode):
    settings = pipeline_settings(_config(mode))
    row = RUN_MODES[mode]
    assert (settings.window, settings.max_staleness, settings.partial_rollout) == (
        row.window,
        row.max_staleness,
        row.partial_rollout,
    )
    assert (RUN_MODES["sync"].max_staleness, RUN_MODES["sync"].partial_rollout) == (0, False)


def test_fully_async_takes_the_pipeline_block_over_its_defaults():
    settings = pipeline_settings(_config("fully_async", window="windowed_fifo", max_staleness=3, partial_rollout=False))
    assert (settings.window, settings.max_staleness, settings.partial_rollout) == ("windowed_fifo", 3, False)
    check(_config("fully_async", window="windowed_fifo", max_staleness=3))


def test_a_setting_the_mode_fixes_is_refused_with_the_reason():
    with pytest.raises(ConfigError) as error:
        check(_config("one_step_off", max_staleness=2, partial_rollout=True))
    message = str(error.value)
    assert "pipeline.max_staleness=2 conflicts with run.mode=one_step_off, which sets it to 1" in message
    assert "pipeline.partial_rollout=true conflicts with run.mode=one_step_off, which sets it to false" in message
    assert "use run.mode=fully_async to choose it" in message
    with pytest.raises(ConfigError, match="pipeline.window=windowed_fifo conflicts with run.mode=sync"):
        check(_config("sync", window="windowed_fifo"))
    # The mode's own value, spelled out, is no conflict; neither is dynamic filtering in sync.
    check(_config("sync", max_staleness=0, window="window_gated", filter_zero_variance=True))


def test_masking_stale_tokens_without_partial_rollouts_selects_nothing_and_is_refused():
    for cfg in (_config("sync", mask_stale_tokens=True), _config("fully_async", mask_stale_tokens=True, partial_rollout=False)):
        with pytest.raises(ConfigError, match="pipeline.mask_stale_tokens=true selects nothing without partial rollouts"):
            check(cfg)
    check(_config("fully_async", mask_stale_tokens=True))
