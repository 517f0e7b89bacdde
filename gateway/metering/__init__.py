"""Usage metering: the usage event, its exact price, where it is kept (storage/) and read back (reports/)."""
