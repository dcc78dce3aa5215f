"""A pool of rollout worker processes (the rollout devices of periodic-async).

Weights travel through shared memory: the trainer copies its parameters into tensors shared with
every worker, then sends a small "sync" message; nothing large is pickled per iteration.
"""
from __future__ import annotations

import queue
import time

from rlbench.errors import WorkerError


class ProcessRolloutPool:
    def __init__(self, model, eos_token_id: int, max_num_seqs: int, devices: int, device_kind: str,
                 t0: float, start_timeout_s: float = 300.0):
        import torch
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.shared = {n: p.detach().to("cpu").clone().share_memory_() for n, p in model.named_parameters()}
        self.out_q = ctx.Queue()
        self.names = ["rollout0"]
        self.req_qs = {n: ctx.Queue() for n in self.names}
        self.procs = {}
        for n in self.names:
            self.procs[n] = ctx.Process(
                target=_entry, daemon=True, name=f"rlbench-{n}",
                args=(n, model.config, self.shared, eos_token_id, max_num_seqs, devices, device_kind, t0,
                      self.req_qs[n], self.out_q))
            self.procs[n].start()
        ready = set()
        while len(ready) < len(self.names):
            msg = self._get(start_timeout_s, "starting")
            if msg[0] != "ready":
                raise WorkerError(f"rollout worker sent {msg[0]} while starting")
            ready.add(msg[1])
        self._torch = torch

    def _get(self, timeout_s: float, doing: str):
        """Next message from any worker; a dead worker or a timeout becomes a WorkerError."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg = self.out_q.get(timeout=0.2)
            except queue.Empty:
                dead = [n for n, p in self.procs.items() if not p.is_alive()]
                if dead:
                    codes = {n: self.procs[n].exitcode for n in dead}
                    raise WorkerError(f"rollout worker {', '.join(dead)} died while {doing} (exit codes {codes})")
                if time.monotonic() > deadline:
                    raise WorkerError(f"no answer from the rollout workers for {timeout_s:.0f}s while {doing}")
                continue
            if msg[0] == "error":
                raise WorkerError(f"rollout worker {msg[1]} failed while {doing}:\n{msg[2]}")
            return msg

    def publish(self, weights: dict, version: int, iteration: int) -> None:
        """Copy the trainer's weights into shared memory and tell every worker to load them."""
        with self._torch.no_grad():
            for n, t in weights.items():
                self.shared[n].copy_(t)
        for q in self.req_qs.values():
            q.put(("sync", version, iteration))

    def produce(self, iteration: int, requests, sampling, groups: queue.Queue, timeout_s: float) -> list:
        """Producer thread body: dispatch the iteration's prompts, forward each finished group.

        Returns (through the queue's end marker) the workers' events and stats. Errors go on the queue
        so the consumer raises them.
        """
        try:
            shards = {n: requests[i::len(self.names)] for i, n in enumerate(self.names)}
            for n, reqs in shards.items():
                self.req_qs[n].put(("generate", iteration, reqs, sampling))
            done, events, stats = set(), [], []
            while len(done) < len(self.names):
                msg = self._get(timeout_s, f"generating iteration {iteration}")
                if msg[0] == "group":
                    groups.put(msg[2])
                elif msg[0] == "done":
                    done.add(msg[1])
                    events += msg[3]
                    stats.append(msg[4])
            groups.put(("end", events, stats))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer thread
            groups.put(e)

    def close(self, timeout_s: float = 5.0) -> None:
        for q in self.req_qs.values():
            try:
                q.put(("stop",))
            except (ValueError, OSError):
                pass
        for p in self.procs.values():
            p.join(timeout_s)
            if p.is_alive():
                p.terminate()
                p.join(timeout_s)


def _entry(*args):
    from rlbench.engines.rollout.worker import rollout_worker_main

    rollout_worker_main(*args)
