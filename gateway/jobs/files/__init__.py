"""The Files API's files: their rows, their bytes (the database or S3), and the bound on uploads and downloads at once."""
