"""The data path in Spark's Python workers (ordinary tasks, not the barrier stage's): the feeders that send a
stream's partitions to the ranks."""
