"""Redis as the gateway uses it: the process's redis-py client and the group commit of the
commands on the request path."""
