"""Code that runs on the driver only: the run's controller, each attempt's channel (channel server, rank
bookkeeping), failure attribution, and the driver halves of output, stacks and the address exchange.
Never imported by rank-side code."""
