"""The checkpoint folder of a run, as both sides see it: the driver opens it (and proves every rank sees the
same folder), ranks write and list their checkpoints in it. The attempt loop and elastic size are the driver's
(`sparkrunner.driver.attempts`, `sparkrunner.driver.elastic`); saving and loading are the ranks'
(`sparkrunner.ranks.checkpoints`)."""
