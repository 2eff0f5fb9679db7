"""The data path in Spark's own tasks: the feeders that send a stream's partitions to the ranks."""
