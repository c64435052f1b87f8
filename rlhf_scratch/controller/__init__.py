"""verl's single controller, from scratch on Ray: one driver process runs the RLHF dataflow as
plain calls, each call going to a group of worker processes (docs/distributed.md#the-single-controller).

    protocol.py      DataProto: the batch that travels (tensors, per-row texts, meta_info)
    decorator.py     @register(dispatch_mode=Dispatch.ONE_TO_ALL | DP_COMPUTE_PROTO | ..., blocking=...): how a call is split
    worker_group.py  Worker, RayResourcePool, RayClassWithInitArgs, RayWorkerGroup, create_colocated_worker_cls,
                     DataProtoFuture (a call not waited for)
    workers.py       the roles over the package's own pieces: ActorRolloutRefWorker, CriticWorker, RewardModelWorker,
                     RolloutRefWorker (--max-staleness 1's rollout pool)
    ray_trainer.py   RayPPOTrainer.fit: generate → ref → log π_old → values → scores → advantages (driver) → update
                     (with --max-staleness 1 the next phase's generation overlaps the update)

A layer above the trainers: it imports them (a worker holds the in-process trainer and calls its
own functions), and nothing below imports it.
"""
