"""A VERL checkpoint engine for host memory: the trainer's weights to separate rollout workers over
TCP.

VERL's asynchronous recipes (one-step-off, fully async) train and roll out on separate devices and
move the weights with a checkpoint engine; 0.9.1's are NCCL (cupy, CUDA buffers), HCCL, NIXL,
Mooncake and Kimi, none of which runs on CPU cores
(verl/checkpoint_engine/nccl_checkpoint_engine.py:23 imports cupy). This one implements VERL's
CheckpointEngine interface (verl/checkpoint_engine/base.py:116) with ZeroMQ: the trainer's rank 0
binds a ROUTER socket, each rollout worker connects a DEALER, says it is ready, and receives every
bucket (its tensors' metadata and bytes) in order; the trainer's other ranks only walk the weight
generator (gathering a weight is collective over them). Registered as backend "cpu"
(actor_rollout_ref.rollout.checkpoint_engine.backend=cpu).
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass

import ray
import torch
import zmq
from verl.checkpoint_engine.base import (CheckpointEngine, CheckpointEngineRegistry,
                                         merge_weight_chunks,
                                         split_weight_chunks)
from verl.utils.net_utils import get_free_port

NAME = "cpu"


@dataclass
class Master:
    """Where the trainer's rank 0 listens."""

    ip: str
    port: int


@CheckpointEngineRegistry.register(NAME)
class HostCheckpointEngine(CheckpointEngine):
    """Weights from the trainer's rank 0 to every rollout worker in buckets of `bucket_size`
    bytes."""

    def __init__(self, bucket_size: int, is_master: bool = False, **_ignored):
        self.bucket_size, self.is_master = bucket_size, is_master
        self.rank, self.world_size, self.socket = None, None, None
        self.context = zmq.Context.instance()
        if is_master:
            self.ip = ray.util.get_node_ip_address().strip("[]")
            self.port, _ = get_free_port(self.ip)
            self.socket = self.context.socket(zmq.ROUTER)
            self.socket.bind(f"tcp://{self.ip}:{self.port}")

    def prepare(self) -> dict:
        return {"master": Master(self.ip, self.port) if self.is_master else None}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int,
                       metadata: list[dict]):
        """Rank 0 of the trainer sends (rank 0); its other ranks sit out (-1); the rollout workers
        receive."""
        master = metadata[0]["master"]
        world = 1 + rollout_world_size
        actor = {"rank": [0] + [-1] * (actor_wg_world_size - 1),
                 "world_size": [world] * actor_wg_world_size,
                 "master": [master] * actor_wg_world_size}
        rollout = {"rank": list(range(1, world)), "world_size": [world] * rollout_world_size,
                   "master": [master] * rollout_world_size}
        return actor, rollout

    def init_process_group(self, rank: int, world_size: int, master: Master):
        self.rank, self.world_size = rank, world_size
        if rank > 0 and self.socket is None:
            self.socket = self.context.socket(zmq.DEALER)
            self.socket.connect(f"tcp://{master.ip}:{master.port}")

    def finalize(self):
        """Nothing held between updates: the sockets stay for the next one."""

    @torch.no_grad()
    async def send_weights(self, weights, global_steps: int | None = None):
        # not the sender: the generator is collective, walk it
        if self.rank is None or self.rank < 0:
            async for _ in split_weight_chunks(weights, self.bucket_size, meta_only=True):
                pass
            return
        # each says "ready"
        readers = [self.socket.recv_multipart()[0] for _ in range(self.world_size - 1)]
        bucket, metas, size = bytearray(), [], 0
        async for meta, chunk in split_weight_chunks(weights, self.bucket_size):
            if size + meta.chunk_size > self.bucket_size and metas:
                self._send(readers, metas, bucket, last=False)
                bucket, metas, size = bytearray(), [], 0
            meta.offset = size
            metas.append(meta)
            bucket += chunk.contiguous().view(torch.uint8).numpy().tobytes()
            size += meta.chunk_size
        self._send(readers, metas, bucket, last=True)

    def _send(self, readers: list[bytes], metas: list, bucket: bytearray, last: bool) -> None:
        header = pickle.dumps({"metas": metas, "is_last": last})
        for reader in readers:
            self.socket.send_multipart([reader, header, bytes(bucket)], copy=False)

    @torch.no_grad()
    async def receive_weights(self, global_steps: int | None = None):
        async for name, weight in merge_weight_chunks(self._chunks(), self.bucket_size):
            yield name, weight

    async def _chunks(self):
        self.socket.send(b"ready")
        last = False
        while not last:
            header, payload = self.socket.recv_multipart()
            head = pickle.loads(header)
            data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
            for meta in head["metas"]:
                yield meta, data[meta.offset: meta.offset + meta.chunk_size]
            last = head["is_last"]
