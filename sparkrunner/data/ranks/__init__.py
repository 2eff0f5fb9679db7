"""The data path in a rank: its shard read from Parquet or from the stream, batched, shuffled by (seed, epoch),
prefetched within a memory bound, and adapted to torch or tf.data. Never imports driver-side code."""
