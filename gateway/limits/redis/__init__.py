"""The limits kept in Redis, shared by every process: the limiter with its keys, and its Lua scripts."""
