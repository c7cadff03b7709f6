"""Settings of the API load benchmark's portal (bench/api_load.py): the product's, plus one bare endpoint."""

from portal.settings import *  # noqa: F403

ROOT_URLCONF = "bench.api_urls"
