"""The driver's server of one attempt: its channel (`AttemptChannel`), what each rank reported, the driver halves
of the address exchange, barriers, task reports, rank output and stacks. The run's control (controller, policies,
supervision) is in `sparkrunner.driver`."""
