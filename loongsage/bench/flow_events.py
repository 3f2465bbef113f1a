"""The event model over flows (`transfer_simulation` explains it): flows carry streams of
buckets over shared resources, split max-min fairly, each pipelined behind the flows that feed
its sender; `run_flows` moves from event to event until every bucket has landed."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

INF = math.inf
_TOL = 1e-9  # relative: a flow within this fraction of its bound has caught up
WAITING, READY, RUNNING, DONE = 0, 1, 2, 3


@dataclass
class Flow:
    """One hop carrying a stream of `buckets` buckets, `gb` gigabytes in all (1e9 bytes).
    `resources`: (name, GB/s) it uses at once; `latency`: seconds of its link; `upstream`:
    indices of the flows that bring its buckets to its sender (empty: the sender holds them at
    time 0); `cap`: its own rate limit in GB/s."""

    name: str
    gb: float
    buckets: int
    resources: tuple[tuple[str, float], ...]
    latency: float = 0.0
    upstream: tuple[int, ...] = ()
    cap: float = INF


@dataclass
class FlowResult:
    seconds: float  # when the last flow's last bucket has landed (finish + latency)
    finished: np.ndarray  # per flow: when it sent its last byte
    delivered: np.ndarray  # per flow: finished + latency
    events: int


def max_min_rates(
    live: np.ndarray,
    caps: np.ndarray,
    inc_flow: np.ndarray,
    inc_res: np.ndarray,
    capacity: np.ndarray,
    inc_weight: np.ndarray | None = None,
) -> np.ndarray:
    """Max-min fair rates by progressive filling: every live flow's rate grows at the same pace
    until a resource it uses is full or it reaches its cap; then it is frozen and the others go
    on. `inc_flow[i], inc_res[i]`: flow uses resource, `inc_weight[i]` times its rate (a route into
    an engine of several GPUs crosses its first GPU's NVLink port once per other GPU)."""
    if inc_weight is None:
        inc_weight = np.ones(len(inc_flow))
    nflows = len(caps)
    rate = np.zeros(nflows)
    frozen = ~live | (caps <= 0)
    remaining = capacity.astype(float).copy()
    for _ in range(nflows + len(capacity) + 1):
        if frozen.all():
            break
        open_uses = ~frozen[inc_flow]
        counts = np.bincount(inc_res[open_uses], weights=inc_weight[open_uses], minlength=len(capacity))
        used = counts > 0
        step = INF
        if used.any():
            step = float(np.min(remaining[used] / counts[used]))
        headroom = caps[~frozen] - rate[~frozen]
        step = min(step, float(np.min(headroom)))
        step = max(step, 0.0)
        rate[~frozen] += step
        remaining -= step * counts
        full = used & (remaining <= 1e-9 * capacity)
        newly = np.zeros(nflows, dtype=bool)
        newly[inc_flow[open_uses & full[inc_res]]] = True
        newly |= rate >= caps * (1 - 1e-12)
        if not (newly & ~frozen).any():  # nothing limits the rest: no resource and no cap
            break
        frozen |= newly
    return rate


def run_flows(flows: Sequence[Flow], max_events: int = 200_000) -> FlowResult:
    """Fluid event simulation of the flows (see `transfer_simulation`). Returns when the last
    bucket of the last flow has landed."""
    if not flows:
        return FlowResult(0.0, np.zeros(0), np.zeros(0), 0)
    run = _FlowRun(flows)
    events = 0
    while (run.state != DONE).any():
        events += 1
        if events > max_events:
            raise RuntimeError(f"simulation did not finish in {max_events} events")
        run.step()
    return FlowResult(float(run.delivered.max()), run.finished, run.delivered, events)


class _Incidence(NamedTuple):
    """Which flow uses which resource, how many times (a resource listed n times carries the bytes n times)."""

    capacity: np.ndarray  # per resource, GB/s
    flow: np.ndarray
    resource: np.ndarray
    weight: np.ndarray


def _incidence(flows: Sequence[Flow]) -> _Incidence:
    res_index: dict[str, int] = {}
    res_cap: list[float] = []
    inc_f, inc_r, inc_w = [], [], []
    for i, f in enumerate(flows):
        if not f.resources and f.cap == INF:
            raise ValueError(f"flow {f.name}: no resource and no cap, its rate would be unbounded")
        uses: dict[int, int] = defaultdict(int)
        for name, bw in f.resources:
            if bw <= 0:
                raise ValueError(f"flow {f.name}: resource {name} has bandwidth {bw}")
            if name not in res_index:
                res_index[name] = len(res_cap)
                res_cap.append(bw)
            uses[res_index[name]] += 1
        for r, w in uses.items():
            inc_f.append(i)
            inc_r.append(r)
            inc_w.append(float(w))
    return _Incidence(
        np.array(res_cap, dtype=float),
        np.array(inc_f, dtype=np.int64),
        np.array(inc_r, dtype=np.int64),
        np.array(inc_w, dtype=float),
    )


class _Upstreams(NamedTuple):
    """Per (flow, slot): the upstream flow in that slot (`index`, 0 where `present` is False)."""

    index: np.ndarray
    present: np.ndarray
    lag: np.ndarray  # store and forward: the downstream lags by the coarser of the two flows' buckets
    none: np.ndarray  # per flow: its sender holds every bucket at time 0


def _upstreams(flows: Sequence[Flow], buckets: np.ndarray) -> _Upstreams:
    n = len(flows)
    kmax = max(1, max(len(f.upstream) for f in flows))
    up = np.full((n, kmax), -1, dtype=np.int64)
    for i, f in enumerate(flows):
        for j, u in enumerate(f.upstream):
            if not 0 <= u < n or u == i:
                raise ValueError(f"flow {f.name}: upstream {u} is not another flow")
            up[i, j] = u
    present = up >= 0
    index = np.where(present, up, 0)
    lag = np.where(present, np.maximum(1.0 / buckets[:, None], 1.0 / buckets[index]), 0.0)
    return _Upstreams(index, present, lag, ~present.any(axis=1))


class _FlowRun:
    """The state of every flow between two events; `step` moves to the next event."""

    def __init__(self, flows: Sequence[Flow]):
        n = len(flows)
        self.flows = flows
        self.gb = np.array([f.gb for f in flows], dtype=float)
        self.latency = np.array([f.latency for f in flows], dtype=float)
        self.own_cap = np.array([f.cap for f in flows], dtype=float)
        self.uses = _incidence(flows)
        self.up = _upstreams(flows, np.array([max(1, f.buckets) for f in flows], dtype=float))
        self.sent = np.zeros(n)
        self.rate = np.zeros(n)
        self.state = np.full(n, WAITING)
        self.ready_at = np.full(n, INF)
        self.finished = np.full(n, INF)
        self.delivered = np.full(n, INF)
        self.t = 0.0
        # the flows out of the sources start at once
        self.state[self.up.none] = RUNNING
        self.ready_at[self.up.none] = 0.0

    def step(self) -> None:
        allow, _ = self._bounds()
        amin = allow.min(axis=1)
        self._start_waiting(amin)
        self._start_ready()
        running = self.state == RUNNING
        # a running flow that has caught up with its upstream runs no faster than it grows
        caught = running & ~self.up.none & (self.sent >= np.minimum(amin, 1.0) * self.gb - _TOL * self.gb)
        binding = np.isclose(allow, amin[:, None], rtol=0, atol=1e-12) & self.up.present
        self._settle_rates(running, caught, binding)
        allow, slope = self._bounds()
        self._advance(self._time_to_next_event(running, caught, allow, slope))

    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per (flow, upstream): the fraction of the flow's bytes it may have sent by now and
        how fast that grows (fraction per second)."""
        upc, has_up, state, now = self.up.index, self.up.present, self.state, self.t
        frac_u = self.sent[upc] / self.gb[upc]
        done_u = state[upc] == DONE
        landed_u = done_u & (self.delivered[upc] <= now + 1e-15)
        allow = np.where(landed_u, 1.0, frac_u - self.up.lag)
        allow = np.where(done_u & ~landed_u, np.minimum(allow, 1.0 - self.up.lag), allow)
        slope = np.where(done_u, 0.0, self.rate[upc] / self.gb[upc])
        allow = np.where(has_up, allow, INF)
        slope = np.where(has_up, slope, INF)
        return allow, slope

    def _start_waiting(self, amin: np.ndarray) -> None:
        """Waiting flows whose upstreams all have a first bucket: ready once it has landed, one
        link latency after it was sent (an upstream whose last bucket has landed already paid it)."""
        upc, has_up = self.up.index, self.up.present
        go = (self.state == WAITING) & (amin >= -1e-12)
        if go.any():
            landed = (self.state[upc] == DONE) & (self.delivered[upc] <= self.t + 1e-15)
            up_lat = np.where(has_up & ~landed, self.latency[upc], 0.0).max(axis=1)
            self.ready_at[go] = self.t + up_lat[go]
            self.state[go] = READY

    def _start_ready(self) -> None:
        start = (self.state == READY) & (self.ready_at <= self.t + 1e-15)
        self.state[start] = RUNNING

    def _settle_rates(self, running: np.ndarray, caught: np.ndarray, binding: np.ndarray) -> None:
        """Max-min rates, a caught-up flow capped by the rate of the upstream that binds it;
        iterated to a fixed point (upstream rates depend on theirs)."""
        upc, has_up, gb = self.up.index, self.up.present, self.gb
        for _ in range(64):
            bslope = np.where(binding, np.where(has_up, self.rate[upc] / gb[upc], INF), INF)
            bslope = np.where(binding & (self.state[upc] == DONE), 0.0, bslope)
            track = bslope.min(axis=1) * gb
            caps = np.where(caught, np.minimum(self.own_cap, track), self.own_cap)
            new_rate = max_min_rates(running, caps, self.uses.flow, self.uses.resource, self.uses.capacity, self.uses.weight)
            converged = np.allclose(new_rate, self.rate, rtol=1e-9, atol=1e-12)
            self.rate = new_rate
            if converged:
                break

    def _time_to_next_event(self, running: np.ndarray, caught: np.ndarray, allow: np.ndarray, slope: np.ndarray) -> float:
        moving = running & (self.rate > 0)
        dt = min(
            self._until_a_flow_finishes(moving),
            self._until_a_free_flow_catches_up(moving & ~caught & ~self.up.none, allow, slope),
            self._until_another_bound_binds(caught, allow, slope),
            self._until_an_upstream_has_a_first_bucket(allow, slope),
            self._until_a_flow_is_ready(),
            self._until_a_last_bucket_lands(),
        )
        if not math.isfinite(dt):
            stuck = [self.flows[i].name for i in np.flatnonzero(self.state != DONE)[:5]]
            raise RuntimeError(f"simulation stalled at t={self.t:.6g} s; flows waiting: {stuck}")
        return max(dt, 0.0)

    def _until_a_flow_finishes(self, moving: np.ndarray) -> float:
        if not moving.any():
            return INF
        return float(np.min((self.gb[moving] - self.sent[moving]) / self.rate[moving]))

    def _until_a_free_flow_catches_up(self, free: np.ndarray, allow: np.ndarray, slope: np.ndarray) -> float:
        """A flow running below its bounds reaching one of them."""
        if not free.any():
            return INF
        gap = allow[free] * self.gb[free, None] - self.sent[free, None]
        closing = self.rate[free, None] - slope[free] * self.gb[free, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            when = np.where((closing > 1e-15) & self.up.present[free], np.maximum(gap, 0.0) / closing, INF)
        return float(when.min())

    def _until_another_bound_binds(self, caught: np.ndarray, allow: np.ndarray, slope: np.ndarray) -> float:
        """A caught-up flow's binding bound overtaken by another, slower-growing one."""
        rows = caught & (self.up.present.sum(axis=1) > 1)
        if not rows.any():
            return INF
        a = allow[rows]
        s = slope[rows]
        amin_r = a.min(axis=1, keepdims=True)
        smin_r = np.where(np.isclose(a, amin_r, atol=1e-12), s, INF).min(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            when = np.where((smin_r - s > 1e-15) & (a > amin_r + 1e-12), (a - amin_r) / (smin_r - s), INF)
        return float(when.min())

    def _until_an_upstream_has_a_first_bucket(self, allow: np.ndarray, slope: np.ndarray) -> float:
        """A waiting flow's upstreams all holding its first bucket."""
        w = self.state == WAITING
        if not w.any():
            return INF
        need = self.up.present[w] & (allow[w] < -1e-12)
        with np.errstate(divide="ignore", invalid="ignore"):
            when = np.where(need & (slope[w] > 0), -allow[w] / slope[w], np.where(need, INF, 0.0))
        return float(when.max(axis=1).min())

    def _until_a_flow_is_ready(self) -> float:
        pending = (self.state == READY) & np.isfinite(self.ready_at)
        return float(np.min(self.ready_at[pending] - self.t)) if pending.any() else INF

    def _until_a_last_bucket_lands(self) -> float:
        landing = (self.state == DONE) & (self.delivered > self.t + 1e-15)
        return float(np.min(self.delivered[landing] - self.t)) if landing.any() else INF

    def _advance(self, dt: float) -> None:
        """Every running flow sends at its rate for `dt`; the ones that sent everything are done."""
        gb = self.gb
        sent = np.minimum(self.sent + self.rate * dt, gb)
        self.t += dt
        self.sent = sent
        # a tracking flow never overshoots its bound (floating error)
        allow, _ = self._bounds()
        cap_bytes = np.minimum(allow.min(axis=1), 1.0) * gb
        sent = np.where(self.up.none, sent, np.minimum(sent, np.maximum(cap_bytes, 0.0)))
        just_done = (self.state == RUNNING) & (sent >= gb * (1 - 1e-12))
        sent[just_done] = gb[just_done]
        self.sent = sent
        self.finished[just_done] = self.t
        self.delivered[just_done] = self.t + self.latency[just_done]
        self.state[just_done] = DONE
        self.rate[just_done] = 0.0
