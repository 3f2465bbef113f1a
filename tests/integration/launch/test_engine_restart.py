"""An embedded engine killed mid-rollout (its actor's process, by pid) is restarted by Ray on its
URL, given the published weights before it serves again, and the run goes on to its last step."""

from __future__ import annotations

from tests.integration.launch.launch_support import scalars
from tests.integration.launch.test_stopping import SLOW, Run


def test_a_killed_embedded_engine_is_restarted_and_the_run_finishes(tmp_path):
    run = Run(*SLOW, f"run.dir={tmp_path}")
    run.wait_for("step 1/")
    engine = run.actor("EmbeddedEngineActor")
    engine.kill()
    code, _ = run.finish(timeout=300)
    assert code == 0, run.output[-4000:]
    said = run.output
    assert "stopped answering" in said and "answers again after" in said, said[-4000:]
    assert "pushing weights of version 1 to restarted engine(s)" in said, said[-4000:]
    logged = scalars(tmp_path)
    assert sorted(logged["rollout/reward_mean"]) == [1, 2, 3, 4]
    assert logged["faults/engine_restarts"][4] == 1.0
    # Every step trained on tokens of the published weights, never the restarted engine's base model:
    # none older than the step's version, and the trainer's log-probs match the engine's.
    assert set(logged["async/stale_token_frac"].values()) == {0.0}
    assert max(logged["train/mismatch_k3_kl"].values()) < 1e-6
