"""Holds a lease on a materialize cache entry as another process would: ``cache_lease_holder.py CACHE KEY``
takes the lease, prints ``leased``, and exits (leaving its lease file behind) when its stdin closes."""

import sys

from sparkrunner.common import storage
from sparkrunner.data.driver import cache_leases

cache, key = sys.argv[1], sys.argv[2]
cache_leases.take(storage.resolve(cache), key)
print("leased", flush=True)
sys.stdin.read()
