"""Warm sessions, the driver side: ranks kept alive between runs (`session.WarmSession`), a pool of sessions
that concurrent trials share (`pool.SessionPool`), the long-lived ranks and the placement that serves each run
on them (`live_ranks`), and the channel server they wait on between runs (`home`). The rank side is
`sparkrunner.ranks.warm`."""
