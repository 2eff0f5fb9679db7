"""Starts a one-host network-namespace cluster (a master, no worker) and hangs, for a test that kills this
process as a killed test run would be: it prints ``cluster OWNER NAMESPACE`` once the cluster is up."""

import time

from tests.scenarios.cluster.netns_cluster import NetnsCluster

cluster = NetnsCluster(1, 1, variant=9)
cluster.start(workers=0)
print("cluster", cluster._owner, cluster.namespaces[0], flush=True)
time.sleep(600)  # stands for a test run that hangs; the test kills this process
