"""Spark ML scoring in Spark's Python workers: the model loaded once per worker, batches scored as they come."""
