"""Driver-side observers that follow a run without the runner knowing them: progress, MLflow tracking, timings."""
