"""This machine, as the loaders use it: processes by pid (:mod:`.processes`), a free port on
loopback (:mod:`.ports`), glibc's malloc in processes that stream shards (:mod:`.memory`), an
ordered map in threads (:mod:`.threads`), the per-stage clocks (:mod:`.timing`) and a
function run once a module is imported (:mod:`.imports`).
"""
