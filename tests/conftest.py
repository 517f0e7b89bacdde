"""Settings for every test in this process."""

import gateway.logs

# loggers follow the configuration of the moment they log in, so `capture_logs` sees every one
# whatever an earlier test configured (gateway.logs.CACHE_LOGGERS)
gateway.logs.CACHE_LOGGERS = False
