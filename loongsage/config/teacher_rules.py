"""The teachers block's rules: teachers.pool, who routes samples to it (data.teacher,
data.mix[].teacher), and algorithm.opd, which is read only when some source has a teacher.

Every knob here selects something or is refused: a teacher no source names scores nothing, an
opd setting its style does not read does nothing, and a teacher GPU with no teacher is idle.
"""

from __future__ import annotations

from dataclasses import fields

from loongsage.config.schema import Config, OpdConfig

OPD_STYLES = ("pg", "gkd")
OFFLOADS = ("disk", "host")  # where a teacher waits while not resident (teachers/loaders.py)
# The opd fields each style reads besides style and coef.
_READ_BY = {"pg": set(), "gkd": {"divergence", "top_k"}}


def teacher_routes(cfg: Config) -> dict[str, str]:
    """Data source name (SINGLE_SOURCE "" without data.mix) -> the teacher scoring its samples;
    sources without a teacher are absent."""
    if cfg.data.mix:
        return {entry.name: entry.teacher for entry in cfg.data.mix if entry.teacher}
    return {"": cfg.data.teacher} if cfg.data.teacher else {}


def resident_slots(cfg: Config) -> int:
    """Teacher engines the run starts: teachers.max_resident, or one per teacher (0), never more
    engines than teachers."""
    count = len(cfg.teachers.pool)
    return min(cfg.teachers.max_resident, count) if cfg.teachers.max_resident else count


def teacher_problems(cfg: Config) -> list[str]:
    return [*_pool_problems(cfg), *_route_problems(cfg), *_opd_problems(cfg), *_device_problems(cfg)]


def _pool_problems(cfg: Config) -> list[str]:
    problems = []
    names = [t.name for t in cfg.teachers.pool]
    for index, teacher in enumerate(cfg.teachers.pool):
        where = f"teachers.pool[{index}]"
        if not teacher.name:
            problems.append(f"{where}.name is empty: data sources name their teacher by it")
        elif names.count(teacher.name) > 1:
            problems.append(f"{where}.name={teacher.name!r} is used by more than one teacher")
        if not teacher.model:
            problems.append(f"{where}.model is empty: a registry name or a Hugging Face directory")
    if cfg.teachers.max_resident < 0:
        problems.append(f"teachers.max_resident={cfg.teachers.max_resident} must be >= 0 (0: every teacher resident)")
    if cfg.teachers.offload not in OFFLOADS:
        problems.append(f"teachers.offload={cfg.teachers.offload!r} is not one of {', '.join(OFFLOADS)}")
    elif cfg.teachers.offload != "disk" and resident_slots(cfg) == len(cfg.teachers.pool):
        problems.append(
            f"teachers.offload={cfg.teachers.offload} is read only when some teacher is not resident, and all "
            f"{len(cfg.teachers.pool)} are (teachers.max_resident={cfg.teachers.max_resident}): lower max_resident, or drop it"
        )
    return problems


def _route_problems(cfg: Config) -> list[str]:
    pool = [t.name for t in cfg.teachers.pool]
    known = ", ".join(pool) or "none"
    problems = []
    if cfg.data.mix and cfg.data.teacher:
        problems.append(
            f"data.teacher={cfg.data.teacher!r} is not read with data.mix: name each source's teacher in data.mix[i].teacher"
        )
    named = [(f"data.mix[{i}].teacher", entry.teacher) for i, entry in enumerate(cfg.data.mix)]
    named = named or [("data.teacher", cfg.data.teacher)]
    for key, teacher in named:
        if teacher and teacher not in pool:
            problems.append(f"{key}={teacher!r} is not in teachers.pool (teachers: {known})")
    routed = set(teacher_routes(cfg).values())
    for index, name in enumerate(pool):
        if name and name not in routed:
            problems.append(
                f"teachers.pool[{index}] ({name}) scores no data source: name it in data.teacher "
                f"(or a data.mix entry's teacher), or drop it"
            )
    return problems


def _opd_problems(cfg: Config) -> list[str]:
    opd, defaults = cfg.algorithm.opd, OpdConfig()
    changed = [f.name for f in fields(OpdConfig) if getattr(opd, f.name) != getattr(defaults, f.name)]
    if not teacher_routes(cfg):
        if changed:
            settings = ", ".join(f"algorithm.opd.{name}={getattr(opd, name)}" for name in changed)
            return [f"{settings}: on-policy distillation needs a teacher (teachers.pool and data.teacher or data.mix[].teacher)"]
        return []
    if opd.style not in OPD_STYLES:
        return [f"algorithm.opd.style={opd.style!r} is not one of {', '.join(OPD_STYLES)}"]
    problems = []
    if opd.coef <= 0:
        problems.append(f"algorithm.opd.coef={opd.coef} must be > 0 (a source without teacher signal names no teacher)")
    read = _READ_BY[opd.style] | ({"beta"} if opd.style == "gkd" and opd.divergence == "jsd" else set())
    unread = [name for name in changed if name not in read | {"style", "coef"}]
    if unread:
        settings = ", ".join(f"algorithm.opd.{name}={getattr(opd, name)}" for name in unread)
        problems.append(f"{settings} is not read by algorithm.opd.style={opd.style}" + _unread_hint(opd))
    if opd.style == "gkd":
        from loongsage.algorithms.distill import GKD_DIVERGENCES

        if opd.divergence not in GKD_DIVERGENCES:
            problems.append(f"algorithm.opd.divergence={opd.divergence!r} is not one of {', '.join(GKD_DIVERGENCES)}")
        if opd.top_k < 1:
            problems.append(f"algorithm.opd.top_k={opd.top_k} must be >= 1")
        if opd.divergence == "jsd" and not 0 < opd.beta < 1:
            problems.append(f"algorithm.opd.beta={opd.beta} must be in (0, 1)")
    return problems


def _unread_hint(opd: OpdConfig) -> str:
    if opd.style == "pg":
        return " (divergence, beta and top_k are algorithm.opd.style=gkd's)"
    return " (beta is the jsd divergence's)"


def _device_problems(cfg: Config) -> list[str]:
    gpus = cfg.roles.teacher.gpus
    if gpus <= 0:
        return []
    slots = resident_slots(cfg)
    if not slots:
        return [f"roles.teacher.gpus={gpus} but teachers.pool is empty: no teacher would run on them"]
    if gpus != slots:
        return [
            f"roles.teacher.gpus={gpus} must equal the resident teacher engines (teachers.max_resident, or one per "
            f"teacher when 0) = {slots}: one engine per teacher device"
        ]
    return []
