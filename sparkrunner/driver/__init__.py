"""Code that runs on the driver only: the run's controller and its policies, supervision, failure attribution
and zygotes; each attempt's server (its channel, rank bookkeeping, the driver halves of output, stacks and the
address exchange) in `driver/attempt/`. Never imported by rank-side code."""
