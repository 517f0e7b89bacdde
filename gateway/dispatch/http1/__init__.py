"""The upstream HTTP/1.1 client: a connection pool with O(1) checkout, and one connection's request and response."""
