"""Code that every process of a run uses (driver, barrier tasks and ranks alike) and that belongs to no one
subsystem: the environment variables' names, the checks of single values, the lazy import machinery of the public
packages, the optional dependencies' extras, and the checkpoint folder. Nothing here imports driver, task or rank
code."""
