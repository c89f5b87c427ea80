"""Two-stream sliding-window joins over out-of-order streams (QJoin and the K-slack family).

Each operator exists twice: a tuple-at-a-time *reference* that follows the papers literally
(buffers, expiry, release), and a vectorised *set form* over a whole arrival sequence that must
produce exactly the same result pairs, emission points and buffer sizes. The Spark stages compute
the set form on micro-batches; the differential tests hold all three together.
"""
