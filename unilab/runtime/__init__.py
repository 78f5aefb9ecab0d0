"""unilab.runtime: worker processes, the shared-memory ring buffer, the weight store.

Learner side: `shm.SegmentOwner` (owns and unlinks every segment), `ring.RingBuffer`
(a `source.ChunkSource`), `weights.WeightStore.create`, `supervisor.Supervisor`,
`signals.install_signal_handlers` / `signals.StopSignal`.
Worker side: `worker_base.WorkerContext` (ring writer, weights, heartbeat, stop).
Test and benchmark driver: `synthetic.synthetic_worker_main`.
Why it is built this way: docs/decisions/0004-shared-memory-runtime.md.

Nothing is re-exported here, so a worker imports only the modules it uses.
"""
