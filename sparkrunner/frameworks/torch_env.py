"""torch.distributed wiring: the `env://` variables that `init_process_group` reads."""

from __future__ import annotations

from sparkrunner.topology import PortUse, Topology


def environment(topology: Topology, index: int) -> dict[str, str]:
    master = topology.peers[0]
    return {
        "MASTER_ADDR": master.host,
        "MASTER_PORT": str(master.ports[PortUse.TORCH_MASTER]),
        "RANK": str(index),
        "WORLD_SIZE": str(topology.size),
        "LOCAL_RANK": str(topology.local_rank(index)),
        "LOCAL_WORLD_SIZE": str(topology.local_world_size(index)),
        "GROUP_RANK": str(topology.cross_rank(index)),
        "NODE_RANK": str(topology.cross_rank(index)),
    }
