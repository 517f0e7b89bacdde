"""Usage read back: the usage reports, a batch's totals and price, and its measured throughput."""
