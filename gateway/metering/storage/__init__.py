"""Usage kept: the durable buffer (in-process or a Redis stream), the writer that empties it into the database, and the month partitions and their retention."""
