"""Permits held in Redis, so every process admits against one count per replica: the bank and its Lua scripts."""
