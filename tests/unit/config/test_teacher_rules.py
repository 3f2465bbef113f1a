"""teachers.pool, data.teacher / data.mix[].teacher and algorithm.opd: routes, and every knob that
would select nothing refused by name."""

from __future__ import annotations

import pytest

from loongsage.config import Config, ConfigError, DataMixEntry, OpdConfig, TeacherEntry, check
from loongsage.config.teacher_rules import resident_slots, teacher_routes
from tests.unit.config.test_rules import compose_config


def with_teachers(*names: str, routed: tuple[str, ...] | None = None, **opd) -> Config:
    """A mixed-source agent config: one source per name of `routed` (default: every teacher)."""
    cfg = Config()
    cfg.agent.name = "tool"
    cfg.teachers.pool = [TeacherEntry(name=n, model="tiny") for n in names]
    routed = names if routed is None else routed
    cfg.data.mix = [DataMixEntry(name=f"src{i}", source="synthetic_arithmetic", teacher=t) for i, t in enumerate(routed)]
    cfg.rollout.prompts_per_step = len(routed) or 1
    cfg.algorithm.opd = OpdConfig(**opd)
    return cfg


def problems(cfg: Config) -> str:
    with pytest.raises(ConfigError) as error:
        check(cfg)
    return str(error.value)


def test_routes_follow_the_sources_that_name_a_teacher():
    cfg = with_teachers("math", "code", routed=("math", "code", ""))
    cfg.teachers.pool = cfg.teachers.pool  # both routed
    check(cfg)
    assert teacher_routes(cfg) == {"src0": "math", "src1": "code"}
    assert resident_slots(cfg) == 2
    cfg.teachers.max_resident = 1
    assert resident_slots(cfg) == 1
    cfg.teachers.max_resident = 5  # never more engines than teachers
    assert resident_slots(cfg) == 2


def test_the_single_source_names_its_teacher_in_data_teacher():
    cfg = compose_config(
        "recipe=math_grpo", "model=tiny", "teachers.pool=[{name: t, model: tiny}]", "data.teacher=t", "algorithm.opd.coef=0.5"
    )
    assert teacher_routes(cfg) == {"": "t"}
    assert cfg.algorithm.opd.coef == 0.5


def test_a_teacher_no_source_names_is_refused():
    assert "teachers.pool[1] (code) scores no data source" in problems(with_teachers("math", "code", routed=("math",)))


def test_a_source_naming_an_unknown_teacher_is_refused_with_the_pool():
    message = problems(with_teachers("math", routed=("math", "chem")))
    assert "data.mix[1].teacher='chem' is not in teachers.pool (teachers: math)" in message


def test_data_teacher_is_not_read_with_a_mix():
    cfg = with_teachers("math")
    cfg.data.teacher = "math"
    assert "data.teacher='math' is not read with data.mix" in problems(cfg)


def test_duplicate_and_empty_teachers_are_named():
    cfg = with_teachers("math", "math")
    cfg.teachers.pool.append(TeacherEntry(name="x", model=""))
    cfg.data.mix.append(DataMixEntry(name="src9", source="synthetic_arithmetic", teacher="x"))
    cfg.rollout.prompts_per_step = 3
    message = problems(cfg)
    assert "teachers.pool[1].name='math' is used by more than one teacher" in message
    assert "teachers.pool[2].model is empty" in message


def test_opd_settings_without_a_teacher_are_refused():
    cfg = Config()
    cfg.algorithm.opd.coef = 0.5
    assert "algorithm.opd.coef=0.5: on-policy distillation needs a teacher" in problems(cfg)


def test_opd_settings_the_style_does_not_read_are_refused():
    assert "algorithm.opd.top_k=8 is not read by algorithm.opd.style=pg" in problems(with_teachers("math", top_k=8))
    message = problems(with_teachers("math", style="gkd", divergence="forward_kl", beta=0.3))
    assert "algorithm.opd.beta=0.3 is not read by algorithm.opd.style=gkd (beta is the jsd divergence's)" in message
    check(with_teachers("math", style="gkd", divergence="jsd", beta=0.3, top_k=8))


def test_opd_values_out_of_range_are_named():
    assert "algorithm.opd.style='kd' is not one of pg, gkd" in problems(with_teachers("math", style="kd"))
    assert "algorithm.opd.coef=0.0 must be > 0" in problems(with_teachers("math", coef=0.0))
    assert "algorithm.opd.divergence='l2' is not one of" in problems(with_teachers("math", style="gkd", divergence="l2"))
    assert "algorithm.opd.top_k=0 must be >= 1" in problems(with_teachers("math", style="gkd", top_k=0))
    assert "algorithm.opd.beta=1.0 must be in (0, 1)" in problems(with_teachers("math", style="gkd", divergence="jsd", beta=1.0))
    cfg = with_teachers("math")
    cfg.teachers.max_resident = -1
    assert "teachers.max_resident=-1 must be >= 0" in problems(cfg)


def test_teacher_devices_hold_one_resident_engine_each():
    cfg = with_teachers("math", "code")
    cfg.teachers.max_resident = 1
    cfg.roles.teacher.gpus = 2
    assert "roles.teacher.gpus=2 must equal the resident teacher engines" in problems(cfg)
    idle = Config()
    idle.roles.teacher.gpus = 1
    assert "roles.teacher.gpus=1 but teachers.pool is empty" in problems(idle)


def test_teachers_offload_is_read_only_when_a_teacher_waits_off_its_slot():
    cfg = with_teachers("math", "code")
    cfg.teachers.offload = "ram"
    assert "teachers.offload='ram' is not one of disk, host" in problems(cfg)
    cfg.teachers.offload = "host"  # every teacher resident: nothing ever waits in host memory
    assert "teachers.offload=host is read only when some teacher is not resident, and all 2 are" in problems(cfg)
    cfg.teachers.max_resident = 1
    check(cfg)
