"""A rollout worker: its own model copy behind the configured backend (built-in sampler or vLLM).

It runs in a process pinned to its device or in a Ray actor (engines/hosts.py); weights arrive
through shared memory (local) or the Ray object store, finished groups leave through `emit`, sealed
(engines/rollout/base.py SealedGroup).
"""
from __future__ import annotations

from rlbench.core import hooks
from rlbench.core.components import BACKENDS, evaluation_backend
from rlbench.core.devices import device as dev
from rlbench.core.record import lifecycle, progress
from rlbench.core.record.lifecycle import Phase
from rlbench.core.record.profiling import from_env
from rlbench.core.record.stages import Recorder, Stage
from rlbench.engines.model.weights import build_model, initial_state, load_state
from rlbench.engines.ray_util import fetch
from rlbench.engines.rollout.backends import BUILDERS
from rlbench.engines.rollout.base import SealedGroup

# the evaluation's sampler, the same for every cell
EVALUATION = {"backend": evaluation_backend().name}


def backend_spec(cfg) -> dict:
    """The config's rollout backend as a small JSON-able dict (what worker processes receive): its
    name, the run's dtype, seed and engine.compile, and the backend's own options
    (core/components.py)."""
    backend = BACKENDS[cfg.rollout.backend]
    return {"backend": backend.name, "dtype": cfg.model.dtype, "seed": cfg.run.seed,
            "compile": cfg.engine.compile,
            **backend.read(cfg).model_dump()}


def build_backend(spec: dict, model_config, eos_token_id: int, max_num_seqs: int, device,
                  make_model,
                  state: dict | None = None, own_process_group: bool = False):
    """The rollout backend `spec` names, by its registered `build` (engines/rollout/backends.py).
    make_model() -> the HF model the built-in sampler will own; vLLM starts from the config and
    `state` (name -> tensor: the weights it loads from an HF directory; None: dummy weights until
    load_weights); own_process_group: this process joins a torch.distributed group of its own
    (colocated ranks), so vLLM's engine core must run in a child process."""
    build = BUILDERS[spec.get("backend", EVALUATION["backend"])]
    return build(spec, model_config, eos_token_id, max_num_seqs, device, make_model, state,
                 own_process_group=own_process_group)


class RolloutWorker:
    """A rollout worker (in a pinned process or a Ray actor, engines/hosts.py): a model copy behind
    the configured backend; hands on each group the moment its G samples are done (`emit`)."""

    def __init__(self, slot, model_config, weights, shared: dict | None, eos_token_id: int,
                 max_num_seqs: int,
                 spec: dict, t0: float, mailbox=None, gate=None, *, emit):
        """weights: the initial weights (engines/model/weights.py: the run's weight file, or a Ray
        object); shared: the shared-memory block the published weights arrive in (local processes;
        None on Ray). mailbox: partial rollout's WeightMailbox (engines/rollout/mailbox.py): new
        weights are taken at the next token boundary, mid-generation; None: only at "sync" requests,
        between batches. gate: the RolloutGate of a schedule that runs ahead
        (engines/rollout/gate.py): while it is closed this worker waits at its next step boundary or
        request; None: never held."""
        device = dev.resolve(slot.kind, slot.index)
        self.name, self.emit = slot.worker, emit
        self.shared = shared
        self.mailbox, self.gate = mailbox, gate
        with lifecycle.phase(Phase.WEIGHTS):
            state = initial_state(weights)
            self.sampler = build_backend(spec, model_config, eos_token_id, max_num_seqs, device,
                                         lambda: build_model(model_config, device, state), state)
            if mailbox is not None:
                self.sampler.resume_kv = mailbox.resume_kv
            # the model holds them already: a copy onto itself does nothing
            self.sampler.load_weights(state, 0)
        self.rec = Recorder(slot.worker, t0, device=device, devices=1)
        self.prof = from_env(slot.worker, device.type)  # a no-op unless the run asked for --profile

    def sync(self, version: int, iteration: int, weights=None) -> None:
        """Load the published weights (this process's shared memory, or the given Ray object)."""
        self._hold()

        if self.mailbox is not None:  # partial rollout: whatever shared memory holds now
            self._take_posted(iteration)
            return
        if weights is not None:  # Ray: the bytes first cross from the node that published them
            with self.rec.stage(Stage.WEIGHT_TRANSFER, iteration):
                weights = fetch(weights)
        with self.rec.stage(Stage.WEIGHT_SYNC, iteration):
            self.sampler.load_weights(load_state(self.shared if weights is None else weights),
                                      version)

    def _take_posted(self, iteration: int) -> None:
        """Partial rollout, between batches: load the posted weights under the mailbox lock, unless
        taken already mid-generation."""
        if self.sampler.version >= self.mailbox.version:
            return
        with self.rec.stage(Stage.WEIGHT_SYNC, iteration), self.mailbox.lock:
            self.sampler.load_weights(load_state(self.shared), self.mailbox.version)

    def _poll(self):
        """Partial rollout, at a token boundary: newer weights posted -> copy them in now; -> (None,
        their version) for the sampler, which then continues its sequences under them (None: nothing
        new)."""
        if self.mailbox.version <= self.sampler.version:
            return None
        with self.mailbox.lock:
            version = self.mailbox.version
            self.sampler.load_weights(load_state(self.shared), version)
        return None, version

    def generate(self, iteration: int, requests, sampling) -> tuple[list, dict]:
        """-> (stage events since the last call, sampler stats); every group is emitted as it
        finishes."""
        self._hold()
        if self.mailbox is not None:
            self._take_posted(iteration)  # posted while this worker was idle
        # only the built-in sampler polls
        extra = {"poll": self._poll} if self.mailbox is not None else {}
        if self.gate is not None:
            extra["hold"] = self._hold
        with self.rec.stage(Stage.ROLLOUT, iteration):
            # inside the stage: a planted hang is reported as a hang in rollout
            hooks.call("iteration", iteration, "rollout")
            self.sampler.generate(requests, sampling,
                                  on_group=lambda g: self.emit(SealedGroup.seal(g)), **extra)
        self.prof.step()
        return self.rec.drain(), dict(self.sampler.last_stats)

    def _hold(self) -> bool:
        """Wait here while the schedule holds its rollout workers between iterations
        (engines/rollout/gate.py), outside any stage; -> whether it waited (the backend then
        restarts its step clock)."""
        if self.gate is None or not self.gate.closed:
            return False

        self.rec.suspend(lambda: self.gate.wait_open(alive=progress.beat))
        return True

    def evaluate(self, requests, sampling) -> list:
        return self.sampler.generate(requests, sampling)

    def close(self) -> None:
        self.prof.close()
        close = getattr(self.sampler, "close", None)
        if close is not None:
            close()
