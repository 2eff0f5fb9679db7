"""Code that runs inside a Spark barrier task (an executor's Python worker): the task body, its half of the
address exchange, and its report to the driver. Never imports driver-side code."""
