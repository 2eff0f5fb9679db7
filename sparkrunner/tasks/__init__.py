"""Code that runs inside a Spark barrier task (an executor's Python worker): the task body, its half of the
address exchange, its report to the driver, each launcher's side in the task (`launchers.TASK_SIDES`), mpirun's
task and remote-start agents, and the client of the executor's zygote. Never imports driver-side code."""
