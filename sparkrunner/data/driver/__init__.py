"""The data path on the driver: `materialize` (Parquet once, cached by plan and inputs) and `stream` (a broker
that hands Spark's partitions to the ranks as they are computed). Nothing here runs in a rank."""
