"""The downloader side: the middleware, how answers and errors are read, re-queues, exit IPs, Splash and browsers."""
